//! Rules as records (feature `store`): a [`Store`] keeps each domain's rules
//! (the fields of a TOML rule, a position, a version, timestamps and who wrote
//! them) and its settings, validates every write with the rule file's
//! validator, and records every change in an audit trail in the same
//! transaction. [`crate::Policy::from_store`] builds a policy from a domain and
//! follows its changes.
//!
//! * records: [`RuleRecord`], [`DomainSettings`]; as stored: [`StoredRule`],
//!   [`StoredSettings`], [`Domain`], each with [`Meta`];
//! * writes with optimistic concurrency: [`Store::create_rule`],
//!   [`Store::replace_rule`], [`Store::delete_rule`], [`Store::put_settings`]
//!   (a stale version is [`StoreError::Stale`]);
//! * a whole domain from or to rule-file text: [`Store::import_toml`] (one
//!   transaction, audited as `import`), [`Store::export_toml`];
//! * the trail: [`Store::audit`], [`AuditEntry`], by [`Cursor`].
//!
//! Backends:
//!
//! * SQLite (`sqlite:PATH` or `sqlite://PATH`): WAL, a busy timeout, migrations
//!   at open;
//! * PostgreSQL (`postgres://…` or `postgresql://…`, feature `postgres`):
//!   migrations at start under an advisory lock, writes serialized by another,
//!   a `NOTIFY` per committed change (readers wake on it), `sslmode` honoured
//!   with rustls (see [`Store::open`]).
//!
//! Every backend implements one small trait (`Backend`): read a domain, its
//! version, the audit, and one write transaction that validates and audits
//! through code shared here, so both behave alike (one conformance suite,
//! `policy/tests/store.rs`, runs against each).
//!
//! ```
//! use sluicegate_policy::store::{RuleRecord, Store, StoreError};
//! let dir = tempfile::tempdir().unwrap();
//! let store = Store::open(&format!("sqlite:{}", dir.path().join("rules.db").display()))?;
//! let a = store.create_rule("api", RuleRecord::new("per-ip", "5/s").key(["ip"]), None, "alice")?;
//! // Replacing needs the version read: a stale one is refused.
//! let b = store.replace_rule("api", RuleRecord::new("per-ip", "10/s").key(["ip"]), None, a.meta.version, "bob")?;
//! let late = store.replace_rule("api", RuleRecord::new("per-ip", "1/s"), None, a.meta.version, "carol");
//! assert!(matches!(late, Err(StoreError::Stale { .. })));
//! // An invalid rule is never saved: the error names its field.
//! let bad = store.create_rule("api", RuleRecord::new("x", "5/fortnight"), None, "bob").unwrap_err();
//! assert_eq!(bad.invalid().unwrap().diagnostics()[0].field.as_deref(), Some("limit"));
//! let trail = store.audit(None, None, 10)?;
//! assert_eq!(trail.entries.len(), 2);
//! assert_eq!(trail.entries[1].by, "bob");
//! assert_eq!(b.meta.version, 2);
//! # Ok::<(), StoreError>(())
//! ```

mod follow;
#[cfg(feature = "postgres")]
mod postgres;
mod record;
mod sqlite;
mod text;

use std::fmt;
use std::str::FromStr;
use std::sync::Arc;
use std::time::SystemTime;

use serde::{Deserialize, Serialize};

pub use follow::FollowOptions;
pub(crate) use follow::Follower;
pub use record::{
    Defaults, Domain, DomainSettings, MatchValue, Meta, RedisTable, RuleRecord, SharedTable,
    StateTable, StoredRule, StoredSettings,
};
pub use text::{DomainFile, ImportSummary};

use crate::diag::Error;

/// What went wrong with a store.
///
/// ```
/// use sluicegate_policy::store::{Store, StoreError};
/// let err = Store::open("mysql://admin:s3cret@db/rules").unwrap_err();
/// assert!(matches!(err, StoreError::Url(_)));
/// assert!(err.to_string().contains("admin:***@db"));
/// ```
#[derive(Debug)]
#[non_exhaustive]
pub enum StoreError {
    /// The URL is not a store URL (`sqlite:PATH`, `sqlite://PATH`,
    /// `postgres://…`), or a `postgres://` URL's parameters are wrong; its
    /// password, if it has one, is shown as `***`.
    Url(String),
    /// A `postgres://` URL whose parameters are wrong (an unknown `sslmode`, a
    /// certificate file that cannot be read, a parameter tokio-postgres does
    /// not know).
    UrlParam {
        /// The URL (a password shown as `***`).
        url: String,
        /// What is wrong.
        message: String,
    },
    /// A store of this kind is not built into this build (`postgres` without
    /// the crate's `postgres` feature).
    Unsupported {
        /// The URL's scheme.
        scheme: String,
    },
    /// The store could not be reached, opened or read (the file is missing or
    /// not a database, a lock was held past the busy timeout, I/O failed).
    Unavailable {
        /// The store's URL (a password shown as `***`).
        url: String,
        /// What failed.
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// The database's schema is newer than this version knows.
    Schema {
        /// The schema version found.
        found: i64,
        /// The newest this version knows.
        known: i64,
    },
    /// A stored record could not be decoded.
    Corrupt(String),
    /// The write would make the domain invalid: nothing was saved. The error
    /// names each finding's rule and field.
    Invalid(Error),
    /// The record's version is not the one given: someone else wrote it since.
    Stale {
        /// What is stored now (`None`: the record no longer exists).
        current: Option<u64>,
        /// The version the write was based on.
        given: u64,
    },
    /// A create found the record already there.
    Exists {
        /// Its version.
        current: u64,
    },
    /// No such domain or rule.
    NotFound(String),
    /// A snapshot file could not be read or written.
    Snapshot(String),
}

impl StoreError {
    /// The validation error, for [`StoreError::Invalid`].
    ///
    /// ```
    /// # use sluicegate_policy::store::StoreError;
    /// assert!(StoreError::NotFound("rule `a`".into()).invalid().is_none());
    /// ```
    pub fn invalid(&self) -> Option<&Error> {
        match self {
            StoreError::Invalid(e) => Some(e),
            _ => None,
        }
    }

    pub(crate) fn unavailable(
        url: &str,
        e: impl Into<Box<dyn std::error::Error + Send + Sync>>,
    ) -> StoreError {
        StoreError::Unavailable {
            url: redact(url),
            source: e.into(),
        }
    }
}

/// `url` with its passwords replaced by `***` (the user info's,
/// `scheme://user:password@host`, and a `password=` query parameter, as
/// libpq takes it): what every error message, log line and `Debug` of this
/// module shows, what a program should show of a store URL too, and what an
/// admin API shows of a `[redis]` URL in a store's records.
///
/// ```
/// use sluicegate_policy::store::redact;
/// assert_eq!(redact("postgres://app:s3cret@db:5432/rules"), "postgres://app:***@db:5432/rules");
/// assert_eq!(redact("postgres://db/rules?password=s3cret"), "postgres://db/rules?password=***");
/// assert_eq!(redact("redis://u:secret@h:6379/0"), "redis://u:***@h:6379/0");
/// ```
pub fn redact(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(authority_end);
    let authority = match authority.rsplit_once('@') {
        Some((user_info, host)) => match user_info.split_once(':') {
            Some((user, _)) => format!("{user}:***@{host}"),
            None => authority.to_owned(),
        },
        None => authority.to_owned(),
    };
    let tail = match tail.split_once('?') {
        Some((path, query)) => {
            let params: Vec<String> = query
                .split('&')
                .map(|p| match p.split_once('=') {
                    Some((k, _)) if k.eq_ignore_ascii_case("password") => format!("{k}=***"),
                    _ => p.to_owned(),
                })
                .collect();
            format!("{path}?{}", params.join("&"))
        }
        None => tail.to_owned(),
    };
    format!("{scheme}://{authority}{tail}")
}

#[cfg(test)]
mod tests {
    use super::redact;

    #[test]
    fn passwords_are_redacted() {
        let cases = [
            ("postgres://u:p@h:5432/db", "postgres://u:***@h:5432/db"),
            ("postgres://u@h/db", "postgres://u@h/db"),
            (
                "postgres://h/db?user=u&password=p&sslmode=require",
                "postgres://h/db?user=u&password=***&sslmode=require",
            ),
            ("postgres://u:p:q@h", "postgres://u:***@h"),
            ("sqlite:/var/lib/rules.db", "sqlite:/var/lib/rules.db"),
            ("sqlite:///var/lib/rules.db", "sqlite:///var/lib/rules.db"),
        ];
        for (url, shown) in cases {
            assert_eq!(redact(url), shown, "{url}");
        }
    }
}

impl fmt::Display for StoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StoreError::Url(u) => write!(
                f,
                "`{u}` is not a store URL: write sqlite:PATH, sqlite://PATH or postgres://USER@HOST/DATABASE"
            ),
            StoreError::UrlParam { url, message } => write!(f, "store URL `{url}`: {message}"),
            StoreError::Unsupported { scheme } => write!(
                f,
                "`{scheme}` stores are not built in: this build has sqlite:PATH only (build sluicegate-policy with its `postgres` feature)"
            ),
            StoreError::Unavailable { url, source } => {
                write!(f, "store `{url}` unavailable: {source}")
            }
            StoreError::Schema { found, known } => write!(
                f,
                "the store's schema is version {found}, newer than this version's {known}: upgrade sluicegate"
            ),
            StoreError::Corrupt(m) => write!(f, "a stored record does not decode: {m}"),
            StoreError::Invalid(e) => write!(f, "invalid, nothing saved: {e}"),
            StoreError::Stale {
                current: Some(c),
                given,
            } => write!(
                f,
                "stale version {given}: the record is at version {c} (written by someone else since)"
            ),
            StoreError::Stale {
                current: None,
                given,
            } => write!(f, "stale version {given}: the record no longer exists"),
            StoreError::Exists { current } => {
                write!(
                    f,
                    "the record exists (version {current}): replace it with its version"
                )
            }
            StoreError::NotFound(what) => write!(f, "no {what} in the store"),
            StoreError::Snapshot(m) => write!(f, "snapshot: {m}"),
        }
    }
}

impl std::error::Error for StoreError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            StoreError::Unavailable { source, .. } => Some(source.as_ref()),
            StoreError::Invalid(e) => Some(e),
            _ => None,
        }
    }
}

/// What a change did, in the audit trail.
///
/// ```
/// use sluicegate_policy::store::Action;
/// assert_eq!(Action::Replace.name(), "replace");
/// assert_eq!("delete".parse::<Action>(), Ok(Action::Delete));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Action {
    /// A rule made.
    Create,
    /// A rule replaced.
    Replace,
    /// A rule deleted.
    Delete,
    /// A domain's settings written.
    Settings,
    /// A rule or the settings written by an import ([`Store::import_toml`]):
    /// one entry per record the import made, replaced or deleted, all of one
    /// transaction.
    Import,
}

impl Action {
    const ALL: [Action; 5] = [
        Action::Create,
        Action::Replace,
        Action::Delete,
        Action::Settings,
        Action::Import,
    ];

    /// Its name in the trail.
    ///
    /// ```
    /// assert_eq!(sluicegate_policy::store::Action::Settings.name(), "settings");
    /// ```
    pub const fn name(self) -> &'static str {
        match self {
            Action::Create => "create",
            Action::Replace => "replace",
            Action::Delete => "delete",
            Action::Settings => "settings",
            Action::Import => "import",
        }
    }
}

impl FromStr for Action {
    type Err = String;
    fn from_str(s: &str) -> Result<Action, String> {
        Action::ALL
            .into_iter()
            .find(|a| a.name() == s)
            .ok_or_else(|| format!("unknown audit action `{s}`"))
    }
}

/// A record before or after a change.
///
/// ```
/// # use sluicegate_policy::store::{Record, RuleRecord, Store};
/// # let dir = tempfile::tempdir().unwrap();
/// # let store = Store::open(&format!("sqlite:{}", dir.path().join("r.db").display()))?;
/// store.create_rule("api", RuleRecord::new("a", "1/s"), None, "ops")?;
/// let e = &store.audit(None, None, 1)?.entries[0];
/// assert!(matches!(&e.after, Some(Record::Rule(r)) if r.rule.name == "a"));
/// # Ok::<(), sluicegate_policy::store::StoreError>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Record {
    /// A rule.
    Rule(StoredRule),
    /// A domain's settings.
    Settings(StoredSettings),
}

/// One change, as the audit trail keeps it: who, when, what, before and after.
///
/// ```
/// # use sluicegate_policy::store::{Action, RuleRecord, Store};
/// # let dir = tempfile::tempdir().unwrap();
/// # let store = Store::open(&format!("sqlite:{}", dir.path().join("r.db").display()))?;
/// let a = store.create_rule("api", RuleRecord::new("a", "1/s"), None, "ops")?;
/// store.delete_rule("api", "a", a.meta.version, "ops")?;
/// let e = &store.audit(Some("api"), None, 10)?.entries[1];
/// assert_eq!((e.action, e.rule.as_deref(), e.after.is_none()), (Action::Delete, Some("a"), true));
/// # Ok::<(), sluicegate_policy::store::StoreError>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AuditEntry {
    /// Its place in the trail (increasing): the cursor to read on after it.
    pub cursor: Cursor,
    /// When.
    pub at: SystemTime,
    /// Who (`updated_by`).
    pub by: String,
    /// What was done.
    pub action: Action,
    /// In which domain.
    pub domain: String,
    /// The rule's name (`None`: the domain's settings).
    pub rule: Option<String>,
    /// The record before (`None`: it was made).
    pub before: Option<Record>,
    /// The record after (`None`: it was deleted).
    pub after: Option<Record>,
}

/// A place in the audit trail: read the entries after it.
///
/// ```
/// use sluicegate_policy::store::Cursor;
/// let c: Cursor = "42".parse().unwrap();
/// assert_eq!(c.to_string(), "42");
/// assert!("x".parse::<Cursor>().is_err());
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Cursor(pub(crate) u64);

impl fmt::Display for Cursor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

impl FromStr for Cursor {
    type Err = String;
    fn from_str(s: &str) -> Result<Cursor, String> {
        s.parse()
            .map(Cursor)
            .map_err(|_| format!("`{s}` is not an audit cursor"))
    }
}

/// One page of the audit trail, oldest first.
///
/// ```
/// # use sluicegate_policy::store::{RuleRecord, Store};
/// # let dir = tempfile::tempdir().unwrap();
/// # let store = Store::open(&format!("sqlite:{}", dir.path().join("r.db").display()))?;
/// for i in 0..3 { store.create_rule("api", RuleRecord::new(format!("r{i}"), "1/s"), None, "ops")?; }
/// let first = store.audit(None, None, 2)?;
/// assert_eq!(first.entries.len(), 2);
/// let rest = store.audit(None, first.next, 2)?;
/// assert_eq!((rest.entries.len(), rest.next), (1, None));
/// # Ok::<(), sluicegate_policy::store::StoreError>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AuditPage {
    /// The entries, oldest first.
    pub entries: Vec<AuditEntry>,
    /// Where the next page starts (`None`: this was the last).
    pub next: Option<Cursor>,
}

/// The most entries one audit page holds (a larger `limit` is this).
///
/// ```
/// # use sluicegate_policy::store::{Store, MAX_AUDIT_PAGE};
/// # let dir = tempfile::tempdir().unwrap();
/// # let store = Store::open(&format!("sqlite:{}", dir.path().join("r.db").display()))?;
/// assert_eq!(MAX_AUDIT_PAGE, 1000);
/// assert!(store.audit(None, None, usize::MAX)?.entries.is_empty());
/// # Ok::<(), sluicegate_policy::store::StoreError>(())
/// ```
pub const MAX_AUDIT_PAGE: usize = 1000;

/// A change to make in one write transaction, with its precondition.
pub(crate) enum Change {
    Create {
        rule: RuleRecord,
        position: Option<i64>,
    },
    Replace {
        rule: RuleRecord,
        position: Option<i64>,
        version: u64,
    },
    Delete {
        name: String,
        version: u64,
    },
    Settings {
        settings: DomainSettings,
        version: Option<u64>,
    },
    /// The domain's settings and rules (in order) replaced by these.
    Import {
        settings: DomainSettings,
        rules: Vec<RuleRecord>,
    },
}

/// What a write does to one record, decided against the domain as the
/// transaction read it; a write is a list of them (one, or an import's).
#[derive(Debug)]
pub(crate) struct Plan {
    pub action: Action,
    /// The rule (`None`: the settings).
    pub rule: Option<String>,
    pub before: Option<Record>,
    pub after: Option<Record>,
}

/// Who writes, when, and the change number the write takes.
pub(crate) struct Stamp<'a> {
    pub at: SystemTime,
    pub by: &'a str,
    pub version: u64,
}

/// What a write transaction asks what to do: given the domain as it read it and
/// the write's stamp, the plans (or why nothing is to be saved). No plan: the
/// write changes nothing, and nothing is saved (the version stays).
pub(crate) type Planner<'a> =
    dyn FnMut(Option<&Domain>, &Stamp<'_>) -> Result<Vec<Plan>, StoreError> + 'a;

/// A storage backend: reads, and one write transaction that calls back into
/// [`plan`] (precondition, validation, the records after) before it saves the
/// plans and their audit entries.
pub(crate) trait Backend: Send + Sync {
    fn domains(&self) -> Result<Vec<String>, StoreError>;
    fn domain(&self, name: &str) -> Result<Option<Domain>, StoreError>;
    fn version(&self, domain: &str) -> Result<Option<u64>, StoreError>;
    /// In one transaction: reads the domain (locked against other writers),
    /// asks `plan` what to do, saves each plan, its audit entry and the
    /// domain's new version, and commits; nothing is saved if `plan` fails or
    /// returns no plan.
    fn write(
        &self,
        domain: &str,
        by: &str,
        plan: &mut Planner<'_>,
    ) -> Result<Vec<Plan>, StoreError>;
    fn audit(
        &self,
        domain: Option<&str>,
        after: u64,
        limit: usize,
    ) -> Result<Vec<AuditEntry>, StoreError>;
    /// Whether a reader opens the store anew for each poll (SQLite: a file
    /// replaced by a rename is read, not the one still held open) rather than
    /// keeping it, and its connection, between polls.
    fn reopen_per_poll(&self) -> bool {
        false
    }
    /// Starts waking `thread` (unparking it) when `domain` changes, for as long
    /// as the returned [`Listener`] lives; `None`: this backend pushes no
    /// changes (readers poll).
    fn listen(
        &self,
        _domain: &str,
        _thread: std::thread::Thread,
    ) -> Result<Option<Box<dyn Listener>>, StoreError> {
        Ok(None)
    }
}

/// Changes pushed to a reader (PostgreSQL's `LISTEN`); stops when dropped.
pub(crate) trait Listener: Send {
    /// Whether it still listens (its connection is up).
    fn alive(&self) -> bool;
}

/// The domain's settings as a domain without any keeps them: empty tables,
/// version 0.
fn empty_settings(stamp: &Stamp<'_>) -> StoredSettings {
    StoredSettings {
        settings: DomainSettings::default(),
        meta: Meta {
            version: 0,
            created_at: stamp.at,
            updated_at: stamp.at,
            updated_by: stamp.by.to_owned(),
        },
    }
}

/// Decides `change` against `domain` (as the write transaction read it):
/// checks the precondition, validates the domain as it would be, and returns the
/// records before and after.
pub(crate) fn plan(
    domain_name: &str,
    domain: Option<&Domain>,
    change: &Change,
    stamp: &Stamp<'_>,
) -> Result<Vec<Plan>, StoreError> {
    if let Change::Import { settings, rules } = change {
        return text::plan_import(domain_name, domain, settings, rules, stamp);
    }
    let rules: &[StoredRule] = domain.map_or(&[], |d| &d.rules);
    let settings = domain.map_or_else(|| empty_settings(stamp), |d| d.settings.clone());
    let find = |name: &str| rules.iter().find(|r| r.rule.name == name);
    let meta = |before: Option<&Meta>| Meta {
        version: stamp.version,
        created_at: before.map_or(stamp.at, |m| m.created_at),
        updated_at: stamp.at,
        updated_by: stamp.by.to_owned(),
    };
    // The record at `version`, or `Stale`.
    let at_version = |name: &str, version: u64| match find(name) {
        Some(old) if old.meta.version == version => Ok(old),
        old => Err(StoreError::Stale {
            current: old.map(|o| o.meta.version),
            given: version,
        }),
    };
    // The domain's rules with `name` replaced by `with` (or removed).
    let rules_with = |name: &str, with: Option<&StoredRule>| -> Vec<StoredRule> {
        let mut all: Vec<StoredRule> = rules
            .iter()
            .filter(|r| r.rule.name != name)
            .cloned()
            .chain(with.cloned())
            .collect();
        all.sort_by(|a, b| (a.position, &a.rule.name).cmp(&(b.position, &b.rule.name)));
        all
    };
    let (plan, rules_after, settings_after) = match change {
        Change::Create { rule, position } => {
            if let Some(old) = find(&rule.name) {
                return Err(StoreError::Exists {
                    current: old.meta.version,
                });
            }
            let last = rules.iter().map(|r| r.position).max();
            let after = StoredRule {
                rule: rule.clone(),
                position: position.unwrap_or_else(|| last.map_or(0, |p| p.saturating_add(1))),
                meta: meta(None),
            };
            let all = rules_with(&rule.name, Some(&after));
            let plan = Plan {
                action: Action::Create,
                rule: Some(rule.name.clone()),
                before: None,
                after: Some(Record::Rule(after)),
            };
            (plan, all, settings.settings)
        }
        Change::Replace {
            rule,
            position,
            version,
        } => {
            let old = at_version(&rule.name, *version)?;
            let after = StoredRule {
                rule: rule.clone(),
                position: position.unwrap_or(old.position),
                meta: meta(Some(&old.meta)),
            };
            let all = rules_with(&rule.name, Some(&after));
            let plan = Plan {
                action: Action::Replace,
                rule: Some(rule.name.clone()),
                before: Some(Record::Rule(old.clone())),
                after: Some(Record::Rule(after)),
            };
            (plan, all, settings.settings)
        }
        Change::Delete { name, version } => {
            let old = at_version(name, *version)?;
            let plan = Plan {
                action: Action::Delete,
                rule: Some(name.clone()),
                before: Some(Record::Rule(old.clone())),
                after: None,
            };
            (plan, rules_with(name, None), settings.settings)
        }
        Change::Settings {
            settings: new,
            version,
        } => {
            match (version, domain) {
                (None, Some(d)) => {
                    return Err(StoreError::Exists {
                        current: d.settings.meta.version,
                    });
                }
                (Some(v), d) => {
                    let current = d.map(|d| d.settings.meta.version);
                    if current != Some(*v) {
                        return Err(StoreError::Stale { current, given: *v });
                    }
                }
                (None, None) => {}
            }
            let after = StoredSettings {
                settings: new.clone(),
                meta: meta(domain.map(|d| &d.settings.meta)),
            };
            let plan = Plan {
                action: Action::Settings,
                rule: None,
                before: domain.map(|d| Record::Settings(d.settings.clone())),
                after: Some(Record::Settings(after)),
            };
            (plan, rules.to_vec(), new.clone())
        }
        Change::Import { .. } => unreachable!("planned above"),
    };
    record::to_def(
        domain_name,
        &settings_after,
        rules_after.iter().map(|r| &r.rule),
    )
    .map_err(StoreError::Invalid)?;
    Ok(vec![plan])
}

/// A rule store: domains of rules and settings, every write validated and
/// audited. Open one with [`Store::open`]; share it between threads (`&self`
/// everywhere).
///
/// ```
/// use sluicegate_policy::store::{RuleRecord, Store};
/// let dir = tempfile::tempdir().unwrap();
/// let url = format!("sqlite://{}", dir.path().join("rules.db").display());
/// let store = Store::open(&url)?;
/// store.create_rule("api", RuleRecord::new("a", "1/s"), None, "ops")?;
/// assert_eq!(store.domains()?, ["api"]);
/// assert_eq!(Store::open(&url)?.rule("api", "a")?.unwrap().rule.limit.as_deref(), Some("1/s"));
/// # Ok::<(), sluicegate_policy::store::StoreError>(())
/// ```
#[derive(Clone)]
pub struct Store {
    backend: Arc<dyn Backend>,
    url: String,
}

impl fmt::Debug for Store {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Store")
            .field("url", &redact(&self.url))
            .finish()
    }
}

/// A store URL, parsed.
pub(crate) enum Location {
    Sqlite(std::path::PathBuf),
    #[cfg(feature = "postgres")]
    Postgres(Box<postgres::Target>),
}

impl Location {
    pub(crate) fn parse(url: &str) -> Result<Location, StoreError> {
        let bad = || StoreError::Url(redact(url));
        let Some((scheme, rest)) = url.split_once(':') else {
            return Err(bad());
        };
        match scheme {
            "sqlite" => {
                let path = rest.strip_prefix("//").unwrap_or(rest);
                if path.is_empty() {
                    return Err(bad());
                }
                Ok(Location::Sqlite(path.into()))
            }
            #[cfg(feature = "postgres")]
            "postgres" | "postgresql" => {
                postgres::Target::parse(url).map(|t| Location::Postgres(Box::new(t)))
            }
            #[cfg(not(feature = "postgres"))]
            "postgres" | "postgresql" => Err(StoreError::Unsupported {
                scheme: scheme.to_owned(),
            }),
            _ => Err(bad()),
        }
    }
}

impl Store {
    /// Opens (creating it if needed) the store at `url`, and brings its
    /// schema up to date:
    ///
    /// * `sqlite:PATH` or `sqlite://PATH` (the same; a relative path is from
    ///   the working directory);
    /// * `postgres://USER:PASSWORD@HOST:PORT/DATABASE?PARAMS` or
    ///   `postgresql://…` (feature `postgres`): the store's tables
    ///   (`sluicegate_*`) in the connection's schema (`options=-c
    ///   search_path=NAME` picks another), made by the first process to start
    ///   (concurrent starts wait for it on an advisory lock). `PARAMS` are
    ///   libpq's that apply (`host=/run/postgresql` for a Unix socket,
    ///   `connect_timeout`, `application_name`, `options`, ...) and:
    ///   * `sslmode`: `disable`; `prefer` (the default, as libpq's: TLS if the
    ///     server offers it, not verified); `require` (TLS, not verified, unless
    ///     `sslrootcert` is given: then as `verify-ca`); `verify-ca` (the
    ///     certificate chains to a trusted root); `verify-full` (and names the
    ///     host). TLS is rustls with the ring provider;
    ///   * `sslrootcert`: the trusted roots (a PEM file; `system` or unset:
    ///     the system's store and the Mozilla roots);
    ///   * `sslcert`, `sslkey`: a client certificate and its key (PEM files).
    ///
    /// Every call waits for its answer on the calling thread (on a runtime of
    /// the store's own, so it may be called from inside an async runtime too,
    /// where it blocks that worker for the round trip).
    ///
    /// ```
    /// use sluicegate_policy::store::{Store, StoreError};
    /// assert!(matches!(Store::open("mysql://h/db"), Err(StoreError::Url(_))));
    /// assert!(matches!(Store::open("sqlite:"), Err(StoreError::Url(_))));
    /// ```
    pub fn open(url: &str) -> Result<Store, StoreError> {
        Self::open_with(url, true)
    }

    /// Opens an existing store (a reader never makes an empty one where a path
    /// was mistyped).
    pub(crate) fn open_with(url: &str, create: bool) -> Result<Store, StoreError> {
        let backend: Arc<dyn Backend> = match Location::parse(url)? {
            Location::Sqlite(path) => Arc::new(sqlite::Sqlite::open(url, &path, create)?),
            #[cfg(feature = "postgres")]
            Location::Postgres(target) => Arc::new(postgres::Postgres::open(url, *target, create)?),
        };
        Ok(Store {
            backend,
            url: url.to_owned(),
        })
    }

    /// The URL it was opened with.
    ///
    /// ```
    /// # let dir = tempfile::tempdir().unwrap();
    /// let url = format!("sqlite:{}", dir.path().join("r.db").display());
    /// assert_eq!(sluicegate_policy::store::Store::open(&url)?.url(), url);
    /// # Ok::<(), sluicegate_policy::store::StoreError>(())
    /// ```
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The domains, by name.
    ///
    /// ```
    /// # use sluicegate_policy::store::{DomainSettings, Store};
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let store = Store::open(&format!("sqlite:{}", dir.path().join("r.db").display()))?;
    /// store.put_settings("b", DomainSettings::default(), None, "ops")?;
    /// store.put_settings("a", DomainSettings::default(), None, "ops")?;
    /// assert_eq!(store.domains()?, ["a", "b"]);
    /// # Ok::<(), sluicegate_policy::store::StoreError>(())
    /// ```
    pub fn domains(&self) -> Result<Vec<String>, StoreError> {
        self.backend.domains()
    }

    /// A whole domain, read at one moment (`None`: no such domain).
    ///
    /// ```
    /// # use sluicegate_policy::store::Store;
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let store = Store::open(&format!("sqlite:{}", dir.path().join("r.db").display()))?;
    /// assert!(store.domain("api")?.is_none());
    /// # Ok::<(), sluicegate_policy::store::StoreError>(())
    /// ```
    pub fn domain(&self, name: &str) -> Result<Option<Domain>, StoreError> {
        self.backend.domain(name)
    }

    /// The domain's version: the number of its last change (`None`: no such
    /// domain). One cheap query: what readers poll.
    ///
    /// ```
    /// # use sluicegate_policy::store::{RuleRecord, Store};
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let store = Store::open(&format!("sqlite:{}", dir.path().join("r.db").display()))?;
    /// store.create_rule("api", RuleRecord::new("a", "1/s"), None, "ops")?;
    /// store.create_rule("api", RuleRecord::new("b", "1/s"), None, "ops")?;
    /// assert_eq!(store.version("api")?, Some(2));
    /// # Ok::<(), sluicegate_policy::store::StoreError>(())
    /// ```
    pub fn version(&self, domain: &str) -> Result<Option<u64>, StoreError> {
        self.backend.version(domain)
    }

    /// The domain's rules, by position then name (empty: no such domain).
    ///
    /// ```
    /// # use sluicegate_policy::store::Store;
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let store = Store::open(&format!("sqlite:{}", dir.path().join("r.db").display()))?;
    /// assert!(store.rules("api")?.is_empty());
    /// # Ok::<(), sluicegate_policy::store::StoreError>(())
    /// ```
    pub fn rules(&self, domain: &str) -> Result<Vec<StoredRule>, StoreError> {
        Ok(self.domain(domain)?.map_or_else(Vec::new, |d| d.rules))
    }

    /// One rule.
    ///
    /// ```
    /// # use sluicegate_policy::store::Store;
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let store = Store::open(&format!("sqlite:{}", dir.path().join("r.db").display()))?;
    /// assert!(store.rule("api", "a")?.is_none());
    /// # Ok::<(), sluicegate_policy::store::StoreError>(())
    /// ```
    pub fn rule(&self, domain: &str, name: &str) -> Result<Option<StoredRule>, StoreError> {
        Ok(self
            .rules(domain)?
            .into_iter()
            .find(|r| r.rule.name == name))
    }

    /// The domain's settings (`None`: no such domain).
    ///
    /// ```
    /// # use sluicegate_policy::store::{RuleRecord, Store};
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let store = Store::open(&format!("sqlite:{}", dir.path().join("r.db").display()))?;
    /// store.create_rule("api", RuleRecord::new("a", "1/s"), None, "ops")?;
    /// assert_eq!(store.settings("api")?.unwrap().meta.version, 0); // never written
    /// # Ok::<(), sluicegate_policy::store::StoreError>(())
    /// ```
    pub fn settings(&self, domain: &str) -> Result<Option<StoredSettings>, StoreError> {
        Ok(self.domain(domain)?.map(|d| d.settings))
    }

    /// Makes a rule (and its domain, if new), at `position` or last. Fails with
    /// [`StoreError::Exists`] if a rule of that name is there, and with
    /// [`StoreError::Invalid`] if the domain would not validate.
    ///
    /// ```
    /// # use sluicegate_policy::store::{RuleRecord, Store, StoreError};
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let store = Store::open(&format!("sqlite:{}", dir.path().join("r.db").display()))?;
    /// store.create_rule("api", RuleRecord::new("a", "1/s"), None, "ops")?;
    /// let again = store.create_rule("api", RuleRecord::new("a", "2/s"), None, "ops");
    /// assert!(matches!(again, Err(StoreError::Exists { current: 1 })));
    /// # Ok::<(), StoreError>(())
    /// ```
    pub fn create_rule(
        &self,
        domain: &str,
        rule: RuleRecord,
        position: Option<i64>,
        by: &str,
    ) -> Result<StoredRule, StoreError> {
        let change = Change::Create { rule, position };
        rule_after(one(self.write(domain, by, &change)?)?)
    }

    /// Replaces the rule of `rule.name`, which must be at `version`
    /// ([`StoreError::Stale`] otherwise); `position: None` keeps its place.
    ///
    /// ```
    /// # use sluicegate_policy::store::{RuleRecord, Store};
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let store = Store::open(&format!("sqlite:{}", dir.path().join("r.db").display()))?;
    /// let a = store.create_rule("api", RuleRecord::new("a", "1/s"), None, "ops")?;
    /// let b = store.replace_rule("api", RuleRecord::new("a", "2/s"), None, a.meta.version, "ops")?;
    /// assert_eq!((b.meta.version, b.position, b.meta.created_at), (2, a.position, a.meta.created_at));
    /// # Ok::<(), sluicegate_policy::store::StoreError>(())
    /// ```
    pub fn replace_rule(
        &self,
        domain: &str,
        rule: RuleRecord,
        position: Option<i64>,
        version: u64,
        by: &str,
    ) -> Result<StoredRule, StoreError> {
        let change = Change::Replace {
            rule,
            position,
            version,
        };
        rule_after(one(self.write(domain, by, &change)?)?)
    }

    /// Deletes the rule `name`, which must be at `version`.
    ///
    /// ```
    /// # use sluicegate_policy::store::{RuleRecord, Store, StoreError};
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let store = Store::open(&format!("sqlite:{}", dir.path().join("r.db").display()))?;
    /// let a = store.create_rule("api", RuleRecord::new("a", "1/s"), None, "ops")?;
    /// store.delete_rule("api", "a", a.meta.version, "ops")?;
    /// let twice = store.delete_rule("api", "a", a.meta.version, "ops");
    /// assert!(matches!(twice, Err(StoreError::Stale { current: None, .. })));
    /// # Ok::<(), StoreError>(())
    /// ```
    pub fn delete_rule(
        &self,
        domain: &str,
        name: &str,
        version: u64,
        by: &str,
    ) -> Result<(), StoreError> {
        let change = Change::Delete {
            name: name.to_owned(),
            version,
        };
        self.write(domain, by, &change).map(drop)
    }

    /// Writes the domain's settings: `version: None` only for a domain not yet
    /// in the store (which this makes), else the settings' current version.
    ///
    /// ```
    /// # use sluicegate_policy::store::{Defaults, DomainSettings, Store};
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let store = Store::open(&format!("sqlite:{}", dir.path().join("r.db").display()))?;
    /// let s = store.put_settings("api", DomainSettings::default(), None, "ops")?;
    /// let shadow = DomainSettings { defaults: Some(Defaults { mode: Some("shadow".into()), ..Defaults::default() }), ..DomainSettings::default() };
    /// let t = store.put_settings("api", shadow.clone(), Some(s.meta.version), "ops")?;
    /// assert_eq!(store.settings("api")?.unwrap().settings, shadow);
    /// assert!(t.meta.version > s.meta.version);
    /// # Ok::<(), sluicegate_policy::store::StoreError>(())
    /// ```
    pub fn put_settings(
        &self,
        domain: &str,
        settings: DomainSettings,
        version: Option<u64>,
        by: &str,
    ) -> Result<StoredSettings, StoreError> {
        let change = Change::Settings { settings, version };
        match one(self.write(domain, by, &change)?)?.after {
            Some(Record::Settings(s)) => Ok(s),
            _ => Err(StoreError::Corrupt(
                "a settings write saved no settings".into(),
            )),
        }
    }

    /// Up to `limit` audit entries (1 to [`MAX_AUDIT_PAGE`]) after `after`
    /// (`None`: from the first), oldest first, of one domain or all.
    ///
    /// ```
    /// # use sluicegate_policy::store::{RuleRecord, Store};
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let store = Store::open(&format!("sqlite:{}", dir.path().join("r.db").display()))?;
    /// store.create_rule("a", RuleRecord::new("r", "1/s"), None, "ops")?;
    /// store.create_rule("b", RuleRecord::new("r", "1/s"), None, "ops")?;
    /// assert_eq!(store.audit(Some("b"), None, 10)?.entries[0].domain, "b");
    /// assert_eq!(store.audit(None, None, 10)?.entries.len(), 2);
    /// # Ok::<(), sluicegate_policy::store::StoreError>(())
    /// ```
    pub fn audit(
        &self,
        domain: Option<&str>,
        after: Option<Cursor>,
        limit: usize,
    ) -> Result<AuditPage, StoreError> {
        let limit = limit.clamp(1, MAX_AUDIT_PAGE);
        let mut entries = self
            .backend
            .audit(domain, after.map_or(0, |c| c.0), limit + 1)?;
        let more = entries.len() > limit;
        entries.truncate(limit);
        let next = if more {
            entries.last().map(|e| e.cursor)
        } else {
            None
        };
        Ok(AuditPage { entries, next })
    }

    pub(crate) fn write(
        &self,
        domain: &str,
        by: &str,
        change: &Change,
    ) -> Result<Vec<Plan>, StoreError> {
        if domain.is_empty() {
            return Err(StoreError::NotFound("domain with an empty name".into()));
        }
        self.backend
            .write(domain, by, &mut |d, stamp| plan(domain, d, change, stamp))
    }
}

/// A stored version (a database integer) as a record's.
pub(crate) fn version(v: i64) -> u64 {
    u64::try_from(v).unwrap_or(0)
}

/// A record's version as a database integer.
pub(crate) fn sql_version(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

/// A record as the JSON a backend stores.
pub(crate) fn json<T: serde::Serialize>(v: &T) -> Result<String, StoreError> {
    serde_json::to_string(v).map_err(|e| StoreError::Corrupt(e.to_string()))
}

/// A stored record's JSON decoded; `what` names it in the error.
pub(crate) fn decode<T: serde::de::DeserializeOwned>(
    text: &str,
    what: &str,
) -> Result<T, StoreError> {
    serde_json::from_str(text).map_err(|e| StoreError::Corrupt(format!("{what}: {e}")))
}

/// The one plan of a single-record write.
fn one(plans: Vec<Plan>) -> Result<Plan, StoreError> {
    plans
        .into_iter()
        .next()
        .ok_or_else(|| StoreError::Corrupt("a write saved nothing".into()))
}

pub(crate) fn listen(
    store: &Store,
    domain: &str,
    thread: std::thread::Thread,
) -> Result<Option<Box<dyn Listener>>, StoreError> {
    store.backend.listen(domain, thread)
}

pub(crate) fn reopen_per_poll(store: &Store) -> bool {
    store.backend.reopen_per_poll()
}

fn rule_after(plan: Plan) -> Result<StoredRule, StoreError> {
    match plan.after {
        Some(Record::Rule(r)) => Ok(r),
        _ => Err(StoreError::Corrupt("a rule write saved no rule".into())),
    }
}
