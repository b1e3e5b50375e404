//! A keyed pool shared by two limits of different kinds: one limit's new key
//! takes over a slot of the other's while the other checks the key that slot
//! holds. Under loom a group has 2 slots, and a pool of one group (with the
//! sketch's 64 cells) probes only its one group, so every placement meets the
//! other limit's key.
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

/// A token-bucket key (1 token left, the stalest in a full pool) is evicted by a
/// fixed-window limit's new key while its owner takes its last token. Whatever
/// the interleaving, no key gets more than its quota: the token-bucket key
/// gets its last token at most once (from its slot or, evicted, from the
/// sketch), and the fixed-window keys at most their one unit.
#[test]
fn an_eviction_by_another_limit_races_the_evicted_keys_check() {
    loom::model(|| {
        let pool = one_group_pool();
        // 6 a minute: key 1 spends 5 at 0, full again at 50 s.
        let a = limit(&pool, Kind::TokenBucket, "6/min", FullPolicy::EvictStalest);
        // 1 a minute: key 2 spends it at 0, live until 60 s.
        let b = limit(&pool, Kind::FixedWindow, "1/min", FullPolicy::EvictStalest);
        assert!(admitted(&a, 1, 5, 0));
        assert!(admitted(&b, 2, 1, 0));
        let (ta, tb) = (a.clone(), b.clone());
        let ha = thread::spawn(move || admitted(&ta, 1, 1, 0));
        let hb = thread::spawn(move || admitted(&tb, 3, 1, 0));
        let (got_a, got_b) = (ha.join().unwrap(), hb.join().unwrap());
        // Key 3 is new and the pool holds key 1 as its stalest live key, with
        // nothing in the sketch yet: it is always placed.
        assert!(got_b, "the new key was turned away");
        // Key 1 had one token: the racing check and a later one get it at most once.
        let later = admitted(&a, 1, 1, 0);
        assert!(
            !(got_a && later),
            "key 1 admitted 6 + 1 units within a minute"
        );
        assert!(!admitted(&a, 1, 1, 0), "key 1 admitted beyond its quota");
        for key in [2, 3] {
            assert!(
                !admitted(&b, key, 1, 0),
                "fixed-window key {key} admitted twice"
            );
        }
        assert!(pool.live_keys_at(0).iter().sum::<usize>() <= 2);
    });
}
