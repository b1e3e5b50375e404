//! Prometheus counters: per limit (rule) hits allowed, denied and shadow-denied,
//! decision latency, malformed requests and config reloads, rendered as the text
//! exposition format. Lock-free atomics on the decision path; the only lock is the
//! bounded per-value map of a `detailed_metric` limit.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

/// Distinct descriptor values a `detailed_metric` limit reports before the rest are
/// folded into one `value="(other)"` series: Prometheus must not grow without bound.
pub const DETAILED_SERIES_MAX: usize = 1000;

/// Hits (in `hits_addend` units, as envoyproxy/ratelimit counts) of one limit.
#[derive(Debug, Default)]
pub struct Hits {
    allowed: AtomicU64,
    denied: AtomicU64,
    shadow_denied: AtomicU64,
}

/// What happened to the hits of one descriptor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HitResult {
    /// Within the limit.
    Allowed,
    /// Over the limit, answered `OVER_LIMIT`.
    Denied,
    /// Over the limit of a shadow-mode limit, answered `OK`.
    ShadowDenied,
}

impl Hits {
    fn add(&self, result: HitResult, hits: u64) {
        let cell = match result {
            HitResult::Allowed => &self.allowed,
            HitResult::Denied => &self.denied,
            HitResult::ShadowDenied => &self.shadow_denied,
        };
        // Relaxed: independent monotonic counters, read only for exposition.
        cell.fetch_add(hits, Ordering::Relaxed);
    }

    fn values(&self) -> [(&'static str, u64); 3] {
        [
            ("allowed", self.allowed.load(Ordering::Relaxed)),
            ("denied", self.denied.load(Ordering::Relaxed)),
            ("shadow_denied", self.shadow_denied.load(Ordering::Relaxed)),
        ]
    }
}

/// The counters of one limit; kept across reloads while the limit's key is unchanged.
#[derive(Debug, Default)]
pub struct RuleMetrics {
    hits: Hits,
    detailed: Option<Mutex<HashMap<String, Hits>>>,
    other: Hits,
}

impl RuleMetrics {
    /// Counters for a limit; `detailed` adds one series per descriptor value.
    pub fn new(detailed: bool) -> Self {
        Self {
            detailed: detailed.then(Default::default),
            ..Default::default()
        }
    }

    /// Adds `hits`; `detail` builds the detailed series' label only when needed.
    pub fn record(&self, result: HitResult, hits: u64, detail: impl FnOnce() -> String) {
        self.hits.add(result, hits);
        if let Some(map) = &self.detailed {
            let label = detail();
            // A poisoned lock only means another thread panicked mid-insert; the
            // counters are still valid.
            let mut map = map.lock().unwrap_or_else(|p| p.into_inner());
            if let Some(h) = map.get(&label) {
                h.add(result, hits);
            } else if map.len() < DETAILED_SERIES_MAX {
                let h = Hits::default();
                h.add(result, hits);
                map.insert(label, h);
            } else {
                self.other.add(result, hits);
            }
        }
    }

    /// The totals: allowed, denied, shadow-denied.
    pub fn totals(&self) -> [u64; 3] {
        self.hits.values().map(|(_, n)| n)
    }

    /// The total of one result.
    #[cfg(test)]
    pub fn count(&self, result: HitResult) -> u64 {
        let [a, d, s] = self.hits.values();
        match result {
            HitResult::Allowed => a.1,
            HitResult::Denied => d.1,
            HitResult::ShadowDenied => s.1,
        }
    }
}

/// Upper bounds (seconds) of the latency histogram's buckets.
const BUCKETS: [f64; 12] = [
    0.000_025, 0.000_05, 0.000_1, 0.000_25, 0.000_5, 0.001, 0.002_5, 0.005, 0.01, 0.025, 0.1, 1.0,
];

/// Server-wide counters.
#[derive(Debug, Default)]
pub struct ServerMetrics {
    latency: [AtomicU64; BUCKETS.len() + 1],
    latency_sum_ns: AtomicU64,
    malformed: Mutex<HashMap<&'static str, u64>>,
    reloads_ok: AtomicU64,
    reloads_failed: AtomicU64,
    no_limit: AtomicU64,
    unknown_domain: AtomicU64,
}

impl ServerMetrics {
    /// Records one `ShouldRateLimit` call's handling time.
    pub fn observe_latency(&self, d: Duration) {
        let secs = d.as_secs_f64();
        let i = BUCKETS
            .iter()
            .position(|b| secs <= *b)
            .unwrap_or(BUCKETS.len());
        self.latency[i].fetch_add(1, Ordering::Relaxed);
        let ns = u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        self.latency_sum_ns.fetch_add(ns, Ordering::Relaxed);
    }

    /// Counts a request refused as malformed, by reason.
    pub fn malformed(&self, reason: &'static str) {
        *self
            .malformed
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry(reason)
            .or_default() += 1;
    }

    /// Counts a config reload attempt.
    pub fn reload(&self, ok: bool) {
        count_either(ok, &self.reloads_ok, &self.reloads_failed);
    }

    /// Counts a descriptor no limit applied to (`unknown`: its domain is not configured).
    pub fn no_limit(&self, unknown_domain: bool) {
        count_either(unknown_domain, &self.unknown_domain, &self.no_limit);
    }

    /// Server-wide series in Prometheus text format.
    pub fn render(&self, out: &mut String) {
        let _ = writeln!(
            out,
            "# HELP sluicegate_server_decision_seconds Time to answer one ShouldRateLimit call."
        );
        let _ = writeln!(out, "# TYPE sluicegate_server_decision_seconds histogram");
        let mut cumulative = 0;
        for (i, c) in self.latency.iter().enumerate() {
            cumulative += c.load(Ordering::Relaxed);
            let le = BUCKETS
                .get(i)
                .map_or_else(|| "+Inf".to_owned(), |b| b.to_string());
            let _ = writeln!(
                out,
                "sluicegate_server_decision_seconds_bucket{{le=\"{le}\"}} {cumulative}"
            );
        }
        let sum = self.latency_sum_ns.load(Ordering::Relaxed) as f64 / 1e9;
        let _ = writeln!(out, "sluicegate_server_decision_seconds_sum {sum}");
        let _ = writeln!(out, "sluicegate_server_decision_seconds_count {cumulative}");

        let _ = writeln!(out, "# HELP sluicegate_server_malformed_requests_total Requests refused with INVALID_ARGUMENT, by reason.");
        let _ = writeln!(
            out,
            "# TYPE sluicegate_server_malformed_requests_total counter"
        );
        let mut reasons: Vec<_> = self
            .malformed
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
            .into_iter()
            .collect();
        reasons.sort();
        for (reason, n) in reasons {
            let _ = writeln!(
                out,
                "sluicegate_server_malformed_requests_total{{reason=\"{reason}\"}} {n}"
            );
        }
        let _ = writeln!(out, "# HELP sluicegate_server_config_reloads_total Config loads after the first, by result.");
        let _ = writeln!(out, "# TYPE sluicegate_server_config_reloads_total counter");
        for (r, c) in [("ok", &self.reloads_ok), ("error", &self.reloads_failed)] {
            let _ = writeln!(
                out,
                "sluicegate_server_config_reloads_total{{result=\"{r}\"}} {}",
                c.load(Ordering::Relaxed)
            );
        }
        let _ = writeln!(out, "# HELP sluicegate_server_descriptors_without_limit_total Descriptors answered OK because no limit applies.");
        let _ = writeln!(
            out,
            "# TYPE sluicegate_server_descriptors_without_limit_total counter"
        );
        for (r, c) in [
            ("no_match", &self.no_limit),
            ("unknown_domain", &self.unknown_domain),
        ] {
            let _ = writeln!(
                out,
                "sluicegate_server_descriptors_without_limit_total{{reason=\"{r}\"}} {}",
                c.load(Ordering::Relaxed)
            );
        }
    }
}

/// The rule store's series: whether it answers, polls that failed, domains served.
pub fn render_store(out: &mut String, up: bool, errors: u64, domains: usize) {
    let _ = writeln!(out, "# HELP sluicegate_server_store_up 1 while the rule store (--store) answers this server's polls; 0 while it cannot be reached (the rules in force are kept, /healthz says degraded).");
    let _ = writeln!(out, "# TYPE sluicegate_server_store_up gauge");
    let _ = writeln!(out, "sluicegate_server_store_up {}", u8::from(up));
    let _ = writeln!(out, "# HELP sluicegate_server_store_errors_total Polls of the rule store's domain list that could not reach it.");
    let _ = writeln!(out, "# TYPE sluicegate_server_store_errors_total counter");
    let _ = writeln!(out, "sluicegate_server_store_errors_total {errors}");
    let _ = writeln!(
        out,
        "# HELP sluicegate_server_store_domains Domains of the rule store this server serves."
    );
    let _ = writeln!(out, "# TYPE sluicegate_server_store_domains gauge");
    let _ = writeln!(out, "sluicegate_server_store_domains {domains}");
}

/// Counts one event in `yes` when `flag` holds, else in `no`.
fn count_either(flag: bool, yes: &AtomicU64, no: &AtomicU64) {
    let c = if flag { yes } else { no };
    c.fetch_add(1, Ordering::Relaxed);
}

/// Escapes a label value (backslash, quote, newline) for the text format.
pub fn escape_label(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// The header of the per-rule hit counter family.
pub fn render_rule_header(out: &mut String) {
    let _ = writeln!(out, "# HELP sluicegate_server_rule_hits_total Hits (hits_addend units) per limit and result; shadow_denied were over a shadow-mode limit and answered OK.");
    let _ = writeln!(out, "# TYPE sluicegate_server_rule_hits_total counter");
}

/// One limit's series (`rule` is its full key, e.g. `edge.path_/login`).
pub fn render_rule(out: &mut String, rule: &str, shadow: bool, m: &RuleMetrics) {
    let rule = escape_label(rule);
    for (result, n) in m.hits.values() {
        let _ = writeln!(out, "sluicegate_server_rule_hits_total{{rule=\"{rule}\",shadow=\"{shadow}\",result=\"{result}\"}} {n}");
    }
    if let Some(map) = &m.detailed {
        let map = map.lock().unwrap_or_else(|p| p.into_inner());
        let mut keys: Vec<&String> = map.keys().collect();
        keys.sort();
        let series = keys
            .into_iter()
            .filter_map(|k| Some((escape_label(k), map.get(k)?)));
        for (value, h) in series.chain(std::iter::once(("(other)".to_owned(), &m.other))) {
            for (result, n) in h.values() {
                let _ = writeln!(out, "sluicegate_server_rule_hits_total{{rule=\"{rule}\",shadow=\"{shadow}\",value=\"{value}\",result=\"{result}\"}} {n}");
            }
        }
    }
}

/// What the policy layer counts for one limit besides its decisions.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TableCounts {
    /// Values evicted from a full table (each started afresh).
    pub evicted: u64,
    /// New values denied because the table was full of live entries.
    pub rejected: u64,
    /// Decisions the rule's `on_error` made because its shared backend failed.
    pub backend_errors: u64,
}

impl From<&sluicegate_policy::RuleStats> for TableCounts {
    fn from(s: &sluicegate_policy::RuleStats) -> Self {
        Self {
            evicted: s.evictions,
            rejected: s.rejected_keys,
            backend_errors: s.backend_errors,
        }
    }
}

/// Each limit's [`TableCounts`].
pub fn render_table_counts<'a>(
    out: &mut String,
    rules: impl Iterator<Item = (&'a str, TableCounts)> + Clone,
) {
    let _ = writeln!(out, "# HELP sluicegate_server_rule_keys_dropped_total Descriptor values a full limit table evicted or rejected.");
    let _ = writeln!(
        out,
        "# TYPE sluicegate_server_rule_keys_dropped_total counter"
    );
    for (rule, c) in rules.clone() {
        let rule = escape_label(rule);
        let _ = writeln!(
            out,
            "sluicegate_server_rule_keys_dropped_total{{rule=\"{rule}\",reason=\"evicted\"}} {}",
            c.evicted
        );
        let _ = writeln!(
            out,
            "sluicegate_server_rule_keys_dropped_total{{rule=\"{rule}\",reason=\"rejected\"}} {}",
            c.rejected
        );
    }
    let _ = writeln!(out, "# HELP sluicegate_server_rule_backend_errors_total Decisions a rule's on_error made because its shared backend failed.");
    let _ = writeln!(
        out,
        "# TYPE sluicegate_server_rule_backend_errors_total counter"
    );
    for (rule, c) in rules {
        let _ = writeln!(
            out,
            "sluicegate_server_rule_backend_errors_total{{rule=\"{}\"}} {}",
            escape_label(rule),
            c.backend_errors
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn detailed_series_are_bounded() {
        let m = RuleMetrics::new(true);
        for i in 0..DETAILED_SERIES_MAX + 5 {
            m.record(HitResult::Allowed, 1, || format!("v{i}"));
        }
        m.record(HitResult::Denied, 2, || "v0".into());
        let mut out = String::new();
        render_rule(&mut out, "d.k", false, &m);
        assert!(
            out.contains("rule=\"d.k\",shadow=\"false\",value=\"v0\",result=\"denied\"} 2"),
            "{out}"
        );
        assert!(
            out.contains("value=\"(other)\",result=\"allowed\"} 5"),
            "{out}"
        );
        assert_eq!(m.count(HitResult::Allowed), DETAILED_SERIES_MAX as u64 + 5);
    }

    #[test]
    fn histogram_is_cumulative_and_labels_escaped() {
        let s = ServerMetrics::default();
        s.observe_latency(Duration::from_micros(10));
        s.observe_latency(Duration::from_millis(3));
        s.observe_latency(Duration::from_secs(5));
        let mut out = String::new();
        s.render(&mut out);
        assert!(
            out.contains("sluicegate_server_decision_seconds_bucket{le=\"0.000025\"} 1"),
            "{out}"
        );
        assert!(
            out.contains("sluicegate_server_decision_seconds_bucket{le=\"0.005\"} 2"),
            "{out}"
        );
        assert!(
            out.contains("sluicegate_server_decision_seconds_bucket{le=\"+Inf\"} 3"),
            "{out}"
        );
        assert_eq!(escape_label("a\"b\\c\n"), "a\\\"b\\\\c\\n");
    }
}
