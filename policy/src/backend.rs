//! The factory: a rule's [`Spec`] and backend → the limiter that holds its state.
//!
//! Local rules are built here: a keyed table for a keyed rule, one [`AnyLimiter`]
//! for a keyless one, striped when the rule asks for stripes. Rules on `redis` or
//! `hybrid` are built by a [`RemoteFactory`] the application hands to
//! [`crate::PolicyBuilder::remote`] (the Redis tier implements it); the policy
//! applies the rule's `on_error` when that limiter reports a failure.

use std::fmt;
use std::future::Future;
use std::hash::Hash;
use std::pin::Pin;

use sluicegate::keyed::Pool;
use sluicegate::{AnyLimiter, InsufficientCapacity, Outcome, Receipt, Spec, SpecError};

use crate::def::{Backend, OnError, RedisSettings, RuleDef};
use crate::table::KeyedTable;

/// A shared backend's failure (connection lost, timeout, open breaker): the
/// rule's `on_error` decides instead.
///
/// ```
/// use sluicegate_policy::BackendError;
/// let e = BackendError("timed out after 25 ms".into());
/// assert_eq!(e.to_string(), "backend error: timed out after 25 ms");
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BackendError(pub String);

impl fmt::Display for BackendError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "backend error: {}", self.0)
    }
}

impl std::error::Error for BackendError {}

/// The answer of [`RemoteLimiter::check_n_async`]: a boxed future that owns
/// what it needs (the key is copied in), so a policy's async check can await it
/// on any runtime and move between threads.
///
/// ```
/// use sluicegate_policy::{BackendError, RemoteFuture};
/// let key = String::from("tenant-7"); // owned: the future outlives the call
/// let f: RemoteFuture = Box::pin(async move { Err(BackendError(format!("{key}: down"))) });
/// let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
/// assert_eq!(rt.block_on(f), Err(BackendError("tenant-7: down".into())));
/// ```
pub type RemoteFuture = Pin<Box<dyn Future<Output = Result<Outcome, BackendError>> + Send>>;

/// One rule's limiter on a shared backend (Redis, hybrid): the seam the Redis tier
/// implements.
///
/// `key` is the rule's key as text, the same in every process (the `key`
/// attributes' values joined by `|`; empty for a keyless rule). `consume = false`
/// is a peek (what a check of `n` would answer, charging nothing).
///
/// ```
/// use std::sync::atomic::{AtomicU64, Ordering};
/// use sluicegate::{Decision, Outcome, Spec};
/// use sluicegate_policy::{BackendError, RemoteLimiter};
/// /// Admits the first `limit` units ever, per process (a toy).
/// struct Counter { used: AtomicU64, limit: u64 }
/// impl RemoteLimiter for Counter {
///     fn check_n(&self, _key: &str, n: u64, consume: bool) -> Result<Outcome, BackendError> {
///         let used = self.used.load(Ordering::SeqCst);
///         let allowed = used + n <= self.limit;
///         if allowed && consume { self.used.fetch_add(n, Ordering::SeqCst); }
///         let left = self.limit - used - if allowed && consume { n } else { 0 };
///         let decision = Decision { allowed, remaining: left, retry_after_ns: 0, reset_after_ns: 0, limit: self.limit };
///         Ok(Outcome { decision, delay_ns: 0 })
///     }
///     fn set_spec(&self, _spec: &Spec) -> Result<(), BackendError> {
///         Err(BackendError("rebuild me".into()))
///     }
/// }
/// let c = Counter { used: AtomicU64::new(0), limit: 1 };
/// assert!(c.check_n("", 1, true)?.decision.allowed);
/// assert!(!c.check_n("", 1, true)?.decision.allowed);
/// # Ok::<(), BackendError>(())
/// ```
pub trait RemoteLimiter: Send + Sync {
    /// Checks (or peeks at) `n` units for `key`.
    fn check_n(&self, key: &str, n: u64, consume: bool) -> Result<Outcome, BackendError>;
    /// New quotas on reload, state kept; an error makes the policy build the rule
    /// anew with [`RemoteFactory::build`].
    fn set_spec(&self, spec: &Spec) -> Result<(), BackendError>;
    /// Whether a check of `n` units for `key` would be answered now without
    /// waiting for the backend (e.g. from a hybrid rule's lease), spending
    /// nothing. The default, `false`, suits a limiter that asks its backend every
    /// time. See [`crate::Policy::may_wait_n`].
    #[deprecated(
        since = "0.1.0",
        note = "only `Policy::may_wait_n` asked it; an async caller awaits `Policy::check_n_async`, which awaits `check_n_async`"
    )]
    fn answers_locally(&self, _key: &str, _n: u64) -> bool {
        false
    }
    /// [`Self::check_n`] as a future, for [`crate::Policy::check_n_async`]: a
    /// limiter that waits for its backend overrides it so the caller's thread is
    /// never blocked (the Redis tier's does; a hybrid lease hit answers at once).
    /// The default answers with [`Self::check_n`], on the calling thread.
    ///
    /// If the future is dropped before it completes, the backend may or may not
    /// have charged the units: it keeps no receipts (see the policy's
    /// cancellation notes in [`crate::Policy::check_n_at_into_async`]).
    ///
    /// ```
    /// use sluicegate::{AnyLimiter, Outcome, Spec};
    /// use sluicegate_policy::{BackendError, RemoteFuture, RemoteLimiter};
    /// struct One(AnyLimiter<()>);
    /// impl RemoteLimiter for One {
    ///     fn check_n(&self, _key: &str, n: u64, consume: bool) -> Result<Outcome, BackendError> {
    ///         let r = if consume { self.0.check_n_at(n, 0) } else { self.0.peek_n_at(n, 0) };
    ///         r.map_err(|e| BackendError(e.to_string()))
    ///     }
    ///     fn set_spec(&self, _spec: &Spec) -> Result<(), BackendError> { Ok(()) }
    /// }
    /// let one = One(AnyLimiter::with_clock(&Spec::parse(sluicegate::Kind::FixedWindow, "1/s").unwrap(), ()).unwrap());
    /// let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
    /// assert!(rt.block_on(one.check_n_async("", 1, true))?.decision.allowed);
    /// assert!(!rt.block_on(one.check_n_async("", 1, true))?.decision.allowed);
    /// # Ok::<(), BackendError>(())
    /// ```
    fn check_n_async(&self, key: &str, n: u64, consume: bool) -> RemoteFuture {
        Box::pin(std::future::ready(self.check_n(key, n, consume)))
    }
}

/// Builds the limiters of `redis` and `hybrid` rules from the rule and the
/// policy's `[redis]` table.
///
/// ```
/// use sluicegate::{AnyLimiter, Outcome, Spec};
/// use sluicegate_policy::{BackendError, Policy, RedisSettings, RemoteFactory, RemoteLimiter, RuleDef};
/// /// Runs "remote" rules in this process (e.g. for tests without Redis).
/// struct InProcess;
/// struct One(AnyLimiter<()>);
/// impl RemoteLimiter for One {
///     fn check_n(&self, _key: &str, n: u64, consume: bool) -> Result<Outcome, BackendError> {
///         let r = if consume { self.0.check_n_at(n, 0) } else { self.0.peek_n_at(n, 0) };
///         r.map_err(|e| BackendError(e.to_string()))
///     }
///     fn set_spec(&self, spec: &Spec) -> Result<(), BackendError> {
///         self.0.set_spec(spec).map_err(|e| BackendError(e.to_string()))
///     }
/// }
/// impl RemoteFactory for InProcess {
///     fn build(&self, rule: &RuleDef, _redis: &RedisSettings) -> Result<Box<dyn RemoteLimiter>, BackendError> {
///         let l = AnyLimiter::with_clock(rule.spec(), ()).map_err(|e| BackendError(e.to_string()))?;
///         Ok(Box::new(One(l)))
///     }
/// }
/// let text = "[redis]\nurl = \"redis://127.0.0.1\"\n[[rule]]\nname = \"r\"\nlimit = \"1/minute\"\nbackend = \"redis\"\n";
/// let policy = Policy::builder().remote(InProcess).from_toml(text)?;
/// assert!(policy.check_n_at(&[("ip", "1")], 1, 0).allowed());
/// assert!(!policy.check_n_at(&[("ip", "2")], 1, 0).allowed());
/// # Ok::<(), sluicegate_policy::Error>(())
/// ```
pub trait RemoteFactory: Send + Sync {
    /// The limiter of `rule` (whose backend is `redis` or `hybrid`).
    fn build(
        &self,
        rule: &RuleDef,
        redis: &RedisSettings,
    ) -> Result<Box<dyn RemoteLimiter>, BackendError>;
}

/// Where one rule's state lives.
pub(crate) enum Limiter {
    One(AnyLimiter<()>),
    Keyed(KeyedTable),
    Remote {
        remote: Box<dyn RemoteLimiter>,
        on_error: OnError,
        /// `on_error = "local"`: the rule's limit, decided in this process alone.
        local: Option<Box<Limiter>>,
        /// The rule's capacity, for the decisions `on_error` makes.
        limit: u64,
    },
}

/// What a check of one rule answered.
pub(crate) enum Answer {
    Decided(Outcome),
    /// The shared backend failed and `on_error` decided.
    Fallback(Outcome),
}

impl Limiter {
    /// The local limiter for `rule` (its backend ignored); a keyed rule's keys
    /// live in `pool` (the policy has one whenever it has a keyed rule). In a
    /// pool in caller memory (a shared-memory region) an unkeyed rule lives
    /// there too, so that every process sharing it counts together: one word
    /// of the region for one quota (stripes are a process's own, so none),
    /// one key of a one-key table for several.
    pub(crate) fn local(rule: &RuleDef, pool: Option<&Pool>) -> Result<Limiter, String> {
        let spec = rule.spec();
        let err = |e: SpecError| e.to_string();
        Ok(if !rule.key().is_empty() {
            let pool = pool.ok_or("a keyed rule needs the policy's keyed state")?;
            Limiter::Keyed(KeyedTable::new(pool, spec, rule.capacity()).map_err(err)?)
        } else if let Some(shared) = pool.filter(|p| p.in_caller_memory()) {
            if let [_] = spec.quotas() {
                Limiter::One(AnyLimiter::in_pool(shared, spec, ()).map_err(err)?)
            } else {
                Limiter::Keyed(KeyedTable::new(shared, spec, 1).map_err(err)?)
            }
        } else if rule.stripes() > 1 {
            Limiter::One(AnyLimiter::striped(spec, rule.stripes(), ()).map_err(err)?)
        } else {
            Limiter::One(AnyLimiter::with_clock(spec, ()).map_err(err)?)
        })
    }

    pub(crate) fn build(
        rule: &RuleDef,
        redis: Option<&RedisSettings>,
        remote: Option<&dyn RemoteFactory>,
        pool: Option<&Pool>,
    ) -> Result<Limiter, String> {
        if rule.backend() == Backend::Local {
            return Limiter::local(rule, pool);
        }
        let (Some(factory), Some(redis)) = (remote, redis) else {
            return Err(format!(
                "backend `{}` needs a Redis factory: build the policy with PolicyBuilder::remote",
                rule.backend()
            ));
        };
        let remote = factory.build(rule, redis).map_err(|e| e.0)?;
        let local = match rule.on_error() {
            OnError::Local => Some(Box::new(Limiter::local(rule, pool)?)),
            _ => None,
        };
        Ok(Limiter::Remote {
            remote,
            on_error: rule.on_error(),
            local,
            limit: rule.spec().capacity(),
        })
    }

    /// Checks (`consume`, writing into `receipt` what a local limiter took) or
    /// peeks at `n` units for `key` (local keyed tables hash it with their own
    /// secret seed) or the text `text_key` appends to a buffer (a keyed table
    /// in a shared region, hashed with the region's hash from a reused buffer;
    /// shared backends, which keep no receipts).
    /// `receipt` is written only by a check of a limiter that [`Self::can_refund`]
    /// (and by an `on_error = "local"` fallback, which is not refunded).
    pub(crate) fn run<K: Hash + ?Sized>(
        &self,
        key: &K,
        text_key: impl FnOnce(&mut String),
        n: u64,
        now: u64,
        consume: bool,
        receipt: &mut Receipt,
    ) -> Result<Answer, InsufficientCapacity> {
        match self {
            Limiter::One(l) if consume => {
                l.check_n_at_receipt(n, now, receipt).map(Answer::Decided)
            }
            Limiter::One(l) => l.peek_n_at(n, now).map(Answer::Decided),
            Limiter::Keyed(t) => t
                .run(key, text_key, n, now, consume, receipt)
                .map(Answer::Decided),
            Limiter::Remote {
                remote,
                on_error,
                local,
                limit,
            } => {
                let text = owned(text_key);
                let answer = remote.check_n(&text, n, consume);
                let fallback = (*on_error, local.as_deref(), *limit);
                remote_answer(answer, fallback, (key, text), (n, now), consume, receipt)
            }
        }
    }

    /// [`Self::run`] for an async caller: a shared backend's check is awaited
    /// ([`RemoteLimiter::check_n_async`]); local limiters answer at once.
    pub(crate) async fn run_async<K: Hash + ?Sized>(
        &self,
        key: &K,
        text_key: impl FnOnce(&mut String),
        n: u64,
        now: u64,
        consume: bool,
        receipt: &mut Receipt,
    ) -> Result<Answer, InsufficientCapacity> {
        match self {
            Limiter::Remote {
                remote,
                on_error,
                local,
                limit,
            } => {
                let text = owned(text_key);
                let answer = remote.check_n_async(&text, n, consume).await;
                let fallback = (*on_error, local.as_deref(), *limit);
                remote_answer(answer, fallback, (key, text), (n, now), consume, receipt)
            }
            _ => self.run(key, text_key, n, now, consume, receipt),
        }
    }

    /// Whether a check of `n` units may wait for a shared backend (see
    /// [`RemoteLimiter::answers_locally`]); local limiters never wait.
    pub(crate) fn may_wait(&self, text_key: impl FnOnce(&mut String), n: u64) -> bool {
        match self {
            #[allow(deprecated, reason = "the deprecated `Policy::may_wait_n` asks it")]
            Limiter::Remote { remote, .. } => !remote.answers_locally(&owned(text_key), n),
            _ => false,
        }
    }

    /// Whether the rule's state lives on a shared backend.
    pub(crate) fn is_remote(&self) -> bool {
        matches!(self, Limiter::Remote { .. })
    }

    /// Whether every admission of this limiter comes with a receipt that gives it
    /// back: local rules but striped ones and sliding logs; not shared backends.
    pub(crate) fn can_refund(&self) -> bool {
        match self {
            Limiter::One(l) => l.can_refund(),
            Limiter::Keyed(_) => true,
            Limiter::Remote { .. } => false,
        }
    }

    /// Gives back what `receipt`'s admission took (nothing if another limiter
    /// issued it).
    pub(crate) fn refund(&self, receipt: &mut Receipt, now: u64) {
        match self {
            Limiter::One(l) => l.refund(receipt, now),
            Limiter::Keyed(t) => t.refund(receipt, now),
            Limiter::Remote { local: Some(l), .. } => l.refund(receipt, now),
            Limiter::Remote { local: None, .. } => {}
        }
    }

    /// New quotas, state kept; `Err` when the limiter cannot take them.
    pub(crate) fn set_spec(&self, spec: &Spec) -> Result<(), String> {
        match self {
            Limiter::One(l) => l.set_spec(spec).map_err(|e| e.to_string()),
            Limiter::Keyed(t) => t.set_spec(spec).map_err(|e| e.to_string()),
            Limiter::Remote { remote, local, .. } => {
                remote.set_spec(spec).map_err(|e| e.0)?;
                local.as_ref().map_or(Ok(()), |l| l.set_spec(spec))
            }
        }
    }

    /// Keys holding state (the most over its limits, from `live`: the pool's
    /// live keys by id, one scan for every rule), evictions of its keys, new
    /// keys turned away (keyed rules).
    pub(crate) fn table_stats(&self, live: &[usize]) -> (u64, u64, u64) {
        match self {
            Limiter::Keyed(t) => {
                let ids = t.pool_ids();
                let live = ids.iter().map(|&id| live.get(usize::from(id)).copied());
                let keys = live.flatten().max().unwrap_or(0);
                (keys as u64, t.evictions(), t.rejected())
            }
            Limiter::Remote { local: Some(l), .. } => l.table_stats(live),
            _ => (0, 0, 0),
        }
    }

    /// Whether this is (or falls back to) a keyed table in the policy's pool.
    pub(crate) fn in_pool(&self) -> bool {
        match self {
            Limiter::Keyed(_) => true,
            Limiter::Remote { local: Some(l), .. } => l.in_pool(),
            _ => false,
        }
    }
}

/// What a shared backend's `answer` for the request's key (and its text) means: its decision, or on a failure the
/// rule's `on_error` (`fallback`: it, the `local` limiter of `on_error = "local"`,
/// which then decides and writes `receipt`, and the rule's capacity).
fn remote_answer<K: Hash + ?Sized>(
    answer: Result<Outcome, BackendError>,
    (on_error, local, limit): (OnError, Option<&Limiter>, u64),
    (key, text): (&K, String),
    (n, now): (u64, u64),
    consume: bool,
    receipt: &mut Receipt,
) -> Result<Answer, InsufficientCapacity> {
    if let Ok(o) = answer {
        return Ok(Answer::Decided(o));
    }
    let d = |allowed| sluicegate::Decision {
        allowed,
        remaining: 0,
        retry_after_ns: if allowed { 0 } else { 1_000_000_000 },
        reset_after_ns: 0,
        limit,
    };
    let fallback = |decision| {
        Answer::Fallback(Outcome {
            decision,
            delay_ns: 0,
        })
    };
    match (on_error, local) {
        (OnError::Open, _) => Ok(fallback(d(true))),
        (OnError::Local, Some(l)) => {
            match l.run(key, |out| out.push_str(&text), n, now, consume, receipt)? {
                Answer::Decided(o) | Answer::Fallback(o) => Ok(Answer::Fallback(o)),
            }
        }
        _ => Ok(fallback(d(false))),
    }
}

/// The text `write` appends, as an owned string (a shared backend keeps it,
/// or hands it to another thread).
fn owned(write: impl FnOnce(&mut String)) -> String {
    let mut text = String::new();
    write(&mut text);
    text
}
