//! Two threads on one shared limiter (group `contended_2t`). Each sample starts two
//! threads, which meet at a barrier and then make `iters/2` calls each; the sample's
//! time is the wall time from the first start to the last finish, so the reported
//! time is wall time per call with two cores working: 0.5× the one-thread row would
//! be perfect scaling, 1× no gain, above 1× the threads slow each other down (the
//! cache line holding the state bounces between the cores). Thread start-up is not
//! timed. The ids match the `direct` rows they compare with.

use std::hint::black_box;

use criterion::measurement::WallTime;
use criterion::{BenchmarkGroup, Criterion};

use crate::contenders::{self as c, two_threads, Check, START_NS};

fn time<K: Check>(g: &mut BenchmarkGroup<'_, WallTime>, id: &str, k: &K) {
    let mut base = START_NS;
    g.bench_function(id, |b| {
        b.iter_custom(|iters| {
            two_threads(k, iters, &mut base, |a| {
                black_box(a);
            })
        })
    });
}

pub(crate) fn bench(cr: &mut Criterion) {
    let mut g = cr.benchmark_group("contended_2t");
    time(&mut g, "sluicegate check_at", &c::ours_at());
    time(&mut g, "sluicegate check", &c::ours_clock());
    time(&mut g, "governor check", &c::governor());
    time(&mut g, "ratelimit try_wait", &c::ratelimit());
    time(&mut g, "mutex_bucket allow", &c::mutex());
    g.finish();
}
