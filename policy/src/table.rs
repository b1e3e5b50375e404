//! A keyed rule's limiters: core's [`AnyKeyed`] table, each key hashed once per
//! check by the table's own secret-seeded hasher.
//!
//! Memory is fixed when the rule is built (`capacity` keys, 16 bytes per key and
//! limit, allocated fallibly). When the table is full of live entries, core's
//! default [`sluicegate::keyed::FullPolicy::EvictStalest`] applies: the entry
//! closest to fresh is replaced after its state is folded into the table's sketch,
//! so a returning key resumes at least as limited as it left — bounded memory makes
//! a rule early to limit, never late (DESIGN §10).

use std::hash::Hash;

use sluicegate::keyed::AnyKeyed;
use sluicegate::{InsufficientCapacity, Outcome, Receipt, Spec, SpecError};

pub(crate) struct KeyedTable(AnyKeyed<()>);

impl KeyedTable {
    pub(crate) fn new(spec: &Spec, capacity: usize) -> Result<Self, SpecError> {
        AnyKeyed::with_clock(spec, capacity, ()).map(KeyedTable)
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

    /// Keys holding state (not back to full) at `now`.
    pub(crate) fn len_at(&self, now: u64) -> usize {
        self.0.len_at(now)
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
        let t = KeyedTable::new(&spec, 8).unwrap();
        // Far more keys than slots, each twice: no key is ever admitted twice in
        // its window, whatever the table evicted to make room.
        let mut r = Receipt::empty();
        for round in 0..2 {
            for k in 0..200u64 {
                let allowed = t.run(&k, 1, round, true, &mut r).unwrap().decision.allowed;
                assert!(!(round == 1 && allowed), "key {k} admitted twice");
            }
        }
        assert!(t.len_at(1) <= 16);
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
