//! The fixed window: racing checks never put more than the limit into one aligned
//! window, none is lost, a denial leaves the count alone, and a check from the
//! next window racing one from the current one is decided as some order would.
#![cfg(loom)]

use sluicegate::{FixedWindow, Quota};
use sluicegate_loom_tests::{
    assert_denials_change_nothing, race_linearizable, shared, shared_spent, Op,
};

const SEC: u64 = 1_000_000_000;
const NOW: u64 = 9 * SEC + SEC / 2;

#[test]
fn three_threads_share_a_limit_of_two() {
    loom::model(|| {
        let w = shared(FixedWindow::with_clock(Quota::per_second(2), ()));
        let one = Op::check(1, NOW);
        let (_, admitted) = race_linearizable(&w, &[&[one], &[one], &[one]]);
        assert_eq!(admitted, 2);
        assert_eq!(w.peek_n_at(0, NOW).map(|d| d.remaining), Ok(0));
    });
}

#[test]
fn costs_and_a_peek() {
    loom::model(|| {
        let w = shared(FixedWindow::with_clock(Quota::per_second(3), ()));
        let (_, admitted) = race_linearizable(
            &w,
            &[
                &[Op::check(2, NOW)],
                &[Op::check(2, NOW)],
                &[Op::peek(2, NOW)],
            ],
        );
        // 2 + 2 > 3: exactly one of them.
        assert_eq!(admitted, 2);
    });
}

#[test]
fn denials_leave_the_word_unchanged() {
    loom::model(|| {
        let w = shared_spent(FixedWindow::with_clock(Quota::per_second(2), ()), 2, NOW);
        assert_denials_change_nothing(
            &w,
            &[
                &[Op::check(1, NOW)],
                &[Op::check(2, NOW)],
                &[Op::check(1, NOW)],
            ],
        );
    });
}

#[test]
fn a_check_from_the_next_window_races_the_current_one() {
    loom::model(|| {
        // Limit 1, spent in window 9. A check late in window 9 is denied unless
        // it comes after window 10 has started, when it is decided in window 10
        // (the clock went back: no time passed) and still denied; the check at
        // the start of window 10 is admitted either way.
        let w = shared_spent(FixedWindow::with_clock(Quota::per_second(1), ()), 1, NOW);
        let next = Op::check(1, 10 * SEC);
        let (h, admitted) = race_linearizable(&w, &[&[Op::check(1, 10 * SEC - 1)], &[next, next]]);
        assert_eq!(admitted, 1);
        assert!(h[1][0].1.admitted());
    });
}
