//! Keyed limiters: one limiter state per client key (IP, user id, API token), all
//! under one quota, in a table of fixed capacity that never allocates after it is
//! built and never grows, whatever the traffic.
//!
//! # Layout
//! The table is an array of [`Group`]s. A group is eight 16-byte [`Slot`]s in one
//! [`CachePadded`] block (128 bytes on x86-64: the line and the adjacent line the
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
//! it over at any time: memory stays bounded by reuse, and no decision changes.
//! Only when all 16 candidate slots hold *live* state does [`FullPolicy`] decide:
//! reject the new key, admit it without limiting it, or evict the stalest entry
//! (the one closest to fresh); each such event is counted in [`KeyedStats`].
//!
//! # Concurrency
//! * A check of a key that is in the table takes no lock: one 128-bit load per
//!   probed slot and one 128-bit CAS of the key's slot. Fingerprint and state
//!   change together, so a thread can never apply one key's decision to a slot
//!   another key has since taken over (the CAS fails and the thread looks again).
//! * Placing a *new* key takes a lock bit in its home group (bit 127 of the group's
//!   first slot), held for one scan of 16 slots, never across a clock read, an
//!   allocation or a system call. It serialises the placement decisions for keys
//!   of one home group, which is what rules out two racing first requests of the
//!   same key landing in two different slots (each would get a full bucket). Keys
//!   already placed never wait for it.
//!
//! Loom models cover slot claims by two new keys, reuse of an idle slot while
//! another thread still checks the old key, eviction, and the full-table policies.

use core::hash::{BuildHasher, Hash};
use core::marker::PhantomData;

#[cfg(feature = "alloc")]
use alloc::boxed::Box;
#[cfg(feature = "alloc")]
use alloc::vec::Vec;
use crossbeam_utils::CachePadded;

use crate::clock::Clock;
use crate::decision::Decision;
use crate::error::{ConfigError, InsufficientCapacity};
use crate::limiter::{Algorithm, ConfigCell, Step};
use crate::quota::Quota;
use crate::shaper::{Reservation, Shaping};
use crate::sync::{spin_loop, AtomicU128, AtomicU64, Ordering};

/// Slots per group (2 under loom, to keep the model's state space small: the
/// algorithm does not depend on the group size).
#[cfg(not(loom))]
pub const GROUP_SLOTS: usize = 8;
/// Slots per group (2 under loom, to keep the model's state space small).
#[cfg(loom)]
pub const GROUP_SLOTS: usize = 2;
/// Groups a key may live in: its home group and an independent second choice.
const PROBE_GROUPS: usize = 2;

const LOCK: u128 = 1 << 127;
const FP_MASK: u64 = u64::MAX >> 1;
const STATE_MASK: u128 = u64::MAX as u128;

#[inline]
fn fp_of(v: u128) -> u64 {
    (v >> 64) as u64 & FP_MASK
}
#[inline]
fn state_of(v: u128) -> u64 {
    v as u64
}
/// `v` with its state replaced (fingerprint and lock bit kept).
#[inline]
fn with_state(v: u128, state: u64) -> u128 {
    (v & !STATE_MASK) | state as u128
}
/// `v` taken over by `fp` with `state` (the lock bit kept).
#[inline]
fn claimed(v: u128, fp: u64, state: u64) -> u128 {
    (v & LOCK) | ((fp as u128) << 64) | state as u128
}

/// One table entry: fingerprint and state word in one 128-bit atomic.
#[derive(Debug)]
#[repr(transparent)]
pub struct Slot(AtomicU128);

impl Slot {
    #[inline]
    fn load(&self) -> u128 {
        self.0.load(Ordering::Acquire)
    }
    #[inline]
    fn cas(&self, current: u128, new: u128) -> bool {
        self.0
            .compare_exchange(current, new, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
    }
}

/// Eight slots in one cache-padded block: the unit of storage. Build arrays of
/// them for a table without a heap:
///
/// ```
/// use sluicegate::keyed::Group;
/// static SLOTS: [Group; 16] = [const { Group::new() }; 16]; // 128 keys
/// assert_eq!(core::mem::size_of::<Group>() % 128, 0);
/// ```
#[derive(Debug)]
pub struct Group(CachePadded<[Slot; GROUP_SLOTS]>);

impl Group {
    /// An empty group.
    ///
    /// ```
    /// # use sluicegate::keyed::Group;
    /// let g = Group::new();
    /// # let _ = g;
    /// ```
    #[cfg(not(loom))]
    pub const fn new() -> Self {
        Self(CachePadded::new(
            [const { Slot(AtomicU128::new(0)) }; GROUP_SLOTS],
        ))
    }

    /// An empty group.
    #[cfg(loom)]
    pub fn new() -> Self {
        Self(CachePadded::new(core::array::from_fn(|_| {
            Slot(AtomicU128::new(0))
        })))
    }

    fn slots(&self) -> &[Slot; GROUP_SLOTS] {
        &self.0
    }

    fn lock(&self) {
        let first = &self.slots()[0];
        loop {
            let v = first.load();
            if v & LOCK == 0 && first.cas(v, v | LOCK) {
                return;
            }
            spin_loop();
        }
    }

    fn unlock(&self) {
        self.slots()[0].0.fetch_and(!LOCK, Ordering::AcqRel);
    }
}

impl Default for Group {
    fn default() -> Self {
        Self::new()
    }
}

/// What to do with a new key when all its candidate slots hold live state.
///
/// ```
/// use sluicegate::keyed::FullPolicy;
/// assert_eq!(FullPolicy::default(), FullPolicy::EvictStalest);
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum FullPolicy {
    /// Deny the new key (`retry_after` = until a candidate slot frees up). Safe
    /// under attack: keys already tracked keep their limits exactly; new clients
    /// wait. Counted in [`KeyedStats::rejected`].
    Reject,
    /// Admit the new key without tracking it: availability first; the untracked
    /// requests are not limited. Counted in [`KeyedStats::unlimited`].
    AllowUnlimited,
    /// Replace the live entry that is closest to fresh (the least state lost); that
    /// key starts over with a full limit. Counted in [`KeyedStats::evicted`].
    #[default]
    EvictStalest,
}

/// Event counters of a keyed table (monotonic since construction).
///
/// ```
/// use sluicegate::keyed::KeyedStats;
/// assert_eq!(KeyedStats::default().inserted, 0);
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct KeyedStats {
    /// New keys placed in an empty slot.
    pub inserted: u64,
    /// New keys placed in a slot whose previous key had gone fresh (lossless reuse).
    pub reused: u64,
    /// Live entries replaced under [`FullPolicy::EvictStalest`].
    pub evicted: u64,
    /// New keys denied under [`FullPolicy::Reject`].
    pub rejected: u64,
    /// New keys admitted untracked under [`FullPolicy::AllowUnlimited`].
    pub unlimited: u64,
}

const STAT_STRIPES: usize = 8;

#[derive(Debug)]
struct StatCells([AtomicU64; 5]);

impl StatCells {
    #[cfg(not(loom))]
    const fn new() -> Self {
        Self([const { AtomicU64::new(0) }; 5])
    }
    #[cfg(loom)]
    fn new() -> Self {
        Self(core::array::from_fn(|_| AtomicU64::new(0)))
    }
}

#[derive(Clone, Copy)]
enum Event {
    Inserted = 0,
    Reused = 1,
    Evicted = 2,
    Rejected = 3,
    Unlimited = 4,
}

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
    stats: [CachePadded<StatCells>; STAT_STRIPES],
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
        let groups = capacity.div_ceil(GROUP_SLOTS);
        let groups: Vec<Group> = (0..groups).map(|_| Group::new()).collect();
        Self::with_storage(quota, groups.into_boxed_slice(), hasher, clock)
    }
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
            stats: core::array::from_fn(|_| CachePadded::new(StatCells::new())),
            _algorithm: PhantomData,
        })
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
                fp_of(v) != 0 && !A::is_fresh(&p, state_of(v), now)
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
        let sum = |e: Event| {
            self.stats
                .iter()
                .map(|c| c.0[e as usize].load(Ordering::Relaxed))
                .fold(0u64, u64::wrapping_add)
        };
        KeyedStats {
            inserted: sum(Event::Inserted),
            reused: sum(Event::Reused),
            evicted: sum(Event::Evicted),
            rejected: sum(Event::Rejected),
            unlimited: sum(Event::Unlimited),
        }
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
        self.config.update(|w| {
            let old = A::from_words(w);
            A::reparams(&old, quota).map(|p| A::to_words(&p))
        })
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

    /// Admits one unit for `key` at `now`.
    ///
    /// ```
    /// # use sluicegate::{SlidingWindow, Sliding, Quota};
    /// # use sluicegate::keyed::KeyedLimiter;
    /// let t = KeyedLimiter::<Sliding, ()>::with_clock(Quota::per_second(1), 8, ()).unwrap();
    /// assert!(t.check_at(&"k", 0).allowed);
    /// assert!(!t.check_at(&"k", 1).allowed);
    /// ```
    #[inline]
    pub fn check_at<K: Hash + ?Sized>(&self, key: &K, now: u64) -> Decision {
        match self.check_n_at(key, 1, now) {
            Ok(d) => d,
            Err(e) => over_capacity(e),
        }
    }

    /// Admits `n` units for `key` at `now`, all-or-nothing; `n = 0` is a peek.
    ///
    /// ```
    /// # use sluicegate::{Gcra, Quota};
    /// # use sluicegate::keyed::KeyedLimiter;
    /// let t = KeyedLimiter::<Gcra, ()>::with_clock(Quota::per_second(5), 8, ()).unwrap();
    /// assert_eq!(t.check_n_at(&7u64, 5, 0).unwrap().remaining, 0);
    /// assert!(t.check_n_at(&7u64, 6, 0).is_err());
    /// ```
    #[inline]
    pub fn check_n_at<K: Hash + ?Sized>(
        &self,
        key: &K,
        n: u64,
        now: u64,
    ) -> Result<Decision, InsufficientCapacity> {
        self.run(self.hasher.hash_one(key), n, now, true)
            .map(|s| s.decision)
    }

    /// What [`Self::check_n_at`] would answer for `key`, charging nothing (and
    /// placing no new key).
    ///
    /// ```
    /// # use sluicegate::{Gcra, Quota};
    /// # use sluicegate::keyed::KeyedLimiter;
    /// let t = KeyedLimiter::<Gcra, ()>::with_clock(Quota::per_second(5), 8, ()).unwrap();
    /// assert_eq!(t.peek_n_at(&"x", 2, 0).unwrap().remaining, 3);
    /// assert_eq!(t.stats().inserted, 0);
    /// ```
    #[inline]
    pub fn peek_n_at<K: Hash + ?Sized>(
        &self,
        key: &K,
        n: u64,
        now: u64,
    ) -> Result<Decision, InsufficientCapacity> {
        self.run(self.hasher.hash_one(key), n, now, false)
            .map(|s| s.decision)
    }

    /// The state of `key` at `now` as a cost-1 request would see it, charging nothing.
    ///
    /// ```
    /// # use sluicegate::{Gcra, Quota};
    /// # use sluicegate::keyed::KeyedLimiter;
    /// let t = KeyedLimiter::<Gcra, ()>::with_clock(Quota::per_second(5), 8, ()).unwrap();
    /// t.check_at(&"x", 0);
    /// assert_eq!(t.peek_at(&"x", 0).remaining, 3);
    /// ```
    #[inline]
    pub fn peek_at<K: Hash + ?Sized>(&self, key: &K, now: u64) -> Decision {
        match self.peek_n_at(key, 1, now) {
            Ok(d) => d,
            Err(e) => over_capacity(e),
        }
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
            for s in g.slots() {
                // Keep a lock bit a concurrent placement may hold.
                let mut v = s.load();
                while !s.cas(v, v & LOCK) {
                    v = s.load();
                }
            }
        }
    }

    fn count(&self, group: usize, e: Event) {
        self.stats[group % STAT_STRIPES].0[e as usize].fetch_add(1, Ordering::Relaxed);
    }

    /// The home group of a hash and the group after it.
    #[inline]
    fn window(&self, h: u64) -> (usize, [&Group; PROBE_GROUPS]) {
        let groups = self.groups.as_ref();
        let len = groups.len();
        // Multiply-shift: the high bits of the hash pick the home group, uniformly;
        // a second, independent mix of the hash picks the other choice.
        let home = ((h as u128 * len as u128) >> 64) as usize;
        let mixed = h.rotate_left(32).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        let mut other = ((mixed as u128 * len as u128) >> 64) as usize;
        if other == home {
            other = if home + 1 == len { 0 } else { home + 1 };
        }
        (home, [&groups[home], &groups[other]])
    }

    #[inline]
    fn find<'a>(
        window: &[&'a Group; PROBE_GROUPS],
        fp: u64,
        len: usize,
    ) -> Option<(&'a Slot, u128)> {
        let probe = if len == 1 { 1 } else { PROBE_GROUPS };
        for g in &window[..probe] {
            for s in g.slots() {
                let v = s.load();
                if fp_of(v) == fp {
                    return Some((s, v));
                }
            }
        }
        None
    }

    /// The decision for hash `h`: find the key's slot (lock-free) and CAS its state,
    /// or place the key.
    fn run(&self, h: u64, n: u64, now: u64, consume: bool) -> Result<Step, InsufficientCapacity> {
        let fp = match h & FP_MASK {
            0 => 1,
            f => f,
        };
        let (home, window) = self.window(h);
        let len = self.groups.as_ref().len();
        loop {
            let found = Self::find(&window, fp, len);
            // Parameters are read after the slot, as in the single limiter
            // (limiter.rs explains why the order matters for `set_quota`).
            let p = self.params();
            let capacity = A::capacity(&p);
            if n > capacity {
                return Err(InsufficientCapacity {
                    requested: n,
                    capacity,
                });
            }
            match found {
                Some((slot, v)) => {
                    let step = A::decide(&p, state_of(v), now, n);
                    match step.next {
                        Some(next) if consume && next != state_of(v) => {
                            if slot.cas(v, with_state(v, next)) {
                                return Ok(step);
                            }
                            // The slot changed (another update, or another key
                            // took it over after it went fresh): look again.
                        }
                        _ => return Ok(step),
                    }
                }
                None => {
                    let step = A::decide(&p, 0, now, n);
                    let Some(next) = step.next.filter(|_| consume) else {
                        return Ok(step);
                    };
                    if let Some(step) = self.place(home, &window, len, fp, next, step, &p, now) {
                        return Ok(step);
                    }
                }
            }
        }
    }

    /// Places a new key under its home group's lock. `None`: the key turned out
    /// to be present (placed by a racing request), decide again.
    #[allow(clippy::too_many_arguments)]
    fn place(
        &self,
        home: usize,
        window: &[&Group; PROBE_GROUPS],
        len: usize,
        fp: u64,
        next: u64,
        step: Step,
        p: &A::Params,
        now: u64,
    ) -> Option<Step> {
        window[0].lock();
        let outcome = self.place_locked(home, window, len, fp, next, step, p, now);
        window[0].unlock();
        outcome
    }

    #[allow(clippy::too_many_arguments)]
    fn place_locked(
        &self,
        home: usize,
        window: &[&Group; PROBE_GROUPS],
        len: usize,
        fp: u64,
        next: u64,
        step: Step,
        p: &A::Params,
        now: u64,
    ) -> Option<Step> {
        let probe = if len == 1 { 1 } else { PROBE_GROUPS };
        loop {
            if Self::find(window, fp, len).is_some() {
                return None;
            }
            // Per candidate group: its first empty slot, its first fresh one, and how
            // many it has of either. The new key goes to the group with more room
            // ("two choices"): at 80 % load that leaves 0.02 % of keys without a
            // slot, against 2.5 % for first-fit over two adjacent groups.
            let mut room = [Room::default(); PROBE_GROUPS];
            let mut stalest: Option<(&Slot, u128, u64)> = None;
            for (g, r) in window[..probe].iter().zip(room.iter_mut()) {
                for s in g.slots() {
                    let v = s.load();
                    if fp_of(v) == 0 {
                        r.empty.get_or_insert((s, v));
                        r.free += 1;
                    } else if A::is_fresh(p, state_of(v), now) {
                        r.fresh.get_or_insert((s, v));
                        r.free += 1;
                    } else {
                        let left = A::decide(p, state_of(v), now, 0).decision.reset_after_ns;
                        if stalest.is_none_or(|(_, _, l)| left < l) {
                            stalest = Some((s, v, left));
                        }
                    }
                }
            }
            let best = if room[1].free > room[0].free {
                room[1]
            } else {
                room[0]
            };
            let (empty, fresh) = (best.empty, best.fresh);
            let (target, event) = match (empty, fresh, stalest) {
                (Some((s, v)), _, _) => ((s, v), Event::Inserted),
                (None, Some((s, v)), _) => ((s, v), Event::Reused),
                (None, None, Some((s, v, left))) => match self.policy {
                    FullPolicy::EvictStalest => ((s, v), Event::Evicted),
                    FullPolicy::Reject => {
                        self.count(home, Event::Rejected);
                        return Some(Step {
                            decision: Decision {
                                allowed: false,
                                remaining: 0,
                                retry_after_ns: left,
                                reset_after_ns: left,
                                limit: A::capacity(p),
                            },
                            next: None,
                            delay_ns: 0,
                        });
                    }
                    FullPolicy::AllowUnlimited => {
                        self.count(home, Event::Unlimited);
                        return Some(Step { next: None, ..step });
                    }
                },
                // Every probed slot was empty, fresh or live: unreachable, but a
                // retry is the safe answer.
                (None, None, None) => continue,
            };
            let (slot, v) = target;
            if slot.cas(v, claimed(v, fp, next)) {
                self.count(home, event);
                return Some(step);
            }
            // The slot changed under us (its owner checked, or a key from another
            // home group took it): choose again.
        }
    }
}

impl<C, S: AsRef<[Group]>, H: BuildHasher> Keyed<Shaping, C, S, H> {
    /// Sets the longest wait a reservation may be given (0 after construction).
    ///
    /// ```
    /// # use sluicegate::{Quota, Shaping};
    /// # use sluicegate::keyed::Keyed;
    /// let t = Keyed::<Shaping, _, _, _>::with_capacity_and_hasher(
    ///     Quota::per_second(10).burst(1), 8, foldhash::fast::FixedState::with_seed(3), (),
    /// ).unwrap().with_max_delay(1_000_000_000);
    /// t.reserve_n_at(&"job", 1, 0).unwrap();
    /// assert_eq!(t.reserve_n_at(&"job", 1, 0).unwrap().delay_ns(), 100_000_000);
    /// ```
    #[must_use]
    pub fn with_max_delay(self, max_delay_ns: u64) -> Self {
        let _ = self.config.update(|mut w| {
            w[3] = max_delay_ns;
            Ok::<_, ()>(w)
        });
        self
    }

    /// Reserves `n` units for `key` at `now` (keyed shaper): the delay to wait.
    ///
    /// ```
    /// # use sluicegate::{Quota, Shaping};
    /// # use sluicegate::keyed::Keyed;
    /// let t = Keyed::<Shaping, _, _, _>::with_capacity_and_hasher(
    ///     Quota::per_second(10).burst(1), 8, foldhash::fast::FixedState::with_seed(3), (),
    /// ).unwrap();
    /// assert_eq!(t.reserve_n_at(&"job", 1, 0).unwrap().delay_ns(), 0);
    /// assert!(!t.reserve_n_at(&"job", 1, 0).unwrap().granted()); // max delay 0
    /// ```
    pub fn reserve_n_at<K: Hash + ?Sized>(
        &self,
        key: &K,
        n: u64,
        now: u64,
    ) -> Result<Reservation, InsufficientCapacity> {
        let step = self.run(self.hasher.hash_one(key), n, now, true)?;
        Ok(Reservation::from_step(
            &step,
            n,
            self.params().gcra().emission_interval_ns(),
        ))
    }
}

impl<A: Algorithm, C: Clock, S: AsRef<[Group]>, H: BuildHasher> Keyed<A, C, S, H> {
    /// [`Self::check_at`] on the table's clock.
    ///
    /// ```
    /// # use sluicegate::{Gcra, Quota};
    /// # use sluicegate::keyed::KeyedLimiter;
    /// let t = KeyedLimiter::<Gcra>::new(Quota::per_second(10), 64).unwrap();
    /// assert!(t.check(&"k").allowed);
    /// ```
    #[inline]
    pub fn check<K: Hash + ?Sized>(&self, key: &K) -> Decision {
        self.check_at(key, self.clock.now())
    }

    /// [`Self::check_n_at`] on the table's clock.
    ///
    /// ```
    /// # use sluicegate::{Gcra, Quota};
    /// # use sluicegate::keyed::KeyedLimiter;
    /// let t = KeyedLimiter::<Gcra>::new(Quota::per_second(10), 64).unwrap();
    /// assert!(t.check_n(&"k", 10).unwrap().allowed);
    /// ```
    #[inline]
    pub fn check_n<K: Hash + ?Sized>(
        &self,
        key: &K,
        n: u64,
    ) -> Result<Decision, InsufficientCapacity> {
        self.check_n_at(key, n, self.clock.now())
    }

    /// [`Self::peek_at`] on the table's clock.
    ///
    /// ```
    /// # use sluicegate::{Gcra, Quota};
    /// # use sluicegate::keyed::KeyedLimiter;
    /// let t = KeyedLimiter::<Gcra>::new(Quota::per_second(10), 64).unwrap();
    /// assert_eq!(t.peek(&"k").remaining, 9);
    /// ```
    #[inline]
    pub fn peek<K: Hash + ?Sized>(&self, key: &K) -> Decision {
        self.peek_at(key, self.clock.now())
    }

    /// [`Self::peek_n_at`] on the table's clock.
    ///
    /// ```
    /// # use sluicegate::{Gcra, Quota};
    /// # use sluicegate::keyed::KeyedLimiter;
    /// let t = KeyedLimiter::<Gcra>::new(Quota::per_second(10), 64).unwrap();
    /// assert!(t.peek_n(&"k", 10).unwrap().allowed);
    /// ```
    #[inline]
    pub fn peek_n<K: Hash + ?Sized>(
        &self,
        key: &K,
        n: u64,
    ) -> Result<Decision, InsufficientCapacity> {
        self.peek_n_at(key, n, self.clock.now())
    }

    /// Live keys now (see [`Self::len_at`]).
    ///
    /// ```
    /// # use sluicegate::{Gcra, Quota};
    /// # use sluicegate::keyed::KeyedLimiter;
    /// let t = KeyedLimiter::<Gcra>::new(Quota::per_minute(10), 64).unwrap();
    /// t.check(&"k");
    /// assert_eq!(t.len(), 1);
    /// ```
    pub fn len(&self) -> usize {
        self.len_at(self.clock.now())
    }

    /// Whether no key holds live state now.
    ///
    /// ```
    /// # use sluicegate::{Gcra, Quota};
    /// # use sluicegate::keyed::KeyedLimiter;
    /// let t = KeyedLimiter::<Gcra>::new(Quota::per_minute(10), 64).unwrap();
    /// assert!(t.is_empty());
    /// ```
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// What one candidate group offers a new key: its first empty slot, its first
/// fresh one (with the values they held), and how many of either it has.
#[derive(Clone, Copy, Default)]
struct Room<'a> {
    empty: Option<(&'a Slot, u128)>,
    fresh: Option<(&'a Slot, u128)>,
    free: usize,
}

#[cold]
fn over_capacity(e: InsufficientCapacity) -> Decision {
    Decision {
        allowed: false,
        remaining: 0,
        retry_after_ns: u64::MAX,
        reset_after_ns: 0,
        limit: e.capacity,
    }
}
