//! The leaky bucket meter: pours racing into one bucket at a fixed time never
//! overflow it, none is lost, and a pour that does not fit spills nothing.
#![cfg(loom)]

use sluicegate::{LeakyBucket, Quota};
use sluicegate_loom_tests::{race_linearizable, shared, shared_spent, Op};

const SEC: u64 = 1_000_000_000;
const NOW: u64 = 7 * SEC;

fn pour(n: u64) -> Op {
    Op::check(n, NOW)
}

#[test]
fn three_pours_into_room_for_two() {
    loom::model(|| {
        let lb = shared(LeakyBucket::with_clock(Quota::per_second(2), ()));
        let (_, admitted) = race_linearizable(&lb, &[&[pour(1)], &[pour(1)], &[pour(1)]]);
        assert_eq!(admitted, 2);
        assert_eq!(lb.level_at(NOW), 2);
    });
}

#[test]
fn an_overflowing_pour_spills_nothing() {
    loom::model(|| {
        // Capacity 3, level 2: a pour of 2 never fits, a pour of 1 always does.
        let lb = shared_spent(LeakyBucket::with_clock(Quota::per_second(3), ()), 2, NOW);
        let (h, admitted) = race_linearizable(&lb, &[&[pour(2)], &[pour(1), pour(1)]]);
        assert!(!h[0][0].1.admitted());
        assert!(h[1][0].1.admitted());
        assert!(!h[1][1].1.admitted());
        assert_eq!(admitted, 1);
        assert_eq!(lb.level_at(NOW), 3);
    });
}
