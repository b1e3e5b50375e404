//! One thread, one limiter: every contender in one criterion group (`direct`), so a
//! single run measures them side by side. Ids are `<contender> <call>` for the
//! anchors and `<algorithm> <call>` for sluicegate's algorithms (all on the `WINDOW`
//! quota); `scripts/bench-table` turns them into the README's table.

use std::hint::black_box;

use criterion::measurement::WallTime;
use criterion::{BenchmarkGroup, Criterion};

use crate::contenders::{self as c, Check, START_NS};

/// Times `k` alone in group `g`.
///
/// Every timed closure in these benches ends in `;` and returns `()`. Criterion
/// 0.5 passes a routine's return value through its own stable `black_box`, a
/// `read_volatile` that copies the answer byte by byte inside the timed loop;
/// after a compare-and-swap that cost 5–7 ns per call here (`floor cas` 9.1 →
/// 2.4 ns, `sluicegate check_n(4)` 15.4 → 10.1 ns on a Zen 4 VM), more than the
/// work measured, and more for a larger answer. `std::hint::black_box` on the
/// answer keeps it observable without the copy.
fn time<K: Check>(g: &mut BenchmarkGroup<'_, WallTime>, id: &str, k: &K) {
    match K::STEP_NS {
        Some(step) => {
            // The time is the caller's: a counter, passed through black_box so the
            // compiler cannot see it advance.
            let mut now = START_NS;
            g.bench_function(id, |b| {
                b.iter(|| {
                    now += step;
                    black_box(k.call(black_box(now)));
                })
            });
        }
        None => {
            g.bench_function(id, |b| {
                b.iter(|| {
                    black_box(k.call(0));
                })
            });
        }
    }
}

pub(crate) fn bench(cr: &mut Criterion) {
    let mut g = cr.benchmark_group("direct");
    // Ours against the anchors (token buckets, `WIDE` quota).
    time(&mut g, "sluicegate check_at", &c::ours_at());
    time(&mut g, "sluicegate check", &c::ours_clock());
    time(&mut g, "sluicegate check_n(4)", &c::ours_n());
    time(&mut g, "governor check", &c::governor());
    time(&mut g, "governor check_n(4)", &c::governor_n());
    time(&mut g, "ratelimit try_wait", &c::ratelimit());
    time(&mut g, "mutex_bucket allow", &c::mutex());
    // Every sluicegate algorithm on the same `WINDOW` quota, time passed in.
    time(&mut g, "token_bucket check_at", &c::token_bucket());
    time(&mut g, "leaky_bucket check_at", &c::leaky_bucket());
    time(&mut g, "fixed_window check_at", &c::fixed_window());
    time(&mut g, "sliding_window check_at", &c::sliding_window());
    time(&mut g, "sliding_log check_at", &c::sliding_log());
    time(&mut g, "shaper reserve_at", &c::shaper());
    time(&mut g, "compound2 check_at", &c::compound2());
    // References for reading the ratios: what one CAS and one clock read cost here.
    time(&mut g, "floor cas", &c::floor_cas());
    time(&mut g, "floor quanta_now", &c::floor_clock());
    g.finish();
}
