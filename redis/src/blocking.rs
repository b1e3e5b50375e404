//! Blocking wrappers of the async limiters, for plain threads (and usable from
//! inside a Tokio runtime, where they block that runtime's thread for the round
//! trip, as any blocking call does).
//!
//! # Who drives a connection
//! * **A check, a peek, `try_check_n`, `connect`: the calling thread.** Each
//!   limiter keeps a small pool of synchronous connections (up to
//!   [`Config::blocking_connections`], 8 by default, opened as concurrent
//!   callers need them). A calling thread takes an idle one, writes its command
//!   and reads the reply itself, and puts it back: one round trip, no other
//!   thread woken, so a sequential caller costs what a raw socket would, on an
//!   idle machine or a busy one. A pooled connection is never shared while in
//!   use: several threads share the pool, one connection per call in flight.
//! * **Everything else: the limiter's private runtime** (one worker thread),
//!   which drives the multiplexed connection: calls past the pool's bound (more
//!   threads checking at once than it holds, which then pipeline on that one
//!   socket), batches ([`RedisLimiter::check_many`]), a hybrid limiter's lease
//!   refreshes (batched there; a lease hit never leaves the calling thread),
//!   per-key coalescing ([`Config::coalesce`]), a cluster (its connection
//!   routes by slot and follows the cluster's map: there is no pool), and every
//!   future of [`RedisLimiter::as_async`] spawned on [`RedisLimiter::handle`]. A
//!   plain thread waits for such a call with `block_on`; a thread inside another
//!   Tokio runtime (where `block_on` panics) hands it to the private runtime and
//!   waits for the answer.
//!
//! Both paths send the same commands and share the script registry (`EVALSHA`,
//! `EVAL` on `NOSCRIPT`), the reply parsing, the error classification, the
//! circuit breaker, the timeout and the failure policy; [`RedisStats::direct_calls`]
//! counts the calls made on the calling thread. A pooled connection whose reply
//! was not read in full (a timeout, a broken stream) is closed, and a failure
//! that drops the multiplexed connection drops the idle pooled ones too.

use std::sync::Arc;

use crate::error::{ConfigError, Error};
use crate::hybrid::{HybridConfig, HybridLimiter as AsyncHybrid, HybridStats, Route};
use crate::limit::{Limit, Mode, Reply};
use crate::limiter::{Config, RedisLimiter as AsyncLimiter};
use crate::verdict::{RedisStats, Verdict};
use crate::Backend;

/// Whether this thread is inside a Tokio runtime (where `block_on` panics).
fn in_runtime() -> bool {
    tokio::runtime::Handle::try_current().is_ok()
}

/// Runs `fut` on `rt` and waits for it on this thread (which is inside another
/// runtime); `lost` if the runtime stopped before answering.
fn hop<T: Send + 'static>(
    rt: &tokio::runtime::Runtime,
    fut: impl std::future::Future<Output = T> + Send + 'static,
    lost: impl FnOnce() -> T,
) -> T {
    let (tx, rx) = std::sync::mpsc::sync_channel(1);
    rt.spawn(async move {
        let _ = tx.send(fut.await);
    });
    rx.recv().unwrap_or_else(|_| lost())
}

/// The error of a call whose runtime stopped before it answered.
fn stopped() -> Error {
    Error::Redis(redis::RedisError::from(std::io::Error::other(
        "the limiter's runtime stopped before answering",
    )))
}

/// The private runtime, shut down without waiting when its last handle is
/// dropped inside another runtime (a policy reload or a server's shutdown drops
/// its Redis rules on an async task, where a blocking drop would panic); on a
/// plain thread it is dropped as usual, waiting for its tasks.
#[derive(Debug)]
struct Private(Option<tokio::runtime::Runtime>);

impl std::ops::Deref for Private {
    type Target = tokio::runtime::Runtime;
    #[allow(
        clippy::expect_used,
        reason = "Some from `runtime()` until `drop`, which alone takes it"
    )]
    fn deref(&self) -> &tokio::runtime::Runtime {
        self.0
            .as_ref()
            .expect("the runtime lives until the limiter is dropped")
    }
}

impl Drop for Private {
    fn drop(&mut self) {
        if let Some(rt) = self.0.take() {
            if in_runtime() {
                rt.shutdown_background();
            }
        }
    }
}

fn runtime() -> Result<Arc<Private>, Error> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .thread_name("sluicegate-redis")
        .enable_all()
        .build()
        .map(|rt| Arc::new(Private(Some(rt))))
        .map_err(|e| {
            Error::Config(ConfigError::caused_by(
                "runtime",
                "cannot start the runtime",
                e,
            ))
        })
}

/// The blocking [`crate::RedisLimiter`]. Cheap to clone; usable from many threads.
///
/// ```no_run
/// use sluicegate_redis::{blocking, Backend, Config, Limit};
/// let limit = Limit::parse("fixed_window", "2/minute")?;
/// let rl = blocking::RedisLimiter::new(Backend::from_url("redis://127.0.0.1:6379")?, "b", limit, Config::default())?;
/// rl.check("k")?;
/// rl.check("k")?;
/// assert!(!rl.check("k")?.decision.allowed); // 2 per minute, both spent
/// # Ok::<(), sluicegate_redis::Error>(())
/// ```
#[derive(Clone, Debug)]
pub struct RedisLimiter {
    rt: Arc<Private>,
    inner: AsyncLimiter,
}

impl RedisLimiter {
    /// See [`crate::RedisLimiter::new`].
    ///
    /// ```
    /// # use sluicegate_redis::*;
    /// let limit = Limit::parse("token_bucket", "1/s").unwrap();
    /// let rl = blocking::RedisLimiter::new(Backend::from_url("redis://127.0.0.1:1").unwrap(), "x", limit, Config::default()).unwrap();
    /// assert_eq!(rl.limit().capacity(), 1);
    /// ```
    pub fn new(backend: Backend, name: &str, limit: Limit, cfg: Config) -> Result<Self, Error> {
        Ok(Self {
            rt: runtime()?,
            inner: AsyncLimiter::new(backend, name, limit, cfg)?,
        })
    }

    /// See [`crate::RedisLimiter::from_spec`].
    ///
    /// ```
    /// use sluicegate_redis::{blocking, Config, Kind, Spec};
    /// let spec = Spec::parse(Kind::FixedWindow, "10/s").unwrap();
    /// let rl = blocking::RedisLimiter::from_spec("redis://127.0.0.1:6379", "x", &spec, Config::default()).unwrap();
    /// assert_eq!(rl.limit().capacity(), 10);
    /// ```
    pub fn from_spec(
        url: &str,
        name: &str,
        spec: &sluicegate::Spec,
        cfg: Config,
    ) -> Result<Self, Error> {
        Ok(Self {
            rt: runtime()?,
            inner: AsyncLimiter::from_spec(url, name, spec, cfg)?,
        })
    }

    /// See [`crate::RedisLimiter::connect`].
    ///
    /// ```no_run
    /// # use sluicegate_redis::*;
    /// let limit = Limit::parse("token_bucket", "1/s")?;
    /// let rl = blocking::RedisLimiter::new(Backend::from_url("redis://127.0.0.1:1")?, "x", limit, Config::default())?;
    /// assert!(rl.connect().is_err()); // nothing listens on port 1
    /// # Ok::<(), Error>(())
    /// ```
    pub fn connect(&self) -> Result<(), Error> {
        // On a pooled connection, which stays open for the first check.
        if let Some(r) = self.inner.connect_direct() {
            return r;
        }
        if in_runtime() {
            let l = self.inner.clone();
            return hop(
                &self.rt,
                async move { l.connect().await },
                || Err(stopped()),
            );
        }
        self.rt.block_on(self.inner.connect())
    }

    /// See [`crate::RedisLimiter::stats`].
    ///
    /// ```
    /// # use sluicegate_redis::*;
    /// let limit = Limit::parse("token_bucket", "1/s").unwrap();
    /// let rl = blocking::RedisLimiter::new(Backend::from_url("redis://127.0.0.1:1").unwrap(), "x", limit, Config::default()).unwrap();
    /// assert_eq!(rl.stats().policy_answers(), 0);
    /// assert!(rl.last_error().is_none());
    /// ```
    pub fn stats(&self) -> RedisStats {
        self.inner.stats()
    }

    /// See [`crate::RedisLimiter::last_error`].
    ///
    /// ```
    /// # use sluicegate_redis::*;
    /// let limit = Limit::parse("token_bucket", "1/s").unwrap();
    /// let rl = blocking::RedisLimiter::new(Backend::from_url("redis://127.0.0.1:1").unwrap(), "x", limit, Config::default()).unwrap();
    /// assert!(rl.last_error().is_none());
    /// ```
    pub fn last_error(&self) -> Option<Error> {
        self.inner.last_error()
    }

    /// The async limiter this one drives.
    ///
    /// ```
    /// # use sluicegate_redis::*;
    /// # let limit = Limit::parse("token_bucket", "1/s").unwrap();
    /// let rl = blocking::RedisLimiter::new(Backend::from_url("redis://127.0.0.1:1").unwrap(), "x", limit, Config::default()).unwrap();
    /// assert_eq!(rl.as_async().redis_key("k"), "sluicegate:x:token_bucket:{k}");
    /// ```
    pub fn as_async(&self) -> &AsyncLimiter {
        &self.inner
    }

    /// The private runtime this limiter's calls run on. Futures of [`Self::as_async`]
    /// spawned here share the runtime with the blocking calls: the connection's
    /// driver task (spawned where the connection is made), the timers, the
    /// coalescing tasks. The handle does not keep the runtime alive: this limiter
    /// and its clones do.
    ///
    /// ```
    /// # use sluicegate_redis::*;
    /// # let limit = Limit::parse("token_bucket", "1/s").unwrap();
    /// let rl = blocking::RedisLimiter::new(Backend::from_url("redis://127.0.0.1:1").unwrap(), "x", limit, Config::default()).unwrap();
    /// let a = rl.as_async().clone();
    /// let task = rl.handle().spawn(async move { a.redis_key("k") });
    /// assert_eq!(rl.handle().block_on(task).unwrap(), "sluicegate:x:token_bucket:{k}");
    /// ```
    pub fn handle(&self) -> &tokio::runtime::Handle {
        self.rt.handle()
    }

    /// See [`crate::RedisLimiter::limit`].
    ///
    /// ```
    /// # use sluicegate_redis::*;
    /// # let limit = Limit::parse("token_bucket", "1/s").unwrap();
    /// let rl = blocking::RedisLimiter::new(Backend::from_url("redis://127.0.0.1:1").unwrap(), "x", limit, Config::default()).unwrap();
    /// assert_eq!(rl.limit(), &limit);
    /// ```
    pub fn limit(&self) -> &Limit {
        self.inner.limit()
    }

    /// See [`crate::RedisLimiter::check`].
    ///
    /// ```no_run
    /// # fn f(rl: sluicegate_redis::blocking::RedisLimiter) -> Result<(), sluicegate_redis::Error> {
    /// assert!(rl.check("k")?.decision.limit > 0);
    /// # Ok(()) }
    /// ```
    pub fn check(&self, key: &str) -> Result<Verdict, Error> {
        self.check_n(key, 1)
    }

    /// See [`crate::RedisLimiter::check_n`].
    ///
    /// ```no_run
    /// # fn f(rl: sluicegate_redis::blocking::RedisLimiter) -> Result<(), sluicegate_redis::Error> {
    /// assert!(rl.check_n("k", u64::MAX).is_err()); // above capacity: never sent
    /// # Ok(()) }
    /// ```
    pub fn check_n(&self, key: &str, n: u64) -> Result<Verdict, Error> {
        if let Some(v) = self.inner.run_direct(key, n, Mode::Consume) {
            return v;
        }
        if in_runtime() {
            let (l, key) = (self.inner.clone(), key.to_owned());
            return hop(&self.rt, async move { l.check_n(&key, n).await }, || {
                Err(stopped())
            });
        }
        self.rt.block_on(self.inner.check_n(key, n))
    }

    /// See [`crate::RedisLimiter::peek_n`].
    ///
    /// ```no_run
    /// # fn f(rl: sluicegate_redis::blocking::RedisLimiter) -> Result<(), sluicegate_redis::Error> {
    /// let a = rl.peek_n("k", 1)?.decision.remaining;
    /// assert_eq!(rl.peek_n("k", 1)?.decision.remaining, a);
    /// # Ok(()) }
    /// ```
    pub fn peek_n(&self, key: &str, n: u64) -> Result<Verdict, Error> {
        if let Some(v) = self.inner.run_direct(key, n, Mode::Peek) {
            return v;
        }
        if in_runtime() {
            let (l, key) = (self.inner.clone(), key.to_owned());
            return hop(&self.rt, async move { l.peek_n(&key, n).await }, || {
                Err(stopped())
            });
        }
        self.rt.block_on(self.inner.peek_n(key, n))
    }

    /// See [`crate::RedisLimiter::check_many`].
    ///
    /// ```no_run
    /// # fn f(rl: sluicegate_redis::blocking::RedisLimiter) {
    /// assert_eq!(rl.check_many(&[("a", 1), ("b", 2)]).len(), 2);
    /// # }
    /// ```
    pub fn check_many(&self, items: &[(&str, u64)]) -> Vec<Result<Verdict, Error>> {
        if in_runtime() {
            let l = self.inner.clone();
            let owned: Vec<(String, u64)> = items.iter().map(|&(k, n)| (k.to_owned(), n)).collect();
            let count = owned.len();
            return hop(
                &self.rt,
                async move {
                    let refs: Vec<(&str, u64)> =
                        owned.iter().map(|(k, n)| (k.as_str(), *n)).collect();
                    l.check_many(&refs).await
                },
                || (0..count).map(|_| Err(stopped())).collect(),
            );
        }
        self.rt.block_on(self.inner.check_many(items))
    }

    /// See [`crate::RedisLimiter::try_check_n`].
    ///
    /// ```no_run
    /// # fn f(rl: sluicegate_redis::blocking::RedisLimiter) -> Result<(), sluicegate_redis::Error> {
    /// assert!(rl.try_check_n("k", 1)?.now_us > 0);
    /// # Ok(()) }
    /// ```
    pub fn try_check_n(&self, key: &str, n: u64) -> Result<Reply, Error> {
        if let Some(r) = self.inner.call_direct(key, n, Mode::Consume) {
            return r;
        }
        if in_runtime() {
            let (l, key) = (self.inner.clone(), key.to_owned());
            return hop(
                &self.rt,
                async move { l.try_check_n(&key, n).await },
                || Err(stopped()),
            );
        }
        self.rt.block_on(self.inner.try_check_n(key, n))
    }
}

/// The blocking [`crate::HybridLimiter`].
///
/// ```no_run
/// use sluicegate_redis::{blocking, Backend, Config, HybridConfig, Limit};
/// let limit = Limit::parse("token_bucket", "100/s")?;
/// let rl = blocking::RedisLimiter::new(Backend::from_url("redis://127.0.0.1:6379")?, "h", limit, Config::default())?;
/// let h = blocking::HybridLimiter::new(rl, HybridConfig::default())?;
/// assert!(h.check("k")?.decision.allowed);
/// # Ok::<(), sluicegate_redis::Error>(())
/// ```
#[derive(Clone, Debug)]
pub struct HybridLimiter {
    rt: Arc<Private>,
    inner: AsyncHybrid,
}

impl HybridLimiter {
    /// See [`crate::HybridLimiter::new`].
    ///
    /// ```
    /// # use sluicegate_redis::*;
    /// # let limit = Limit::parse("token_bucket", "100/s").unwrap();
    /// let rl = blocking::RedisLimiter::new(Backend::from_url("redis://127.0.0.1:1").unwrap(), "x", limit, Config::default()).unwrap();
    /// let h = blocking::HybridLimiter::new(rl, HybridConfig::default()).unwrap();
    /// assert_eq!(h.stats().local, 0);
    /// ```
    pub fn new(remote: RedisLimiter, cfg: HybridConfig) -> Result<Self, Error> {
        Ok(Self {
            inner: AsyncHybrid::new(remote.inner, cfg)?,
            rt: remote.rt,
        })
    }

    /// The async limiter this one drives ([`crate::HybridLimiter`]), sharing its
    /// leases and its Redis connection. Its futures belong on [`Self::handle`],
    /// the runtime that drives the connection (see [`RedisLimiter::handle`]).
    ///
    /// ```
    /// # use sluicegate_redis::*;
    /// # let limit = Limit::parse("token_bucket", "100/s").unwrap();
    /// let rl = blocking::RedisLimiter::new(Backend::from_url("redis://127.0.0.1:1").unwrap(), "x", limit, Config::default()).unwrap();
    /// let h = blocking::HybridLimiter::new(rl, HybridConfig::default()).unwrap();
    /// assert!(h.as_async().check_local("k", 1).unwrap().is_none()); // no lease yet
    /// ```
    pub fn as_async(&self) -> &AsyncHybrid {
        &self.inner
    }

    /// The private runtime this limiter's calls run on (the same as its
    /// [`RedisLimiter::handle`]).
    ///
    /// ```
    /// # use sluicegate_redis::*;
    /// # let limit = Limit::parse("token_bucket", "100/s").unwrap();
    /// let rl = blocking::RedisLimiter::new(Backend::from_url("redis://127.0.0.1:1").unwrap(), "x", limit, Config::default()).unwrap();
    /// let h = blocking::HybridLimiter::new(rl, HybridConfig::default()).unwrap();
    /// assert_eq!(h.handle().block_on(async { 7 }), 7);
    /// ```
    pub fn handle(&self) -> &tokio::runtime::Handle {
        self.rt.handle()
    }

    /// See [`crate::HybridLimiter::answers_locally`]: whether [`Self::check_n`]
    /// would answer `n` units for `key` without a round trip now.
    ///
    /// ```
    /// # use sluicegate_redis::*;
    /// # let limit = Limit::parse("token_bucket", "100/s").unwrap();
    /// let rl = blocking::RedisLimiter::new(Backend::from_url("redis://127.0.0.1:1").unwrap(), "x", limit, Config::default()).unwrap();
    /// let h = blocking::HybridLimiter::new(rl, HybridConfig::default()).unwrap();
    /// assert!(!h.answers_locally("k", 1));
    /// ```
    pub fn answers_locally(&self, key: &str, n: u64) -> bool {
        self.inner.answers_locally(key, n)
    }

    /// See [`crate::HybridLimiter::check_n`].
    ///
    /// ```no_run
    /// # fn f(h: sluicegate_redis::blocking::HybridLimiter) -> Result<(), sluicegate_redis::Error> {
    /// assert!(h.check_n("k", 1)?.decision.limit > 0);
    /// # Ok(()) }
    /// ```
    pub fn check_n(&self, key: &str, n: u64) -> Result<Verdict, Error> {
        // Spent from a lease, or denied by the front: no runtime involved.
        if n == 0 {
            return self.run(
                key,
                move |h, key| async move { h.check_n_remote(&key, 0).await },
            );
        }
        if let Some(v) = self.inner.check_local(key, n)? {
            return Ok(v);
        }
        let route = self.inner.route(key);
        // A cold key's plain check, on this thread's own connection when the
        // pool has one: as the `redis` backend's check.
        if let Route::Direct { t0 } = route {
            if let Some(r) = self.inner.remote().call_direct(key, n, Mode::Consume) {
                self.inner.counted_round_trip();
                return self.inner.direct_answer(key, n, t0, r);
            }
        }
        self.run(key, move |h, key| async move {
            h.check_routed(&key, n, route).await
        })
    }

    /// `f(limiter, key)` on the limiter's runtime, waited for on this thread.
    fn run<F>(&self, key: &str, f: impl FnOnce(AsyncHybrid, String) -> F) -> Result<Verdict, Error>
    where
        F: std::future::Future<Output = Result<Verdict, Error>> + Send + 'static,
    {
        let fut = f(self.inner.clone(), key.to_owned());
        if in_runtime() {
            return hop(&self.rt, fut, || Err(stopped()));
        }
        self.rt.block_on(fut)
    }

    /// See [`crate::HybridLimiter::check`].
    ///
    /// ```no_run
    /// # fn f(h: sluicegate_redis::blocking::HybridLimiter) -> Result<(), sluicegate_redis::Error> {
    /// assert!(h.check("k")?.decision.limit > 0);
    /// # Ok(()) }
    /// ```
    pub fn check(&self, key: &str) -> Result<Verdict, Error> {
        self.check_n(key, 1)
    }

    /// See [`crate::HybridLimiter::stats`].
    ///
    /// ```
    /// # use sluicegate_redis::*;
    /// # let limit = Limit::parse("token_bucket", "100/s").unwrap();
    /// # let rl = blocking::RedisLimiter::new(Backend::from_url("redis://127.0.0.1:1").unwrap(), "x", limit, Config::default()).unwrap();
    /// let h = blocking::HybridLimiter::new(rl, HybridConfig::default()).unwrap();
    /// assert_eq!(h.stats().round_trips, 0);
    /// ```
    pub fn stats(&self) -> HybridStats {
        self.inner.stats()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A policy reload or a server's shutdown drops its Redis limiters on an
    /// async task: the private runtime must not panic there ("Cannot drop a
    /// runtime in a context where blocking is not allowed").
    #[test]
    fn the_last_handle_dropped_inside_another_runtime_does_not_panic() {
        let limit = Limit::parse("token_bucket", "1/s").unwrap();
        let backend = crate::Backend::from_url("redis://127.0.0.1:1").unwrap();
        let rl = RedisLimiter::new(backend, "drop", limit, Config::default()).unwrap();
        let hybrid = HybridLimiter::new(rl.clone(), HybridConfig::default()).unwrap();
        for flavor in ["current_thread", "multi_thread"] {
            let outer = if flavor == "current_thread" {
                tokio::runtime::Builder::new_current_thread().build()
            } else {
                tokio::runtime::Builder::new_multi_thread().build()
            }
            .unwrap();
            let (rl, hybrid) = (rl.clone(), hybrid.clone());
            outer.block_on(async move {
                drop(hybrid);
                drop(rl);
            });
        }
        // The last handles: dropped inside a runtime, so shut down in the background.
        let outer = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        outer.block_on(async move {
            drop(hybrid);
            drop(rl);
        });
    }
}
