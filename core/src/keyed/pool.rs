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

use super::sketch::{self, Cells};
use super::slot::{GROUP_SLOTS, Group, Slot, committed_state, fp_of, is_pending, state_of};
use super::stats::{Event, FullPolicy, KeyedStats, Stats};
use super::table::{Held, Space, judge};
use super::{DefaultHashBuilder, random_hasher, try_boxed};
use crate::error::ConfigError;
use crate::kind::{Dispatch, Kind};
use crate::limiter::{Algorithm, ConfigCell, PARAM_WORDS};
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

/// One id's entry: what the pool knows of the limit that holds it.
#[derive(Debug)]
struct Entry {
    /// [`FREE`], [`ALIVE`] or [`GONE`] (awaiting a sweep).
    state: AtomicU64,
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
    bound: AtomicU64,
    /// When it may next recount its live keys.
    recount_at: AtomicU64,
    /// The slots it placed keys in last (index + 1; 0: none), and where the next
    /// goes.
    ring: [AtomicU64; RING],
    ring_at: AtomicU64,
    stats: Stats<1>,
}

impl Entry {
    fn new() -> Self {
        Entry {
            state: AtomicU64::new(FREE),
            kind: AtomicU64::new(0),
            config: ConfigCell::new([0; PARAM_WORDS]),
            salt: AtomicU64::new(0),
            generation: AtomicU64::new(0),
            held: AtomicU64::new(0),
            bound: AtomicU64::new(0),
            recount_at: AtomicU64::new(0),
            ring: core::array::from_fn(|_| AtomicU64::new(0)),
            ring_at: AtomicU64::new(0),
            stats: Stats::new(),
        }
    }

    fn kind(&self) -> Kind {
        let i = self.kind.load(order::STAT) as usize;
        Kind::ALL.get(i).copied().unwrap_or(Kind::TokenBucket)
    }

    /// The live limit's kind, parameters and generation, read consistently: `None`
    /// if it is not alive or was registered anew while being read.
    fn alive(&self) -> Option<(Kind, [u64; PARAM_WORDS], u64)> {
        let generation = self.generation.load(order::LOAD);
        if self.state.load(order::LOAD) != ALIVE {
            return None;
        }
        let (kind, words) = (self.kind(), self.config.load());
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

#[derive(Debug)]
struct Inner {
    groups: Box<[Group]>,
    cells: Cells,
    hasher: DefaultHashBuilder,
    chunks: Box<[OnceLock<Box<[Entry]>>]>,
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
                groups,
                cells: Cells::Owned(cells),
                hasher: random_hasher(),
                chunks,
                ids: Mutex::new(Ids {
                    next: 1,
                    ..Ids::default()
                }),
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
        self.inner.groups.len() * GROUP_SLOTS
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
        core::mem::size_of_val(&*self.inner.groups) + core::mem::size_of_val(self.inner.cells.get())
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
        for s in self.inner.groups.iter().flat_map(|g| g.slots().iter()) {
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
        e.state.store(ALIVE, order::STORE);
        Ok(Member {
            inner: inner.clone(),
            id: id as u64,
            tag: tag(id as u64, generation),
            salt,
            policy: FullPolicy::default(),
            _algorithm: PhantomData,
        })
    }
}

/// The sketch-cell owner tag of generation `generation` of id `id`.
fn tag(id: u64, generation: u64) -> u64 {
    ((generation & GEN_MASK) << ID_BITS) | id
}

impl Inner {
    fn entry(&self, id: u64) -> Option<&Entry> {
        let id = id as usize;
        self.chunks.get(id / CHUNK)?.get()?.get(id % CHUNK)
    }

    fn entry_or_alloc(&self, id: usize) -> Option<&Entry> {
        let chunk = self.chunks.get(id / CHUNK)?;
        if chunk.get().is_none() {
            let fresh = try_boxed(CHUNK, Entry::new).ok()?;
            let _ = chunk.set(fresh);
        }
        chunk.get()?.get(id % CHUNK)
    }

    /// The index of `slot` among the pool's slots.
    fn index_of(&self, slot: &Slot) -> Option<usize> {
        let base = self.groups.as_ptr() as usize;
        let offset = (slot as *const Slot as usize).checked_sub(base)?;
        let group = offset / core::mem::size_of::<Group>();
        let within = offset % core::mem::size_of::<Group>() / core::mem::size_of::<Slot>();
        (group < self.groups.len() && within < GROUP_SLOTS).then_some(group * GROUP_SLOTS + within)
    }

    /// The slot at `index`.
    fn slot(&self, index: usize) -> Option<&Slot> {
        self.groups
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
        match e.alive() {
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
        match e.alive() {
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
        match e.alive() {
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
        for g in self.groups.iter() {
            g.clear_where(|v| gone(id_of(v)));
        }
        self.cells.clear_where(|owner| gone(owner & ID_MASK));
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
        pool.cells
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

    /// Keys of this limit holding live state at `now` (a scan of the pool).
    pub(super) fn len_at(&self, now: u64) -> usize {
        let p = Space::<A>::params(self);
        self.inner
            .groups
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
        (bound as usize).min(self.inner.groups.len() * GROUP_SLOTS)
    }

    /// Forgets this limit's keys (not atomic with concurrent checks).
    pub(super) fn clear(&self) {
        let id = self.id;
        for g in self.inner.groups.iter() {
            g.clear_where(|v| id_of(v) == id);
        }
        let tag = self.tag;
        self.inner.cells.clear_where(|owner| owner == tag);
        if let Some(e) = self.entry() {
            e.held.store(0, order::STAT);
        }
    }
}

impl<A: Algorithm> Space<A> for Member<A> {
    #[inline(always)]
    fn groups(&self) -> &[Group] {
        &self.inner.groups
    }
    #[inline(always)]
    fn params(&self) -> A::Params {
        A::from_words(self.config().map_or([0; PARAM_WORDS], ConfigCell::load))
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
        self.inner.cells.start::<A>(p, self.tag, fp, now)
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
        let live = self.len_at(now) as u64;
        e.held.store(live, order::STAT);
        live >= bound
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
            let live = !A::is_fresh(p, state_of(v), now);
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
