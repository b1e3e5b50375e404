//! The striped limiter: borrowing between stripes under races never admits more
//! than the whole burst, and a refused gather gives back exactly what it took.
#![cfg(loom)]

use sluicegate::{Quota, Striped};
use sluicegate_loom_tests::{join, shared, spawn_all, spawn_on};

#[test]
fn borrowing_threads_share_exactly_the_burst() {
    loom::model(|| {
        let s = shared(Striped::<2, ()>::with_clock(Quota::per_minute(2), ()));
        let on_stripe = s.clone();
        let got = spawn_all(vec![0, 1], move |i| {
            (0..2)
                .filter(|_| on_stripe.check_at_stripe(i, 0).allowed)
                .count()
        });
        let total: usize = got.iter().sum();
        assert_eq!(total, 2);
        assert!(!s.check_at_stripe(0, 0).allowed);
    });
}

#[test]
fn a_refused_gather_gives_back_what_it_took() {
    loom::model(|| {
        // Burst 4 over 2 stripes (2 each). One thread asks for 3 (a gather across
        // both stripes), the other for 2 from stripe 1.
        let s = shared(Striped::<2, ()>::with_clock(Quota::per_minute(4), ()));
        let ha = spawn_on(&s, |s| {
            s.check_n_at_stripe(0, 3, 0).is_ok_and(|d| d.allowed)
        });
        let hb = spawn_on(&s, |s| {
            s.check_n_at_stripe(1, 2, 0).is_ok_and(|d| d.allowed)
        });
        let (got_a, got_b) = (join(ha), join(hb));
        let taken = 3 * u64::from(got_a) + 2 * u64::from(got_b);
        assert!(taken <= 4, "over-admitted: {taken}");
        // Whatever was not admitted is still there to take: nothing leaked.
        let left = 4 - taken;
        if left > 0 {
            assert!(s.check_n_at_stripe(0, left, 0).is_ok_and(|d| d.allowed));
        }
        assert!(!s.check_at_stripe(0, 0).allowed);
    });
}
