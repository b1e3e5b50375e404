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
    let mut t = start;
    let mut last = None;
    let mut admitted = Vec::new();
    for (i, (op, action)) in steps.iter().enumerate() {
        let next = advance(t, op, m.window, last.as_ref());
        t = if monotone { next.max(t) } else { next };
        let capacity = m.capacity();
        let (n, consume, got) = match action {
            Action::Check(c) => {
                let n = resolve(c, capacity);
                (n, true, log.check_n_at(n, t))
            }
            Action::CheckOne => (1, true, Ok(log.check_at(t))),
            Action::Peek(c) => {
                let n = resolve(c, capacity);
                (n, false, log.peek_n_at(n, t))
            }
            Action::PeekOne => (1, false, log.peek_n_at(1, t)),
            Action::Reconfigure(q) => {
                prop_assert_eq!(log.set_quota(q), m.reconfigure(q), "set_quota({:?})", q);
                continue;
            }
        };
        let want = m.decide(t, n, consume);
        prop_assert_eq!(
            norm(t, got),
            norm(t, want),
            "step {}: {:?} n={} t={}",
            i,
            action,
            n,
            t
        );
        if let Ok(d) = got {
            if consume && d.allowed && n > 0 {
                admitted.push((t, n));
            }
            last = Some(d);
        }
    }
    Ok(admitted)
}

proptest! {
    #![proptest_config(config(384))]

    /// Every decision equals the model's, through reconfiguration (limit up to the
    /// ring's capacity, any window) and a clock that goes back.
    #[test]
    fn log_matches_model(
        (q, capacity) in log_case(),
        start in start_time(),
        steps in prop::collection::vec((time_op(), action(new_quota(), 1)), trace_len()),
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
        steps in prop::collection::vec((time_op(), action(new_quota(), 0)), trace_len()),
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
