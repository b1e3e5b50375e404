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
//!
//! In a pool in shared memory (a `[shared]` region) a key is hashed instead as
//! its text (the same text shared backends get) by the memory's own hash
//! ([`Pool::key_hash`]: XXH3-64 with the region's seed), so that one key lands
//! in one slot from every process, whatever build of the library each runs.

use std::hash::Hash;

use sluicegate::keyed::{AnyKeyed, Pool};
use sluicegate::{InsufficientCapacity, Outcome, Receipt, Spec, SpecError};

std::thread_local! {
    /// A key's text, written for a table in a shared region to hash: one
    /// buffer per thread, reused.
    static TEXT: core::cell::RefCell<String> = const { core::cell::RefCell::new(String::new()) };
}

pub(crate) struct KeyedTable {
    table: AnyKeyed<()>,
    /// The pool, when its memory hashes keys' text (shared memory).
    by_text: Option<Pool>,
}

impl KeyedTable {
    /// The rule's limiter in `pool`, holding at most `capacity` live keys.
    pub(crate) fn new(pool: &Pool, spec: &Spec, capacity: usize) -> Result<Self, SpecError> {
        Ok(KeyedTable {
            table: AnyKeyed::in_pool(pool, spec, capacity, ())?,
            by_text: pool.key_hash(b"").map(|_| pool.clone()),
        })
    }

    /// The ids of its limits in the pool (where [`Pool::live_keys_at`] counts).
    pub(crate) fn pool_ids(&self) -> Vec<u16> {
        self.table.pool_ids()
    }

    /// Checks (`consume`, writing `receipt`) or peeks at `n` units for `key`,
    /// hashed once by the table's secret-seeded hasher (flood resistant), or
    /// for its text `text()` hashed by the shared memory's hash.
    #[inline]
    pub(crate) fn run<K: Hash + ?Sized>(
        &self,
        key: &K,
        text: impl FnOnce(&mut String),
        n: u64,
        now: u64,
        consume: bool,
        receipt: &mut Receipt,
    ) -> Result<Outcome, InsufficientCapacity> {
        if let Some(h) = self.by_text.as_ref().and_then(|p| {
            // The key's text in this thread's buffer: no allocation per check.
            TEXT.with_borrow_mut(|buf| {
                buf.clear();
                text(buf);
                p.key_hash(buf.as_bytes())
            })
        }) {
            return if consume {
                self.table.check_n_at_hashed_receipt(h, n, now, receipt)
            } else {
                self.table.peek_n_at_hashed(h, n, now)
            };
        }
        if consume {
            self.table.check_n_at_receipt(key, n, now, receipt)
        } else {
            self.table.peek_n_at(key, n, now)
        }
    }

    /// Gives back what `receipt`'s admission took from its key.
    pub(crate) fn refund(&self, receipt: &mut Receipt, now: u64) {
        self.table.refund(receipt, now);
    }

    /// New quotas for every key; each key's state carries over; all-or-nothing.
    pub(crate) fn set_spec(&self, spec: &Spec) -> Result<(), SpecError> {
        self.table.set_spec(spec)
    }

    /// Live entries replaced to make room for new keys.
    pub(crate) fn evictions(&self) -> u64 {
        self.table.stats().evicted
    }

    /// New keys denied for lack of room.
    pub(crate) fn rejected(&self) -> u64 {
        self.table.stats().rejected
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
                let allowed = t
                    .run(
                        &k,
                        |out| out.push_str(&k.to_string()),
                        1,
                        round,
                        true,
                        &mut r,
                    )
                    .unwrap()
                    .decision
                    .allowed;
                assert!(!(round == 1 && allowed), "key {k} admitted twice");
            }
        }
        assert!(pool.live_keys_at(1).iter().sum::<usize>() <= 16);
        assert!(t.evictions() + t.rejected() > 0);
        // A peek charges nothing.
        let fresh = 10_000;
        let later = 200_000_000_000;
        let allowed = |consume: bool, r: &mut Receipt| {
            let outcome = t
                .run(
                    &fresh,
                    |out| out.push_str(&fresh.to_string()),
                    1,
                    later,
                    consume,
                    r,
                )
                .unwrap();
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
