//! The keyed table: slot claims, reuse of an idle slot while its old key is still
//! being checked, eviction and the full-table policies — no over-admission, no
//! lost update, never more keys than slots. Under loom a group has 2 slots and a
//! 2-slot table probes only its one group.
#![cfg(loom)]

use loom::sync::Arc;
use sluicegate::keyed::{crash, FullPolicy, Group, Keyed};
use sluicegate::{Gcra, Quota};
use sluicegate_loom_tests::{shared, spawn_all};

type Table = Keyed<Gcra, (), Box<[Group]>, foldhash::fast::FixedState>;

const SEC: u64 = 1_000_000_000;

fn table(quota: Quota, policy: FullPolicy) -> Arc<Table> {
    let hasher = foldhash::fast::FixedState::with_seed(11);
    shared(Keyed::with_capacity_and_hasher(quota, 2, hasher, ()).map(|t| t.with_policy(policy)))
}

/// [`table`] with the two slots taken: `spent` units of key 1 and of key 2, at 0.
fn full_table(quota: Quota, policy: FullPolicy, spent: [u64; 2]) -> Arc<Table> {
    let t = table(quota, policy);
    for (key, n) in [(1u64, spent[0]), (2u64, spent[1])] {
        assert!(t.check_n_at(&key, n, 0).is_ok_and(|d| d.allowed));
    }
    t
}

/// Races `checks` (key, cost), each on its own thread, all at `now`; returns
/// whether each was admitted, in order.
fn race(t: &Arc<Table>, now: u64, checks: Vec<(u64, u64)>) -> Vec<bool> {
    let t = t.clone();
    spawn_all(checks, move |(key, n)| {
        t.check_n_at(&key, n, now).is_ok_and(|d| d.allowed)
    })
}

#[test]
fn first_requests_of_one_key_share_one_slot() {
    loom::model(|| {
        let t = table(Quota::per_minute(1), FullPolicy::Reject);
        let got = race(&t, 0, vec![(7, 1), (7, 1)]);
        // One token: exactly one of the two racing first requests wins...
        assert_eq!(got.iter().filter(|x| **x).count(), 1);
        // ...and the key is in exactly one slot.
        assert_eq!(t.len_at(0), 1);
        assert_eq!(t.stats().inserted, 1);
        assert!(!t.check_at(&7u64, 0).allowed);
    });
}

/// Placement takes no lock: three racing first requests of one key, each
/// claiming a slot as pending and validating against the others, still leave the
/// key in one slot, and admit exactly its quota between them.
#[test]
fn three_first_requests_of_one_key_place_it_once() {
    loom::model(|| {
        let t = table(Quota::per_minute(2), FullPolicy::Reject);
        let got = race(&t, 0, vec![(7, 1), (7, 1), (7, 1)]);
        assert_eq!(got.iter().filter(|x| **x).count(), 2);
        assert_eq!(t.len_at(0), 1);
        assert!(!t.check_at(&7u64, 0).allowed);
    });
}

/// The race the flood matrix once lost a victim's token to: one placer claims
/// the later slot (empty) and validates; the other then claims the earlier one
/// (a fresh key's) and, validating, reads the first claim as pending — but the
/// first commits before the second's withdrawing CAS, which fails. The second
/// must look again and find the key committed, not commit a second slot.
/// Three preemptions are needed to reach it, one more than the models' default.
#[test]
fn a_failed_withdrawal_of_a_committed_claim_is_seen() {
    let mut model = loom::model::Builder::new();
    model.preemption_bound = Some(3);
    model.check(|| {
        // Key 9 took the one token at 0 and is full again at 60 s: its slot (the
        // earlier one) is fresh, the later one empty.
        let t = table(Quota::per_minute(1), FullPolicy::Reject);
        assert!(t.check_at(&9u64, 0).allowed);
        let now = 60 * SEC;
        let got = race(&t, now, vec![(7, 1), (7, 1)]);
        assert_eq!(got.iter().filter(|x| **x).count(), 1, "{got:?}");
        assert_eq!(t.len_at(now), 1);
        assert!(!t.check_at(&7u64, now).allowed);
    });
}

#[test]
fn two_new_keys_claim_two_slots() {
    loom::model(|| {
        let t = table(Quota::per_minute(1), FullPolicy::Reject);
        let got = race(&t, 0, vec![(1, 1), (2, 1)]);
        assert_eq!(got, [true, true]);
        assert_eq!(t.len_at(0), 2);
        assert!(!t.check_at(&1u64, 0).allowed);
        assert!(!t.check_at(&2u64, 0).allowed);
    });
}

#[test]
fn reuse_of_an_idle_slot_races_a_check_of_its_old_key() {
    loom::model(|| {
        // Burst 2 per minute. Key 1 took a token at 0 and is full again at 30 s;
        // key 2 took both and still owes 20 s at 40 s. At 40 s key 1's slot is
        // fresh and key 2's is live.
        let t = full_table(Quota::per_minute(2), FullPolicy::Reject, [1, 2]);
        let now = 40 * SEC;
        let got = race(&t, now, vec![(1, 2), (3, 2)]);
        // Only one of keys 1 and 3 fits in the one reusable slot; the table is
        // full of live state after that, and Reject turns the other away.
        assert_eq!(got.iter().filter(|x| **x).count(), 1);
        assert_eq!(t.len_at(now), 2);
        // No lost update: whoever won is tracked and exhausted.
        for (key, won) in [(1u64, got[0]), (3u64, got[1])] {
            if won {
                assert!(!t.check_at(&key, now).allowed, "key {key} lost its update");
            }
        }
        // Key 2 kept its state: 1⅓ tokens, not a full bucket of 2.
        assert!(t.peek_n_at(&2u64, 2, now).is_ok_and(|d| !d.allowed));
    });
}

#[test]
fn eviction_races_a_check_of_the_evicted_key() {
    loom::model(|| {
        // Key 1 holds 10 s of debt (stalest), key 2 holds 60 s: the table is full.
        let t = full_table(Quota::per_minute(6), FullPolicy::EvictStalest, [1, 6]);
        let now = SEC;
        let got = race(&t, now, vec![(1, 1), (3, 6)]);
        assert!(got[1], "the new key is always placed under EvictStalest");
        // Never more keys than slots; key 3 is tracked with its whole charge.
        assert_eq!(t.len_at(now), 2);
        assert!(!t.check_at(&3u64, now).allowed);
        // Key 1 is evicted once (if its check ran first) or, if the eviction ran
        // first, its re-placement evicts the then-stalest entry: once or twice.
        let s = t.stats();
        assert!(s.evicted == 1 || s.evicted == 2, "{s:?}");
        if got[0] && s.evicted == 1 {
            // Key 1 was checked, then evicted: key 2 survived with its debt.
            assert!(!t.check_at(&2u64, now).allowed);
        }
    });
}

#[test]
fn an_evicted_key_resumes_its_state_whatever_the_interleaving() {
    loom::model(|| {
        // Burst 6 per minute. Key 1 has 1 token left, key 2 none: the table (2
        // slots) is full, and key 1 is the stalest. A new key evicts it while
        // key 1 takes its last token: in every interleaving key 1 gets exactly
        // that one token back, never a fresh bucket (issue 11).
        let t = full_table(Quota::per_minute(6), FullPolicy::EvictStalest, [5, 6]);
        let got = race(&t, 0, vec![(1, 1), (3, 1)]);
        assert_eq!(got, [true, true]);
        // Six tokens spent: evicted before, during or after its check, key 1 is empty.
        assert!(!t.check_at(&1u64, 0).allowed);
        assert!(!t.check_at(&2u64, 0).allowed);
        assert!(t.stats().evicted >= 1);
    });
}

/// A placer killed between any two steps of its placement ([`crash::Point`]:
/// after evicting a key into the sketch without claiming its slot, with its
/// claim pending, or validated but not committed) leaves nothing that lifts a
/// limit or blocks a check, whatever a concurrent check of the evicted key does
/// meanwhile: the evicted key gets at most its own limit's units, before and
/// after; the other key keeps its state; the dead placer's key can be checked
/// again (its pending claim, if any, withdrawn after a bounded wait).
#[test]
fn a_placer_killed_between_any_two_steps_leaves_every_limit_whole() {
    for point in crash::ALL {
        loom::model(move || {
            // Burst 6 per minute. Key 1 spent 1 at 0 (the stalest: 10 s of
            // debt), key 2 all 6: the table (2 slots) is full. At 1 s key 1 has
            // 5 units (and a tenth).
            let t = full_table(Quota::per_minute(6), FullPolicy::EvictStalest, [1, 6]);
            let now = SEC;
            let (dying, victim) = (t.clone(), t.clone());
            let dying = loom::thread::spawn(move || {
                crash::stop_at(Some(point));
                // Evicts key 1 (the stalest), then stops at `point`.
                let _ = dying.check_n_at(&3u64, 6, now);
            });
            let victim = loom::thread::spawn(move || {
                victim.check_n_at(&1u64, 5, now).is_ok_and(|d| d.allowed)
            });
            dying.join().unwrap();
            let got = victim.join().unwrap();
            let more = t.check_n_at(&1u64, 1, now).is_ok_and(|d| d.allowed);
            assert!(!(got && more), "{point:?}: key 1 admitted 6 of its 5");
            assert!(
                t.peek_n_at(&2u64, 1, now).is_ok_and(|d| !d.allowed),
                "{point:?}: key 2 lost its debt"
            );
            assert!(t.check_n_at(&3u64, 1, now).is_ok(), "{point:?}");
            assert!(t.len_at(now) <= 2, "{point:?}");
        });
    }
}
