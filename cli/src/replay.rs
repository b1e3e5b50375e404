//! What a policy would have done to a log: every request checked at its own
//! timestamp, counted per rule and in total.
//!
//! # Time
//! Each line is checked with `check_n_at(attrs, 1, line_time_ns)` on the policy's
//! own limiters, with the line's time in nanoseconds since the Unix epoch (so a
//! one-minute fixed window counts each clock minute). Lines are replayed in file
//! order; a line earlier than one already replayed (logs are written as requests
//! complete, so neighbours can be a second or two apart) is decided as the
//! limiters decide a clock that went back: as if no time had passed since the
//! latest time they saw, never with extra admission. Several files are replayed
//! one after the other through the same limiters: give them oldest first.
//!
//! # Memory
//! The policy's tables (its `capacity` per rule), and per rule a fixed number of
//! counters: [`TOP_KEYS_TRACKED`] denied keys, [`SERIES_BUCKETS`] chart buckets
//! and 64 seconds of per-second counts. Nothing grows with the log.

use sluicegate_policy::{Attrs, Decision, Mode, Policy, RuleDef};

use crate::record::Request;
use crate::tally::{Peaks, Series, TopKeys};

/// Denied keys tracked per rule (counts exact while no more distinct keys are denied).
///
/// ```
/// assert_eq!(sluicegate_cli::replay::TOP_KEYS_TRACKED, 1024);
/// ```
pub const TOP_KEYS_TRACKED: usize = 1024;
/// Chart buckets per rule.
///
/// ```
/// assert_eq!(sluicegate_cli::replay::SERIES_BUCKETS, 1200);
/// ```
pub const SERIES_BUCKETS: usize = 1200;
const NS: u64 = 1_000_000_000;

impl Attrs for Request<'_> {
    fn get(&self, name: &str) -> Option<&str> {
        Request::get(self, name)
    }
}

/// One rule's counts.
///
/// ```
/// let p = sluicegate_policy::Policy::from_toml("[[rule]]\nname = \"g\"\nlimit = \"1/s\"\n")?;
/// let mut r = sluicegate_cli::replay::Replay::new(p);
/// r.check(&sluicegate_cli::record::Request { time_ns: 5, ip: "192.0.2.1".into(), ..Default::default() });
/// let t = &r.rules()[0];
/// assert_eq!((t.def.name(), t.matched, t.allowed, t.denied_by_other), ("g", 1, 1, 0));
/// # Ok::<(), sluicegate_policy::Error>(())
/// ```
#[derive(Clone, Debug)]
pub struct RuleTally {
    /// The rule as written.
    pub def: RuleDef,
    /// Requests the rule matched.
    pub matched: u64,
    /// Matched requests that were admitted (a shadow rule: that it would admit).
    pub allowed: u64,
    /// Requests this enforcing rule denied.
    pub denied: u64,
    /// Requests this shadow rule would have denied.
    pub shadow_denied: u64,
    /// Requests this enforcing rule admitted but another enforcing rule denied
    /// (all-or-nothing: nothing was taken from this rule).
    pub denied_by_other: u64,
    /// The keys it denied most (a shadow rule: would have denied).
    pub top_denied: TopKeys,
    /// Offered and admitted per second over the log.
    pub series: Series,
    /// Per-second peaks.
    pub peaks: Peaks,
}

/// The replay of one policy over any number of logs.
///
/// ```
/// use sluicegate_cli::{record::Request, replay::Replay};
/// let policy = sluicegate_policy::Policy::from_toml(
///     "[[rule]]\nname = \"per-ip\"\nkey = [\"ip\"]\nlimit = \"2/minute\"\nalgorithm = \"fixed_window\"\n")?;
/// let mut replay = Replay::new(policy);
/// for s in [0, 1, 2, 61] {
///     replay.check(&Request { time_ns: s * 1_000_000_000, ip: "192.0.2.1".into(), ..Request::default() });
/// }
/// let rule = &replay.rules()[0];
/// assert_eq!((rule.matched, rule.allowed, rule.denied), (4, 3, 1));
/// assert_eq!(replay.totals(), (3, 1));
/// assert_eq!(rule.top_denied.top(1)[0].0, "192.0.2.1");
/// # Ok::<(), sluicegate_policy::Error>(())
/// ```
pub struct Replay {
    policy: Policy,
    rules: Vec<RuleTally>,
    decision: Decision,
    key: String,
    allowed: u64,
    denied: u64,
    span: Option<(u64, u64)>,
}

impl Replay {
    /// A replay through `policy` (its limiters start full).
    ///
    /// ```
    /// let p = sluicegate_policy::Policy::from_toml("[[rule]]\nname = \"g\"\nlimit = \"1/s\"\n")?;
    /// assert_eq!(sluicegate_cli::replay::Replay::new(p).totals(), (0, 0));
    /// # Ok::<(), sluicegate_policy::Error>(())
    /// ```
    pub fn new(policy: Policy) -> Self {
        let def = policy.definition();
        let rules = def
            .rules()
            .iter()
            .map(|r| RuleTally {
                def: r.clone(),
                matched: 0,
                allowed: 0,
                denied: 0,
                shadow_denied: 0,
                denied_by_other: 0,
                top_denied: TopKeys::new(TOP_KEYS_TRACKED),
                series: Series::new(SERIES_BUCKETS),
                peaks: Peaks::default(),
            })
            .collect();
        Replay {
            policy,
            rules,
            decision: Decision::new(),
            key: String::new(),
            allowed: 0,
            denied: 0,
            span: None,
        }
    }

    /// Checks one request at its own time and counts the outcome.
    ///
    /// ```
    /// let p = sluicegate_policy::Policy::from_toml("[[rule]]\nname = \"g\"\nlimit = \"1/s\"\n")?;
    /// let mut r = sluicegate_cli::replay::Replay::new(p);
    /// r.check(&sluicegate_cli::record::Request { time_ns: 5, ip: "192.0.2.1".into(), ..Default::default() });
    /// r.check(&sluicegate_cli::record::Request { time_ns: 5, ip: "192.0.2.1".into(), ..Default::default() }); // same instant: the second is over 1/s
    /// assert_eq!(r.totals(), (1, 1));
    /// # Ok::<(), sluicegate_policy::Error>(())
    /// ```
    pub fn check(&mut self, req: &Request<'_>) {
        let now = req.time_ns;
        self.span = Some(match self.span {
            None => (now, now),
            Some((a, b)) => (a.min(now), b.max(now)),
        });
        self.policy.check_n_at_into(req, 1, now, &mut self.decision);
        let admitted = self.decision.allowed();
        if admitted {
            self.allowed += 1;
        } else {
            self.denied += 1;
        }
        let sec = now / NS;
        for d in self.decision.rules() {
            // Each item names its rule's index in the policy's (and our) rules.
            let i = d.index;
            if i >= self.rules.len() {
                continue;
            }
            let t = &mut self.rules[i];
            t.matched += 1;
            let passed = match d.mode {
                Mode::Shadow => {
                    if d.allowed {
                        t.allowed += 1;
                    } else {
                        t.shadow_denied += 1;
                        d.write_key_text(req, &mut self.key);
                        t.top_denied.add(&self.key);
                    }
                    d.allowed
                }
                Mode::Enforce => {
                    if !d.allowed {
                        t.denied += 1;
                        d.write_key_text(req, &mut self.key);
                        t.top_denied.add(&self.key);
                    } else if admitted {
                        t.allowed += 1;
                    } else {
                        t.denied_by_other += 1;
                    }
                    d.allowed && admitted
                }
            };
            t.series.add(sec, 1, u64::from(passed));
            t.peaks.add(sec, passed);
        }
    }

    /// Per-rule counts, in file order.
    ///
    /// ```
    /// let p = sluicegate_policy::Policy::from_toml("[[rule]]\nname = \"g\"\nlimit = \"1/s\"\n")?;
    /// assert_eq!(sluicegate_cli::replay::Replay::new(p).rules().len(), 1);
    /// # Ok::<(), sluicegate_policy::Error>(())
    /// ```
    pub fn rules(&self) -> &[RuleTally] {
        &self.rules
    }

    /// (admitted, denied) requests.
    ///
    /// ```
    /// let p = sluicegate_policy::Policy::from_toml("[[rule]]\nname = \"g\"\nlimit = \"1/s\"\n")?;
    /// let mut r = sluicegate_cli::replay::Replay::new(p);
    /// r.check(&sluicegate_cli::record::Request { time_ns: 5, ip: "192.0.2.1".into(), ..Default::default() });
    /// assert_eq!(r.totals(), (1, 0));
    /// # Ok::<(), sluicegate_policy::Error>(())
    /// ```
    pub fn totals(&self) -> (u64, u64) {
        (self.allowed, self.denied)
    }

    /// Earliest and latest line time seen (nanoseconds since the epoch).
    ///
    /// ```
    /// let p = sluicegate_policy::Policy::from_toml("[[rule]]\nname = \"g\"\nlimit = \"1/s\"\n")?;
    /// let mut r = sluicegate_cli::replay::Replay::new(p);
    /// assert_eq!(r.span(), None);
    /// r.check(&sluicegate_cli::record::Request { time_ns: 5, ip: "192.0.2.1".into(), ..Default::default() });
    /// assert_eq!(r.span(), Some((5, 5)));
    /// # Ok::<(), sluicegate_policy::Error>(())
    /// ```
    pub fn span(&self) -> Option<(u64, u64)> {
        self.span
    }
}
