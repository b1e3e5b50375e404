//! Sliding windows in a full keyed table (their `join` folds evicted keys into
//! the sketch, both word layouts), and receipts: what an admission took, given
//! back exactly, never more, from racing threads.
#![cfg(all(feature = "std", not(miri)))]

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};

use proptest::prelude::*;
use sluicegate::keyed::{FullPolicy, Keyed};
use sluicegate::{Algorithm, AnyKeyed, AnyLimiter, Kind, Limiter, Quota, Receipt, Sliding, Spec};

const SEC: u64 = 1_000_000_000;

/// A word reached by charging `ops` (gap, cost) from fresh; a gap may go back.
fn word(p: &<Sliding as Algorithm>::Params, start: u64, ops: &[(i64, u64)]) -> (u64, u64) {
    let (mut w, mut now) = (0u64, start);
    for &(dt, n) in ops {
        now = now.saturating_add_signed(dt);
        if let Some(next) = Sliding::decide(p, w, now, n.min(p.limit())).next {
            w = next;
        }
    }
    (w, now)
}

/// From the join, nothing is admitted that `a` or `b` would deny, now or after
/// any sequence of admissions (each charged to all three), at later times.
fn join_dominates(quota: Quota, a_ops: &[(i64, u64)], b_ops: &[(i64, u64)], later: &[(u64, u64)]) {
    let p = Sliding::params(&quota).unwrap();
    let base = 1_000 * SEC + 7;
    let (mut a, ta) = word(&p, base, a_ops);
    let (mut b, tb) = word(&p, base, b_ops);
    let mut now = ta.max(tb);
    let mut j = Sliding::join(&p, a, b, now).unwrap();
    for &(dt, n) in later {
        now = now.saturating_add(dt);
        let n = n.min(p.limit());
        let sj = Sliding::decide(&p, j, now, n);
        let (sa, sb) = (
            Sliding::decide(&p, a, now, n),
            Sliding::decide(&p, b, now, n),
        );
        if sj.decision.allowed {
            assert!(
                sa.decision.allowed && sb.decision.allowed,
                "join admitted {n} at {now}"
            );
            assert!(sj.decision.remaining <= sa.decision.remaining.min(sb.decision.remaining));
            j = sj.next.unwrap_or(j);
            a = sa.next.unwrap_or(a);
            b = sb.next.unwrap_or(b);
        }
    }
}

fn ops(scale: i64) -> impl Strategy<Value = Vec<(i64, u64)>> {
    prop::collection::vec(((-scale / 2)..(2 * scale), 0u64..8), 0..24)
}

fn later(scale: u64) -> impl Strategy<Value = Vec<(u64, u64)>> {
    prop::collection::vec((0..scale, 1u64..6), 1..40)
}

/// A table of 16 slots that must evict, against one limiter per key charged
/// only with what the table admitted.
fn never_over_admits(quota: Quota, ops: &[(u8, u64, u64)]) {
    let hasher = foldhash::fast::FixedState::with_seed(5);
    let table = Keyed::<Sliding, (), _, _>::with_capacity_and_hasher(quota, 16, hasher, ())
        .unwrap()
        .with_policy(FullPolicy::EvictStalest);
    let mut own: HashMap<u8, Limiter<Sliding, ()>> = HashMap::new();
    let mut now = 0u64;
    for &(key, dt, n) in ops {
        now += dt;
        let n = n.min(quota.amount());
        let reference = own
            .entry(key)
            .or_insert_with(|| Limiter::from_params(Sliding::params(&quota).unwrap(), ()));
        if table.check_n_at(&key, n, now).unwrap().allowed {
            assert!(
                reference.check_n_at(n, now).unwrap().allowed,
                "key {key} over-admitted: {n} at {now}"
            );
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn join_dominates_whole_index(a in ops(SEC as i64), b in ops(SEC as i64), l in later(SEC)) {
        join_dominates(Quota::per_second(20), &a, &b, &l);
    }

    #[test]
    fn join_dominates_wide_layout(a in ops(SEC as i64), b in ops(SEC as i64), l in later(SEC)) {
        // 20,000/s does not fit next to the whole index: the wrapped one.
        let q = Quota::per_second(20_000);
        prop_assert!(Sliding::params(&q).unwrap().wraps());
        join_dominates(q, &a, &b, &l);
    }

    #[test]
    fn join_dominates_one_ms_windows(a in ops(3_000_000), b in ops(3_000_000), l in later(3_000_000)) {
        let q = Quota::from_nanos(20_000, 1_000_000);
        prop_assert!(Sliding::params(&q).unwrap().wraps());
        join_dominates(q, &a, &b, &l);
    }

    #[test]
    fn eviction_never_over_admits_a_sliding_window_key(
        ops in prop::collection::vec(
            (0u8..64, prop_oneof![Just(0u64), 0u64..20_000_000, 0u64..600_000_000], 1u64..5),
            1..400,
        )
    ) {
        never_over_admits(Quota::per_second(6), &ops);
        never_over_admits(Quota::per_second(20_000), &ops);
    }
}

#[test]
fn a_full_sliding_window_table_evicts_and_keeps_every_limit() {
    for limit in [3, 20_000] {
        let spec = Spec::parse(Kind::SlidingWindow, &format!("{limit}/minute")).unwrap();
        let t = AnyKeyed::with_clock(&spec, 16, ()).unwrap();
        // Keys whose sketch cells are all live start limited (innocent keys
        // limited early); the others take their whole limit.
        let admitted: Vec<u32> = (0..64u32)
            .filter(|k| t.check_n_at(k, limit, 0).unwrap().decision.allowed)
            .collect();
        let s = t.stats();
        assert!(
            admitted.len() > 16 && s.evicted > 0 && s.rejected == 0,
            "{s:?}"
        );
        // Every admitted key, evicted or not, still has its window of debt.
        for now in [1, 30 * SEC, 61 * SEC] {
            for k in &admitted {
                let d = t.peek_n_at(k, limit, now).unwrap().decision;
                assert!(!d.allowed, "key {k} at {now}");
            }
        }
    }
}

/// A flood of new keys at four times the table's size, each spending its whole
/// window, from 1 and 4 threads: a victim checked all the time is admitted at
/// most the limit in every aligned window (the sliding counter's own bound).
#[test]
fn a_flood_never_lifts_a_sliding_window_victims_limit() {
    const LIMIT: u64 = 10;
    const MS: u64 = 1_000_000;
    for threads in [1u64, 4] {
        for capacity in [16usize, 256] {
            let spec = Spec::parse(Kind::SlidingWindow, "10/second").unwrap();
            let t = AnyKeyed::with_clock(&spec, capacity, ()).unwrap();
            let per_window: Vec<AtomicU64> = (0..4).map(|_| AtomicU64::new(0)).collect();
            std::thread::scope(|s| {
                for th in 0..threads {
                    let (t, per_window) = (&t, &per_window);
                    s.spawn(move || {
                        let flood_per_ms = (capacity as u64 * 4 / 100).max(1) / threads + 1;
                        for ms in 0..4_000u64 {
                            let now = ms * MS;
                            for f in 0..flood_per_ms {
                                let key = (th << 48) | (ms << 16) | f;
                                let _ = t.check_n_at(&key, LIMIT, now);
                            }
                            if t.check_n_at(&u64::MAX, 1, now).unwrap().decision.allowed {
                                per_window[(now / SEC) as usize].fetch_add(1, Ordering::Relaxed);
                            }
                        }
                    });
                }
            });
            assert!(t.stats().evicted > 0, "{:?}", t.stats());
            for (w, c) in per_window.iter().enumerate() {
                let c = c.load(Ordering::Relaxed);
                assert!(
                    c <= LIMIT,
                    "threads {threads} capacity {capacity} window {w}: {c}"
                );
            }
        }
    }
}

/// Two limiters charged one after the other, the first refunded when the second
/// denies (a policy's all-or-nothing), from four threads: the first never holds
/// more than the requests both admitted (no over-admission, no lost refund).
#[test]
fn refunds_under_races_are_exact() {
    for kind in [Kind::FixedWindow, Kind::SlidingWindow, Kind::TokenBucket] {
        let first_spec = Spec::parse(kind, "1000/minute; 2000/hour").unwrap();
        let second_spec = Spec::parse(kind, "300/minute").unwrap();
        let keyed = AnyKeyed::with_clock(&first_spec, 64, ()).unwrap();
        let one = AnyLimiter::with_clock(&first_spec, ()).unwrap();
        let second = AnyLimiter::with_clock(&second_spec, ()).unwrap();
        let admitted = AtomicU64::new(0);
        std::thread::scope(|s| {
            for th in 0..4u64 {
                let (keyed, one, second, admitted) = (&keyed, &one, &second, &admitted);
                s.spawn(move || {
                    let (mut ra, mut rb) = (Receipt::empty(), Receipt::empty());
                    for i in 0..2_000u64 {
                        let n = 1 + (i + th) % 3;
                        let a = keyed.check_n_at_receipt("k", n, 0, &mut ra).unwrap();
                        let b = one.check_n_at_receipt(n, 0, &mut rb).unwrap();
                        let c = second.check_n_at(n, 0).unwrap();
                        if a.decision.allowed && b.decision.allowed && c.decision.allowed {
                            admitted.fetch_add(n, Ordering::Relaxed);
                        } else {
                            keyed.refund(&mut ra, 0);
                            one.refund(&mut rb, 0);
                        }
                    }
                });
            }
        });
        let admitted = admitted.into_inner();
        assert!(admitted <= 300, "{kind}: {admitted}");
        let used = |r: u64| 1000 - r;
        let k = keyed.peek_n_at("k", 0, 0).unwrap().decision.remaining;
        let o = one.peek_n_at(0, 0).unwrap().decision.remaining;
        assert_eq!((used(k), used(o)), (admitted, admitted), "{kind}");
    }
}

#[test]
fn a_refund_never_gives_back_more_than_it_took() {
    let spec = Spec::parse(Kind::TokenBucket, "4/minute").unwrap();
    let t = AnyKeyed::with_clock(&spec, 64, ()).unwrap();
    let mut r = Receipt::empty();
    t.check_n_at_receipt("k", 1, 0, &mut r).unwrap();
    assert!(t.check_n_at("k", 3, 0).unwrap().decision.allowed);
    t.refund(&mut r, 0);
    t.refund(&mut r, 0);
    assert_eq!(t.peek_n_at("k", 1, 0).unwrap().decision.remaining, 0);
    // The receipt was spent by the first refund: only one unit came back.
    assert!(t.check_n_at("k", 1, 0).unwrap().decision.allowed);
    assert!(!t.check_n_at("k", 1, 0).unwrap().decision.allowed);
    // Another table's receipt gives nothing back.
    let other = AnyKeyed::with_clock(&spec, 64, ()).unwrap();
    other.check_n_at_receipt("k", 1, 0, &mut r).unwrap();
    t.refund(&mut r, 0);
    assert_eq!(r.units(), 1, "still other's to give back");
    assert!(!t.check_n_at("k", 1, 0).unwrap().decision.allowed);
}

#[test]
fn an_evicted_key_gets_nothing_back() {
    let spec = Spec::parse(Kind::FixedWindow, "2/minute").unwrap();
    let t = AnyKeyed::with_clock(&spec, 8, ()).unwrap();
    let mut r = Receipt::empty();
    t.check_n_at_receipt(&0u32, 2, 0, &mut r).unwrap();
    for k in 1..200u32 {
        t.check_n_at(&k, 2, 0).unwrap();
    }
    assert!(t.stats().evicted > 0);
    t.refund(&mut r, 0);
    // Key 0 is out of the table (or back from the sketch): still exhausted.
    assert!(!t.check_n_at(&0u32, 1, 0).unwrap().decision.allowed);
}
