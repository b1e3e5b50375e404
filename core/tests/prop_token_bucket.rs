//! The token bucket and the leaky bucket meter against the exact fluid model, and
//! the token-bucket invariant checked directly.

mod model;

use model::*;
use proptest::prelude::*;
use sluicegate::{LeakyBucket, Quota, TokenBucket};

/// Valid bucket quotas: rates from one unit per nanosecond to one per century,
/// periods that do and do not divide by the amount, bursts from 1 to the largest
/// the word holds.
fn quota() -> impl Strategy<Value = Quota> {
    (
        1u64..=1_000,
        length(),
        prop_oneof![4 => 1u64..=64, 1 => 65u64..100_000, 1 => Just(u64::MAX)],
    )
        .prop_map(|(amount, period, burst)| {
            let period = period.max(amount);
            let t = period.div_ceil(amount);
            Quota::from_nanos(amount, period).burst(burst.min(u64::MAX / t))
        })
}

/// Quotas for `set_quota`: mostly valid, some invalid (which must change nothing).
fn new_quota() -> impl Strategy<Value = Quota> {
    prop_oneof![
        8 => quota(),
        1 => (0u64..3, 0u64..3, 0u64..3).prop_map(|(a, p, b)| Quota::from_nanos(a, p).burst(b)),
        1 => (1u64..1_000).prop_map(|b| Quota::per_day(1).burst(b * 1_000)),
    ]
}

fn steps(reconfig: u32) -> impl Strategy<Value = Steps> {
    trace(action(new_quota(), reconfig))
}

proptest! {
    #![proptest_config(config(384))]

    /// Every decision (allowed, remaining, retry_after, reset_after, limit) equals
    /// the model's, through reconfiguration, backwards clocks and the end of time.
    #[test]
    fn token_bucket_matches_model(q in quota(), start in start_time(), steps in steps(1)) {
        let tb = TokenBucket::with_clock(q, ()).unwrap();
        let mut m = Bucket::new(&q).unwrap();
        drive(&tb, &mut m, start, &steps, |m| m.t, false, |_, _, _| Ok(()))?;
    }

    /// The meter is the same bucket; its level (rounded up) is the fluid's.
    #[test]
    fn leaky_bucket_matches_model(q in quota(), start in start_time(), steps in steps(1)) {
        let lb = LeakyBucket::with_clock(q, ()).unwrap();
        let mut m = Bucket::new(&q).unwrap();
        drive(&lb, &mut m, start, &steps, |m| m.t, false, |t, lb, m| {
            prop_assert_eq!(lb.level_at(t), m.level_units(t), "level at {}", t);
            Ok(())
        })?;
    }

    /// Over every interval [t_i, t_j] between admissions, admitted units ≤
    /// b + Δ/T ≤ b + Δ·amount/period (exact, in integers), even when the clock goes
    /// backwards; and with a forward clock, what was admitted conforms to the exact
    /// rational bucket (amount per period, no rounding): the rounding of T never
    /// admits a whole unit more.
    #[test]
    fn never_more_than_the_exact_quota(
        q in quota(),
        start in start_time(),
        steps in steps(0),
        monotone in any::<bool>(),
    ) {
        let tb = TokenBucket::with_clock(q, ()).unwrap();
        let mut m = Bucket::new(&q).unwrap();
        let admitted = drive(&tb, &mut m, start, &steps, |m| m.t, monotone, |_, _, _| Ok(()))?;
        let (amount, period, burst) = (q.amount() as u128, q.period_ns() as u128, q.burst_size() as u128);
        let t = m.t as u128;
        let mut ok = Ok(());
        for_every_interval(&admitted, |span, units| {
            let span = span as u128;
            if ok.is_ok() && units * t > burst * t + span {
                ok = Err(format!("{units} units in {span} ns > b + Δ/T"));
            }
            if ok.is_ok() && units * period > burst * period + span * amount {
                ok = Err(format!("{units} units in {span} ns > b + Δ·r/P"));
            }
        });
        prop_assert!(ok.is_ok(), "{:?} {:?}", ok, admitted);
        if monotone {
            let mut exact = RationalBucket::new(&q);
            for &(at, n) in &admitted {
                prop_assert!(exact.admit(at, n), "{} at {} does not conform to {:?}", n, at, q);
            }
        }
    }

    /// A fresh bucket admits exactly b units at once at every instant, the last
    /// ones of `u64` included (issue 11: it did not within one refill of the end),
    /// whenever its refill time is at most 2⁶³ ns; and a bucket idle for any time
    /// is full again, unless its debt reached past the horizon where time stops.
    #[test]
    fn idle_bucket_is_full(q in quota(), t in prop_oneof![
        3 => any::<u64>(),
        1 => (0u64..1_000_000_000).prop_map(|x| u64::MAX - x),
    ], idle in any::<u64>()) {
        let tb = TokenBucket::with_clock(q, ()).unwrap();
        let b = q.burst_size();
        let mut m = Bucket::new(&q).unwrap();
        let d = tb.check_n_at(b, t).unwrap();
        prop_assert_eq!(Ok(normalize(t, d)), norm(t, m.decide(t, b, true)));
        let refill = b as u128 * m.t as u128;
        if refill <= 1 << 63 {
            prop_assert!(d.allowed && d.remaining == 0, "fresh at {}: {:?}", t, d);
        }
        let later = t.saturating_add(idle).max(t.saturating_add(d.reset_after_ns));
        let p = tb.peek_n_at(b, later).unwrap();
        prop_assert_eq!(Ok(normalize(later, p)), norm(later, m.decide(later, b, false)));
        if d.allowed && d.reset_after_ns != NEVER {
            prop_assert!(p.allowed && p.remaining == 0, "idle until {}: {:?}", later, p);
            if later.min(m.horizon()) as u128 + refill <= m.horizon() as u128 {
                prop_assert_eq!(p.reset_after_ns, b * m.t);
            }
        }
    }
}
