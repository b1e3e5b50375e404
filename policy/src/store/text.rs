//! A domain as rule-file text: [`DomainFile`] (read with the rule file's
//! validator, written back as TOML), and the import that replaces a domain's
//! settings and rules in one write ([`Store::import`], [`Store::import_toml`],
//! [`Store::export_toml`]).

use std::fmt::Write as _;

use serde::{Deserialize, Serialize};

use super::{
    Action, Change, Defaults, Domain, DomainSettings, MatchValue, Meta, Plan, Record, RedisTable,
    RuleRecord, SharedTable, Stamp, StateTable, Store, StoreError, StoredRule, StoredSettings,
};
use crate::PolicyDef;
use crate::diag::{Code, Diagnostic, Error, Lines, Severity};

/// A rule file as records: its tables and its rules in file order. What
/// [`Store::import`] puts in a domain and [`Domain::to_file`] takes out.
///
/// ```
/// use sluicegate_policy::store::DomainFile;
/// let text = "[defaults]\nmode = \"shadow\"\n\n[[rule]]\nname = \"login\"\nmatch = { path = \"/login\" }\nkey = [\"ip\"]\nlimit = \"5/minute\"\n";
/// let f = DomainFile::parse(text, Some("rules.toml"))?;
/// assert_eq!(f.rules[0].name, "login");
/// assert_eq!(f.settings.defaults.as_ref().unwrap().mode.as_deref(), Some("shadow"));
/// assert_eq!(f.to_toml(), text); // written back as it was
/// // Errors are the rule file's: file, line, column and rule.
/// let e = DomainFile::parse("[[rule]]\nname = \"a\"\nlimit = \"5/fortnight\"\n", Some("r.toml")).unwrap_err();
/// assert!(e.to_string().starts_with("r.toml:3:12: error: rule `a`: bad limit"), "{e}");
/// # Ok::<(), sluicegate_policy::Error>(())
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DomainFile {
    /// `[defaults]`, `[redis]`, `[state]`, `[shared]`.
    pub settings: DomainSettings,
    /// The `[[rule]]` tables, in order.
    pub rules: Vec<RuleRecord>,
}

/// The file's tables as serde reads them into records (after validation).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Form {
    defaults: Option<Defaults>,
    redis: Option<RedisTable>,
    state: Option<StateTable>,
    shared: Option<SharedTable>,
    #[serde(default)]
    rule: Vec<RuleRecord>,
}

impl DomainFile {
    /// Reads rule-file text, validated as [`PolicyDef::parse`] does (every
    /// error with `file`, line, column and rule; `file` defaults to
    /// `<policy>`).
    ///
    /// ```
    /// # use sluicegate_policy::store::DomainFile;
    /// assert!(DomainFile::parse("[[rule]]\nname = \"a\"\n", None).is_err()); // no limit
    /// ```
    pub fn parse(text: &str, file: Option<&str>) -> Result<DomainFile, Error> {
        PolicyDef::parse(text, file)?;
        let form: Form = toml::from_str(text).map_err(|e| {
            let (line, column) = Lines::new(text).locate(e.span().map_or(0, |s| s.start));
            Error::one(Diagnostic {
                severity: Severity::Error,
                code: Code::Syntax,
                file: file.unwrap_or("<policy>").to_owned(),
                line,
                column,
                rule: None,
                field: None,
                message: e.message().to_owned(),
            })
        })?;
        Ok(DomainFile {
            settings: DomainSettings {
                defaults: form.defaults,
                redis: form.redis,
                state: form.state,
                shared: form.shared,
            },
            rules: form.rule,
        })
    }

    /// The rule file: its tables, then its rules, each field under its rule-file
    /// name (`match` as an inline table). [`DomainFile::parse`] reads it back
    /// to the same records.
    ///
    /// ```
    /// use sluicegate_policy::store::{DomainFile, RuleRecord};
    /// let f = DomainFile { rules: vec![RuleRecord::new("a \"b\"", "1/s").matching("header:x-k", "v")], ..Default::default() };
    /// let text = f.to_toml();
    /// assert_eq!(text, "[[rule]]\nname = \"a \\\"b\\\"\"\nmatch = { \"header:x-k\" = \"v\" }\nlimit = \"1/s\"\n");
    /// assert_eq!(DomainFile::parse(&text, None)?, f);
    /// # Ok::<(), sluicegate_policy::Error>(())
    /// ```
    pub fn to_toml(&self) -> String {
        let mut out = String::new();
        let s = &self.settings;
        if let Some(d) = &s.defaults {
            table(&mut out, "[defaults]");
            field(&mut out, "algorithm", d.algorithm.as_deref().map(string));
            field(&mut out, "backend", d.backend.as_deref().map(string));
            field(&mut out, "on_error", d.on_error.as_deref().map(string));
            field(&mut out, "mode", d.mode.as_deref().map(string));
            field(&mut out, "capacity", d.capacity.map(|n| n.to_string()));
            field(
                &mut out,
                "ipv6_prefix",
                d.ipv6_prefix.map(|n| n.to_string()),
            );
        }
        if let Some(r) = &s.redis {
            table(&mut out, "[redis]");
            field(&mut out, "url", Some(string(&r.url)));
            field(&mut out, "prefix", r.prefix.as_deref().map(string));
            let ms = |v: Option<u64>| v.map(|n| n.to_string());
            field(&mut out, "lease_horizon_ms", ms(r.lease_horizon_ms));
            field(&mut out, "lease_ttl_ms", ms(r.lease_ttl_ms));
        }
        if let Some(t) = &s.state {
            table(&mut out, "[state]");
            field(&mut out, "memory", Some(string(&t.memory)));
        }
        if let Some(t) = &s.shared {
            table(&mut out, "[shared]");
            field(&mut out, "path", Some(string(&t.path)));
        }
        for r in &self.rules {
            table(&mut out, "[[rule]]");
            field(&mut out, "name", Some(string(&r.name)));
            if !r.matches.is_empty() {
                let pairs: Vec<String> = r
                    .matches
                    .iter()
                    .map(|(k, v)| {
                        let v = match v {
                            MatchValue::One(s) => string(s),
                            MatchValue::Many(all) => array(all),
                        };
                        format!("{} = {v}", key(k))
                    })
                    .collect();
                field(
                    &mut out,
                    "match",
                    Some(format!("{{ {} }}", pairs.join(", "))),
                );
            }
            field(&mut out, "key", r.key.as_deref().map(array));
            field(&mut out, "limit", r.limit.as_deref().map(string));
            field(&mut out, "algorithm", r.algorithm.as_deref().map(string));
            field(&mut out, "backend", r.backend.as_deref().map(string));
            field(&mut out, "on_error", r.on_error.as_deref().map(string));
            field(&mut out, "mode", r.mode.as_deref().map(string));
            field(&mut out, "capacity", r.capacity.map(|n| n.to_string()));
            field(&mut out, "stripes", r.stripes.map(|n| n.to_string()));
            field(
                &mut out,
                "max_delay_ms",
                r.max_delay_ms.map(|n| n.to_string()),
            );
        }
        out
    }
}

/// A table header, after a blank line unless it opens the file.
fn table(out: &mut String, header: &str) {
    if !out.is_empty() {
        out.push('\n');
    }
    out.push_str(header);
    out.push('\n');
}

fn field(out: &mut String, name: &str, value: Option<String>) {
    if let Some(v) = value {
        let _ = writeln!(out, "{name} = {v}");
    }
}

/// A TOML basic string: quotes, backslashes and control characters escaped.
pub(crate) fn string(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            c if c.is_control() => {
                let _ = write!(out, "\\u{:04X}", u32::from(c));
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

fn array(items: &[String]) -> String {
    let items: Vec<String> = items.iter().map(|s| string(s)).collect();
    format!("[{}]", items.join(", "))
}

/// A key: bare when TOML allows it, else quoted.
fn key(k: &str) -> String {
    let bare = !k.is_empty()
        && k.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    if bare { k.to_owned() } else { string(k) }
}

impl Domain {
    /// The domain as a rule file's records (its settings and its rules in
    /// order, without versions or positions).
    ///
    /// ```
    /// # use sluicegate_policy::store::{RuleRecord, Store};
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let store = Store::open(&format!("sqlite:{}", dir.path().join("r.db").display()))?;
    /// store.create_rule("api", RuleRecord::new("a", "1/s"), None, "ops")?;
    /// let f = store.domain("api")?.unwrap().to_file();
    /// assert_eq!(f.rules, [RuleRecord::new("a", "1/s")]);
    /// # Ok::<(), sluicegate_policy::store::StoreError>(())
    /// ```
    pub fn to_file(&self) -> DomainFile {
        DomainFile {
            settings: self.settings.settings.clone(),
            rules: self.rules.iter().map(|r| r.rule.clone()).collect(),
        }
    }
}

/// What an import did.
///
/// ```
/// # use sluicegate_policy::store::{RuleRecord, Store};
/// # let dir = tempfile::tempdir().unwrap();
/// # let store = Store::open(&format!("sqlite:{}", dir.path().join("r.db").display()))?;
/// store.create_rule("api", RuleRecord::new("old", "1/s"), None, "ops")?;
/// let text = "[[rule]]\nname = \"new\"\nlimit = \"2/s\"\n";
/// let s = store.import_toml("api", text, Some("rules.toml"), "ops")?;
/// assert_eq!((s.created.as_slice(), s.deleted.as_slice()), (&["new".to_owned()][..], &["old".to_owned()][..]));
/// assert!(store.import_toml("api", text, None, "ops")?.is_unchanged()); // nothing to do
/// # Ok::<(), sluicegate_policy::store::StoreError>(())
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ImportSummary {
    /// The domain's version after the import (its version before, if nothing
    /// changed).
    pub version: u64,
    /// Whether the settings were written.
    pub settings: bool,
    /// The rules made, in file order.
    pub created: Vec<String>,
    /// The rules replaced (their fields or their place changed), in file order.
    pub replaced: Vec<String>,
    /// The rules deleted (not in the file).
    pub deleted: Vec<String>,
    /// The rules left as they were (same fields, same place: same version).
    pub unchanged: Vec<String>,
}

impl ImportSummary {
    /// Whether the import changed nothing (nothing was written or audited).
    ///
    /// ```
    /// assert!(sluicegate_policy::store::ImportSummary::default().is_unchanged());
    /// ```
    pub fn is_unchanged(&self) -> bool {
        !self.settings
            && self.created.is_empty()
            && self.replaced.is_empty()
            && self.deleted.is_empty()
    }
}

/// Plans an import: the domain's settings and rules become `settings` and
/// `rules` (in this order). Records left as they are keep their version; a
/// rule keeps its position if that still sorts it in file order.
pub(crate) fn plan_import(
    domain_name: &str,
    domain: Option<&Domain>,
    settings: &DomainSettings,
    rules: &[RuleRecord],
    stamp: &Stamp<'_>,
) -> Result<Vec<Plan>, StoreError> {
    super::record::to_def(domain_name, settings, rules).map_err(StoreError::Invalid)?;
    let meta = |before: Option<&Meta>| Meta {
        version: stamp.version,
        created_at: before.map_or(stamp.at, |m| m.created_at),
        updated_at: stamp.at,
        updated_by: stamp.by.to_owned(),
    };
    let old: &[StoredRule] = domain.map_or(&[], |d| &d.rules);
    let find = |name: &str| old.iter().find(|r| r.rule.name == name);
    let mut plans = Vec::new();
    let settings_before = domain.map(|d| &d.settings);
    if settings_before.is_none_or(|s| s.settings != *settings) {
        plans.push(Plan {
            action: Action::Import,
            rule: None,
            before: settings_before.cloned().map(Record::Settings),
            after: Some(Record::Settings(StoredSettings {
                settings: settings.clone(),
                meta: meta(settings_before.map(|s| &s.meta)),
            })),
        });
    }
    for r in old {
        if !rules.iter().any(|n| n.name == r.rule.name) {
            plans.push(Plan {
                action: Action::Import,
                rule: Some(r.rule.name.clone()),
                before: Some(Record::Rule(r.clone())),
                after: None,
            });
        }
    }
    let mut last: Option<i64> = None;
    for r in rules {
        let before = find(&r.name);
        let position = before
            .map(|b| b.position)
            .filter(|&p| last.is_none_or(|l| p > l))
            .unwrap_or_else(|| last.map_or(0, |l| l.saturating_add(1)));
        last = Some(position);
        if before.is_some_and(|b| b.rule == *r && b.position == position) {
            continue;
        }
        plans.push(Plan {
            action: Action::Import,
            rule: Some(r.name.clone()),
            before: before.cloned().map(Record::Rule),
            after: Some(Record::Rule(StoredRule {
                rule: r.clone(),
                position,
                meta: meta(before.map(|b| &b.meta)),
            })),
        });
    }
    Ok(plans)
}

impl Store {
    /// Replaces the domain's settings and rules with `file`'s (making the
    /// domain if new), in one transaction: validated whole first (nothing is
    /// saved if it is invalid), each record made, replaced or deleted audited as
    /// [`Action::Import`], and records that stay as they were left alone (their
    /// versions kept). An import that changes nothing writes nothing.
    ///
    /// ```
    /// use sluicegate_policy::store::{Action, DomainFile, RuleRecord, Store};
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let store = Store::open(&format!("sqlite:{}", dir.path().join("r.db").display()))?;
    /// let file = DomainFile { rules: vec![RuleRecord::new("a", "1/s"), RuleRecord::new("b", "2/s")], ..Default::default() };
    /// let s = store.import("api", file, "ops")?;
    /// assert_eq!((s.version, s.created.len(), s.settings), (1, 2, true));
    /// assert!(store.audit(None, None, 10)?.entries.iter().all(|e| e.action == Action::Import));
    /// # Ok::<(), sluicegate_policy::store::StoreError>(())
    /// ```
    pub fn import(
        &self,
        domain: &str,
        file: DomainFile,
        by: &str,
    ) -> Result<ImportSummary, StoreError> {
        let names: Vec<String> = file.rules.iter().map(|r| r.name.clone()).collect();
        let change = Change::Import {
            settings: file.settings,
            rules: file.rules,
        };
        let plans = self.write(domain, by, &change)?;
        let mut summary = ImportSummary::default();
        for p in &plans {
            let version = match &p.after {
                Some(Record::Rule(r)) => r.meta.version,
                Some(Record::Settings(s)) => s.meta.version,
                None => 0,
            };
            summary.version = summary.version.max(version);
            match (&p.rule, &p.before, &p.after) {
                (None, _, _) => summary.settings = true,
                (Some(n), None, Some(_)) => summary.created.push(n.clone()),
                (Some(n), Some(_), Some(_)) => summary.replaced.push(n.clone()),
                (Some(n), _, None) => summary.deleted.push(n.clone()),
            }
        }
        summary.unchanged = names
            .into_iter()
            .filter(|n| !summary.created.contains(n) && !summary.replaced.contains(n))
            .collect();
        if plans.is_empty() {
            summary.version = self.version(domain)?.unwrap_or(0);
        } else if summary.version == 0 {
            // Only deletions: the write's version is the domain's now.
            summary.version = self.version(domain)?.unwrap_or(0);
        }
        Ok(summary)
    }

    /// [`Store::import`] of rule-file text, validated as a rule file first:
    /// an error names `file`, the line, the column and the rule
    /// ([`StoreError::Invalid`]).
    ///
    /// ```
    /// # use sluicegate_policy::store::Store;
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let store = Store::open(&format!("sqlite:{}", dir.path().join("r.db").display()))?;
    /// let e = store.import_toml("api", "[[rule]]\nname = \"a\"\nlimit = \"1/s\"\nkey = [\"IP\"]\n", Some("rules.toml"), "ops").unwrap_err();
    /// assert!(e.to_string().contains("rules.toml:4:8: error: rule `a`"), "{e}");
    /// assert!(store.domain("api")?.is_none()); // nothing saved
    /// # Ok::<(), sluicegate_policy::store::StoreError>(())
    /// ```
    pub fn import_toml(
        &self,
        domain: &str,
        text: &str,
        file: Option<&str>,
        by: &str,
    ) -> Result<ImportSummary, StoreError> {
        let parsed = DomainFile::parse(text, file).map_err(StoreError::Invalid)?;
        self.import(domain, parsed, by)
    }

    /// The domain as rule-file text ([`DomainFile::to_toml`]) under a comment
    /// naming the domain and its version; [`Store::import_toml`] of it changes
    /// nothing. [`StoreError::NotFound`] if there is no such domain.
    ///
    /// ```
    /// # use sluicegate_policy::store::{RuleRecord, Store};
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let store = Store::open(&format!("sqlite:{}", dir.path().join("r.db").display()))?;
    /// store.create_rule("api", RuleRecord::new("a", "1/s").key(["ip"]), None, "ops")?;
    /// let text = store.export_toml("api")?;
    /// assert!(text.ends_with("[[rule]]\nname = \"a\"\nkey = [\"ip\"]\nlimit = \"1/s\"\n"), "{text}");
    /// assert!(store.import_toml("api", &text, None, "ops")?.is_unchanged());
    /// # Ok::<(), sluicegate_policy::store::StoreError>(())
    /// ```
    pub fn export_toml(&self, domain: &str) -> Result<String, StoreError> {
        let d = self
            .domain(domain)?
            .ok_or_else(|| StoreError::NotFound(format!("domain `{domain}`")))?;
        let mut out = format!(
            "# Domain {} of a sluicegate rule store, at version {}.\n# `sluicegate store import` puts it back; `sluicegate lint` checks it.\n",
            string(&d.name),
            d.version
        );
        let body = d.to_file().to_toml();
        if !body.is_empty() {
            out.push('\n');
            out.push_str(&body);
        }
        Ok(out)
    }
}
