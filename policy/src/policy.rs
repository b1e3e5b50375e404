//! [`Policy`]: the compiled rules and the check.
//!
//! # All-or-nothing across rules: peek, then commit
//! A request is admitted only if every enforcing rule that matches admits it, and
//! a denial by one rule consumes nothing from the others. The check runs:
//!
//! 1. **Peek** every matching enforcing rule but the last (what a check of `n`
//!    would answer, charging nothing). If one would deny, the request is denied
//!    and nothing was charged anywhere.
//! 2. **Check** the last enforcing rule (charging it). If it denies, the request
//!    is denied; nothing was charged anywhere.
//! 3. **Commit** the peeked rules one by one, each with its own atomic check.
//!
//! *Never over-admits:* every unit a rule ever admits is admitted by that rule's
//! own atomic check (its compare-and-swap loop), exactly as if the rule stood
//! alone; a request is admitted only if each of those checks admitted it. So no
//! rule, under any interleaving of threads, admits beyond its quota.
//!
//! *Sequentially exact:* with no concurrent request, a peek that allowed at `now`
//! is followed by a check at the same `now` that allows too, so step 3 always
//! succeeds and a denial consumes nothing anywhere.
//!
//! *Under concurrency* a request may pass a rule's peek and then find, at step 3,
//! that a concurrent request took the rule's last units in between. That request
//! is denied; the rules it already committed in step 3 keep their charge (core
//! offers no public give-back across limiters). That can only make a rule early to
//! deny, for the few units in flight at the instant a rule runs out, never late.
//!
//! Shadow rules are checked on their own (charged when they would admit), counted,
//! and never deny or block the others.

use std::sync::{Arc, Mutex};

use arc_swap::ArcSwap;
use sluicegate::{Clock, Decision as Verdict, DefaultClock, Outcome};

use crate::attrs::Attrs;
use crate::backend::{Answer, Limiter, RemoteFactory};
use crate::decision::{Decision, Item};
use crate::def::{Mode, PolicyDef, RuleDef};
use crate::diag::{Code, Diagnostic, Error, Severity};
use crate::key::KeyRef;
use crate::metrics::{bump, ReloadStats, RuleMetrics};

/// The rules in force, with their limiters.
#[derive(Debug)]
pub(crate) struct Compiled {
    pub def: PolicyDef,
    pub rules: Box<[Rule]>,
}

/// One rule and its state; the state (`limiter`, `metrics`) is shared with the
/// next generation when a reload keeps the rule.
#[derive(Debug)]
pub(crate) struct Rule {
    pub def: RuleDef,
    pub limiter: Arc<Limiter>,
    pub metrics: Arc<RuleMetrics>,
}

impl std::fmt::Debug for Limiter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Limiter")
    }
}

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
    pub(crate) current: ArcSwap<Compiled>,
    pub(crate) clock: DefaultClock,
    pub(crate) remote: Option<Arc<dyn RemoteFactory>>,
    pub(crate) reload: Mutex<ReloadStats>,
    pub(crate) reloading: Mutex<()>,
}

impl std::fmt::Debug for Policy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Policy")
            .field("rules", &self.current.load().def.rules.len())
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

    fn build(self, text: &str, file: Option<&str>) -> Result<Policy, Error> {
        let def = PolicyDef::parse(text, file)?;
        let compiled = compile(
            def,
            None,
            self.remote.as_deref(),
            file.unwrap_or("<policy>"),
        )?;
        Ok(Policy {
            current: ArcSwap::from_pointee(compiled),
            clock: DefaultClock::default(),
            remote: self.remote,
            reload: Mutex::new(ReloadStats::default()),
            reloading: Mutex::new(()),
        })
    }
}

pub(crate) fn read(path: &std::path::Path) -> Result<(String, String), Error> {
    let name = path.display().to_string();
    match std::fs::read_to_string(path) {
        Ok(t) => Ok((t, name)),
        Err(e) => Err(Error::one(Diagnostic {
            severity: Severity::Error,
            code: Code::Io,
            file: name,
            line: 1,
            column: 1,
            rule: None,
            message: format!("cannot read the rule file: {e}"),
        })),
    }
}

/// Builds the limiters of `def`, reusing `old`'s for rules a reload keeps (see
/// [`crate::reload`]).
pub(crate) fn compile(
    def: PolicyDef,
    old: Option<&Compiled>,
    remote: Option<&dyn RemoteFactory>,
    file: &str,
) -> Result<Compiled, Error> {
    let plan = crate::reload::plan(&def, old, remote, file)?;
    let rules = def
        .rules
        .iter()
        .cloned()
        .zip(plan)
        .map(|(def, (limiter, metrics))| Rule {
            def,
            limiter,
            metrics,
        })
        .collect();
    Ok(Compiled { def, rules })
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
        self.current.load().def.clone()
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
        self.check_n_at(attrs, 1, self.clock.now())
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
        self.check_n_at(attrs, n, self.clock.now())
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
        let snap = self.current.load_full();
        out.items.clear();
        out.allowed = true;
        let v6 = snap.def.ipv6_prefix;
        let run = |rule: &Rule, consume: bool| {
            let key = KeyRef {
                attrs,
                names: rule.def.key(),
                ipv6_prefix: v6,
            };
            let limit = rule.def.spec().capacity();
            match rule.limiter.run(&key, || key.text(), n, now, consume) {
                Ok(Answer::Decided(o)) => (o, false),
                Ok(Answer::Fallback(o)) => {
                    bump(&rule.metrics.backend_errors);
                    (o, true)
                }
                Err(_) => (
                    Outcome {
                        decision: Verdict::never(limit),
                        delay_ns: 0,
                    },
                    false,
                ),
            }
        };
        // Shadow rules are checked on their own as they come; enforcing ones are
        // collected for the all-or-nothing steps.
        let mut last = None;
        for (i, rule) in snap.rules.iter().enumerate() {
            if !rule.def.matches(attrs) {
                continue;
            }
            let (outcome, backend_error) = match rule.def.mode() {
                Mode::Shadow => {
                    let r = run(rule, true);
                    let c = if r.0.decision.allowed {
                        &rule.metrics.allowed
                    } else {
                        &rule.metrics.shadow_denied
                    };
                    bump(c);
                    r
                }
                Mode::Enforce => {
                    last = Some(out.items.len());
                    (
                        Outcome {
                            decision: Verdict::never(0),
                            delay_ns: 0,
                        },
                        false,
                    )
                }
            };
            out.items.push(Item {
                rule: i as u32,
                outcome,
                backend_error,
            });
        }
        let enforcing = |it: &Item| snap.rules[it.rule as usize].def.mode() == Mode::Enforce;
        // 1. Peek every enforcing rule but the last.
        let mut denied = false;
        for idx in 0..out.items.len() {
            if Some(idx) == last || !enforcing(&out.items[idx]) {
                continue;
            }
            let (o, e) = run(&snap.rules[out.items[idx].rule as usize], false);
            denied |= !o.decision.allowed;
            out.items[idx].outcome = o;
            out.items[idx].backend_error = e;
        }
        // 2. Charge the last one, unless a peek already denied (then peek it too,
        // for its headers).
        if let Some(idx) = last {
            let (o, e) = run(&snap.rules[out.items[idx].rule as usize], !denied);
            denied |= !o.decision.allowed;
            out.items[idx].outcome = o;
            out.items[idx].backend_error = e;
        }
        // 3. Commit the peeked ones.
        if !denied {
            for idx in 0..out.items.len() {
                if Some(idx) == last || !enforcing(&out.items[idx]) {
                    continue;
                }
                let (o, e) = run(&snap.rules[out.items[idx].rule as usize], true);
                out.items[idx].outcome = o;
                out.items[idx].backend_error |= e;
                if !o.decision.allowed {
                    denied = true;
                    break;
                }
            }
        }
        for it in out.items.iter().filter(|it| enforcing(it)) {
            let m = &snap.rules[it.rule as usize].metrics;
            if !it.outcome.decision.allowed {
                bump(&m.denied);
            } else if !denied {
                bump(&m.allowed);
            }
        }
        out.allowed = !denied;
        out.snapshot = Some(snap);
    }
}
