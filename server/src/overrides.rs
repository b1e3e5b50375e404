//! Per-descriptor limit overrides (`RateLimitDescriptor.limit`, which Envoy fills
//! from a route's `limit` action): `requests_per_unit` per `unit` for that one
//! descriptor instead of the configured limit, as envoyproxy/ratelimit applies them
//! (a fixed window, no shadow mode, no name). One fixed-window policy per distinct
//! override, kept across config reloads, at most [`MAX_OVERRIDES`] of them.

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::rate_limit::Unit;
use sluicegate_policy::Policy;

use crate::engine::{Limited, Outcome};
use crate::metrics::{HitResult, RuleMetrics};
use crate::yaml::unit_seconds;
use crate::yaml_rule::descriptor_key;

/// Distinct (requests, unit) overrides the server keeps a table for: each is a
/// table of its own, so a client cannot make the server allocate without bound.
pub const MAX_OVERRIDES: usize = 256;

/// The tables of the overrides seen so far.
#[derive(Debug)]
pub struct Overrides {
    tables: Mutex<HashMap<(u32, Unit), Arc<Policy>>>,
    keys_per_limit: usize,
    /// Hits decided by overrides, all together (series `rule="(override)"`).
    pub metrics: Arc<RuleMetrics>,
}

impl Overrides {
    /// No override seen yet; each table holds `keys_per_limit` descriptors.
    pub fn new(keys_per_limit: usize) -> Self {
        Self {
            tables: Mutex::default(),
            keys_per_limit,
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

    fn table(&self, requests_per_unit: u32, unit: Unit) -> Result<Arc<Policy>, String> {
        let mut tables = self.tables.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(p) = tables.get(&(requests_per_unit, unit)) {
            return Ok(p.clone());
        }
        if tables.len() >= MAX_OVERRIDES {
            return Err(format!(
                "more than {MAX_OVERRIDES} distinct limit overrides"
            ));
        }
        let secs = unit_seconds(unit).ok_or("unknown unit")?;
        let text = format!(
            "[defaults]\ncapacity = {}\n\n[[rule]]\nname = \"override\"\nkey = [\"d\"]\nlimit = \"{requests_per_unit}/{secs}s\"\nalgorithm = \"fixed_window\"\n",
            self.keys_per_limit
        );
        let policy = Arc::new(
            Policy::from_toml(&text)
                .map_err(|e| format!("limit override {requests_per_unit} per {unit:?}: {e}"))?,
        );
        tables.insert((requests_per_unit, unit), policy.clone());
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
        let window_ns = unit_seconds(unit).ok_or("unknown unit")? * 1_000_000_000;
        let (allowed, remaining, reset_ns) = if requests_per_unit == 0 {
            (false, 0, window_ns - now_ns % window_ns)
        } else {
            // The counter is the descriptor's, as upstream keys it: domain, keys, values.
            let key = descriptor_key(domain, entries, '\u{1f}', '\u{1e}');
            let d = self.table(requests_per_unit, unit)?.check_n_at(
                &[("d", key.as_str())],
                hits,
                now_ns,
            );
            let decided = d.rules().next().map(|r| {
                let reset = if r.allowed {
                    r.reset_after_ns
                } else {
                    r.retry_after_ns.max(r.reset_after_ns)
                };
                (r.allowed, r.remaining, reset)
            });
            match decided {
                Some(v) => v,
                None => return Ok(Outcome::NoLimit),
            }
        };
        let result = if allowed {
            HitResult::Allowed
        } else {
            HitResult::Denied
        };
        self.metrics.record(result, hits, String::new);
        let headers = headers.then(|| {
            let window = window_ns / 1_000_000_000;
            (
                format!("\"(override)\";q={requests_per_unit};w={window}"),
                format!(
                    "\"(override)\";r={};t={}",
                    remaining.min(u64::from(u32::MAX)),
                    reset_ns.div_ceil(1_000_000_000)
                ),
            )
        });
        Ok(Outcome::Limited(Limited {
            name: Cow::Borrowed(""),
            requests_per_unit,
            unit,
            ok: allowed,
            remaining,
            reset_ns,
            headers,
        }))
    }
}
