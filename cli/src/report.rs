//! The replay's report: one JSON object (`--json`) or a text summary.
//!
//! # JSON schema
//! ```text
//! {
//!   "lines": u64,          // lines read from every input
//!   "parsed": u64,         // lines that became requests
//!   "skipped": u64,        // empty, too long or malformed lines (lines = parsed + skipped)
//!   "allowed": u64,        // requests every enforcing rule admitted (parsed = allowed + denied)
//!   "denied": u64,         // requests an enforcing rule denied
//!   "start": string|null,  // earliest line time, RFC 3339 UTC
//!   "end": string|null,    // latest line time
//!   "malformed": [{"source", "line", "reason", "text"}],   // the first 10 skipped lines
//!   "rules": [{            // in file order
//!     "name": string, "mode": "enforce"|"shadow", "limit": string, "algorithm": string,
//!     "backend": string, "key": [string],
//!     "matched": u64,         // requests the rule matched
//!     "allowed": u64,         // matched and admitted (shadow: it would have admitted)
//!     "denied": u64,          // this enforcing rule denied
//!     "shadow_denied": u64,   // this shadow rule would have denied
//!     "denied_by_other": u64, // this rule admitted, another denied (nothing taken here)
//!     "peak_offered_per_s": u64, "peak_admitted_per_s": u64,
//!     "top_denied_keys": [{"key": string, "denied": u64, "overcount": u64}],
//!     "top_denied_exact": bool  // false once more distinct keys were denied than tracked
//!   }]
//! }
//! ```
//! For an enforcing rule `matched = allowed + denied + denied_by_other`; for a
//! shadow rule `matched = allowed + shadow_denied`. A key is the rule's key
//! attribute values joined by `|` (empty for a rule without key attributes).

use std::fmt::Write as _;

use serde::Serialize;

use crate::input::{LineStats, Sample};
use crate::replay::Replay;
use crate::time::format_utc;

/// How many denied keys a report lists per rule.
///
/// ```
/// assert_eq!(sluicegate_cli::report::TOP_KEYS, 10);
/// ```
pub const TOP_KEYS: usize = 10;
/// How many skipped lines the text report shows.
const TEXT_SAMPLES: usize = 3;

/// The whole report.
///
/// ```
/// let p = sluicegate_policy::Policy::from_toml("[[rule]]\nname = \"g\"\nlimit = \"1/s\"\n")?;
/// let mut r = sluicegate_cli::replay::Replay::new(p);
/// r.check(&sluicegate_cli::record::Request { time_ns: 5, ip: "192.0.2.1".into(), ..Default::default() });
/// r.check(&sluicegate_cli::record::Request { time_ns: 5, ip: "192.0.2.1".into(), ..Default::default() });
/// let report = sluicegate_cli::report::Report::new(&r, &Default::default());
/// assert_eq!((report.allowed, report.denied), (1, 1));
/// assert!(serde_json::to_string(&report).unwrap().starts_with(r#"{"lines":0,"parsed":0,"#));
/// # Ok::<(), sluicegate_policy::Error>(())
/// ```
#[derive(Clone, Debug, Serialize)]
pub struct Report {
    /// Lines read.
    pub lines: u64,
    /// Lines parsed.
    pub parsed: u64,
    /// Lines skipped.
    pub skipped: u64,
    /// Requests admitted.
    pub allowed: u64,
    /// Requests denied.
    pub denied: u64,
    /// Earliest line time.
    pub start: Option<String>,
    /// Latest line time.
    pub end: Option<String>,
    /// Samples of skipped lines.
    pub malformed: Vec<Sample>,
    /// Per rule.
    pub rules: Vec<RuleReport>,
}

/// One rule's part of the report.
///
/// ```
/// let p = sluicegate_policy::Policy::from_toml("[[rule]]\nname = \"g\"\nlimit = \"1/s\"\n")?;
/// let mut r = sluicegate_cli::replay::Replay::new(p);
/// r.check(&sluicegate_cli::record::Request { time_ns: 5, ip: "192.0.2.1".into(), ..Default::default() });
/// r.check(&sluicegate_cli::record::Request { time_ns: 5, ip: "192.0.2.1".into(), ..Default::default() });
/// let report = sluicegate_cli::report::Report::new(&r, &Default::default());
/// let rule = &report.rules[0];
/// assert_eq!((rule.name.as_str(), rule.matched, rule.denied, rule.peak_offered_per_s), ("g", 2, 1, 2));
/// # Ok::<(), sluicegate_policy::Error>(())
/// ```
#[derive(Clone, Debug, Serialize)]
pub struct RuleReport {
    /// Name.
    pub name: String,
    /// `enforce` or `shadow`.
    pub mode: String,
    /// The rate string.
    pub limit: String,
    /// The algorithm's name.
    pub algorithm: String,
    /// The backend named in the file.
    pub backend: String,
    /// Key attributes.
    pub key: Vec<String>,
    /// Requests matched.
    pub matched: u64,
    /// Matched and admitted.
    pub allowed: u64,
    /// Denied by this rule.
    pub denied: u64,
    /// Would have been denied by this shadow rule.
    pub shadow_denied: u64,
    /// Admitted by this rule, denied by another.
    pub denied_by_other: u64,
    /// Highest matched requests in one second.
    pub peak_offered_per_s: u64,
    /// Highest admitted requests in one second.
    pub peak_admitted_per_s: u64,
    /// The most denied keys.
    pub top_denied_keys: Vec<KeyCount>,
    /// Whether those counts are exact.
    pub top_denied_exact: bool,
}

/// A denied key and how often.
///
/// ```
/// let p = sluicegate_policy::Policy::from_toml("[[rule]]\nname = \"g\"\nlimit = \"1/s\"\n")?;
/// let mut r = sluicegate_cli::replay::Replay::new(p);
/// r.check(&sluicegate_cli::record::Request { time_ns: 5, ip: "192.0.2.1".into(), ..Default::default() });
/// r.check(&sluicegate_cli::record::Request { time_ns: 5, ip: "192.0.2.1".into(), ..Default::default() });
/// let report = sluicegate_cli::report::Report::new(&r, &Default::default());
/// let k = &report.rules[0].top_denied_keys[0];
/// assert_eq!((k.key.as_str(), k.denied, k.overcount), ("", 1, 0)); // a rule without key attributes
/// # Ok::<(), sluicegate_policy::Error>(())
/// ```
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct KeyCount {
    /// The key.
    pub key: String,
    /// Denials (an upper bound when `overcount > 0`).
    pub denied: u64,
    /// How much `denied` may exceed the true count.
    pub overcount: u64,
}

impl Report {
    /// The report of `replay` over lines counted in `lines`.
    ///
    /// ```
    /// use sluicegate_cli::{input::LineStats, replay::Replay, report::Report};
    /// let p = sluicegate_policy::Policy::from_toml("[[rule]]\nname = \"g\"\nlimit = \"1/s\"\n")?;
    /// let r = Report::new(&Replay::new(p), &LineStats::default());
    /// assert_eq!((r.lines, r.rules.len(), r.rules[0].mode.as_str()), (0, 1, "enforce"));
    /// # Ok::<(), sluicegate_policy::Error>(())
    /// ```
    pub fn new(replay: &Replay, lines: &LineStats) -> Report {
        let (allowed, denied) = replay.totals();
        let span = replay.span();
        Report {
            lines: lines.lines,
            parsed: lines.parsed,
            skipped: lines.skipped,
            allowed,
            denied,
            start: span.map(|s| format_utc(s.0)),
            end: span.map(|s| format_utc(s.1)),
            malformed: lines.samples.clone(),
            rules: replay
                .rules()
                .iter()
                .map(|t| {
                    let (po, pa) = t.peaks.finish();
                    RuleReport {
                        name: t.def.name().to_owned(),
                        mode: t.def.mode().to_string(),
                        limit: t.def.limit().to_owned(),
                        algorithm: t.def.spec().kind().name().to_owned(),
                        backend: t.def.backend().to_string(),
                        key: t.def.key().iter().map(|k| k.as_str().to_owned()).collect(),
                        matched: t.matched,
                        allowed: t.allowed,
                        denied: t.denied,
                        shadow_denied: t.shadow_denied,
                        denied_by_other: t.denied_by_other,
                        peak_offered_per_s: po,
                        peak_admitted_per_s: pa,
                        top_denied_keys: t
                            .top_denied
                            .top(TOP_KEYS)
                            .into_iter()
                            .map(|(k, c, e)| KeyCount {
                                key: k.to_owned(),
                                denied: c,
                                overcount: e,
                            })
                            .collect(),
                        top_denied_exact: t.top_denied.exact(),
                    }
                })
                .collect(),
        }
    }

    /// The report as a human reads it.
    ///
    /// ```
    /// use sluicegate_cli::{input::LineStats, replay::Replay, report::Report};
    /// let p = sluicegate_policy::Policy::from_toml("[[rule]]\nname = \"g\"\nlimit = \"1/s\"\n")?;
    /// let text = Report::new(&Replay::new(p), &LineStats::default()).to_text();
    /// assert!(text.contains("rule g (enforce, 1/s"));
    /// # Ok::<(), sluicegate_policy::Error>(())
    /// ```
    pub fn to_text(&self) -> String {
        let mut s = String::new();
        let pct = |a: u64, b: u64| {
            if b == 0 {
                0.0
            } else {
                a as f64 * 100.0 / b as f64
            }
        };
        let _ = writeln!(
            s,
            "{} lines: {} parsed, {} skipped; {} allowed, {} denied ({:.2} %)",
            self.lines,
            self.parsed,
            self.skipped,
            self.allowed,
            self.denied,
            pct(self.denied, self.parsed)
        );
        if let (Some(a), Some(b)) = (&self.start, &self.end) {
            let _ = writeln!(s, "time span: {a} .. {b}");
        }
        for m in self.malformed.iter().take(TEXT_SAMPLES) {
            let _ = writeln!(
                s,
                "  skipped {}:{}: {}: {}",
                m.source,
                m.line,
                m.reason,
                m.text.escape_debug()
            );
        }
        if self.skipped > TEXT_SAMPLES as u64 {
            let _ = writeln!(s, "  ... (--json lists the first {})", self.malformed.len());
        }
        for r in &self.rules {
            let key = if r.key.is_empty() {
                "one limiter".to_owned()
            } else {
                format!("per {}", r.key.join("+"))
            };
            let _ = writeln!(
                s,
                "\nrule {} ({}, {}, {}, {key}, {})",
                r.name, r.mode, r.limit, r.algorithm, r.backend
            );
            let _ = write!(
                s,
                "  matched {:>10}  allowed {:>10}  ",
                r.matched, r.allowed
            );
            if r.mode == "shadow" {
                let _ = writeln!(
                    s,
                    "would deny {:>8} ({:.2} %)",
                    r.shadow_denied,
                    pct(r.shadow_denied, r.matched)
                );
            } else {
                let _ = writeln!(
                    s,
                    "denied {:>8} ({:.2} %)  denied by other rules {}",
                    r.denied,
                    pct(r.denied, r.matched),
                    r.denied_by_other
                );
            }
            let _ = writeln!(
                s,
                "  peak per second: offered {}, admitted {}",
                r.peak_offered_per_s, r.peak_admitted_per_s
            );
            if !r.top_denied_keys.is_empty() {
                let label = if r.mode == "shadow" {
                    "would deny"
                } else {
                    "denied"
                };
                let _ = writeln!(
                    s,
                    "  top {label} keys{}:",
                    if r.top_denied_exact {
                        ""
                    } else {
                        " (approximate)"
                    }
                );
                for k in &r.top_denied_keys {
                    let name = if k.key.is_empty() { "(all)" } else { &k.key };
                    let _ = writeln!(s, "    {:>8}  {name}", k.denied);
                }
            }
        }
        s
    }
}
