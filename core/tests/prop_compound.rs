//! The compound limiter against the conjunction of its parts' models: a request is
//! admitted iff every limit admits it, and a denial charges nothing anywhere.

mod model;

use model::*;
use proptest::prelude::*;
use sluicegate::{Algorithm, Compound, ConfigError, Fixed, Gcra, Quota, Sliding};

fn bucket_quota() -> impl Strategy<Value = Quota> {
    (1u64..=100, length(), 1u64..=32).prop_map(|(amount, period, burst)| {
        let period = period.max(amount);
        let t = period.div_ceil(amount);
        Quota::from_nanos(amount, period).burst(burst.min(u64::MAX / t))
    })
}

fn window_quota(counts: u32) -> impl Strategy<Value = Quota> {
    (length(), 1u64..=32).prop_filter_map("no layout", move |(window, limit)| {
        let max = window_max_count(window, counts);
        (max > 0).then(|| Quota::from_nanos(limit.min(max), window))
    })
}

#[derive(Clone, Debug)]
enum Op {
    Check(Cost),
    Peek(Cost),
    /// `set_quota(index, quota)`; the quota is rebuilt for the part's window.
    Reconfigure(usize, u64),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        10 => cost().prop_map(Op::Check),
        3 => cost().prop_map(Op::Peek),
        1 => (0usize..4, 0u64..40).prop_map(|(i, l)| Op::Reconfigure(i, l)),
    ]
}

/// The parts' quotas from `quotas`, a start and a trace.
fn case<S: Strategy>(quotas: S) -> impl Strategy<Value = (S::Value, u64, Vec<(TimeOp, Op)>)> {
    (quotas, start_time(), trace(op()))
}

/// A window quota with a new limit: a window's length cannot change.
fn same_window(q: &Quota, limit: u64) -> Quota {
    Quota::from_nanos(limit, q.period_ns())
}

/// Drives a compound of `N` parts and the conjunction of their models, each
/// built from its part's quota by `model`.
fn drive_compound<A: Algorithm, M: Model + Reconfigure, const N: usize>(
    quotas: [Quota; N],
    model: impl Fn(&Quota) -> Result<M, ConfigError>,
    reconfigured: impl Fn(&Quota, u64) -> Quota,
    unit: u64,
    start: u64,
    steps: &[(TimeOp, Op)],
) -> Result<(), TestCaseError> {
    let c: Compound<A, N, ()> = Compound::with_clock(quotas, ()).unwrap();
    let mut models: Vec<M> = quotas.iter().map(|q| model(q).unwrap()).collect();
    let mut quotas = quotas;
    let mut t = start;
    let mut last = None;
    for (i, (time, op)) in steps.iter().enumerate() {
        t = advance(t, time, unit, last.as_ref());
        let capacity = models.iter().map(|m| m.capacity()).min().unwrap_or(0);
        let (n, consume) = match op {
            Op::Check(cost) => (resolve(cost, capacity), true),
            Op::Peek(cost) => (resolve(cost, capacity), false),
            Op::Reconfigure(index, limit) => {
                let q = quotas.get(*index).map(|q| reconfigured(q, *limit));
                let got = c.set_quota(*index, &q.unwrap_or(Quota::per_second(1)));
                match q {
                    Some(q) => {
                        prop_assert_eq!(got, models[*index].reconfigure(&q));
                        if got.is_ok() {
                            quotas[*index] = q;
                        }
                    }
                    None => prop_assert!(got.is_err(), "index {} of {}", index, N),
                }
                continue;
            }
        };
        let got = if consume {
            c.check_n_at(n, t)
        } else {
            c.peek_n_at(n, t)
        };
        let mut model = CompoundModel { parts: models };
        let want = model.decide(t, n, consume);
        models = model.parts;
        match (got, want) {
            (Ok(d), Ok(w)) => {
                let d = normalize(t, d);
                let mut w_d = normalize(t, w.decision);
                prop_assert!(
                    w.limits.contains(&d.limit),
                    "step {}: limit {} not in {:?}",
                    i,
                    d.limit,
                    w.limits
                );
                w_d.limit = d.limit;
                prop_assert_eq!(d, w_d, "step {}: n={} t={}", i, n, t);
                last = Some(d);
            }
            (got, want) => {
                prop_assert_eq!(got, want.map(|w| w.decision), "step {}: n={} t={}", i, n, t)
            }
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(config(256))]

    /// Three token buckets, e.g. per second, per minute, per hour.
    #[test]
    fn compound_buckets_match_models((qs, start, steps) in case([bucket_quota(), bucket_quota(), bucket_quota()])) {
        let unit = qs[0].period_ns().div_ceil(qs[0].amount());
        drive_compound::<Gcra, _, 3>(qs, Bucket::new, |q, b| q.burst(b), unit, start, &steps)?;
    }

    /// Two fixed windows.
    #[test]
    fn compound_fixed_windows_match_models((qs, start, steps) in case([window_quota(1), window_quota(1)])) {
        drive_compound::<Fixed, _, 2>(qs, FixedModel::new, same_window, qs[0].period_ns(), start, &steps)?;
    }

    /// Two sliding windows.
    #[test]
    fn compound_sliding_windows_match_models((qs, start, steps) in case([window_quota(2), window_quota(2)])) {
        drive_compound::<Sliding, _, 2>(qs, SlidingModel::new, same_window, qs[1].period_ns(), start, &steps)?;
    }
}
