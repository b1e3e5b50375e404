//! Hybrid mode: a local lock-free limiter in front, units leased from Redis in
//! batches and spent locally, and a local negative cache after a denial. For the
//! token bucket, the leaky bucket, the fixed window and the sliding window
//! counter (not the shaper: its grants come with delays).
//!
//! # How a check runs
//! 1. The **lease**: units Redis already charged to this process are taken with
//!    one compare-and-swap: no round trip.
//! 2. The **negative cache**: after Redis denied the key a cost, checks of at
//!    least that cost are denied locally until that denial's `retry_after` has
//!    passed. (It comes after the lease, so that units leased before a larger
//!    request was denied still serve smaller ones.)
//! 3. The **front limiter**, a lock-free `sluicegate` keyed limiter at the full
//!    quota, charged only with admitted units, denies what this process alone has
//!    already used up: no round trip. For the buckets it is a token bucket on the
//!    local clock; for the windows it is the same window algorithm
//!    ([`sluicegate::Fixed`], [`sluicegate::Sliding`]) on this process's estimate of
//!    Redis time, which is never earlier than Redis time, with every unit recorded
//!    in the window Redis charged it to. So it counts, per window, no more than
//!    Redis does, and decides at a time no earlier than Redis': a window it denies
//!    is one Redis denies too (up to the few units of checks that race a change
//!    of window, which it may count in the later window).
//! 4. Otherwise one task per key (single flight: concurrent checks of the key wait
//!    for it) leases a batch with the lease script, which charges up to the batch
//!    size in one call ([`RedisLimiter::try_lease`]).
//!
//! # Leases and time
//! A bucket lease expires [`HybridConfig::lease_ttl`] after it was asked for. A
//! window lease expires at the earlier of that and the end of the window Redis
//! charged it to, translated to the local monotonic clock conservatively: the
//! script reads Redis `TIME` after the request was sent (local time `t₀`), in
//! whole microseconds, so the window ends on the local clock no earlier than
//! `t₀ + (end − now_us − 1 µs)`; the lease expires `1/512` of that sooner still,
//! room for the two clocks running at different rates (NTP slews a clock by at
//! most 500 ppm). A check reads the clock *after* it loaded the lease, and the
//! lease word carries a sequence number next to its units, so a unit is spent
//! after Redis charged it and before its own lease's expiry: never under an
//! earlier lease's expiry.
//!
//! # Key map
//! The keys' lease state is in a map of up to 64 shards, each a
//! `RwLock<HashMap>` in its own cache line, chosen by a seeded hash of the key. A
//! check that spends from a lease takes its shard's read lock and writes nothing
//! but the lease word (no reference count, no shared counter: the statistics are
//! striped per thread), so checks of different keys on different cores rarely
//! touch a common cache line. The shards hold at most `max_keys` keys together
//! (`⌊max_keys / shards⌋` each); a shard that is full drops its idle keys (nothing
//! leased, no denial pending, not in use), and if every one is live, one of
//! them: its leased units are then lost (charged on Redis, never spent), never
//! spent twice.
//!
//! # Batch size
//! Sized from the local rate: the units this process spent since its last lease,
//! over the time since, times [`HybridConfig::horizon`] (for a window, at most the
//! time left in the window), clamped to `1..=max_batch`. When Redis has less than
//! two batches left the leases drop to single units, so the last units go to
//! whichever process asks first, not to whichever leased last.
//!
//! # Accuracy bound
//! Every admitted unit was charged on Redis, by the script that decides a plain
//! check, before it was admitted (when it was leased); the front limiter and the
//! negative cache only deny. Over-admission, per algorithm:
//!
//! * **Token bucket, leaky bucket** (rate `r` per period `P`, burst `b`): the
//!   global bucket admits at most `b + r·Δ/P` over any interval `Δ`: **the global
//!   quota is never exceeded** in units charged. A leased unit is spent at most
//!   [`HybridConfig::lease_ttl`] (`L`) after it was charged, and dropped unspent
//!   after that, so admissions over any interval of length `Δ` across the fleet
//!   are at most `b + r·(Δ + L)/P`.
//! * **Fixed window** (limit `l`): a unit charged to window `k` is spent within
//!   window `k` (in Redis time), so the fleet admits in window `k` at most what
//!   the script charged to it: **at most `l` per window, exactly the script's
//!   bound, no slack.**
//! * **Sliding window counter** (limit `l`, window `W`): let `P`, `C(t)` be the
//!   previous and current window's counts the script holds (units charged), and
//!   `p`, `c(t)` the units the fleet admitted in those windows up to `t`. Each
//!   admitted unit was charged at or before its admission, in the window it is
//!   admitted in, so `p ≤ P` and `c(t) ≤ C(t)`. The estimate
//!   `⌈p·(W − e)/W⌉ + c` is monotone in both counts, so at every instant the
//!   estimate of what the fleet admitted is at most the script's; and the
//!   script's is at most `l` at every instant (it charges only when
//!   `estimate + n ≤ l`, and the estimate only falls between charges, also
//!   across a window change, where `⌈C·W/W⌉ = C`). So at each admission the
//!   estimate of the admitted units, that one included, is at most `l`: **the
//!   script alone, fed exactly the admitted requests at the times they were
//!   admitted, would have admitted every one of them. No extra slack**: the
//!   sliding counter's own guarantees (at most `l` per aligned window, at most
//!   `2·l` in any span of one window) hold fleet-wide unchanged.
//!
//! The window bounds take Redis `TIME` as a clock that neither steps forward nor
//! runs more than `1/512` faster than the local one (two clocks each slewed by
//! NTP differ by at most 1000 ppm). If it steps forward (an operator, a
//! failover to a server with a later clock), a window may end before its leases
//! expire locally, and the units then unspent in the fleet (at most `max_batch`
//! per process) may be spent in the next window. If it steps back, the script
//! keeps deciding in the stored window and the leases stay conservative.
//!
//! The other way (under-admission, never over-admission): each of `N` processes
//! holds at most `max_batch` unspent units at any moment, so the fleet may deny
//! while up to `N·max_batch` units sit in other processes' leases, and each lease
//! that expires unspent loses at most `max_batch` (for a window, at its end:
//! the batch size keeps a window's lease to what the local rate spends before the
//! window ends).

use core::hash::BuildHasher;
use core::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use core::time::Duration;
use std::collections::HashMap;
use std::sync::{Arc, PoisonError, RwLock};
use std::time::Instant;

use sluicegate::keyed::{DefaultHashBuilder, Group, Keyed};
use sluicegate::{Decision, DefaultClock, Fixed, Gcra, InsufficientCapacity, Sliding};

use crate::error::Error;
use crate::limit::{Reply, ScriptKind};
use crate::limiter::{RedisLimiter, Source, Verdict};

/// The lease word: the units left in its low 32 bits, the lease's sequence number
/// in the high 32 (one per lease, so a compare-and-swap against an earlier
/// lease's word fails).
const UNITS: u64 = u32::MAX as u64;
/// At most this many key-map shards (fewer when `max_keys` is smaller).
const MAX_SHARDS: usize = 64;
/// Stripes of the hit counters.
const STRIPES: usize = 16;
/// A window lease expires `1/2^DRIFT_SHIFT` of its time early: room for NTP's
/// slew (at most 500 ppm) of each of the two clocks.
const DRIFT_SHIFT: u32 = 9;

/// Settings of a [`HybridLimiter`].
///
/// ```
/// use sluicegate_redis::HybridConfig;
/// let c = HybridConfig::default();
/// assert_eq!(c.horizon.as_millis(), 100);
/// assert_eq!(c.lease_ttl.as_millis(), 250);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HybridConfig {
    /// A lease is sized to last this long at the local rate.
    pub horizon: Duration,
    /// Leased units not spent within this long are dropped (the `L` of the bound;
    /// a window's units are dropped at the window's end, if that is sooner).
    pub lease_ttl: Duration,
    /// The largest lease; `None`: a tenth of the burst or window limit (at least
    /// 1). At most `2^32 − 1`.
    pub max_batch: Option<u64>,
    /// Keys whose lease state is kept (at least 1); past it, idle keys are dropped.
    pub max_keys: usize,
}

impl Default for HybridConfig {
    fn default() -> Self {
        Self {
            horizon: Duration::from_millis(100),
            lease_ttl: Duration::from_millis(250),
            max_batch: None,
            max_keys: 100_000,
        }
    }
}

/// One key's local state. Everything a lease hit reads is here, next to the lease
/// word it writes: one cache line moves per hit.
#[derive(Debug, Default)]
#[repr(align(128))]
struct Entry {
    /// The lease: sequence number and units left (see [`UNITS`]).
    lease: AtomicU64,
    /// When the lease's units expire (ns on the limiter's monotonic clock).
    expires: AtomicU64,
    /// Windows: where the lease's window ends, in Redis time (ns since the epoch).
    window_end: AtomicU64,
    /// Windows: Redis time minus local time at the last lease, rounded up (ns):
    /// local `t` is no later than Redis time `t + offset` (0: no lease yet).
    offset: AtomicU64,
    /// Deny requests of at least `deny_cost` locally until then (negative cache).
    deny_until: AtomicU64,
    deny_cost: AtomicU64,
    /// When the last lease was taken, and the units it put in this process's
    /// hands: spent since = `leased` − units left.
    last_lease: AtomicU64,
    leased: AtomicU64,
    /// Whether Redis has little left: lease single units.
    scarce: AtomicBool,
    flight: tokio::sync::Mutex<()>,
}

impl Entry {
    /// Whether dropping the entry loses nothing: no units leased, no denial
    /// pending, no check holding it.
    fn idle(self: &Arc<Self>, now: u64) -> bool {
        Arc::strong_count(self) == 1
            && (self.lease.load(Ordering::Relaxed) & UNITS == 0
                || now >= self.expires.load(Ordering::Relaxed))
            && now >= self.deny_until.load(Ordering::Relaxed)
    }

    /// Replaces the lease (the caller holds the key's flight). Readers that loaded
    /// the old word fail their compare-and-swap; readers that load the new one see
    /// its expiry and window, stored before it.
    fn store_lease(&self, units: u64, expires: u64, window_end: u64, offset: u64) {
        let seq = (self.lease.load(Ordering::Relaxed) >> 32).wrapping_add(1) << 32;
        self.lease.store(seq, Ordering::Release);
        self.expires.store(expires, Ordering::Release);
        self.window_end.store(window_end, Ordering::Release);
        self.offset.store(offset, Ordering::Release);
        self.lease.store(seq | units.min(UNITS), Ordering::Release);
    }
}

/// Hit counters of a [`HybridLimiter`].
///
/// ```
/// use sluicegate_redis::HybridStats;
/// let s = HybridStats { local: 95, round_trips: 5 };
/// assert_eq!(s.local_share(), 0.95);
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct HybridStats {
    /// Checks answered without a round trip.
    pub local: u64,
    /// Checks that made a round trip (leases and policy answers after a failed one).
    pub round_trips: u64,
}

impl HybridStats {
    /// The share of checks answered locally (1.0 when there were none).
    ///
    /// ```
    /// # use sluicegate_redis::HybridStats;
    /// assert_eq!(HybridStats::default().local_share(), 1.0);
    /// ```
    pub fn local_share(&self) -> f64 {
        let all = self.local + self.round_trips;
        if all == 0 {
            1.0
        } else {
            self.local as f64 / all as f64
        }
    }
}

/// A small per-thread number, so that threads count in their own stripe.
fn stripe() -> usize {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    std::thread_local! {
        static STRIPE: usize = NEXT.fetch_add(1, Ordering::Relaxed) % STRIPES;
    }
    STRIPE.with(|s| *s)
}

#[derive(Debug, Default)]
#[repr(align(128))]
struct Stripe {
    local: AtomicU64,
    round_trips: AtomicU64,
}

#[derive(Debug)]
struct Counters([Stripe; STRIPES]);

impl Counters {
    fn local(&self) {
        self.0[stripe()].local.fetch_add(1, Ordering::Relaxed);
    }
    fn round_trip(&self) {
        self.0[stripe()].round_trips.fetch_add(1, Ordering::Relaxed);
    }
}

#[repr(align(128))]
struct Shard(RwLock<HashMap<String, Arc<Entry>, DefaultHashBuilder>>);

/// The keys' entries: shards chosen by a seeded hash, `per_shard` keys each.
struct KeyMap {
    shards: Box<[Shard]>,
    per_shard: usize,
    hasher: DefaultHashBuilder,
}

impl KeyMap {
    fn new(max_keys: usize) -> Self {
        let max_keys = max_keys.max(1);
        // The largest power of two at most min(max_keys, MAX_SHARDS): the shards
        // together hold at most max_keys.
        let n = 1usize << (usize::BITS - 1 - max_keys.min(MAX_SHARDS).leading_zeros());
        Self {
            shards: (0..n)
                .map(|_| Shard(RwLock::new(HashMap::default())))
                .collect(),
            per_shard: max_keys / n,
            hasher: DefaultHashBuilder::default(),
        }
    }

    fn shard(&self, key: &str) -> &RwLock<HashMap<String, Arc<Entry>, DefaultHashBuilder>> {
        // The high bits: the maps' own hashers are seeded apart, but keep clear of
        // the bits a map indexes with anyway.
        let h = (self.hasher.hash_one(key) >> 40) as usize;
        &self.shards[h & (self.shards.len() - 1)].0
    }

    /// `f` on `key`'s entry, under its shard's read lock, if it has one.
    fn with<R>(&self, key: &str, f: impl FnOnce(&Entry) -> R) -> Option<R> {
        let map = self
            .shard(key)
            .read()
            .unwrap_or_else(PoisonError::into_inner);
        map.get(key).map(|e| f(e))
    }

    /// `key`'s entry, made if it has none (dropping idle keys, or one live key,
    /// from a full shard).
    fn entry(&self, key: &str, now: u64) -> Arc<Entry> {
        let shard = self.shard(key);
        if let Some(e) = shard
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(key)
        {
            return Arc::clone(e);
        }
        let mut map = shard.write().unwrap_or_else(PoisonError::into_inner);
        if let Some(e) = map.get(key) {
            return Arc::clone(e);
        }
        if map.len() >= self.per_shard {
            map.retain(|_, e| !e.idle(now));
            if map.len() >= self.per_shard {
                let victim = map
                    .iter()
                    .find(|(_, e)| Arc::strong_count(e) == 1)
                    .or_else(|| map.iter().next())
                    .map(|(k, _)| k.clone());
                if let Some(k) = victim {
                    map.remove(&k);
                }
            }
        }
        Arc::clone(map.entry(key.to_owned()).or_default())
    }

    fn len(&self) -> usize {
        self.shards
            .iter()
            .map(|s| s.0.read().unwrap_or_else(PoisonError::into_inner).len())
            .sum()
    }
}

type Table<A, C> = Keyed<A, C, Box<[Group]>, DefaultHashBuilder>;

/// The front limiter: the bucket on the local clock, the windows on Redis time
/// as this process estimates it (see the module docs).
enum Front {
    Bucket(Table<Gcra, DefaultClock>),
    Fixed(Table<Fixed, ()>),
    Sliding(Table<Sliding, ()>),
}

impl Front {
    /// The front's decision on `n` more units, at Redis time `at` (windows).
    fn peek(&self, key: &str, n: u64, at: u64) -> Result<Decision, InsufficientCapacity> {
        match self {
            Self::Bucket(t) => t.peek_n(key, n),
            Self::Fixed(t) => t.peek_n_at(key, n, at),
            Self::Sliding(t) => t.peek_n_at(key, n, at),
        }
    }

    /// Records `n` admitted units, at Redis time `at` (windows).
    fn charge(&self, key: &str, n: u64, at: u64) {
        let _ = match self {
            Self::Bucket(t) => t.check_n(key, n),
            Self::Fixed(t) => t.check_n_at(key, n, at),
            Self::Sliding(t) => t.check_n_at(key, n, at),
        };
    }
}

/// A token-bucket, leaky-bucket, fixed-window or sliding-window [`RedisLimiter`]
/// with a local tier in front: see the [module docs](self) for the bound. Cheap
/// to clone.
///
/// ```no_run
/// # async fn f() -> Result<(), sluicegate_redis::Error> {
/// use sluicegate::Quota;
/// use sluicegate_redis::*;
/// let limit = Limit::new(Algorithm::TokenBucket, Quota::per_second(1000))?;
/// let rl = RedisLimiter::new(Backend::from_url("redis://127.0.0.1:6379")?, "api", limit, Config::default())?;
/// let h = HybridLimiter::new(rl, HybridConfig::default())?;
/// for _ in 0..100 {
///     assert!(h.check("user:1").await?.decision.allowed);
/// }
/// // Most of those were spent from a lease, without a round trip.
/// assert!(h.stats().local > 50);
///
/// // A window: at most 600 a minute fleet-wide, leased and spent locally too.
/// let limit = Limit::new(Algorithm::SlidingWindow, Quota::per_minute(600))?;
/// let rl = RedisLimiter::new(Backend::from_url("redis://127.0.0.1:6379")?, "api-w", limit, Config::default())?;
/// let w = HybridLimiter::new(rl, HybridConfig::default())?;
/// assert!(w.check("user:1").await?.decision.allowed);
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct HybridLimiter {
    inner: Arc<HybridInner>,
}

struct HybridInner {
    remote: RedisLimiter,
    front: Front,
    cfg: HybridConfig,
    max_batch: u64,
    /// The window in ns (0 for the buckets).
    window_ns: u64,
    keys: KeyMap,
    epoch: Instant,
    counters: Counters,
}

impl HybridInner {
    fn now(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_nanos())
            .unwrap_or(u64::MAX)
            .max(1)
    }
}

impl core::fmt::Debug for HybridLimiter {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("HybridLimiter")
            .field("remote", &self.inner.remote)
            .field("cfg", &self.inner.cfg)
            .finish_non_exhaustive()
    }
}

impl HybridLimiter {
    /// Puts a local tier in front of `remote`: a token bucket, a leaky bucket, a
    /// fixed window or a sliding window counter (a shaper with a max delay is an
    /// [`Error::Resolution`]).
    ///
    /// ```
    /// # use core::time::Duration;
    /// # use sluicegate::Quota;
    /// # use sluicegate_redis::*;
    /// let url = || Backend::from_url("redis://127.0.0.1:1").unwrap();
    /// let window = Limit::new(Algorithm::FixedWindow, Quota::per_second(10)).unwrap();
    /// let rl = RedisLimiter::new(url(), "x", window, Config::default()).unwrap();
    /// assert!(HybridLimiter::new(rl, HybridConfig::default()).is_ok());
    /// let shaper = Algorithm::Shaper { max_delay: Duration::from_millis(5) };
    /// let limit = Limit::new(shaper, Quota::per_second(10)).unwrap();
    /// let rl = RedisLimiter::new(url(), "x", limit, Config::default()).unwrap();
    /// assert!(HybridLimiter::new(rl, HybridConfig::default()).is_err());
    /// ```
    pub fn new(remote: RedisLimiter, cfg: HybridConfig) -> Result<Self, Error> {
        let limit = *remote.limit();
        if limit.slack_us != 0 {
            return Err(Error::Resolution {
                field: "algorithm",
                reason: "hybrid mode leases bucket or window units; a shaper's come with delays",
            });
        }
        let capacity = limit.capacity();
        let max_batch = cfg
            .max_batch
            .unwrap_or(capacity / 10)
            .clamp(1, capacity.clamp(1, UNITS));
        let slots = cfg.max_keys.clamp(16, 1 << 24);
        let quota = limit.quota();
        let (front, window_ns) = match limit.script {
            ScriptKind::Gcra => (
                Front::Bucket(Keyed::new(quota, slots).map_err(Error::Config)?),
                0,
            ),
            ScriptKind::Fixed => (
                Front::Fixed(Keyed::with_clock(quota, slots, ()).map_err(Error::Config)?),
                quota.period_ns(),
            ),
            ScriptKind::Sliding => (
                Front::Sliding(Keyed::with_clock(quota, slots, ()).map_err(Error::Config)?),
                quota.period_ns(),
            ),
        };
        Ok(Self {
            inner: Arc::new(HybridInner {
                remote,
                front,
                cfg,
                max_batch,
                window_ns,
                keys: KeyMap::new(cfg.max_keys),
                epoch: Instant::now(),
                counters: Counters(Default::default()),
            }),
        })
    }

    /// The counters so far.
    ///
    /// ```
    /// # use sluicegate::Quota;
    /// # use sluicegate_redis::*;
    /// # let limit = Limit::new(Algorithm::TokenBucket, Quota::per_second(10)).unwrap();
    /// # let rl = RedisLimiter::new(Backend::from_url("redis://127.0.0.1:1").unwrap(), "x", limit, Config::default()).unwrap();
    /// let h = HybridLimiter::new(rl, HybridConfig::default()).unwrap();
    /// assert_eq!(h.stats().round_trips, 0);
    /// ```
    pub fn stats(&self) -> HybridStats {
        let mut s = HybridStats::default();
        for stripe in &self.inner.counters.0 {
            s.local += stripe.local.load(Ordering::Relaxed);
            s.round_trips += stripe.round_trips.load(Ordering::Relaxed);
        }
        s
    }

    /// The largest lease this limiter takes.
    ///
    /// ```
    /// # use sluicegate::Quota;
    /// # use sluicegate_redis::*;
    /// # let limit = Limit::new(Algorithm::TokenBucket, Quota::per_second(10).burst(50)).unwrap();
    /// # let rl = RedisLimiter::new(Backend::from_url("redis://127.0.0.1:1").unwrap(), "x", limit, Config::default()).unwrap();
    /// let h = HybridLimiter::new(rl, HybridConfig::default()).unwrap();
    /// assert_eq!(h.max_batch(), 5);
    /// ```
    pub fn max_batch(&self) -> u64 {
        self.inner.max_batch
    }

    /// How many keys' lease state is held now (at most [`HybridConfig::max_keys`]).
    ///
    /// ```
    /// # use sluicegate::Quota;
    /// # use sluicegate_redis::*;
    /// # let limit = Limit::new(Algorithm::FixedWindow, Quota::per_second(10)).unwrap();
    /// # let rl = RedisLimiter::new(Backend::from_url("redis://127.0.0.1:1").unwrap(), "x", limit, Config::default()).unwrap();
    /// let h = HybridLimiter::new(rl, HybridConfig::default()).unwrap();
    /// assert_eq!(h.keys(), 0);
    /// ```
    pub fn keys(&self) -> usize {
        self.inner.keys.len()
    }

    /// The underlying Redis limiter.
    ///
    /// ```
    /// # use sluicegate::Quota;
    /// # use sluicegate_redis::*;
    /// # let limit = Limit::new(Algorithm::TokenBucket, Quota::per_second(10)).unwrap();
    /// # let rl = RedisLimiter::new(Backend::from_url("redis://127.0.0.1:1").unwrap(), "x", limit, Config::default()).unwrap();
    /// let h = HybridLimiter::new(rl, HybridConfig::default()).unwrap();
    /// assert_eq!(h.remote().limit().capacity(), 10);
    /// ```
    pub fn remote(&self) -> &RedisLimiter {
        &self.inner.remote
    }

    /// Checks one unit. See [`Self::check_n`].
    ///
    /// ```no_run
    /// # async fn f(h: sluicegate_redis::HybridLimiter) -> Result<(), sluicegate_redis::Error> {
    /// let v = h.check("k").await?;
    /// assert!(v.decision.allowed || v.decision.retry_after_ns > 0);
    /// # Ok(()) }
    /// ```
    pub async fn check(&self, key: &str) -> Result<Verdict, Error> {
        self.check_n(key, 1).await
    }

    /// Checks and charges `n` units for `key`; see the [module docs](self). The
    /// decision's `remaining` counts this process's lease and what Redis reported
    /// at the last lease; `n = 0` peeks at Redis.
    ///
    /// ```no_run
    /// # async fn f(h: sluicegate_redis::HybridLimiter) -> Result<(), sluicegate_redis::Error> {
    /// let v = h.check_n("k", 2).await?;
    /// if v.source == sluicegate_redis::Source::Lease { assert!(v.decision.allowed) }
    /// # Ok(()) }
    /// ```
    pub async fn check_n(&self, key: &str, n: u64) -> Result<Verdict, Error> {
        let inner = &*self.inner;
        let limit = inner.remote.limit().capacity();
        if n > limit {
            return Err(Error::Capacity(InsufficientCapacity {
                requested: n,
                capacity: limit,
            }));
        }
        if n == 0 {
            inner.counters.round_trip();
            return inner.remote.peek_n(key, 0).await;
        }
        if let Some(Some(v)) = inner.keys.with(key, |e| self.local(e, key, n, limit)) {
            return Ok(v);
        }
        let entry = inner.keys.entry(key, inner.now());
        // The front limiter only ever sees admitted units (it is charged on
        // admission), so it denies exactly when this process alone has used the
        // whole quota: a denial Redis would give, without asking. A window's front
        // runs on Redis time, known after the key's first lease.
        let offset = entry.offset.load(Ordering::Acquire);
        if inner.window_ns == 0 || offset != 0 {
            let at = inner.now().saturating_add(offset);
            let front = inner.front.peek(key, n, at).map_err(Error::Capacity)?;
            if !front.allowed {
                inner.counters.local();
                return Ok(Verdict {
                    decision: front,
                    source: Source::LocalDenial,
                    delay_ns: 0,
                });
            }
        }
        let _flight = entry.flight.lock().await;
        // Another task may have leased while this one waited.
        if let Some(v) = self.local(&entry, key, n, limit) {
            return Ok(v);
        }
        self.lease(&entry, key, n).await
    }

    /// A decision without a round trip, if there is one: units from the lease, or
    /// the negative cache.
    fn local(&self, e: &Entry, key: &str, n: u64, limit: u64) -> Option<Verdict> {
        let inner = &*self.inner;
        let mut word = e.lease.load(Ordering::Acquire);
        loop {
            // The clock is read after the lease word is loaded: a lease seen here
            // was charged on Redis before this instant.
            let now = inner.now();
            let left = word & UNITS;
            if left >= n && now < e.expires.load(Ordering::Acquire) {
                // Loaded after the word, before the swap: if the swap succeeds they
                // are this lease's (a new lease changes the word first).
                let end = e.window_end.load(Ordering::Acquire);
                let offset = e.offset.load(Ordering::Acquire);
                match e.lease.compare_exchange_weak(
                    word,
                    word - n,
                    Ordering::AcqRel,
                    Ordering::Acquire,
                ) {
                    Ok(_) => {
                        inner.counters.local();
                        // A window's front records the units in the window they
                        // were charged to.
                        let at = now.saturating_add(offset).min(end.saturating_sub(1));
                        inner.front.charge(key, n, at);
                        return Some(Verdict {
                            decision: Decision {
                                allowed: true,
                                remaining: left - n,
                                retry_after_ns: 0,
                                reset_after_ns: 0,
                                limit,
                            },
                            source: Source::Lease,
                            delay_ns: 0,
                        });
                    }
                    Err(w) => {
                        word = w;
                        continue;
                    }
                }
            }
            let deny_until = e.deny_until.load(Ordering::Acquire);
            if now < deny_until && n >= e.deny_cost.load(Ordering::Relaxed) {
                inner.counters.local();
                return Some(Verdict {
                    decision: Decision {
                        allowed: false,
                        remaining: 0,
                        retry_after_ns: deny_until - now,
                        reset_after_ns: 0,
                        limit,
                    },
                    source: Source::LocalDenial,
                    delay_ns: 0,
                });
            }
            return None;
        }
    }

    /// The round trip: one lease of a batch (the caller holds the key's flight).
    async fn lease(&self, e: &Entry, key: &str, n: u64) -> Result<Verdict, Error> {
        let inner = &*self.inner;
        inner.counters.round_trip();
        // Before the request is sent: Redis decides at or after this instant.
        let t0 = inner.now();
        let batch = self.batch_size(e, t0).max(n);
        let r = match inner.remote.try_lease(key, batch).await {
            Ok(r) => r,
            Err(Error::Capacity(c)) => return Err(Error::Capacity(c)),
            Err(_) => return Ok(inner.remote.policy(key, n, true)),
        };
        let (expires, window_end, offset) = self.expiry(t0, &r);
        if r.decision.allowed && r.granted >= n {
            let left = r.granted - n;
            e.store_lease(left, expires, window_end, offset);
            e.last_lease.store(t0, Ordering::Relaxed);
            e.leased.store(r.granted, Ordering::Relaxed);
            let scarce = r.decision.remaining < 2 * inner.max_batch;
            e.scarce.store(scarce, Ordering::Relaxed);
            let at = inner
                .now()
                .saturating_add(offset)
                .min(window_end.saturating_sub(1));
            inner.front.charge(key, n, at);
            return Ok(Verdict {
                decision: Decision {
                    remaining: r.decision.remaining + left,
                    ..r.decision
                },
                source: Source::Redis,
                delay_ns: 0,
            });
        }
        // Denied, or granted fewer than n: those are kept for smaller requests.
        let (retry, cost) = if r.granted > 0 {
            e.store_lease(r.granted, expires, window_end, offset);
            e.last_lease.store(t0, Ordering::Relaxed);
            e.leased.store(r.granted, Ordering::Relaxed);
            (self.retry_for(n, r.granted, &r), n)
        } else {
            // A denial of one unit: its retry_after holds for every cost.
            (r.decision.retry_after_ns, 1)
        };
        e.deny_cost.store(cost, Ordering::Relaxed);
        e.deny_until
            .store(t0.saturating_add(retry), Ordering::Release);
        e.scarce.store(true, Ordering::Relaxed);
        Ok(Verdict {
            decision: Decision {
                allowed: false,
                remaining: r.decision.remaining + r.granted,
                retry_after_ns: retry,
                ..r.decision
            },
            source: Source::Redis,
            delay_ns: 0,
        })
    }

    /// After a lease granted `granted < n` (all Redis had), the earliest `n` fresh
    /// units can be there, at the latest: a lower bound on when a retry can
    /// succeed.
    fn retry_for(&self, n: u64, granted: u64, r: &Reply) -> u64 {
        let limit = self.inner.remote.limit();
        let w = self.inner.window_ns;
        match limit.script {
            ScriptKind::Gcra => (n - granted).saturating_mul(limit.emission_interval_us() * 1000),
            // Nothing frees up before the window ends.
            ScriptKind::Fixed => window_left_ns(r.now_us, w).saturating_sub(1000),
            // The estimate is now the limit and falls by at most limit/W per unit
            // of time (the previous window held at most the limit): n more units
            // take longer than (n − 1)·W/limit.
            ScriptKind::Sliding => {
                ((n - 1) as u128 * w as u128 / limit.capacity().max(1) as u128) as u64
            }
        }
    }

    /// A lease's local expiry, its window's end in Redis time, and the Redis-time
    /// offset (see the module docs' "Leases and time").
    fn expiry(&self, t0: u64, r: &Reply) -> (u64, u64, u64) {
        let inner = &*self.inner;
        let ttl = t0.saturating_add(nanos(inner.cfg.lease_ttl));
        let w = inner.window_ns;
        if w == 0 {
            return (ttl, u64::MAX, 0);
        }
        let now_ns = r.now_us.saturating_mul(1000);
        // Redis' true time was below now_us + 1 µs when it decided, at or after t0.
        let left = window_left_ns(r.now_us, w).saturating_sub(1000);
        let safe = left - (left >> DRIFT_SHIFT);
        let expires = ttl.min(t0.saturating_add(safe));
        let end = now_ns.saturating_add(window_left_ns(r.now_us, w));
        let offset = now_ns.saturating_add(999).saturating_sub(t0).max(1);
        (expires, end, offset)
    }

    fn batch_size(&self, e: &Entry, now: u64) -> u64 {
        let inner = &*self.inner;
        let max = inner.max_batch;
        if e.scarce.load(Ordering::Relaxed) {
            return 1;
        }
        let last = e.last_lease.load(Ordering::Relaxed);
        if last == 0 {
            return 1; // no rate known yet: start small
        }
        let left = e.lease.load(Ordering::Relaxed) & UNITS;
        let spent = e.leased.load(Ordering::Relaxed).saturating_sub(left) as u128;
        let elapsed = now.saturating_sub(last).max(1) as u128;
        let mut horizon = nanos(inner.cfg.horizon);
        let offset = e.offset.load(Ordering::Relaxed);
        if inner.window_ns > 0 && offset != 0 {
            // A window's units expire at its end: lease what the local rate spends
            // before then (Redis time estimated late: the time left, low).
            let redis_now = now.saturating_add(offset);
            horizon = horizon.min(inner.window_ns - redis_now % inner.window_ns);
        }
        let want = spent * horizon as u128 / elapsed;
        (want.min(max as u128) as u64).max(1)
    }
}

/// Nanoseconds from Redis time `now_us` to the end of its aligned window of
/// `window_ns`.
fn window_left_ns(now_us: u64, window_ns: u64) -> u64 {
    let w_us = (window_ns / 1000).max(1);
    (w_us - now_us % w_us).saturating_mul(1000)
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}
