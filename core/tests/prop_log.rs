//! The sliding window log against a list of every admitted timestamp, and its
//! exactness (any interval of one window admits at most the limit) checked directly.

mod model;

use model::*;
use proptest::prelude::*;
use sluicegate::{Quota, SlidingLog};

fn quota() -> impl Strategy<Value = Quota> {
    (1u64..=24, length()).prop_map(|(limit, window)| Quota::from_nanos(limit, window))
}

/// A quota and a ring at least as large as its limit.
fn log_case() -> impl Strategy<Value = (Quota, u64)> {
    (quota(), 0u64..8).prop_map(|(q, extra)| (q, q.amount() + extra))
}

/// New quotas: any window, limits up to a little over the capacity, some zeros.
fn new_quota() -> impl Strategy<Value = Quota> {
    prop_oneof![
        8 => (1u64..=32, length()).prop_map(|(l, w)| Quota::from_nanos(l, w)),
        1 => (0u64..2, 0u64..2).prop_map(|(l, w)| Quota::from_nanos(l, w)),
    ]
}

/// Runs `steps` against the log and the model; returns the admissions.
fn drive_log(
    log: &SlidingLog<()>,
    m: &mut LogModel,
    start: u64,
    steps: &Steps,
    monotone: bool,
) -> Result<Vec<(u64, u64)>, TestCaseError> {
    drive(
        log,
        m,
        start,
        steps,
        |m| m.window,
        monotone,
        |_, _, _| Ok(()),
    )
}

proptest! {
    #![proptest_config(config(384))]

    /// Every decision equals the model's, through reconfiguration (limit up to the
    /// ring's capacity, any window) and a clock that goes back.
    #[test]
    fn log_matches_model(
        (q, capacity) in log_case(),
        start in start_time(),
        steps in trace(action(new_quota(), 1)),
    ) {
        let log = SlidingLog::with_capacity(q, capacity, ()).unwrap();
        let mut m = LogModel::with_capacity(&q, capacity).unwrap();
        drive_log(&log, &mut m, start, &steps, false)?;
    }

    /// With a forward clock, every interval shorter than one window, i.e. every
    /// `(t − W, t]`, holds at most `limit` admitted units.
    #[test]
    fn log_is_exact(
        q in quota(),
        start in start_time(),
        steps in trace(action(new_quota(), 0)),
    ) {
        let log = SlidingLog::with_clock(q, ()).unwrap();
        let mut m = LogModel::new(&q).unwrap();
        let admitted = drive_log(&log, &mut m, start, &steps, true)?;
        let (limit, window) = (q.amount() as u128, q.period_ns());
        let mut worst = None;
        for_every_interval(&admitted, |span, units| {
            if span < window && units > limit {
                worst = Some((span, units));
            }
        });
        prop_assert!(worst.is_none(), "{:?} within one window: {:?}", worst, admitted);
    }
}
