//! The records a store keeps: a rule (the fields of a TOML `[[rule]]`), a
//! domain's settings (its `[defaults]`, `[redis]`, `[state]` and `[shared]`
//! tables), each
//! with its version and timestamps; and how a domain becomes a [`PolicyDef`].

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use serde::{Deserialize, Serialize};

use crate::def::{PolicyDef, RedisSettings, RuleDef};
use crate::diag::Error;
use crate::rule_builder::RuleBuilder;

/// One rule as a record: exactly the fields of a TOML `[[rule]]` table, under the
/// same names (`match`, `key`, `limit`, `algorithm`, ...). A store keeps it as
/// JSON with these names; an unset field takes `[defaults]` or the file
/// format's default, as in a file.
///
/// ```
/// use sluicegate_policy::store::{MatchValue, RuleRecord};
/// let r = RuleRecord::new("login", "5/minute")
///     .matching("path", "/login")
///     .matching_any("method", ["POST", "PUT"]);
/// let json = serde_json::to_string(&r).unwrap();
/// assert_eq!(json, r#"{"name":"login","match":{"method":["POST","PUT"],"path":"/login"},"limit":"5/minute"}"#);
/// assert_eq!(r.matches["path"], MatchValue::One("/login".into()));
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RuleRecord {
    /// `name`: unique in its domain.
    pub name: String,
    /// `match`: attribute → value (or any of several values); all must match.
    #[serde(rename = "match", default, skip_serializing_if = "BTreeMap::is_empty")]
    pub matches: BTreeMap<String, MatchValue>,
    /// `key`: the attributes that select the limiter.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<Vec<String>>,
    /// `limit`: the rate string (required: a rule without one is rejected,
    /// naming the field).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<String>,
    /// `algorithm`: a [`sluicegate::Kind`] name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub algorithm: Option<String>,
    /// `backend`: `local`, `redis` or `hybrid`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backend: Option<String>,
    /// `on_error`: `open`, `closed` or `local`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_error: Option<String>,
    /// `mode`: `enforce` or `shadow`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<String>,
    /// `capacity`: the most live keys the rule holds at once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capacity: Option<u64>,
    /// `stripes`: stripes of a keyless hot rule.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stripes: Option<u64>,
    /// `max_delay_ms`: a shaper's longest wait.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_delay_ms: Option<u64>,
}

/// A `match` value: one value, or a list (any of), as in a rule file.
///
/// ```
/// use sluicegate_policy::store::MatchValue;
/// let v: MatchValue = serde_json::from_str(r#"["GET", "HEAD"]"#).unwrap();
/// assert_eq!(v, MatchValue::Many(vec!["GET".into(), "HEAD".into()]));
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum MatchValue {
    /// `attr = "value"`.
    One(String),
    /// `attr = ["a", "b"]`.
    Many(Vec<String>),
}

impl RuleRecord {
    /// A rule named `name` limited by `limit`, every other field unset.
    ///
    /// ```
    /// let r = sluicegate_policy::store::RuleRecord::new("all", "100/s");
    /// assert_eq!((r.name.as_str(), r.limit.as_deref()), ("all", Some("100/s")));
    /// ```
    pub fn new(name: impl Into<String>, limit: impl Into<String>) -> RuleRecord {
        RuleRecord {
            name: name.into(),
            limit: Some(limit.into()),
            ..RuleRecord::default()
        }
    }

    /// Adds `match = { attr = "value" }`.
    ///
    /// ```
    /// let r = sluicegate_policy::store::RuleRecord::new("a", "1/s").matching("ip", "10.0.0.0/8");
    /// assert_eq!(r.matches.len(), 1);
    /// ```
    pub fn matching(mut self, attr: impl Into<String>, value: impl Into<String>) -> Self {
        self.matches
            .insert(attr.into(), MatchValue::One(value.into()));
        self
    }

    /// Adds `match = { attr = ["a", "b"] }`.
    ///
    /// ```
    /// use sluicegate_policy::store::{MatchValue, RuleRecord};
    /// let r = RuleRecord::new("a", "1/s").matching_any("method", ["GET"]);
    /// assert_eq!(r.matches["method"], MatchValue::Many(vec!["GET".into()]));
    /// ```
    pub fn matching_any<V: Into<String>>(
        mut self,
        attr: impl Into<String>,
        values: impl IntoIterator<Item = V>,
    ) -> Self {
        let values = values.into_iter().map(Into::into).collect();
        self.matches.insert(attr.into(), MatchValue::Many(values));
        self
    }

    /// The rule as the policy validator takes it.
    pub(crate) fn builder(&self) -> RuleBuilder {
        let mut b = RuleDef::builder(self.name.clone());
        for (attr, v) in &self.matches {
            b = match v {
                MatchValue::One(s) => b.matching(attr.clone(), s.clone()),
                MatchValue::Many(all) => b.matching_any(attr.clone(), all.iter().cloned()),
            };
        }
        if let Some(k) = &self.key {
            b = b.key(k.iter().cloned());
        }
        if let Some(l) = &self.limit {
            b = b.limit(l.clone());
        }
        if let Some(v) = &self.algorithm {
            b = b.algorithm(v.as_str());
        }
        if let Some(v) = &self.backend {
            b = b.backend(v.as_str());
        }
        if let Some(v) = &self.on_error {
            b = b.on_error(v.as_str());
        }
        if let Some(v) = &self.mode {
            b = b.mode(v.as_str());
        }
        if let Some(n) = self.capacity {
            b = b.capacity(n);
        }
        if let Some(n) = self.stripes {
            b = b.stripes(n);
        }
        if let Some(n) = self.max_delay_ms {
            b = b.max_delay_ms(n);
        }
        b
    }
}

/// A domain's settings: its `[defaults]`, `[redis]`, `[state]` and `[shared]`
/// tables, one record beside its rules. Kept as JSON with the tables' names, so
/// a table added to the rule format is one more optional field here, not a
/// schema migration.
///
/// ```
/// use sluicegate_policy::store::{Defaults, DomainSettings};
/// let s = DomainSettings { defaults: Some(Defaults { mode: Some("shadow".into()), ..Defaults::default() }), ..DomainSettings::default() };
/// assert_eq!(serde_json::to_string(&s).unwrap(), r#"{"defaults":{"mode":"shadow"}}"#);
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DomainSettings {
    /// `[defaults]`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub defaults: Option<Defaults>,
    /// `[redis]`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub redis: Option<RedisTable>,
    /// `[state]`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<StateTable>,
    /// `[shared]` (a policy built from it needs the crate's `shared` feature).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shared: Option<SharedTable>,
}

/// The `[defaults]` table: what a rule that does not set a field takes.
///
/// ```
/// let d = sluicegate_policy::store::Defaults { capacity: Some(1000), ..Default::default() };
/// assert_eq!(d.capacity, Some(1000));
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Defaults {
    /// `algorithm`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub algorithm: Option<String>,
    /// `backend`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backend: Option<String>,
    /// `on_error`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_error: Option<String>,
    /// `mode`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<String>,
    /// `capacity`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capacity: Option<u64>,
    /// `ipv6_prefix`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ipv6_prefix: Option<u8>,
}

/// The `[redis]` table.
///
/// ```
/// let r = sluicegate_policy::store::RedisTable { url: "redis://127.0.0.1".into(), ..Default::default() };
/// assert_eq!(r.prefix, None); // `sluicegate:`
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RedisTable {
    /// `url`.
    pub url: String,
    /// `prefix` (`sluicegate:` if unset).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prefix: Option<String>,
    /// `lease_horizon_ms`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lease_horizon_ms: Option<u64>,
    /// `lease_ttl_ms`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lease_ttl_ms: Option<u64>,
}

/// The `[state]` table.
///
/// ```
/// let s = sluicegate_policy::store::StateTable { memory: "8 MiB".into() };
/// assert_eq!(s.memory, "8 MiB");
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StateTable {
    /// `memory`: a size as a rule file writes it (`"64 MiB"`).
    pub memory: String,
}

/// The `[shared]` table: the shared-memory region the domain's keyed rules keep
/// their keys in.
///
/// ```
/// let s = sluicegate_policy::store::SharedTable { path: "api-limits".into() };
/// assert_eq!(serde_json::to_string(&s).unwrap(), r#"{"path":"api-limits"}"#);
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SharedTable {
    /// `path`: a name (under `/dev/shm`) or a path.
    pub path: String,
}

/// What every stored record carries beside its fields.
///
/// A version is the domain's change number that wrote the record: it grows with
/// every write and is never given twice in a domain (a rule deleted and made
/// again does not take an old version back, so a stale version can never match).
///
/// ```
/// # use sluicegate_policy::store::{RuleRecord, Store};
/// let dir = tempfile::tempdir().unwrap();
/// let store = Store::open(&format!("sqlite:{}", dir.path().join("r.db").display()))?;
/// let a = store.create_rule("api", RuleRecord::new("a", "1/s"), None, "ops")?;
/// assert_eq!((a.meta.version, a.meta.updated_by.as_str()), (1, "ops"));
/// assert_eq!(a.meta.created_at, a.meta.updated_at);
/// # Ok::<(), sluicegate_policy::store::StoreError>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Meta {
    /// The record's version (the `ETag` of an admin API).
    pub version: u64,
    /// When the record was made (millisecond precision).
    pub created_at: SystemTime,
    /// When it was last written (millisecond precision).
    pub updated_at: SystemTime,
    /// Who last wrote it.
    pub updated_by: String,
}

/// A rule as stored: its fields, its place in the domain's order, and [`Meta`].
///
/// Rules are ordered by `position`, then by name: a rule's place is a sort key,
/// so placing one rule never rewrites (or re-versions) the others. A rule
/// created without a position goes last.
///
/// ```
/// # use sluicegate_policy::store::{RuleRecord, Store};
/// # let dir = tempfile::tempdir().unwrap();
/// # let store = Store::open(&format!("sqlite:{}", dir.path().join("r.db").display()))?;
/// store.create_rule("api", RuleRecord::new("b", "1/s"), None, "ops")?;
/// store.create_rule("api", RuleRecord::new("a", "1/s"), Some(-1), "ops")?;
/// let names: Vec<_> = store.rules("api")?.into_iter().map(|r| r.rule.name).collect();
/// assert_eq!(names, ["a", "b"]);
/// # Ok::<(), sluicegate_policy::store::StoreError>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoredRule {
    /// The rule's fields.
    pub rule: RuleRecord,
    /// Its sort key in the domain's order.
    pub position: i64,
    /// Version and timestamps.
    pub meta: Meta,
}

/// A domain's settings as stored.
///
/// ```
/// # use sluicegate_policy::store::{DomainSettings, Store};
/// # let dir = tempfile::tempdir().unwrap();
/// # let store = Store::open(&format!("sqlite:{}", dir.path().join("r.db").display()))?;
/// let s = store.put_settings("api", DomainSettings::default(), None, "ops")?;
/// assert_eq!(store.settings("api")?.unwrap(), s);
/// # Ok::<(), sluicegate_policy::store::StoreError>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoredSettings {
    /// The tables.
    pub settings: DomainSettings,
    /// Version and timestamps.
    pub meta: Meta,
}

/// A whole domain read at one moment: its version (the number of its last
/// change), its settings and its rules in order.
///
/// ```
/// # use sluicegate_policy::store::{RuleRecord, Store};
/// # let dir = tempfile::tempdir().unwrap();
/// # let store = Store::open(&format!("sqlite:{}", dir.path().join("r.db").display()))?;
/// store.create_rule("api", RuleRecord::new("a", "1/s"), None, "ops")?;
/// let d = store.domain("api")?.unwrap();
/// assert_eq!((d.version, d.rules.len()), (1, 1));
/// assert_eq!(d.to_def().unwrap().rules()[0].name(), "a");
/// # Ok::<(), sluicegate_policy::store::StoreError>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Domain {
    /// The domain's name.
    pub name: String,
    /// The number of its last change: what readers poll.
    pub version: u64,
    /// `[defaults]`, `[redis]`, `[state]`, `[shared]`.
    pub settings: StoredSettings,
    /// The rules, by position then name.
    pub rules: Vec<StoredRule>,
}

impl Domain {
    /// Validates the domain as a policy, with the rule file's validator: an
    /// error names the rule and field.
    ///
    /// ```
    /// # use sluicegate_policy::store::{RuleRecord, Store};
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let store = Store::open(&format!("sqlite:{}", dir.path().join("r.db").display()))?;
    /// store.create_rule("api", RuleRecord::new("a", "2/s").key(["ip"]), None, "ops")?;
    /// let p = sluicegate_policy::Policy::from_def(store.domain("api")?.unwrap().to_def().unwrap()).unwrap();
    /// assert!(p.check_n_at(&[("ip", "192.0.2.1")], 2, 0).allowed());
    /// # Ok::<(), sluicegate_policy::store::StoreError>(())
    /// ```
    pub fn to_def(&self) -> Result<PolicyDef, Error> {
        to_def(
            &self.name,
            &self.settings.settings,
            self.rules.iter().map(|r| &r.rule),
        )
    }
}

impl RuleRecord {
    /// Sets `key = [...]`.
    ///
    /// ```
    /// let r = sluicegate_policy::store::RuleRecord::new("a", "1/s").key(["ip"]);
    /// assert_eq!(r.key, Some(vec!["ip".to_owned()]));
    /// ```
    pub fn key<K: Into<String>>(mut self, attrs: impl IntoIterator<Item = K>) -> Self {
        self.key = Some(attrs.into_iter().map(Into::into).collect());
        self
    }
}

/// Validates settings and rules (in order) as one policy named `domain`.
pub(crate) fn to_def<'a>(
    domain: &str,
    settings: &DomainSettings,
    rules: impl IntoIterator<Item = &'a RuleRecord>,
) -> Result<PolicyDef, Error> {
    let mut b = PolicyDef::builder().source(domain);
    if let Some(d) = &settings.defaults {
        if let Some(v) = &d.algorithm {
            b = b.default_algorithm(v.as_str());
        }
        if let Some(v) = &d.backend {
            b = b.default_backend(v.as_str());
        }
        if let Some(v) = &d.on_error {
            b = b.default_on_error(v.as_str());
        }
        if let Some(v) = &d.mode {
            b = b.default_mode(v.as_str());
        }
        if let Some(n) = d.capacity {
            b = b.default_capacity(n);
        }
        if let Some(n) = d.ipv6_prefix {
            b = b.ipv6_prefix(n);
        }
    }
    if let Some(r) = &settings.redis {
        let mut redis = RedisSettings::new(r.url.clone());
        if let Some(p) = &r.prefix {
            redis.prefix = p.clone();
        }
        redis.lease_horizon = r.lease_horizon_ms.map(Duration::from_millis);
        redis.lease_ttl = r.lease_ttl_ms.map(Duration::from_millis);
        b = b.redis(redis);
    }
    if let Some(s) = &settings.state {
        b = b.state_memory(s.memory.as_str());
    }
    if let Some(s) = &settings.shared {
        b = b.shared_path(s.path.as_str());
    }
    b.rules(rules.into_iter().map(RuleRecord::builder)).build()
}
