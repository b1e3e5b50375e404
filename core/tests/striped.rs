//! The striped limiter: the whole-quota bound across threads, borrowing, gathering.
#![cfg(feature = "std")]

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use proptest::prelude::*;
use sluicegate::{Quota, Striped};

#[test]
fn threads_together_get_exactly_the_burst() {
    let s = Arc::new(Striped::<4, ()>::with_clock(Quota::per_minute(1000).burst(103), ()).unwrap());
    let admitted = Arc::new(AtomicU64::new(0));
    let threads: Vec<_> = (0..4)
        .map(|i| {
            let (s, admitted) = (s.clone(), admitted.clone());
            std::thread::spawn(move || {
                for _ in 0..500 {
                    if s.check_at_stripe(i, 0).allowed {
                        admitted.fetch_add(1, Ordering::Relaxed);
                    }
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    // Borrowing makes every token reachable; the stripes' own CAS makes no more.
    assert_eq!(admitted.load(Ordering::Relaxed), 103);
}

#[test]
fn a_request_larger_than_any_stripe_is_gathered_or_refused_whole() {
    let s = Striped::<4, ()>::with_clock(Quota::per_second(8), ()).unwrap();
    assert!(s.check_n_at_stripe(2, 3, 0).unwrap().allowed); // from stripe 2 (2) + 3 (1)
    let d = s.check_n_at_stripe(0, 6, 0).unwrap();
    assert!(!d.allowed);
    assert_eq!(d.remaining, 5);
    // The refused gather gave back what it had taken.
    assert!(s.check_n_at_stripe(1, 5, 0).unwrap().allowed);
    assert!(!s.check_at_stripe(0, 0).allowed);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: if cfg!(miri) { 2 } else { 128 }, failure_persistence: None, ..ProptestConfig::default() })]

    /// Over every interval of the trace, admitted ≤ b + r·Δ (exact rational).
    #[test]
    fn never_more_than_the_single_bucket_bound(
        ops in prop::collection::vec((0usize..8, 0u64..40_000_000, 1u64..6), 1..300),
    ) {
        let (amount, period, burst) = (50u128, 1_000_000_000u128, 10u128);
        let s = Striped::<3, ()>::with_clock(Quota::per_second(50).burst(10), ()).unwrap();
        let mut now = 0u64;
        let mut log: Vec<(u64, u64)> = Vec::new();
        for (stripe, dt, n) in ops {
            now += dt;
            if s.check_n_at_stripe(stripe, n, now).unwrap().allowed {
                log.push((now, n));
            }
        }
        for i in 0..log.len() {
            let mut sum = 0u128;
            for j in i..log.len() {
                sum += log[j].1 as u128;
                let dt = (log[j].0 - log[i].0) as u128;
                // sum ≤ burst + amount·dt/period, multiplied out.
                prop_assert!(sum * period <= burst * period + amount * dt,
                    "{sum} admitted in {dt} ns");
            }
        }
    }
}
