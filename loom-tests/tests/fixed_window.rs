//! The fixed window: racing checks never put more than the limit into one aligned
//! window, none is lost, a denial leaves the count alone, and a check from the
//! next window racing one from the current one is decided as some order would.
#![cfg(loom)]

use loom::sync::Arc;
use sluicegate::{FixedWindow, Quota};
use sluicegate_loom_tests::{assert_linearizable, race, Op, Reference};

const SEC: u64 = 1_000_000_000;
const NOW: u64 = 9 * SEC + SEC / 2;

fn window(quota: Quota) -> Arc<FixedWindow<()>> {
    match FixedWindow::with_clock(quota, ()) {
        Ok(w) => Arc::new(w),
        Err(e) => panic!("{e}"),
    }
}

fn check(n: u64, now: u64) -> Op {
    Op::Check { n, now }
}

#[test]
fn three_threads_share_a_limit_of_two() {
    loom::model(|| {
        let w = window(Quota::per_second(2));
        let before = Reference::of(&*w);
        let one = check(1, NOW);
        let h = race(&w, vec![vec![one], vec![one], vec![one]]);
        assert_eq!(assert_linearizable(&before, &h, &*w), 2);
        assert_eq!(w.peek_n_at(0, NOW).map(|d| d.remaining), Ok(0));
    });
}

#[test]
fn costs_and_a_peek() {
    loom::model(|| {
        let w = window(Quota::per_second(3));
        let before = Reference::of(&*w);
        let h = race(
            &w,
            vec![
                vec![check(2, NOW)],
                vec![check(2, NOW)],
                vec![Op::Peek { n: 2, now: NOW }],
            ],
        );
        // 2 + 2 > 3: exactly one of them.
        assert_eq!(assert_linearizable(&before, &h, &*w), 2);
    });
}

#[test]
fn denials_leave_the_word_unchanged() {
    loom::model(|| {
        let w = window(Quota::per_second(2));
        assert!(w.check_n_at(2, NOW).is_ok_and(|d| d.allowed));
        let full = w.state_word();
        let before = Reference::of(&*w);
        let h = race(
            &w,
            vec![
                vec![check(1, NOW)],
                vec![check(2, NOW)],
                vec![check(1, NOW)],
            ],
        );
        assert_eq!(assert_linearizable(&before, &h, &*w), 0);
        assert_eq!(w.state_word(), full);
    });
}

#[test]
fn a_check_from_the_next_window_races_the_current_one() {
    loom::model(|| {
        // Limit 1, spent in window 9. A check late in window 9 is denied unless
        // it comes after window 10 has started, when it is decided in window 10
        // (the clock went back: no time passed) and still denied; the check at
        // the start of window 10 is admitted either way.
        let w = window(Quota::per_second(1));
        assert!(w.check_at(NOW).allowed);
        let before = Reference::of(&*w);
        let h = race(
            &w,
            vec![
                vec![check(1, 10 * SEC - 1)],
                vec![check(1, 10 * SEC), check(1, 10 * SEC)],
            ],
        );
        assert_eq!(assert_linearizable(&before, &h, &*w), 1);
        assert!(h[1][0].1.admitted());
    });
}
