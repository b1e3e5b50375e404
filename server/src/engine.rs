//! Decisions: every domain of the configuration and the per-request logic of
//! envoyproxy/ratelimit (resolve each descriptor, drop replaced limits, decide each
//! descriptor on its own, shadow mode, unlimited).
//!
//! Every limit is decided by the policy layer (`sluicegate-policy`): a YAML limit is
//! a one-rule policy keyed by its descriptor's values; a TOML file is a policy of its
//! own whose attributes are the descriptor's entries ([`crate::toml_domain`]).

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::Arc;

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::rate_limit::Unit;
use sluicegate_policy::{Decision, Mode};

use crate::metrics::{RuleMetrics, TableCounts};
use crate::toml_domain::TomlDomain;
use crate::yaml::{ConfigError, Domain};
use crate::yaml_rule::{build_rule, plan_text, Rule};

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

/// One domain: a YAML descriptor tree with its limits, or a TOML policy.
#[derive(Debug)]
enum DomainRules {
    Yaml { tree: Domain, rules: Vec<Rule> },
    Toml(TomlDomain),
}

/// The configuration in force: every domain and its limits.
///
/// ```
/// use sluicegate_server::{build_rules, TableSettings};
/// let sources = [("edge.yaml".to_owned(), "domain: edge\n".to_owned()), ("api.toml".to_owned(), String::new())];
/// let rules = build_rules(&sources, None, TableSettings { keys_per_limit: 64 })?;
/// assert_eq!(rules.domain_count(), 2);
/// # Ok::<(), sluicegate_server::ConfigError>(())
/// ```
#[derive(Debug, Default)]
pub struct RuleSet {
    domains: HashMap<String, DomainRules>,
}

/// Settings that shape the limiter tables.
///
/// ```
/// let s = sluicegate_server::TableSettings { keys_per_limit: 100_000 };
/// assert_eq!(s.keys_per_limit, 100_000);
/// ```
#[derive(Debug, Clone, Copy)]
pub struct TableSettings {
    /// Keys each limit's table holds (the policy's `capacity`).
    pub keys_per_limit: usize,
}

/// A parsed config file.
#[derive(Debug)]
pub enum Source {
    /// envoyproxy/ratelimit YAML.
    Yaml(Domain),
    /// A TOML policy for the domain named by the file's stem.
    Toml {
        /// The domain.
        domain: String,
        /// The rule file's text (validated).
        text: String,
    },
}

impl RuleSet {
    /// Builds the rules of `sources` (each with its file name), taking over the state
    /// and counters of `old`'s limits: a YAML limit by its full key, a TOML domain by
    /// its rules' names (the policy's reload rules). Everything is validated before
    /// `old` is touched, so a failure leaves the rules in force as they were.
    pub(crate) fn build(
        sources: Vec<(String, Source)>,
        old: Option<&RuleSet>,
        settings: TableSettings,
    ) -> Result<RuleSet, ConfigError> {
        // 1. Validate: unique domains, every generated rule file.
        let mut plans = Vec::with_capacity(sources.len());
        let mut names = std::collections::HashSet::new();
        for (file, source) in sources {
            let err = |message: String| ConfigError {
                file: file.clone(),
                message,
            };
            let name = match &source {
                Source::Yaml(d) => d.name.clone(),
                Source::Toml { domain, .. } => domain.clone(),
            };
            if !names.insert(name.clone()) {
                return Err(err(format!("duplicate domain '{name}' in config file")));
            }
            let texts = match &source {
                Source::Yaml(d) => d
                    .limits()
                    .iter()
                    .map(|def| {
                        plan_text(def, settings)
                            .map_err(|m| err(format!("descriptor '{}': {m}", def.full_key)))
                    })
                    .collect::<Result<Vec<_>, _>>()?,
                Source::Toml { .. } => Vec::new(),
            };
            plans.push((file, name, source, texts));
        }
        // 2. Build, reloading old policies in place where the limit carries over.
        let mut out = RuleSet::default();
        for (file, name, source, texts) in plans {
            let err = |message: String| ConfigError {
                file: file.clone(),
                message,
            };
            let rules = match source {
                Source::Yaml(tree) => {
                    let mut rules = Vec::with_capacity(texts.len());
                    for (def, text) in tree.limits().iter().zip(texts) {
                        let prev = old.and_then(|o| o.yaml_rule(&name, &def.full_key));
                        rules.push(
                            build_rule(def, text, prev)
                                .map_err(|m| err(format!("descriptor '{}': {m}", def.full_key)))?,
                        );
                    }
                    DomainRules::Yaml { tree, rules }
                }
                Source::Toml { domain, text } => {
                    let prev = old.and_then(|o| match o.domains.get(&domain) {
                        Some(DomainRules::Toml(t)) => Some(t),
                        _ => None,
                    });
                    DomainRules::Toml(TomlDomain::build(&file, &domain, &text, prev)?)
                }
            };
            out.domains.insert(name, rules);
        }
        Ok(out)
    }

    fn yaml_rule(&self, domain: &str, full_key: &str) -> Option<&Rule> {
        match self.domains.get(domain)? {
            DomainRules::Yaml { rules, .. } => rules.iter().find(|r| r.def.full_key == full_key),
            DomainRules::Toml(_) => None,
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

    /// Whether deciding these descriptors (entries, hits) in `domain` may wait
    /// for a Redis round trip: a TOML domain with a `redis` or `hybrid` rule that
    /// cannot answer one of them from this process ([`TomlDomain::may_wait`]).
    pub(crate) fn may_wait<'e>(
        &self,
        domain: &str,
        mut descriptors: impl Iterator<Item = (&'e [Entry], u64)>,
    ) -> bool {
        match self.domains.get(domain) {
            Some(DomainRules::Toml(t)) => descriptors.any(|(entries, n)| t.may_wait(entries, n)),
            _ => false,
        }
    }

    /// Decides every descriptor of one request at `now_ns` (Unix nanoseconds), with
    /// `hits[i]` units for descriptor `i`; `headers` also formats the `RateLimit`
    /// items. `None` when the domain is unknown (every descriptor OK, as upstream).
    /// The descriptors whose `skip` is true are left to the caller (`NoLimit` here;
    /// a request's own limit override decides them).
    pub(crate) fn decide_except<'a>(
        &'a self,
        domain: &str,
        descriptors: &[&[Entry]],
        hits: &[u64],
        now_ns: u64,
        headers: bool,
        skip: &[bool],
    ) -> Option<Vec<Outcome<'a>>> {
        let skipped = |i: usize| skip.get(i).copied().unwrap_or(false);
        let (tree, rules) = match self.domains.get(domain)? {
            DomainRules::Yaml { tree, rules } => (tree, rules),
            DomainRules::Toml(t) => {
                return Some(
                    descriptors
                        .iter()
                        .zip(hits)
                        .enumerate()
                        .map(|(i, (d, &n))| {
                            if skipped(i) {
                                Outcome::NoLimit
                            } else {
                                t.decide(d, n, now_ns, headers)
                            }
                        })
                        .collect(),
                );
            }
        };
        let mut picked: Vec<Option<&Rule>> = descriptors
            .iter()
            .enumerate()
            .map(|(i, d)| {
                if skipped(i) {
                    return None;
                }
                tree.resolve_index(d.iter().map(|e| (e.key.as_str(), e.value.as_str())))
                    .and_then(|i| rules.get(i))
            })
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
            .map(|((rule, entries), &n)| match rule {
                None => Outcome::NoLimit,
                Some(rule) => rule.decide(entries, n, now_ns, headers, &mut decision),
            })
            .collect();
        Some(outcomes)
    }

    /// Every domain's per-rule series, for `/metrics`.
    pub(crate) fn metric_rows(&self, now_ns: u64) -> Vec<MetricRow> {
        let mut rows = Vec::new();
        for rules in self.domains.values() {
            match rules {
                DomainRules::Yaml { rules, .. } => rows.extend(rules.iter().map(|r| {
                    (
                        r.def.full_key.clone(),
                        r.def.shadow,
                        r.metrics.clone(),
                        r.table_counts(now_ns),
                    )
                })),
                DomainRules::Toml(t) => rows.extend(t.metric_rows(now_ns)),
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
#[path = "engine_tests.rs"]
mod tests;
