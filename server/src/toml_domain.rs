//! A domain configured with our TOML policy format: the file `<domain>.toml` is a
//! `sluicegate-policy` rule file, and each request descriptor is checked as one
//! request whose attributes are the descriptor's entries (`key` = attribute name).
//! Every matching rule applies, all-or-nothing, shadow rules count but never deny.

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::Arc;

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

/// One TOML-configured domain.
#[derive(Debug)]
pub struct TomlDomain {
    domain: String,
    policy: Arc<Policy>,
    text: String,
    metrics: HashMap<String, Arc<RuleMetrics>>,
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
                    .and_then(|p| p.metrics.get(r.name()).cloned())
                    .unwrap_or_default();
                (r.name().to_owned(), m)
            })
            .collect();
        Ok(TomlDomain {
            domain: domain.to_owned(),
            policy,
            text: text.to_owned(),
            metrics,
        })
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
            if let (Some(result), Some(m)) = (result, self.metrics.get(r.name)) {
                m.record(result, hits, String::new);
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
            .filter_map(|r| {
                let m = self.metrics.get(r.name())?.clone();
                let counts = stats
                    .iter()
                    .find(|s| s.name == r.name())
                    .map(TableCounts::from)
                    .unwrap_or_default();
                Some((
                    format!("{}.{}", self.domain, r.name()),
                    is_shadow(r.mode()),
                    m,
                    counts,
                ))
            })
            .collect()
    }
}
