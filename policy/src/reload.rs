//! Reloading a running policy, and watching its file.
//!
//! A reload validates the new text first; an invalid one leaves the policy in
//! force untouched and is reported three ways: [`Policy::last_error`], the
//! `sluicegate_policy_last_reload_error` metric, and a `log` warning. A valid one is
//! swapped in atomically (a check sees the old rules or the new, never a mix):
//!
//! * a rule whose name, key, limits, algorithm, backend, capacity and stripes are
//!   unchanged keeps its limiter: every key's state carries over;
//! * a rule whose limits changed (same name, algorithm, number of limits, key,
//!   backend) keeps its limiter with the new limits applied (`set_spec`: state
//!   carries over as each algorithm documents);
//! * any other change builds the rule anew (full buckets, empty windows);
//! * a rule on `redis` or `hybrid` is also built anew when the `[redis]` table
//!   changed (server, prefix, lease settings): its counts live in Redis and carry
//!   over with an unchanged prefix; its connection and leases do not;
//! * a removed rule's limiter is freed once the last check using it returns.
//!
//! Counters follow the rule's name.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, PoisonError};
use std::thread::JoinHandle;
use std::time::Duration;

use crate::def::PolicyDef;
use crate::diag::{Diagnostic, Error};
use crate::model::{Rule, compile, read};
use crate::policy::{Core, Policy};

/// What a successful reload did.
///
/// ```
/// use sluicegate_policy::Policy;
/// let p = Policy::from_toml("[[rule]]\nname = \"a\"\nlimit = \"1/s\"\n")?;
/// let r = p.reload_from_toml("[[rule]]\nname = \"a\"\nlimit = \"2/s\"\n[[rule]]\nname = \"b\"\nlimit = \"1/s\"\n")?;
/// assert_eq!((r.kept, r.changed, r.built, r.removed), (0, 1, 1, 0));
/// # Ok::<(), sluicegate_policy::Error>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reloaded {
    /// Rules whose limiter was kept as it was.
    pub kept: usize,
    /// Rules whose limits changed, state carried over.
    pub changed: usize,
    /// Rules built anew.
    pub built: usize,
    /// Rules gone.
    pub removed: usize,
    /// The new file's warnings.
    pub warnings: Vec<Diagnostic>,
}

impl Policy {
    /// Replaces the rules with those in `text`, if valid; see the module docs for
    /// what keeps its state. On error the policy in force is unchanged.
    ///
    /// ```
    /// use sluicegate_policy::Policy;
    /// let p = Policy::from_toml("[[rule]]\nname = \"a\"\nlimit = \"1/minute\"\n")?;
    /// assert!(p.check_n_at(&[("k", "v")], 1, 0).allowed());
    /// assert!(p.reload_from_toml("[[rule]]\nname = \"a\"\nlimit = \"oops\"\n").is_err());
    /// assert!(p.last_error().unwrap().contains("<policy>:3:"));
    /// // Still the old rule, with its state: the minute's unit is spent.
    /// assert!(!p.check_n_at(&[("k", "v")], 1, 0).allowed());
    /// # Ok::<(), sluicegate_policy::Error>(())
    /// ```
    pub fn reload_from_toml(&self, text: &str) -> Result<Reloaded, Error> {
        self.reload(text, None)
    }

    /// [`Self::reload_from_toml`] with the text of the file at `path`.
    ///
    /// ```
    /// # use sluicegate_policy::Policy;
    /// let p = Policy::from_toml("")?;
    /// assert!(p.reload_from_path("/nonexistent.toml").is_err());
    /// assert_eq!(p.reload_count(), (0, 1));
    /// # Ok::<(), sluicegate_policy::Error>(())
    /// ```
    pub fn reload_from_path(&self, path: impl AsRef<Path>) -> Result<Reloaded, Error> {
        match read(path.as_ref()) {
            Ok((text, name)) => self.reload(&text, Some(&name)),
            Err(e) => Err(self.core.failed(e)),
        }
    }

    /// Replaces the rules with those of `def` (built from values or read from a
    /// file); the same as [`Self::reload_from_toml`] otherwise: unchanged rules keep
    /// their state.
    ///
    /// ```
    /// use sluicegate_policy::{Policy, PolicyDef, RuleDef};
    /// let rule = |limit: &str| RuleDef::builder("a").limit(limit).algorithm("fixed_window");
    /// let def = |limit: &str| PolicyDef::builder().rule(rule(limit)).build();
    /// let p = Policy::from_def(def("1/minute")?)?;
    /// assert!(p.check_n_at(&[("k", "v")], 1, 0).allowed());
    /// let r = p.reload_from_def(def("2/minute")?)?;
    /// assert_eq!(r.changed, 1);
    /// // The window's count carried over: one of two is left.
    /// assert!(p.check_n_at(&[("k", "v")], 1, 0).allowed());
    /// assert!(!p.check_n_at(&[("k", "v")], 1, 0).allowed());
    /// # Ok::<(), sluicegate_policy::Error>(())
    /// ```
    pub fn reload_from_def(&self, def: PolicyDef) -> Result<Reloaded, Error> {
        self.core.reload_from_def(def)
    }

    fn reload(&self, text: &str, file: Option<&str>) -> Result<Reloaded, Error> {
        // One reload at a time: each plans against the generation it replaces.
        let _one = self
            .core
            .reloading
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let def = PolicyDef::parse(text, file).map_err(|e| self.core.failed(e))?;
        self.core.swap_in(def)
    }

    /// The last reload's error, until a reload succeeds.
    ///
    /// ```
    /// # use sluicegate_policy::Policy;
    /// let p = Policy::from_toml("")?;
    /// assert_eq!(p.last_error(), None);
    /// # Ok::<(), sluicegate_policy::Error>(())
    /// ```
    pub fn last_error(&self) -> Option<String> {
        self.core
            .reload
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .last_error
            .clone()
    }

    /// Reloads so far: (succeeded, failed).
    ///
    /// ```
    /// # use sluicegate_policy::Policy;
    /// let p = Policy::from_toml("")?;
    /// p.reload_from_toml("")?;
    /// assert_eq!(p.reload_count(), (1, 0));
    /// # Ok::<(), sluicegate_policy::Error>(())
    /// ```
    pub fn reload_count(&self) -> (u64, u64) {
        let s = self
            .core
            .reload
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        (s.reloads, s.failures)
    }
}

impl Core {
    /// [`Policy::reload_from_def`], for the policy's follower thread too.
    pub(crate) fn reload_from_def(&self, def: PolicyDef) -> Result<Reloaded, Error> {
        let _one = self
            .reloading
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        self.swap_in(def)
    }

    /// Compiles `def` against the rules in force and swaps it in (the caller holds
    /// `reloading`).
    fn swap_in(&self, def: PolicyDef) -> Result<Reloaded, Error> {
        let old = self.current.load_full();
        let warnings = def.warnings.clone();
        let file = def.source().to_owned();
        let mut new = compile(
            def,
            Some(&old),
            self.remote.as_deref(),
            self.pool.as_ref(),
            &file,
        )
        .map_err(|e| self.failed(e))?;
        let mut r = Reloaded {
            kept: 0,
            changed: 0,
            built: 0,
            removed: 0,
            warnings,
        };
        let by_name: HashMap<&str, &Rule> = old.rules.iter().map(|o| (o.def.name(), o)).collect();
        for rule in new.rules.iter() {
            match by_name.get(rule.def.name()) {
                Some(o)
                    if Arc::ptr_eq(&o.limiter, &rule.limiter) && o.def.same_limiter(&rule.def) =>
                {
                    r.kept += 1
                }
                Some(o) if Arc::ptr_eq(&o.limiter, &rule.limiter) => r.changed += 1,
                _ => r.built += 1,
            }
        }
        let names: HashSet<&str> = new.rules.iter().map(|n| n.def.name()).collect();
        r.removed = old
            .rules
            .iter()
            .filter(|o| !names.contains(o.def.name()))
            .count();
        new.def.warnings = r.warnings.clone();
        self.current.store(Arc::new(new));
        let mut s = self.reload.lock().unwrap_or_else(PoisonError::into_inner);
        s.reloads += 1;
        s.last_error = None;
        log::info!(
            "sluicegate policy reloaded: {} kept, {} changed, {} new, {} removed",
            r.kept,
            r.changed,
            r.built,
            r.removed
        );
        Ok(r)
    }

    pub(crate) fn failed(&self, e: Error) -> Error {
        let mut s = self.reload.lock().unwrap_or_else(PoisonError::into_inner);
        s.failures += 1;
        s.last_error = Some(e.to_string());
        log::warn!("sluicegate policy reload rejected, previous policy kept: {e}");
        e
    }
}

/// Watches a rule file and reloads the policy when its content changes (polled:
/// no platform notification API, works on every file system, including the
/// atomically renamed files of config managers and Kubernetes volumes). Stops
/// when dropped.
///
/// ```
/// use std::sync::Arc;
/// use std::time::Duration;
/// use sluicegate_policy::{Policy, Watcher};
/// let dir = tempfile::tempdir().unwrap();
/// let path = dir.path().join("rules.toml");
/// std::fs::write(&path, "[[rule]]\nname = \"a\"\nlimit = \"1/s\"\n").unwrap();
/// let policy = Arc::new(Policy::from_path(&path)?);
/// let watcher = Watcher::spawn(policy.clone(), &path, Duration::from_millis(20)).unwrap();
/// std::fs::write(&path, "[[rule]]\nname = \"b\"\nlimit = \"1/s\"\n").unwrap();
/// let start = std::time::Instant::now();
/// while policy.definition().rules()[0].name() != "b" && start.elapsed() < Duration::from_secs(5) {
///     std::thread::sleep(Duration::from_millis(5));
/// }
/// assert_eq!(policy.definition().rules()[0].name(), "b");
/// watcher.stop();
/// # Ok::<(), sluicegate_policy::Error>(())
/// ```
pub struct Watcher {
    worker: Worker,
}

/// A polling thread and its stop flag: stopped (flag set, thread woken and
/// joined) by [`Worker::halt`] or when dropped. The file and Redis watchers'
/// threads.
pub(crate) struct Worker {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Worker {
    /// Runs `body` on a thread named `name`, with the flag it must poll.
    pub(crate) fn spawn(
        name: &str,
        body: impl FnOnce(Arc<AtomicBool>) + Send + 'static,
    ) -> std::io::Result<Worker> {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::Builder::new()
            .name(name.into())
            .spawn(move || body(flag))?;
        Ok(Worker {
            stop,
            thread: Some(thread),
        })
    }

    /// Sets the flag, wakes the thread from its park and waits for it to end.
    pub(crate) fn halt(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            t.thread().unpark();
            let _ = t.join();
        }
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        self.halt();
    }
}

impl Watcher {
    /// Polls `path` every `interval` (a reload is in force within about one
    /// interval of the write) on a thread of its own. The file's content now is
    /// the baseline: the policy should have been loaded from it.
    ///
    /// ```
    /// # use std::{sync::Arc, time::Duration};
    /// # use sluicegate_policy::{Policy, Watcher};
    /// let p = Arc::new(Policy::from_toml("")?);
    /// let w = Watcher::spawn(p, "/nonexistent.toml", Duration::from_millis(10)).unwrap();
    /// drop(w); // stops and joins the thread
    /// # Ok::<(), sluicegate_policy::Error>(())
    /// ```
    pub fn spawn(
        policy: Arc<Policy>,
        path: impl AsRef<Path>,
        interval: Duration,
    ) -> std::io::Result<Watcher> {
        let path: PathBuf = path.as_ref().to_owned();
        // Read now, not on the thread: a write right after spawn returns must be
        // seen as a change.
        let mut last = std::fs::read(&path).ok();
        let worker = Worker::spawn("sluicegate-policy-watch", move |stop| {
            while !stop.load(Ordering::Acquire) {
                std::thread::park_timeout(interval);
                let now = std::fs::read(&path).ok();
                if now.is_some() && now != last {
                    let _ = policy.reload_from_path(&path);
                    last = now;
                }
            }
        })?;
        Ok(Watcher { worker })
    }

    /// Stops watching and waits for the thread to end.
    ///
    /// ```
    /// # use std::{sync::Arc, time::Duration};
    /// # use sluicegate_policy::{Policy, Watcher};
    /// let p = Arc::new(Policy::from_toml("")?);
    /// Watcher::spawn(p, "rules.toml", Duration::from_secs(60)).unwrap().stop(); // returns at once
    /// # Ok::<(), sluicegate_policy::Error>(())
    /// ```
    pub fn stop(mut self) {
        self.worker.halt();
    }
}
