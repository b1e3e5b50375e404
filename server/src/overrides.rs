//! Per-descriptor limit overrides (`RateLimitDescriptor.limit`, which Envoy fills
//! from a route's `limit` action): `requests_per_unit` per `unit` for that one
//! descriptor instead of the configured limit, as envoyproxy/ratelimit applies them
//! (a fixed window, no shadow mode, no name). One policy holds them all: a rule per
//! distinct override, added when first seen (a reload that keeps the others'
//! state), kept across config reloads, at most [`MAX_OVERRIDES`] of them.

use std::sync::{Arc, Mutex};

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::rate_limit::Unit;
use sluicegate_policy::{Decision, Policy, PolicyDef, RuleBuilder, RuleDef};

use crate::limit::OneLimit;
use crate::metrics::RuleMetrics;
use crate::rule_set::Outcome;
use crate::rule_set::TableSettings;
use crate::yaml::unit_seconds;
use crate::yaml_domain::descriptor_key;

/// Distinct (requests, unit) overrides the server keeps a rule for: each is a
/// table of its own, so a client cannot make the server allocate without bound.
pub const MAX_OVERRIDES: usize = 256;

/// The attribute a check names its override's rule by.
const RULE: &str = "limit";

/// The overrides seen so far, as one policy.
#[derive(Debug)]
pub struct Overrides {
    seen: Mutex<Seen>,
    settings: TableSettings,
    /// Hits decided by overrides, all together (series `rule="(override)"`).
    pub metrics: Arc<RuleMetrics>,
}

#[derive(Debug, Default)]
struct Seen {
    /// `None` until the first override.
    policy: Option<Arc<Policy>>,
    /// The rules of `policy`, in order.
    rules: Vec<(String, RuleBuilder)>,
}

impl Overrides {
    /// No override seen yet; each override's limit holds at most `keys_per_limit`
    /// live descriptors, in the server's pool.
    pub fn new(settings: TableSettings) -> Self {
        Self {
            seen: Mutex::default(),
            settings,
            metrics: Arc::new(RuleMetrics::new(false)),
        }
    }

    /// The unit of an override, checked (the error is the request's fault).
    pub fn unit(unit: i32) -> Result<Unit, String> {
        Unit::try_from(unit)
            .ok()
            .filter(|u| unit_seconds(*u).is_some())
            .ok_or_else(|| format!("limit override unit {unit} is not a known unit (SECOND…YEAR)"))
    }

    /// The policy with a rule `name` for `requests_per_unit` per `window_s`
    /// seconds, added (a reload keeping the others' state) if new.
    fn policy(
        &self,
        name: &str,
        requests_per_unit: u32,
        window_s: u64,
    ) -> Result<Arc<Policy>, String> {
        let mut seen = self.seen.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(p) = seen
            .policy
            .as_ref()
            .filter(|_| seen.rules.iter().any(|(n, _)| n == name))
        {
            return Ok(p.clone());
        }
        if seen.rules.len() >= MAX_OVERRIDES {
            return Err(format!(
                "more than {MAX_OVERRIDES} distinct limit overrides"
            ));
        }
        let rule = RuleDef::builder(name)
            .matching(RULE, name)
            .key(["d"])
            .limit(format!("{requests_per_unit}/{window_s}s"))
            .algorithm(crate::yaml_domain::DEFAULT_ALGORITHM)
            .capacity(self.settings.keys_per_limit as u64);
        let rules = seen
            .rules
            .iter()
            .map(|(_, r)| r.clone())
            .chain([rule.clone()]);
        let built = PolicyDef::builder()
            .rules(rules)
            .build()
            .and_then(|def| match &seen.policy {
                Some(p) => p.reload_from_def(def).map(|_| p.clone()),
                None => Policy::builder()
                    .pool(self.settings.pool.clone())
                    .from_def(def)
                    .map(Arc::new),
            });
        let policy = built.map_err(|e| format!("limit override {name}: {e}"))?;
        seen.rules.push((name.to_owned(), rule));
        seen.policy = Some(policy.clone());
        Ok(policy)
    }

    /// Decides one descriptor of `domain` under its override, `limit` =
    /// (requests per unit, unit).
    pub fn decide(
        &self,
        domain: &str,
        entries: &[Entry],
        limit: (u32, Unit),
        hits: u64,
        now_ns: u64,
        headers: bool,
    ) -> Result<Outcome<'static>, String> {
        let (requests_per_unit, unit) = limit;
        let window_s = unit_seconds(unit).ok_or("unknown unit")?;
        let name = format!("{requests_per_unit}/{window_s}s");
        let policy = match requests_per_unit {
            0 => None,
            _ => Some(self.policy(&name, requests_per_unit, window_s)?),
        };
        // The counter is the descriptor's, as upstream keys it: domain, keys, values.
        let key = descriptor_key(domain, entries, '\u{1f}', '\u{1e}');
        let one = OneLimit {
            name: "",
            header_name: "(override)",
            requests_per_unit,
            unit,
            shadow: false,
            metrics: &self.metrics,
        };
        let attrs = [(RULE, name.as_str()), ("d", key.as_str())];
        let mut d = Decision::new();
        Ok(crate::limit::decide(
            one,
            policy.as_deref(),
            &attrs,
            hits,
            now_ns,
            headers,
            String::new,
            &mut d,
        ))
    }
}
