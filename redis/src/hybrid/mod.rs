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
//!    quota, charged only with units admitted from leases, denies what this
//!    process alone has already used up: no round trip. For the buckets it is
//!    a token bucket on the local clock; for the windows it is the same window algorithm
//!    ([`sluicegate::Fixed`], [`sluicegate::Sliding`]) on this process's estimate of
//!    Redis time, which is never earlier than Redis time, with every unit recorded
//!    in the window Redis charged it to. So it counts, per window, no more than
//!    Redis does, and decides at a time no earlier than Redis': a window it denies
//!    is one Redis denies too (up to the few units of checks that race a change
//!    of window, which it may count in the later window).
//! 4. Otherwise one task per key (single flight: concurrent checks of the key wait
//!    for it, and its lease holds their units too) leases a batch with the lease
//!    script, which charges up to the batch size in one call
//!    ([`RedisLimiter::try_lease`]). The leases of many keys
//!    asked for at about the same moment (every key at a window's start) go in
//!    one pipeline: one write, one read, one timeout.
//!
//! # Cold keys
//! A lease pays off for a key checked again within its life; a key seen once
//! every few lease lives would cost a round trip per check leased or not, and
//! its lease state (an entry in the key map) would be work and memory for
//! nothing. So steps 1–3 find no lease for a key checked seldom (a "cold" key)
//! and it is checked with one plain script call, exactly as the `redis`
//! backend checks it, and no lease state is made for it (unless Redis denies
//! it: the denial is cached as in step 2). Its units are not charged to the
//! front, which only counts what leases admitted and is only asked for keys
//! with lease state: the front may then deny a little later than it could
//! (a round trip later, after which the negative cache answers), never
//! earlier. A key becomes warm when it is checked again within a lease's
//! life ([`HybridConfig::lease_ttl`] for the buckets, the window for the
//! windows): a fixed sketch of slots chosen by a seeded hash (`max_keys / 2`
//! slots, 8 bytes each), each the last key's 31-bit tag, a released bit and a
//! `u32` stamp, remembers when keys without lease state were last checked. A
//! key's first lease once it turns warm is sized from that gap (one unit over
//! it; for a window, placed in its window by the limiter's last Redis time).
//! A key with lease state stays on the lease path, its own history sizing its
//! leases, until the key map drops it as idle. A key that finds another key's
//! recent stamp in its slot is taken as cold and leaves the slot to that key,
//! which keeps it until its stamp is a lease life old or it turns warm (and
//! releases it: a key with lease state is routed by that, not by the
//! sketch): keys sharing a slot never size a lease from each other's times,
//! and each is told warm on its own checks. So at 100,000 keys each checked every few seconds
//! hybrid makes the same call per check as the `redis` backend, and at 1,000
//! keys checked many times a lease's life every key is warm.
//!
//! # Leases and time
//! A bucket lease expires [`HybridConfig::lease_ttl`] after it was asked for. A
//! window lease expires with the window Redis charged it to (whatever the TTL),
//! translated to the local monotonic clock conservatively: the
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
//! # Lease size
//! A key's leases are sized from its own history in this process, so that a
//! key seen a few times a second (or a window) costs about one round trip per
//! lease life, not one per check:
//!
//! * its **rate** `λ` is the units it spent from its last lease over the time
//!   that lease lasted (until the next lease, or until it expired when the
//!   next check came less than a lease's life after that: a key that keeps
//!   checking is not read slow by the gap after an expiry), averaged over
//!   about [`HybridConfig::horizon`] (each sample weighs
//!   `1 − e^(−elapsed/horizon)`);
//! * a **bucket** lease asks for the check's `n` plus `⌈1.25·λ·L⌉ − 1` more
//!   (`L` = [`HybridConfig::lease_ttl`]): what the key is expected to spend
//!   before the lease expires, with a quarter more for a wavering rate, so a
//!   key at a steady rate makes one round trip per `L` (the floor), whatever
//!   its rate, and not one and a bit (a lease sized at the mean runs out early
//!   about half the time). So a key checked `λ` times a second has at most
//!   about `1 − 1/(λ·L + 1)` of its checks answered locally: 90.9 % at 20 a
//!   second with the default `L`;
//! * a **window** lease asks for `n` plus `⌈1.25·λ·(time left in the
//!   window)⌉ − 1`: taken at a window's start, the key's expected demand in
//!   the window with a quarter more for a wavering rate, and it expires with
//!   the window (a unit of a window can only be spent in it);
//! * a key's first lease is `n` (no rate known yet), and every lease is at
//!   most [`HybridConfig::max_batch`] (the capacity by default), at least `n`;
//! * and at least the units of the checks waiting for the key's flight: a key
//!   new or gone quiet (no useful rate) that many checks ask at once makes one
//!   round trip for them, not one each in turn.
//!
//! A lease can only ever hold units Redis had: near a key's limit the script
//! grants what is left (maybe fewer than asked), and with nothing left it
//! denies, and the denial is cached (the negative cache above).
//!
//! # Accuracy bound
//! Every admitted unit was charged on Redis, by the script that decides a plain
//! check, before it was admitted (when it was leased, or by a cold key's plain
//! check itself, which is the `redis` backend's exact decision); the front
//! limiter and the negative cache only deny. The bounds below hold **for the whole fleet** (all
//! processes sharing the Redis key together), per key; over-admission, per
//! algorithm:
//!
//! * **Token bucket, leaky bucket** (rate `r` per period `P`, burst `b`): the
//!   bucket in Redis charges at most `b + r·Δ/P` over any interval `Δ`: **the
//!   global quota is never exceeded** in units charged. A leased unit is spent at
//!   most [`HybridConfig::lease_ttl`] (`L`) after it was charged, and dropped
//!   unspent after that, so the fleet admits over any interval of length `Δ`
//!   at most `b + r·(Δ + L)/P`; and since each of `N` processes holds at most
//!   one lease of at most `m` = [`HybridConfig::max_batch`] units per key, at
//!   most `b + r·Δ/P + N·m`: so at most `b + r·Δ/P + min(r·L/P, N·m)`.
//! * **Fixed window** (limit `l`): a unit charged to window `k` is spent within
//!   window `k` (in Redis time), so the fleet admits in window `k` at most what
//!   the script charged to it: **at most `l` per window, exactly the script's
//!   bound, no slack**, whatever the lease settings.
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
//! holds at most `max_batch` unspent units of a key at any moment, so the fleet
//! may deny while up to `N·max_batch` units sit in other processes' leases, and
//! each lease that expires unspent loses at most `max_batch` (the lease size
//! keeps it to what the key's own rate spends before the lease expires).

mod batch;
mod front;
mod keys;
mod lease;

use core::sync::atomic::Ordering;
use core::time::Duration;
use std::sync::Arc;
use std::time::Instant;

use sluicegate::{Decision, InsufficientCapacity};

use crate::error::{ConfigError, Error};
use crate::limiter::RedisLimiter;
use crate::verdict::{Source, Verdict};

use batch::Batch;
use front::Front;
use keys::{Counters, KeyMap, Last, Seen, SEEN_SPAN_MAX};
use lease::{nanos, UNITS};

/// Settings of a [`HybridLimiter`].
///
/// ```
/// use sluicegate_redis::HybridConfig;
/// let c = HybridConfig::default();
/// assert_eq!(c.horizon.as_millis(), 1000);
/// assert_eq!(c.lease_ttl.as_millis(), 500);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HybridConfig {
    /// How far back a key's own rate is averaged (about this long), the rate
    /// that sizes its leases (see the module docs' "Lease size"). Shorter
    /// follows a change of rate sooner; longer rides out bursts.
    pub horizon: Duration,
    /// Bucket leases: units not spent within this long are dropped (the `L` of
    /// the bound, `b + r·(Δ + L)`), and a lease is sized for the key's demand
    /// over it, so a key at a steady rate makes at most one round trip per TTL.
    /// Window leases ignore it: they are sized for the key's demand in the
    /// window and end with it.
    pub lease_ttl: Duration,
    /// The largest lease; `None`: the burst or window limit. At most
    /// `2^32 − 1`. It bounds what one process holds of a key (`N·max_batch`
    /// for `N` processes: see the bound).
    pub max_batch: Option<u64>,
    /// Keys whose lease state is kept (at least 1); past it, idle keys are dropped.
    pub max_keys: usize,
}

impl Default for HybridConfig {
    fn default() -> Self {
        Self {
            horizon: Duration::from_secs(1),
            lease_ttl: Duration::from_millis(500),
            max_batch: None,
            max_keys: 100_000,
        }
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

/// A token-bucket, leaky-bucket, fixed-window or sliding-window [`RedisLimiter`]
/// with a local tier in front: see the [module docs](self) for the bound. Cheap
/// to clone.
///
/// ```no_run
/// # async fn f() -> Result<(), sluicegate_redis::Error> {
/// use sluicegate_redis::*;
/// let limit = Limit::parse("token_bucket", "1000/second")?;
/// let rl = RedisLimiter::new(Backend::from_url("redis://127.0.0.1:6379")?, "api", limit, Config::default())?;
/// let h = HybridLimiter::new(rl, HybridConfig::default())?;
/// for _ in 0..100 {
///     assert!(h.check("user:1").await?.decision.allowed);
/// }
/// // Most of those were spent from a lease, without a round trip.
/// assert!(h.stats().local > 50);
///
/// // A window: at most 600 a minute fleet-wide, leased and spent locally too.
/// let limit = Limit::parse("sliding_window", "600/minute")?;
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
    /// Lease refreshes gathered into one pipeline.
    batch: Batch,
    /// When keys without lease state were last checked.
    seen: Seen,
    /// A key checked again within this long is warm (ns): a bucket's lease
    /// TTL, a window's length.
    warm_span: u64,
    /// Windows: Redis time minus local time at the last reply (ns, as a
    /// lease's offset; 0: none yet). It places a warm key's first lease in
    /// its window (its size: the demand until the window's end).
    redis_offset: core::sync::atomic::AtomicU64,
}

impl HybridInner {
    /// Records a reply's Redis-time offset (windows).
    fn note_offset(&self, offset: u64) {
        // Stored when it moved by over a millisecond (it only places a first
        // lease in its window): no shared write on every reply.
        if self.window_ns != 0
            && self.redis_offset.load(Ordering::Relaxed).abs_diff(offset) > 1_000_000
        {
            self.redis_offset.store(offset, Ordering::Relaxed);
        }
    }

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
    /// [`Error::Config`]).
    ///
    /// ```
    /// # use sluicegate_redis::*;
    /// let url = || Backend::from_url("redis://127.0.0.1:1").unwrap();
    /// let window = Limit::parse("fixed_window", "10/s").unwrap();
    /// let rl = RedisLimiter::new(url(), "x", window, Config::default()).unwrap();
    /// assert!(HybridLimiter::new(rl, HybridConfig::default()).is_ok());
    /// let spec = sluicegate::Spec::parse(sluicegate::Kind::Shaper, "10/s").unwrap();
    /// let limit = Limit::from_spec(&spec.with_max_delay_ns(5_000_000).unwrap()).unwrap();
    /// let rl = RedisLimiter::new(url(), "x", limit, Config::default()).unwrap();
    /// assert!(HybridLimiter::new(rl, HybridConfig::default()).is_err());
    /// ```
    pub fn new(remote: RedisLimiter, cfg: HybridConfig) -> Result<Self, Error> {
        let limit = *remote.limit();
        if !limit.leasable() {
            return Err(Error::Config(ConfigError::new(
                "spec",
                "hybrid mode leases bucket or window units; a shaper's come with delays",
            )));
        }
        let capacity = limit.capacity();
        let max_batch = cfg
            .max_batch
            .unwrap_or(capacity)
            .clamp(1, capacity.clamp(1, UNITS));
        let slots = cfg.max_keys.clamp(16, 1 << 24);
        Ok(Self {
            inner: Arc::new(HybridInner {
                front: Front::new(&limit, slots)?,
                window_ns: limit.params.window_ns,
                remote,
                cfg,
                max_batch,
                keys: KeyMap::new(cfg.max_keys),
                epoch: Instant::now(),
                counters: Counters(Default::default()),
                batch: Batch::default(),
                seen: Seen::new(cfg.max_keys / 2),
                warm_span: if limit.params.window_ns == 0 {
                    nanos(cfg.lease_ttl)
                } else {
                    limit.params.window_ns
                }
                .min(SEEN_SPAN_MAX),
                redis_offset: Default::default(),
            }),
        })
    }

    /// The constructor a factory calls for `backend = "hybrid"`: see
    /// [`RedisLimiter::from_spec`] (the URL, the spec, the settings with the
    /// failure policy) and [`HybridConfig`].
    ///
    /// ```
    /// use sluicegate::{Kind, Spec};
    /// use sluicegate_redis::{Config, HybridConfig, HybridLimiter};
    /// let spec = Spec::parse(Kind::TokenBucket, "1000/second").unwrap();
    /// let cfg = Config { policy: "local".parse().unwrap(), ..Config::default() };
    /// let h = HybridLimiter::from_spec("redis://127.0.0.1:6379", "api", &spec, cfg, HybridConfig::default()).unwrap();
    /// assert_eq!(h.max_batch(), 1000); // the burst
    /// let shaper = Spec::parse(Kind::Shaper, "10/s").unwrap().with_max_delay_ns(1_000_000).unwrap();
    /// assert!(HybridLimiter::from_spec("redis://127.0.0.1:6379", "s", &shaper, Config::default(), HybridConfig::default()).is_err());
    /// ```
    pub fn from_spec(
        url: &str,
        name: &str,
        spec: &sluicegate::Spec,
        cfg: crate::Config,
        hybrid: HybridConfig,
    ) -> Result<Self, Error> {
        Self::new(RedisLimiter::from_spec(url, name, spec, cfg)?, hybrid)
    }

    /// The counters so far.
    ///
    /// ```
    /// # use sluicegate_redis::*;
    /// # let limit = Limit::parse("token_bucket", "10/s").unwrap();
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
    /// # use sluicegate_redis::*;
    /// # use sluicegate::{Kind, Quota};
    /// # let limit = Limit::from_quota(Kind::TokenBucket, Quota::per_second(10).burst(50)).unwrap();
    /// # let rl = RedisLimiter::new(Backend::from_url("redis://127.0.0.1:1").unwrap(), "x", limit, Config::default()).unwrap();
    /// let h = HybridLimiter::new(rl, HybridConfig::default()).unwrap();
    /// assert_eq!(h.max_batch(), 50); // the burst
    /// ```
    pub fn max_batch(&self) -> u64 {
        self.inner.max_batch
    }

    /// How many keys' lease state is held now (at most [`HybridConfig::max_keys`]).
    ///
    /// ```
    /// # use sluicegate_redis::*;
    /// # let limit = Limit::parse("fixed_window", "10/s").unwrap();
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
    /// # use sluicegate_redis::*;
    /// # let limit = Limit::parse("token_bucket", "10/s").unwrap();
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

    /// The part of [`Self::check_n`] decided in this process, without waiting:
    /// `n` units spent from the key's lease ([`Source::Lease`]), or denied by the
    /// front limiter ([`Source::LocalDenial`]); `None` when only Redis can
    /// decide (or for `n = 0`, a peek at Redis). A cost above the capacity is an
    /// error, as for `check_n`. What the blocking API calls first, so a check
    /// answered locally never enters a runtime.
    ///
    /// ```
    /// # use sluicegate_redis::*;
    /// let limit = Limit::parse("token_bucket", "100/s").unwrap();
    /// let rl = RedisLimiter::new(Backend::from_url("redis://127.0.0.1:1").unwrap(), "x", limit, Config::default()).unwrap();
    /// let h = HybridLimiter::new(rl, HybridConfig::default()).unwrap();
    /// assert!(h.check_local("k", 1).unwrap().is_none()); // no lease yet
    /// assert!(h.check_local("k", 101).is_err());
    /// ```
    pub fn check_local(&self, key: &str, n: u64) -> Result<Option<Verdict>, Error> {
        let inner = &*self.inner;
        let limit = inner.remote.limit().capacity();
        if n > limit {
            return Err(Error::Capacity(InsufficientCapacity {
                requested: n,
                capacity: limit,
            }));
        }
        if n == 0 {
            return Ok(None);
        }
        // A key without lease state is cold: its units are not in the front.
        let offset = match inner.keys.with(key, |e| {
            (
                self.local(e, key, n, limit),
                e.offset.load(Ordering::Acquire),
            )
        }) {
            Some((Some(v), _)) => return Ok(Some(v)),
            Some((None, offset)) => offset,
            None => return Ok(None),
        };
        let Some(front) = self.front_denial(key, n, offset)? else {
            return Ok(None);
        };
        inner.counters.local();
        Ok(Some(Verdict {
            decision: front,
            source: Source::LocalDenial,
            delay_ns: 0,
        }))
    }

    /// The front limiter's denial of `n` units for `key`, if it denies. It only
    /// ever sees admitted units (it is charged when a lease admits), so it
    /// denies only when this process alone has used the whole quota: a denial
    /// Redis would give, without asking. A window's front runs on Redis time (local time +
    /// `offset`), known after the key's first lease.
    fn front_denial(&self, key: &str, n: u64, offset: u64) -> Result<Option<Decision>, Error> {
        let inner = &*self.inner;
        if inner.window_ns != 0 && offset == 0 {
            return Ok(None);
        }
        let at = inner.now().saturating_add(offset);
        let front = inner.front.peek(key, n, at).map_err(Error::Capacity)?;
        Ok((!front.allowed).then_some(front))
    }

    /// Whether [`Self::check_local`] would answer `n` units for `key` now, spending
    /// nothing: units left in the key's lease, a cached or front denial, or a cost
    /// above the capacity (an error, answered at once). A caller that must not
    /// wait for Redis (an async server's worker thread) asks this first and hands
    /// the check to a thread that may block when it says `false`. Another thread
    /// can spend the lease in between, so a check after `true` waits for a round
    /// trip on rare occasions.
    ///
    /// ```
    /// # use sluicegate_redis::*;
    /// let limit = Limit::parse("token_bucket", "100/s").unwrap();
    /// let rl = RedisLimiter::new(Backend::from_url("redis://127.0.0.1:1").unwrap(), "x", limit, Config::default()).unwrap();
    /// let h = HybridLimiter::new(rl, HybridConfig::default()).unwrap();
    /// assert!(!h.answers_locally("k", 1)); // no lease yet
    /// assert!(h.answers_locally("k", 101)); // above the capacity: an error at once
    /// ```
    pub fn answers_locally(&self, key: &str, n: u64) -> bool {
        let inner = &*self.inner;
        if n == 0 {
            return false;
        }
        if n > inner.remote.limit().capacity() {
            return true;
        }
        let offset = match inner.keys.with(key, |e| {
            (self.local_ready(e, n), e.offset.load(Ordering::Acquire))
        }) {
            Some((true, _)) => return true,
            Some((false, offset)) => offset,
            None => return false,
        };
        matches!(self.front_denial(key, n, offset), Ok(Some(_)))
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
        if n != 0 {
            if let Some(v) = self.check_local(key, n)? {
                return Ok(v);
            }
        }
        self.check_n_remote(key, n).await
    }

    /// The rest of [`Self::check_n`], for a caller that has just had `None`
    /// from [`Self::check_local`] (an async caller that checks locally on its
    /// own thread and hands only what needs Redis to the limiter's runtime):
    /// a cold key's plain check, or a warm key's lease (whose flight first
    /// looks at the lease again: another check may have leased meanwhile).
    ///
    /// ```no_run
    /// # async fn f(h: sluicegate_redis::HybridLimiter) -> Result<(), sluicegate_redis::Error> {
    /// let v = match h.check_local("k", 1)? {
    ///     Some(v) => v,
    ///     None => h.check_n_remote("k", 1).await?,
    /// };
    /// assert!(v.decision.limit > 0);
    /// # Ok(()) }
    /// ```
    pub async fn check_n_remote(&self, key: &str, n: u64) -> Result<Verdict, Error> {
        if n == 0 {
            self.inner.counters.round_trip();
            return self.inner.remote.peek_n(key, 0).await;
        }
        self.check_routed(key, n, self.route(key)).await
    }

    /// Where a check that [`Self::check_local`] could not answer goes (see the
    /// module docs' "Cold keys"); records that `key` was checked.
    pub(crate) fn route(&self, key: &str) -> Route {
        let inner = &*self.inner;
        let now = inner.now();
        // A key with lease state keeps to the lease path: its own history
        // sizes its leases (a key of a flood that went quiet between floods
        // is not made cold by the gap).
        if inner.keys.with(key, |_| ()).is_some() {
            return Route::Lease { seen: None };
        }
        match inner.seen.touch(key, now, inner.warm_span) {
            Last::This(at) => {
                // Warm: its lease state routes it from now on.
                inner.seen.release(key);
                Route::Lease { seen: Some(at) }
            }
            // A slot another key stamped: not known to be warm, so cold.
            Last::Cold | Last::Other => Route::Direct { t0: now },
        }
    }

    /// [`Self::check_n_remote`] past its route.
    pub(crate) async fn check_routed(
        &self,
        key: &str,
        n: u64,
        route: Route,
    ) -> Result<Verdict, Error> {
        let inner = &*self.inner;
        let seen = match route {
            Route::Direct { t0 } => {
                self.counted_round_trip();
                let r = inner.remote.try_check_n(key, n).await;
                return self.direct_answer(key, n, t0, r);
            }
            Route::Lease { seen } => seen,
        };
        let limit = inner.remote.limit().capacity();
        let entry = inner.keys.entry(key, inner.now());
        let Some(_flight) = self.join_flight(&entry, key, n).await else {
            inner.counters.round_trip();
            return Ok(inner.remote.policy(key, n, true));
        };
        // Another task may have leased while this one waited.
        if let Some(v) = self.local(&entry, key, n, limit) {
            return Ok(v);
        }
        if let Some(at) = seen {
            entry.seed(at, inner.now());
        }
        self.lease(&entry, key, n).await
    }

    /// Counts a round trip.
    pub(crate) fn counted_round_trip(&self) {
        self.inner.counters.round_trip();
    }

    /// A cold key's plain check's reply (the call sent at `t0`) as the
    /// answer, a denial cached as a lease's is (the key is then warm: a key
    /// denied is likely checked again soon, and those checks are answered
    /// locally until the denial's `retry_after`, which Redis computed at or
    /// after `t0`). Its admitted units are not charged to the front: see the
    /// module docs' "Cold keys".
    pub(crate) fn direct_answer(
        &self,
        key: &str,
        n: u64,
        t0: u64,
        r: Result<crate::limit::Reply, Error>,
    ) -> Result<Verdict, Error> {
        let inner = &*self.inner;
        if let Ok(reply) = &r {
            inner.note_offset(lease::redis_offset(t0, reply));
            if !reply.decision.allowed && reply.decision.retry_after_ns > 0 {
                let e = inner.keys.entry(key, t0);
                // The denial fields are the flight's to write: skipped while
                // another check of the key leases (its answer is newer).
                if let Ok(_flight) = e.flight.try_lock() {
                    e.deny_cost.store(n, Ordering::Relaxed);
                    e.deny_until.store(
                        t0.saturating_add(reply.decision.retry_after_ns),
                        Ordering::Release,
                    );
                };
            }
        }
        inner.remote.answer(key, n, true, r)
    }
}

/// Where a check goes when [`HybridLimiter::check_local`] could not answer it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Route {
    /// A cold key: one plain check, as the `redis` backend makes; no lease
    /// state is kept for it. `t0`: when it was routed, before the call is
    /// sent (a denial is cached from then).
    Direct { t0: u64 },
    /// A warm key: its lease (`seen`: when a cold key was last checked, the
    /// first sample of its rate).
    Lease { seen: Option<u64> },
}
