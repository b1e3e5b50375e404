//! Keyed limiters: one limiter state per client key (IP, user id, API token), all
//! under one quota, in a table of fixed capacity that never allocates after it is
//! built and never grows, whatever the traffic.
//!
//! # Layout
//! The table is an array of [`Group`]s. A group is eight 16-byte [`Slot`]s in one
//! [`CachePadded`](crossbeam_utils::CachePadded) block (128 bytes on x86-64: the line and the adjacent line the
//! prefetcher pairs with it), so two groups never share a cache line. A slot holds
//! a 63-bit key **fingerprint** and the algorithm's **state word**, swapped together
//! by one 128-bit compare-and-swap: **16 bytes per key**, nothing else per key.
//!
//! A key is hashed once with a per-table keyed hash (foldhash, seeded from the OS
//! RNG under `std`); the hash picks the key's two candidate groups and, masked to
//! 63 bits, is its fingerprint. A key lives in one of its two groups (16 candidate
//! slots); a new key goes to the one with more room ("power of two choices"),
//! which keeps the table usable to high load: with every key live and random keys,
//! 0.02 % of keys find no slot at 80 % load, 0.7 % at 90 % (first-fit over two
//! adjacent groups: 2.5 % and 5.2 %). Size the table at ≥ 1.25× the live keys you
//! expect. The key itself is never stored.
//!
//! # Fingerprint collisions
//! Two keys with the same 63-bit fingerprint share one state (each is limited as
//! if it were the other). With `k` live keys in the key's 16 candidate slots the
//! chance that a new key collides with one of them is `k / 2⁶³`; across a table of
//! a million live keys, the chance that *any* two collide is about `n²/2⁶⁴ ≈ 5·10⁻⁸`.
//! The seed is secret and random per table, so an attacker cannot aim a key at a
//! victim's state or a group. (foldhash is not a cryptographic PRF; if hash
//! outputs could be observed, pass SipHash — `std::hash::RandomState` — as the
//! hasher.)
//!
//! # Bounded memory without changing decisions
//! A slot whose state decides exactly like a fresh one (a full bucket, an expired
//! window: [`Algorithm::is_fresh`]) carries no information, so any new key may take
//! it over once it has been fresh for [`DROP_SKEW_NS`] (~67 ms: a check whose
//! clock lags the reuser's by less still finds the key fresh by its own time):
//! memory stays bounded by reuse, and no decision changes.
//! Only when all 16 candidate slots hold *live* state does [`FullPolicy`] decide:
//! reject the new key, admit it without limiting it, or evict the stalest entry
//! (the one closest to fresh); each such event is counted in [`KeyedStats`].
//!
//! # A full table never over-admits a key
//! An evicted key must not come back with a fresh limit: a flood of new keys
//! would otherwise reset a victim's limit again and again. So an eviction first
//! folds the evicted state into the table's **sketch**, a fixed array of state
//! words (at most a quarter byte per slot, 512 bytes to 256 KiB, allocated with the
//! table), at three cells picked by independent mixes of the key's fingerprint;
//! each cell keeps a state at least as restrictive as every state folded into it
//! ([`Algorithm::join`]). A key that is not in the table starts from the least
//! restrictive of its three cells, which is fresh unless all three are live.
//!
//! * **Bound.** Every key is limited exactly as by its own single limiter, or
//!   *more* strictly: over any interval it is admitted at most what its quota
//!   admits, however many keys flood the table (`tests/flood_bound.rs` checks
//!   this for tables of 16 to 10⁶ slots, flood rates up to the table's
//!   turnover, 1 and 4 threads).
//! * **Cost.** A new key whose three cells are all live (each recently written
//!   by an eviction) starts as limited as the least limited of them: an innocent
//!   key is limited early. With `e` evictions whose states are still live and
//!   `m` cells, that happens to a new key with probability about
//!   `(1 − e^(−3e/m))³`: rare while the table has room (at 80 % load almost no
//!   key is evicted), common only under a flood that turns the whole table over,
//!   when keeping every victim's limit is what matters.
//! * A table over caller-provided storage has no sketch, and an algorithm
//!   without a join offers none: there [`FullPolicy::EvictStalest`] turns the new
//!   key away instead (as [`FullPolicy::Reject`]).
//!
//! # Concurrency
//! * A check of a key that is in the table takes no lock: one 128-bit load per
//!   probed slot and one 128-bit CAS of the key's slot. Fingerprint and state
//!   change together, so a thread can never apply one key's decision to a slot
//!   another key has since taken over (the CAS fails and the thread looks again).
//! * Placing a *new* key takes **no lock**: the key is claimed in a free slot
//!   as *pending* (bit 127 of the slot), validated against the key's other
//!   candidate slots (of two racing claims of one key, the one earlier in the
//!   scan order wins and the other is withdrawn), then committed by one CAS. So
//!   two racing first requests of one key never land in two slots, and a thread
//!   (or a process sharing the table) that stops at any instruction leaves
//!   nothing held: a pending slot is nobody's state, withdrawn by the key's next
//!   placement after a bounded spin, or taken over once its proposed state is
//!   fresh. The steps and the argument are in `table.rs`.
//! * A key's check is the shared compare-and-swap loop of every limiter
//!   ([`crate::limiter`]'s `apply_cell`) on the key's slot; the loop stops when the
//!   slot stops holding the key's fingerprint.
//! * An eviction folds the evicted state into the sketch *before* it takes the
//!   slot over, and a key that is not in the table reads the sketch after seeing
//!   it absent and again after validating its claim (a change withdraws the
//!   claim), so a key evicted while it is being checked resumes from a state that
//!   includes every admission it got.
//!
//! Loom models cover slot claims by two new keys, reuse of an idle slot while
//! another thread still checks the old key, eviction racing a check of the
//! evicted key, and the full-table policies.

#[cfg(feature = "std")]
mod any;
mod check;
#[cfg(feature = "std")]
mod engine;
#[cfg(feature = "std")]
mod pool;
mod sketch;
mod slot;
mod stats;
mod table;

use core::hash::BuildHasher;
use core::marker::PhantomData;

#[cfg(feature = "alloc")]
use alloc::boxed::Box;

use crate::error::ConfigError;
use crate::limiter::{Algorithm, ConfigCell};
use crate::quota::Quota;

#[cfg(feature = "std")]
pub use any::{AnyKeyed, KeyHash};
#[cfg(feature = "std")]
pub(crate) use pool::BuildPoolWord;
#[cfg(feature = "std")]
pub use pool::{Pool, PoolMemory, RegistryEntry};
use sketch::Cells;
use slot::committed_state;
pub use slot::{DROP_SKEW_NS, GROUP_SLOTS, Group, Slot, slots_lock_free};
use stats::Stats;
pub use stats::{FullPolicy, KeyedStats};
#[cfg(loom)]
#[doc(hidden)]
pub use table::crash;

/// The default hasher of keyed tables under `std`: foldhash, seeded per table.
#[cfg(feature = "std")]
pub type DefaultHashBuilder = foldhash::fast::SeedableRandomState;

/// A foldhash builder seeded with 64 bits from the OS RNG (drawn through std's
/// SipHash `RandomState`, whose keys come from the OS), unique per table.
#[cfg(feature = "std")]
fn random_hasher() -> DefaultHashBuilder {
    let seed = std::hash::RandomState::new().hash_one(0x5e_ed_u64);
    foldhash::fast::SeedableRandomState::with_seed(seed, foldhash::SharedSeed::global_random())
}

/// A table of per-key limiter states over storage `S` (`Box<[Group]>` or a
/// `&'static [Group]`), hashing keys with `H`, reading time from `C`.
///
/// Use [`KeyedLimiter`] to name the usual heap-backed form.
///
/// ```
/// use sluicegate::{Gcra, Quota};
/// use sluicegate::keyed::KeyedLimiter;
/// let per_ip: KeyedLimiter<Gcra, ()> =
///     KeyedLimiter::with_clock(Quota::per_second(2), 1024, ()).unwrap();
/// assert!(per_ip.check_at(&"10.0.0.1", 0).allowed);
/// assert!(per_ip.check_at(&"10.0.0.1", 0).allowed);
/// assert!(!per_ip.check_at(&"10.0.0.1", 0).allowed);
/// assert!(per_ip.check_at(&"10.0.0.2", 0).allowed); // its own state
/// assert_eq!(per_ip.capacity(), 1024);
/// ```
#[derive(Debug)]
pub struct Keyed<A, C, S, H> {
    groups: S,
    config: ConfigCell,
    hasher: H,
    clock: C,
    policy: FullPolicy,
    sketch: Cells,
    stats: Stats,
    _algorithm: PhantomData<fn() -> A>,
}

/// A heap-backed keyed table with the default hasher.
#[cfg(feature = "std")]
pub type KeyedLimiter<A, C = crate::clock::DefaultClock> =
    Keyed<A, C, Box<[Group]>, DefaultHashBuilder>;

#[cfg(feature = "std")]
impl<A: Algorithm, C> Keyed<A, C, Box<[Group]>, DefaultHashBuilder> {
    /// A table of at least `capacity` keys (rounded up to whole groups of 8),
    /// allocated now, once.
    ///
    /// ```
    /// # use sluicegate::{Fixed, ManualClock, Quota};
    /// # use sluicegate::keyed::KeyedLimiter;
    /// let t = KeyedLimiter::<Fixed, _>::with_clock(Quota::per_minute(10), 1000, ManualClock::new(0)).unwrap();
    /// assert_eq!(t.capacity(), 1000);
    /// assert!(KeyedLimiter::<Fixed, _>::with_clock(Quota::per_minute(10), 0, ()).is_err());
    /// ```
    pub fn with_clock(quota: Quota, capacity: usize, clock: C) -> Result<Self, ConfigError> {
        Self::with_capacity_and_hasher(quota, capacity, random_hasher(), clock)
    }
}

#[cfg(feature = "std")]
impl<A: Algorithm> Keyed<A, crate::clock::DefaultClock, Box<[Group]>, DefaultHashBuilder> {
    /// A table of at least `capacity` keys on the default clock.
    ///
    /// ```
    /// # use sluicegate::{Gcra, Quota};
    /// # use sluicegate::keyed::KeyedLimiter;
    /// let t = KeyedLimiter::<Gcra>::new(Quota::per_second(10), 100_000).unwrap();
    /// assert!(t.check(&42u64).allowed);
    /// ```
    pub fn new(quota: Quota, capacity: usize) -> Result<Self, ConfigError> {
        Self::with_clock(quota, capacity, Default::default())
    }
}

#[cfg(feature = "alloc")]
impl<A: Algorithm, C, H: BuildHasher> Keyed<A, C, Box<[Group]>, H> {
    /// A heap-backed table with an explicit hasher (e.g. a fixed seed without std).
    ///
    /// ```
    /// # use sluicegate::{Gcra, Quota};
    /// # use sluicegate::keyed::Keyed;
    /// let h = foldhash::fast::FixedState::with_seed(7);
    /// let t = Keyed::<Gcra, _, _, _>::with_capacity_and_hasher(Quota::per_second(1), 64, h, ()).unwrap();
    /// assert!(t.check_at(&1u32, 0).allowed);
    /// ```
    pub fn with_capacity_and_hasher(
        quota: Quota,
        capacity: usize,
        hasher: H,
        clock: C,
    ) -> Result<Self, ConfigError> {
        if capacity == 0 {
            return Err(ConfigError::Zero { field: "capacity" });
        }
        // Validate the quota before allocating anything.
        A::params(&quota)?;
        let groups = capacity.div_ceil(GROUP_SLOTS);
        let slots = groups.saturating_mul(GROUP_SLOTS);
        let groups = try_boxed(groups, Group::new)?;
        let cells = try_boxed(sketch::cells_for(slots), Slot::empty)?;
        let mut t = Self::with_storage(quota, groups, hasher, clock)?;
        t.sketch = Cells::Owned(cells);
        Ok(t)
    }
}

/// `n` items made by `make` in a boxed slice, allocated fallibly: an error naming
/// the bytes (`usize::MAX` when the size overflows) instead of an abort.
#[cfg(feature = "alloc")]
fn try_boxed<T>(n: usize, make: impl FnMut() -> T) -> Result<Box<[T]>, ConfigError> {
    let bytes = n
        .checked_mul(core::mem::size_of::<T>())
        .filter(|&b| b <= isize::MAX as usize)
        .ok_or(ConfigError::Alloc { bytes: usize::MAX })?;
    let mut v = alloc::vec::Vec::new();
    v.try_reserve_exact(n)
        .map_err(|_| ConfigError::Alloc { bytes })?;
    v.resize_with(n, make);
    Ok(v.into_boxed_slice())
}

impl<A: Algorithm, C, S: AsRef<[Group]>, H: BuildHasher> Keyed<A, C, S, H> {
    /// A table over caller-provided storage: the no-heap form for embedded use.
    ///
    /// ```
    /// use sluicegate::{Gcra, Quota};
    /// use sluicegate::keyed::{Group, Keyed};
    /// static SLOTS: [Group; 4] = [const { Group::new() }; 4];
    /// let t = Keyed::<Gcra, (), _, _>::with_storage(
    ///     Quota::per_second(1), &SLOTS[..], foldhash::fast::FixedState::with_seed(42), (),
    /// ).unwrap();
    /// assert_eq!(t.capacity(), 32);
    /// assert!(t.check_at(&[10u8, 0, 0, 1], 0).allowed);
    /// ```
    pub fn with_storage(quota: Quota, groups: S, hasher: H, clock: C) -> Result<Self, ConfigError> {
        if groups.as_ref().is_empty() {
            return Err(ConfigError::Zero { field: "capacity" });
        }
        let params = A::params(&quota)?;
        Ok(Self {
            groups,
            config: ConfigCell::new(A::to_words(&params)),
            hasher,
            clock,
            policy: FullPolicy::default(),
            sketch: Cells::None,
            stats: Stats::new(),
            _algorithm: PhantomData,
        })
    }

    /// The same table with parameter words `w` (a shaper's max delay).
    #[cfg(feature = "std")]
    pub(super) fn with_words(self, w: [u64; crate::limiter::PARAM_WORDS]) -> Self {
        let _ = self.config.update(|_| Ok::<_, ()>(w));
        self
    }

    /// Sets the full-table policy.
    ///
    /// ```
    /// # use sluicegate::{Gcra, Quota};
    /// # use sluicegate::keyed::{FullPolicy, Keyed};
    /// let t = Keyed::<Gcra, _, _, _>::with_capacity_and_hasher(
    ///     Quota::per_second(1), 8, foldhash::fast::FixedState::with_seed(1), (),
    /// ).unwrap().with_policy(FullPolicy::Reject);
    /// assert_eq!(t.policy(), FullPolicy::Reject);
    /// ```
    #[must_use]
    pub fn with_policy(mut self, policy: FullPolicy) -> Self {
        self.policy = policy;
        self
    }

    /// The full-table policy.
    ///
    /// ```
    /// # use sluicegate::{Gcra, Quota};
    /// # use sluicegate::keyed::{FullPolicy, KeyedLimiter};
    /// let t = KeyedLimiter::<Gcra, ()>::with_clock(Quota::per_second(1), 8, ()).unwrap();
    /// assert_eq!(t.policy(), FullPolicy::EvictStalest);
    /// ```
    pub fn policy(&self) -> FullPolicy {
        self.policy
    }

    /// Number of slots (keys the table can track at once).
    ///
    /// ```
    /// # use sluicegate::{Gcra, Quota};
    /// # use sluicegate::keyed::KeyedLimiter;
    /// assert_eq!(KeyedLimiter::<Gcra, ()>::with_clock(Quota::per_second(1), 9, ()).unwrap().capacity(), 16);
    /// ```
    pub fn capacity(&self) -> usize {
        self.groups.as_ref().len() * GROUP_SLOTS
    }

    /// Keys holding live (non-fresh) state at `now`: a scan of the whole table.
    ///
    /// ```
    /// # use sluicegate::{Gcra, Quota};
    /// # use sluicegate::keyed::KeyedLimiter;
    /// let t = KeyedLimiter::<Gcra, ()>::with_clock(Quota::per_second(1), 64, ()).unwrap();
    /// t.check_at(&"a", 0);
    /// t.check_at(&"b", 0);
    /// assert_eq!(t.len_at(0), 2);
    /// assert_eq!(t.len_at(1_000_000_000), 0); // both full again: nothing to remember
    /// ```
    pub fn len_at(&self, now: u64) -> usize {
        let p = self.params();
        self.groups
            .as_ref()
            .iter()
            .flat_map(|g| g.slots().iter())
            .filter(|s| {
                let v = s.load();
                committed_state(v).is_some_and(|w| !A::is_fresh(&p, w, now))
            })
            .count()
    }

    /// Whether no key holds live state at `now`.
    ///
    /// ```
    /// # use sluicegate::{Gcra, Quota};
    /// # use sluicegate::keyed::KeyedLimiter;
    /// let t = KeyedLimiter::<Gcra, ()>::with_clock(Quota::per_second(1), 64, ()).unwrap();
    /// assert!(t.is_empty_at(0));
    /// ```
    pub fn is_empty_at(&self, now: u64) -> bool {
        self.len_at(now) == 0
    }

    /// The event counters.
    ///
    /// ```
    /// # use sluicegate::{Gcra, Quota};
    /// # use sluicegate::keyed::KeyedLimiter;
    /// let t = KeyedLimiter::<Gcra, ()>::with_clock(Quota::per_second(1), 64, ()).unwrap();
    /// t.check_at(&"a", 0);
    /// t.check_at(&"a", 0);
    /// assert_eq!(t.stats().inserted, 1);
    /// ```
    pub fn stats(&self) -> KeyedStats {
        self.stats.snapshot()
    }

    /// The current parameters (shared by every key).
    ///
    /// ```
    /// # use sluicegate::{Gcra, Quota};
    /// # use sluicegate::keyed::KeyedLimiter;
    /// let t = KeyedLimiter::<Gcra, ()>::with_clock(Quota::per_second(3), 8, ()).unwrap();
    /// assert_eq!(t.params().burst(), 3);
    /// ```
    pub fn params(&self) -> A::Params {
        A::from_words(self.config.load())
    }

    /// Changes the quota of every key at once; states carry over as in the single
    /// limiter (see each algorithm's docs).
    ///
    /// ```
    /// # use sluicegate::{Gcra, Quota};
    /// # use sluicegate::keyed::KeyedLimiter;
    /// let t = KeyedLimiter::<Gcra, ()>::with_clock(Quota::per_second(1), 8, ()).unwrap();
    /// t.check_at(&"a", 0);
    /// t.set_quota(&Quota::per_second(1).burst(2)).unwrap();
    /// assert!(t.check_at(&"a", 0).allowed);
    /// ```
    pub fn set_quota(&self, quota: &Quota) -> Result<(), ConfigError> {
        self.config.requota::<A>(quota)
    }

    /// The clock.
    ///
    /// ```
    /// # use sluicegate::{Clock, Gcra, ManualClock, Quota};
    /// # use sluicegate::keyed::KeyedLimiter;
    /// let t = KeyedLimiter::<Gcra, _>::with_clock(Quota::per_second(1), 8, ManualClock::new(5)).unwrap();
    /// assert_eq!(t.clock().now(), 5);
    /// ```
    pub fn clock(&self) -> &C {
        &self.clock
    }

    /// Forgets every key. Not atomic with concurrent checks (a check racing a
    /// clear may land before or after it, slot by slot).
    ///
    /// ```
    /// # use sluicegate::{Gcra, Quota};
    /// # use sluicegate::keyed::KeyedLimiter;
    /// let t = KeyedLimiter::<Gcra, ()>::with_clock(Quota::per_second(1), 8, ()).unwrap();
    /// t.check_at(&"x", 0);
    /// t.clear();
    /// assert!(t.check_at(&"x", 0).allowed);
    /// ```
    pub fn clear(&self) {
        for g in self.groups.as_ref() {
            g.clear();
        }
        self.sketch.get().clear();
    }
}
