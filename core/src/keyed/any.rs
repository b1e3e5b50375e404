//! [`AnyKeyed`]: a keyed limiter of any keyed [`Kind`](crate::Kind), built from a [`Spec`] —
//! the one handle a binding holds for per-key limiting.

use alloc::boxed::Box;
use core::fmt;
use core::hash::{BuildHasher, Hash};
use std::sync::Mutex;

use alloc::vec::Vec;

use super::engine::{BuildKeyed, Engine, Home};
use super::{DefaultHashBuilder, FullPolicy, KeyedStats, Pool, random_hasher};
use crate::any::Outcome;
use crate::clock::Clock;
use crate::error::InsufficientCapacity;
use crate::receipt::Receipt;
use crate::spec::{Spec, SpecError};

/// A key hashed by one table's secret seed ([`AnyKeyed::key_hash`]).
///
/// ```
/// use sluicegate::{AnyKeyed, Kind, Spec};
/// let t = AnyKeyed::with_clock(&Spec::parse(Kind::TokenBucket, "1/s")?, 8, ())?;
/// assert_ne!(t.key_hash("a"), t.key_hash("b"));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KeyHash(u64);

impl KeyHash {
    /// A key hash computed by the caller: for tables whose keys must hash the
    /// same in every process and language (a pool in shared memory hashes a
    /// key's bytes with a documented function and seed).
    ///
    /// ```
    /// use sluicegate::keyed::{AnyKeyed, KeyHash};
    /// use sluicegate::{Kind, Spec};
    /// let t = AnyKeyed::with_clock(&Spec::parse(Kind::TokenBucket, "1/s")?, 8, ())?;
    /// assert!(t.check_n_at_hashed(KeyHash::from_raw(42), 1, 0)?.decision.allowed);
    /// assert!(!t.check_n_at_hashed(KeyHash::from_raw(42), 1, 0)?.decision.allowed);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub const fn from_raw(hash: u64) -> Self {
        KeyHash(hash)
    }
}

/// A keyed limiter of any keyed [`Kind`](crate::Kind), from a [`Spec`]: one state per key in a
/// bounded table ([`Keyed`](super::Keyed), with its guarantees), one table per limit of a
/// compound spec. A compound is all-or-nothing per key: a request is charged to
/// every limit or to none (a denial by one limit gives back what the others
/// took, never more than they took).
///
/// ```
/// use sluicegate::keyed::AnyKeyed;
/// use sluicegate::{Kind, Spec};
/// let spec = Spec::parse(Kind::TokenBucket, "2/second; 3/minute")?;
/// let per_ip = AnyKeyed::with_clock(&spec, 1024, ())?;
/// assert!(per_ip.check_n_at(&"10.0.0.1", 2, 0)?.decision.allowed);
/// // The second limit has 1 left, the first none: denied, nothing charged.
/// assert!(!per_ip.check_n_at(&"10.0.0.1", 1, 0)?.decision.allowed);
/// assert!(per_ip.check_n_at(&"10.0.0.1", 1, 1_000_000_000)?.decision.allowed);
/// assert!(!per_ip.check_n_at(&"10.0.0.1", 1, 2_000_000_000)?.decision.allowed); // 3/minute
/// assert!(per_ip.check_n_at(&"10.0.0.2", 2, 0)?.decision.allowed); // its own state
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct AnyKeyed<C> {
    engine: Box<dyn Engine>,
    hasher: DefaultHashBuilder,
    spec: Mutex<Spec>,
    clock: C,
}

impl<C> fmt::Debug for AnyKeyed<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AnyKeyed")
            .field("spec", &self.spec())
            .field("capacity", &self.capacity())
            .finish_non_exhaustive()
    }
}

impl<C> AnyKeyed<C> {
    /// A table of at least `capacity` keys per limit of `spec`, allocated now,
    /// fallibly ([`SpecError::Alloc`] when the memory is not there).
    ///
    /// ```
    /// use sluicegate::keyed::AnyKeyed;
    /// use sluicegate::{Kind, Spec, SpecError};
    /// let spec = Spec::parse(Kind::FixedWindow, "5/s")?;
    /// assert_eq!(AnyKeyed::with_clock(&spec, 100, ())?.capacity(), 104);
    /// assert!(matches!(AnyKeyed::with_clock(&spec, usize::MAX, ()), Err(SpecError::Alloc { .. })));
    /// let log = Spec::parse(Kind::SlidingLog, "5/s")?;
    /// assert!(matches!(AnyKeyed::with_clock(&log, 100, ()), Err(SpecError::Unsupported { .. })));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn with_clock(spec: &Spec, capacity: usize, clock: C) -> Result<Self, SpecError> {
        if !spec.kind().caps().keyed {
            return Err(spec.unsupported("keyed limiting"));
        }
        let hasher = random_hasher();
        let home = Home::Own {
            capacity,
            hasher: &hasher,
        };
        let engine = spec.kind().dispatch(BuildKeyed { spec, home })?;
        Ok(Self {
            engine,
            hasher,
            spec: Mutex::new(*spec),
            clock,
        })
    }

    /// A keyed limiter whose keys live in `pool`, beside other limits' (see
    /// [`Pool`]): no memory of its own but its limits' registry entries. It holds
    /// at most `max_keys` live keys per limit (a key flood of this limiter takes
    /// no more of the pool); [`Self::capacity`] is that bound.
    ///
    /// ```
    /// use sluicegate::keyed::{AnyKeyed, Pool};
    /// use sluicegate::{Kind, Spec, SpecError};
    /// let pool = Pool::with_memory(1 << 20)?;
    /// let spec = Spec::parse(Kind::SlidingWindow, "2/s; 5/min")?;
    /// let t = AnyKeyed::in_pool(&pool, &spec, 1000, ())?;
    /// assert!(t.check_n_at(&"k", 2, 0)?.decision.allowed);
    /// assert!(!t.check_n_at(&"k", 1, 0)?.decision.allowed);
    /// assert_eq!(t.capacity(), 1000);
    /// let log = Spec::parse(Kind::SlidingLog, "5/s")?;
    /// assert!(matches!(AnyKeyed::in_pool(&pool, &log, 10, ()), Err(SpecError::Unsupported { .. })));
    /// assert!(AnyKeyed::in_pool(&pool, &spec, 0, ()).is_err()); // a bound of no keys
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn in_pool(pool: &Pool, spec: &Spec, max_keys: usize, clock: C) -> Result<Self, SpecError> {
        if !spec.kind().caps().keyed {
            return Err(spec.unsupported("keyed limiting"));
        }
        if max_keys == 0 {
            let error = crate::ConfigError::Zero { field: "max_keys" };
            return Err(SpecError::Config { index: 0, error });
        }
        let home = Home::Pool { pool, max_keys };
        let engine = spec.kind().dispatch(BuildKeyed { spec, home })?;
        Ok(Self {
            engine,
            hasher: pool.hasher().clone(),
            spec: Mutex::new(*spec),
            clock,
        })
    }

    /// The ids of this limiter's limits in its pool (one per quota; empty for a
    /// limiter with tables of its own): where [`Pool::live_keys_at`] counts them.
    ///
    /// ```
    /// use sluicegate::keyed::{AnyKeyed, Pool};
    /// use sluicegate::{Kind, Spec};
    /// let pool = Pool::with_memory(1 << 20)?;
    /// let spec = Spec::parse(Kind::TokenBucket, "1/s")?;
    /// assert_eq!(AnyKeyed::in_pool(&pool, &spec, 10, ())?.pool_ids().len(), 1);
    /// assert!(AnyKeyed::with_clock(&spec, 10, ())?.pool_ids().is_empty());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn pool_ids(&self) -> Vec<u16> {
        self.engine.pool_ids()
    }

    /// Sets the full-table policy of every table.
    ///
    /// ```
    /// use sluicegate::keyed::{AnyKeyed, FullPolicy};
    /// use sluicegate::{Kind, Spec};
    /// let t = AnyKeyed::with_clock(&Spec::parse(Kind::TokenBucket, "1/minute")?, 8, ())?
    ///     .with_policy(FullPolicy::Reject);
    /// let admitted = (0..20u32).filter(|k| t.check_n_at(k, 1, 0).unwrap().decision.allowed).count();
    /// assert_eq!(admitted, 8);
    /// assert_eq!(t.stats().rejected, 12);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[must_use]
    pub fn with_policy(mut self, policy: FullPolicy) -> Self {
        self.engine.set_policy(policy);
        self
    }

    /// Charges `n` units to `key` at `now` (all-or-nothing over every limit);
    /// `n = 0` is a peek. The outcome carries the shaper's delay.
    ///
    /// ```
    /// use sluicegate::keyed::AnyKeyed;
    /// use sluicegate::{Kind, Spec};
    /// let spec = Spec::parse(Kind::Shaper, "10/s burst 1")?.with_max_delay_ns(500_000_000)?;
    /// let t = AnyKeyed::with_clock(&spec, 64, ())?;
    /// assert_eq!(t.check_n_at(&"job", 1, 0)?.delay_ns, 0);
    /// assert_eq!(t.check_n_at(&"job", 1, 0)?.delay_ns, 100_000_000);
    /// assert!(t.check_n_at(&"job", spec.capacity() + 1, 0).is_err()); // can never run
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[inline]
    pub fn check_n_at<K: Hash + ?Sized>(
        &self,
        key: &K,
        n: u64,
        now: u64,
    ) -> Result<Outcome, InsufficientCapacity> {
        let h = self.hasher.hash_one(key);
        self.engine
            .run(h, n, &|| now, true, None)
            .map(|r| r.outcome())
    }

    /// What [`Self::check_n_at`] would answer, charging nothing.
    ///
    /// ```
    /// use sluicegate::keyed::AnyKeyed;
    /// use sluicegate::{Kind, Spec};
    /// let t = AnyKeyed::with_clock(&Spec::parse(Kind::SlidingWindow, "5/s; 7/min")?, 64, ())?;
    /// assert_eq!(t.peek_n_at(&1u64, 2, 0)?.decision.remaining, 3);
    /// assert_eq!(t.stats().inserted, 0);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[inline]
    pub fn peek_n_at<K: Hash + ?Sized>(
        &self,
        key: &K,
        n: u64,
        now: u64,
    ) -> Result<Outcome, InsufficientCapacity> {
        let h = self.hasher.hash_one(key);
        self.engine
            .run(h, n, &|| now, false, None)
            .map(|r| r.outcome())
    }

    /// The key's hash under this table's secret seed, to check it several times
    /// without hashing it again ([`Self::check_n_at_hashed`]). Only meaningful
    /// to the table that computed it (another table's seed differs).
    ///
    /// ```
    /// use sluicegate::{AnyKeyed, Kind, Spec};
    /// let t = AnyKeyed::with_clock(&Spec::parse(Kind::TokenBucket, "2/s")?, 64, ())?;
    /// let k = t.key_hash("10.0.0.1");
    /// assert_eq!(k, t.key_hash("10.0.0.1"));
    /// assert!(t.check_n_at_hashed(k, 1, 0)?.decision.allowed);
    /// assert_eq!(t.check_n_at("10.0.0.1", 1, 0)?.decision.remaining, 0); // the same key
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[inline]
    pub fn key_hash<K: Hash + ?Sized>(&self, key: &K) -> KeyHash {
        KeyHash(self.hasher.hash_one(key))
    }

    /// [`Self::check_n_at`] for a key hashed by [`Self::key_hash`].
    ///
    /// ```
    /// use sluicegate::{AnyKeyed, Kind, Spec};
    /// let t = AnyKeyed::with_clock(&Spec::parse(Kind::FixedWindow, "1/s")?, 64, ())?;
    /// let k = t.key_hash(&42u64);
    /// assert!(t.check_n_at_hashed(k, 1, 0)?.decision.allowed);
    /// assert!(!t.check_n_at_hashed(k, 1, 0)?.decision.allowed);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[inline]
    pub fn check_n_at_hashed(
        &self,
        key: KeyHash,
        n: u64,
        now: u64,
    ) -> Result<Outcome, InsufficientCapacity> {
        self.engine
            .run(key.0, n, &|| now, true, None)
            .map(|r| r.outcome())
    }

    /// [`Self::peek_n_at`] for a key hashed by [`Self::key_hash`].
    ///
    /// ```
    /// use sluicegate::{AnyKeyed, Kind, Spec};
    /// let t = AnyKeyed::with_clock(&Spec::parse(Kind::FixedWindow, "3/s")?, 64, ())?;
    /// assert_eq!(t.peek_n_at_hashed(t.key_hash("a"), 1, 0)?.decision.remaining, 2);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[inline]
    pub fn peek_n_at_hashed(
        &self,
        key: KeyHash,
        n: u64,
        now: u64,
    ) -> Result<Outcome, InsufficientCapacity> {
        self.engine
            .run(key.0, n, &|| now, false, None)
            .map(|r| r.outcome())
    }

    /// [`Self::check_n_at`], writing into `receipt` what it took, for
    /// [`Self::refund`] (overwritten; empty for a denial or a cost of 0).
    ///
    /// ```
    /// use sluicegate::{AnyKeyed, Kind, Receipt, Spec};
    /// let t = AnyKeyed::with_clock(&Spec::parse(Kind::SlidingWindow, "3/s")?, 64, ())?;
    /// let mut r = Receipt::empty();
    /// assert!(t.check_n_at_receipt("k", 2, 0, &mut r)?.decision.allowed);
    /// assert_eq!(r.units(), 2);
    /// t.refund(&mut r, 0);
    /// assert_eq!(t.peek_n_at("k", 0, 0)?.decision.remaining, 3); // all back
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[inline]
    pub fn check_n_at_receipt<K: Hash + ?Sized>(
        &self,
        key: &K,
        n: u64,
        now: u64,
        receipt: &mut Receipt,
    ) -> Result<Outcome, InsufficientCapacity> {
        self.check_n_at_hashed_receipt(self.key_hash(key), n, now, receipt)
    }

    /// [`Self::check_n_at_receipt`] for a key hashed by [`Self::key_hash`].
    ///
    /// ```
    /// use sluicegate::{AnyKeyed, Kind, Receipt, Spec};
    /// let t = AnyKeyed::with_clock(&Spec::parse(Kind::TokenBucket, "1/s; 5/min")?, 64, ())?;
    /// let (k, mut r) = (t.key_hash("k"), Receipt::empty());
    /// t.check_n_at_hashed_receipt(k, 1, 0, &mut r)?;
    /// assert!(!t.check_n_at_hashed(k, 1, 0)?.decision.allowed);
    /// t.refund(&mut r, 0);
    /// assert!(t.check_n_at_hashed(k, 1, 0)?.decision.allowed);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[inline]
    pub fn check_n_at_hashed_receipt(
        &self,
        key: KeyHash,
        n: u64,
        now: u64,
        receipt: &mut Receipt,
    ) -> Result<Outcome, InsufficientCapacity> {
        receipt.len = 0;
        let ran = self
            .engine
            .run(key.0, n, &|| now, true, Some(&mut receipt.taken))?;
        let (o, len) = (ran.outcome(), ran.taken);
        if len > 0 {
            receipt.owner = self.owner();
            receipt.key = key.0;
            receipt.n = n;
            receipt.len = len as u8;
        }
        Ok(o)
    }

    /// Gives back what the admission recorded in `receipt` took from its key,
    /// never more (see [`Receipt`]), and empties it. A key evicted since gets
    /// nothing back (its charged state may be in the table's sketch: the units
    /// stay spent); a receipt of another handle gives nothing back. `now` is
    /// read only when other admissions changed the key's state since.
    ///
    /// ```
    /// use sluicegate::{AnyKeyed, Kind, Receipt, Spec};
    /// let t = AnyKeyed::with_clock(&Spec::parse(Kind::TokenBucket, "2/s")?, 64, ())?;
    /// let mut r = Receipt::empty();
    /// t.check_n_at_receipt("a", 1, 0, &mut r)?;
    /// assert!(t.check_n_at("a", 1, 0)?.decision.allowed); // another request's unit
    /// t.refund(&mut r, 0);
    /// t.refund(&mut r, 0); // spent: nothing more
    /// assert_eq!(t.peek_n_at("a", 0, 0)?.decision.remaining, 1); // one back, not two
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn refund(&self, receipt: &mut Receipt, now: u64) {
        if let Some(taken) = receipt.taken_by(self.owner()) {
            self.engine.give_back(receipt.key, receipt.n, taken, now);
            receipt.len = 0;
        }
    }

    /// This handle's identity in receipts.
    fn owner(&self) -> usize {
        &*self.engine as *const dyn Engine as *const u8 as usize
    }

    /// Changes the quotas of every key at once (same kind, same number of
    /// limits, same max delay); states carry over; all-or-nothing.
    ///
    /// ```
    /// use sluicegate::keyed::AnyKeyed;
    /// use sluicegate::{Kind, Spec, SpecError};
    /// let t = AnyKeyed::with_clock(&Spec::parse(Kind::TokenBucket, "1/s")?, 64, ())?;
    /// assert!(t.check_n_at(&"a", 1, 0)?.decision.allowed);
    /// t.set_spec(&Spec::parse(Kind::TokenBucket, "1/s burst 2")?)?;
    /// assert!(t.check_n_at(&"a", 1, 0)?.decision.allowed);
    /// let other = Spec::parse(Kind::FixedWindow, "1/s")?;
    /// assert_eq!(t.set_spec(&other), Err(SpecError::Immutable { field: "kind" }));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn set_spec(&self, spec: &Spec) -> Result<(), SpecError> {
        let mut cur = self.spec.lock().unwrap_or_else(|e| e.into_inner());
        cur.check_live_change(spec)?;
        self.engine.set_spec(spec)?;
        *cur = *spec;
        Ok(())
    }

    /// The current spec.
    ///
    /// ```
    /// use sluicegate::keyed::AnyKeyed;
    /// use sluicegate::{Kind, Spec};
    /// let spec = Spec::parse(Kind::LeakyBucket, "3/s")?;
    /// assert_eq!(AnyKeyed::with_clock(&spec, 8, ())?.spec(), spec);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn spec(&self) -> Spec {
        *self.spec.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The table's event counters, summed over its limits (one table each).
    ///
    /// ```
    /// use sluicegate::keyed::AnyKeyed;
    /// use sluicegate::{Kind, Spec};
    /// let t = AnyKeyed::with_clock(&Spec::parse(Kind::TokenBucket, "1/s")?, 8, ())?;
    /// t.check_n_at(&"a", 1, 0)?;
    /// assert_eq!(t.stats().inserted, 1);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn stats(&self) -> KeyedStats {
        self.engine.stats()
    }

    /// Keys holding live state at `now` (the most over its limits).
    ///
    /// ```
    /// use sluicegate::keyed::AnyKeyed;
    /// use sluicegate::{Kind, Spec};
    /// let t = AnyKeyed::with_clock(&Spec::parse(Kind::TokenBucket, "1/s")?, 8, ())?;
    /// t.check_n_at(&"a", 1, 0)?;
    /// assert_eq!((t.len_at(0), t.len_at(1_000_000_000)), (1, 0));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn len_at(&self, now: u64) -> usize {
        self.engine.len_at(now)
    }

    /// Keys a table holds at once.
    ///
    /// ```
    /// use sluicegate::keyed::AnyKeyed;
    /// use sluicegate::{Kind, Spec};
    /// let t = AnyKeyed::with_clock(&Spec::parse(Kind::TokenBucket, "1/s")?, 9, ())?;
    /// assert_eq!(t.capacity(), 16);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn capacity(&self) -> usize {
        self.engine.capacity()
    }

    /// Forgets every key.
    ///
    /// ```
    /// use sluicegate::keyed::AnyKeyed;
    /// use sluicegate::{Kind, Spec};
    /// let t = AnyKeyed::with_clock(&Spec::parse(Kind::TokenBucket, "1/s")?, 8, ())?;
    /// t.check_n_at(&"a", 1, 0)?;
    /// t.clear();
    /// assert!(t.check_n_at(&"a", 1, 0)?.decision.allowed);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn clear(&self) {
        self.engine.clear();
    }

    /// The clock.
    ///
    /// ```
    /// use sluicegate::keyed::AnyKeyed;
    /// use sluicegate::{Clock, Kind, ManualClock, Spec};
    /// let t = AnyKeyed::with_clock(&Spec::parse(Kind::TokenBucket, "1/s")?, 8, ManualClock::new(4))?;
    /// assert_eq!(t.clock().now(), 4);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn clock(&self) -> &C {
        &self.clock
    }
}

impl<C: Clock> AnyKeyed<C> {
    /// [`Self::check_n_at`] on the clock; a give-back reads the clock afresh.
    ///
    /// ```
    /// use sluicegate::keyed::AnyKeyed;
    /// use sluicegate::{Kind, ManualClock, Spec};
    /// let t = AnyKeyed::with_clock(&Spec::parse(Kind::TokenBucket, "1/s")?, 8, ManualClock::new(0))?;
    /// assert!(t.check_n(&"a", 1)?.decision.allowed);
    /// assert!(!t.check_n(&"a", 1)?.decision.allowed);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[inline]
    pub fn check_n<K: Hash + ?Sized>(
        &self,
        key: &K,
        n: u64,
    ) -> Result<Outcome, InsufficientCapacity> {
        let h = self.hasher.hash_one(key);
        self.engine
            .run(h, n, &|| self.clock.now(), true, None)
            .map(|r| r.outcome())
    }

    /// [`Self::peek_n_at`] on the clock.
    ///
    /// ```
    /// use sluicegate::keyed::AnyKeyed;
    /// use sluicegate::{Kind, ManualClock, Spec};
    /// let t = AnyKeyed::with_clock(&Spec::parse(Kind::TokenBucket, "4/s")?, 8, ManualClock::new(0))?;
    /// assert_eq!(t.peek_n(&"a", 1)?.decision.remaining, 3);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[inline]
    pub fn peek_n<K: Hash + ?Sized>(
        &self,
        key: &K,
        n: u64,
    ) -> Result<Outcome, InsufficientCapacity> {
        self.peek_n_at(key, n, self.clock.now())
    }
}
