//! What a policy reports of its counters ([`crate::counters`]): a snapshot per
//! rule, and the Prometheus text.

use std::fmt::{self, Write as _};
use std::sync::atomic::Ordering;

use crate::counters::ReloadStats;

/// A snapshot of one rule's counters, as [`crate::Policy::metrics_at`] returns them.
///
/// ```
/// use sluicegate_policy::Policy;
/// let p = Policy::from_toml("[[rule]]\nname = \"a\"\nlimit = \"1/minute\"\nkey = [\"ip\"]\n")?;
/// p.check_n_at(&[("ip", "192.0.2.1")], 1, 0);
/// p.check_n_at(&[("ip", "192.0.2.1")], 1, 0);
/// let m = &p.metrics_at(0)[0];
/// assert_eq!((m.name.as_str(), m.allowed, m.denied, m.keys), ("a", 1, 1, 1));
/// # Ok::<(), sluicegate_policy::Error>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RuleStats {
    /// The rule's name.
    pub name: String,
    /// Admitted requests the rule matched (shadow rules: requests it would admit).
    pub allowed: u64,
    /// Requests this enforcing rule denied.
    pub denied: u64,
    /// Requests this shadow rule would have denied (none were).
    pub shadow_denied: u64,
    /// Checks the shared backend failed, decided by `on_error`.
    pub backend_errors: u64,
    /// Keys holding state in the rule's local table.
    pub keys: u64,
    /// Live entries replaced to make room for new keys.
    pub evictions: u64,
    /// New keys denied because the table had no room.
    pub rejected_keys: u64,
}

/// A per-rule family: name, type, help, the value.
type Family = (
    &'static str,
    &'static str,
    &'static str,
    fn(&RuleStats) -> u64,
);

/// Writes the Prometheus text exposition (format 0.0.4).
pub(crate) fn write_text(out: &mut String, rules: &[RuleStats], reload: &ReloadStats) {
    let mut family = |name: &str, kind: &str, help: &str, rows: &mut dyn FnMut(&mut String)| {
        let _ = writeln!(out, "# HELP {name} {help}");
        let _ = writeln!(out, "# TYPE {name} {kind}");
        rows(out);
    };
    let per_rule = |out: &mut String, name: &str, extra: &str, v: &dyn Fn(&RuleStats) -> u64| {
        for r in rules {
            let _ = writeln!(
                out,
                "{name}{{rule=\"{}\"{extra}}} {}",
                Escaped(&r.name),
                v(r)
            );
        }
    };
    let req = "sluicegate_policy_requests_total";
    family(
        req,
        "counter",
        "Requests a rule matched, by what the rule answered.",
        &mut |o| {
            per_rule(o, req, ",outcome=\"allowed\"", &|r| r.allowed);
            per_rule(o, req, ",outcome=\"denied\"", &|r| r.denied);
            per_rule(o, req, ",outcome=\"shadow_denied\"", &|r| r.shadow_denied);
        },
    );
    let rows: [Family; 4] = [
        (
            "sluicegate_policy_backend_errors_total",
            "counter",
            "Checks decided by on_error because the shared backend failed.",
            |r| r.backend_errors,
        ),
        (
            "sluicegate_policy_keys",
            "gauge",
            "Keys holding state in the rule's local table.",
            |r| r.keys,
        ),
        (
            "sluicegate_policy_evictions_total",
            "counter",
            "Live table entries replaced to make room for new keys (their state kept in the table's sketch).",
            |r| r.evictions,
        ),
        (
            "sluicegate_policy_rejected_keys_total",
            "counter",
            "New keys denied because the rule's table had no room.",
            |r| r.rejected_keys,
        ),
    ];
    for (name, kind, help, v) in rows {
        family(name, kind, help, &mut |o| per_rule(o, name, "", &|r| v(r)));
    }
    let name = "sluicegate_policy_reloads_total";
    family(name, "counter", "Policy reloads, by result.", &mut |o| {
        let _ = writeln!(o, "{name}{{result=\"ok\"}} {}", reload.reloads);
        let _ = writeln!(o, "{name}{{result=\"error\"}} {}", reload.failures);
    });
    let name = "sluicegate_policy_last_reload_error";
    family(
        name,
        "gauge",
        "1 while the last reload failed (the message is the label; the previous policy stays in force).",
        &mut |o| match &reload.last_error {
            Some(e) => {
                let _ = writeln!(o, "{name}{{message=\"{}\"}} 1", Escaped(e));
            }
            None => {
                let _ = writeln!(o, "{name}{{message=\"\"}} 0");
            }
        },
    );
    if let Some(up) = reload.store_up {
        let name = "sluicegate_policy_store_up";
        family(
            name,
            "gauge",
            "1 while the rule store answers the policy's polls; 0 while it cannot be reached (the rules in force are kept).",
            &mut |o| {
                let _ = writeln!(o, "{name} {}", u8::from(up));
            },
        );
        let name = "sluicegate_policy_store_errors_total";
        family(
            name,
            "counter",
            "Polls of the rule store that could not reach it.",
            &mut |o| {
                let _ = writeln!(o, "{name} {}", reload.store_errors);
            },
        );
    }
}

/// A label value with `\`, `"` and newlines escaped.
struct Escaped<'a>(&'a str);

impl fmt::Display for Escaped<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for c in self.0.chars() {
            match c {
                '\\' => f.write_str("\\\\")?,
                '"' => f.write_str("\\\"")?,
                '\n' => f.write_str("\\n")?,
                c => f.write_char(c)?,
            }
        }
        Ok(())
    }
}

impl crate::Policy {
    /// Every rule's counters at `now` (the `keys` gauge counts entries not back
    /// to full at `now`).
    ///
    /// ```
    /// # use sluicegate_policy::Policy;
    /// let p = Policy::from_toml("[[rule]]\nname = \"s\"\nlimit = \"1/minute\"\nmode = \"shadow\"\n")?;
    /// for _ in 0..3 { assert!(p.check_n_at(&[("k", "v")], 1, 0).allowed()); }
    /// let m = &p.metrics_at(0)[0];
    /// assert_eq!((m.allowed, m.shadow_denied, m.denied), (1, 2, 0));
    /// # Ok::<(), sluicegate_policy::Error>(())
    /// ```
    pub fn metrics_at(&self, now: u64) -> Vec<RuleStats> {
        let snap = self.core.current.load_full();
        // One scan of the pool counts every keyed rule's live keys.
        let live = snap
            .pool
            .as_ref()
            .map_or_else(Vec::new, |p| p.live_keys_at(now));
        snap.rules
            .iter()
            .map(|r| {
                let (keys, evictions, rejected_keys) = r.limiter.table_stats(&live);
                let m = &r.metrics;
                RuleStats {
                    name: r.def.name().to_owned(),
                    allowed: m.allowed.load(Ordering::Relaxed),
                    denied: m.denied.load(Ordering::Relaxed),
                    shadow_denied: m.shadow_denied.load(Ordering::Relaxed),
                    backend_errors: m.backend_errors.load(Ordering::Relaxed),
                    keys,
                    evictions,
                    rejected_keys,
                }
            })
            .collect()
    }

    /// The Prometheus text exposition (format 0.0.4) of every rule's counters and
    /// the reload history, at `now` on the policy's clock.
    ///
    /// ```
    /// # use sluicegate_policy::Policy;
    /// let p = Policy::from_toml("[[rule]]\nname = \"login\"\nlimit = \"1/minute\"\n")?;
    /// p.check(&[("k", "v")]);
    /// let text = p.metrics_text();
    /// assert!(text.contains("sluicegate_policy_requests_total{rule=\"login\",outcome=\"allowed\"} 1\n"));
    /// assert!(text.contains("# TYPE sluicegate_policy_keys gauge\n"));
    /// # Ok::<(), sluicegate_policy::Error>(())
    /// ```
    pub fn metrics_text(&self) -> String {
        self.metrics_text_at(self.now())
    }

    /// [`Self::metrics_text`] at `now` on the caller's clock.
    ///
    /// ```
    /// # use sluicegate_policy::Policy;
    /// let p = Policy::from_toml("")?;
    /// assert!(p.metrics_text_at(0).contains("sluicegate_policy_reloads_total{result=\"ok\"} 0\n"));
    /// # Ok::<(), sluicegate_policy::Error>(())
    /// ```
    pub fn metrics_text_at(&self, now: u64) -> String {
        let rules = self.metrics_at(now);
        let reload = self
            .core
            .reload
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone();
        let mut out = String::new();
        write_text(&mut out, &rules, &reload);
        let name = "sluicegate_policy_state_bytes";
        let _ = writeln!(
            out,
            "# HELP {name} Bytes of the pool every keyed rule keeps its keys in ([state] memory bounds it).\n# TYPE {name} gauge\n{name} {}",
            self.state_memory()
        );
        out
    }

    /// Bytes of the pool the keyed rules keep their keys in (0 without a keyed
    /// rule): what `[state] memory` bounds.
    ///
    /// ```
    /// # use sluicegate_policy::Policy;
    /// let keyless = Policy::from_toml("[[rule]]\nname = \"a\"\nlimit = \"1/s\"\n")?;
    /// assert_eq!(keyless.state_memory(), 0);
    /// let mut text = String::from("[state]\nmemory = \"4 MiB\"\n");
    /// for i in 0..1000 {
    ///     text += &format!("[[rule]]\nname = \"t{i}\"\nmatch = {{ tenant = \"t{i}\" }}\nkey = [\"ip\"]\nlimit = \"10/s\"\n");
    /// }
    /// let p = Policy::from_toml(&text)?; // 1,000 rules × 100,000 keys: bounded
    /// assert!(p.state_memory() > 0 && p.state_memory() <= 4 << 20);
    /// assert!(p.metrics_text_at(0).contains("sluicegate_policy_state_bytes "));
    /// # Ok::<(), sluicegate_policy::Error>(())
    /// ```
    pub fn state_memory(&self) -> usize {
        self.core
            .current
            .load()
            .pool
            .as_ref()
            .map_or(0, |p| p.memory())
    }
}
