//! Hybrid mode: a local lock-free limiter in front, tokens leased from Redis in
//! batches and spent locally, and a local negative cache after a denial.
//!
//! # How a check runs
//! 1. The **negative cache**: after Redis denied the key, checks are denied
//!    locally until that denial's `retry_after` has passed.
//! 2. The **front limiter** (a `sluicegate` keyed token bucket at the full quota,
//!    lock-free, charged only with admitted units) denies what this process alone
//!    has already used up: no round trip.
//! 3. The **lease**: units Redis already charged to this process are taken with
//!    one compare-and-swap: no round trip.
//! 4. Otherwise one task per key (single flight: concurrent checks of the key wait
//!    for it) leases a batch with the lease script, which charges up to the batch
//!    size from the global bucket in one call.
//!
//! A key's lease state is found in a map under a read lock (readers do not block
//! one another; the write lock is taken once per new key); spending from the
//! lease is one compare-and-swap.
//!
//! # Batch size
//! Sized from the local rate: the units this process spent since its last lease,
//! over the time since, times [`HybridConfig::horizon`], clamped to
//! `1..=max_batch`. When the global bucket has less than two batches left the
//! leases drop to single units, so the last units go to whichever process asks
//! first, not to whichever leased last.
//!
//! # Accuracy bound
//! Every admitted unit was charged on Redis when it was leased, and the global
//! bucket admits at most `b + r·Δ/P` over any interval `Δ`: **the global quota is
//! never exceeded** in units charged. A leased unit is spent at most
//! [`HybridConfig::lease_ttl`] (`L`) after it was charged, and dropped unspent
//! after that, so admissions over any interval of length `Δ` across the fleet are
//! at most `b + r·(Δ + L)/P`. The other way, each of `N` processes holds at most
//! `max_batch` unspent units at any moment, so the fleet may deny while up to
//! `N·max_batch` units sit in other processes' leases (under-admission, never
//! over-admission), and each lease that expires unspent loses at most `max_batch`.

use core::sync::atomic::{AtomicU64, Ordering};
use core::time::Duration;
use std::collections::HashMap;
use std::sync::{Arc, RwLock};
use std::time::Instant;

use sluicegate::keyed::{DefaultHashBuilder, Group, Keyed};
use sluicegate::{Decision, DefaultClock, Gcra};

use crate::error::Error;
use crate::limit::ScriptKind;
use crate::limiter::{RedisLimiter, Source, Verdict};

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
    /// Leased units not spent within this long are dropped (the `L` of the bound).
    pub lease_ttl: Duration,
    /// The largest lease; `None`: a tenth of the burst (at least 1).
    pub max_batch: Option<u64>,
    /// Keys whose lease state is kept; past it, idle keys are dropped.
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

#[derive(Debug, Default)]
struct Entry {
    /// Leased units not yet spent.
    tokens: AtomicU64,
    /// When the lease's units expire (ns on the limiter's monotonic clock).
    expires: AtomicU64,
    /// Deny locally until then (the negative cache).
    deny_until: AtomicU64,
    /// When the last lease was taken, and the units spent since.
    last_lease: AtomicU64,
    spent: AtomicU64,
    /// Whether Redis has little left: lease single units.
    scarce: AtomicU64,
    lease: tokio::sync::Mutex<()>,
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

/// A token-bucket [`RedisLimiter`] with a local tier in front: see the
/// [module docs](self) for the bound. Cheap to clone.
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
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct HybridLimiter {
    inner: Arc<HybridInner>,
}

struct HybridInner {
    remote: RedisLimiter,
    front: Keyed<Gcra, DefaultClock, Box<[Group]>, DefaultHashBuilder>,
    cfg: HybridConfig,
    max_batch: u64,
    entries: RwLock<HashMap<String, Arc<Entry>>>,
    epoch: Instant,
    local: AtomicU64,
    round_trips: AtomicU64,
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
    /// Puts a local tier in front of `remote`, which must be a token bucket or a
    /// leaky bucket (the lease script is GCRA's).
    ///
    /// ```
    /// # use sluicegate::Quota;
    /// # use sluicegate_redis::*;
    /// let limit = Limit::new(Algorithm::FixedWindow, Quota::per_second(10)).unwrap();
    /// let rl = RedisLimiter::new(Backend::from_url("redis://127.0.0.1:1").unwrap(), "x", limit, Config::default()).unwrap();
    /// assert!(HybridLimiter::new(rl, HybridConfig::default()).is_err());
    /// ```
    pub fn new(remote: RedisLimiter, cfg: HybridConfig) -> Result<Self, Error> {
        let limit = *remote.limit();
        if limit.script != ScriptKind::Gcra || limit.slack_us != 0 {
            return Err(Error::Resolution {
                field: "algorithm",
                reason: "hybrid mode leases token-bucket or leaky-bucket units",
            });
        }
        let capacity = limit.capacity();
        let max_batch = cfg.max_batch.unwrap_or(capacity / 10).clamp(1, capacity);
        let front =
            Keyed::new(limit.quota(), cfg.max_keys.clamp(16, 1 << 24)).map_err(Error::Config)?;
        Ok(Self {
            inner: Arc::new(HybridInner {
                remote,
                front,
                cfg,
                max_batch,
                entries: RwLock::new(HashMap::new()),
                epoch: Instant::now(),
                local: AtomicU64::new(0),
                round_trips: AtomicU64::new(0),
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
        HybridStats {
            local: self.inner.local.load(Ordering::Relaxed),
            round_trips: self.inner.round_trips.load(Ordering::Relaxed),
        }
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
        let inner = &self.inner;
        let limit = inner.remote.limit().capacity();
        if n > limit {
            return Err(Error::Capacity(sluicegate::InsufficientCapacity {
                requested: n,
                capacity: limit,
            }));
        }
        if n == 0 {
            inner.round_trips.fetch_add(1, Ordering::Relaxed);
            return inner.remote.peek_n(key, 0).await;
        }
        let entry = self.entry(key);
        if let Some(v) = self.local(&entry, n, limit) {
            return Ok(self.counted_local(key, n, v));
        }
        // The front limiter only ever sees admitted units (it is charged below, on
        // admission), so it denies exactly when this process alone has used the
        // whole global quota: a denial Redis would give, without asking.
        let front = inner.front.peek_n(key, n).map_err(Error::Capacity)?;
        if !front.allowed {
            inner.local.fetch_add(1, Ordering::Relaxed);
            return Ok(Verdict {
                decision: front,
                source: Source::LocalDenial,
                delay_ns: 0,
            });
        }
        let _flight = entry.lease.lock().await;
        // Another task may have leased while this one waited.
        if let Some(v) = self.local(&entry, n, limit) {
            return Ok(self.counted_local(key, n, v));
        }
        inner.round_trips.fetch_add(1, Ordering::Relaxed);
        let now = self.now();
        let batch = self.batch_size(&entry, now).max(n);
        match inner.remote.try_lease(key, batch).await {
            Ok(r) if r.decision.allowed && r.granted >= n => {
                let left = r.granted - n;
                entry.tokens.store(left, Ordering::Release);
                entry.expires.store(
                    now.saturating_add(nanos(inner.cfg.lease_ttl)),
                    Ordering::Release,
                );
                entry.last_lease.store(now, Ordering::Relaxed);
                entry.spent.store(n, Ordering::Relaxed);
                let scarce = r.decision.remaining < 2 * self.inner.max_batch;
                entry.scarce.store(u64::from(scarce), Ordering::Relaxed);
                let _ = inner.front.check_n(key, n);
                Ok(Verdict {
                    decision: Decision {
                        remaining: r.decision.remaining + left,
                        ..r.decision
                    },
                    source: Source::Redis,
                    delay_ns: 0,
                })
            }
            Ok(r) => {
                // Denied (or granted fewer than n: those are kept for later).
                if r.granted > 0 {
                    entry.tokens.store(r.granted, Ordering::Release);
                    entry.expires.store(
                        now.saturating_add(nanos(inner.cfg.lease_ttl)),
                        Ordering::Release,
                    );
                }
                let retry = if r.decision.allowed {
                    (n - r.granted)
                        .saturating_mul(inner.remote.limit().emission_interval_us() * 1000)
                } else {
                    r.decision.retry_after_ns
                };
                entry
                    .deny_until
                    .store(now.saturating_add(retry), Ordering::Release);
                entry.scarce.store(1, Ordering::Relaxed);
                Ok(Verdict {
                    decision: Decision {
                        allowed: false,
                        retry_after_ns: retry,
                        ..r.decision
                    },
                    source: Source::Redis,
                    delay_ns: 0,
                })
            }
            Err(Error::Capacity(e)) => Err(Error::Capacity(e)),
            Err(_) => Ok(inner.remote.policy(key, n, true)),
        }
    }

    fn counted_local(&self, key: &str, n: u64, v: Verdict) -> Verdict {
        self.inner.local.fetch_add(1, Ordering::Relaxed);
        if v.decision.allowed {
            let _ = self.inner.front.check_n(key, n);
        }
        v
    }

    /// A decision without a round trip, if there is one: the negative cache, or
    /// units from the lease.
    fn local(&self, e: &Entry, n: u64, limit: u64) -> Option<Verdict> {
        let now = self.now();
        let deny_until = e.deny_until.load(Ordering::Acquire);
        if now < deny_until {
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
        if now >= e.expires.load(Ordering::Acquire) {
            return None;
        }
        let took = e
            .tokens
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |t| t.checked_sub(n));
        match took {
            Ok(before) => {
                e.spent.fetch_add(n, Ordering::Relaxed);
                Some(Verdict {
                    decision: Decision {
                        allowed: true,
                        remaining: before - n,
                        retry_after_ns: 0,
                        reset_after_ns: 0,
                        limit,
                    },
                    source: Source::Lease,
                    delay_ns: 0,
                })
            }
            Err(_) => None,
        }
    }

    fn batch_size(&self, e: &Entry, now: u64) -> u64 {
        let max = self.inner.max_batch;
        if e.scarce.load(Ordering::Relaxed) != 0 {
            return 1;
        }
        let last = e.last_lease.load(Ordering::Relaxed);
        if last == 0 {
            return 1; // no rate known yet: start small
        }
        let spent = e.spent.load(Ordering::Relaxed) as u128;
        let elapsed = now.saturating_sub(last).max(1) as u128;
        let want = spent * nanos(self.inner.cfg.horizon) as u128 / elapsed;
        (want.min(max as u128) as u64).max(1)
    }

    fn entry(&self, key: &str) -> Arc<Entry> {
        if let Ok(m) = self.inner.entries.read() {
            if let Some(e) = m.get(key) {
                return Arc::clone(e);
            }
        }
        let now = self.now();
        let Ok(mut m) = self.inner.entries.write() else {
            return Arc::new(Entry::default());
        };
        if m.len() >= self.inner.cfg.max_keys {
            // Drop keys with nothing leased and no denial pending.
            m.retain(|_, e| {
                Arc::strong_count(e) > 1
                    || (e.tokens.load(Ordering::Relaxed) > 0
                        && now < e.expires.load(Ordering::Relaxed))
                    || now < e.deny_until.load(Ordering::Relaxed)
            });
        }
        Arc::clone(m.entry(key.to_owned()).or_default())
    }

    fn now(&self) -> u64 {
        u64::try_from(self.inner.epoch.elapsed().as_nanos())
            .unwrap_or(u64::MAX)
            .max(1)
    }
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}
