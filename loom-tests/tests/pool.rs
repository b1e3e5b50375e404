//! A keyed pool shared by two limits of different kinds: one limit's new key
//! takes over a slot of the other's while the other checks the key that slot
//! holds, and two limits race for the last free slot. Under loom a group has 2
//! slots, and a pool of one group (with the sketch's 64 cells) probes only its
//! one group, so every placement meets the other limit's key.
//!
//! The limits turn keys away rather than evict them. An eviction folds the
//! evicted state into three sketch cells picked from the key's fingerprint,
//! and a pool seeds its hasher afresh from the OS each time it is built: in
//! the executions where two of the three picks coincide, the fold makes one
//! compare-and-swap fewer, and loom stops ("Is the model fully
//! deterministic?"). A model of an eviction racing the evicted key's check
//! needs a pool with a caller's hasher.
#![cfg(loom)]

use loom::sync::Arc;
use loom::thread;
use sluicegate::keyed::{AnyKeyed, FullPolicy, Group, Pool, Slot};
use sluicegate::{Kind, Spec};

const SEC: u64 = 1_000_000_000;

/// A pool of one group of 2 slots.
fn one_group_pool() -> Pool {
    let bytes = core::mem::size_of::<Group>() + 64 * core::mem::size_of::<Slot>();
    let pool = Pool::with_memory(bytes).unwrap();
    assert_eq!(pool.capacity(), 2);
    pool
}

fn limit(pool: &Pool, kind: Kind, rate: &str, policy: FullPolicy) -> Arc<AnyKeyed<()>> {
    let spec = Spec::parse(kind, rate).unwrap();
    Arc::new(
        AnyKeyed::in_pool(pool, &spec, 16, ())
            .unwrap()
            .with_policy(policy),
    )
}

fn admitted(t: &AnyKeyed<()>, key: u64, n: u64, now: u64) -> bool {
    t.check_n_at(&key, n, now).unwrap().decision.allowed
}

/// A token-bucket key whose state went fresh is taken over by a fixed-window
/// limit's new key (judged fresh through the pool's registry) while its owner
/// spends its whole burst on it. The pool is full otherwise and both limits
/// turn a key away rather than evict (no sketch: every interleaving runs the
/// same operations): exactly one of the two gets the slot, and the winner's key
/// is tracked with its whole charge.
#[test]
fn a_fresh_slot_taken_by_another_limit_races_its_owners_check() {
    loom::model(|| {
        let pool = one_group_pool();
        // 2 a minute: key 1 spends one token at 0 and is full again at 30 s.
        let a = limit(&pool, Kind::TokenBucket, "2/min", FullPolicy::Reject);
        // 1 a minute: key 2 spends it at 0 and stays live until 60 s.
        let b = limit(&pool, Kind::FixedWindow, "1/min", FullPolicy::Reject);
        assert!(admitted(&a, 1, 1, 0));
        assert!(admitted(&b, 2, 1, 0));
        let now = 40 * SEC;
        let (ta, tb) = (a.clone(), b.clone());
        let ha = thread::spawn(move || admitted(&ta, 1, 2, now));
        let hb = thread::spawn(move || admitted(&tb, 3, 1, now));
        let (got_a, got_b) = (ha.join().unwrap(), hb.join().unwrap());
        assert!(got_a != got_b, "one slot, two claims: a {got_a}, b {got_b}");
        // The winner is tracked with its whole charge; the loser was turned away
        // and holds nothing.
        if got_a {
            assert!(!admitted(&a, 1, 1, now), "key 1 lost its charge");
        } else {
            assert!(!admitted(&b, 3, 1, now), "key 3 lost its charge");
        }
        assert!(
            !admitted(&b, 2, 1, now),
            "key 2 of the fixed window spent its minute"
        );
        let live = pool.live_keys_at(now);
        assert_eq!(live.iter().sum::<usize>(), 2);
    });
}

/// The pool's last free slot, raced by the first requests of two limits of
/// different kinds (one of them for the key the other's pool slot holds under
/// its own limit): exactly one is placed, the other is turned away, and no key
/// of either limit reads the other's state.
#[test]
fn two_limits_race_for_the_last_free_slot() {
    loom::model(|| {
        let pool = one_group_pool();
        let a = limit(&pool, Kind::SlidingWindow, "2/min", FullPolicy::Reject);
        let b = limit(&pool, Kind::LeakyBucket, "3/min", FullPolicy::Reject);
        // Key 1 of the sliding window takes one slot, with one unit left.
        assert!(admitted(&a, 1, 1, 0));
        let (ta, tb) = (a.clone(), b.clone());
        // Key 2 of the sliding window, key 1 of the leaky bucket (the same key
        // as the sliding window's, another limit: another state).
        let ha = thread::spawn(move || admitted(&ta, 2, 2, 0));
        let hb = thread::spawn(move || admitted(&tb, 1, 3, 0));
        let (got_a, got_b) = (ha.join().unwrap(), hb.join().unwrap());
        assert!(
            got_a != got_b,
            "one free slot, two claims: a {got_a}, b {got_b}"
        );
        // The sliding window's key 1 kept its state: one unit, not two.
        assert!(!admitted(&a, 1, 2, 0));
        assert!(admitted(&a, 1, 1, 0));
        // The winner is tracked with its whole charge.
        if got_a {
            assert!(!admitted(&a, 2, 1, 0), "key 2 lost its charge");
        } else {
            assert!(
                !admitted(&b, 1, 1, 0),
                "the leaky bucket's key 1 lost its charge"
            );
        }
        assert_eq!(pool.live_keys_at(0).iter().sum::<usize>(), 2);
    });
}
