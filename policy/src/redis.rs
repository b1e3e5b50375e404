//! Redis for policies (feature `redis`): the one factory of `redis` and `hybrid`
//! rules ([`RedisFactory`]), and the policy's Redis source ([`RedisSource`]: the
//! rule file's text under a key, changes announced on a channel).
//!
//! A rule on `redis` is one [`sluicegate_redis::RedisLimiter`] named
//! `policy:<rule>` (its keys `{prefix}policy:<rule>:<algorithm>:{<key>}`); on
//! `hybrid` the same with a [`sluicegate_redis::HybridLimiter`] in front (leases
//! spent locally). When Redis fails the limiter reports it as a
//! [`BackendError`] and the policy applies the rule's `on_error` (and counts a
//! backend error in the rule's metrics): `open`, `closed`, or `local` (the rule's
//! limit decided in this process alone).
//!
//! ```no_run
//! use std::sync::Arc;
//! use std::time::Duration;
//! use sluicegate_policy::redis::{RedisFactory, RedisSource};
//! use sluicegate_policy::Policy;
//!
//! let source = RedisSource::new("redis://127.0.0.1:6379", "rules", "rules-changed")?;
//! source.publish("[redis]\nurl = \"redis://127.0.0.1:6379\"\n\n[[rule]]\nname = \"all\"\nlimit = \"100/s\"\nbackend = \"hybrid\"\n")?;
//! let policy = Arc::new(source.load(Policy::builder().remote(RedisFactory::default()))?);
//! let _watch = source.watch(policy.clone(), Duration::from_secs(1))?; // reloads on every publish
//! assert!(policy.check(&[("ip", "192.0.2.1")]).allowed());
//! # Ok::<(), sluicegate_policy::redis::SourceError>(())
//! ```

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use sluicegate::{Decision, Outcome, Spec};
use sluicegate_redis::{
    Backend as RedisBackend, Config, Error as RedisError, FailurePolicy, HybridConfig, Limit,
    RedisLimiter as AsyncLimiter, Reply, Source, Verdict, blocking,
};

use crate::backend::{BackendError, RemoteFactory, RemoteFuture, RemoteLimiter};
use crate::def::{Backend, RedisSettings, RuleDef};
use crate::policy::{Policy, PolicyBuilder};
use crate::reload::Worker;

/// Builds the limiter of every `redis` and `hybrid` rule: hand it to
/// [`PolicyBuilder::remote`].
///
/// ```
/// use sluicegate_policy::{redis::RedisFactory, Policy};
/// let text = "[redis]\nurl = \"redis://127.0.0.1:1\"\n[[rule]]\nname = \"r\"\nlimit = \"5/s\"\nbackend = \"redis\"\non_error = \"closed\"\n";
/// let p = Policy::builder().remote(RedisFactory::default()).from_toml(text)?;
/// // Nothing listens on port 1: the rule's on_error answers, counted as a backend error.
/// let d = p.check_n_at(&[("ip", "1")], 1, 0);
/// assert!(!d.allowed());
/// assert_eq!(p.metrics_at(0)[0].backend_errors, 1);
/// # Ok::<(), sluicegate_policy::Error>(())
/// ```
#[derive(Clone, Debug)]
pub struct RedisFactory {
    config: Config,
    hybrid: HybridConfig,
}

impl Default for RedisFactory {
    /// Timeouts, breaker and pipelining of [`Config::default`], leases of
    /// [`HybridConfig::default`].
    fn default() -> Self {
        Self {
            config: Config::default(),
            hybrid: HybridConfig::default(),
        }
    }
}

impl RedisFactory {
    /// A factory whose limiters use `config`'s timeouts, breaker and pipelining
    /// (its prefix and failure policy are the policy's: `[redis] prefix`, the
    /// rule's `on_error`) and `hybrid`'s lease settings.
    ///
    /// ```
    /// use std::time::Duration;
    /// use sluicegate_policy::redis::RedisFactory;
    /// use sluicegate_redis::{Config, HybridConfig};
    /// let f = RedisFactory::new(Config { timeout: Duration::from_millis(5), ..Config::default() }, HybridConfig::default());
    /// assert_eq!(f.config().timeout, Duration::from_millis(5));
    /// ```
    pub fn new(config: Config, hybrid: HybridConfig) -> Self {
        Self { config, hybrid }
    }

    /// The settings each rule's limiter starts from.
    ///
    /// ```
    /// # use sluicegate_policy::redis::RedisFactory;
    /// assert_eq!(RedisFactory::default().config().timeout, sluicegate_redis::Config::default().timeout);
    /// ```
    pub fn config(&self) -> &Config {
        &self.config
    }
}

fn failed(e: impl fmt::Display) -> BackendError {
    BackendError(e.to_string())
}

impl RemoteFactory for RedisFactory {
    fn build(
        &self,
        rule: &RuleDef,
        redis: &RedisSettings,
    ) -> Result<Box<dyn RemoteLimiter>, BackendError> {
        let limit = Limit::from_spec(rule.spec()).map_err(failed)?;
        // The policy applies the rule's on_error: the limiter only reports.
        let cfg = Config {
            prefix: redis.prefix.clone(),
            policy: FailurePolicy::Closed,
            ..self.config.clone()
        };
        let backend = RedisBackend::from_url(&redis.url).map_err(failed)?;
        let name = format!("policy:{}", rule.name());
        let remote = blocking::RedisLimiter::new(backend, &name, limit, cfg).map_err(failed)?;
        let hybrid = match rule.backend() {
            Backend::Hybrid => {
                // The rule file's lease settings, else the factory's.
                let hc = HybridConfig {
                    horizon: redis.lease_horizon.unwrap_or(self.hybrid.horizon),
                    lease_ttl: redis.lease_ttl.unwrap_or(self.hybrid.lease_ttl),
                    ..self.hybrid
                };
                Some(blocking::HybridLimiter::new(remote.clone(), hc).map_err(failed)?)
            }
            _ => None,
        };
        Ok(Box::new(Remote { remote, hybrid }))
    }
}

/// One rule's Redis limiter, and its lease front on `hybrid`.
struct Remote {
    remote: blocking::RedisLimiter,
    hybrid: Option<blocking::HybridLimiter>,
}

/// A plain check's reply as the rule's outcome: straight from Redis, so a
/// failure is an error, never a failure policy's answer.
fn from_reply(reply: Result<Reply, RedisError>) -> Result<Outcome, BackendError> {
    match reply {
        Ok(r) => Ok(Outcome {
            decision: r.decision,
            delay_ns: r.delay_ns,
        }),
        Err(RedisError::Capacity(c)) => Ok(Outcome {
            decision: Decision::never(c.capacity),
            delay_ns: 0,
        }),
        Err(e) => Err(failed(e)),
    }
}

/// A hybrid check's or a peek's verdict as the rule's outcome; `remote` says
/// why Redis failed when the limiter's own (closed) failure policy answered.
fn from_verdict(
    verdict: Result<Verdict, RedisError>,
    consume: bool,
    remote: &AsyncLimiter,
) -> Result<Outcome, BackendError> {
    match verdict {
        // Decided by Redis, or locally from what Redis granted.
        Ok(v)
            if matches!(
                v.source,
                Source::Redis | Source::Lease | Source::LocalDenial
            ) =>
        {
            Ok(Outcome {
                decision: v.decision,
                delay_ns: if consume { v.delay_ns } else { 0 },
            })
        }
        // The limiter's own (closed) failure policy answered: Redis failed.
        Ok(_) => Err(BackendError(match remote.last_error() {
            Some(e) => format!("redis unavailable: {e}"),
            None => "redis unavailable".to_owned(),
        })),
        Err(RedisError::Capacity(c)) => Ok(Outcome {
            decision: Decision::never(c.capacity),
            delay_ns: 0,
        }),
        Err(e) => Err(failed(e)),
    }
}

impl RemoteLimiter for Remote {
    fn check_n(&self, key: &str, n: u64, consume: bool) -> Result<Outcome, BackendError> {
        let remote = self.remote.as_async();
        match (consume, &self.hybrid) {
            (true, None) => from_reply(self.remote.try_check_n(key, n)),
            (true, Some(h)) => from_verdict(h.check_n(key, n), true, remote),
            (false, _) => from_verdict(self.remote.peek_n(key, n), false, remote),
        }
    }

    /// A lease hit (or a cached denial) answers at once; a round trip runs on
    /// the limiter's own runtime, which drives its multiplexed connection (so
    /// the connection never depends on the caller's runtime staying up), and
    /// concurrent checks pipeline on it. Dropping the future does not recall a
    /// call already sent: Redis may still charge it.
    fn check_n_async(&self, key: &str, n: u64, consume: bool) -> RemoteFuture {
        let remote = self.remote.as_async().clone();
        if let (true, Some(h)) = (consume, &self.hybrid) {
            let local = match h.as_async().check_local(key, n) {
                Ok(None) => None,
                Ok(Some(v)) => Some(Ok(v)),
                Err(e) => Some(Err(e)),
            };
            if let Some(v) = local {
                return Box::pin(std::future::ready(from_verdict(v, true, &remote)));
            }
        }
        let hybrid = self.hybrid.as_ref().map(|h| h.as_async().clone());
        let key = key.to_owned();
        let task = self.remote.handle().spawn(async move {
            match (consume, hybrid) {
                (true, None) => from_reply(remote.try_check_n(&key, n).await),
                // `check_local` answered nothing above.
                (true, Some(h)) => from_verdict(h.check_n_remote(&key, n).await, true, &remote),
                (false, _) => from_verdict(remote.peek_n(&key, n).await, false, &remote),
            }
        });
        Box::pin(async move {
            task.await.unwrap_or_else(|e| {
                Err(BackendError(format!(
                    "the Redis runtime lost the check: {e}"
                )))
            })
        })
    }

    fn set_spec(&self, _spec: &Spec) -> Result<(), BackendError> {
        Err(BackendError(
            "a Redis rule's limit cannot change in place: the rule is rebuilt".into(),
        ))
    }

    fn answers_locally(&self, key: &str, n: u64) -> bool {
        self.hybrid
            .as_ref()
            .is_some_and(|h| h.answers_locally(key, n))
    }
}

/// Why the Redis source failed.
#[derive(Debug)]
#[non_exhaustive]
pub enum SourceError {
    /// The URL, the connection or a command failed.
    Redis(::redis::RedisError),
    /// The key holds no policy text.
    Missing {
        /// The key.
        key: String,
    },
    /// The text is not a valid policy.
    Policy(crate::Error),
}

impl fmt::Display for SourceError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Redis(e) => write!(f, "policy source on Redis: {e}"),
            Self::Missing { key } => write!(f, "policy source on Redis: no text under key {key:?}"),
            Self::Policy(e) => write!(f, "policy source on Redis: {e}"),
        }
    }
}

impl std::error::Error for SourceError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Redis(e) => Some(e),
            Self::Policy(e) => Some(e),
            Self::Missing { .. } => None,
        }
    }
}

impl From<::redis::RedisError> for SourceError {
    fn from(e: ::redis::RedisError) -> Self {
        Self::Redis(e)
    }
}

impl From<crate::Error> for SourceError {
    fn from(e: crate::Error) -> Self {
        Self::Policy(e)
    }
}

/// The longest connecting to the source's server may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
/// How often a watcher waiting for a notice looks at its stop flag.
const TICK: Duration = Duration::from_millis(100);

/// A policy stored in Redis: the TOML text under `key`, each change announced on
/// `channel` (any message: the watchers read the key again). A fleet of
/// watchers reloads together, within a round trip of the announcement.
///
/// ```
/// use sluicegate_policy::redis::RedisSource;
/// let s = RedisSource::new("redis://127.0.0.1:6379", "sluicegate:policy", "sluicegate:policy:changed")?;
/// assert_eq!(s.key(), "sluicegate:policy");
/// assert!(RedisSource::new("http://127.0.0.1", "k", "c").is_err());
/// # Ok::<(), sluicegate_policy::redis::SourceError>(())
/// ```
#[derive(Clone, Debug)]
pub struct RedisSource {
    client: ::redis::Client,
    key: String,
    channel: String,
}

impl RedisSource {
    /// The source at `url` (`redis://`, `rediss://` with the `tls` build of
    /// sluicegate-redis, `unix://`). Nothing is contacted yet.
    ///
    /// ```
    /// # use sluicegate_policy::redis::RedisSource;
    /// assert!(RedisSource::new("redis://127.0.0.1:6379/0", "k", "c").is_ok());
    /// ```
    pub fn new(url: &str, key: &str, channel: &str) -> Result<Self, SourceError> {
        Ok(Self {
            client: ::redis::Client::open(url)?,
            key: key.to_owned(),
            channel: channel.to_owned(),
        })
    }

    /// The key the text is stored under.
    ///
    /// ```
    /// # use sluicegate_policy::redis::RedisSource;
    /// assert_eq!(RedisSource::new("redis://127.0.0.1", "k", "c")?.key(), "k");
    /// # Ok::<(), sluicegate_policy::redis::SourceError>(())
    /// ```
    pub fn key(&self) -> &str {
        &self.key
    }

    fn connection(&self) -> Result<::redis::Connection, SourceError> {
        Ok(self.client.get_connection_with_timeout(CONNECT_TIMEOUT)?)
    }

    /// The text stored now.
    ///
    /// ```no_run
    /// # use sluicegate_policy::redis::RedisSource;
    /// let s = RedisSource::new("redis://127.0.0.1:6379", "rules", "rules-changed")?;
    /// s.publish("")?;
    /// assert_eq!(s.fetch()?, "");
    /// # Ok::<(), sluicegate_policy::redis::SourceError>(())
    /// ```
    pub fn fetch(&self) -> Result<String, SourceError> {
        let text: Option<String> = ::redis::cmd("GET")
            .arg(&self.key)
            .query(&mut self.connection()?)?;
        text.ok_or_else(|| SourceError::Missing {
            key: self.key.clone(),
        })
    }

    /// Stores `text` under the key and announces it on the channel (what an
    /// operator's deploy step does; `redis-cli SET` + `PUBLISH` is the same).
    /// Nothing validates it here: every watcher does, and keeps its policy when
    /// the text is invalid.
    ///
    /// ```no_run
    /// # use sluicegate_policy::redis::RedisSource;
    /// let s = RedisSource::new("redis://127.0.0.1:6379", "rules", "rules-changed")?;
    /// s.publish("[[rule]]\nname = \"a\"\nlimit = \"1/s\"\n")?;
    /// assert!(s.fetch()?.contains("1/s"));
    /// # Ok::<(), sluicegate_policy::redis::SourceError>(())
    /// ```
    pub fn publish(&self, text: &str) -> Result<(), SourceError> {
        let mut c = self.connection()?;
        ::redis::pipe()
            .atomic()
            .cmd("SET")
            .arg(&self.key)
            .arg(text)
            .ignore()
            .cmd("PUBLISH")
            .arg(&self.channel)
            .arg(&self.key)
            .ignore()
            .query::<()>(&mut c)?;
        Ok(())
    }

    /// A policy from the text stored now, built by `builder` (with
    /// [`RedisFactory`] for Redis-backed rules).
    ///
    /// ```no_run
    /// # use sluicegate_policy::{redis::RedisSource, Policy};
    /// let s = RedisSource::new("redis://127.0.0.1:6379", "rules", "rules-changed")?;
    /// s.publish("[[rule]]\nname = \"a\"\nlimit = \"1/s\"\n")?;
    /// assert_eq!(s.load(Policy::builder())?.definition().rules().len(), 1);
    /// # Ok::<(), sluicegate_policy::redis::SourceError>(())
    /// ```
    pub fn load(&self, builder: PolicyBuilder) -> Result<Policy, SourceError> {
        Ok(builder.from_toml(&self.fetch()?)?)
    }

    /// Reloads `policy` whenever the channel announces a change (and every
    /// `poll`, in case a notice was missed while disconnected), on a thread of
    /// its own, until the watcher is dropped. A text that differs from the last
    /// one seen is reloaded: valid, it is in force at once (unchanged rules keep
    /// their state); invalid, the policy in force stays and records the error
    /// ([`Policy::last_error`]). The text stored now is the baseline (the policy
    /// should have been loaded from it). A lost connection is retried.
    ///
    /// ```no_run
    /// # use std::{sync::Arc, time::Duration};
    /// # use sluicegate_policy::{redis::RedisSource, Policy};
    /// let s = RedisSource::new("redis://127.0.0.1:6379", "rules", "rules-changed")?;
    /// s.publish("[[rule]]\nname = \"a\"\nlimit = \"1/s\"\n")?;
    /// let p = Arc::new(s.load(Policy::builder())?);
    /// let w = s.watch(p.clone(), Duration::from_secs(1))?;
    /// s.publish("[[rule]]\nname = \"b\"\nlimit = \"1/s\"\n")?;
    /// std::thread::sleep(Duration::from_millis(200));
    /// assert_eq!(p.definition().rules()[0].name(), "b");
    /// w.stop();
    /// # Ok::<(), sluicegate_policy::redis::SourceError>(())
    /// ```
    pub fn watch(&self, policy: Arc<Policy>, poll: Duration) -> Result<RedisWatcher, SourceError> {
        let baseline = match self.fetch() {
            Ok(t) => Some(t),
            Err(SourceError::Missing { .. }) => None,
            Err(e) => return Err(e),
        };
        let source = self.clone();
        let worker = Worker::spawn("sluicegate-policy-redis", move |stop| {
            Watch {
                source,
                policy,
                last: baseline,
                stop,
                poll: poll.max(TICK),
            }
            .run();
        })
        .map_err(|e| SourceError::Redis(::redis::RedisError::from(e)))?;
        Ok(RedisWatcher { worker })
    }
}

/// The watching thread's state.
struct Watch {
    source: RedisSource,
    policy: Arc<Policy>,
    last: Option<String>,
    stop: Arc<AtomicBool>,
    poll: Duration,
}

impl Watch {
    fn run(&mut self) {
        while !self.stop.load(Ordering::Acquire) {
            if let Err(e) = self.session() {
                log::warn!(
                    "sluicegate policy: Redis source {:?}: {e}; retrying",
                    self.source.key
                );
                std::thread::park_timeout(TICK.max(self.poll / 4));
            }
        }
    }

    /// One connection's life: subscribe, read the key (a change between the
    /// baseline and the subscription is not missed), then reload on each notice.
    fn session(&mut self) -> Result<(), SourceError> {
        let mut reader = self.source.connection()?;
        let mut sub = self.source.connection()?;
        let mut pubsub = sub.as_pubsub();
        pubsub.subscribe(&self.source.channel)?;
        pubsub.set_read_timeout(Some(TICK))?;
        self.refresh(&mut reader)?;
        let mut next_poll = Instant::now() + self.poll;
        while !self.stop.load(Ordering::Acquire) {
            match pubsub.get_message() {
                Ok(_) => self.refresh(&mut reader)?,
                Err(e) if e.is_timeout() => {}
                Err(e) => return Err(e.into()),
            }
            if Instant::now() >= next_poll {
                self.refresh(&mut reader)?;
                next_poll = Instant::now() + self.poll;
            }
        }
        Ok(())
    }

    /// Reloads when the stored text differs from the last seen.
    fn refresh(&mut self, c: &mut ::redis::Connection) -> Result<(), SourceError> {
        let text: Option<String> = ::redis::cmd("GET").arg(&self.source.key).query(c)?;
        if let Some(text) = text {
            if self.last.as_deref() != Some(text.as_str()) {
                // Invalid text: the policy in force stays and records why.
                let _ = self.policy.reload_from_toml(&text);
                self.last = Some(text);
            }
        }
        Ok(())
    }
}

/// A running [`RedisSource::watch`]; stops (and joins its thread, within about
/// 100 ms) when dropped.
pub struct RedisWatcher {
    worker: Worker,
}

impl fmt::Debug for RedisWatcher {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisWatcher").finish_non_exhaustive()
    }
}

impl RedisWatcher {
    /// Stops watching and waits for the thread to end.
    ///
    /// ```no_run
    /// # use std::{sync::Arc, time::Duration};
    /// # use sluicegate_policy::{redis::RedisSource, Policy};
    /// let s = RedisSource::new("redis://127.0.0.1:6379", "rules", "rules-changed")?;
    /// let w = s.watch(Arc::new(Policy::from_toml("")?), Duration::from_secs(1))?;
    /// w.stop();
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn stop(mut self) {
        self.worker.halt();
    }
}
