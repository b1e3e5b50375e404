//! [`Policy`]: the public API over the compiled rules ([`crate::model`]): build,
//! inspect, and the calls that check a request (the check itself, all-or-nothing
//! across rules, is in [`crate::check`]).

use std::sync::{Arc, Mutex};

use arc_swap::ArcSwap;
use sluicegate::keyed::Pool;
use sluicegate::{Clock, DefaultClock};

use crate::attrs::Attrs;
use crate::backend::RemoteFactory;
use crate::counters::ReloadStats;
use crate::decision::Decision;
use crate::def::PolicyDef;
use crate::diag::Error;
use crate::key::{Cached, Direct};
use crate::model::{Compiled, compile, read};

/// Up to this many distinct attributes are looked up once per request into an
/// array on the stack; a policy naming more looks each up where it is used.
const CACHED_ATTRS: usize = 32;

/// A rate-limit policy: rules by scope, checked all-or-nothing, reloadable while
/// it runs. Share it between threads with an [`Arc`]; every call takes `&self`.
///
/// ```
/// use sluicegate_policy::Policy;
/// let policy = Policy::from_toml(r#"
/// [[rule]]
/// name = "login"
/// match = { path = "/login", method = "POST" }
/// key = ["ip"]
/// limit = "2/minute"
///
/// [[rule]]
/// name = "global"
/// limit = "1000/second"
/// "#)?;
/// let login = [("ip", "192.0.2.1"), ("path", "/login"), ("method", "POST")];
/// assert!(policy.check_n_at(&login, 1, 0).allowed());
/// assert!(policy.check_n_at(&login, 1, 0).allowed());
/// let third = policy.check_n_at(&login, 1, 0);
/// assert!(!third.allowed());
/// assert_eq!(third.denying().next().unwrap().name, "login");
/// // Another client is not affected.
/// assert!(policy.check_n_at(&[("ip", "192.0.2.2"), ("path", "/login"), ("method", "POST")], 1, 0).allowed());
/// # Ok::<(), sluicegate_policy::Error>(())
/// ```
pub struct Policy {
    pub(crate) core: Arc<Core>,
    /// The thread following a rule store (`Policy::from_store`): stopped and
    /// joined when the policy is dropped.
    #[cfg(feature = "store")]
    pub(crate) follower: Option<crate::store::Follower>,
}

/// What a policy is, shared with the thread that reloads it (a store's
/// follower): the rules in force and what a reload needs.
pub(crate) struct Core {
    pub(crate) current: ArcSwap<Compiled>,
    pub(crate) clock: DefaultClock,
    pub(crate) remote: Option<Arc<dyn RemoteFactory>>,
    /// The pool the policy was built on ([`PolicyBuilder::pool`]), kept across
    /// reloads; `None`: its own, sized by `[state]`.
    pub(crate) pool: Option<Pool>,
    pub(crate) reload: Mutex<ReloadStats>,
    pub(crate) reloading: Mutex<()>,
}

impl std::fmt::Debug for Policy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Policy")
            .field("rules", &self.core.current.load().def.rules.len())
            .finish_non_exhaustive()
    }
}

/// Options for building a [`Policy`]: the factory for Redis-backed rules.
///
/// ```
/// use sluicegate_policy::Policy;
/// let p = Policy::builder().from_toml("[[rule]]\nname = \"a\"\nlimit = \"1/s\"\n")?;
/// assert_eq!(p.definition().rules().len(), 1);
/// # Ok::<(), sluicegate_policy::Error>(())
/// ```
#[derive(Default)]
pub struct PolicyBuilder {
    remote: Option<Arc<dyn RemoteFactory>>,
    pool: Option<Pool>,
}

impl PolicyBuilder {
    /// Builds `redis` and `hybrid` rules with `factory` (without one, such rules
    /// are an error).
    ///
    /// ```
    /// # use sluicegate_policy::{Code, Policy};
    /// let text = "[redis]\nurl = \"redis://h\"\n[[rule]]\nname = \"r\"\nlimit = \"1/s\"\nbackend = \"redis\"\n";
    /// let err = Policy::from_toml(text).unwrap_err();
    /// assert_eq!(err.diagnostics()[0].code, Code::Build);
    /// ```
    pub fn remote(mut self, factory: impl RemoteFactory + 'static) -> Self {
        self.remote = Some(Arc::new(factory));
        self
    }

    /// Keeps the keyed rules' keys in `pool`, shared with whatever else uses it
    /// (a server's domains), instead of a pool of the policy's own sized by its
    /// `[state]` table (which is then ignored). Reloads keep it.
    ///
    /// ```
    /// use sluicegate::keyed::Pool;
    /// use sluicegate_policy::Policy;
    /// let pool = Pool::with_memory(4 << 20)?;
    /// let text = "[[rule]]\nname = \"a\"\nkey = [\"ip\"]\nlimit = \"1/s\"\n";
    /// let a = Policy::builder().pool(pool.clone()).from_toml(text)?;
    /// let b = Policy::builder().pool(pool.clone()).from_toml(text)?;
    /// assert_eq!(pool.limits(), 2); // one limit of each policy, in one pool
    /// assert!(a.check_n_at(&[("ip", "1")], 1, 0).allowed());
    /// assert!(b.check_n_at(&[("ip", "1")], 1, 0).allowed()); // its own state
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn pool(mut self, pool: Pool) -> Self {
        self.pool = Some(pool);
        self
    }

    /// The policy in `text`; see [`Policy::from_toml`].
    ///
    /// ```
    /// # use sluicegate_policy::Policy;
    /// assert!(Policy::builder().from_toml("[[rule]]\nname = \"a\"\n").is_err());
    /// ```
    pub fn from_toml(self, text: &str) -> Result<Policy, Error> {
        self.build(text, None)
    }

    /// The policy in the file at `path`; see [`Policy::from_path`].
    ///
    /// ```
    /// # use sluicegate_policy::{Code, Policy};
    /// let err = Policy::builder().from_path("/nonexistent/rules.toml").unwrap_err();
    /// assert_eq!(err.diagnostics()[0].code, Code::Io);
    /// ```
    pub fn from_path(self, path: impl AsRef<std::path::Path>) -> Result<Policy, Error> {
        let (text, name) = read(path.as_ref())?;
        self.build(&text, Some(&name))
    }

    /// The policy `def` describes (built from values or read from a file); see
    /// [`Policy::from_def`].
    ///
    /// ```
    /// # use sluicegate_policy::{Code, Policy, PolicyDef, RedisSettings, RuleDef};
    /// let def = PolicyDef::builder()
    ///     .redis(RedisSettings::new("redis://h"))
    ///     .rule(RuleDef::builder("r").limit("1/s").backend("redis"))
    ///     .build()?;
    /// // Without a factory for Redis-backed rules, building them fails.
    /// let err = Policy::builder().from_def(def).unwrap_err();
    /// assert_eq!(err.diagnostics()[0].code, Code::Build);
    /// # Ok::<(), sluicegate_policy::Error>(())
    /// ```
    pub fn from_def(self, def: PolicyDef) -> Result<Policy, Error> {
        let file = def.source().to_owned();
        let compiled = compile(def, None, self.remote.as_deref(), self.pool.as_ref(), &file)?;
        Ok(Policy {
            core: Arc::new(Core {
                current: ArcSwap::from_pointee(compiled),
                clock: DefaultClock::default(),
                remote: self.remote,
                pool: self.pool,
                reload: Mutex::new(ReloadStats::default()),
                reloading: Mutex::new(()),
            }),
            #[cfg(feature = "store")]
            follower: None,
        })
    }

    fn build(self, text: &str, file: Option<&str>) -> Result<Policy, Error> {
        self.from_def(PolicyDef::parse(text, file)?)
    }
}

impl Policy {
    /// The policy in rule-file `text`, validated (every error located by line,
    /// column and rule) and built: one local limiter or keyed table per rule.
    ///
    /// ```
    /// use sluicegate_policy::{Code, Policy};
    /// assert!(Policy::from_toml("[[rule]]\nname = \"a\"\nlimit = \"5/minute\"\n").is_ok());
    /// let err = Policy::from_toml("[[rule]]\nname = \"a\"\nlimit = \"5/minute\"\nmatch = { ip = \"10.0.0.300\" }\n").unwrap_err();
    /// assert_eq!(err.diagnostics()[0].code, Code::BadCidr);
    /// ```
    pub fn from_toml(text: &str) -> Result<Policy, Error> {
        PolicyBuilder::default().from_toml(text)
    }

    /// The policy in the file at `path` (its diagnostics name the file).
    ///
    /// ```
    /// # use sluicegate_policy::Policy;
    /// let dir = tempfile::tempdir().unwrap();
    /// let path = dir.path().join("rules.toml");
    /// std::fs::write(&path, "[[rule]]\nname = \"a\"\nlimit = \"5/fortnight\"\n").unwrap();
    /// let err = Policy::from_path(&path).unwrap_err();
    /// assert!(err.to_string().contains("rules.toml:3:12"));
    /// ```
    pub fn from_path(path: impl AsRef<std::path::Path>) -> Result<Policy, Error> {
        PolicyBuilder::default().from_path(path)
    }

    /// The policy `def` describes: rules built from values
    /// ([`PolicyDef::builder`]) or read from a file ([`PolicyDef::parse`]), already
    /// validated; this builds their limiters.
    ///
    /// ```
    /// use sluicegate_policy::{Policy, PolicyDef, RuleDef};
    /// let def = PolicyDef::builder()
    ///     .rule(RuleDef::builder("login").matching("path", "/login").key(["ip"]).limit("1/minute"))
    ///     .build()?;
    /// let p = Policy::from_def(def)?;
    /// let req = [("path", "/login"), ("ip", "192.0.2.1")];
    /// assert!(p.check_n_at(&req, 1, 0).allowed());
    /// assert!(!p.check_n_at(&req, 1, 0).allowed());
    /// # Ok::<(), sluicegate_policy::Error>(())
    /// ```
    pub fn from_def(def: PolicyDef) -> Result<Policy, Error> {
        PolicyBuilder::default().from_def(def)
    }

    /// Options: a factory for Redis-backed rules.
    ///
    /// ```
    /// # use sluicegate_policy::Policy;
    /// assert!(Policy::builder().from_toml("").is_ok());
    /// ```
    pub fn builder() -> PolicyBuilder {
        PolicyBuilder::default()
    }

    /// The rules in force (a copy of the validated file).
    ///
    /// ```
    /// # use sluicegate_policy::Policy;
    /// let p = Policy::from_toml("[[rule]]\nname = \"a\"\nlimit = \"1/s\"\n")?;
    /// assert_eq!(p.definition().rules()[0].name(), "a");
    /// # Ok::<(), sluicegate_policy::Error>(())
    /// ```
    pub fn definition(&self) -> PolicyDef {
        self.core.current.load().def.clone()
    }

    /// Whether a rule in force keeps its state on a shared backend (`redis`,
    /// `hybrid`): a check may then wait for a round trip, and a binding that
    /// must not block (an event loop) awaits [`Self::check_n_async`] instead of
    /// calling [`Self::check_n`]. Follows reloads.
    ///
    /// ```
    /// # use sluicegate_policy::Policy;
    /// let p = Policy::from_toml("[[rule]]\nname = \"a\"\nlimit = \"1/s\"\n")?;
    /// assert!(!p.has_remote_rules());
    /// # Ok::<(), sluicegate_policy::Error>(())
    /// ```
    pub fn has_remote_rules(&self) -> bool {
        self.core.current.load().remote
    }

    /// The policy's time, in nanoseconds: the time base of the memory its state
    /// lives in when that has one (a shared-memory region's: every process
    /// sharing it must check at times they all read alike), else the policy's
    /// own clock. What the calls without `_at` check at.
    ///
    /// ```
    /// # use sluicegate_policy::Policy;
    /// let p = Policy::from_toml("")?;
    /// assert!(p.now() <= p.now());
    /// # Ok::<(), sluicegate_policy::Error>(())
    /// ```
    #[inline]
    pub fn now(&self) -> u64 {
        let shared = self.core.current.load().pool.as_ref().and_then(Pool::now);
        shared.unwrap_or_else(|| self.core.clock.now())
    }

    /// Checks one request of cost 1 now (the policy's clock).
    ///
    /// ```
    /// # use sluicegate_policy::Policy;
    /// let p = Policy::from_toml("[[rule]]\nname = \"a\"\nlimit = \"1/minute\"\n")?;
    /// assert!(p.check(&[("path", "/")]).allowed());
    /// assert!(!p.check(&[("path", "/")]).allowed());
    /// # Ok::<(), sluicegate_policy::Error>(())
    /// ```
    pub fn check<A: Attrs + ?Sized>(&self, attrs: &A) -> Decision {
        self.check_n_at(attrs, 1, self.now())
    }

    /// Checks a request of cost `n` now (the policy's clock).
    ///
    /// ```
    /// # use sluicegate_policy::Policy;
    /// let p = Policy::from_toml("[[rule]]\nname = \"a\"\nlimit = \"3/minute\"\n")?;
    /// assert!(p.check_n(&[("path", "/")], 3).allowed());
    /// assert!(!p.check_n(&[("path", "/")], 1).allowed());
    /// # Ok::<(), sluicegate_policy::Error>(())
    /// ```
    pub fn check_n<A: Attrs + ?Sized>(&self, attrs: &A, n: u64) -> Decision {
        self.check_n_at(attrs, n, self.now())
    }

    /// [`Self::check_n`] into a decision the caller reuses (see
    /// [`Self::check_n_at_into`]).
    ///
    /// ```
    /// # use sluicegate_policy::{Decision, Policy};
    /// let p = Policy::from_toml("[[rule]]\nname = \"a\"\nlimit = \"2/minute\"\n")?;
    /// let mut d = Decision::new();
    /// p.check_n_into(&[("path", "/")], 2, &mut d);
    /// assert!(d.allowed());
    /// p.check_n_into(&[("path", "/")], 1, &mut d);
    /// assert!(!d.allowed());
    /// # Ok::<(), sluicegate_policy::Error>(())
    /// ```
    pub fn check_n_into<A: Attrs + ?Sized>(&self, attrs: &A, n: u64, out: &mut Decision) {
        self.check_n_at_into(attrs, n, self.now(), out);
    }

    /// Checks a request of cost `n` at `now` (nanoseconds, the caller's clock;
    /// one clock for all calls to this policy). `n = 0` peeks.
    ///
    /// ```
    /// # use sluicegate_policy::Policy;
    /// let p = Policy::from_toml("[[rule]]\nname = \"a\"\nlimit = \"1/s\"\n")?;
    /// assert!(p.check_n_at(&[("k", "v")], 1, 0).allowed());
    /// assert!(!p.check_n_at(&[("k", "v")], 1, 0).allowed());
    /// assert!(p.check_n_at(&[("k", "v")], 1, 1_000_000_000).allowed());
    /// # Ok::<(), sluicegate_policy::Error>(())
    /// ```
    pub fn check_n_at<A: Attrs + ?Sized>(&self, attrs: &A, n: u64, now: u64) -> Decision {
        let mut d = Decision::new();
        self.check_n_at_into(attrs, n, now, &mut d);
        d
    }

    /// Whether a check of `n` units for `attrs` may wait for a shared backend (a
    /// Redis round trip). `false` means the check answers from this process:
    /// every matching `redis`/`hybrid` rule can answer from what it holds (a
    /// hybrid rule's lease or cached denial) and is the only enforcing rule that
    /// matches. An async server asks this first and decides on its own thread
    /// when it is `false`, or hands the check to a thread that may block. The
    /// answer is a forecast: another thread may spend a lease in between, so a
    /// check after `false` waits now and then.
    ///
    /// ```
    /// # use sluicegate_policy::Policy;
    /// let p = Policy::from_toml("[[rule]]\nname = \"a\"\nlimit = \"1/s\"\n")?;
    /// # #[allow(deprecated)]
    /// assert!(!p.may_wait_n(&[("k", "v")], 1)); // local rules never wait
    /// # Ok::<(), sluicegate_policy::Error>(())
    /// ```
    #[deprecated(
        since = "0.1.0",
        note = "await `Policy::check_n_async` (or its `_at`/`_into` forms) instead: it never blocks, so there is nothing to forecast"
    )]
    pub fn may_wait_n<A: Attrs + ?Sized>(&self, attrs: &A, n: u64) -> bool {
        crate::check::may_wait(&self.core.current.load(), &Direct(attrs), n)
    }

    /// [`Self::check_n_at`] into a decision the caller reuses: no allocation once
    /// its buffer holds as many rules as match.
    ///
    /// ```
    /// # use sluicegate_policy::{Decision, Policy};
    /// let p = Policy::from_toml("[[rule]]\nname = \"a\"\nlimit = \"2/s\"\n")?;
    /// let mut d = Decision::new();
    /// p.check_n_at_into(&[("k", "v")], 1, 0, &mut d);
    /// assert_eq!(d.rules().next().unwrap().remaining, 1);
    /// p.check_n_at_into(&[("k", "v")], 1, 0, &mut d);
    /// assert_eq!(d.rules().next().unwrap().remaining, 0);
    /// # Ok::<(), sluicegate_policy::Error>(())
    /// ```
    pub fn check_n_at_into<A: Attrs + ?Sized>(
        &self,
        attrs: &A,
        n: u64,
        now: u64,
        out: &mut Decision,
    ) {
        let snap = self.snapshot_for(out);
        decide_here(snap, attrs, n, now, out);
    }

    /// The rules in force, for a check into `out`: a reused decision that
    /// already holds them takes no reference count.
    fn snapshot_for(&self, out: &mut Decision) -> Arc<Compiled> {
        let current = self.core.current.load();
        match out.snapshot.take() {
            Some(s) if Arc::ptr_eq(&s, &*current) => s,
            _ => arc_swap::Guard::into_inner(current),
        }
    }

    /// Checks one request of cost 1 now (the policy's clock), awaiting rules on
    /// a shared backend instead of blocking the thread (see
    /// [`Self::check_n_at_into_async`]).
    ///
    /// ```
    /// # use sluicegate_policy::Policy;
    /// let p = Policy::from_toml("[[rule]]\nname = \"a\"\nlimit = \"1/minute\"\n")?;
    /// let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
    /// assert!(rt.block_on(p.check_async(&[("path", "/")])).allowed());
    /// assert!(!rt.block_on(p.check_async(&[("path", "/")])).allowed());
    /// # Ok::<(), sluicegate_policy::Error>(())
    /// ```
    pub async fn check_async<A: Attrs + Sync + ?Sized>(&self, attrs: &A) -> Decision {
        self.check_n_at_async(attrs, 1, self.now()).await
    }

    /// [`Self::check_n`], awaiting rules on a shared backend (see
    /// [`Self::check_n_at_into_async`]).
    ///
    /// ```
    /// # use sluicegate_policy::Policy;
    /// let p = Policy::from_toml("[[rule]]\nname = \"a\"\nlimit = \"3/minute\"\n")?;
    /// let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
    /// assert!(rt.block_on(p.check_n_async(&[("path", "/")], 3)).allowed());
    /// assert!(!rt.block_on(p.check_n_async(&[("path", "/")], 1)).allowed());
    /// # Ok::<(), sluicegate_policy::Error>(())
    /// ```
    pub async fn check_n_async<A: Attrs + Sync + ?Sized>(&self, attrs: &A, n: u64) -> Decision {
        self.check_n_at_async(attrs, n, self.now()).await
    }

    /// [`Self::check_n_into`], awaiting rules on a shared backend (see
    /// [`Self::check_n_at_into_async`]).
    ///
    /// ```
    /// # use sluicegate_policy::{Decision, Policy};
    /// let p = Policy::from_toml("[[rule]]\nname = \"a\"\nlimit = \"2/minute\"\n")?;
    /// let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
    /// let mut d = Decision::new();
    /// rt.block_on(p.check_n_into_async(&[("path", "/")], 2, &mut d));
    /// assert!(d.allowed());
    /// rt.block_on(p.check_n_into_async(&[("path", "/")], 1, &mut d));
    /// assert!(!d.allowed());
    /// # Ok::<(), sluicegate_policy::Error>(())
    /// ```
    pub async fn check_n_into_async<A: Attrs + Sync + ?Sized>(
        &self,
        attrs: &A,
        n: u64,
        out: &mut Decision,
    ) {
        self.check_n_at_into_async(attrs, n, self.now(), out).await;
    }

    /// [`Self::check_n_at`], awaiting rules on a shared backend (see
    /// [`Self::check_n_at_into_async`]).
    ///
    /// ```
    /// # use sluicegate_policy::Policy;
    /// let p = Policy::from_toml("[[rule]]\nname = \"a\"\nlimit = \"1/s\"\n")?;
    /// let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
    /// assert!(rt.block_on(p.check_n_at_async(&[("k", "v")], 1, 0)).allowed());
    /// assert!(!rt.block_on(p.check_n_at_async(&[("k", "v")], 1, 0)).allowed());
    /// # Ok::<(), sluicegate_policy::Error>(())
    /// ```
    pub async fn check_n_at_async<A: Attrs + Sync + ?Sized>(
        &self,
        attrs: &A,
        n: u64,
        now: u64,
    ) -> Decision {
        let mut d = Decision::new();
        self.check_n_at_into_async(attrs, n, now, &mut d).await;
        d
    }

    /// [`Self::check_n_at_into`] for an async caller: a rule on a shared backend
    /// (`redis`, `hybrid`) is awaited ([`crate::RemoteLimiter::check_n_async`];
    /// the Redis tier's pipelines concurrent checks on its multiplexed
    /// connection), never blocking the thread, so it suits any Tokio runtime,
    /// current-thread included. Same decision, same all-or-nothing rules.
    ///
    /// * A policy without rules on a shared backend decides on the calling
    ///   thread exactly as [`Self::check_n_at_into`] does: no await, no
    ///   allocation beyond it.
    /// * **Cancellation.** Dropped before it completes (a timeout, a client gone),
    ///   the check gives back every unit its local rules had charged, exactly,
    ///   and leaves `out` denied, listing no rule. A shared backend keeps
    ///   no receipts: a remote check already sent may still be charged there
    ///   (early to limit, never late), as for a denied request's remote charges.
    ///
    /// ```
    /// # use sluicegate_policy::{Decision, Policy};
    /// let p = Policy::from_toml("[[rule]]\nname = \"a\"\nlimit = \"2/s\"\n")?;
    /// let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
    /// let mut d = Decision::new();
    /// rt.block_on(p.check_n_at_into_async(&[("k", "v")], 1, 0, &mut d));
    /// assert_eq!(d.rules().next().unwrap().remaining, 1);
    /// # Ok::<(), sluicegate_policy::Error>(())
    /// ```
    pub async fn check_n_at_into_async<A: Attrs + Sync + ?Sized>(
        &self,
        attrs: &A,
        n: u64,
        now: u64,
        out: &mut Decision,
    ) {
        let snap = self.snapshot_for(out);
        if snap.remote {
            crate::check::decide_async(snap, &Direct(attrs), n, now, out).await;
        } else {
            decide_here(snap, attrs, n, now, out);
        }
    }
}

impl Policy {
    /// What a check of `n` units for `attrs` would answer at `now`, changing
    /// nothing: every matching rule (shadow ones too) is peeked, so nothing is
    /// charged and no rule's allowed/denied counters move. Each
    /// [`crate::RuleDecision`] gives the rule's key
    /// ([`crate::RuleDecision::key_text`]), whether it would admit, and its
    /// `remaining` after the `n` units it would take (`n = 0`: what is left
    /// now); [`Decision::allowed`] says whether every enforcing rule would
    /// admit. What an admin's "explain this request" shows.
    ///
    /// ```
    /// # use sluicegate_policy::Policy;
    /// let p = Policy::from_toml("[[rule]]\nname = \"a\"\nkey = [\"ip\"]\nlimit = \"2/minute\"\n")?;
    /// let req = [("ip", "192.0.2.1")];
    /// p.check_n_at(&req, 1, 0);
    /// let d = p.peek_n_at(&req, 0, 0);
    /// let r = d.rules().next().unwrap();
    /// assert_eq!((r.name, r.remaining, r.key_text(&req)), ("a", 1, "192.0.2.1".to_owned()));
    /// assert!(p.peek_n_at(&req, 1, 0).allowed()); // one more would pass,
    /// assert!(!p.peek_n_at(&req, 2, 0).allowed()); // two would not,
    /// assert_eq!(p.peek_n_at(&req, 0, 0).rules().next().unwrap().remaining, 1); // and still 1 left
    /// assert_eq!(p.metrics_at(0)[0].allowed, 1); // the peeks were not counted
    /// # Ok::<(), sluicegate_policy::Error>(())
    /// ```
    pub fn peek_n_at<A: Attrs + ?Sized>(&self, attrs: &A, n: u64, now: u64) -> Decision {
        let mut d = Decision::new();
        crate::check::peek(
            self.core.current.load_full(),
            &Direct(attrs),
            n,
            now,
            &mut d,
        );
        d
    }

    /// [`Self::peek_n_at`] now (the policy's clock), awaiting rules on a shared
    /// backend instead of blocking the thread.
    ///
    /// ```
    /// # use sluicegate_policy::Policy;
    /// let p = Policy::from_toml("[[rule]]\nname = \"a\"\nlimit = \"1/minute\"\nmode = \"shadow\"\n")?;
    /// let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
    /// let d = rt.block_on(p.peek_n_async(&[("path", "/")], 1));
    /// assert!(d.allowed() && d.rules().next().unwrap().allowed);
    /// assert_eq!(p.metrics_at(0)[0].allowed, 0);
    /// # Ok::<(), sluicegate_policy::Error>(())
    /// ```
    pub async fn peek_n_async<A: Attrs + Sync + ?Sized>(&self, attrs: &A, n: u64) -> Decision {
        let mut d = Decision::new();
        let now = self.now();
        let snap = self.core.current.load_full();
        crate::check::peek_with(snap, &Direct(attrs), (n, now), true, &mut d).await;
        d
    }
}

/// Decides on this thread (a shared backend's check, if any, called and waited
/// for).
fn decide_here<A: Attrs + ?Sized>(
    snap: Arc<Compiled>,
    attrs: &A,
    n: u64,
    now: u64,
    out: &mut Decision,
) {
    // Each attribute the rules name is looked up once, not once per rule.
    let names = &snap.names;
    if names.len() <= CACHED_ATTRS {
        let mut vals = [None; CACHED_ATTRS];
        for (v, name) in vals.iter_mut().zip(names.iter()) {
            *v = attrs.get(name.as_str());
        }
        let len = names.len();
        crate::check::decide(snap, &Cached::new(&vals[..len]), n, now, out);
    } else {
        crate::check::decide(snap, &Direct(attrs), n, now, out);
    }
}
