//! `Kind` and `Spec`: names round-trip, every bound is rejected with a clear
//! error, and a spec's validation agrees with each algorithm's own constructor.

use proptest::prelude::*;
use sluicegate::{
    ConfigError, FixedWindow, Kind, LeakyBucket, Quota, Shaper, SlidingLog, SlidingWindow, Spec,
    SpecError, TokenBucket,
};

#[test]
fn every_kind_round_trips_its_name() {
    for k in Kind::ALL {
        assert_eq!(Kind::from_name(k.name()), Some(k));
        assert_eq!(k.name().parse::<Kind>(), Ok(k));
        assert_eq!(k.to_string(), k.name());
        assert!(
            k.name()
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b == b'_')
        );
    }
    let mut names: Vec<&str> = Kind::ALL.iter().map(|k| k.name()).collect();
    names.sort_unstable();
    names.dedup();
    assert_eq!(names.len(), Kind::ALL.len(), "names are distinct");
}

#[test]
fn unknown_names_list_the_valid_ones() {
    for bad in [
        "",
        "gcra",
        "TokenBucket",
        "token-bucket",
        "token_bucket ",
        "log",
    ] {
        let err = bad.parse::<Kind>().unwrap_err();
        let msg = err.to_string();
        assert!(msg.starts_with("unknown algorithm"), "{msg}");
        for k in Kind::ALL {
            assert!(msg.contains(k.name()), "{msg} lacks {k}");
        }
    }
}

#[test]
fn caps_are_what_each_kind_supports() {
    use Kind::*;
    let with = |f: fn(sluicegate::Caps) -> bool| -> Vec<Kind> {
        Kind::ALL.into_iter().filter(|k| f(k.caps())).collect()
    };
    assert_eq!(with(|c| c.burst), [TokenBucket, LeakyBucket, Shaper]);
    assert_eq!(with(|c| c.striped), [TokenBucket]);
    assert_eq!(with(|c| c.max_delay), [Shaper]);
    assert_eq!(with(|c| c.log_capacity), [SlidingLog]);
    assert_eq!(
        with(|c| c.compound),
        [TokenBucket, LeakyBucket, FixedWindow, SlidingWindow]
    );
    assert_eq!(
        with(|c| c.keyed),
        [TokenBucket, LeakyBucket, Shaper, FixedWindow, SlidingWindow]
    );
    assert_eq!(with(|c| c.redis), with(|c| c.keyed));
}

#[test]
fn every_bound_is_rejected_with_a_clear_error() {
    let q = Quota::per_second(10);
    // Number of limits.
    let e = Spec::new(Kind::TokenBucket, &[]).unwrap_err();
    assert_eq!(e, SpecError::NoLimits);
    assert_eq!(e.to_string(), "at least one limit is needed");
    let nine = [q; Spec::MAX_LIMITS + 1];
    let e = Spec::new(Kind::TokenBucket, &nine).unwrap_err();
    assert_eq!(e, SpecError::TooManyLimits { max: 8 });
    assert_eq!(e.to_string(), "too many limits: the maximum is 8");
    assert!(Spec::new(Kind::TokenBucket, &nine[..Spec::MAX_LIMITS]).is_ok());
    assert_eq!(
        Spec::parse(Kind::FixedWindow, "1/s;1/s;1/s;1/s;1/s;1/s;1/s;1/s;1/s"),
        Err(SpecError::TooManyLimits { max: 8 })
    );
    // Compounds of kinds that have none.
    for k in [Kind::Shaper, Kind::SlidingLog] {
        let e = Spec::new(k, &[q, q]).unwrap_err();
        assert_eq!(
            e.to_string(),
            format!("{k} does not support several limits")
        );
    }
    // A burst on a window.
    let e = Spec::new(Kind::FixedWindow, &[q.burst(20)]).unwrap_err();
    assert_eq!(
        e.to_string(),
        "fixed_window does not support a burst different from the limit"
    );
    // Per-quota bounds name the quota, the field and the maximum.
    let e = Spec::new(Kind::SlidingWindow, &[q, Quota::per_second(2_000_000)]).unwrap_err();
    assert_eq!(
        e,
        SpecError::Config {
            index: 1,
            error: ConfigError::TooLarge {
                field: "limit",
                max: 1_048_575
            }
        }
    );
    assert_eq!(
        e.to_string(),
        "quota 1: limit is too large for this limiter: the maximum is 1048575"
    );
    // The log's capacity bound is the log's own.
    assert_eq!(Spec::MAX_LOG_CAPACITY, SlidingLog::<()>::MAX_CAPACITY);
    let log = Spec::new(Kind::SlidingLog, &[q]).unwrap();
    let e = log
        .with_log_capacity(Spec::MAX_LOG_CAPACITY + 1)
        .unwrap_err();
    assert_eq!(
        e.to_string(),
        "quota 0: capacity is too large for this limiter: the maximum is 1048576"
    );
    assert!(log.with_log_capacity(Spec::MAX_LOG_CAPACITY).is_ok());
    let e = Spec::new(
        Kind::SlidingLog,
        &[Quota::per_second(Spec::MAX_LOG_CAPACITY + 1)],
    )
    .unwrap_err();
    assert_eq!(
        e.to_string(),
        "quota 0: limit is too large for this limiter: the maximum is 1048576"
    );
    // Parameters of other kinds.
    let tb = Spec::new(Kind::TokenBucket, &[q]).unwrap();
    assert_eq!(
        tb.with_max_delay_ns(1).unwrap_err().to_string(),
        "token_bucket does not support a max delay"
    );
    assert_eq!(
        tb.with_log_capacity(20).unwrap_err().to_string(),
        "token_bucket does not support a log capacity"
    );
    // Parse errors keep their position.
    let e = Spec::parse(Kind::TokenBucket, "10/fortnight").unwrap_err();
    assert!(e.to_string().starts_with("invalid rate at byte 3"), "{e}");
    // The other variants' messages.
    assert_eq!(
        SpecError::Stripes {
            max: Spec::MAX_STRIPES
        }
        .to_string(),
        "stripes must be between 1 and 64"
    );
    assert_eq!(
        SpecError::Alloc { bytes: 64 }.to_string(),
        "could not allocate 64 bytes"
    );
    assert_eq!(
        SpecError::Immutable { field: "kind" }.to_string(),
        "kind cannot be changed on a live limiter; build a new limiter instead"
    );
}

#[test]
fn parse_builds_the_same_spec_as_new() {
    let a = Spec::parse(Kind::TokenBucket, "10/second; 1000/hour").unwrap();
    let b = Spec::new(
        Kind::TokenBucket,
        &[Quota::per_second(10), Quota::per_hour(1000)],
    )
    .unwrap();
    assert_eq!(a, b);
    assert_eq!(a.kind(), Kind::TokenBucket);
    assert_eq!(a.capacity(), 10);
    assert_eq!(a.max_delay_ns(), 0);
}

/// The error (or capacity) each algorithm's own constructor gives for `q`.
fn own(kind: Kind, q: Quota, max_delay: u64) -> Result<u64, ConfigError> {
    match kind {
        Kind::TokenBucket => TokenBucket::with_clock(q, ()).map(|l| l.capacity()),
        Kind::LeakyBucket => LeakyBucket::with_clock(q, ()).map(|l| l.capacity()),
        Kind::Shaper => Shaper::with_clock(q, max_delay, ()).map(|s| s.params().capacity()),
        Kind::FixedWindow => FixedWindow::with_clock(q, ()).map(|l| l.capacity()),
        Kind::SlidingWindow => SlidingWindow::with_clock(q, ()).map(|l| l.capacity()),
        // Small amounts only (the log allocates its ring).
        Kind::SlidingLog => SlidingLog::with_clock(q, ()).map(|_| q.amount()),
    }
}

fn quota() -> impl Strategy<Value = Quota> {
    let amount = prop_oneof![Just(0u64), 1u64..1_000, Just(u64::MAX), any::<u64>()];
    let period = prop_oneof![
        Just(0u64),
        1u64..1_000,
        1_000_000u64..100_000_000_000,
        Just(u64::MAX),
        any::<u64>()
    ];
    let burst = prop_oneof![
        Just(None),
        (0u64..10_000).prop_map(Some),
        any::<u64>().prop_map(Some)
    ];
    (amount, period, burst).prop_map(|(a, p, b)| {
        let q = Quota::from_nanos(a, p);
        match b {
            Some(b) => q.burst(b),
            None => q,
        }
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2_000))]

    #[test]
    fn spec_validation_agrees_with_each_algorithm(q in quota(), delay in prop_oneof![Just(0u64), any::<u64>()]) {
        for kind in Kind::ALL {
            // A log of a huge limit would allocate up to 8 MiB per case: the spec's
            // answer is checked against the bound instead.
            if kind == Kind::SlidingLog && q.amount() > 4096 && q.amount() <= Spec::MAX_LOG_CAPACITY {
                prop_assert!(Spec::new(kind, &[q]).is_ok() || q.burst_size() != q.amount() || q.period_ns() == 0);
                continue;
            }
            let delay = if kind.caps().max_delay { delay } else { 0 };
            let spec = Spec::new(kind, &[q]).and_then(|s| s.with_max_delay_ns(delay));
            if !kind.caps().burst && q.burst_size() != q.amount() {
                let unsupported = matches!(spec, Err(SpecError::Unsupported { .. }));
                prop_assert!(unsupported, "{:?}", spec);
                continue;
            }
            match (spec, own(kind, q, delay)) {
                (Ok(s), Ok(cap)) => prop_assert_eq!(s.capacity(), cap, "{} {:?}", kind, q),
                (Err(SpecError::Config { index: 0, error }), Err(e)) => prop_assert_eq!(error, e),
                (s, o) => prop_assert!(false, "{} {:?}: spec {:?}, own {:?}", kind, q, s, o),
            }
        }
    }

    #[test]
    fn a_compound_is_valid_iff_every_quota_is(qs in prop::collection::vec(quota(), 1..=Spec::MAX_LIMITS)) {
        for kind in Kind::ALL.into_iter().filter(|k| k.caps().compound) {
            let first_bad = qs.iter().position(|q| {
                Spec::new(kind, &[*q]).is_err()
            });
            let spec = Spec::new(kind, &qs);
            match first_bad {
                None => {
                    let s = spec.unwrap();
                    let min = qs.iter().map(|q| Spec::new(kind, &[*q]).unwrap().capacity()).min();
                    prop_assert_eq!(Some(s.capacity()), min);
                    prop_assert_eq!(s.quotas(), &qs[..]);
                }
                Some(i) => {
                    let e = spec.unwrap_err();
                    if let SpecError::Config { index, .. } = e {
                        prop_assert_eq!(index, i);
                    }
                }
            }
        }
    }
}
