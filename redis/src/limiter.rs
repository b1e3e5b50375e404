//! The Redis-backed limiter: one [`Limit`] over many keys, async.

use core::time::Duration;
use std::sync::{Arc, RwLock};

use sluicegate::Decision;

use crate::breaker::{Breaker, BreakerConfig, Permit};
use crate::conn::{Backend, Conn};
use crate::error::Error;
use crate::limit::{Limit, Mode, Reply};
use crate::nodes::{key_slot, NodeMap};
use crate::policy::{FailurePolicy, Fallback};
use crate::script::Scripts;

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
    /// is never replayed, and the failure policy answers.
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
        }
    }
}

/// Who answered a check.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Source {
    /// The Redis script.
    Redis,
    /// Redis unavailable, [`FailurePolicy::Open`].
    FailOpen,
    /// Redis unavailable, [`FailurePolicy::Closed`].
    FailClosed,
    /// Redis unavailable, [`FailurePolicy::Local`].
    LocalFallback,
    /// Hybrid mode: spent from a local lease, no round trip.
    Lease,
    /// Hybrid mode: denied locally (the local front limiter, or the negative cache
    /// after a Redis denial), no round trip.
    LocalDenial,
}

/// A decision and where it came from.
///
/// ```
/// use sluicegate_redis::{Source, Verdict};
/// use sluicegate::Decision;
/// let d = Decision { allowed: true, remaining: 1, retry_after_ns: 0, reset_after_ns: 5, limit: 2 };
/// let v = Verdict { decision: d, source: Source::Redis, delay_ns: 0 };
/// assert!(v.decision.allowed && v.is_authoritative());
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Verdict {
    /// The decision, with the same fields and meaning as the local limiters'.
    pub decision: Decision,
    /// Who decided.
    pub source: Source,
    /// For a shaper: how long the granted request must wait, in nanoseconds.
    pub delay_ns: u64,
}

impl Verdict {
    /// Whether Redis (or a lease it granted) decided, as opposed to a failure policy.
    ///
    /// ```
    /// # use sluicegate_redis::{Source, Verdict};
    /// # use sluicegate::Decision;
    /// # let d = Decision { allowed: true, remaining: 1, retry_after_ns: 0, reset_after_ns: 5, limit: 2 };
    /// assert!(!Verdict { decision: d, source: Source::FailOpen, delay_ns: 0 }.is_authoritative());
    /// ```
    pub fn is_authoritative(&self) -> bool {
        matches!(
            self.source,
            Source::Redis | Source::Lease | Source::LocalDenial
        )
    }
}

pub(crate) struct Inner {
    backend: Backend,
    pub(crate) limit: Limit,
    name: String,
    pub(crate) cfg: Config,
    scripts: Scripts,
    conn: RwLock<Option<Conn>>,
    connecting: tokio::sync::Mutex<()>,
    /// Failed connection attempts so far: a task that waited for another's attempt
    /// and sees it fail does not try again itself (no queue of timeouts).
    connect_failures: core::sync::atomic::AtomicU64,
    /// The breaker of a standalone server; on a cluster, of the calls no master's
    /// breaker covers (before the first slot map, or slots it does not list).
    pub(crate) breaker: Breaker,
    /// On a cluster: each master's breaker and the slots it serves.
    nodes: RwLock<Option<NodeMap>>,
    /// A slot-map refresh is running.
    refreshing: core::sync::atomic::AtomicBool,
    fallback: Option<Fallback>,
    /// Open coalescing flights: the costs (in arrival order) and where each
    /// decision goes.
    flights: std::sync::Mutex<std::collections::HashMap<String, Flight>>,
}

type Flight = Vec<(u64, tokio::sync::oneshot::Sender<Result<Reply, Error>>)>;

/// The breaker a call counts against: the main one, or a cluster master's.
enum BreakerRef<'a> {
    Main(&'a Breaker),
    Node(Arc<Breaker>),
}

impl core::ops::Deref for BreakerRef<'_> {
    type Target = Breaker;
    fn deref(&self) -> &Breaker {
        match self {
            Self::Main(b) => b,
            Self::Node(b) => b,
        }
    }
}

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
/// use sluicegate::Quota;
/// use sluicegate_redis::{Algorithm, Backend, Config, Limit, RedisLimiter};
///
/// let limit = Limit::new(Algorithm::TokenBucket, Quota::per_second(10).burst(2))?;
/// let rl = RedisLimiter::new(Backend::from_url("redis://127.0.0.1:6379")?, "api", limit, Config::default())?;
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
            .field("backend", &self.inner.backend)
            .field("name", &self.inner.name)
            .field("limit", &self.inner.limit)
            .finish_non_exhaustive()
    }
}

impl RedisLimiter {
    /// A limiter named `name` (part of every key) on `backend`. Connects lazily, on
    /// the first check.
    ///
    /// ```
    /// # use sluicegate::Quota;
    /// # use sluicegate_redis::*;
    /// let limit = Limit::new(Algorithm::FixedWindow, Quota::per_minute(60)).unwrap();
    /// let bad = Config { prefix: "a{b".into(), ..Config::default() };
    /// assert!(RedisLimiter::new(Backend::from_url("redis://127.0.0.1:1").unwrap(), "x", limit, bad).is_err());
    /// ```
    pub fn new(backend: Backend, name: &str, limit: Limit, cfg: Config) -> Result<Self, Error> {
        backend.check_features()?;
        if cfg.prefix.contains('{') || name.contains('{') {
            return Err(Error::Url(
                "prefix and name must not contain '{' (the key's hash tag follows them)".into(),
            ));
        }
        let fallback = match cfg.policy {
            FailurePolicy::Local { share_percent } => Some(
                Fallback::new(&limit, share_percent, cfg.fallback_keys).ok_or(
                    Error::Resolution {
                        field: "share_percent",
                        reason: "the local share of this quota is not a valid local limit",
                    },
                )?,
            ),
            _ => None,
        };
        Ok(Self {
            inner: Arc::new(Inner {
                backend,
                limit,
                name: name.to_owned(),
                breaker: Breaker::new(cfg.breaker),
                nodes: RwLock::new(None),
                refreshing: core::sync::atomic::AtomicBool::new(false),
                cfg,
                scripts: Scripts::new(),
                conn: RwLock::new(None),
                connecting: tokio::sync::Mutex::new(()),
                connect_failures: core::sync::atomic::AtomicU64::new(0),
                fallback,
                flights: std::sync::Mutex::new(std::collections::HashMap::new()),
            }),
        })
    }

    /// The Redis key of `key`: `{prefix}{name}:{key}` with `key` in braces, so every
    /// limit of one key hashes to one cluster slot.
    ///
    /// ```
    /// # use sluicegate::Quota;
    /// # use sluicegate_redis::*;
    /// let limit = Limit::new(Algorithm::TokenBucket, Quota::per_second(1)).unwrap();
    /// let rl = RedisLimiter::new(Backend::from_url("redis://127.0.0.1:1").unwrap(), "login", limit, Config::default()).unwrap();
    /// assert_eq!(rl.redis_key("10.0.0.1"), "sluicegate:login:{10.0.0.1}");
    /// ```
    pub fn redis_key(&self, key: &str) -> String {
        format!("{}{}:{{{}}}", self.inner.cfg.prefix, self.inner.name, key)
    }

    /// The limit.
    ///
    /// ```
    /// # use sluicegate::Quota;
    /// # use sluicegate_redis::*;
    /// let limit = Limit::new(Algorithm::TokenBucket, Quota::per_second(1)).unwrap();
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
    /// # use sluicegate::Quota;
    /// # use sluicegate_redis::*;
    /// # let limit = Limit::new(Algorithm::TokenBucket, Quota::per_second(1)).unwrap();
    /// let rl = RedisLimiter::new(Backend::from_url("redis://127.0.0.1:1").unwrap(), "x", limit, Config::default()).unwrap();
    /// assert!(!rl.circuit_open());
    /// ```
    pub fn circuit_open(&self) -> bool {
        self.inner.breaker.is_open()
            || self
                .inner
                .nodes
                .read()
                .ok()
                .is_some_and(|m| m.as_ref().is_some_and(NodeMap::any_open))
    }

    /// Whether the breaker that `key`'s checks count against is open: the
    /// server's, or on a cluster that of the master serving `key`'s slot.
    ///
    /// ```
    /// # use sluicegate::Quota;
    /// # use sluicegate_redis::*;
    /// # let limit = Limit::new(Algorithm::TokenBucket, Quota::per_second(1)).unwrap();
    /// let rl = RedisLimiter::new(Backend::from_url("redis://127.0.0.1:1").unwrap(), "x", limit, Config::default()).unwrap();
    /// assert!(!rl.circuit_open_for("user:1"));
    /// ```
    pub fn circuit_open_for(&self, key: &str) -> bool {
        self.breaker_for(&self.redis_key(key)).is_open()
    }

    fn is_cluster(&self) -> bool {
        matches!(
            self.inner.backend,
            Backend::Cluster(_) | Backend::ClusterTls { .. }
        )
    }

    /// The breaker for the Redis key `rkey`: a standalone server's checks never
    /// touch the node map (no lock on their path).
    fn breaker_for(&self, rkey: &str) -> BreakerRef<'_> {
        if !self.is_cluster() {
            return BreakerRef::Main(&self.inner.breaker);
        }
        let node = self.inner.nodes.read().ok().and_then(|m| {
            m.as_ref()
                .and_then(|m| m.breaker(key_slot(rkey.as_bytes())).cloned())
        });
        match node {
            Some(b) => BreakerRef::Node(b),
            None => BreakerRef::Main(&self.inner.breaker),
        }
    }

    /// Counts a failure; a master's circuit that this opened (a failover or a
    /// slot migration may be why) has the slot map read again.
    fn failed(&self, breaker: &Breaker, permit: Permit) {
        if breaker.failure(permit) && self.is_cluster() {
            self.refresh_nodes();
        }
    }

    /// Reads `CLUSTER SLOTS` on a task of its own (no check waits for it) and
    /// installs the map, keeping the breakers of masters it already knew.
    fn refresh_nodes(&self) {
        use core::sync::atomic::Ordering;
        let Some(Conn::Cluster(mut conn)) = self.current() else {
            return;
        };
        if self.inner.refreshing.swap(true, Ordering::Acquire) {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            self.inner.refreshing.store(false, Ordering::Release);
            return;
        };
        let this = self.clone();
        runtime.spawn(async move {
            let cmd = redis::cmd("CLUSTER").arg("SLOTS").clone();
            let timeout = this
                .inner
                .cfg
                .timeout
                .max(core::time::Duration::from_millis(250));
            if let Ok(Ok(reply)) =
                tokio::time::timeout(timeout, cmd.query_async::<redis::Value>(&mut conn)).await
            {
                if let Ok(mut g) = this.inner.nodes.write() {
                    if let Some(map) =
                        NodeMap::from_cluster_slots(&reply, g.as_ref(), this.inner.cfg.breaker)
                    {
                        *g = Some(map);
                    }
                }
            }
            this.inner.refreshing.store(false, Ordering::Release);
        });
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
    /// The only error is [`Error::Capacity`] (`n` above [`Limit::capacity`]).
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

    /// Checks many `(key, cost)` pairs at once: on a standalone server one pipeline
    /// (one write, one read for the lot, `NOSCRIPT` items sent again as `EVAL`); on
    /// a cluster concurrent calls, pipelined per node. Answers come in the order
    /// asked; each is decided in that order on its key. A timeout fails the whole
    /// batch over to the policy, and nothing of it is replayed.
    ///
    /// ```no_run
    /// # async fn f(rl: sluicegate_redis::RedisLimiter) -> Result<(), sluicegate_redis::Error> {
    /// let v = rl.check_many(&[("a", 1), ("b", 1), ("a", 1)]).await;
    /// assert_eq!(v.len(), 3);
    /// # Ok(()) }
    /// ```
    pub async fn check_many(&self, items: &[(&str, u64)]) -> Vec<Result<Verdict, Error>> {
        if !matches!(self.current(), Some(Conn::Single(_))) {
            // The cluster (or no connection yet): concurrent calls, which the
            // connections pipeline per node.
            return futures_util::future::join_all(items.iter().map(|(k, n)| self.check_n(k, *n)))
                .await;
        }
        let inner = &self.inner;
        let capacity = inner.limit.capacity();
        let mut out: Vec<Option<Result<Verdict, Error>>> = items
            .iter()
            .map(|&(_, n)| {
                (n > capacity).then(|| {
                    Err(Error::Capacity(sluicegate::InsufficientCapacity {
                        requested: n,
                        capacity,
                    }))
                })
            })
            .collect();
        let todo: Vec<usize> = (0..items.len()).filter(|&i| out[i].is_none()).collect();
        if !todo.is_empty() {
            let replies = self.pipelined(items, &todo).await;
            for (&i, r) in todo.iter().zip(replies) {
                let (key, n) = items[i];
                out[i] = Some(Ok(match r {
                    Ok(r) => Verdict {
                        decision: r.decision,
                        source: Source::Redis,
                        delay_ns: r.delay_ns,
                    },
                    Err(_) => self.policy(key, n, true),
                }));
            }
        }
        out.into_iter()
            .map(|r| r.unwrap_or(Err(Error::CircuitOpen)))
            .collect()
    }

    /// One pipeline of `EVALSHA`s for `items[todo]` (one write, one read); the
    /// items that got `NOSCRIPT` (they did not run) go again as `EVAL`s.
    async fn pipelined(&self, items: &[(&str, u64)], todo: &[usize]) -> Vec<Result<Reply, Error>> {
        let inner = &self.inner;
        let unavailable = |e: fn() -> Error| todo.iter().map(|_| Err(e())).collect::<Vec<_>>();
        let permit = inner.breaker.permit();
        if permit == Permit::Reject {
            return unavailable(|| Error::CircuitOpen);
        }
        let mut conn = match self.conn(&inner.breaker).await {
            Ok(c) => c,
            Err(_) => {
                inner.breaker.failure(permit);
                return unavailable(|| Error::Timeout);
            }
        };
        let mut results: Vec<Option<Result<Reply, Error>>> = todo.iter().map(|_| None).collect();
        let mut pending: Vec<usize> = (0..todo.len()).collect();
        for eval in [false, true] {
            if pending.is_empty() {
                break;
            }
            let mut pipe = redis::pipe();
            pipe.ignore_errors();
            for &j in &pending {
                let (key, n) = items[todo[j]];
                let limit = &inner.limit;
                pipe.add_command(inner.scripts.command(
                    limit.script,
                    eval,
                    &self.redis_key(key),
                    |c| limit.push_args(c, n, Mode::Consume),
                ));
            }
            let fut = conn.pipeline(&pipe);
            let replies = match tokio::time::timeout(inner.cfg.timeout, fut).await {
                Ok(Ok(r)) if r.len() == pending.len() => r,
                _ => {
                    // Timed out or broken: none of it is replayed.
                    inner.breaker.failure(permit);
                    self.drop_conn();
                    for &j in &pending {
                        results[j] = Some(Err(Error::Timeout));
                    }
                    return results
                        .into_iter()
                        .map(|r| r.unwrap_or(Err(Error::Timeout)))
                        .collect();
                }
            };
            let mut again = Vec::new();
            for (&j, r) in pending.iter().zip(replies) {
                match r {
                    Err(e)
                        if !eval
                            && e.kind()
                                == redis::ErrorKind::Server(redis::ServerErrorKind::NoScript) =>
                    {
                        again.push(j)
                    }
                    Err(e) => results[j] = Some(Err(Error::Redis(e))),
                    Ok(v) => results[j] = Some(Reply::parse(&v)),
                }
            }
            pending = again;
        }
        inner.breaker.success(permit);
        results
            .into_iter()
            .map(|r| r.unwrap_or(Err(Error::Timeout)))
            .collect()
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

    /// A consuming call: coalesced with the key's concurrent ones when
    /// [`Config::coalesce`] is on, else one script call.
    async fn consume(&self, key: &str, n: u64) -> Result<Reply, Error> {
        let Some(window) = self.inner.cfg.coalesce else {
            return self.call(key, n, Mode::Consume).await;
        };
        let capacity = self.inner.limit.capacity();
        if n > capacity {
            return Err(Error::Capacity(sluicegate::InsufficientCapacity {
                requested: n,
                capacity,
            }));
        }
        let (tx, rx) = tokio::sync::oneshot::channel();
        let open = {
            let mut flights = match self.inner.flights.lock() {
                Ok(g) => g,
                Err(p) => p.into_inner(),
            };
            match flights.get_mut(key) {
                Some(f) => {
                    f.push((n, tx));
                    false
                }
                None => {
                    flights.insert(key.to_owned(), vec![(n, tx)]);
                    true
                }
            }
        };
        if open {
            // The flight runs on its own task, so that a caller that gives up (its
            // future dropped) cannot strand the others.
            let (this, key) = (self.clone(), key.to_owned());
            tokio::spawn(async move { this.fly(key, window).await });
        }
        // A flight that vanished (its task panicked or the runtime shut down):
        // unavailable, like a timeout.
        rx.await.unwrap_or(Err(Error::Timeout))
    }

    /// Sends `key`'s flight after `window`: one single call for one cost, else the
    /// multi-cost script; hands each caller its reply.
    async fn fly(&self, key: String, window: Duration) {
        if window.is_zero() {
            tokio::task::yield_now().await;
        } else {
            tokio::time::sleep(window).await;
        }
        let flight = {
            let mut flights = match self.inner.flights.lock() {
                Ok(g) => g,
                Err(p) => p.into_inner(),
            };
            flights.remove(&key).unwrap_or_default()
        };
        if let [(n, _)] = flight[..] {
            let r = self.call(&key, n, Mode::Consume).await;
            if let Some((_, tx)) = flight.into_iter().next() {
                let _ = tx.send(r);
            }
            return;
        }
        let costs: Vec<u64> = flight.iter().map(|(n, _)| *n).collect();
        match self.call_multi(&key, &costs).await {
            Ok(replies) => {
                for ((_, tx), r) in flight.into_iter().zip(replies) {
                    let _ = tx.send(Ok(r));
                }
            }
            Err(e) => {
                let unavailable = e.is_unavailable();
                for (_, tx) in flight {
                    let _ = tx.send(Err(if unavailable {
                        Error::Timeout
                    } else {
                        Error::Reply(format!("{e}"))
                    }));
                }
            }
        }
    }

    /// The multi-cost script on one key, with the breaker and timeout of a single
    /// call: one reply per cost, in order, or one error for all.
    async fn call_multi(&self, key: &str, costs: &[u64]) -> Result<Vec<Reply>, Error> {
        let inner = &self.inner;
        let rkey = self.redis_key(key);
        let breaker = self.breaker_for(&rkey);
        let permit = breaker.permit();
        if permit == Permit::Reject {
            return Err(Error::CircuitOpen);
        }
        let result = async {
            let mut conn = self.conn(&breaker).await?;
            let limit = &inner.limit;
            let fut = inner
                .scripts
                .invoke_multi(&mut conn, limit.script, &rkey, |c| {
                    limit.push_multi_args(c, costs)
                });
            let v = match tokio::time::timeout(inner.cfg.timeout, fut).await {
                Ok(Ok(v)) => v,
                Ok(Err(e)) if e.is_timeout() => return Err(Error::Timeout),
                Ok(Err(e)) => return Err(Error::Redis(e)),
                Err(_) => return Err(Error::Timeout),
            };
            match v {
                redis::Value::Array(items) if items.len() == costs.len() => {
                    items.iter().map(Reply::parse).collect()
                }
                other => Err(Error::Reply(format!(
                    "expected {} replies, got {other:?}",
                    costs.len()
                ))),
            }
        }
        .await;
        self.settle(&breaker, permit, result.as_ref().err());
        result
    }

    /// Records a call's outcome on its breaker; after a timeout or a broken
    /// connection to a standalone server, starts from a fresh connection (a
    /// SIGSTOPped server keeps its socket open and would never answer). A
    /// cluster connection is kept: it reconnects to a master on its own, and
    /// dropping it would cost the live masters' keys a reconnect too.
    fn settle(&self, breaker: &Breaker, permit: Permit, error: Option<&Error>) {
        match error {
            None => breaker.success(permit),
            Some(e) => {
                self.failed(breaker, permit);
                let server_error = matches!(e, Error::Redis(r) if r.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::ResponseError));
                if !server_error && !self.is_cluster() {
                    self.drop_conn();
                }
            }
        }
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
        if self.inner.limit.slack_us != 0 {
            return Err(Error::Resolution {
                field: "algorithm",
                reason: "a shaper's grants come with delays, which a lease cannot carry",
            });
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
        match r {
            Ok(r) => Ok(Verdict {
                decision: r.decision,
                source: Source::Redis,
                delay_ns: r.delay_ns,
            }),
            Err(Error::Capacity(e)) => Err(Error::Capacity(e)),
            Err(_) => Ok(self.policy(key, n, mode != Mode::Peek)),
        }
    }

    /// The failure policy's answer.
    pub(crate) fn policy(&self, key: &str, n: u64, consume: bool) -> Verdict {
        let limit = self.inner.limit.capacity();
        let d = |allowed, retry: u64| Decision {
            allowed,
            remaining: 0,
            retry_after_ns: retry,
            reset_after_ns: 0,
            limit,
        };
        match (&self.inner.cfg.policy, &self.inner.fallback) {
            (FailurePolicy::Open, _) => Verdict {
                decision: d(true, 0),
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
            _ => Verdict {
                decision: d(
                    false,
                    u64::try_from(self.inner.cfg.breaker.cooldown.as_nanos()).unwrap_or(u64::MAX),
                ),
                source: Source::FailClosed,
                delay_ns: 0,
            },
        }
    }

    async fn call(&self, key: &str, n: u64, mode: Mode) -> Result<Reply, Error> {
        let inner = &self.inner;
        let capacity = inner.limit.capacity();
        if n > capacity {
            return Err(Error::Capacity(sluicegate::InsufficientCapacity {
                requested: n,
                capacity,
            }));
        }
        let rkey = self.redis_key(key);
        let breaker = self.breaker_for(&rkey);
        let permit = breaker.permit();
        if permit == Permit::Reject {
            return Err(Error::CircuitOpen);
        }
        let result = self.call_redis(&breaker, &rkey, n, mode).await;
        self.settle(&breaker, permit, result.as_ref().err());
        result
    }

    async fn call_redis(
        &self,
        breaker: &Breaker,
        rkey: &str,
        n: u64,
        mode: Mode,
    ) -> Result<Reply, Error> {
        let inner = &self.inner;
        let mut conn = self.conn(breaker).await?;
        let limit = &inner.limit;
        let fut = inner.scripts.invoke(&mut conn, limit.script, rkey, |c| {
            limit.push_args(c, n, mode)
        });
        match tokio::time::timeout(inner.cfg.timeout, fut).await {
            Ok(Ok(v)) => Reply::parse(&v),
            Ok(Err(e)) if e.is_timeout() => Err(Error::Timeout),
            Ok(Err(e)) => Err(Error::Redis(e)),
            Err(_) => Err(Error::Timeout),
        }
    }

    fn drop_conn(&self) {
        if let Ok(mut g) = self.inner.conn.write() {
            *g = None;
        }
    }

    /// The connection, (re)connecting if there is none, unless `breaker` (the
    /// calling check's) opened meanwhile or another task's attempt just failed.
    async fn conn(&self, breaker: &Breaker) -> Result<Conn, Error> {
        if let Some(c) = self.current() {
            return Ok(c);
        }
        use core::sync::atomic::Ordering::Relaxed;
        let failures = self.inner.connect_failures.load(Relaxed);
        let _guard = self.inner.connecting.lock().await;
        if let Some(c) = self.current() {
            return Ok(c);
        }
        if self.inner.connect_failures.load(Relaxed) != failures || breaker.is_open() {
            return Err(Error::CircuitOpen);
        }
        let c = match self
            .inner
            .backend
            .connect(self.inner.cfg.connect_timeout, self.inner.cfg.timeout)
            .await
        {
            Ok(c) => c,
            Err(e) => {
                self.inner.connect_failures.fetch_add(1, Relaxed);
                return Err(e);
            }
        };
        if let Ok(mut g) = self.inner.conn.write() {
            *g = Some(c.clone());
        }
        if self.is_cluster() {
            self.refresh_nodes();
        }
        Ok(c)
    }

    fn current(&self) -> Option<Conn> {
        self.inner.conn.read().ok().and_then(|g| g.clone())
    }
}
