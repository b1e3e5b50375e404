//! The Redis-backed limiter: one [`Limit`] over many keys, async. The rooms it
//! uses: [`crate::link`] (connection, cluster map, breakers), `coalesce` (per-key
//! flights), `pipeline` (batches).

use core::time::Duration;
use std::sync::Arc;

use sluicegate::{Decision, InsufficientCapacity, Spec};

use crate::breaker::BreakerConfig;
use crate::conn::{Backend, Conn};
use crate::error::{ConfigError, Error};
use crate::limit::{Limit, Mode, Reply};
use crate::link::Link;
use crate::policy::{FailurePolicy, Fallback};
use crate::script::Scripts;
use crate::verdict::{Counters, RedisStats, Source, Verdict};

/// Settings of a [`RedisLimiter`].
///
/// ```
/// use sluicegate_redis::{Config, FailurePolicy};
/// let c = Config { policy: FailurePolicy::Closed, ..Config::default() };
/// assert_eq!(c.timeout.as_millis(), 25);
/// assert_eq!(c.prefix, "sluicegate:");
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Config {
    /// Put before every key. Must not contain `{` (the key's hash tag follows it).
    pub prefix: String,
    /// The longest one call to Redis may take; past it the call counts as failed,
    /// is never replayed, and the failure policy answers. A batch
    /// ([`RedisLimiter::check_many`]) is sent in pipelines of at most
    /// [`Config::pipeline_max`] calls, each with this timeout.
    pub timeout: Duration,
    /// The longest (re)connecting may take.
    pub connect_timeout: Duration,
    /// When to stop asking a failing Redis, and for how long.
    pub breaker: BreakerConfig,
    /// What to answer while Redis is unavailable.
    pub policy: FailurePolicy,
    /// Keys the local fallback table holds (bounded memory, see `sluicegate::keyed`).
    pub fallback_keys: usize,
    /// Per-key coalescing of concurrent consuming checks (`check`, `check_n`,
    /// `try_check_n`); `None` (the default): off, one script call per check.
    /// `Some(window)`: the first check of a key opens a flight, checks of that key
    /// arriving within `window` join it, and the flight is one script run that
    /// decides their costs one after another in arrival order, each exactly as a
    /// single call would (the multi-cost form of the script, see
    /// [`crate::script::multi_source`]); each caller gets its own decision. A check
    /// arriving once its key's flight has been sent opens the next one. A check
    /// then waits up to `window` more (`Duration::ZERO`: one yield to the
    /// runtime). A failed flight fails each of its checks over to the policy.
    pub coalesce: Option<Duration>,
    /// The most script calls in one pipeline of a batch (at least 1; 128 by
    /// default): a larger batch is sent as several pipelines one after another,
    /// each under [`Config::timeout`] plus one more timeout per 128 calls, so a
    /// batch of any size is answered by a healthy Redis.
    pub pipeline_max: usize,
    /// The most connections of the blocking API's own pool (8 by default; see
    /// [`crate::blocking`]): a blocking call takes an idle one, or opens one
    /// while there are fewer, and writes and reads it on the calling thread;
    /// with every one in use it goes through the multiplexed connection (driven
    /// by the limiter's runtime, pipelined with the others). Opened as
    /// concurrent callers need them, kept open. `0`: every blocking call goes
    /// through the multiplexed connection (one socket per limiter). Ignored on
    /// a cluster (no pool) and by the async API.
    pub blocking_connections: usize,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            prefix: "sluicegate:".to_owned(),
            timeout: Duration::from_millis(25),
            connect_timeout: Duration::from_millis(50),
            breaker: BreakerConfig::default(),
            policy: FailurePolicy::default(),
            fallback_keys: 10_000,
            coalesce: None,
            pipeline_max: 128,
            blocking_connections: 8,
        }
    }
}

pub(crate) struct Inner {
    pub(crate) link: Arc<Link>,
    pub(crate) limit: Limit,
    name: String,
    pub(crate) cfg: Config,
    pub(crate) scripts: Scripts,
    fallback: Option<Fallback>,
    pub(crate) counters: Counters,
    /// Open coalescing flights: the costs (in arrival order) and where each
    /// decision goes.
    pub(crate) flights: std::sync::Mutex<std::collections::HashMap<String, Flight>>,
}

pub(crate) type Flight = Vec<(u64, tokio::sync::oneshot::Sender<Result<Reply, Error>>)>;

/// A distributed limiter: one [`Limit`] named `name`, applied per key, its state in
/// Redis. Cheap to clone (clones share the connection, breaker and fallback).
///
/// Each check is one script call (`EVALSHA`) on one key; concurrent checks from
/// many tasks share one multiplexed connection and are pipelined on it. With
/// [`Config::coalesce`], concurrent checks of one key become one script run that
/// decides them one after another.
///
/// ```no_run
/// # async fn demo() -> Result<(), sluicegate_redis::Error> {
/// use sluicegate::{Kind, Quota};
/// use sluicegate_redis::{Backend, Config, Limit, RedisLimiter};
///
/// let limit = Limit::from_quota(Kind::TokenBucket, Quota::per_second(10).burst(2))?;
/// let rl = RedisLimiter::new(Backend::from_url("redis://127.0.0.1:6379")?, "api", limit, Config::default())?;
/// rl.connect().await?; // a wrong address or password shows here, not later
/// assert!(rl.check("user:42").await?.decision.allowed);
/// assert!(rl.check("user:42").await?.decision.allowed);
/// // The burst of 2 is spent (within 100 ms): the third is denied, with a retry hint.
/// let d = rl.check("user:42").await?.decision;
/// assert!(!d.allowed && d.retry_after_ns > 0);
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct RedisLimiter {
    pub(crate) inner: Arc<Inner>,
}

impl core::fmt::Debug for RedisLimiter {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("RedisLimiter")
            .field("backend", &self.inner.link.backend)
            .field("name", &self.inner.name)
            .field("limit", &self.inner.limit)
            .finish_non_exhaustive()
    }
}

impl RedisLimiter {
    /// A limiter named `name` (part of every key) on `backend`. Checks the
    /// addresses, the names and the policy now; connects lazily, on the first
    /// check, or at once with [`Self::connect`].
    ///
    /// ```
    /// # use sluicegate::{Kind, Quota};
    /// # use sluicegate_redis::*;
    /// let limit = Limit::from_quota(Kind::FixedWindow, Quota::per_minute(60)).unwrap();
    /// let bad = Config { prefix: "a{b".into(), ..Config::default() };
    /// assert!(RedisLimiter::new(Backend::from_url("redis://127.0.0.1:1").unwrap(), "x", limit, bad).is_err());
    /// let port = Backend::Standalone("redis://127.0.0.1:99999".into());
    /// assert!(RedisLimiter::new(port, "x", limit, Config::default()).is_err());
    /// ```
    pub fn new(backend: Backend, name: &str, limit: Limit, cfg: Config) -> Result<Self, Error> {
        backend.validate()?;
        if cfg.prefix.contains('{') || name.contains('{') {
            return Err(Error::Config(ConfigError::new(
                "name",
                "prefix and name must not contain '{' (the key's hash tag follows them)",
            )));
        }
        let fallback = match cfg.policy {
            FailurePolicy::Local { share_percent } => {
                Some(Fallback::new(&limit, share_percent, cfg.fallback_keys)?)
            }
            _ => None,
        };
        Ok(Self {
            inner: Arc::new(Inner {
                link: Arc::new(Link::new(
                    backend,
                    cfg.timeout,
                    cfg.connect_timeout,
                    cfg.breaker,
                    cfg.blocking_connections,
                )),
                scripts: Scripts::new(limit.script),
                limit,
                name: name.to_owned(),
                cfg,
                fallback,
                counters: Counters::default(),
                flights: std::sync::Mutex::new(std::collections::HashMap::new()),
            }),
        })
    }

    /// The constructor a factory calls: a core [`Spec`] (one quota, a kind with
    /// a Redis script), a server URL (`redis://`, `rediss://`,
    /// `redis+cluster://`), and settings, whose [`Config::policy`] is the rule's
    /// `on_error` (`"open"`, `"closed"`, `"local"`: see
    /// [`FailurePolicy`]'s `FromStr`). Every problem is an [`Error::Config`].
    ///
    /// ```
    /// use sluicegate::{Kind, Spec};
    /// use sluicegate_redis::{Config, RedisLimiter};
    /// let spec = Spec::parse(Kind::SlidingWindow, "100/minute").unwrap();
    /// let cfg = Config { policy: "closed".parse().unwrap(), ..Config::default() };
    /// let rl = RedisLimiter::from_spec("redis://127.0.0.1:6379", "api", &spec, cfg).unwrap();
    /// assert_eq!(rl.limit().capacity(), 100);
    /// assert!(RedisLimiter::from_spec("redis://h:notaport", "api", &spec, Config::default()).is_err());
    /// ```
    pub fn from_spec(url: &str, name: &str, spec: &Spec, cfg: Config) -> Result<Self, Error> {
        Self::new(Backend::from_url(url)?, name, Limit::from_spec(spec)?, cfg)
    }

    /// The Redis key of `key`: `{prefix}{name}:{kind}:{key}` with `key` in
    /// braces, so every limit of one key hashes to one cluster slot, and limits
    /// of different algorithms under one name never share a value.
    ///
    /// ```
    /// # use sluicegate_redis::*;
    /// let limit = Limit::parse("token_bucket", "1/s").unwrap();
    /// let rl = RedisLimiter::new(Backend::from_url("redis://127.0.0.1:1").unwrap(), "login", limit, Config::default()).unwrap();
    /// assert_eq!(rl.redis_key("10.0.0.1"), "sluicegate:login:token_bucket:{10.0.0.1}");
    /// ```
    pub fn redis_key(&self, key: &str) -> String {
        let i = &self.inner;
        let kind = i.limit.kind().name();
        let mut k =
            String::with_capacity(i.cfg.prefix.len() + i.name.len() + kind.len() + key.len() + 4);
        for part in [&i.cfg.prefix, &i.name, ":", kind, ":{", key, "}"] {
            k.push_str(part);
        }
        k
    }

    /// The limit.
    ///
    /// ```
    /// # use sluicegate_redis::*;
    /// let limit = Limit::parse("token_bucket", "1/s").unwrap();
    /// let rl = RedisLimiter::new(Backend::from_url("redis://127.0.0.1:1").unwrap(), "x", limit, Config::default()).unwrap();
    /// assert_eq!(rl.limit(), &limit);
    /// ```
    pub fn limit(&self) -> &Limit {
        &self.inner.limit
    }

    /// Whether a circuit breaker is open: the server's, or on a cluster any
    /// master's (the checks of its keys are answered by the policy).
    ///
    /// ```
    /// # use sluicegate_redis::*;
    /// # let limit = Limit::parse("token_bucket", "1/s").unwrap();
    /// let rl = RedisLimiter::new(Backend::from_url("redis://127.0.0.1:1").unwrap(), "x", limit, Config::default()).unwrap();
    /// assert!(!rl.circuit_open());
    /// ```
    pub fn circuit_open(&self) -> bool {
        self.inner.link.any_open()
    }

    /// Whether the breaker that `key`'s checks count against is open: the
    /// server's, or on a cluster that of the master serving `key`'s slot.
    ///
    /// ```
    /// # use sluicegate_redis::*;
    /// # let limit = Limit::parse("token_bucket", "1/s").unwrap();
    /// let rl = RedisLimiter::new(Backend::from_url("redis://127.0.0.1:1").unwrap(), "x", limit, Config::default()).unwrap();
    /// assert!(!rl.circuit_open_for("user:1"));
    /// ```
    pub fn circuit_open_for(&self, key: &str) -> bool {
        self.inner.link.breaker_for(&self.redis_key(key)).is_open()
    }

    /// Whether `key`'s breaker lets calls through unguarded (neither open nor
    /// half-open with a probe pending).
    pub(crate) fn circuit_closed_for(&self, key: &str) -> bool {
        self.inner
            .link
            .breaker_for(&self.redis_key(key))
            .is_closed()
    }

    /// Connects now (if not connected) and sends `PING`, returning what went
    /// wrong as it is: a refused connection, a wrong password, `NOAUTH`, a DB
    /// index out of range, something on the port that is not Redis, a timeout.
    /// Checks never report these (the failure policy answers them); call this at
    /// start-up to fail fast. Does not touch the circuit breaker.
    ///
    /// ```no_run
    /// # async fn f() -> Result<(), sluicegate_redis::Error> {
    /// use std::error::Error as _;
    /// # use sluicegate_redis::*;
    /// let limit = Limit::parse("token_bucket", "10/s")?;
    /// let rl = RedisLimiter::new(Backend::from_url("redis://127.0.0.1:1")?, "x", limit, Config::default())?;
    /// let e = rl.connect().await.unwrap_err(); // nothing listens on port 1
    /// assert!(e.is_unavailable() && e.source().is_some());
    /// # Ok(()) }
    /// ```
    pub async fn connect(&self) -> Result<(), Error> {
        self.inner.link.ping().await
    }

    /// [`Self::connect`] on a connection of the blocking API's pool, driven by
    /// the calling thread (it stays in the pool); `None` without a pool.
    pub(crate) fn connect_direct(&self) -> Option<Result<(), Error>> {
        self.inner.link.ping_direct()
    }

    /// The last error Redis gave this limiter (unavailability or a per-key
    /// data error), kept while checks are answered by the policy.
    ///
    /// ```
    /// # use sluicegate_redis::*;
    /// # let limit = Limit::parse("token_bucket", "1/s").unwrap();
    /// let rl = RedisLimiter::new(Backend::from_url("redis://127.0.0.1:1").unwrap(), "x", limit, Config::default()).unwrap();
    /// assert!(rl.last_error().is_none()); // nothing asked yet
    /// ```
    pub fn last_error(&self) -> Option<Error> {
        self.inner.link.last_error()
    }

    /// The counters so far: answers by source, per-key errors, circuit openings.
    ///
    /// ```
    /// # use sluicegate_redis::*;
    /// # let limit = Limit::parse("token_bucket", "1/s").unwrap();
    /// let rl = RedisLimiter::new(Backend::from_url("redis://127.0.0.1:1").unwrap(), "x", limit, Config::default()).unwrap();
    /// assert_eq!(rl.stats(), RedisStats::default());
    /// ```
    pub fn stats(&self) -> RedisStats {
        let i = &self.inner;
        let direct = i
            .link
            .direct
            .calls
            .load(core::sync::atomic::Ordering::Relaxed);
        i.counters.snapshot(i.link.times_opened(), direct)
    }

    /// Checks one unit for `key`. See [`Self::check_n`].
    ///
    /// ```no_run
    /// # async fn f(rl: sluicegate_redis::RedisLimiter) -> Result<(), sluicegate_redis::Error> {
    /// let v = rl.check("k").await?;
    /// assert!(v.decision.limit > 0);
    /// # Ok(()) }
    /// ```
    pub async fn check(&self, key: &str) -> Result<Verdict, Error> {
        self.check_n(key, 1).await
    }

    /// Checks and (if admitted) charges `n` units for `key`; `n = 0` is a peek.
    /// Redis unavailable: the failure policy answers (see [`Verdict::source`]).
    /// The errors: [`Error::Capacity`] (`n` above [`Limit::capacity`]), and a
    /// per-key data error ([`Error::Data`]: the key holds a value of another
    /// kind), which fails this check only.
    ///
    /// ```no_run
    /// # async fn f(rl: sluicegate_redis::RedisLimiter) -> Result<(), sluicegate_redis::Error> {
    /// let v = rl.check_n("k", 3).await?;
    /// if !v.decision.allowed { assert!(v.decision.retry_after_ns > 0) }
    /// # Ok(()) }
    /// ```
    pub async fn check_n(&self, key: &str, n: u64) -> Result<Verdict, Error> {
        self.run(key, n, Mode::Consume).await
    }

    /// Whether `n` units would be admitted now, charging nothing (never writes).
    ///
    /// ```no_run
    /// # async fn f(rl: sluicegate_redis::RedisLimiter) -> Result<(), sluicegate_redis::Error> {
    /// let before = rl.peek_n("k", 1).await?.decision.remaining;
    /// assert_eq!(rl.peek_n("k", 1).await?.decision.remaining, before);
    /// # Ok(()) }
    /// ```
    pub async fn peek_n(&self, key: &str, n: u64) -> Result<Verdict, Error> {
        self.run(key, n, Mode::Peek).await
    }

    /// The raw script call: no failure policy (an unavailable Redis is an error).
    ///
    /// ```no_run
    /// # async fn f(rl: sluicegate_redis::RedisLimiter) -> Result<(), sluicegate_redis::Error> {
    /// let r = rl.try_check_n("k", 1).await?;
    /// assert!(r.now_us > 0); // Redis TIME, microseconds
    /// # Ok(()) }
    /// ```
    pub async fn try_check_n(&self, key: &str, n: u64) -> Result<Reply, Error> {
        self.consume(key, n).await
    }

    /// Raw peek (see [`Self::try_check_n`]).
    ///
    /// ```no_run
    /// # async fn f(rl: sluicegate_redis::RedisLimiter) -> Result<(), sluicegate_redis::Error> {
    /// assert_eq!(rl.try_peek_n("k", 1).await?.granted, 0);
    /// # Ok(()) }
    /// ```
    pub async fn try_peek_n(&self, key: &str, n: u64) -> Result<Reply, Error> {
        self.call(key, n, Mode::Peek).await
    }

    /// Leases up to `n` units at once: Redis charges what the limit has now, up to
    /// `n`, in one call, and [`Reply::granted`] says how many; with none there it
    /// is a denial of one unit with its `retry_after`, and nothing is written.
    /// The token bucket and the leaky bucket charge the bucket; the fixed window
    /// and the sliding window counter charge the window the call is decided in
    /// (the aligned window holding [`Reply::now_us`], unless Redis' clock went
    /// back); a shaper with a max delay is refused (its grants come with delays).
    ///
    /// ```no_run
    /// # async fn f(rl: sluicegate_redis::RedisLimiter) -> Result<(), sluicegate_redis::Error> {
    /// let r = rl.try_lease("k", 10).await?;
    /// assert!(r.granted <= 10);
    /// assert_eq!(r.decision.allowed, r.granted > 0);
    /// # Ok(()) }
    /// ```
    pub async fn try_lease(&self, key: &str, n: u64) -> Result<Reply, Error> {
        if !self.inner.limit.leasable() {
            return Err(Error::Config(ConfigError::new(
                "spec",
                "a shaper's grants come with delays, which a lease cannot carry",
            )));
        }
        let n = n.clamp(1, self.inner.limit.capacity());
        self.call(key, n, Mode::Lease).await
    }

    async fn run(&self, key: &str, n: u64, mode: Mode) -> Result<Verdict, Error> {
        let r = if mode == Mode::Consume {
            self.consume(key, n).await
        } else {
            self.call(key, n, mode).await
        };
        self.answer(key, n, mode != Mode::Peek, r)
    }

    /// A call's result as a check's answer: Redis' decision, the policy's when
    /// Redis is unavailable, or the error (capacity, per-key data).
    pub(crate) fn answer(
        &self,
        key: &str,
        n: u64,
        consume: bool,
        r: Result<Reply, Error>,
    ) -> Result<Verdict, Error> {
        match r {
            Ok(r) => {
                self.inner.counters.answered(Source::Redis);
                Ok(Verdict {
                    decision: r.decision,
                    source: Source::Redis,
                    delay_ns: r.delay_ns,
                })
            }
            Err(e) if e.is_unavailable() => Ok(self.policy(key, n, consume)),
            Err(e @ (Error::Data(_) | Error::Reply(_))) => {
                self.inner.counters.data_error();
                Err(e)
            }
            Err(e) => Err(e),
        }
    }

    /// The failure policy's answer.
    pub(crate) fn policy(&self, key: &str, n: u64, consume: bool) -> Verdict {
        let limit = self.inner.limit.capacity();
        let v = match (&self.inner.cfg.policy, &self.inner.fallback) {
            (FailurePolicy::Open, _) => Verdict {
                decision: Decision {
                    allowed: true,
                    remaining: 0,
                    retry_after_ns: 0,
                    reset_after_ns: 0,
                    limit,
                },
                source: Source::FailOpen,
                delay_ns: 0,
            },
            (FailurePolicy::Local { .. }, Some(fb)) => {
                let (decision, delay_ns) = fb.check(key, n, consume);
                Verdict {
                    decision,
                    source: Source::LocalFallback,
                    delay_ns,
                }
            }
            _ => {
                let cooldown = self.inner.cfg.breaker.cooldown.as_nanos();
                Verdict {
                    decision: Decision {
                        retry_after_ns: u64::try_from(cooldown).unwrap_or(u64::MAX),
                        ..Decision::never(limit)
                    },
                    source: Source::FailClosed,
                    delay_ns: 0,
                }
            }
        };
        self.inner.counters.answered(v.source);
        v
    }

    /// `n` checked against the capacity: above it, the error that is never sent.
    pub(crate) fn within_capacity(&self, n: u64) -> Result<(), Error> {
        let capacity = self.inner.limit.capacity();
        if n > capacity {
            return Err(Error::Capacity(InsufficientCapacity {
                requested: n,
                capacity,
            }));
        }
        Ok(())
    }

    /// The blocking API's check ([`Self::run`] driven by the calling thread on
    /// a pooled connection, see [`crate::direct`]): `None` when it cannot be
    /// (the pool has no connection to give: a cluster, every one in use, or
    /// none configured; or a consuming check with per-key coalescing, whose
    /// flights run on the runtime), and the caller goes the async way.
    pub(crate) fn run_direct(
        &self,
        key: &str,
        n: u64,
        mode: Mode,
    ) -> Option<Result<Verdict, Error>> {
        let r = self.call_direct(key, n, mode)?;
        Some(self.answer(key, n, mode != Mode::Peek, r))
    }

    /// [`Self::call`] (or a consuming check's [`Self::consume`]) driven by the
    /// calling thread on a pooled connection; `None` as for [`Self::run_direct`].
    pub(crate) fn call_direct(
        &self,
        key: &str,
        n: u64,
        mode: Mode,
    ) -> Option<Result<Reply, Error>> {
        if mode == Mode::Consume && self.inner.cfg.coalesce.is_some() {
            return None;
        }
        if let Err(e) = self.within_capacity(n) {
            return Some(Err(e));
        }
        let inner = &self.inner;
        let rkey = &self.redis_key(key);
        let limit = &inner.limit;
        inner.link.run_direct(rkey, |conn| {
            let v = inner
                .scripts
                .invoke_direct(conn, rkey, |c| limit.push_args(c, n, mode))
                .map_err(Error::from_redis)?;
            Reply::parse(&v)
        })
    }

    /// One script call on `key`, under its breaker and the timeout.
    pub(crate) async fn call(&self, key: &str, n: u64, mode: Mode) -> Result<Reply, Error> {
        self.within_capacity(n)?;
        let inner = &self.inner;
        let rkey = &self.redis_key(key);
        let limit = &inner.limit;
        inner
            .link
            .run(rkey, |mut conn: Conn| async move {
                let v = inner
                    .scripts
                    .invoke(&mut conn, rkey, |c| limit.push_args(c, n, mode))
                    .await
                    .map_err(Error::from_redis)?;
                Reply::parse(&v)
            })
            .await
    }
}
