//! `--store URL`: every domain of a rule store served as a TOML domain of the
//! same name (a descriptor's entries are the request's attributes). Each
//! domain is a policy following the store on its own (`Policy::from_store`:
//! a change is in force within about 200 ms, unchanged rules keep their
//! state, an invalid change is never applied, the rules stay while the store
//! is down); the store's list of domains is polled too, so a domain created in
//! the store is served within a second. While the store cannot be reached the
//! server reports it (`/healthz` says `degraded`, `sluicegate_server_store_up`
//! is 0) and keeps deciding with the rules it has.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use sluicegate::keyed::Pool;
use sluicegate_policy::redis::RedisFactory;
use sluicegate_policy::store::{Domain, FollowOptions, Store, StoreError};
use sluicegate_policy::Policy;

use crate::config::ConfigError;
use crate::rule_set::RuleSet;

/// How often the store's list of domains is read (a new domain is served
/// within this and the time to build it).
pub const DOMAIN_POLL: Duration = Duration::from_millis(250);

/// Where the rule store is: `--store URL` and `--store-snapshot DIR`.
///
/// ```
/// let s = sluicegate_server::StoreConfig { url: "sqlite:/var/lib/sluicegate/rules.db".into(), snapshot: None };
/// assert!(s.url.starts_with("sqlite:"));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoreConfig {
    /// The store's URL (`sqlite:PATH`; what `Store::open` takes).
    pub url: String,
    /// A directory each domain is written to (`<domain>.json`) after every
    /// good load, and read at start when the store cannot be reached.
    pub snapshot: Option<PathBuf>,
}

/// The store as this server sees it: the handle the admin API writes through,
/// and whether the last poll reached it.
pub(crate) struct StoreState {
    pub config: StoreConfig,
    store: Mutex<Option<Store>>,
    list_up: AtomicBool,
    errors: AtomicU64,
    last_error: Mutex<Option<String>>,
}

impl std::fmt::Debug for StoreState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StoreState")
            .field("url", &sluicegate_policy::store::redact(&self.config.url))
            .finish_non_exhaustive()
    }
}

/// The store's health, as `/healthz` and the metrics report it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct StoreHealth {
    pub up: bool,
    pub errors: u64,
    pub last_error: Option<String>,
}

/// The file a domain's snapshot is kept in: its name when it is a plain file
/// name, else its bytes outside `[A-Za-z0-9_.-]` as `%XX`.
pub(crate) fn snapshot_file(dir: &Path, domain: &str) -> PathBuf {
    let mut name = String::new();
    for (i, b) in domain.bytes().enumerate() {
        let plain = b.is_ascii_alphanumeric() || b == b'_' || b == b'-' || (b == b'.' && i > 0);
        if plain {
            name.push(char::from(b));
        } else {
            name.push_str(&format!("%{b:02X}"));
        }
    }
    dir.join(format!("{name}.json"))
}

impl StoreState {
    /// Opens the store and builds a policy for each of its domains, or, when
    /// the store cannot be reached and `snapshot` is set, for each domain
    /// snapshot there. Blocking (the store's calls are).
    pub(crate) fn open(
        config: StoreConfig,
        pool: &Pool,
    ) -> Result<(StoreState, Vec<(String, Policy)>), ConfigError> {
        let shown = sluicegate_policy::store::redact(&config.url);
        let err = |e: &dyn std::fmt::Display| ConfigError::new("--store", e.to_string());
        if let Some(dir) = &config.snapshot {
            std::fs::create_dir_all(dir).map_err(|e| {
                ConfigError::new("--store-snapshot", format!("{}: {e}", dir.display()))
            })?;
        }
        let opened = Store::open(&config.url);
        let (store, names) = match opened.and_then(|s| s.domains().map(|d| (s, d))) {
            Ok((s, names)) => (Some(s), names),
            Err(e @ StoreError::Unavailable { .. }) => match &config.snapshot {
                Some(dir) => {
                    let names = snapshot_domains(dir).map_err(|m| {
                        err(&format!(
                            "{e}, and the snapshots in {} cannot be read: {m}",
                            dir.display()
                        ))
                    })?;
                    tracing::warn!(store = %shown, error = %e, domains = names.len(), "the store cannot be reached: serving its domains from the snapshots");
                    (None, names)
                }
                None => return Err(err(&e)),
            },
            Err(e) => return Err(err(&e)),
        };
        let state = StoreState {
            list_up: AtomicBool::new(store.is_some()),
            errors: AtomicU64::new(u64::from(store.is_none())),
            last_error: Mutex::new(None),
            store: Mutex::new(store),
            config,
        };
        let mut policies = Vec::new();
        for name in names {
            let policy = state
                .follow(&name, pool)
                .map_err(|e| err(&format!("domain '{name}': {e}")))?;
            policies.push((name, policy));
        }
        Ok((state, policies))
    }

    /// A policy following domain `name`.
    pub(crate) fn follow(&self, name: &str, pool: &Pool) -> Result<Policy, StoreError> {
        let mut options = FollowOptions::new();
        if let Some(dir) = &self.config.snapshot {
            options = options.snapshot(snapshot_file(dir, name));
        }
        Policy::builder()
            .remote(RedisFactory::default())
            .pool(pool.clone())
            .from_store(&self.config.url, name, options)
    }

    /// The store's handle (opened now if it was not at start), or why not.
    pub(crate) fn store(&self) -> Result<Store, StoreError> {
        let mut s = self.store.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(s) = &*s {
            return Ok(s.clone());
        }
        let opened = Store::open(&self.config.url)?;
        *s = Some(opened.clone());
        Ok(opened)
    }

    /// Reads the store's domains (blocking), noting whether it answered.
    pub(crate) fn poll_domains(&self) -> Result<Vec<String>, StoreError> {
        let read = self.store().and_then(|s| s.domains());
        match &read {
            Ok(_) => {
                if !self.list_up.swap(true, Ordering::Relaxed) {
                    tracing::info!("rule store reachable again");
                }
            }
            Err(e) => {
                // A handle whose connection is gone is opened anew next time
                // (the admin API's calls take the new one too).
                if let StoreError::Unavailable { .. } = e {
                    *self.store.lock().unwrap_or_else(|p| p.into_inner()) = None;
                }
                if self.list_up.swap(false, Ordering::Relaxed) {
                    tracing::warn!(error = %e, "rule store unreachable; the rules in force are kept");
                }
                self.errors.fetch_add(1, Ordering::Relaxed);
                *self.last_error.lock().unwrap_or_else(|p| p.into_inner()) = Some(e.to_string());
            }
        }
        read
    }

    /// Up only if the last domain poll and every domain's last poll reached
    /// the store; the last error seen otherwise.
    pub(crate) fn health(&self, rules: &RuleSet) -> StoreHealth {
        let mut up = self.list_up.load(Ordering::Relaxed);
        let mut last_error = if up {
            None
        } else {
            self.last_error
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .clone()
        };
        for (_, d) in rules.store_domains() {
            if d.policy().store_reachable() == Some(false) {
                up = false;
                if last_error.is_none() {
                    last_error = d.policy().last_error();
                }
            }
        }
        StoreHealth {
            up,
            errors: self.errors.load(Ordering::Relaxed),
            last_error,
        }
    }
}

/// The domains snapshot in `dir` (the name inside each `*.json` file).
fn snapshot_domains(dir: &Path) -> Result<Vec<String>, String> {
    let mut names = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(|e| e.to_string())? {
        let path = entry.map_err(|e| e.to_string())?.path();
        if path.extension().is_none_or(|x| x != "json") {
            continue;
        }
        let text = std::fs::read(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        let d: Domain =
            serde_json::from_slice(&text).map_err(|e| format!("{}: {e}", path.display()))?;
        names.push(d.name);
    }
    if names.is_empty() {
        return Err("no domain snapshot (<domain>.json) in the directory".into());
    }
    names.sort();
    Ok(names)
}

/// Polls the store's domains every [`DOMAIN_POLL`] and serves each new one,
/// until `stop`.
pub(crate) async fn follow_domains(
    shared: Arc<crate::service::Shared>,
    mut stop: tokio::sync::watch::Receiver<bool>,
) {
    let Some(state) = shared.store.clone() else {
        return;
    };
    // Domains that could not be followed yet: logged once until they are.
    let mut failing: std::collections::HashSet<String> = Default::default();
    loop {
        tokio::select! {
            _ = tokio::time::sleep(DOMAIN_POLL) => {}
            _ = stop.wait_for(|s| *s) => return,
        }
        let s = state.clone();
        let Ok(Ok(names)) = tokio::task::spawn_blocking(move || s.poll_domains()).await else {
            continue;
        };
        let rules = shared.rules();
        let new: Vec<String> = names
            .into_iter()
            .filter(|n| rules.domain(n).is_none() && !shared.refused(n))
            .collect();
        for name in new {
            let (s, pool) = (state.clone(), shared.tables.pool.clone());
            let n = name.clone();
            let built = tokio::task::spawn_blocking(move || s.follow(&n, &pool)).await;
            match built {
                Ok(Ok(policy)) => {
                    failing.remove(&name);
                    let domain =
                        Arc::new(crate::toml_domain::TomlDomain::from_store(&name, policy));
                    match shared.add_store_domain(&name, domain) {
                        Ok(()) => {
                            tracing::info!(domain = %name, "serving a new domain of the store")
                        }
                        Err(e) => {
                            tracing::error!(error = %e, "not serving the store's domain");
                            shared.refuse(&name);
                        }
                    }
                }
                Ok(Err(e)) => {
                    if failing.insert(name.clone()) {
                        tracing::warn!(domain = %name, error = %e, "cannot follow the store's domain yet; trying again");
                    }
                }
                Err(_) => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::snapshot_file;
    use std::path::Path;

    #[test]
    fn snapshot_files_are_plain_names() {
        let d = Path::new("/s");
        assert_eq!(snapshot_file(d, "api"), Path::new("/s/api.json"));
        assert_eq!(snapshot_file(d, "a.b-c_d"), Path::new("/s/a.b-c_d.json"));
        assert_eq!(snapshot_file(d, "../x"), Path::new("/s/%2E.%2Fx.json"));
        assert_eq!(snapshot_file(d, "a/b c"), Path::new("/s/a%2Fb%20c.json"));
    }
}
