//! One descriptor decided by one limit of `requests_per_unit` per `unit`: the
//! steps a YAML limit and a limit override share (the answer, its counters, its
//! `RateLimit` fields).

use std::borrow::Cow;

use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::rate_limit::Unit;
use sluicegate_policy::{push_sf_string, Attrs, Decision, Policy};

use crate::metrics::{HitResult, RuleMetrics};
use crate::rule_set::{Limited, Outcome};
use crate::yaml::unit_seconds;

/// A limit as the response reports it (`'n`: what the outcome borrows).
pub(crate) struct OneLimit<'n, 'a> {
    /// `current_limit.name`.
    pub name: &'n str,
    /// Its name in the `RateLimit` fields.
    pub header_name: &'a str,
    pub requests_per_unit: u32,
    pub unit: Unit,
    /// Counted, never over.
    pub shadow: bool,
    pub metrics: &'a RuleMetrics,
}

/// Decides one descriptor of `hits` at `now_ns` by `policy`'s one rule matching
/// `attrs` (`None`: `requests_per_unit` is 0, every hit is over, as upstream).
/// `detail` names the descriptor in detailed metrics.
#[allow(clippy::too_many_arguments)] // the steps' inputs, each used once
pub(crate) fn decide<'n, A: Attrs + ?Sized>(
    limit: OneLimit<'n, '_>,
    policy: Option<&Policy>,
    attrs: &A,
    hits: u64,
    now_ns: u64,
    headers: bool,
    detail: impl FnOnce() -> String,
    d: &mut Decision,
) -> Outcome<'n> {
    let window_s = unit_seconds(limit.unit).unwrap_or(1);
    let (allowed, remaining, reset_ns) = match policy {
        None => {
            let window_ns = window_s * 1_000_000_000;
            (false, 0, window_ns - now_ns % window_ns)
        }
        Some(policy) => {
            policy.check_n_at_into(attrs, hits, now_ns, d);
            match d.rules().next() {
                Some(r) => (r.allowed, r.remaining, r.reset_ns()),
                None => return Outcome::NoLimit,
            }
        }
    };
    let result = match (allowed, limit.shadow) {
        (true, _) => HitResult::Allowed,
        (false, false) => HitResult::Denied,
        (false, true) => HitResult::ShadowDenied,
    };
    limit.metrics.record(result, hits, detail);
    let headers = headers.then(|| {
        let mut name = String::new();
        push_sf_string(&mut name, limit.header_name);
        let left = remaining.min(u64::from(u32::MAX));
        (
            format!("{name};q={};w={window_s}", limit.requests_per_unit),
            format!("{name};r={left};t={}", reset_ns.div_ceil(1_000_000_000)),
        )
    });
    Outcome::Limited(Limited {
        name: Cow::Borrowed(limit.name),
        requests_per_unit: limit.requests_per_unit,
        unit: limit.unit,
        ok: allowed || limit.shadow,
        remaining,
        reset_ns,
        headers,
    })
}
