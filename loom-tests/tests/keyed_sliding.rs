//! Sliding windows in a full keyed table (eviction into the sketch racing a check
//! of the evicted key) and a refund racing another check of the same key. Under
//! loom a group has 2 slots and a 2-slot table probes only its one group.
#![cfg(loom)]

use loom::sync::Arc;
use loom::thread;
use sluicegate::keyed::{FullPolicy, Group, Keyed};
use sluicegate::{AnyKeyed, Kind, Quota, Receipt, Sliding, Spec};

type Table = Keyed<Sliding, (), Box<[Group]>, foldhash::fast::FixedState>;

fn table(quota: Quota) -> Arc<Table> {
    let hasher = foldhash::fast::FixedState::with_seed(11);
    match Keyed::with_capacity_and_hasher(quota, 2, hasher, ()) {
        Ok(t) => Arc::new(t.with_policy(FullPolicy::EvictStalest)),
        Err(e) => panic!("{e}"),
    }
}

#[test]
fn an_evicted_sliding_window_key_resumes_its_state() {
    for limit in [6, 200_000] {
        loom::model(move || {
            // Key 1 has 1 unit left, key 2 none: the table (2 slots) is full. A
            // new key evicts one while key 1 takes its last unit: in every
            // interleaving key 1 ends with its window spent, never a fresh one.
            let t = table(Quota::per_minute(limit));
            assert!(t.check_n_at(&1u64, limit - 1, 0).is_ok_and(|d| d.allowed));
            assert!(t.check_n_at(&2u64, limit, 0).is_ok_and(|d| d.allowed));
            let (a, b) = (t.clone(), t.clone());
            let ha = thread::spawn(move || a.check_at(&1u64, 0).allowed);
            let hb = thread::spawn(move || b.check_at(&3u64, 0).allowed);
            let (ka, kb) = (ha.join().unwrap(), hb.join().unwrap());
            assert!(ka, "key 1's last unit");
            // Key 3 starts from the sketch: fresh, or as limited as an evicted key.
            let _ = kb;
            assert!(!t.check_at(&1u64, 0).allowed);
            assert!(!t.check_at(&2u64, 0).allowed);
            assert!(t.stats().evicted >= 1);
        });
    }
}

#[test]
fn a_refund_races_a_check_of_the_same_key() {
    for kind in [Kind::SlidingWindow, Kind::TokenBucket] {
        loom::model(move || {
            // 2 per minute, 1 already spent. A takes the last unit and gives it
            // back; B asks for one meanwhile. Whatever the order, the key ends with
            // exactly B's unit (if B got one) on top of the first: no refund lost,
            // none doubled, never more than 2 admitted.
            let spec = Spec::parse(kind, "2/minute").unwrap();
            let t = Arc::new(AnyKeyed::with_clock(&spec, 2, ()).unwrap());
            assert!(t.check_n_at(&7u64, 1, 0).unwrap().decision.allowed);
            let (a, b) = (t.clone(), t.clone());
            let ha = thread::spawn(move || {
                let mut r = Receipt::empty();
                let o = a.check_n_at_receipt(&7u64, 1, 0, &mut r).unwrap();
                a.refund(&mut r, 0);
                o.decision.allowed
            });
            let hb = thread::spawn(move || b.check_n_at(&7u64, 1, 0).unwrap().decision.allowed);
            let (got_a, got_b) = (ha.join().unwrap(), hb.join().unwrap());
            assert!(got_a || got_b, "one unit was free all along");
            let used = 1 + u64::from(got_b);
            let left = t.peek_n_at(&7u64, 0, 0).unwrap().decision.remaining;
            assert_eq!(left, 2 - used, "a: {got_a}, b: {got_b}");
        });
    }
}
