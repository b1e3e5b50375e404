//! The shaper against the fluid-bucket model with a max delay: every reservation's
//! delay and decision, peeks, cancels and reconfiguration.

mod model;

use model::*;
use proptest::prelude::*;
use sluicegate::{Quota, Shaper};

fn quota() -> impl Strategy<Value = Quota> {
    (
        1u64..=100,
        length(),
        prop_oneof![4 => 1u64..=16, 1 => Just(u64::MAX)],
    )
        .prop_map(|(amount, period, burst)| {
            let period = period.max(amount);
            let t = period.div_ceil(amount);
            Quota::from_nanos(amount, period).burst(burst.min(u64::MAX / t))
        })
}

/// Max delays in multiples (permille) of the emission interval, or anything.
fn max_delay() -> impl Strategy<Value = (u64, Option<u64>)> {
    prop_oneof![
        1 => Just((0, None)),
        4 => (0u64..10_000).prop_map(|p| (p, None)),
        1 => any::<u64>().prop_map(|d| (0, Some(d))),
    ]
}

#[derive(Clone, Debug)]
enum Op {
    Reserve(Cost),
    Peek(Cost),
    /// Cancel the `i`-th newest reservation made so far.
    Cancel(usize),
    Reconfigure(Quota),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        10 => cost().prop_map(Op::Reserve),
        3 => cost().prop_map(Op::Peek),
        4 => (0usize..3).prop_map(Op::Cancel),
        1 => quota().prop_map(Op::Reconfigure),
    ]
}

/// A granted reservation as the model sees it: the state it left behind (as the
/// bucket's full instant, its canonical form) and the state a refund restores.
struct Granted {
    reservation: sluicegate::Reservation,
    after: u128,
    refund: Bucket,
    spent: bool,
}

proptest! {
    #![proptest_config(config(384))]

    /// A reservation is granted iff its scheduled start (the first instant the
    /// bucket has room) is at most the max delay away, and must wait exactly until
    /// then; a refused one's retry_after is when it would be granted. A cancel
    /// succeeds only for the latest reservation, once, and restores the bucket as
    /// it was at that reservation's instant.
    #[test]
    fn shaper_matches_model(
        q in quota(),
        (delay_permille, delay_any) in max_delay(),
        start in start_time(),
        steps in trace(op()),
    ) {
        let t_ns = q.period_ns().div_ceil(q.amount());
        let max_delay = delay_any.unwrap_or(
            (t_ns as u128 * delay_permille as u128 / 1000).min(u64::MAX as u128) as u64,
        );
        let s = Shaper::with_clock(q, max_delay, ()).unwrap();
        let mut m = Bucket::shaper(&q, max_delay).unwrap();
        let mut granted: Vec<Granted> = Vec::new();
        let mut t = start;
        let mut last = None;
        for (i, (time, op)) in steps.iter().enumerate() {
            t = advance(t, time, m.t, last.as_ref());
            let capacity = m.capacity();
            prop_assert_eq!(s.params().capacity(), capacity);
            match op {
                Op::Reserve(c) => {
                    let n = resolve(c, capacity);
                    let before = m.clone();
                    let want = m.decide(t, n, true);
                    let got = s.reserve_n_at(n, t);
                    let got_decision = got.as_ref().map(|r| *r.decision()).map_err(|e| *e);
                    prop_assert_eq!(norm(t, got_decision), norm(t, want), "step {} n={} t={}", i, n, t);
                    if let Ok(r) = got {
                        let d = *r.decision();
                        // Issue 11: `remaining` counts delayed units too, so `limit`
                        // is the largest grant, b + ⌊max_delay / T⌋.
                        prop_assert!(d.remaining <= d.limit && d.limit == capacity, "{:?}", d);
                        let delay = if d.allowed { before.delay(t, n) } else { 0 };
                        prop_assert_eq!(r.delay_ns(), delay, "delay at step {}", i);
                        prop_assert!(delay <= max_delay);
                        last = Some(d);
                        if d.allowed && n > 0 {
                            let mut refund = before.clone();
                            refund.commit(t, 0);
                            granted.push(Granted { reservation: r, after: m.full_instant(), refund, spent: false });
                        }
                    }
                }
                Op::Peek(c) => {
                    let n = resolve(c, capacity);
                    let want = m.decide(t, n, false);
                    let got = s.peek_n_at(n, t);
                    prop_assert_eq!(norm(t, got), norm(t, want), "peek at step {} n={} t={}", i, n, t);
                    if let Ok(d) = got {
                        last = Some(d);
                    }
                }
                Op::Cancel(back) => {
                    let Some(idx) = granted.len().checked_sub(1 + back) else { continue };
                    let g = &mut granted[idx];
                    let want = !g.spent && g.after == m.full_instant();
                    let got = s.cancel_at(&mut g.reservation, t);
                    prop_assert_eq!(got, want, "cancel of reservation {} at step {}", idx, i);
                    if want {
                        g.spent = true;
                        let (slack, t_now, burst) = (m.slack, m.t, m.burst);
                        m = g.refund.clone();
                        (m.slack, m.t, m.burst) = (slack, t_now, burst);
                    }
                }
                Op::Reconfigure(q2) => {
                    prop_assert_eq!(s.set_quota(q2), m.reconfigure(q2));
                }
            }
        }
    }

    /// A stream of unit reservations at one instant is granted with delays
    /// 0 (×burst), T, 2T, … up to the max delay, then refused.
    #[test]
    fn delays_are_evenly_spaced(q in quota(), k in 0u64..20, t in start_time()) {
        let t_ns = q.period_ns().div_ceil(q.amount());
        let b = q.burst_size().min(64);
        let q = q.burst(b);
        let max_delay = t_ns.saturating_mul(k);
        let s = Shaper::with_clock(q, max_delay, ()).unwrap();
        // Time stops one refill (plus the max delay, at most 2⁶³) before the end
        // of time: the schedule always fits after it, unless that refill is longer.
        let k = (b as u128 * t_ns as u128 + max_delay as u128).min(1 << 63);
        let at = t.min((u64::MAX as u128 - k) as u64);
        let room = (u64::MAX - at) / t_ns; // reservations that fit before the end of time
        let expected = (b + max_delay / t_ns).min(room);
        for j in 0..expected {
            let r = s.reserve_at(t);
            prop_assert!(r.granted(), "reservation {} of {}", j, expected);
            prop_assert_eq!(r.delay_ns(), j.saturating_sub(b - 1).saturating_mul(t_ns));
        }
        prop_assert!(!s.reserve_at(t).granted());
    }
}
