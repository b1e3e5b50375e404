//! Many threads hammering one limiter at one fixed instant: the total admitted is
//! exactly what a sequential caller would get — nothing more (no over-admission),
//! nothing less (no lost update) — and the compound limiter never lets any part
//! exceed its own limit.

use std::sync::Barrier;
use std::thread;

use sluicegate::{
    Compound, Decision, Fixed, FixedWindow, Gcra, LeakyBucket, Quota, Shaper, Sliding, SlidingLog,
    SlidingWindow, TokenBucket,
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

#[test]
fn mixed_costs_never_exceed_the_bound_and_lose_nothing() {
    // Costs 1..=3: the total may stop short of the bound by less than the largest
    // cost; topping up with single units afterwards reaches it exactly.
    let cost = |i: &std::sync::atomic::AtomicU64| {
        1 + i.fetch_add(1, std::sync::atomic::Ordering::Relaxed) % 3
    };
    let counter = std::sync::atomic::AtomicU64::new(0);

    let tb = TokenBucket::with_clock(Quota::per_minute(1_000).burst(500), ()).unwrap();
    let got = hammer(|| {
        let n = cost(&counter);
        (tb.check_n_at(n, NOW).unwrap().allowed, n)
    });
    let top_up = (0..).take_while(|_| tb.check_at(NOW).allowed).count() as u64;
    assert!(got <= 500 && got + top_up == 500, "{got} + {top_up}");

    let fw = FixedWindow::with_clock(Quota::per_second(700), ()).unwrap();
    let got = hammer(|| {
        let n = cost(&counter);
        (fw.check_n_at(n, NOW).unwrap().allowed, n)
    });
    let top_up = (0..).take_while(|_| fw.check_at(NOW).allowed).count() as u64;
    assert!(got <= 700 && got + top_up == 700, "{got} + {top_up}");

    let sw = SlidingWindow::with_clock(Quota::per_second(700), ()).unwrap();
    let got = hammer(|| {
        let n = cost(&counter);
        (sw.check_n_at(n, NOW).unwrap().allowed, n)
    });
    let top_up = (0..).take_while(|_| sw.check_at(NOW).allowed).count() as u64;
    assert!(got <= 700 && got + top_up == 700, "{got} + {top_up}");

    let log = SlidingLog::with_clock(Quota::per_second(700), ()).unwrap();
    let got = hammer(|| {
        let n = cost(&counter);
        (log.check_n_at(n, NOW).unwrap().allowed, n)
    });
    let top_up = (0..).take_while(|_| log.check_at(NOW).allowed).count() as u64;
    assert!(got <= 700 && got + top_up == 700, "{got} + {top_up}");
}

/// A compound whose tighter part binds: the racing threads never admit more than
/// it allows; after a sequential top-up the total is exactly that part's limit,
/// and the looser part was charged exactly as much (every tentative charge of a
/// lost race was given back).
#[test]
fn compound_never_exceeds_any_part_and_gives_back_every_tentative_charge() {
    let fixed =
        Compound::<Fixed, 2, ()>::with_clock([Quota::per_second(300), Quota::per_second(200)], ())
            .unwrap();
    let got = hammer(|| one(fixed.check_at(NOW)));
    let top_up = (0..).take_while(|_| fixed.check_at(NOW).allowed).count() as u64;
    assert!(got <= 200 && got + top_up == 200, "{got} + {top_up}");
    // Lift the tight part: the loose one must hold exactly 300 − 200 more.
    fixed.set_quota(1, &Quota::per_second(1_000)).unwrap();
    let rest = (0..).take_while(|_| fixed.check_at(NOW).allowed).count() as u64;
    assert_eq!(rest, 100);

    let sliding = Compound::<Sliding, 2, ()>::with_clock(
        [Quota::per_second(200), Quota::per_second(300)],
        (),
    )
    .unwrap();
    let got = hammer(|| one(sliding.check_at(NOW)));
    let top_up = (0..).take_while(|_| sliding.check_at(NOW).allowed).count() as u64;
    assert!(got <= 200 && got + top_up == 200, "{got} + {top_up}");
    sliding.set_quota(0, &Quota::per_second(1_000)).unwrap();
    assert_eq!(
        (0..).take_while(|_| sliding.check_at(NOW).allowed).count(),
        100
    );

    let buckets = Compound::<Gcra, 3, ()>::with_clock(
        [
            Quota::per_minute(600).burst(250),
            Quota::per_hour(100).burst(150),
            Quota::per_second(1_000),
        ],
        (),
    )
    .unwrap();
    let got = hammer(|| one(buckets.check_at(NOW)));
    let top_up = (0..).take_while(|_| buckets.check_at(NOW).allowed).count() as u64;
    assert!(got <= 150 && got + top_up == 150, "{got} + {top_up}");
    buckets
        .set_quota(1, &Quota::per_hour(100).burst(10_000))
        .unwrap();
    assert_eq!(
        (0..).take_while(|_| buckets.check_at(NOW).allowed).count(),
        100
    );
}
