//! The fixed window and the sliding window counter against their exact models, and
//! their per-window invariants checked directly.

mod model;

use std::collections::BTreeMap;

use model::*;
use proptest::prelude::*;
use sluicegate::{FixedWindow, Quota, SlidingWindow};

/// Valid window quotas for `counts` counters: limits from 1 to the layout's
/// maximum, windows from a few nanoseconds to the whole of time.
fn quota(counts: u32) -> impl Strategy<Value = Quota> {
    (
        length(),
        prop_oneof![4 => 1u64..=16, 2 => 17u64..=1_000, 1 => Just(u64::MAX)],
    )
        .prop_filter_map("no layout", move |(window, limit)| {
            let max = window_max_count(window, counts);
            (max > 0).then(|| Quota::from_nanos(limit.min(max), window))
        })
}

/// A new limit for the same window (sometimes a different window, or 0, or one
/// above the layout's maximum: errors that must change nothing).
fn reconfig(window: u64, counts: u32) -> impl Strategy<Value = Quota> {
    let max = window_max_count(window, counts);
    prop_oneof![
        8 => (1..=max.min(64)).prop_map(move |l| Quota::from_nanos(l, window)),
        1 => Just(Quota::from_nanos(0, window)),
        1 => Just(Quota::from_nanos(max.saturating_add(1), window)),
        1 => (1u64..10).prop_map(move |l| Quota::from_nanos(l, window.saturating_add(1))),
    ]
}

fn case(counts: u32, reconfigure: u32) -> impl Strategy<Value = (Quota, u64, Steps)> {
    quota(counts).prop_flat_map(move |q| {
        let steps = prop::collection::vec(
            (
                time_op(),
                action(reconfig(q.period_ns(), counts), reconfigure),
            ),
            trace_len(),
        );
        (Just(q), start_time(), steps)
    })
}

/// Units admitted per aligned window, from admissions `(t, n)`.
fn per_window(admitted: &[(u64, u64)], window: u64) -> BTreeMap<u64, u64> {
    let mut m = BTreeMap::new();
    for &(t, n) in admitted {
        *m.entry(t / window).or_insert(0) += n;
    }
    m
}

proptest! {
    #![proptest_config(config(384))]

    /// Every fixed-window decision equals the model's: window edges, peeks,
    /// n > limit, a clock that goes back, the last (partial) window of time.
    #[test]
    fn fixed_window_matches_model((q, start, steps) in case(1, 1)) {
        let w = FixedWindow::with_clock(q, ()).unwrap();
        let mut m = FixedModel::new(&q).unwrap();
        drive(&w, &mut m, start, &steps, |m| m.window, false, |_, _, _| Ok(()))?;
    }

    /// Every sliding-window decision equals the model's.
    #[test]
    fn sliding_window_matches_model((q, start, steps) in case(2, 1)) {
        let w = SlidingWindow::with_clock(q, ()).unwrap();
        let mut m = SlidingModel::new(&q).unwrap();
        drive(&w, &mut m, start, &steps, |m| m.window, false, |_, _, _| Ok(()))?;
    }

    /// With a forward clock, each aligned window admits at most the limit
    /// (both algorithms); the sliding counter also admits at most twice the limit
    /// in any span of one window.
    #[test]
    fn windows_never_exceed_the_limit((q, start, steps) in case(2, 0)) {
        let (limit, window) = (q.amount(), q.period_ns());
        let fixed = FixedWindow::with_clock(q, ()).unwrap();
        let mut fm = FixedModel::new(&q).unwrap();
        let admitted = drive(&fixed, &mut fm, start, &steps, |m| m.window, true, |_, _, _| Ok(()))?;
        for (k, units) in per_window(&admitted, window) {
            prop_assert!(units <= limit, "fixed: {} units in window {}", units, k);
        }

        let sliding = SlidingWindow::with_clock(q, ()).unwrap();
        let mut sm = SlidingModel::new(&q).unwrap();
        let admitted = drive(&sliding, &mut sm, start, &steps, |m| m.window, true, |_, _, _| Ok(()))?;
        for (k, units) in per_window(&admitted, window) {
            prop_assert!(units <= limit, "sliding: {} units in window {}", units, k);
        }
        let mut ok = true;
        for_every_interval(&admitted, |span, units| {
            if (span as u128) < window as u128 && units > 2 * limit as u128 {
                ok = false;
            }
        });
        prop_assert!(ok, "sliding: more than 2·limit within one window: {:?}", admitted);
    }
}
