//! A keyed rule's limiters: core's [`AnyKeyed`] in the policy's [`Pool`], each key
//! hashed once per check by the pool's secret-seeded hasher.
//!
//! Every keyed rule of a policy keeps its keys in one pool, sized by the
//! policy's `[state] memory` (see [`crate::StateSettings`]): a rule costs the
//! keys it holds, 16 bytes per key and limit, up to its `capacity` of live keys.
//! When the pool is full of live entries, core's default
//! [`sluicegate::keyed::FullPolicy::EvictStalest`] applies: the entry closest to
//! fresh is replaced after its state is folded into its own rule's sketch cells, so
//! a returning key resumes at least as limited as it left — bounded memory makes a
//! rule early to limit, never late (DESIGN §10), whichever rule's keys flood.

use std::hash::Hash;

use sluicegate::keyed::{AnyKeyed, Pool};
use sluicegate::{InsufficientCapacity, Outcome, Receipt, Spec, SpecError};

pub(crate) struct KeyedTable(AnyKeyed<()>);

impl KeyedTable {
    /// The rule's limiter in `pool`, holding at most `capacity` live keys.
    pub(crate) fn new(pool: &Pool, spec: &Spec, capacity: usize) -> Result<Self, SpecError> {
        AnyKeyed::in_pool(pool, spec, capacity, ()).map(KeyedTable)
    }

    /// The ids of its limits in the pool (where [`Pool::live_keys_at`] counts).
    pub(crate) fn pool_ids(&self) -> Vec<u16> {
        self.0.pool_ids()
    }

    /// Checks (`consume`, writing `receipt`) or peeks at `n` units for `key`,
    /// hashed once by the table's secret-seeded hasher (flood resistant).
    #[inline]
    pub(crate) fn run<K: Hash + ?Sized>(
        &self,
        key: &K,
        n: u64,
        now: u64,
        consume: bool,
        receipt: &mut Receipt,
    ) -> Result<Outcome, InsufficientCapacity> {
        if consume {
            self.0.check_n_at_receipt(key, n, now, receipt)
        } else {
            self.0.peek_n_at(key, n, now)
        }
    }

    /// Gives back what `receipt`'s admission took from its key.
    pub(crate) fn refund(&self, receipt: &mut Receipt, now: u64) {
        self.0.refund(receipt, now);
    }

    /// New quotas for every key; each key's state carries over; all-or-nothing.
    pub(crate) fn set_spec(&self, spec: &Spec) -> Result<(), SpecError> {
        self.0.set_spec(spec)
    }

    /// Live entries replaced to make room for new keys.
    pub(crate) fn evictions(&self) -> u64 {
        self.0.stats().evicted
    }

    /// New keys denied for lack of room.
    pub(crate) fn rejected(&self) -> u64 {
        self.0.stats().rejected
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluicegate::Kind;

    #[test]
    fn bounded_and_never_late() {
        let spec = Spec::parse(Kind::FixedWindow, "1/minute").unwrap();
        let pool = Pool::with_memory(2 * 128 + 1024).unwrap(); // 16 slots and the sketch
        let t = KeyedTable::new(&pool, &spec, 1000).unwrap();
        // Far more keys than slots, each twice: no key is ever admitted twice in
        // its window, whatever the table evicted to make room.
        let mut r = Receipt::empty();
        for round in 0..2 {
            for k in 0..200u64 {
                let allowed = t.run(&k, 1, round, true, &mut r).unwrap().decision.allowed;
                assert!(!(round == 1 && allowed), "key {k} admitted twice");
            }
        }
        assert!(pool.live_keys_at(1).iter().sum::<usize>() <= 16);
        assert!(t.evictions() + t.rejected() > 0);
        // A peek charges nothing.
        let fresh = 10_000;
        let later = 200_000_000_000;
        let allowed = |consume: bool, r: &mut Receipt| {
            let outcome = t.run(&fresh, 1, later, consume, r).unwrap();
            outcome.decision.allowed
        };
        assert!(allowed(false, &mut r));
        assert!(allowed(true, &mut r));
        assert_eq!(r.units(), 1);
        // A refund gives it back.
        t.refund(&mut r, later);
        assert!(allowed(true, &mut r));
        assert!(!allowed(true, &mut r));
    }
}
