//! `AnyLimiter` decides exactly like the concrete limiter of its kind: one limit,
//! a compound and a striped bucket, on random traffic.

use proptest::prelude::*;
use sluicegate::{
    AnyLimiter, Compound, Decision, Fixed, FixedWindow, Gcra, InsufficientCapacity, Kind, Leaky,
    LeakyBucket, Outcome, Quota, Shaper, Sliding, SlidingLog, SlidingWindow, Spec, SpecError,
    Striped, TokenBucket,
};

/// A concrete limiter of any kind, called the way its own API is called.
type Concrete = Box<dyn Fn(bool, u64, u64) -> Result<Outcome, InsufficientCapacity>>;

fn plain(d: Decision) -> Outcome {
    Outcome {
        decision: d,
        delay_ns: 0,
    }
}

/// Boxes a limiter whose own API has `check_n_at` and `peek_n_at` as a
/// [`Concrete`]: a check when `consume`, else a peek.
macro_rules! check_or_peek {
    ($limiter:expr) => {{
        let l = $limiter;
        Box::new(move |consume, n, t| {
            if consume {
                l.check_n_at(n, t).map(plain)
            } else {
                l.peek_n_at(n, t).map(plain)
            }
        })
    }};
}

fn concrete(spec: &Spec) -> Concrete {
    let q = spec.quotas()[0];
    match spec.kind() {
        Kind::TokenBucket => check_or_peek!(TokenBucket::with_clock(q, ()).unwrap()),
        Kind::LeakyBucket => check_or_peek!(LeakyBucket::with_clock(q, ()).unwrap()),
        Kind::FixedWindow => check_or_peek!(FixedWindow::with_clock(q, ()).unwrap()),
        Kind::SlidingWindow => check_or_peek!(SlidingWindow::with_clock(q, ()).unwrap()),
        Kind::SlidingLog => check_or_peek!(SlidingLog::with_clock(q, ()).unwrap()),
        Kind::Shaper => {
            let s = Shaper::with_clock(q, spec.max_delay_ns(), ()).unwrap();
            Box::new(move |consume, n, t| {
                if consume {
                    s.reserve_n_at(n, t).map(|r| Outcome {
                        decision: *r.decision(),
                        delay_ns: r.delay_ns(),
                    })
                } else {
                    s.peek_n_at(n, t).map(plain)
                }
            })
        }
    }
}

fn compound(spec: &Spec) -> Concrete {
    let quotas: [Quota; 3] = spec.quotas().try_into().unwrap();
    match spec.kind() {
        Kind::TokenBucket => {
            check_or_peek!(Compound::<Gcra, 3, ()>::with_clock(quotas, ()).unwrap())
        }
        Kind::LeakyBucket => {
            check_or_peek!(Compound::<Leaky, 3, ()>::with_clock(quotas, ()).unwrap())
        }
        Kind::FixedWindow => {
            check_or_peek!(Compound::<Fixed, 3, ()>::with_clock(quotas, ()).unwrap())
        }
        Kind::SlidingWindow => {
            check_or_peek!(Compound::<Sliding, 3, ()>::with_clock(quotas, ()).unwrap())
        }
        k => panic!("{k} has no compound"),
    }
}

fn quota() -> impl Strategy<Value = Quota> {
    (1u64..=20, 1u64..=2_000, 1u64..=25)
        .prop_map(|(amount, period, burst)| Quota::from_nanos(amount, period * 1_000).burst(burst))
}

/// A valid spec of `kind` with `count` quotas (bursts dropped where unsupported).
fn spec(kind: Kind, count: usize) -> impl Strategy<Value = Spec> {
    (prop::collection::vec(quota(), count), 0u64..3_000_000).prop_filter_map(
        "invalid",
        move |(qs, delay)| {
            let qs: Vec<Quota> = qs
                .into_iter()
                .map(|q| {
                    if kind.caps().burst {
                        q
                    } else {
                        q.burst(q.amount())
                    }
                })
                .collect();
            Spec::new(kind, &qs)
                .and_then(|s| s.with_max_delay_ns(if kind.caps().max_delay { delay } else { 0 }))
                .ok()
        },
    )
}

#[derive(Clone, Debug)]
struct Op {
    consume: bool,
    n: u64,
    /// Time step; a few go backwards.
    dt: i64,
}

fn ops() -> impl Strategy<Value = Vec<Op>> {
    prop::collection::vec(
        (prop::bool::weighted(0.8), 0u64..=30, -50_000i64..400_000)
            .prop_map(|(consume, n, dt)| Op { consume, n, dt }),
        1..120,
    )
}

fn run(any: &AnyLimiter<()>, other: &Concrete, ops: &[Op]) -> Result<(), TestCaseError> {
    let mut t = 1_000_000_000u64;
    for op in ops {
        t = t.saturating_add_signed(op.dt);
        let a = if op.consume {
            any.check_n_at(op.n, t)
        } else {
            any.peek_n_at(op.n, t)
        };
        let b = other(op.consume, op.n, t);
        prop_assert_eq!(a, b, "{:?} at {}", op, t);
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn one_limit_decides_like_the_concrete_limiter(
        (kind, spec) in prop::sample::select(Kind::ALL.to_vec())
            .prop_flat_map(|k| (Just(k), spec(k, 1))),
        ops in ops(),
    ) {
        let any = AnyLimiter::with_clock(&spec, ()).unwrap();
        prop_assert_eq!(any.kind(), kind);
        prop_assert_eq!(any.spec(), spec);
        run(&any, &concrete(&spec), &ops)?;
    }

    #[test]
    fn a_compound_decides_like_compound(
        spec in prop::sample::select(
            Kind::ALL.into_iter().filter(|k| k.caps().compound).collect::<Vec<_>>()
        ).prop_flat_map(|k| spec(k, 3)),
        ops in ops(),
    ) {
        let any = AnyLimiter::with_clock(&spec, ()).unwrap();
        run(&any, &compound(&spec), &ops)?;
    }

    #[test]
    fn a_striped_bucket_decides_like_striped(
        q in quota(),
        ops in ops(),
        stripes in prop::collection::vec(0usize..8, 120),
    ) {
        let q = q.burst(q.burst_size().max(4));
        let spec = Spec::new(Kind::TokenBucket, &[q]).unwrap();
        let any = AnyLimiter::striped(&spec, 4, ()).unwrap();
        let other = Striped::<4, ()>::with_clock(q, ()).unwrap();
        let mut t = 1_000_000_000u64;
        for (op, &s) in ops.iter().zip(&stripes) {
            t = t.saturating_add_signed(op.dt);
            let a = any.check_n_at_stripe(s, op.n, t).map(|o| o.decision);
            prop_assert_eq!(a, other.check_n_at_stripe(s, op.n, t), "{:?} at {}", op, t);
        }
    }
}

#[test]
fn set_spec_keeps_the_state_and_rejects_what_cannot_change() {
    let spec = Spec::parse(Kind::SlidingWindow, "2/s; 10/m").unwrap();
    let l = AnyLimiter::with_clock(&spec, ()).unwrap();
    assert!(l.check_n_at(2, 0).unwrap().decision.allowed);
    let wider = Spec::parse(Kind::SlidingWindow, "3/s; 10/m").unwrap();
    l.set_spec(&wider).unwrap();
    assert_eq!(l.spec(), wider);
    let d = l.check_n_at(1, 0).unwrap().decision;
    assert!(d.allowed && d.remaining == 0, "{d:?}"); // the 2 taken still count
    // A window's length: rejected by the part's own check, nothing changed.
    let longer = Spec::parse(Kind::SlidingWindow, "5/s; 10/h").unwrap();
    assert!(matches!(
        l.set_spec(&longer),
        Err(SpecError::Config { index: 1, .. })
    ));
    assert_eq!(l.spec(), wider);
    assert!(!l.check_n_at(1, 0).unwrap().decision.allowed);
    let one = Spec::parse(Kind::SlidingWindow, "3/s").unwrap();
    assert_eq!(
        l.set_spec(&one),
        Err(SpecError::Immutable {
            field: "number of limits"
        })
    );
    // The shaper's max delay and the log's capacity.
    let shaper = Spec::parse(Kind::Shaper, "1/s").unwrap();
    let s = AnyLimiter::with_clock(&shaper, ()).unwrap();
    let later = shaper.with_max_delay_ns(5).unwrap();
    assert_eq!(
        s.set_spec(&later),
        Err(SpecError::Immutable { field: "max delay" })
    );
    let log = Spec::parse(Kind::SlidingLog, "2/s")
        .unwrap()
        .with_log_capacity(4)
        .unwrap();
    let l = AnyLimiter::with_clock(&log, ()).unwrap();
    let more = Spec::parse(Kind::SlidingLog, "4/s").unwrap();
    l.set_spec(&more).unwrap();
    assert_eq!(l.check_n_at(4, 0).unwrap().decision.remaining, 0);
    let bigger = more.with_log_capacity(8).unwrap();
    assert_eq!(
        l.set_spec(&bigger),
        Err(SpecError::Immutable {
            field: "log capacity"
        })
    );
    let too_many = Spec::parse(Kind::SlidingLog, "5/s").unwrap();
    assert!(matches!(
        l.set_spec(&too_many),
        Err(SpecError::Config { index: 0, .. })
    ));
}

#[test]
fn striped_bounds() {
    let spec = Spec::parse(Kind::TokenBucket, "100/s burst 100").unwrap();
    assert_eq!(
        AnyLimiter::striped(&spec, 0, ()).unwrap_err(),
        SpecError::Stripes { max: 64 }
    );
    assert!(AnyLimiter::striped(&spec, Spec::MAX_STRIPES, ()).is_ok());
    let small = Spec::parse(Kind::TokenBucket, "100/s burst 2").unwrap();
    assert_eq!(
        AnyLimiter::striped(&small, 3, ()).unwrap_err().to_string(),
        "quota 0: stripes is too large for this limiter: the maximum is 2"
    );
    let two = Spec::parse(Kind::TokenBucket, "100/s; 1000/h").unwrap();
    assert!(matches!(
        AnyLimiter::striped(&two, 2, ()),
        Err(SpecError::Unsupported { .. })
    ));
    // A striped limiter's peek takes nothing and agrees with the next check.
    let l = AnyLimiter::striped(&spec, 4, ()).unwrap();
    let peek = l.peek_n_at(60, 0).unwrap();
    assert_eq!(peek, l.check_n_at_stripe(0, 60, 0).unwrap());
    l.reset().unwrap();
    assert!(l.check_n_at(100, 0).unwrap().decision.allowed);
}

#[test]
fn every_kind_and_size_builds() {
    for kind in Kind::ALL {
        let max = if kind.caps().compound {
            Spec::MAX_LIMITS
        } else {
            1
        };
        for count in 1..=max {
            let qs: Vec<Quota> = (1..=count as u64)
                .map(|i| Quota::per_second(i * 2))
                .collect();
            let spec = Spec::new(kind, &qs).unwrap();
            let l = AnyLimiter::with_clock(&spec, ()).unwrap();
            assert_eq!(l.spec(), spec);
            let d = l.check_n_at(2, 0).unwrap().decision;
            assert!(
                d.allowed && d.remaining == 0 && d.limit == 2,
                "{kind} {count}: {d:?}"
            );
            assert_eq!(
                l.check_n_at(3, 0),
                Err(InsufficientCapacity {
                    requested: 3,
                    capacity: 2
                })
            );
        }
    }
}

#[test]
fn concurrent_set_quota_of_different_limits_keeps_both() {
    let spec = Spec::parse(Kind::FixedWindow, "1/s; 1/m").unwrap();
    let l = AnyLimiter::with_clock(&spec, ()).unwrap();
    for round in 2..200u64 {
        std::thread::scope(|s| {
            s.spawn(|| l.set_quota(0, &Quota::per_second(round)).unwrap());
            s.spawn(|| l.set_quota(1, &Quota::per_minute(round)).unwrap());
        });
        assert_eq!(
            l.spec().quotas(),
            [Quota::per_second(round), Quota::per_minute(round)]
        );
    }
}

proptest! {
    /// `AnyLimiter::undo` is the shaper's cancel: on random reservations and
    /// cancels of random earlier ones, both answer alike and schedule alike. (Up
    /// to the first cancel that succeeds: the shaper then holds the start it
    /// normalised, `max(before, now)`, where `undo` holds the word from before, the
    /// same schedule in another word; a second cancel, of the reservation before,
    /// then succeeds only on `undo`, which is as exact.)
    #[test]
    fn undo_is_the_shapers_cancel(
        ops in proptest::collection::vec((0u64..4, 0u64..3_000_000_000, any::<bool>(), 0usize..8), 1..60),
    ) {
        let quota = Quota::per_second(2).burst(2);
        let spec = Spec::new(Kind::Shaper, &[quota]).unwrap().with_max_delay_ns(4_000_000_000).unwrap();
        let any = AnyLimiter::with_clock(&spec, ()).unwrap();
        let shaper = Shaper::with_clock(quota, spec.max_delay_ns(), ()).unwrap();
        let (mut receipts, mut reservations) = (Vec::new(), Vec::new());
        let (mut now, mut cancelled) = (0u64, false);
        for (n, dt, cancel, which) in ops {
            now += dt;
            if cancel && !receipts.is_empty() {
                if cancelled {
                    continue;
                }
                let i = which % receipts.len();
                let undone = any.undo(&mut receipts[i]);
                prop_assert_eq!(undone, shaper.cancel_at(&mut reservations[i], now));
                cancelled = undone;
            } else {
                let mut r = sluicegate::Receipt::empty();
                let o = any.check_n_at_receipt(n, now, &mut r).unwrap();
                let s = shaper.reserve_n_at(n, now).unwrap();
                prop_assert_eq!(o.decision, *s.decision());
                prop_assert_eq!(o.delay_ns, s.delay_ns());
                receipts.push(r);
                reservations.push(s);
            }
        }
    }
}

#[test]
fn undo_takes_back_one_limit_of_its_own_handle_only() {
    let spec = Spec::parse(Kind::TokenBucket, "2/s").unwrap();
    let (l, other) = (
        AnyLimiter::with_clock(&spec, ()).unwrap(),
        AnyLimiter::with_clock(&spec, ()).unwrap(),
    );
    let mut r = sluicegate::Receipt::empty();
    l.check_n_at_receipt(2, 0, &mut r).unwrap();
    assert!(!other.undo(&mut r));
    assert!(l.undo(&mut r));
    assert_eq!(l.peek_n_at(0, 0).unwrap().decision.remaining, 2);
    // A compound is several words: never undone (a refund gives it back).
    let both = Spec::new(
        Kind::TokenBucket,
        &[Quota::per_second(2), Quota::per_minute(10)],
    )
    .unwrap();
    let c = AnyLimiter::with_clock(&both, ()).unwrap();
    c.check_n_at_receipt(1, 0, &mut r).unwrap();
    assert!(!r.is_empty() && !c.undo(&mut r));
    c.refund(&mut r, 0);
    assert_eq!(c.peek_n_at(0, 0).unwrap().decision.remaining, 2);
}
