//! A YAML domain as one policy: every rate limit of its descriptor tree is a rule
//! of one `sluicegate-policy` policy, keyed by the descriptor's values
//! (attributes `e0`, `e1`, …: the keys are fixed by the tree path that led to the
//! limit) and selected by the tree. The tree picks the one limit that applies to a
//! descriptor (envoyproxy/ratelimit's precedence: an exact value over a wildcard
//! over any value, the limit of the node the last entry reaches); the policy holds
//! the state of every limit of the domain, reloads it in place, and counts.
//!
//! The precedence is the tree's, not the policy's: policy rules all apply when
//! they match, and a rule cannot say "this key with any value *but* those another
//! rule names". So each rule matches one more attribute, `limit`, which the tree
//! sets to the full key of the limit it picked: the request then matches that one
//! rule, found by the policy's exact-value index.

use std::collections::HashMap;
use std::sync::Arc;

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
use sluicegate_policy::{Attrs, Decision, Mode, Policy, PolicyDef, RuleDef};

use crate::config::ConfigError;
use crate::limit::OneLimit;
use crate::metrics::{RuleMetrics, TableCounts};
use crate::rule_set::{Outcome, TableSettings};
use crate::yaml::{unit_seconds, DescriptorTree, LimitDef, LimitKind};
use sluicegate::keyed::Pool;

/// The algorithm YAML limits use unless the extension field names another: the
/// one envoyproxy/ratelimit has, so an existing config behaves the same.
pub const DEFAULT_ALGORITHM: &str = "fixed_window";

/// The attribute the tree's pick is passed in.
const PICKED: &str = "limit";

/// How a YAML limit decides.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum How {
    Unlimited,
    /// `requests_per_unit: 0`: every hit is over the limit, as upstream.
    Never,
    /// By the domain policy's rule of this index.
    Rule(usize),
}

/// One limit of a YAML domain, ready to decide.
#[derive(Debug)]
pub struct Limit {
    /// Its definition from the file.
    pub def: LimitDef,
    how: How,
    pub(crate) metrics: Arc<RuleMetrics>,
}

/// A YAML domain: its tree, its limits and the one policy holding their state.
#[derive(Debug)]
pub struct YamlDomain {
    tree: DescriptorTree,
    limits: Vec<Limit>,
    /// Index into `limits` by full key.
    by_key: HashMap<String, usize>,
    policy: Arc<Policy>,
}

/// A descriptor as the domain policy's attributes: `e0`, `e1`, … by position, and
/// the tree's pick.
struct Picked<'a> {
    limit: &'a str,
    entries: &'a [Entry],
}

impl Attrs for Picked<'_> {
    fn get(&self, name: &str) -> Option<&str> {
        if name == PICKED {
            return Some(self.limit);
        }
        let i: usize = name.strip_prefix('e')?.parse().ok()?;
        self.entries.get(i).map(|e| e.value.as_str())
    }
}

/// The domain policy of `tree`, validated: one rule per rate limit, named by its
/// full key. An error names the descriptor and the file it is in.
pub(crate) fn plan(
    tree: &DescriptorTree,
    settings: &TableSettings,
) -> Result<PolicyDef, ConfigError> {
    let mut rules = Vec::new();
    for def in tree.limits() {
        let LimitKind::Rate {
            requests_per_unit,
            unit,
            algorithm,
        } = &def.kind
        else {
            continue;
        };
        if *requests_per_unit == 0 {
            continue;
        }
        let window_s = unit_seconds(*unit).unwrap_or(1);
        let mode = if def.shadow {
            Mode::Shadow
        } else {
            Mode::Enforce
        };
        rules.push(
            RuleDef::builder(def.full_key.as_str())
                .matching(PICKED, def.full_key.as_str())
                .key((0..def.depth).map(|i| format!("e{i}")))
                .limit(format!("{requests_per_unit}/{window_s}s"))
                .algorithm(algorithm.as_deref().unwrap_or(DEFAULT_ALGORITHM))
                .mode(mode)
                .capacity(settings.keys_per_limit as u64),
        );
    }
    let def = PolicyDef::builder().rules(rules).build();
    def.map_err(|e| descriptor_error(tree, &e))
}

/// A domain policy's error (its first: errors come before warnings), as the
/// descriptor's: the rule is the limit's full key.
fn descriptor_error(tree: &DescriptorTree, e: &sluicegate_policy::Error) -> ConfigError {
    let first = e.diagnostics().first();
    let descriptor = first.and_then(|d| d.rule.as_deref()).unwrap_or("");
    let message = first.map_or_else(|| e.to_string(), |d| d.message.clone());
    ConfigError::new(
        tree.file_of(descriptor),
        format!("descriptor '{descriptor}': {message}"),
    )
}

impl YamlDomain {
    /// The domain of `tree` with the policy `def` ([`plan`]), taking over `prev`'s
    /// policy (reloaded in place: unchanged limits keep their state) and each
    /// limit's counters by its full key.
    pub(crate) fn build(
        tree: DescriptorTree,
        def: PolicyDef,
        prev: Option<&YamlDomain>,
        pool: &Pool,
    ) -> Result<YamlDomain, ConfigError> {
        let err = |e: sluicegate_policy::Error| descriptor_error(&tree, &e);
        let policy = match prev {
            Some(p) => {
                p.policy.reload_from_def(def).map_err(err)?;
                p.policy.clone()
            }
            // Its keys live in the server's pool, beside every other domain's.
            None => Arc::new(
                Policy::builder()
                    .pool(pool.clone())
                    .from_def(def)
                    .map_err(err)?,
            ),
        };
        let rules: HashMap<String, usize> = (policy.definition().rules().iter())
            .enumerate()
            .map(|(i, r)| (r.name().to_owned(), i))
            .collect();
        let limits: Vec<Limit> = tree
            .limits()
            .iter()
            .map(|def| {
                let how = match &def.kind {
                    LimitKind::Unlimited => How::Unlimited,
                    LimitKind::Rate { .. } => rules
                        .get(&def.full_key)
                        .map_or(How::Never, |&i| How::Rule(i)),
                };
                let metrics = prev
                    .and_then(|p| p.limit(&def.full_key))
                    .filter(|p| p.def.detailed_metric == def.detailed_metric)
                    .map_or_else(
                        || Arc::new(RuleMetrics::new(def.detailed_metric)),
                        |p| p.metrics.clone(),
                    );
                Limit {
                    def: def.clone(),
                    how,
                    metrics,
                }
            })
            .collect();
        let by_key = (limits.iter().enumerate())
            .map(|(i, l)| (l.def.full_key.clone(), i))
            .collect();
        Ok(YamlDomain {
            tree,
            limits,
            by_key,
            policy,
        })
    }

    /// The limit with this full key.
    pub(crate) fn limit(&self, full_key: &str) -> Option<&Limit> {
        self.by_key.get(full_key).and_then(|&i| self.limits.get(i))
    }

    /// The limit that applies to a descriptor ([`DescriptorTree::resolve_index`]).
    pub(crate) fn resolve(&self, entries: &[Entry]) -> Option<&Limit> {
        self.tree
            .resolve_index(entries.iter().map(|e| (e.key.as_str(), e.value.as_str())))
            .and_then(|i| self.limits.get(i))
    }

    /// Decides one descriptor by `limit` (one of this domain's).
    pub(crate) fn decide<'a>(
        &'a self,
        limit: &'a Limit,
        entries: &[Entry],
        hits: u64,
        now_ns: u64,
        headers: bool,
        d: &mut Decision,
    ) -> Outcome<'a> {
        let def = &limit.def;
        let LimitKind::Rate {
            requests_per_unit,
            unit,
            ..
        } = &def.kind
        else {
            return Outcome::Unlimited;
        };
        let one = OneLimit {
            name: &def.name,
            header_name: if def.name.is_empty() {
                &def.full_key
            } else {
                &def.name
            },
            requests_per_unit: *requests_per_unit,
            unit: *unit,
            shadow: def.shadow,
            metrics: &limit.metrics,
        };
        let policy = (limit.how != How::Never).then_some(&*self.policy);
        let attrs = Picked {
            limit: &def.full_key,
            entries,
        };
        let detail = || detailed_key(&def.domain, entries);
        crate::limit::decide(one, policy, &attrs, hits, now_ns, headers, detail, d)
    }

    /// Each limit's series: (full key, shadow, counters, its table's counts).
    pub(crate) fn metric_rows(
        &self,
        now_ns: u64,
    ) -> impl Iterator<Item = crate::rule_set::MetricRow> + '_ {
        let stats = self.policy.metrics_at(now_ns);
        self.limits.iter().map(move |l| {
            let counts = match l.how {
                How::Rule(i) => stats.get(i).map(TableCounts::from).unwrap_or_default(),
                How::Unlimited | How::Never => TableCounts::default(),
            };
            (
                l.def.full_key.clone(),
                l.def.shadow,
                l.metrics.clone(),
                counts,
            )
        })
    }
}

impl Limit {
    /// This limit's counters.
    #[cfg(test)]
    pub fn metrics(&self) -> &RuleMetrics {
        &self.metrics
    }
}

/// envoyproxy/ratelimit's detailed metric key: the domain and every `key_value`.
fn detailed_key(domain: &str, entries: &[Entry]) -> String {
    descriptor_key(domain, entries, '.', '_')
}

/// `domain`, then each entry as `before_key` key `before_value` value.
pub(crate) fn descriptor_key(
    domain: &str,
    entries: &[Entry],
    before_key: char,
    before_value: char,
) -> String {
    let mut s = String::from(domain);
    for e in entries {
        s.push(before_key);
        s.push_str(&e.key);
        s.push(before_value);
        s.push_str(&e.value);
    }
    s
}
