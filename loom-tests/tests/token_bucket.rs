//! The token bucket (GCRA): threads racing on one bucket at a fixed time admit
//! exactly what one thread alone would, in some order, and leave the word where
//! that order ends.
#![cfg(loom)]

use sluicegate::{Quota, TokenBucket};
use sluicegate_loom_tests::{
    assert_denials_change_nothing, race_linearizable, shared, shared_spent, Op,
};

const SEC: u64 = 1_000_000_000;
const NOW: u64 = 5 * SEC;

fn one(now: u64) -> Op {
    Op::check(1, now)
}

#[test]
fn three_threads_share_a_burst_of_two() {
    loom::model(|| {
        let tb = shared(TokenBucket::with_clock(Quota::per_second(2), ()));
        let (_, admitted) = race_linearizable(&tb, &[&[one(NOW)], &[one(NOW)], &[one(NOW)]]);
        assert_eq!(admitted, 2);
        // Both admissions are in the word: the bucket is full 2·T after NOW.
        assert_eq!(tb.state_word(), NOW + SEC);
    });
}

#[test]
fn costs_race_for_the_last_two_tokens() {
    loom::model(|| {
        let tb = shared_spent(TokenBucket::with_clock(Quota::per_second(3), ()), 1, NOW);
        let (_, admitted) = race_linearizable(&tb, &[&[Op::check(2, NOW)], &[one(NOW), one(NOW)]]);
        // Every sequential order spends exactly the two tokens left.
        assert_eq!(admitted, 2);
        assert!(!tb.peek_at(NOW).allowed);
    });
}

#[test]
fn denials_leave_the_word_unchanged() {
    loom::model(|| {
        let tb = shared_spent(TokenBucket::with_clock(Quota::per_second(2), ()), 2, NOW);
        assert_denials_change_nothing(
            &tb,
            &[&[one(NOW)], &[Op::check(2, NOW)], &[Op::peek(1, NOW)]],
        );
    });
}

#[test]
fn callers_at_different_times() {
    loom::model(|| {
        // One token per 500 ms, one at a time; the token is spent at NOW.
        let tb = shared_spent(
            TokenBucket::with_clock(Quota::per_second(2).burst(1), ()),
            1,
            NOW,
        );
        let t = SEC / 2;
        // A caller whose clock is behind finds no token; one at NOW + T finds one,
        // and then none for itself 1 ns later; who wins depends on the order.
        let (_, admitted) = race_linearizable(
            &tb,
            &[&[one(NOW + t / 2)], &[one(NOW + t), one(NOW + t + 1)]],
        );
        assert_eq!(admitted, 1);
    });
}

#[test]
fn a_fresh_bucket_at_the_end_of_time_shares_its_whole_burst() {
    loom::model(|| {
        // Time stops one refill before u64::MAX; a fresh bucket is full there.
        let tb = shared(TokenBucket::with_clock(Quota::per_second(2), ()));
        let end = u64::MAX - 1;
        let (_, admitted) = race_linearizable(&tb, &[&[one(end)], &[one(end)], &[one(end)]]);
        assert_eq!(admitted, 2);
        assert_eq!(tb.state_word(), u64::MAX);
    });
}
