//! The sliding window counter: racing checks never push the estimate past the
//! limit, none is lost, a denial leaves both counts alone, and checks that roll
//! the window forward race cleanly with checks in it.
#![cfg(loom)]

use loom::sync::Arc;
use sluicegate::{Quota, SlidingWindow};
use sluicegate_loom_tests::{assert_denials_change_nothing, race_linearizable, shared_spent, Op};

const SEC: u64 = 1_000_000_000;

/// A window of `limit` per second with 2 units spent halfway through window 0.
fn two_in_window_zero(limit: u64) -> Arc<SlidingWindow<()>> {
    shared_spent(
        SlidingWindow::with_clock(Quota::per_second(limit), ()),
        2,
        SEC / 2,
    )
}

#[test]
fn three_threads_share_the_one_unit_left() {
    loom::model(|| {
        // 2 in window 0; halfway through window 1 they weigh 2 · 1/2 = 1.
        let w = two_in_window_zero(2);
        let one = Op::check(1, SEC + SEC / 2);
        let (_, admitted) = race_linearizable(&w, &[&[one], &[one], &[one]]);
        assert_eq!(admitted, 1);
    });
}

#[test]
fn a_rollover_races_checks_in_the_old_window() {
    loom::model(|| {
        let w = two_in_window_zero(3);
        // Thread 0 checks late in window 0 and then in window 1; thread 1 checks a
        // quarter into window 1 (window 0 still weighs 3/4 of its count).
        race_linearizable(
            &w,
            &[
                &[Op::check(1, SEC - 1), Op::check(1, 2 * SEC - 1)],
                &[Op::check(2, SEC + SEC / 4)],
            ],
        );
    });
}

#[test]
fn denials_leave_the_word_unchanged() {
    loom::model(|| {
        let w = two_in_window_zero(2);
        assert_denials_change_nothing(
            &w,
            &[
                &[Op::check(1, SEC - 1)],
                &[Op::check(2, SEC / 2)],
                &[Op::peek(1, SEC / 2)],
            ],
        );
    });
}

#[test]
fn the_wide_layout_races_a_rollover_like_the_whole_index() {
    loom::model(|| {
        // 20,000 per second does not fit next to the whole index: the window index
        // is stored modulo 2^24. Window 2^24 reads as the same window as 0 would,
        // so start just before a wrap of the stored index.
        let base = ((1u64 << 24) - 1) * SEC;
        let w = shared_spent(
            SlidingWindow::with_clock(Quota::per_second(20_000), ()),
            19_999,
            base + SEC / 2,
        );
        race_linearizable(
            &w,
            &[
                &[
                    Op::check(1, base + SEC - 1),
                    Op::check(5_001, base + 2 * SEC - 1),
                ],
                &[Op::check(5_000, base + SEC + SEC / 4)],
            ],
        );
    });
}
