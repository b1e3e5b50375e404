//! A YAML limit as a one-rule policy: its rule file (keyed by the descriptor's
//! values as attributes `e0`, `e1`, …), its carry-over on reload, and its decision.

use std::borrow::Cow;
use std::sync::Arc;

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::rate_limit::Unit;
use sluicegate_policy::{Attrs, Decision, Policy, PolicyDef};

use crate::engine::{Limited, Outcome, TableSettings};
use crate::metrics::{HitResult, RuleMetrics, TableCounts};
use crate::yaml::{unit_seconds, LimitDef, LimitKind};

/// The algorithm YAML limits use unless the extension field names another: the
/// one envoyproxy/ratelimit has, so an existing config behaves the same.
pub const DEFAULT_ALGORITHM: &str = "fixed_window";

/// What decides a YAML limit.
#[derive(Debug)]
enum Limiter {
    Unlimited,
    /// `requests_per_unit: 0`: every hit is over the limit, as upstream.
    Never {
        window_ns: u64,
    },
    /// A one-rule policy (`text` is its rule file, kept to reload it in place).
    Policy {
        policy: Arc<Policy>,
        text: String,
    },
}

/// One limit of a YAML domain, ready to decide.
#[derive(Debug)]
pub struct Rule {
    /// Its definition from the file.
    pub def: LimitDef,
    limiter: Limiter,
    pub(crate) metrics: Arc<RuleMetrics>,
}

/// Two rules are the same rule only if they are one object (one table).
impl PartialEq for Rule {
    fn eq(&self, other: &Self) -> bool {
        std::ptr::eq(self, other)
    }
}

impl Eq for Rule {}

/// A YAML limit's descriptor as attributes `e0`, `e1`, … (the entries' values by
/// position: the keys are fixed by the tree path that led to the limit), so that
/// any descriptor key works, whatever the policy's attribute-name syntax.
struct Positional<'a>(&'a [Entry]);

impl Attrs for Positional<'_> {
    fn get(&self, name: &str) -> Option<&str> {
        let i: usize = name.strip_prefix('e')?.parse().ok()?;
        self.0.get(i).map(|e| e.value.as_str())
    }
}

/// The rule file of a YAML limit: one rule keyed by the descriptor's values.
fn rule_text(
    def: &LimitDef,
    requests_per_unit: u32,
    window_s: u64,
    algorithm: &str,
    settings: TableSettings,
) -> String {
    let key: Vec<String> = (0..def.depth).map(|i| format!("\"e{i}\"")).collect();
    let mode = if def.shadow { "shadow" } else { "enforce" };
    format!(
        "[defaults]\ncapacity = {}\n\n[[rule]]\nname = \"limit\"\nkey = [{}]\nlimit = \"{requests_per_unit}/{window_s}s\"\nalgorithm = {}\nmode = \"{mode}\"\n",
        settings.keys_per_limit,
        key.join(", "),
        toml_string(algorithm),
    )
}

/// A TOML basic string.
fn toml_string(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if c.is_control() => out.push_str(&format!("\\u{:04X}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// The rule file of a YAML limit (`None` for limits that need no limiter), checked.
pub(crate) fn plan_text(def: &LimitDef, settings: TableSettings) -> Result<Option<String>, String> {
    let LimitKind::Rate {
        requests_per_unit,
        unit,
        algorithm,
    } = &def.kind
    else {
        return Ok(None);
    };
    if *requests_per_unit == 0 {
        return Ok(None);
    }
    let window_s = unit_seconds(*unit).ok_or("unknown unit")?;
    let text = rule_text(
        def,
        *requests_per_unit,
        window_s,
        algorithm.as_deref().unwrap_or(DEFAULT_ALGORITHM),
        settings,
    );
    PolicyDef::parse(&text, Some("rate_limit")).map_err(|e| policy_error(&e))?;
    Ok(Some(text))
}

/// The policy's diagnostics without the generated file's positions (they point
/// into text the user never wrote).
fn policy_error(e: &sluicegate_policy::Error) -> String {
    let msgs: Vec<String> = e.diagnostics().iter().map(|d| d.message.clone()).collect();
    if msgs.is_empty() {
        e.to_string()
    } else {
        msgs.join("; ")
    }
}

pub(crate) fn build_rule(
    def: &LimitDef,
    text: Option<String>,
    prev: Option<&Rule>,
) -> Result<Rule, String> {
    let metrics = match prev {
        Some(p) if p.def.detailed_metric == def.detailed_metric => p.metrics.clone(),
        _ => Arc::new(RuleMetrics::new(def.detailed_metric)),
    };
    let limiter = match (&def.kind, text) {
        (LimitKind::Unlimited, _) => Limiter::Unlimited,
        (LimitKind::Rate { unit, .. }, None) => Limiter::Never {
            window_ns: unit_seconds(*unit).unwrap_or(1) * 1_000_000_000,
        },
        (LimitKind::Rate { .. }, Some(text)) => match prev.map(|p| &p.limiter) {
            Some(Limiter::Policy { policy, text: old }) => {
                if *old != text {
                    policy
                        .reload_from_toml(&text)
                        .map_err(|e| policy_error(&e))?;
                }
                Limiter::Policy {
                    policy: policy.clone(),
                    text,
                }
            }
            _ => Limiter::Policy {
                policy: Arc::new(Policy::from_toml(&text).map_err(|e| policy_error(&e))?),
                text,
            },
        },
    };
    Ok(Rule {
        def: def.clone(),
        limiter,
        metrics,
    })
}

impl Rule {
    pub(crate) fn decide(
        &self,
        entries: &[Entry],
        hits: u64,
        now_ns: u64,
        headers: bool,
        d: &mut Decision,
    ) -> Outcome<'_> {
        let (allowed, remaining, reset_ns) = match &self.limiter {
            Limiter::Unlimited => return Outcome::Unlimited,
            Limiter::Never { window_ns } => (false, 0, window_ns - now_ns % window_ns),
            Limiter::Policy { policy, .. } => {
                policy.check_n_at_into(&Positional(entries), hits, now_ns, d);
                match d.rules().next() {
                    Some(r) => (
                        r.allowed,
                        r.remaining,
                        if r.allowed {
                            r.reset_after_ns
                        } else {
                            r.retry_after_ns.max(r.reset_after_ns)
                        },
                    ),
                    None => return Outcome::NoLimit,
                }
            }
        };
        let result = match (allowed, self.def.shadow) {
            (true, _) => HitResult::Allowed,
            (false, false) => HitResult::Denied,
            (false, true) => HitResult::ShadowDenied,
        };
        self.metrics
            .record(result, hits, || detailed_key(&self.def.domain, entries));
        let (requests_per_unit, unit) = match &self.def.kind {
            LimitKind::Rate {
                requests_per_unit,
                unit,
                ..
            } => (*requests_per_unit, *unit),
            LimitKind::Unlimited => (0, Unit::Unknown),
        };
        let headers = headers.then(|| {
            let name = crate::service::sf_string(if self.def.name.is_empty() {
                &self.def.full_key
            } else {
                &self.def.name
            });
            let window = unit_seconds(unit).unwrap_or(0);
            let left = remaining.min(u64::from(u32::MAX));
            (
                format!("{name};q={requests_per_unit};w={window}"),
                format!("{name};r={left};t={}", reset_ns.div_ceil(1_000_000_000)),
            )
        });
        Outcome::Limited(Limited {
            name: Cow::Borrowed(&self.def.name),
            requests_per_unit,
            unit,
            ok: allowed || self.def.shadow,
            remaining,
            reset_ns,
            headers,
        })
    }

    /// The policy's counters of this limit's table and backend.
    pub(crate) fn table_counts(&self, now_ns: u64) -> TableCounts {
        match &self.limiter {
            Limiter::Policy { policy, .. } => policy
                .metrics_at(now_ns)
                .iter()
                .map(TableCounts::from)
                .fold(TableCounts::default(), TableCounts::add),
            Limiter::Unlimited | Limiter::Never { .. } => TableCounts::default(),
        }
    }

    /// This rule's counters.
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
