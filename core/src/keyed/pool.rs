//! [`Pool`]: one table of slots that many keyed limits share, so memory follows
//! the keys in use rather than limits × capacity.
//!
//! A policy of thousands of keyed rules cannot give each rule a table sized for
//! its worst case (5,000 rules × 100,000 keys × 16 bytes is 8 GB). A pool is one
//! table of a size the operator chooses; each limit of a keyed spec registered
//! in it ([`crate::keyed::AnyKeyed::in_pool`]) gets an **id**, and its keys live
//! in the pool's slots beside every other limit's.
//!
//! # What a slot holds
//! The slot layout is the table's (16 bytes: fingerprint and state word in one
//! 128-bit atomic). In a pool the fingerprint's top 16 bits are the limit's id and
//! the other 47 are the key's hash, salted per limit (so one key of two limits
//! lands in different groups and never matches the other's fingerprint). A check
//! finds its key exactly as in a table of its own: only a slot carrying the
//! limit's id and the key's hash is the key's.
//!
//! # Placing a key among other limits' keys
//! A new key looks at its 16 candidate slots as in a table of its own, judging
//! each by the limit that holds it: the pool's **registry** records every id's
//! algorithm and parameters, so a slot another limit holds can be judged fresh
//! (taken over without loss) or live, and a live one evicted after its state is
//! folded into the sketch *as its own limit's state*. The sketch's cells are
//! tagged with the limit that owns them ([`super::sketch`]): a cell is never
//! joined across limits, and a live cell of one limit is never overwritten by
//! another (the eviction is refused instead). So every guarantee of a keyed table
//! holds per limit: **no key is ever admitted beyond its quota** because of what
//! other limits' keys did; the cost of sharing is being early to limit when the
//! pool is full of live keys, never late.
//!
//! # A limit's bound
//! Each limit may hold at most `max_keys` live keys ([`AnyKeyed::in_pool`]): once
//! it holds that many, a new key of the limit may only take a slot the limit
//! already holds (a fresh one, or its stalest live key, evicted into the
//! sketch); with none among its candidates the key is turned away (counted in
//! `rejected`), so one limit's key flood cannot take the whole pool. The count of
//! slots a limit holds is kept as keys are placed and taken over; slots whose
//! state went fresh still count until they are taken, so a limit that reaches its
//! bound recounts its live keys (a scan of the pool, at most once a second).
//!
//! # Ids and reloads
//! Dropping a limit's last handle marks its id gone: its slots count as free for
//! everyone at once. An id is reused only after a sweep has emptied every slot and
//! cell it held, so a new limit never reads a word another limit wrote. There are
//! 65,535 ids; a registration finding none sweeps the pool once (a scan) to
//! reclaim the gone ones, and fails ([`SpecError::PoolFull`]) only when 65,535
//! limits are alive at once.
//!
//! ```
//! use sluicegate::keyed::{AnyKeyed, Pool};
//! use sluicegate::{Kind, Spec};
//! let pool = Pool::with_memory(1 << 20)?; // 1 MiB for every limit's keys
//! let per_ip = AnyKeyed::in_pool(&pool, &Spec::parse(Kind::TokenBucket, "2/s")?, 10_000, ())?;
//! let per_user = AnyKeyed::in_pool(&pool, &Spec::parse(Kind::FixedWindow, "1/minute")?, 10_000, ())?;
//! assert!(per_ip.check_n_at("10.0.0.1", 2, 0)?.decision.allowed);
//! assert!(!per_ip.check_n_at("10.0.0.1", 1, 0)?.decision.allowed);
//! // The same key under another limit is another state.
//! assert!(per_user.check_n_at("10.0.0.1", 1, 0)?.decision.allowed);
//! assert!(!per_user.check_n_at("10.0.0.1", 1, 0)?.decision.allowed);
//! assert_eq!(pool.limits(), 2);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use alloc::boxed::Box;
use alloc::sync::Arc;
use alloc::vec::Vec;
use core::fmt;
use core::marker::PhantomData;
use std::sync::{Mutex, OnceLock, PoisonError};

use super::sketch::{self, Sketch};
use super::slot::{
    GROUP_SLOTS, Group, Slot, committed_state, droppable, fp_of, is_pending, state_of,
};
use super::stats::{Event, FullPolicy, KeyedStats, Stats};
use super::table::{Held, Space, judge};
use super::{DefaultHashBuilder, random_hasher, try_boxed};
use crate::error::{ConfigError, InsufficientCapacity};
use crate::kind::{Dispatch, Kind};
use crate::limiter::{Algorithm, ConfigCell, PARAM_WORDS};
use crate::quota::Quota;
use crate::shaper::Shaping;
use crate::spec::SpecError;
use crate::sync::{AtomicU64, order};

/// Bits of a fingerprint that carry the limit's id.
const ID_BITS: u32 = 16;
/// Bits of a fingerprint that carry the key's hash.
const HASH_BITS: u32 = 63 - ID_BITS;
const HASH_MASK: u64 = (1 << HASH_BITS) - 1;
/// Ids are 1..=MAX_ID (0 marks an empty slot).
const MAX_ID: usize = (1 << ID_BITS) - 1;
const ID_MASK: u64 = MAX_ID as u64;
/// A sketch cell's owner tag: the limit's id and the low bits of its
/// generation (each registration of an id is a new generation), so a cell a
/// gone limit's eviction wrote late is never read as a new limit's.
const GEN_MASK: u64 = HASH_MASK;
/// Registry entries are allocated this many at a time, as ids are first used.
const CHUNK: usize = 256;
/// Slots a limit remembers it placed keys in, most recent last: where it frees
/// one of its own keys at its bound when a new key's candidates hold none.
const RING: usize = 64;
/// A limit at its bound recounts its live keys at most this often.
const RECOUNT_NS: u64 = 1_000_000_000;
/// A check this far before the next recount is due means time went back (a
/// far-future check happened): recount now. Callers' clocks may disagree by
/// less than this without causing extra recounts.
const RECOUNT_SKEW_NS: u64 = 60 * RECOUNT_NS;
/// Bytes a group costs with its share of the sketch (a cell per 32 slots).
const GROUP_BYTES: usize = core::mem::size_of::<Group>() + GROUP_SLOTS * 16 / 32;

/// The id of the limit holding slot (or cell) value `v`; 0 for an empty one.
#[inline]
fn id_of(v: u128) -> u64 {
    fp_of(v) >> HASH_BITS
}

const FREE: u64 = 0;
const ALIVE: u64 = 1;
const GONE: u64 = 2;

/// One id's entry in a pool's registry: what the pool knows of the limit that
/// holds it. Opaque: it is public only so that memory for a pool's registry can
/// be laid out by the caller ([`PoolMemory`]). Its layout is fixed (`repr(C)`,
/// 8-byte aligned, every field an atomic word) and all-zero bytes are a free
/// entry.
#[derive(Debug)]
#[repr(C)]
pub struct RegistryEntry {
    /// [`FREE`], [`ALIVE`] or [`GONE`] (awaiting a sweep); in a registry in
    /// caller memory, [`claiming`] while a registration fills it in.
    state: AtomicU64,
    /// In caller memory: the identity of the limit registered here (its kind,
    /// parameters and bound, hashed; never 0), so that a limit registered again
    /// by another handle — another process — finds it.
    ident: AtomicU64,
    /// The limit's algorithm, as its index in [`Kind::ALL`].
    kind: AtomicU64,
    /// Its parameters (shared with its handle: a `set_spec` changes them here).
    config: ConfigCell,
    /// Its salt: mixed into its keys' hashes.
    salt: AtomicU64,
    /// Registrations of this id so far: the current one's generation.
    generation: AtomicU64,
    /// Slots it holds (approximately: see the module docs), and its bound.
    held: AtomicU64,
    /// Keys it placed, ever: a recount adds those placed while it scanned.
    placed: AtomicU64,
    bound: AtomicU64,
    /// When it may next recount its live keys.
    recount_at: AtomicU64,
    /// The slots it placed keys in last (index + 1; 0: none), and where the next
    /// goes.
    ring: [AtomicU64; RING],
    ring_at: AtomicU64,
    stats: Stats<1>,
    /// A single limiter's state ([`crate::AnyLimiter::in_pool`]; bound 0): its
    /// one word, as a [`crate::Limiter`] holds it inline.
    word: AtomicU64,
}

type Entry = RegistryEntry;

impl Default for RegistryEntry {
    fn default() -> Self {
        Self::new()
    }
}

impl RegistryEntry {
    /// A free entry (the same as all-zero bytes).
    ///
    /// ```
    /// use sluicegate::keyed::RegistryEntry;
    /// let registry: Vec<RegistryEntry> = (0..16).map(|_| RegistryEntry::new()).collect();
    /// # assert_eq!(registry.len(), 16);
    /// ```
    pub fn new() -> Self {
        Entry {
            state: AtomicU64::new(FREE),
            ident: AtomicU64::new(0),
            kind: AtomicU64::new(0),
            config: ConfigCell::new([0; PARAM_WORDS]),
            salt: AtomicU64::new(0),
            generation: AtomicU64::new(0),
            held: AtomicU64::new(0),
            placed: AtomicU64::new(0),
            bound: AtomicU64::new(0),
            recount_at: AtomicU64::new(0),
            ring: core::array::from_fn(|_| AtomicU64::new(0)),
            ring_at: AtomicU64::new(0),
            stats: Stats::new(),
            word: AtomicU64::new(0),
        }
    }

    fn kind(&self) -> Kind {
        let i = self.kind.load(order::STAT) as usize;
        Kind::ALL.get(i).copied().unwrap_or(Kind::TokenBucket)
    }

    /// The live limit's kind, parameters and generation, read consistently: `None`
    /// if it is not alive or was registered anew while being read.
    /// In caller memory (`caller`) the words are read with a bounded spin and
    /// an impossible kind is `None` too.
    fn alive(&self, caller: bool) -> Option<(Kind, [u64; PARAM_WORDS], u64)> {
        let generation = self.generation.load(order::LOAD);
        if self.state.load(order::LOAD) != ALIVE {
            return None;
        }
        let (kind, words) = if caller {
            // Words another process wrote are used only if they are what a
            // registration wrote: the identity checks kind, words and bound
            // (stray bytes would decode to parameters no spec makes).
            let i = self.kind.load(order::STAT);
            let words = self.config.try_load()?;
            let bound = self.bound.load(order::STAT);
            if self.ident.load(order::LOAD) != identity(i, &words, bound) {
                return None;
            }
            (*Kind::ALL.get(i as usize)?, words)
        } else {
            (self.kind(), self.config.load())
        };
        (self.generation.load(order::LOAD) == generation).then_some((kind, words, generation))
    }
}

/// Ids in use, free, and gone (awaiting a sweep).
#[derive(Debug, Default)]
struct Ids {
    /// The lowest id never used.
    next: usize,
    free: Vec<u16>,
    gone: Vec<u16>,
}

/// Memory for a pool's slots, sketch cells and registry that the caller
/// provides — for example a region of shared memory that several processes
/// map, so that their limits are one ([`Pool::in_memory`]).
///
/// Every part is atomic words: all-zero bytes are an empty pool. What a pool in
/// caller memory does differently from one of its own:
///
/// * **Registration finds, not only adds.** A limit is identified by its kind,
///   parameters and bound; registering one that another handle (another
///   process) registered already joins it, so the two share its keys' state.
///   Two limits that differ in anything never share an entry. Entries are
///   probed from a hash of the identity and claimed by compare-and-swap; a
///   registration that dies half-way is completed by the next one of the same
///   identity (every field it writes is a function of the identity).
/// * **Parameters are fixed** once registered: `set_spec` on such a limit is
///   refused ([`ConfigError::Immutable`] for `"shared"`). Build a limiter of the
///   new spec instead: it gets an entry of its own.
/// * **Nothing is freed by a drop**: another process may still use the limit.
///   The registry holds as many limits as it has entries
///   ([`SpecError::PoolFull`] beyond); a new region is the way to compact.
/// * **Keys hash with a fixed seed** ([`PoolMemory::seed`]), so that one key
///   lands in the same slot from every handle. The hash of a `K: Hash` key is
///   foldhash's, stable only within one foldhash version: callers that need a
///   key to hash the same across languages and versions compute their own
///   [`super::KeyHash`] from the key's bytes and use the `_hashed` checks.
/// * **Contents are untrusted:** a registry entry or slot with impossible
///   contents makes decisions conservative, never a panic or an unbounded loop.
///
/// ```
/// use sluicegate::keyed::{AnyKeyed, Group, Pool, PoolMemory, RegistryEntry, Slot};
/// use sluicegate::{Kind, Spec};
/// #[derive(Debug)]
/// struct Mem { groups: Vec<Group>, cells: Vec<Slot>, registry: Vec<RegistryEntry> }
/// impl PoolMemory for Mem {
///     fn groups(&self) -> &[Group] { &self.groups }
///     fn cells(&self) -> &[Slot] { &self.cells }
///     fn registry(&self) -> &[RegistryEntry] { &self.registry }
///     fn seed(&self) -> u64 { 42 }
/// }
/// let mem = std::sync::Arc::new(Mem {
///     groups: (0..64).map(|_| Group::new()).collect(),
///     cells: (0..64).map(|_| Slot::new()).collect(),
///     registry: (0..8).map(|_| RegistryEntry::new()).collect(),
/// });
/// // Two pools over one memory (as two processes would map one region).
/// let (a, b) = (Pool::in_memory(mem.clone())?, Pool::in_memory(mem)?);
/// let spec = Spec::parse(Kind::TokenBucket, "2/minute")?;
/// let (ta, tb) = (AnyKeyed::in_pool(&a, &spec, 100, ())?, AnyKeyed::in_pool(&b, &spec, 100, ())?);
/// assert!(ta.check_n_at("k", 1, 0)?.decision.allowed);
/// assert!(tb.check_n_at("k", 1, 0)?.decision.allowed);
/// assert!(!ta.check_n_at("k", 1, 0)?.decision.allowed); // one limit between them
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub trait PoolMemory: fmt::Debug + Send + Sync + 'static {
    /// The slots (at least one group).
    fn groups(&self) -> &[Group];
    /// The sketch's cells (none: no eviction remembered, so a full pool turns
    /// new keys away instead of evicting).
    fn cells(&self) -> &[Slot];
    /// The registry (at most 65,535 entries are used).
    fn registry(&self) -> &[RegistryEntry];
    /// The seed of key hashes and limit salts: the same for every handle on
    /// one memory.
    fn seed(&self) -> u64;
    /// The memory's time base, in nanoseconds, if it has one: memory several
    /// processes map must be checked at times every one of them reads alike (a
    /// per-process calibrated clock would make one process's word mean another
    /// instant to the next), so what checks a pool in it reads this
    /// ([`Pool::now`]). `None` (the default): the caller's clock.
    fn now(&self) -> Option<u64> {
        None
    }
    /// The memory's hash of a key's bytes, if it has one: a function of the
    /// bytes and the memory's seed that every process, language and version
    /// opening the memory computes alike (which the hash of a `K: Hash` key,
    /// foldhash's, is not promised to be across versions), so what keys a pool
    /// in it by text hashes through this ([`Pool::key_hash`]). `None` (the
    /// default): the pool's own hasher.
    fn key_hash(&self, key: &[u8]) -> Option<super::KeyHash> {
        let _ = key;
        None
    }
}

impl<M: PoolMemory> PoolMemory for Arc<M> {
    fn groups(&self) -> &[Group] {
        (**self).groups()
    }
    fn cells(&self) -> &[Slot] {
        (**self).cells()
    }
    fn registry(&self) -> &[RegistryEntry] {
        (**self).registry()
    }
    fn seed(&self) -> u64 {
        (**self).seed()
    }
    fn now(&self) -> Option<u64> {
        (**self).now()
    }
    fn key_hash(&self, key: &[u8]) -> Option<super::KeyHash> {
        (**self).key_hash(key)
    }
}

/// Where a pool's words live.
#[derive(Debug)]
enum Memory {
    /// Its own allocation; registry chunks allocated as ids are first used.
    Own {
        groups: Box<[Group]>,
        cells: Box<[Slot]>,
        chunks: Box<[OnceLock<Box<[Entry]>>]>,
    },
    /// The caller's.
    Caller(Box<dyn PoolMemory>),
}

#[derive(Debug)]
struct Inner {
    memory: Memory,
    hasher: DefaultHashBuilder,
    ids: Mutex<Ids>,
}

/// One table of slots shared by many keyed limits (see the [module
/// docs](self)). Cloning a pool gives another handle to the same slots.
///
/// ```
/// use sluicegate::keyed::Pool;
/// let pool = Pool::with_memory(64 << 20)?;
/// assert!(pool.capacity() > 500_000); // 16 bytes a key, and the sketch
/// assert!(pool.memory() <= 64 << 20);
/// # Ok::<(), sluicegate::SpecError>(())
/// ```
#[derive(Clone, Debug)]
pub struct Pool {
    inner: Arc<Inner>,
}

impl Pool {
    /// A pool using at most `bytes` for its slots and its sketch, allocated
    /// now, fallibly ([`SpecError::Alloc`]); at least one group of 8 slots and
    /// the sketch's 64 cells (1,152 bytes).
    ///
    /// ```
    /// use sluicegate::keyed::Pool;
    /// use sluicegate::SpecError;
    /// assert_eq!(Pool::with_memory(1 << 16)?.capacity(), 496 * 8); // 65,536 / 132 bytes a group
    /// assert_eq!(Pool::with_memory(1152)?.capacity(), 8);
    /// assert!(matches!(Pool::with_memory(usize::MAX), Err(SpecError::Alloc { .. })));
    /// assert!(matches!(Pool::with_memory(10), Err(SpecError::Config { .. })));
    /// # Ok::<(), SpecError>(())
    /// ```
    pub fn with_memory(bytes: usize) -> Result<Pool, SpecError> {
        let cost = |groups: usize| {
            groups * core::mem::size_of::<Group>()
                + sketch::cells_for(groups * GROUP_SLOTS) * core::mem::size_of::<Slot>()
        };
        let mut groups = bytes / GROUP_BYTES;
        // The sketch has a floor of cells: a small pool gives up groups for it.
        while groups > 0 && cost(groups) > bytes {
            groups -= 1;
        }
        if groups == 0 {
            let error = ConfigError::Zero { field: "memory" };
            return Err(SpecError::Config { index: 0, error });
        }
        let alloc = |e: ConfigError| match e {
            ConfigError::Alloc { bytes } => SpecError::Alloc { bytes },
            error => SpecError::Config { index: 0, error },
        };
        let groups = try_boxed(groups, Group::new).map_err(alloc)?;
        let cells =
            try_boxed(sketch::cells_for(groups.len() * GROUP_SLOTS), Slot::empty).map_err(alloc)?;
        let chunks = try_boxed(MAX_ID.div_ceil(CHUNK), OnceLock::new).map_err(alloc)?;
        Ok(Pool {
            inner: Arc::new(Inner {
                memory: Memory::Own {
                    groups,
                    cells,
                    chunks,
                },
                hasher: random_hasher(),
                ids: Mutex::new(Ids {
                    next: 1,
                    ..Ids::default()
                }),
            }),
        })
    }

    /// A pool over memory the caller provides (see [`PoolMemory`]: several
    /// pools over one memory are one pool). Errors if it has no slots.
    ///
    /// ```
    /// use sluicegate::keyed::{Group, Pool, PoolMemory, RegistryEntry, Slot};
    /// #[derive(Debug)]
    /// struct Empty;
    /// impl PoolMemory for Empty {
    ///     fn groups(&self) -> &[Group] { &[] }
    ///     fn cells(&self) -> &[Slot] { &[] }
    ///     fn registry(&self) -> &[RegistryEntry] { &[] }
    ///     fn seed(&self) -> u64 { 0 }
    /// }
    /// assert!(Pool::in_memory(Empty).is_err());
    /// ```
    pub fn in_memory(memory: impl PoolMemory) -> Result<Pool, SpecError> {
        if memory.groups().is_empty() {
            let error = ConfigError::Zero { field: "memory" };
            return Err(SpecError::Config { index: 0, error });
        }
        let seed = memory.seed();
        Ok(Pool {
            inner: Arc::new(Inner {
                memory: Memory::Caller(Box::new(memory)),
                hasher: DefaultHashBuilder::with_seed(seed, foldhash::SharedSeed::global_fixed()),
                ids: Mutex::new(Ids::default()),
            }),
        })
    }

    /// Slots: keys the pool holds at once, over all its limits.
    ///
    /// ```
    /// # use sluicegate::keyed::Pool;
    /// assert_eq!(Pool::with_memory(1 << 20)?.capacity() % 8, 0);
    /// # Ok::<(), sluicegate::SpecError>(())
    /// ```
    pub fn capacity(&self) -> usize {
        self.inner.groups().len() * GROUP_SLOTS
    }

    /// Bytes of slots and sketch.
    ///
    /// ```
    /// # use sluicegate::keyed::Pool;
    /// let p = Pool::with_memory(1 << 20)?;
    /// assert!(p.memory() > 900_000 && p.memory() <= 1 << 20);
    /// # Ok::<(), sluicegate::SpecError>(())
    /// ```
    pub fn memory(&self) -> usize {
        core::mem::size_of_val(self.inner.groups())
            + core::mem::size_of_val(self.inner.cells().get())
    }

    /// Whether the pool is in caller memory ([`Pool::in_memory`]): its limits
    /// are found by identity, their parameters fixed, and other handles (other
    /// processes) use them too.
    ///
    /// ```
    /// # use sluicegate::keyed::Pool;
    /// assert!(!Pool::with_memory(1 << 16)?.in_caller_memory());
    /// # Ok::<(), sluicegate::SpecError>(())
    /// ```
    pub fn in_caller_memory(&self) -> bool {
        self.inner.in_caller_memory()
    }

    /// The time base of the pool's memory ([`PoolMemory::now`]), in
    /// nanoseconds: what a check of a limit in it should be made at. `None`
    /// for a pool of its own, or memory without one: the caller's clock.
    ///
    /// ```
    /// # use sluicegate::keyed::Pool;
    /// assert_eq!(Pool::with_memory(1 << 16)?.now(), None);
    /// # Ok::<(), sluicegate::SpecError>(())
    /// ```
    #[inline]
    pub fn now(&self) -> Option<u64> {
        match &self.inner.memory {
            Memory::Caller(m) => m.now(),
            Memory::Own { .. } => None,
        }
    }

    /// The hash of a key's bytes of the pool's memory ([`PoolMemory::key_hash`]),
    /// for the `_hashed` checks of a limit in it: the same in every process
    /// and version that maps the memory. `None` for a pool of its own, or
    /// memory without one: hash keys with the limit's own hasher.
    ///
    /// ```
    /// # use sluicegate::keyed::Pool;
    /// assert_eq!(Pool::with_memory(1 << 16)?.key_hash(b"10.0.0.1"), None);
    /// # Ok::<(), sluicegate::SpecError>(())
    /// ```
    pub fn key_hash(&self, key: &[u8]) -> Option<super::KeyHash> {
        match &self.inner.memory {
            Memory::Caller(m) => m.key_hash(key),
            Memory::Own { .. } => None,
        }
    }

    /// Whether `other` is a handle to the same pool.
    ///
    /// ```
    /// # use sluicegate::keyed::Pool;
    /// let p = Pool::with_memory(1 << 16)?;
    /// assert!(p.same(&p.clone()));
    /// assert!(!p.same(&Pool::with_memory(1 << 16)?));
    /// # Ok::<(), sluicegate::SpecError>(())
    /// ```
    pub fn same(&self, other: &Pool) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }

    /// Limits registered and alive.
    ///
    /// ```
    /// # use sluicegate::keyed::{AnyKeyed, Pool};
    /// # use sluicegate::{Kind, Spec};
    /// let pool = Pool::with_memory(1 << 20)?;
    /// let spec = Spec::parse(Kind::TokenBucket, "1/s; 100/hour")?;
    /// let t = AnyKeyed::in_pool(&pool, &spec, 100, ())?;
    /// assert_eq!(pool.limits(), 2); // one per quota
    /// drop(t);
    /// assert_eq!(pool.limits(), 0);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn limits(&self) -> usize {
        if let Memory::Caller(m) = &self.inner.memory {
            let alive = |e: &&Entry| e.state.load(order::LOAD) == ALIVE;
            return m.registry().iter().skip(1).filter(alive).count();
        }
        let ids = self
            .inner
            .ids
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        ids.next - 1 - ids.free.len() - ids.gone.len()
    }

    /// Live keys per limit at `now`, in one scan of the pool, by the limit's
    /// id ([`crate::keyed::AnyKeyed::pool_ids`]): what a metrics scrape of many
    /// limits reads instead of one scan each.
    ///
    /// ```
    /// # use sluicegate::keyed::{AnyKeyed, Pool};
    /// # use sluicegate::{Kind, Spec};
    /// let pool = Pool::with_memory(1 << 20)?;
    /// let t = AnyKeyed::in_pool(&pool, &Spec::parse(Kind::TokenBucket, "1/s")?, 100, ())?;
    /// t.check_n_at("a", 1, 0)?;
    /// t.check_n_at("b", 1, 0)?;
    /// let live = pool.live_keys_at(0);
    /// assert_eq!(live[usize::from(t.pool_ids()[0])], 2);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn live_keys_at(&self, now: u64) -> Vec<usize> {
        let mut live = Vec::new();
        for s in self.inner.groups().iter().flat_map(|g| g.slots().iter()) {
            let v = s.load();
            let id = id_of(v) as usize;
            if id != 0 && matches!(self.inner.judge(v, now), Held::Live { .. }) {
                if live.len() <= id {
                    live.resize(id + 1, 0);
                }
                live[id] += 1;
            }
        }
        live
    }

    pub(super) fn hasher(&self) -> &DefaultHashBuilder {
        &self.inner.hasher
    }

    /// Registers one limit of algorithm `kind` with parameter `words`, at most
    /// `bound` live keys: its member handle.
    pub(super) fn register<A: Algorithm>(
        &self,
        kind: Kind,
        words: [u64; PARAM_WORDS],
        bound: usize,
    ) -> Result<Member<A>, SpecError> {
        let inner = &self.inner;
        if let Memory::Caller(m) = &inner.memory {
            return self.join::<A>(m.registry(), kind, words, bound);
        }
        let mut ids = inner.ids.lock().unwrap_or_else(PoisonError::into_inner);
        if ids.free.is_empty() && ids.next > MAX_ID {
            inner.sweep(&mut ids);
        }
        let id = match ids.free.pop() {
            Some(id) => usize::from(id),
            None if ids.next <= MAX_ID => {
                ids.next += 1;
                ids.next - 1
            }
            None => return Err(SpecError::PoolFull { max: MAX_ID }),
        };
        let Some(e) = inner.entry_or_alloc(id) else {
            // The chunk could not be allocated: the id goes back.
            ids.free.push(id as u16);
            return Err(SpecError::Alloc {
                bytes: CHUNK * core::mem::size_of::<Entry>(),
            });
        };
        let _ = e.config.update(|_| Ok::<_, ()>(words));
        let index = Kind::ALL.iter().position(|k| *k == kind).unwrap_or(0);
        e.kind.store(index as u64, order::STAT);
        let generation = e.generation.load(order::STAT).wrapping_add(1);
        e.generation.store(generation, order::STORE);
        let salt = (id as u64 ^ generation.rotate_left(17) ^ inner.hasher_seed())
            .wrapping_mul(0x9E37_79B9_7F4A_7C15);
        e.salt.store(salt, order::STAT);
        e.held.store(0, order::STAT);
        e.bound.store(bound as u64, order::STAT);
        e.recount_at.store(0, order::STAT);
        for r in &e.ring {
            r.store(0, order::STAT);
        }
        e.stats.reset();
        e.word.store(0, order::STAT);
        e.state.store(ALIVE, order::STORE);
        Ok(Member {
            inner: inner.clone(),
            id: id as u64,
            tag: tag(id as u64, generation),
            salt,
            fixed: None,
            policy: FullPolicy::default(),
            _algorithm: PhantomData,
        })
    }

    /// [`Self::register`] in a registry in caller memory: joins the entry of
    /// an identical limit (kind, parameters, bound) if one is there, else claims
    /// a free one. Entries are probed from a hash of the identity, so two
    /// handles registering one limit at once meet at the same first free entry,
    /// and only one claims it; the other waits for it to be filled in, and
    /// fills it in itself if the claimer does not finish (it may have died:
    /// every field written is a function of the identity and the seed).
    fn join<A: Algorithm>(
        &self,
        registry: &[Entry],
        kind: Kind,
        words: [u64; PARAM_WORDS],
        bound: usize,
    ) -> Result<Member<A>, SpecError> {
        // Entry 0 is never used (id 0 marks an empty slot).
        let n = registry.len().min(MAX_ID + 1).saturating_sub(1);
        let kind_index = Kind::ALL.iter().position(|k| *k == kind).unwrap_or(0) as u64;
        let bound = bound as u64;
        let ident = identity(kind_index, &words, bound);
        let salt = mix(ident ^ self.inner.hasher_seed().rotate_left(29));
        let fill = |e: &Entry| {
            e.kind.store(kind_index, order::STAT);
            e.config.init(words);
            e.salt.store(salt, order::STAT);
            e.bound.store(bound, order::STAT);
            e.generation.store(1, order::STAT);
            e.ident.store(ident, order::STORE);
        };
        let same = |e: &Entry| {
            e.ident.load(order::LOAD) == ident
                && e.kind.load(order::STAT) == kind_index
                && e.bound.load(order::STAT) == bound
                && e.config.try_load() == Some(words)
        };
        let first = if n == 0 {
            0
        } else {
            (ident % n as u64) as usize
        };
        for step in 0..n {
            let id = 1 + (first + step) % n;
            let e = &registry[id];
            let mut spins = 0;
            loop {
                match e.state.load(order::LOAD) {
                    FREE => {
                        if e.state
                            .compare_exchange(FREE, claiming(ident), order::STORE, order::STAT)
                            .is_ok()
                        {
                            fill(e);
                            e.state.store(ALIVE, order::STORE);
                            return Ok(self.member(id, salt, words));
                        }
                    }
                    st if st == claiming(ident) => {
                        if spins < CLAIM_SPINS {
                            spins += 1;
                            crate::sync::spin_loop();
                        } else {
                            // Its claimer is slow or dead: finish for it.
                            fill(e);
                            let _ = e
                                .state
                                .compare_exchange(st, ALIVE, order::STORE, order::STAT);
                        }
                    }
                    ALIVE if same(e) => return Ok(self.member(id, salt, words)),
                    // Another limit's (alive or being claimed), or contents that
                    // mean nothing: the next entry.
                    _ => break,
                }
            }
        }
        Err(SpecError::PoolFull { max: n })
    }

    /// The handle of the limit at entry `id` of a registry in caller memory.
    fn member<A>(&self, id: usize, salt: u64, words: [u64; PARAM_WORDS]) -> Member<A> {
        Member {
            inner: self.inner.clone(),
            id: id as u64,
            tag: tag(id as u64, 1),
            salt,
            fixed: Some(words),
            policy: FullPolicy::default(),
            _algorithm: PhantomData,
        }
    }
}

/// How many times a registration in caller memory looks again at an entry
/// another handle is filling in for the same limit before it fills it in itself.
const CLAIM_SPINS: usize = 1 << 12;

/// A registry entry being filled in for the limit of identity `ident` (the low
/// two bits 3 set it apart from [`FREE`], [`ALIVE`] and [`GONE`]).
fn claiming(ident: u64) -> u64 {
    (ident << 2) | 3
}

/// A limit's identity in a registry in caller memory: its kind (the index in
/// [`Kind::ALL`]), parameter words and bound, mixed into 62 bits (never 0).
/// Stable across versions: part of the layout of such a registry.
fn identity(kind: u64, words: &[u64; PARAM_WORDS], bound: u64) -> u64 {
    let mut h = mix(kind ^ 0x5a17_6a7e);
    for w in words.iter().chain([&bound]) {
        h = mix(h ^ *w);
    }
    (h >> 2).max(1)
}

/// A fixed bijective mix of 64 bits (the finaliser of SplitMix64).
fn mix(x: u64) -> u64 {
    let x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    let x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

/// The sketch-cell owner tag of generation `generation` of id `id`.
fn tag(id: u64, generation: u64) -> u64 {
    ((generation & GEN_MASK) << ID_BITS) | id
}

impl Inner {
    #[inline(always)]
    fn groups(&self) -> &[Group] {
        match &self.memory {
            Memory::Own { groups, .. } => groups,
            Memory::Caller(m) => m.groups(),
        }
    }

    fn cells(&self) -> Sketch<'_> {
        Sketch(match &self.memory {
            Memory::Own { cells, .. } => cells,
            Memory::Caller(m) => m.cells(),
        })
    }

    /// Whether the registry lives in caller memory (shared with other handles).
    fn in_caller_memory(&self) -> bool {
        matches!(self.memory, Memory::Caller(_))
    }

    // Inline: a single limiter in a pool reaches its word through it on every
    // check (core is not built with cross-crate LTO).
    #[inline]
    fn entry(&self, id: u64) -> Option<&Entry> {
        let id = id as usize;
        match &self.memory {
            Memory::Own { chunks, .. } => chunks.get(id / CHUNK)?.get()?.get(id % CHUNK),
            // Id 0 marks an empty slot: entry 0 is never used.
            Memory::Caller(m) => m.registry().get(id).filter(|_| id != 0 && id <= MAX_ID),
        }
    }

    fn entry_or_alloc(&self, id: usize) -> Option<&Entry> {
        let Memory::Own { chunks, .. } = &self.memory else {
            return None;
        };
        let chunk = chunks.get(id / CHUNK)?;
        if chunk.get().is_none() {
            let fresh = try_boxed(CHUNK, Entry::new).ok()?;
            let _ = chunk.set(fresh);
        }
        chunk.get()?.get(id % CHUNK)
    }

    /// The index of `slot` among the pool's slots.
    fn index_of(&self, slot: &Slot) -> Option<usize> {
        let base = self.groups().as_ptr() as usize;
        let offset = (slot as *const Slot as usize).checked_sub(base)?;
        let group = offset / core::mem::size_of::<Group>();
        let within = offset % core::mem::size_of::<Group>() / core::mem::size_of::<Slot>();
        (group < self.groups().len() && within < GROUP_SLOTS)
            .then_some(group * GROUP_SLOTS + within)
    }

    /// The slot at `index`.
    fn slot(&self, index: usize) -> Option<&Slot> {
        self.groups()
            .get(index / GROUP_SLOTS)?
            .slots()
            .get(index % GROUP_SLOTS)
    }

    fn hasher_seed(&self) -> u64 {
        use core::hash::BuildHasher;
        self.hasher.hash_one(0x5a17_u64)
    }

    /// What slot value `v` holds at `now`, judged by the limit holding it; a slot
    /// of a limit that is gone is fresh to everyone.
    fn judge(&self, v: u128, now: u64) -> Held {
        if fp_of(v) == 0 {
            return Held::Empty;
        }
        let Some(e) = self.entry(id_of(v)) else {
            return Held::Fresh;
        };
        match e.alive(self.in_caller_memory()) {
            Some((kind, words, _)) => kind.dispatch(Judge { words, v, now }),
            // Registered anew while being read: leave it be.
            None if e.state.load(order::LOAD) == ALIVE => Held::Live { left: u64::MAX },
            None => Held::Fresh,
        }
    }

    /// Folds the live state in slot value `v` into the sketch as its own
    /// limit's; `false`: it cannot be remembered.
    fn fold(&self, v: u128, now: u64) -> bool {
        let Some(e) = self.entry(id_of(v)) else {
            return true;
        };
        match e.alive(self.in_caller_memory()) {
            Some((kind, words, generation)) => kind.dispatch(Fold {
                pool: self,
                owner: tag(id_of(v), generation),
                words,
                v,
                now,
            }),
            // Registered anew while being read: not evicted.
            None if e.state.load(order::LOAD) == ALIVE => false,
            // A gone limit's state needs no remembering.
            None => true,
        }
    }

    /// Whether sketch cell value `c` tells its owner nothing any more.
    fn cell_fresh(&self, c: u128, now: u64) -> bool {
        // A cell is tagged with its owner's id and generation (no key hash): a
        // cell of another generation of the id tells nobody anything.
        let owner = fp_of(c);
        let Some(e) = self.entry(owner & ID_MASK) else {
            return true;
        };
        match e.alive(self.in_caller_memory()) {
            Some((kind, words, generation)) if tag(owner & ID_MASK, generation) == owner => {
                let as_slot =
                    (u128::from((owner & ID_MASK) << HASH_BITS) << 64) | u128::from(state_of(c));
                !matches!(
                    kind.dispatch(Judge {
                        words,
                        v: as_slot,
                        now
                    }),
                    Held::Live { .. }
                )
            }
            Some(_) => true,
            None => e.state.load(order::LOAD) != ALIVE,
        }
    }

    /// Empties every slot and cell of the gone ids and frees them. Called with
    /// the ids' lock held; no handle of a gone id exists, so nothing places
    /// such a slot again.
    fn sweep(&self, ids: &mut Ids) {
        let gone = |id: u64| {
            self.entry(id)
                .is_some_and(|e| e.state.load(order::LOAD) == GONE)
        };
        for g in self.groups().iter() {
            g.clear_where(|v| gone(id_of(v)));
        }
        self.cells().clear_where(|owner| gone(owner & ID_MASK));
        for id in ids.gone.drain(..) {
            if let Some(e) = self.entry(u64::from(id)) {
                e.state.store(FREE, order::STORE);
            }
            ids.free.push(id);
        }
    }
}

/// [`Inner::judge`] for the algorithm of the slot's limit.
struct Judge {
    words: [u64; PARAM_WORDS],
    v: u128,
    now: u64,
}

impl Dispatch for Judge {
    type Output = Held;
    fn word<A: Algorithm + fmt::Debug + Send + Sync + 'static>(self) -> Held {
        judge::<A>(&A::from_words(self.words), self.v, self.now)
    }
    fn shaper(self) -> Held {
        self.word::<Shaping>()
    }
    fn log(self) -> Held {
        // No keyed sliding log exists; such a slot cannot be judged, so it is
        // treated as live (never taken over).
        Held::Live { left: u64::MAX }
    }
}

/// [`Inner::fold`] for the algorithm of the slot's limit.
struct Fold<'a> {
    pool: &'a Inner,
    /// The owner's tag (its id and generation).
    owner: u64,
    words: [u64; PARAM_WORDS],
    v: u128,
    now: u64,
}

impl Dispatch for Fold<'_> {
    type Output = bool;
    fn word<A: Algorithm + fmt::Debug + Send + Sync + 'static>(self) -> bool {
        let p = A::from_words(self.words);
        let (v, now, pool) = (self.v, self.now, self.pool);
        pool.cells()
            .fold::<A>(&p, self.owner, fp_of(v), state_of(v), now, |c| {
                pool.cell_fresh(c, now)
            })
    }
    fn shaper(self) -> bool {
        self.word::<Shaping>()
    }
    fn log(self) -> bool {
        false
    }
}

/// One limit's handle on a pool: a [`Space`] whose keys share the pool's slots.
pub(super) struct Member<A> {
    inner: Arc<Inner>,
    id: u64,
    /// Its sketch cells' owner tag.
    tag: u64,
    salt: u64,
    /// In a registry in caller memory, the parameters (fixed there).
    fixed: Option<[u64; PARAM_WORDS]>,
    pub(super) policy: FullPolicy,
    _algorithm: PhantomData<fn() -> A>,
}

impl<A> fmt::Debug for Member<A> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Member")
            .field("id", &self.id)
            .finish_non_exhaustive()
    }
}

impl<A> Drop for Member<A> {
    fn drop(&mut self) {
        if self.fixed.is_some() {
            // Another handle (another process) may use it still.
            return;
        }
        let mut ids = self
            .inner
            .ids
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(e) = self.inner.entry(self.id) {
            e.state.store(GONE, order::STORE);
        }
        ids.gone.push(self.id as u16);
    }
}

impl<A: Algorithm> Member<A> {
    fn entry(&self) -> Option<&Entry> {
        self.inner.entry(self.id)
    }

    pub(super) fn id(&self) -> u16 {
        self.id as u16
    }

    pub(super) fn config(&self) -> Option<&ConfigCell> {
        self.entry().map(|e| &e.config)
    }

    /// Changes this limit's quota live; refused in caller memory, where
    /// parameters are fixed (other handles may use them).
    pub(super) fn set_quota(&self, q: &Quota) -> Result<(), ConfigError> {
        match self.config() {
            Some(c) if self.fixed.is_none() => c.requota::<A>(q),
            Some(_) => Err(ConfigError::Immutable { field: "shared" }),
            None => Err(ConfigError::Immutable { field: "pool" }),
        }
    }

    /// Keys of this limit holding live state at `now` (a scan of the pool).
    pub(super) fn len_at(&self, now: u64) -> usize {
        let p = Space::<A>::params(self);
        self.inner
            .groups()
            .iter()
            .flat_map(|g| g.slots().iter())
            .filter(|s| {
                let v = s.load();
                id_of(v) == self.id && committed_state(v).is_some_and(|w| !A::is_fresh(&p, w, now))
            })
            .count()
    }

    pub(super) fn stats(&self) -> KeyedStats {
        self.entry()
            .map_or_else(KeyedStats::default, |e| e.stats.snapshot())
    }

    /// The most live keys this limit holds.
    pub(super) fn bound(&self) -> usize {
        let bound = self.entry().map_or(0, |e| e.bound.load(order::STAT));
        (bound as usize).min(self.inner.groups().len() * GROUP_SLOTS)
    }

    /// Forgets this limit's keys (not atomic with concurrent checks).
    pub(super) fn clear(&self) {
        let id = self.id;
        for g in self.inner.groups().iter() {
            g.clear_where(|v| id_of(v) == id);
        }
        let tag = self.tag;
        self.inner.cells().clear_where(|owner| owner == tag);
        if let Some(e) = self.entry() {
            e.held.store(0, order::STAT);
        }
    }
}

impl<A: Algorithm> Space<A> for Member<A> {
    #[inline(always)]
    fn groups(&self) -> &[Group] {
        self.inner.groups()
    }
    #[inline(always)]
    fn params(&self) -> A::Params {
        A::from_words(match self.fixed {
            Some(words) => words,
            None => self.config().map_or([0; PARAM_WORDS], ConfigCell::load),
        })
    }
    #[inline(always)]
    fn locate(&self, h: u64) -> (u64, u64) {
        // A bijective mix of the hash with the limit's salt: the same key of two
        // limits gets unrelated groups and fingerprints.
        let x = (h ^ self.salt).wrapping_mul(0xD6E8_FEB8_6659_FD93);
        let x = x ^ (x >> 32);
        ((self.id << HASH_BITS) | (x & HASH_MASK), x)
    }
    fn held(&self, p: &A::Params, v: u128, now: u64) -> Held {
        if id_of(v) == self.id {
            judge::<A>(p, v, now)
        } else {
            self.inner.judge(v, now)
        }
    }
    fn may_take(&self, v: u128, bounded: bool) -> bool {
        !bounded || id_of(v) == self.id
    }
    fn fold(&self, _: &A::Params, v: u128, now: u64) -> bool {
        self.inner.fold(v, now)
    }
    fn start(&self, p: &A::Params, fp: u64, now: u64) -> u64 {
        self.inner.cells().start::<A>(p, self.tag, fp, now)
    }
    fn full_policy(&self) -> FullPolicy {
        self.policy
    }
    fn record(&self, _: usize, e: Event, prev: u128, slot: Option<&Slot>) {
        // A pending claim taken over was nobody's key: no limit held it.
        let prev_id = if is_pending(prev) { 0 } else { id_of(prev) };
        let placed = matches!(e, Event::Inserted | Event::Reused | Event::Evicted);
        if placed && prev_id != self.id {
            if let Some(me) = self.entry() {
                me.held.fetch_add(1, order::STAT);
                me.placed.fetch_add(1, order::STAT);
                if let Some(index) = slot.and_then(|s| self.inner.index_of(s)) {
                    let at = me.ring_at.fetch_add(1, order::STAT) as usize % RING;
                    me.ring[at].store(index as u64 + 1, order::STAT);
                }
            }
            if let Some(other) = self.inner.entry(prev_id).filter(|_| prev_id != 0) {
                let _ = other
                    .held
                    .fetch_update(order::STAT, order::STAT, |h| Some(h.saturating_sub(1)));
            }
        }
        // An eviction is counted by the limit whose key was evicted.
        let counted = if matches!(e, Event::Evicted) {
            self.inner.entry(prev_id)
        } else {
            self.entry()
        };
        if let Some(c) = counted {
            c.stats.count(0, e);
        }
    }
    fn bounded(&self, now: u64) -> bool {
        let Some(e) = self.entry() else {
            return true;
        };
        let bound = e.bound.load(order::STAT);
        if e.held.load(order::STAT) < bound {
            return false;
        }
        // Due at `at`, or at once if time went back (a far-future check must not
        // put the next recount out of reach).
        let at = e.recount_at.load(order::STAT);
        let due = now >= at || at - now > RECOUNT_SKEW_NS;
        if !due
            || e.recount_at
                .compare_exchange(at, now.saturating_add(RECOUNT_NS), order::STAT, order::STAT)
                .is_err()
        {
            return true;
        }
        // Keys placed while the scan ran may lie behind it: count them too
        // (some twice, at worst: early to bound, never late).
        let before = e.placed.load(order::STAT);
        let live = self.len_at(now) as u64;
        let during = e.placed.load(order::STAT).wrapping_sub(before);
        let held = live.saturating_add(during);
        e.held.store(held, order::STAT);
        held >= bound
    }
    fn make_room(&self, p: &A::Params, now: u64) -> bool {
        let Some(e) = self.entry() else {
            return false;
        };
        // The oldest remembered placements first.
        let start = e.ring_at.load(order::STAT) as usize;
        for i in 0..RING {
            let index = e.ring[(start + i) % RING].swap(0, order::STAT);
            let Some(slot) = index
                .checked_sub(1)
                .and_then(|i| self.inner.slot(i as usize))
            else {
                continue;
            };
            let v = slot.load();
            if id_of(v) != self.id || is_pending(v) {
                continue;
            }
            // Its state goes to the sketch first (as an eviction), unless fresh.
            let live = !droppable::<A>(p, state_of(v), now);
            if live && !self.inner.fold(v, now) {
                continue;
            }
            if slot.cas(v, 0) {
                let _ = e
                    .held
                    .fetch_update(order::STAT, order::STAT, |h| Some(h.saturating_sub(1)));
                if live {
                    e.stats.count(0, Event::Evicted);
                }
                return true;
            }
        }
        false
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::keyed::AnyKeyed;
    use crate::spec::Spec;

    #[derive(Debug)]
    struct Mem {
        groups: Vec<Group>,
        cells: Vec<Slot>,
        registry: Vec<RegistryEntry>,
    }

    impl PoolMemory for Mem {
        fn groups(&self) -> &[Group] {
            &self.groups
        }
        fn cells(&self) -> &[Slot] {
            &self.cells
        }
        fn registry(&self) -> &[RegistryEntry] {
            &self.registry
        }
        fn seed(&self) -> u64 {
            7
        }
    }

    fn memory(groups: usize, entries: usize) -> Arc<Mem> {
        Arc::new(Mem {
            groups: (0..groups).map(|_| Group::new()).collect(),
            cells: (0..64).map(|_| Slot::new()).collect(),
            registry: (0..entries).map(|_| RegistryEntry::new()).collect(),
        })
    }

    /// xorshift64*.
    fn rng(seed: u64) -> impl FnMut() -> u64 {
        let mut x = seed | 1;
        move || {
            x ^= x >> 12;
            x ^= x << 25;
            x ^= x >> 27;
            x.wrapping_mul(0x2545_F491_4F6C_DD1D)
        }
    }

    /// A registration that died after claiming its entry (the state says
    /// "being filled in for this identity", nothing else is written) is
    /// finished by the next registration of the same limit, which then shares
    /// it; a registration of another limit passes it by.
    #[test]
    fn a_registration_that_died_half_way_is_finished_by_the_next() {
        let mem = memory(8, 8);
        let spec = Spec::parse(Kind::TokenBucket, "3/hour").unwrap();
        let probe = Pool::in_memory(memory(8, 8)).unwrap();
        let id = usize::from(AnyKeyed::in_pool(&probe, &spec, 10, ()).unwrap().pool_ids()[0]);
        // The same identity claims the same first entry in any registry of
        // this size: leave it claimed and empty, as a killed registrar would.
        let words = mem.registry[id].ident.load(order::LOAD);
        assert_eq!(words, 0);
        let ident = probe
            .inner
            .entry(id as u64)
            .unwrap()
            .ident
            .load(order::LOAD);
        mem.registry[id].state.store(claiming(ident), order::STORE);
        let pool = Pool::in_memory(mem.clone()).unwrap();
        let other = Spec::parse(Kind::TokenBucket, "4/hour").unwrap();
        let o = AnyKeyed::in_pool(&pool, &other, 10, ()).unwrap();
        assert_ne!(usize::from(o.pool_ids()[0]), id);
        let t = AnyKeyed::in_pool(&pool, &spec, 10, ()).unwrap();
        assert_eq!(usize::from(t.pool_ids()[0]), id);
        assert_eq!(mem.registry[id].state.load(order::LOAD), ALIVE);
        assert!(t.check_n_at("k", 3, 0).unwrap().decision.allowed);
        assert!(!t.check_n_at("k", 1, 0).unwrap().decision.allowed);
    }

    /// Random words in every slot, cell and registry entry (another process's
    /// stray writes): registering and checking every keyed kind neither panics
    /// nor hangs, and a limit registered afterwards still never admits more
    /// than its quota for a key.
    #[test]
    fn random_contents_never_panic_or_hang() {
        // Miri runs the registry and placement code here (it maps nothing):
        // one seed and a few keys keep it to seconds.
        let (seeds, keys) = if cfg!(miri) { (1, 3) } else { (20, 50) };
        for seed in 1..=seeds {
            let mem = memory(8, 16);
            let mut next = rng(seed);
            let scribble = |s: &Slot, v: u128| {
                let _ = s.cas(s.load(), v);
            };
            let mut r128 = || (u128::from(next()) << 64) | u128::from(next());
            for g in &mem.groups {
                for s in g.slots() {
                    scribble(s, r128());
                }
            }
            for c in &mem.cells {
                scribble(c, r128());
            }
            let mut next = rng(seed ^ 0xabc);
            for (i, e) in mem.registry.iter().enumerate() {
                // Some entries alive with random kinds and words, some claimed,
                // some with impossible states.
                let state = match (seed + i as u64) % 4 {
                    0 => ALIVE,
                    1 => claiming(next() >> 2),
                    2 => next(),
                    _ => FREE,
                };
                e.kind.store(next() % 8, order::STAT);
                e.config.init([next(), next() % 4, next(), next()]);
                e.bound.store(next(), order::STAT);
                e.salt.store(next(), order::STAT);
                e.generation.store(next() % 3, order::STAT);
                e.ident.store(next(), order::STAT);
                e.held.store(next(), order::STAT);
                e.ring_at.store(next(), order::STAT);
                for r in &e.ring {
                    r.store(next(), order::STAT);
                }
                e.state.store(state, order::STORE);
            }
            let pool = Pool::in_memory(mem.clone()).unwrap();
            for kind in Kind::ALL.into_iter().filter(|k| k.caps().keyed) {
                let mut spec = Spec::parse(kind, "2/hour").unwrap();
                if kind.caps().max_delay {
                    spec = spec.with_max_delay_ns(0).unwrap();
                }
                let Ok(t) = AnyKeyed::in_pool(&pool, &spec, 4, ()) else {
                    continue;
                };
                for k in 0..keys {
                    // Three requests at one instant: at most the quota of 2.
                    let now = next() % (1 << 40);
                    let admitted = (0..3)
                        .filter(|_| t.check_n_at(&k, 1, now).is_ok_and(|o| o.decision.allowed))
                        .count();
                    let _ = pool.live_keys_at(next());
                    assert!(admitted <= 2, "{kind}: key {k}: {admitted}");
                }
                t.clear();
            }
        }
    }
}

/// A single limiter whose state word is its registry entry's
/// ([`crate::AnyLimiter::in_pool`]): registered with bound 0, so it never meets a
/// keyed limit (whose bound is at least 1) of the same spec.
pub(crate) struct PoolWord<A: Algorithm> {
    member: Member<A>,
}

impl<A: Algorithm> fmt::Debug for PoolWord<A> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PoolWord")
            .field("member", &self.member)
            .finish_non_exhaustive()
    }
}

impl<A: Algorithm> PoolWord<A> {
    /// Its parameters: fixed in caller memory, else its entry's (live).
    #[inline(always)]
    fn params(&self) -> A::Params {
        Space::<A>::params(&self.member)
    }

    /// The word: in its registry entry, which a registered limit always has.
    #[inline(always)]
    fn word(&self) -> Option<&AtomicU64> {
        self.member.entry().map(|e| &e.word)
    }

    /// The answer if the entry were ever missing: a denial, never an admission
    /// the limit did not count.
    #[cold]
    fn orphaned(&self) -> crate::any::Outcome {
        crate::any::Outcome::plain(crate::decision::Decision {
            allowed: false,
            remaining: 0,
            retry_after_ns: u64::MAX,
            reset_after_ns: u64::MAX,
            limit: A::capacity(&self.params()),
        })
    }
}

/// The engine of a single limiter `spec` in `pool` (one quota: a compound is
/// several words no one CAS covers).
pub(crate) struct BuildPoolWord<'a> {
    pub(crate) pool: &'a Pool,
    pub(crate) spec: &'a crate::spec::Spec,
}

impl BuildPoolWord<'_> {
    fn engine<A: Algorithm + fmt::Debug + Send + Sync + 'static>(
        self,
        words: [u64; PARAM_WORDS],
    ) -> Result<Box<dyn crate::engine::Engine>, SpecError> {
        let member = self.pool.register::<A>(self.spec.kind(), words, 0)?;
        Ok(Box::new(PoolWord { member }))
    }
}

impl Dispatch for BuildPoolWord<'_> {
    type Output = Result<Box<dyn crate::engine::Engine>, SpecError>;
    fn word<A: Algorithm + fmt::Debug + Send + Sync + 'static>(self) -> Self::Output {
        let [q] = self.spec.quotas() else {
            return Err(self.spec.unsupported("several limits in one pool word"));
        };
        let p = A::params(q).map_err(|error| SpecError::Config { index: 0, error })?;
        self.engine::<A>(A::to_words(&p))
    }
    fn shaper(self) -> Self::Output {
        let p = crate::engine::shaper_params(self.spec)?;
        self.engine::<Shaping>(Shaping::to_words(&p))
    }
    fn log(self) -> Self::Output {
        Err(self
            .spec
            .unsupported("a pool (its writer lock is process memory)"))
    }
}

impl<A: Algorithm + fmt::Debug + Send + Sync + 'static> crate::engine::Engine for PoolWord<A> {
    #[inline]
    fn run(
        &self,
        _stripe: Option<usize>,
        n: u64,
        now: u64,
        consume: bool,
        _refund_now: &dyn Fn() -> u64,
    ) -> Result<crate::any::Outcome, InsufficientCapacity> {
        let Some(word) = self.word() else {
            return Ok(self.orphaned());
        };
        let (s, _) = crate::limiter::apply::<A>(word, || self.params(), now, n, consume)?;
        Ok(crate::engine::word_outcome(&s, consume))
    }

    fn set_spec(&self, _old: &crate::spec::Spec, new: &crate::spec::Spec) -> Result<(), SpecError> {
        self.member
            .set_quota(&new.quotas()[0])
            .map_err(|error| SpecError::Config { index: 0, error })
    }

    fn reset(&self) -> Result<(), &'static str> {
        let word = self
            .word()
            .ok_or("a reset of a limit no longer in its pool")?;
        word.store(0, order::STORE);
        Ok(())
    }

    fn can_refund(&self) -> bool {
        true
    }

    fn charge(
        &self,
        n: u64,
        now: u64,
        taken: &mut [(u64, u64); crate::spec::Spec::MAX_LIMITS],
    ) -> Result<(crate::any::Outcome, usize), InsufficientCapacity> {
        let Some(word) = self.word() else {
            return Ok((self.orphaned(), 0));
        };
        let ran = crate::limiter::apply::<A>(word, || self.params(), now, n, true)?;
        Ok(crate::engine::word_charge(ran, n, taken))
    }

    fn give_back(&self, n: u64, taken: &[(u64, u64)], now: u64) {
        if let (Some(word), Some(&t)) = (self.word(), taken.first()) {
            crate::limiter::give_back_cell::<A, _>(
                word,
                word.load(order::LOAD),
                || self.params(),
                n,
                t,
                || now,
            );
        }
    }

    fn undo(&self, taken: &[(u64, u64)]) -> bool {
        self.word()
            .is_some_and(|word| crate::engine::undo_word(word, taken))
    }
}
