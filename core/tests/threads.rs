//! Many threads hammering one limiter at one fixed instant: the total admitted is
//! exactly what a sequential caller would get — nothing more (no over-admission),
//! nothing less (no lost update) — and the compound limiter never lets any part
//! exceed its own limit.

use std::sync::Barrier;
use std::sync::atomic::{AtomicU64, Ordering};
use std::thread;

use sluicegate::{
    Algorithm, Compound, Decision, Fixed, FixedWindow, Gcra, InsufficientCapacity, LeakyBucket,
    Quota, Shaper, Sliding, SlidingLog, SlidingWindow, TokenBucket,
};

const THREADS: usize = 6;
const ATTEMPTS: usize = 400;
/// A fixed instant in the middle of a window.
const NOW: u64 = 7_500_000_000;

/// Runs `check` from every thread at once; returns the units admitted in total.
fn hammer(check: impl Fn() -> (bool, u64) + Sync) -> u64 {
    let start = Barrier::new(THREADS);
    thread::scope(|s| {
        let handles: Vec<_> = (0..THREADS)
            .map(|_| {
                s.spawn(|| {
                    start.wait();
                    (0..ATTEMPTS)
                        .map(|_| match check() {
                            (true, n) => n,
                            (false, _) => 0,
                        })
                        .sum::<u64>()
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).sum()
    })
}

fn one(d: Decision) -> (bool, u64) {
    (d.allowed, 1)
}

#[test]
fn every_limiter_admits_exactly_its_bound() {
    let q = Quota::per_minute(1_000).burst(500);
    let tb = TokenBucket::with_clock(q, ()).unwrap();
    assert_eq!(hammer(|| one(tb.check_at(NOW))), 500);
    let lb = LeakyBucket::with_clock(q, ()).unwrap();
    assert_eq!(hammer(|| one(lb.check_at(NOW))), 500);
    assert_eq!(lb.level_at(NOW), 500);

    let fw = FixedWindow::with_clock(Quota::per_second(700), ()).unwrap();
    assert_eq!(hammer(|| one(fw.check_at(NOW))), 700);
    let sw = SlidingWindow::with_clock(Quota::per_second(700), ()).unwrap();
    assert_eq!(hammer(|| one(sw.check_at(NOW))), 700);
    let log = SlidingLog::with_clock(Quota::per_second(700), ()).unwrap();
    assert_eq!(hammer(|| one(log.check_at(NOW))), 700);

    // 100 back-to-back, then one per 60 ms for up to 6 s: 100 more.
    let sh = Shaper::with_clock(q.burst(100), 6_000_000_000, ()).unwrap();
    assert_eq!(hammer(|| one(*sh.reserve_at(NOW).decision())), 200);
}

/// A limiter's cost-`n` check at `NOW`, callable from every thread.
type CheckN<'a> = dyn Fn(u64) -> Result<Decision, InsufficientCapacity> + Sync + 'a;

/// Units `check` admits, called from this thread until it denies.
fn drain(check: impl Fn() -> bool) -> u64 {
    (0..).take_while(|_| check()).count() as u64
}

/// [`hammer`]s `check`, then tops up sequentially with `top_up` (one unit a call):
/// the racers admitted at most `bound`, and with the top-up exactly `bound`.
fn race_to_bound(bound: u64, check: impl Fn() -> (bool, u64) + Sync, top_up: impl Fn() -> bool) {
    let got = hammer(check);
    let top_up = drain(top_up);
    assert!(got <= bound && got + top_up == bound, "{got} + {top_up}");
}

#[test]
fn mixed_costs_never_exceed_the_bound_and_lose_nothing() {
    // Costs 1..=3: the total may stop short of the bound by less than the largest
    // cost; topping up with single units afterwards reaches it exactly.
    let counter = AtomicU64::new(0);
    let mixed = |check_n: &CheckN| {
        let n = 1 + counter.fetch_add(1, Ordering::Relaxed) % 3;
        (check_n(n).unwrap().allowed, n)
    };

    let tb = TokenBucket::with_clock(Quota::per_minute(1_000).burst(500), ()).unwrap();
    let fw = FixedWindow::with_clock(Quota::per_second(700), ()).unwrap();
    let sw = SlidingWindow::with_clock(Quota::per_second(700), ()).unwrap();
    let log = SlidingLog::with_clock(Quota::per_second(700), ()).unwrap();
    // Each limiter's bound, its cost-n check and its one-unit check.
    let limiters: [(u64, &CheckN, &dyn Fn() -> bool); 4] = [
        (500, &|n| tb.check_n_at(n, NOW), &|| {
            tb.check_at(NOW).allowed
        }),
        (700, &|n| fw.check_n_at(n, NOW), &|| {
            fw.check_at(NOW).allowed
        }),
        (700, &|n| sw.check_n_at(n, NOW), &|| {
            sw.check_at(NOW).allowed
        }),
        (700, &|n| log.check_n_at(n, NOW), &|| {
            log.check_at(NOW).allowed
        }),
    ];
    for (bound, check_n, check_one) in limiters {
        race_to_bound(bound, || mixed(check_n), check_one);
    }
}

/// Races one-unit checks on the compound of `quotas`, whose tighter part binds at
/// `bound` (see [`race_to_bound`]); then lifts part `lift` to `lifted`: the looser
/// parts must hold exactly `rest` more, so every tentative charge of a lost race
/// was given back.
fn tight_then_lifted<A: Algorithm, const N: usize>(
    quotas: [Quota; N],
    bound: u64,
    (lift, lifted): (usize, Quota),
    rest: u64,
) {
    let c = Compound::<A, N, ()>::with_clock(quotas, ()).unwrap();
    race_to_bound(bound, || one(c.check_at(NOW)), || c.check_at(NOW).allowed);
    c.set_quota(lift, &lifted).unwrap();
    assert_eq!(drain(|| c.check_at(NOW).allowed), rest, "{quotas:?}");
}

/// A compound whose tighter part binds: the racing threads never admit more than
/// it allows; after a sequential top-up the total is exactly that part's limit,
/// and the looser part was charged exactly as much (every tentative charge of a
/// lost race was given back).
#[test]
fn compound_never_exceeds_any_part_and_gives_back_every_tentative_charge() {
    // Lift the tight part: the loose one must hold exactly 300 − 200 more.
    tight_then_lifted::<Fixed, 2>(
        [Quota::per_second(300), Quota::per_second(200)],
        200,
        (1, Quota::per_second(1_000)),
        100,
    );
    tight_then_lifted::<Sliding, 2>(
        [Quota::per_second(200), Quota::per_second(300)],
        200,
        (0, Quota::per_second(1_000)),
        100,
    );
    tight_then_lifted::<Gcra, 3>(
        [
            Quota::per_minute(600).burst(250),
            Quota::per_hour(100).burst(150),
            Quota::per_second(1_000),
        ],
        150,
        (1, Quota::per_hour(100).burst(10_000)),
        100,
    );
}
