//! The rules in force: every domain of the configuration, and the per-request
//! logic of envoyproxy/ratelimit (resolve each descriptor, drop replaced limits,
//! decide each descriptor on its own, shadow mode, unlimited).
//!
//! Every limit is decided by the policy layer (`sluicegate-policy`), one policy per
//! domain: a YAML domain's limits are the rules of its policy
//! ([`crate::yaml_domain`]); a TOML file is a policy whose attributes are the
//! descriptor's entries ([`crate::toml_domain`]). A domain split across YAML files
//! is merged into one, as envoyproxy/ratelimit does.

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::Arc;

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::rate_limit::Unit;
use sluicegate_policy::{Decision, Mode};

use sluicegate::keyed::Pool;
use sluicegate::SpecError;
use sluicegate_policy::PolicyDef;

use crate::config::ConfigError;
use crate::metrics::{RuleMetrics, TableCounts};
use crate::toml_domain::TomlDomain;
use crate::yaml::DescriptorTree;
use crate::yaml_domain::{Limit, YamlDomain};

/// A decided descriptor, as the response reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limited<'a> {
    /// `current_limit.name` (a YAML `rate_limit.name`, possibly empty; a TOML rule name).
    pub name: Cow<'a, str>,
    /// `current_limit.requests_per_unit`.
    pub requests_per_unit: u32,
    /// `current_limit.unit` (`Unknown` when the window is not one unit).
    pub unit: Unit,
    /// OK: within the limit, or only shadow limits are over.
    pub ok: bool,
    /// Units left after this decision.
    pub remaining: u64,
    /// Nanoseconds until the limit is fresh again.
    pub reset_ns: u64,
    /// `RateLimit-Policy` and `RateLimit` items, when asked for.
    pub headers: Option<(String, String)>,
}

/// What one descriptor got.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome<'a> {
    /// No limit applies (or it was replaced): OK, nothing counted.
    NoLimit,
    /// An `unlimited` limit: OK, remaining reported as `u32::MAX`.
    Unlimited,
    /// Decided by a limit.
    Limited(Limited<'a>),
}

/// One rule's series: (label `domain.…`, shadow, counters, (evicted, rejected)
/// values of a full table).
pub type MetricRow = (String, bool, Arc<RuleMetrics>, TableCounts);

/// One domain: a YAML descriptor tree with its limits, a TOML policy, or a
/// domain of the rule store (a TOML policy following the store). Shared by
/// reference, so a new rule set (a reload, a domain added to the store) keeps
/// the domains it does not rebuild as they are.
#[derive(Debug, Clone)]
pub(crate) enum DomainRules {
    Yaml(Arc<YamlDomain>),
    Toml(Arc<TomlDomain>),
    Store(Arc<TomlDomain>),
}

/// The configuration in force: every domain and its limits.
///
/// ```
/// use sluicegate_server::{build_rules, TableSettings};
/// let sources = [("edge.yaml".to_owned(), "domain: edge\n".to_owned()), ("api.toml".to_owned(), String::new())];
/// let rules = build_rules(&sources, None, TableSettings::new(64, 1 << 20)?)?;
/// assert_eq!(rules.domain_count(), 2);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Default)]
pub struct RuleSet {
    domains: HashMap<String, DomainRules>,
    /// Where the file domains come from (for an error naming a domain defined
    /// twice).
    files: HashMap<String, String>,
}

/// Settings that shape the limiters' state: every domain's keyed limits keep
/// their keys in one pool (`--state-memory`), each limit at most
/// `keys_per_limit` live keys (`--keys-per-limit`).
///
/// ```
/// let s = sluicegate_server::TableSettings::new(100_000, 8 << 20)?;
/// assert_eq!(s.keys_per_limit, 100_000);
/// assert!(s.pool.memory() <= 8 << 20);
/// assert!(sluicegate_server::TableSettings::new(64, usize::MAX).is_err());
/// # Ok::<(), sluicegate::SpecError>(())
/// ```
#[derive(Debug, Clone)]
pub struct TableSettings {
    /// Live keys each limit holds at most (the policy's `capacity`).
    pub keys_per_limit: usize,
    /// The pool every domain's keyed limits keep their keys in.
    pub pool: Pool,
}

impl TableSettings {
    /// Settings with a new pool of `state_memory` bytes.
    pub fn new(keys_per_limit: usize, state_memory: usize) -> Result<Self, SpecError> {
        Ok(TableSettings {
            keys_per_limit,
            pool: Pool::with_memory(state_memory)?,
        })
    }
}

/// A parsed config file.
#[derive(Debug)]
pub enum Source {
    /// envoyproxy/ratelimit YAML.
    Yaml(DescriptorTree),
    /// A TOML policy for the domain named by the file's stem.
    Toml {
        /// The domain.
        domain: String,
        /// The rule file's text (to see whether it changed).
        text: String,
        /// The policy it describes (validated).
        def: PolicyDef,
    },
}

impl RuleSet {
    /// Builds the rules of `sources` (each with its file name), taking over the state
    /// and counters of `old`'s limits: a YAML limit by its full key, a TOML domain by
    /// its rules' names (the policy's reload rules). Every domain is validated
    /// before `old` is touched, so an invalid file leaves the rules in force as they
    /// were. The YAML files of one domain are merged (their top-level descriptors
    /// must differ); a domain is YAML or TOML, not both.
    pub(crate) fn build(
        sources: Vec<(String, Source)>,
        old: Option<&RuleSet>,
        settings: TableSettings,
    ) -> Result<RuleSet, ConfigError> {
        // 1. Validate: one source per domain (YAML files merged), every policy.
        let mut trees: Vec<(String, DescriptorTree)> = Vec::new();
        let mut tomls: Vec<(String, String, String, PolicyDef)> = Vec::new();
        for (file, source) in sources {
            let name = match &source {
                Source::Yaml(d) => d.name.clone(),
                Source::Toml { domain, .. } => domain.clone(),
            };
            let yaml_at = trees.iter().position(|(_, t)| t.name == name);
            let toml_at = tomls.iter().find(|(_, d, _, _)| *d == name);
            match (source, yaml_at, toml_at) {
                (Source::Yaml(tree), Some(i), None) => trees[i].1.merge(tree)?,
                (Source::Yaml(tree), None, None) => trees.push((file, tree)),
                (Source::Toml { domain, text, def }, None, None) => {
                    tomls.push((file, domain, text, def))
                }
                (_, Some(i), _) => {
                    let first = &trees[i].0;
                    let msg = format!("duplicate domain '{name}' in config file (also in {first})");
                    return Err(ConfigError::new(file, msg));
                }
                (_, None, Some((first, ..))) => {
                    let msg = format!("duplicate domain '{name}' in config file (also in {first})");
                    return Err(ConfigError::new(file, msg));
                }
            }
        }
        let plans = trees
            .into_iter()
            .map(|(_, tree)| crate::yaml_domain::plan(&tree, &settings).map(|def| (tree, def)))
            .collect::<Result<Vec<_>, _>>()?;
        // 2. Build, reloading old policies in place.
        let mut out = RuleSet::default();
        for (tree, def) in plans {
            let prev = old.and_then(|o| match o.domains.get(&tree.name) {
                Some(DomainRules::Yaml(y)) => Some(&**y),
                _ => None,
            });
            let name = tree.name.clone();
            let domain = YamlDomain::build(tree, def, prev, &settings.pool)?;
            out.domains
                .insert(name, DomainRules::Yaml(Arc::new(domain)));
        }
        for (file, domain, text, def) in tomls {
            let prev = old.and_then(|o| match o.domains.get(&domain) {
                Some(DomainRules::Toml(t)) => Some(&**t),
                _ => None,
            });
            let built = TomlDomain::build(&file, &domain, &text, def, prev, &settings.pool)?;
            out.files.insert(domain.clone(), file);
            out.domains
                .insert(domain, DomainRules::Toml(Arc::new(built)));
        }
        // The store's domains stay as they are; one the files define too is an
        // error naming both.
        if let Some(old) = old {
            for (name, rules) in &old.domains {
                if let DomainRules::Store(_) = rules {
                    out.add_store_domain(name, rules.clone())?;
                }
            }
        }
        Ok(out)
    }

    /// Serves `rules` (a store domain) as `name`, unless a config file defines
    /// that domain: then the error names both.
    pub(crate) fn add_store_domain(
        &mut self,
        name: &str,
        rules: DomainRules,
    ) -> Result<(), ConfigError> {
        if let Some(file) = self.files.get(name) {
            let msg = format!(
                "domain '{name}' is defined both in this config file and in the rule store (--store): serve it from one"
            );
            return Err(ConfigError::new(file.clone(), msg));
        }
        if let Some(DomainRules::Yaml(_)) = self.domains.get(name) {
            let msg = format!(
                "domain '{name}' is defined both in the YAML config and in the rule store (--store): serve it from one"
            );
            return Err(ConfigError::new("--config", msg));
        }
        self.domains.insert(name.to_owned(), rules);
        Ok(())
    }

    /// A copy of this set (the domains shared) with the store domain `name`
    /// added; see [`Self::add_store_domain`].
    pub(crate) fn with_store_domain(
        &self,
        name: &str,
        domain: Arc<TomlDomain>,
    ) -> Result<RuleSet, ConfigError> {
        let mut out = RuleSet {
            domains: self.domains.clone(),
            files: self.files.clone(),
        };
        out.add_store_domain(name, DomainRules::Store(domain))?;
        Ok(out)
    }

    /// The domain `name`, if served.
    pub(crate) fn domain(&self, name: &str) -> Option<&DomainRules> {
        self.domains.get(name)
    }

    /// The store domains served, by name.
    pub(crate) fn store_domains(&self) -> impl Iterator<Item = (&str, &Arc<TomlDomain>)> {
        self.domains.iter().filter_map(|(n, d)| match d {
            DomainRules::Store(t) => Some((n.as_str(), t)),
            _ => None,
        })
    }

    #[cfg(test)]
    fn yaml_rule(&self, domain: &str, full_key: &str) -> Option<&Limit> {
        match self.domains.get(domain)? {
            DomainRules::Yaml(y) => y.limit(full_key),
            DomainRules::Toml(_) | DomainRules::Store(_) => None,
        }
    }

    /// Number of configured domains.
    ///
    /// ```
    /// # use sluicegate_server::RuleSet;
    /// assert_eq!(RuleSet::default().domain_count(), 0);
    /// ```
    pub fn domain_count(&self) -> usize {
        self.domains.len()
    }

    /// Decides every descriptor of one request at `now_ns` (Unix nanoseconds), with
    /// `hits[i]` units for descriptor `i`; `headers` also formats the `RateLimit`
    /// items. `None` when the domain is unknown (every descriptor OK, as upstream).
    /// The descriptors whose `skip` is true are left to the caller (`NoLimit` here;
    /// a request's own limit override decides them). A TOML domain's rules on
    /// Redis are awaited, never blocking the runtime's thread.
    pub(crate) async fn decide_except<'a>(
        &'a self,
        domain: &str,
        descriptors: &[&[Entry]],
        hits: &[u64],
        now_ns: u64,
        headers: bool,
        skip: &[bool],
    ) -> Option<Vec<Outcome<'a>>> {
        let skipped = |i: usize| skip.get(i).copied().unwrap_or(false);
        let yaml = match self.domains.get(domain)? {
            DomainRules::Yaml(y) => y,
            DomainRules::Toml(t) | DomainRules::Store(t) => {
                let mut out = Vec::with_capacity(descriptors.len());
                for (i, (d, &n)) in descriptors.iter().zip(hits).enumerate() {
                    out.push(if skipped(i) {
                        Outcome::NoLimit
                    } else {
                        t.decide(d, n, now_ns, headers).await
                    });
                }
                return Some(out);
            }
        };
        let mut picked: Vec<Option<&Limit>> = descriptors
            .iter()
            .enumerate()
            .map(|(i, d)| if skipped(i) { None } else { yaml.resolve(d) })
            .collect();
        // `replaces`: a named limit is dropped when another applied limit of the same
        // request replaces it (upstream: unlimited limits replace too).
        if picked.iter().flatten().any(|r| !r.def.replaces.is_empty()) {
            let replaced: Vec<&str> = picked
                .iter()
                .flatten()
                .flat_map(|r| r.def.replaces.iter().map(String::as_str))
                .collect();
            for slot in &mut picked {
                if slot.is_some_and(|r| {
                    !r.def.name.is_empty() && replaced.contains(&r.def.name.as_str())
                }) {
                    *slot = None;
                }
            }
        }
        let mut decision = Decision::new();
        let outcomes = picked
            .into_iter()
            .zip(descriptors)
            .zip(hits)
            .map(|((limit, entries), &n)| match limit {
                None => Outcome::NoLimit,
                Some(limit) => yaml.decide(limit, entries, n, now_ns, headers, &mut decision),
            })
            .collect();
        Some(outcomes)
    }

    /// Every domain's per-rule series, for `/metrics`.
    pub(crate) fn metric_rows(&self, now_ns: u64) -> Vec<MetricRow> {
        let mut rows = Vec::new();
        for rules in self.domains.values() {
            match rules {
                DomainRules::Yaml(y) => rows.extend(y.metric_rows(now_ns)),
                DomainRules::Toml(t) | DomainRules::Store(t) => rows.extend(t.metric_rows(now_ns)),
            }
        }
        rows.sort_by(|a, b| a.0.cmp(&b.0));
        rows
    }
}

/// Shadow or enforce, for a TOML rule's series.
pub(crate) fn is_shadow(mode: Mode) -> bool {
    mode == Mode::Shadow
}

#[cfg(test)]
#[path = "rule_set_tests.rs"]
mod tests;
