//! A policy that follows a store's domain: [`Policy::from_store`].
//!
//! A thread owned by the policy polls the domain's version (one indexed query)
//! — at once when the store pushes a change (PostgreSQL's `NOTIFY`, on a
//! `LISTEN` connection of the reader's), else every poll interval — and, when
//! it changed, reads the domain and reloads it with
//! [`Policy::reload_from_def`]: unchanged rules keep their state, and a domain
//! that does not validate is never applied. While the store cannot be reached
//! the rules in force stay, and the policy reports it: [`Policy::last_error`],
//! [`Policy::store_reachable`] and the `sluicegate_policy_store_up` metric.
//! After an outage the domain is read again whatever its version. A domain
//! that disappears from the store is reported the same way (its rules stay).
//!
//! A PostgreSQL store is kept open between polls (its connection made again
//! after an outage; its listening connection too, before the version is read,
//! so a change between the two is not missed). The SQLite store is opened anew
//! for each poll: a file replaced by a rename
//! (a restore from a backup) is read, not the old file still held open, and a
//! file gone is an outage, not an old copy read forever. A reader never
//! creates a store. Within one process, use the store only through this
//! crate's SQLite: a second SQLite library in the process (Python's `sqlite3`,
//! a system `libsqlite3`) on the same file shares its POSIX locks, and either
//! may take itself for the file's only user and remove the WAL under the other.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use super::{Domain, Listener, Location, Store, StoreError};
use crate::policy::{Core, Policy, PolicyBuilder};
use crate::reload::Worker;

/// How a [`Policy::from_store`] reader follows its domain.
///
/// ```
/// use std::time::Duration;
/// use sluicegate_policy::store::FollowOptions;
/// let o = FollowOptions::new().poll_interval(Duration::from_millis(100)).snapshot("/var/lib/app/rules.json");
/// assert_eq!(o.interval(), Duration::from_millis(100));
/// assert_eq!(FollowOptions::default().interval(), Duration::from_millis(200));
/// ```
#[derive(Clone, Debug)]
pub struct FollowOptions {
    poll: Duration,
    snapshot: Option<PathBuf>,
}

impl Default for FollowOptions {
    fn default() -> Self {
        FollowOptions {
            poll: Duration::from_millis(200),
            snapshot: None,
        }
    }
}

impl FollowOptions {
    /// Polls every 200 ms (a change is in force within about that, well under
    /// a second), without a snapshot.
    ///
    /// ```
    /// assert!(sluicegate_policy::store::FollowOptions::new().snapshot_path().is_none());
    /// ```
    pub fn new() -> Self {
        Self::default()
    }

    /// How often the domain's version is polled (at least 10 ms).
    ///
    /// ```
    /// # use std::time::Duration;
    /// let o = sluicegate_policy::store::FollowOptions::new().poll_interval(Duration::ZERO);
    /// assert_eq!(o.interval(), Duration::from_millis(10));
    /// ```
    pub fn poll_interval(mut self, every: Duration) -> Self {
        self.poll = every.max(Duration::from_millis(10));
        self
    }

    /// A file the domain is written to after every good load (whole: a
    /// temporary file beside it renamed over it), and read at start when the
    /// store cannot be reached. A snapshot that cannot be written at start is
    /// an error of `from_store`; later, a warning in the log.
    ///
    /// ```
    /// let o = sluicegate_policy::store::FollowOptions::new().snapshot("rules.json");
    /// assert_eq!(o.snapshot_path().unwrap().to_str(), Some("rules.json"));
    /// ```
    pub fn snapshot(mut self, path: impl Into<PathBuf>) -> Self {
        self.snapshot = Some(path.into());
        self
    }

    /// The poll interval.
    ///
    /// ```
    /// # use std::time::Duration;
    /// assert_eq!(sluicegate_policy::store::FollowOptions::new().interval(), Duration::from_millis(200));
    /// ```
    pub fn interval(&self) -> Duration {
        self.poll
    }

    /// The snapshot file, if any.
    ///
    /// ```
    /// assert!(sluicegate_policy::store::FollowOptions::default().snapshot_path().is_none());
    /// ```
    pub fn snapshot_path(&self) -> Option<&Path> {
        self.snapshot.as_deref()
    }
}

/// The thread following a store for a policy; stopped and joined on drop or
/// by [`Policy::stop_following`].
pub(crate) struct Follower {
    worker: Mutex<Worker>,
}

/// What the follower thread keeps between polls.
struct Follow {
    core: Arc<Core>,
    url: String,
    domain: String,
    snapshot: Option<PathBuf>,
    /// The version last read (applied, or rejected by validation): not read again.
    seen: Option<u64>,
    /// The last poll failed: read the domain again once the store answers.
    down: bool,
    /// The store, kept between polls (`None`: opened anew for each, or not
    /// yet opened).
    store: Option<Store>,
    /// Changes pushed by the store, while its connection lives.
    listener: Option<Box<dyn Listener>>,
    /// Whether the store can push changes (until it says it cannot).
    pushes: bool,
}

impl Follow {
    fn poll(&mut self) {
        match self.read() {
            Ok(None) => self.reachable(),
            Ok(Some(domain)) => {
                self.reachable();
                self.seen = Some(domain.version);
                self.apply(&domain);
            }
            Err(e) => self.unreachable(&e),
        }
    }

    /// The domain if it changed since the last read (or after an outage).
    fn read(&mut self) -> Result<Option<Domain>, StoreError> {
        let store = match &self.store {
            Some(s) => s.clone(),
            None => Store::open_with(&self.url, false)?,
        };
        if !super::reopen_per_poll(&store) {
            self.store = Some(store.clone());
        }
        // Listening before the version is read: a change between the two is
        // then both notified and read, never neither.
        if self.pushes && !self.listener.as_ref().is_some_and(|l| l.alive()) {
            self.listener = None;
            match super::listen(&store, &self.domain, std::thread::current())? {
                Some(l) => self.listener = Some(l),
                None => self.pushes = false,
            }
        }
        let version = store.version(&self.domain)?;
        if version.is_some() && version == self.seen && !self.down {
            return Ok(None);
        }
        store
            .domain(&self.domain)?
            .map(Some)
            .ok_or_else(|| missing(&self.domain))
    }

    fn apply(&self, domain: &Domain) {
        let applied = domain
            .to_def()
            .map_err(|e| self.core.failed(e))
            .and_then(|def| self.core.reload_from_def(def));
        if applied.is_ok() {
            if let Some(path) = &self.snapshot {
                if let Err(e) = write_snapshot(path, domain) {
                    log::warn!("sluicegate policy: {e}");
                }
            }
        }
    }

    fn reachable(&mut self) {
        if self.down {
            let url = super::redact(&self.url);
            log::info!("sluicegate policy: store `{url}` reachable again");
        }
        self.down = false;
        let mut s = self
            .core
            .reload
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        s.store_up = Some(true);
    }

    fn unreachable(&mut self, e: &StoreError) {
        if !self.down {
            log::warn!("sluicegate policy: {e}; the rules in force are kept");
        }
        self.down = true;
        let mut s = self
            .core
            .reload
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        s.store_up = Some(false);
        s.store_errors += 1;
        s.last_error = Some(e.to_string());
    }
}

fn missing(domain: &str) -> StoreError {
    StoreError::NotFound(format!("domain `{domain}`"))
}

/// Writes the domain to `path` whole: to a file beside it, then renamed over it.
fn write_snapshot(path: &Path, domain: &Domain) -> Result<(), StoreError> {
    let fail = |e: &dyn std::fmt::Display| {
        StoreError::Snapshot(format!("cannot write `{}`: {e}", path.display()))
    };
    let text = serde_json::to_vec_pretty(domain).map_err(|e| fail(&e))?;
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    std::fs::write(&tmp, text).map_err(|e| fail(&e))?;
    std::fs::rename(&tmp, path).map_err(|e| fail(&e))
}

fn read_snapshot(path: &Path, domain: &str) -> Result<Domain, String> {
    let text = std::fs::read(path).map_err(|e| e.to_string())?;
    let d: Domain = serde_json::from_slice(&text).map_err(|e| e.to_string())?;
    if d.name != domain {
        return Err(format!("it holds domain `{}`, not `{domain}`", d.name));
    }
    Ok(d)
}

impl PolicyBuilder {
    /// The policy of `domain` in the store at `url`, following its changes as
    /// `options` say; see [`Policy::from_store`].
    ///
    /// ```
    /// use std::time::Duration;
    /// use sluicegate_policy::Policy;
    /// use sluicegate_policy::store::{FollowOptions, RuleRecord, Store};
    /// let dir = tempfile::tempdir().unwrap();
    /// let url = format!("sqlite:{}", dir.path().join("rules.db").display());
    /// Store::open(&url)?.create_rule("api", RuleRecord::new("a", "1/s"), None, "ops")?;
    /// let options = FollowOptions::new().poll_interval(Duration::from_millis(50)).snapshot(dir.path().join("api.json"));
    /// let p = Policy::builder().from_store(&url, "api", options)?;
    /// assert!(dir.path().join("api.json").exists()); // written after the load
    /// # Ok::<(), sluicegate_policy::store::StoreError>(())
    /// ```
    pub fn from_store(
        self,
        url: &str,
        domain: &str,
        options: FollowOptions,
    ) -> Result<Policy, StoreError> {
        // A bad URL is an error, snapshot or not.
        Location::parse(url)?;
        let opened = Store::open_with(url, false);
        let kept = opened
            .as_ref()
            .ok()
            .filter(|s| !super::reopen_per_poll(s))
            .cloned();
        let read = opened.and_then(|s| s.domain(domain)?.ok_or_else(|| missing(domain)));
        let (loaded, outage) = match (read, &options.snapshot) {
            (Ok(d), _) => (d, None),
            (Err(e @ StoreError::Unavailable { .. }), Some(path)) => {
                match read_snapshot(path, domain) {
                    Ok(d) => {
                        log::warn!(
                            "sluicegate policy: {e}; starting from the snapshot `{}`",
                            path.display()
                        );
                        (d, Some(e))
                    }
                    Err(s) => {
                        return Err(StoreError::Snapshot(format!(
                            "{e}, and the snapshot `{}` cannot be read: {s}",
                            path.display()
                        )));
                    }
                }
            }
            (Err(e), _) => return Err(e),
        };
        let def = loaded.to_def().map_err(StoreError::Invalid)?;
        let mut policy = self.from_def(def).map_err(StoreError::Invalid)?;
        if outage.is_none() {
            if let Some(path) = &options.snapshot {
                write_snapshot(path, &loaded)?;
            }
        }
        {
            let mut s = policy
                .core
                .reload
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            s.store_up = Some(outage.is_none());
            if let Some(e) = &outage {
                s.store_errors += 1;
                s.last_error = Some(e.to_string());
            }
        }
        let mut follow = Follow {
            core: policy.core.clone(),
            url: url.to_owned(),
            domain: domain.to_owned(),
            snapshot: options.snapshot.clone(),
            seen: Some(loaded.version),
            down: outage.is_some(),
            store: kept,
            listener: None,
            pushes: true,
        };
        let every = options.poll;
        let (ready, started) = std::sync::mpsc::sync_channel(1);
        let worker = Worker::spawn("sluicegate-store-follow", move |stop: Arc<AtomicBool>| {
            // At once: a store that pushes changes starts listening now (so a
            // change committed after `from_store` returns is pushed), and what
            // changed since the load above is read.
            follow.poll();
            let _ = ready.send(());
            while !stop.load(Ordering::Acquire) {
                std::thread::park_timeout(every);
                if stop.load(Ordering::Acquire) {
                    break;
                }
                follow.poll();
            }
        })
        .map_err(|e| StoreError::unavailable(url, e))?;
        // Bounded: a store that stops answering mid-poll is the follower's
        // outage to report, not a reader that never starts.
        let _ = started.recv_timeout(Duration::from_secs(15));
        policy.follower = Some(Follower {
            worker: Mutex::new(worker),
        });
        Ok(policy)
    }
}

impl Policy {
    /// The policy of `domain` in the rule store at `url` (`sqlite:PATH`, or
    /// `postgres://…` with the `postgres` feature: see [`Store::open`]), kept
    /// in step with it by a thread the policy owns (stopped when it is
    /// dropped): a change is in force within about 200 ms (the poll interval;
    /// within milliseconds on PostgreSQL, which notifies readers), unchanged rules
    /// keep their state, a change that does not validate is never applied,
    /// and while the store is down the rules in force stay
    /// ([`Self::last_error`] says why). A store that cannot be read at start is
    /// an error; [`PolicyBuilder::from_store`] can start from a snapshot
    /// instead.
    ///
    /// ```
    /// use std::time::{Duration, Instant};
    /// use sluicegate_policy::Policy;
    /// use sluicegate_policy::store::{RuleRecord, Store};
    /// let dir = tempfile::tempdir().unwrap();
    /// let url = format!("sqlite:{}", dir.path().join("rules.db").display());
    /// let store = Store::open(&url)?;
    /// let a = store.create_rule("api", RuleRecord::new("a", "1/minute"), None, "ops")?;
    /// let policy = Policy::from_store(&url, "api")?;
    /// assert!(policy.check(&[("path", "/")]).allowed());
    /// assert!(!policy.check(&[("path", "/")]).allowed());
    /// store.delete_rule("api", "a", a.meta.version, "ops")?;
    /// let start = Instant::now();
    /// while !policy.definition().rules().is_empty() && start.elapsed() < Duration::from_secs(5) {
    ///     std::thread::sleep(Duration::from_millis(10));
    /// }
    /// assert!(policy.check(&[("path", "/")]).allowed()); // no rule left
    /// assert!(Policy::from_store(&url, "nope").is_err());
    /// # Ok::<(), sluicegate_policy::store::StoreError>(())
    /// ```
    pub fn from_store(url: &str, domain: &str) -> Result<Policy, StoreError> {
        PolicyBuilder::default().from_store(url, domain, FollowOptions::default())
    }

    /// Stops following the store (and waits for the thread to end): the rules
    /// in force stay as they are. Dropping the policy does the same; this is for
    /// a policy shared by an `Arc` (a binding's `close()`). No effect on a policy
    /// that follows no store, or no longer.
    ///
    /// ```
    /// # use sluicegate_policy::Policy;
    /// # use sluicegate_policy::store::{RuleRecord, Store};
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let url = format!("sqlite:{}", dir.path().join("rules.db").display());
    /// # Store::open(&url)?.create_rule("api", RuleRecord::new("a", "1/s"), None, "ops")?;
    /// let p = Policy::from_store(&url, "api")?;
    /// p.stop_following();
    /// p.stop_following(); // once is enough
    /// assert_eq!(p.definition().rules().len(), 1);
    /// # Ok::<(), sluicegate_policy::store::StoreError>(())
    /// ```
    pub fn stop_following(&self) {
        if let Some(f) = &self.follower {
            f.worker
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .halt();
        }
    }

    /// For a policy following a store ([`Self::from_store`]): whether its last
    /// poll reached the store. `None` for any other policy.
    ///
    /// ```
    /// # use sluicegate_policy::Policy;
    /// assert_eq!(Policy::from_toml("")?.store_reachable(), None);
    /// # Ok::<(), sluicegate_policy::Error>(())
    /// ```
    pub fn store_reachable(&self) -> Option<bool> {
        self.core
            .reload
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .store_up
    }
}
