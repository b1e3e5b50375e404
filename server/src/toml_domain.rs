//! A domain configured with our TOML policy format: the file `<domain>.toml` is a
//! `sluicegate-policy` rule file, and each request descriptor is checked as one
//! request whose attributes are the descriptor's entries (`key` = attribute name).
//! Every matching rule applies, all-or-nothing, shadow rules count but never deny.

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::Arc;

use arc_swap::ArcSwap;

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::rate_limit::Unit;
use sluicegate_policy::redis::RedisFactory;
use sluicegate_policy::{Attrs, Mode, Policy, PolicyDef};

use crate::config::ConfigError;
use crate::metrics::{HitResult, RuleMetrics, TableCounts};
use crate::rule_set::{is_shadow, Limited, MetricRow, Outcome};
use crate::yaml::unit_seconds;
use sluicegate::keyed::Pool;

/// A descriptor's entries as policy attributes (the first entry of a key wins).
struct EntryAttrs<'a>(&'a [Entry]);

impl Attrs for EntryAttrs<'_> {
    fn get(&self, name: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|e| e.key == name)
            .map(|e| e.value.as_str())
    }
}

/// The envoy unit whose length is exactly `window_ns`, else `Unknown`.
fn unit_of(window_ns: u64) -> Unit {
    [
        Unit::Second,
        Unit::Minute,
        Unit::Hour,
        Unit::Day,
        Unit::Week,
        Unit::Month,
        Unit::Year,
    ]
    .into_iter()
    .find(|u| unit_seconds(*u).map(|s| s * 1_000_000_000) == Some(window_ns))
    .unwrap_or(Unit::Unknown)
}

/// One TOML-configured domain (a file, or a domain of the rule store).
#[derive(Debug)]
pub struct TomlDomain {
    domain: String,
    policy: Arc<Policy>,
    text: String,
    /// Each rule's counters by name. A store domain's policy reloads on its
    /// own (its follower), so a rule new to it gets its counters on its first
    /// decision: the map is swapped whole then, never locked on the way.
    metrics: ArcSwap<HashMap<String, Arc<RuleMetrics>>>,
}

/// One rule's cumulative hits, as the admin page's stats show them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuleHits {
    /// The rule's name.
    pub name: String,
    /// Shadow mode.
    pub shadow: bool,
    /// Hits (hits_addend units) allowed, denied, shadow-denied.
    pub counts: [u64; 3],
}

impl TomlDomain {
    /// Builds the policy `def` (read from `text`), or reloads `prev`'s policy in
    /// place so that unchanged rules keep their state.
    pub fn build(
        file: &str,
        domain: &str,
        text: &str,
        def: PolicyDef,
        prev: Option<&TomlDomain>,
        pool: &Pool,
    ) -> Result<TomlDomain, ConfigError> {
        let err = |e| ConfigError::policy(file, e);
        let policy = match prev {
            Some(p) => {
                if p.text != text {
                    p.policy.reload_from_def(def).map_err(err)?;
                }
                p.policy.clone()
            }
            // Rules on `redis` and `hybrid` are built by the policy's Redis factory;
            // keyed rules keep their keys in the server's pool (the file's
            // `[state]` table is the server's `--state-memory` here).
            None => Arc::new(
                Policy::builder()
                    .remote(RedisFactory::default())
                    .pool(pool.clone())
                    .from_def(def)
                    .map_err(err)?,
            ),
        };
        let metrics = policy
            .definition()
            .rules()
            .iter()
            .map(|r| {
                let m = prev
                    .and_then(|p| p.metrics.load().get(r.name()).cloned())
                    .unwrap_or_default();
                (r.name().to_owned(), m)
            })
            .collect();
        Ok(TomlDomain {
            domain: domain.to_owned(),
            policy,
            text: text.to_owned(),
            metrics: ArcSwap::from_pointee(metrics),
        })
    }

    /// A domain of the rule store: `policy` follows it on its own.
    pub fn from_store(domain: &str, policy: Policy) -> TomlDomain {
        TomlDomain {
            domain: domain.to_owned(),
            policy: Arc::new(policy),
            text: String::new(),
            metrics: ArcSwap::default(),
        }
    }

    /// The policy deciding this domain.
    pub fn policy(&self) -> &Arc<Policy> {
        &self.policy
    }

    /// The counters of rule `name`, made on first use.
    fn metrics_of(&self, name: &str) -> Arc<RuleMetrics> {
        if let Some(m) = self.metrics.load().get(name) {
            return m.clone();
        }
        let mut made = None;
        self.metrics.rcu(|map| {
            let mut map = HashMap::clone(map);
            let m = map.entry(name.to_owned()).or_default().clone();
            made = Some(m);
            map
        });
        made.unwrap_or_default()
    }

    /// Every rule in force with its cumulative hits, in the policy's order.
    pub fn hits(&self) -> Vec<RuleHits> {
        self.policy
            .definition()
            .rules()
            .iter()
            .map(|r| RuleHits {
                name: r.name().to_owned(),
                shadow: is_shadow(r.mode()),
                counts: self.metrics_of(r.name()).totals(),
            })
            .collect()
    }

    /// Decides one descriptor, awaiting its rules on Redis
    /// ([`Policy::check_n_at_async`]).
    pub async fn decide(
        &self,
        entries: &[Entry],
        hits: u64,
        now_ns: u64,
        headers: bool,
    ) -> Outcome<'static> {
        let d = self
            .policy
            .check_n_at_async(&EntryAttrs(entries), hits, now_ns)
            .await;
        let mut report = None;
        for r in d.rules() {
            let result = match (r.allowed, r.mode) {
                (true, _) if d.allowed() => Some(HitResult::Allowed),
                // Admitted by this rule, denied by another: nothing was charged here.
                (true, _) => None,
                (false, Mode::Enforce) => Some(HitResult::Denied),
                (false, Mode::Shadow) => Some(HitResult::ShadowDenied),
            };
            if let Some(result) = result {
                let map = self.metrics.load();
                match map.get(r.name) {
                    Some(m) => m.record(result, hits, String::new),
                    None => self.metrics_of(r.name).record(result, hits, String::new),
                }
            }
            // Report the first denying enforcing rule, else the one closest to its limit.
            let rank = (r.mode == Mode::Shadow, r.allowed, r.remaining);
            if report.as_ref().is_none_or(|(best, _)| rank < *best) {
                report = Some((rank, r));
            }
        }
        let Some((_, r)) = report else {
            return Outcome::NoLimit;
        };
        let headers = headers
            .then(|| (d.ratelimit_policy_header(), d.ratelimit_header()))
            .filter(|(p, _)| !p.is_empty());
        Outcome::Limited(Limited {
            name: Cow::Owned(r.name.to_owned()),
            requests_per_unit: u32::try_from(r.limit).unwrap_or(u32::MAX),
            unit: unit_of(r.window_ns),
            ok: d.allowed(),
            remaining: r.remaining,
            reset_ns: r.reset_ns(),
            headers,
        })
    }

    /// One row per rule, labelled `domain.rule`.
    pub fn metric_rows(&self, now_ns: u64) -> Vec<MetricRow> {
        let stats = self.policy.metrics_at(now_ns);
        self.policy
            .definition()
            .rules()
            .iter()
            .map(|r| {
                let m = self.metrics_of(r.name());
                let counts = stats
                    .iter()
                    .find(|s| s.name == r.name())
                    .map(TableCounts::from)
                    .unwrap_or_default();
                (
                    format!("{}.{}", self.domain, r.name()),
                    is_shadow(r.mode()),
                    m,
                    counts,
                )
            })
            .collect()
    }
}
