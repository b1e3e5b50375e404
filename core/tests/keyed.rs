//! Keyed tables against a model (a map of single limiters), under floods, and
//! under threads.
#![cfg(feature = "std")]

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

mod common;

use common::{SeededTable, fixed_hasher, keyed_traffic, seeded_table};
use proptest::prelude::*;
use sluicegate::keyed::{DROP_SKEW_NS, FullPolicy, KeyedLimiter};
use sluicegate::{Algorithm, Fixed, Gcra, Limiter, Quota, Sliding};

/// Replays `ops` through a keyed table and through one single limiter per key;
/// with room for every key, every decision must be identical.
fn same_as_map_of_limiters<A: Algorithm>(quota: Quota, ops: &[(u8, u64, u64, bool)]) {
    let table = seeded_table::<A>(quota, 4096, 9, FullPolicy::EvictStalest);
    let mut model: HashMap<u8, Limiter<A, ()>> = HashMap::new();
    let mut now = 0u64;
    for &(key, dt, n, consume) in ops {
        now = now.saturating_add(dt);
        let reference = model
            .entry(key)
            .or_insert_with(|| Limiter::from_params(A::params(&quota).unwrap(), ()));
        let (got, want) = if consume {
            (table.check_n_at(&key, n, now), reference.check_n_at(n, now))
        } else {
            (table.peek_n_at(&key, n, now), reference.peek_n_at(n, now))
        };
        assert_eq!(got, want, "key {key} n {n} at {now} (consume {consume})");
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: if cfg!(miri) { 2 } else { 96 }, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn token_bucket_table_matches_per_key_limiters(ops in keyed_traffic(24, 7, 200)) {
        same_as_map_of_limiters::<Gcra>(Quota::per_second(4).burst(5), &ops);
    }

    #[test]
    fn fixed_window_table_matches_per_key_limiters(ops in keyed_traffic(24, 7, 200)) {
        same_as_map_of_limiters::<Fixed>(Quota::per_second(6), &ops);
    }

    #[test]
    fn sliding_window_table_matches_per_key_limiters(ops in keyed_traffic(24, 7, 200)) {
        same_as_map_of_limiters::<Sliding>(Quota::per_second(6), &ops);
    }
}

/// A one-group table (8 slots, probing only itself) with 8 live keys: the
/// policies decide what the 9th key gets.
fn full_table(policy: FullPolicy) -> SeededTable<Gcra> {
    full_table_of(policy, Quota::per_minute(1))
}

/// [`full_table`] with another quota.
fn full_table_of(policy: FullPolicy, quota: Quota) -> SeededTable<Gcra> {
    let t = seeded_table::<Gcra>(quota, 8, 1, policy);
    for k in 0..8u32 {
        assert!(t.check_at(&k, k as u64).allowed);
    }
    assert_eq!(t.len_at(10), 8);
    t
}

#[test]
fn full_table_reject_keeps_every_tracked_key() {
    let t = full_table(FullPolicy::Reject);
    let d = t.check_at(&100u32, 10);
    assert!(!d.allowed);
    // The stalest entry (key 0, charged at t = 0) frees first: 60 s after it,
    // once fresh for the drop margin.
    assert_eq!(d.retry_after_ns, 60_000_000_000 - 10 + DROP_SKEW_NS);
    for k in 0..8u32 {
        assert!(!t.check_at(&k, 10).allowed, "key {k} lost its state");
    }
    assert_eq!(t.stats().rejected, 1);
    // Once key 0's bucket is full again (for the drop margin), its slot is
    // reused losslessly; not before.
    assert!(!t.check_at(&100u32, 60_000_000_000).allowed);
    assert!(t.check_at(&100u32, 60_000_000_000 + DROP_SKEW_NS).allowed);
    assert_eq!(t.stats().reused, 1);
}

#[test]
fn full_table_allow_unlimited_tracks_nothing_new() {
    let t = full_table(FullPolicy::AllowUnlimited);
    assert!(t.check_at(&100u32, 10).allowed);
    assert!(t.check_at(&100u32, 10).allowed); // untracked: not limited
    assert_eq!(t.stats().unlimited, 2);
    for k in 0..8u32 {
        assert!(!t.check_at(&k, 10).allowed);
    }
}

#[test]
fn full_table_evicts_the_stalest() {
    let t = full_table(FullPolicy::EvictStalest);
    assert!(t.check_at(&100u32, 10).allowed);
    assert!(!t.check_at(&100u32, 10).allowed); // now tracked
    assert_eq!(t.stats().evicted, 1);
    // Key 0 was the stalest (closest to full): evicted, but remembered by the
    // table's sketch, it resumes its debt instead of starting over (issue 11)...
    assert!(!t.check_at(&0u32, 11).allowed);
    // ...until its minute is over.
    assert!(t.check_at(&0u32, 60_000_000_000).allowed);
}

#[test]
fn fresh_slots_are_reused_so_memory_never_grows() {
    // 64 slots, 10 000 distinct keys over time, each idle long enough to go fresh.
    let t = seeded_table::<Gcra>(Quota::per_second(1), 64, 5, FullPolicy::Reject);
    for k in 0..10_000u64 {
        let now = k * 1_000_000_000; // one key per second: the previous ones are full again
        assert!(t.check_at(&k, now).allowed);
        assert!(!t.check_at(&k, now).allowed);
    }
    let s = t.stats();
    assert_eq!(s.rejected, 0);
    assert_eq!(s.inserted + s.reused, 10_000);
    assert!(s.inserted <= 64);
}

#[test]
fn adversarial_keys_do_not_stay_in_one_group() {
    // Keys that all land in group 0 under one seed...
    let a = seeded_table::<Gcra>(Quota::per_minute(1), 1024, 77, FullPolicy::Reject);
    // The attacker's best case: it knows the seed and searches for keys whose two
    // candidate groups are both among groups 0 and 1.
    let crafted: Vec<u64> = (0u64..)
        .filter(|&k| in_groups_zero_and_one(k))
        .take(64)
        .collect();
    // ...overflow that group's window under that seed:
    let rejected = crafted
        .iter()
        .filter(|k| !a.check_at(*k, 0).allowed)
        .count();
    assert!(rejected >= 64 - 16, "only {rejected} rejected");
    // ...but a table with its own random seed spreads them: none is rejected.
    let b = KeyedLimiter::<Gcra, ()>::with_clock(Quota::per_minute(1), 1024, ())
        .unwrap()
        .with_policy(FullPolicy::Reject);
    let rejected = crafted
        .iter()
        .filter(|k| !b.check_at(*k, 0).allowed)
        .count();
    assert_eq!(rejected, 0, "random seed still let crafted keys collide");
}

/// Whether both candidate groups of `key` in a 128-group table with seed 77 are
/// groups 0 and 1 (the same multiply-shift and second mix the table uses).
fn in_groups_zero_and_one(key: u64) -> bool {
    use std::hash::BuildHasher;
    let h = fixed_hasher(77).hash_one(key);
    let home = ((h as u128 * 128) >> 64) as u64;
    let mixed = h.rotate_left(32).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    let mut other = ((mixed as u128 * 128) >> 64) as u64;
    if other == home {
        other = home + 1;
    }
    home <= 1 && other <= 1
}

#[test]
fn threads_never_over_admit_a_key() {
    let t =
        Arc::new(KeyedLimiter::<Gcra, ()>::with_clock(Quota::per_minute(50), 1 << 12, ()).unwrap());
    let admitted: Arc<Vec<AtomicU64>> = Arc::new((0..64).map(|_| AtomicU64::new(0)).collect());
    let threads: Vec<_> = (0..4)
        .map(|_| {
            let t = t.clone();
            let admitted = admitted.clone();
            std::thread::spawn(move || {
                for round in 0..200u64 {
                    for key in 0..64u64 {
                        if t.check_at(&key, round).allowed {
                            admitted[key as usize].fetch_add(1, Ordering::Relaxed);
                        }
                    }
                }
            })
        })
        .collect();
    for th in threads {
        th.join().unwrap();
    }
    // 4 threads × 200 tries per key within 200 ns: exactly the burst each.
    for (key, a) in admitted.iter().enumerate() {
        assert_eq!(a.load(Ordering::Relaxed), 50, "key {key}");
    }
}

/// A caller whose clock is ahead (another thread's later read, another
/// process) must not drop a key's state that a caller whose clock lags still
/// needs: the lagging check would find the key gone and start it fresh.
#[test]
fn a_reuser_whose_clock_is_ahead_never_drops_a_state_a_lagging_check_needs() {
    for policy in [FullPolicy::Reject, FullPolicy::EvictStalest] {
        // 1/s, burst 1: key k, charged at 0, is full again at 1 s.
        let t = full_table_of(policy, Quota::per_second(1));
        let full_again = 1_000_000_000;
        // A new key at 1 s + 30 ms, by a clock ahead of the others.
        let _ = t.check_at(&100u32, full_again + 30_000_000);
        // Every old key, checked at 0.99 s by a clock that lags: still limited
        // (its own single limiter would deny it), whichever slot went.
        for k in 0..8u32 {
            assert!(
                !t.check_at(&k, full_again - 10_000_000).allowed,
                "{policy:?}: key {k} admitted early"
            );
        }
    }
}
