//! Decisions: every limit of the configuration with its keyed limiter table, and the
//! per-request logic of envoyproxy/ratelimit (resolve each descriptor, drop replaced
//! limits, decide each descriptor on its own, shadow mode, unlimited).

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::Arc;

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
use sluicegate::keyed::KeyedLimiter;
use sluicegate::{Fixed, Quota};

use crate::metrics::{HitResult, RuleMetrics};
use crate::yaml::{unit_seconds, ConfigError, Domain, LimitDef, LimitKind};

/// The algorithm YAML limits use unless the extension field names another.
pub const DEFAULT_ALGORITHM: &str = "fixed_window";

/// A limit's state: kept across reloads while the limit's key, window and algorithm
/// are unchanged (a new `requests_per_unit` applies to the current window's count).
#[derive(Debug)]
enum Limiter {
    Unlimited,
    /// `requests_per_unit: 0`: every hit is over the limit, as upstream.
    Never {
        window_ns: u64,
    },
    Window {
        table: Arc<KeyedLimiter<Fixed, ()>>,
        window_ns: u64,
    },
}

/// One limit of the configuration, ready to decide.
#[derive(Debug)]
pub struct Rule {
    /// Its definition from the file.
    pub def: LimitDef,
    limiter: Limiter,
    metrics: Arc<RuleMetrics>,
}

/// Two rules are the same rule only if they are one object (one table).
impl PartialEq for Rule {
    fn eq(&self, other: &Self) -> bool {
        std::ptr::eq(self, other)
    }
}

impl Eq for Rule {}

/// The hash key of a descriptor within its limit: the values of its entries. The
/// keys are fixed by the tree path that led to the limit, so the values alone tell
/// descriptors apart (envoyproxy/ratelimit's cache key, without building a string).
struct Values<'a>(&'a [Entry]);

impl Hash for Values<'_> {
    fn hash<H: Hasher>(&self, state: &mut H) {
        for e in self.0 {
            e.value.hash(state);
        }
    }
}

/// What one descriptor got.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome<'a> {
    /// No limit applies (or it was replaced): OK, nothing counted.
    NoLimit,
    /// An `unlimited` limit: OK, remaining reported as `u32::MAX`.
    Unlimited,
    /// Decided by `rule`.
    Limited {
        /// The limit that decided.
        rule: &'a Rule,
        /// Within the limit, or a shadow-mode limit (which never denies).
        ok: bool,
        /// Over the limit (also set for shadow-mode limits).
        over: bool,
        /// Hits left in the window after this decision.
        remaining: u64,
        /// Nanoseconds until the window resets.
        reset_ns: u64,
    },
}

/// The configuration in force: every domain and its limits.
#[derive(Debug, Default)]
pub struct RuleSet {
    domains: HashMap<String, (Domain, Vec<Rule>)>,
}

/// Settings that shape the limiter tables.
#[derive(Debug, Clone, Copy)]
pub struct TableSettings {
    /// Keys each limit's table holds (rounded up to whole groups of 8).
    pub keys_per_limit: usize,
}

impl RuleSet {
    /// Builds the rules of `domains`, taking over the state and counters of `old`'s
    /// limits that kept their key, window and algorithm. Fails without touching
    /// `old` (two files with one domain, a limit beyond the algorithm's bound).
    pub fn build(
        domains: Vec<(String, Domain)>,
        old: Option<&RuleSet>,
        settings: TableSettings,
    ) -> Result<RuleSet, ConfigError> {
        let mut out = RuleSet::default();
        let previous: HashMap<&str, &Rule> = old
            .into_iter()
            .flat_map(|o| o.domains.values().flat_map(|(_, rules)| rules.iter()))
            .map(|r| (r.def.full_key.as_str(), r))
            .collect();
        for (file, domain) in domains {
            let err = |message: String| ConfigError {
                file: file.clone(),
                message,
            };
            if out.domains.contains_key(&domain.name) {
                return Err(err(format!(
                    "duplicate domain '{}' in config file",
                    domain.name
                )));
            }
            let mut rules = Vec::with_capacity(domain.limits().len());
            for def in domain.limits() {
                let prev = previous.get(def.full_key.as_str()).copied();
                rules.push(
                    build_rule(def, prev, settings)
                        .map_err(|m| err(format!("descriptor '{}': {m}", def.full_key)))?,
                );
            }
            out.domains.insert(domain.name.clone(), (domain, rules));
        }
        Ok(out)
    }

    /// Number of configured domains.
    pub fn domain_count(&self) -> usize {
        self.domains.len()
    }

    /// Decides every descriptor of one request at `now_ns` (Unix nanoseconds), with
    /// `hits[i]` units for descriptor `i`; `None` when the domain is unknown (every
    /// descriptor is then OK, as upstream).
    pub fn decide<'a>(
        &'a self,
        domain: &str,
        descriptors: &[&[Entry]],
        hits: &[u64],
        now_ns: u64,
    ) -> Option<Vec<Outcome<'a>>> {
        let (tree, rules) = self.domains.get(domain)?;
        let mut picked: Vec<Option<&Rule>> = descriptors
            .iter()
            .map(|d| {
                tree.resolve_index(d.iter().map(|e| (e.key.as_str(), e.value.as_str())))
                    .and_then(|i| rules.get(i))
            })
            .collect();
        // `replaces`: a named limit is dropped when another applied limit of the same
        // request replaces it (upstream: unlimited limits replace too).
        if picked.iter().flatten().any(|r| !r.def.replaces.is_empty()) {
            let replaced: Vec<&str> = picked
                .iter()
                .flatten()
                .flat_map(|r| r.def.replaces.iter().map(String::as_str))
                .collect();
            for slot in &mut picked {
                if slot.is_some_and(|r| {
                    !r.def.name.is_empty() && replaced.contains(&r.def.name.as_str())
                }) {
                    *slot = None;
                }
            }
        }
        let outcomes = picked
            .into_iter()
            .zip(descriptors)
            .zip(hits)
            .map(|((rule, entries), &n)| match rule {
                None => Outcome::NoLimit,
                Some(rule) => rule.decide(entries, n, now_ns),
            })
            .collect();
        Some(outcomes)
    }

    /// Every rule with its domain, for metrics.
    pub fn rules(&self) -> impl Iterator<Item = &Rule> {
        self.domains.values().flat_map(|(_, rules)| rules.iter())
    }
}

fn build_rule(
    def: &LimitDef,
    prev: Option<&Rule>,
    settings: TableSettings,
) -> Result<Rule, String> {
    let metrics = match prev {
        Some(p) if p.def.detailed_metric == def.detailed_metric => p.metrics.clone(),
        _ => Arc::new(RuleMetrics::new(def.detailed_metric)),
    };
    let limiter = match &def.kind {
        LimitKind::Unlimited => Limiter::Unlimited,
        LimitKind::Rate {
            requests_per_unit,
            unit,
            algorithm,
        } => {
            let algorithm = algorithm.as_deref().unwrap_or(DEFAULT_ALGORITHM);
            if algorithm != DEFAULT_ALGORITHM {
                return Err(format!(
                    "algorithm '{algorithm}': this build decides YAML limits with '{DEFAULT_ALGORITHM}' only (other algorithms come with the policy layer)"
                ));
            }
            let window_ns = unit_seconds(*unit).ok_or("unknown unit")? * 1_000_000_000;
            if *requests_per_unit == 0 {
                Limiter::Never { window_ns }
            } else {
                let quota = Quota::from_nanos(u64::from(*requests_per_unit), window_ns);
                match prev.map(|p| &p.limiter) {
                    Some(Limiter::Window {
                        table,
                        window_ns: w,
                    }) if *w == window_ns => {
                        table
                            .set_quota(&quota)
                            .map_err(|e| format!("requests_per_unit: {e}"))?;
                        Limiter::Window {
                            table: table.clone(),
                            window_ns,
                        }
                    }
                    _ => {
                        let table = KeyedLimiter::<Fixed, ()>::with_clock(
                            quota,
                            settings.keys_per_limit,
                            (),
                        )
                        .map_err(|e| format!("requests_per_unit: {e}"))?;
                        Limiter::Window {
                            table: Arc::new(table),
                            window_ns,
                        }
                    }
                }
            }
        }
    };
    Ok(Rule {
        def: def.clone(),
        limiter,
        metrics,
    })
}

impl Rule {
    fn decide(&self, entries: &[Entry], hits: u64, now_ns: u64) -> Outcome<'_> {
        let (allowed, remaining, window_ns) = match &self.limiter {
            Limiter::Unlimited => return Outcome::Unlimited,
            Limiter::Never { window_ns } => (false, 0, *window_ns),
            Limiter::Window { table, window_ns } => {
                match table.check_n_at(&Values(entries), hits, now_ns) {
                    Ok(d) => (d.allowed, d.remaining, *window_ns),
                    // More hits than the limit: never admissible, over the limit (upstream).
                    Err(_) => (false, 0, *window_ns),
                }
            }
        };
        let result = match (allowed, self.def.shadow) {
            (true, _) => HitResult::Allowed,
            (false, false) => HitResult::Denied,
            (false, true) => HitResult::ShadowDenied,
        };
        self.metrics
            .record(result, hits, || detailed_key(&self.def.full_key, entries));
        Outcome::Limited {
            rule: self,
            ok: allowed || self.def.shadow,
            over: !allowed,
            remaining,
            reset_ns: window_ns - now_ns % window_ns,
        }
    }

    /// Live entries evicted from this limit's table because it was full (each
    /// such value started a fresh window); 0 for limits without a table.
    pub fn evicted(&self) -> u64 {
        match &self.limiter {
            Limiter::Window { table, .. } => table.stats().evicted,
            Limiter::Unlimited | Limiter::Never { .. } => 0,
        }
    }

    /// This rule's counters.
    pub fn metrics(&self) -> &RuleMetrics {
        &self.metrics
    }

    /// Requests per unit and the unit's seconds, when the limit is a rate.
    pub fn rate(&self) -> Option<(u32, u64)> {
        match &self.def.kind {
            LimitKind::Rate {
                requests_per_unit,
                unit,
                ..
            } => Some((*requests_per_unit, unit_seconds(*unit)?)),
            LimitKind::Unlimited => None,
        }
    }
}

/// envoyproxy/ratelimit's detailed metric key: the domain and every `key_value`.
fn detailed_key(full_key: &str, entries: &[Entry]) -> String {
    let domain = full_key.split('.').next().unwrap_or(full_key);
    let mut s = String::from(domain);
    for e in entries {
        s.push('.');
        s.push_str(&e.key);
        s.push('_');
        s.push_str(&e.value);
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    const SETTINGS: TableSettings = TableSettings {
        keys_per_limit: 1024,
    };
    const SEC: u64 = 1_000_000_000;

    fn set(yaml: &str, old: Option<&RuleSet>) -> RuleSet {
        let d = Domain::from_yaml("t.yaml", yaml).unwrap();
        RuleSet::build(vec![("t.yaml".into(), d)], old, SETTINGS).unwrap()
    }

    fn e(k: &str, v: &str) -> Entry {
        Entry {
            key: k.into(),
            value: v.into(),
        }
    }

    fn oks(rs: &RuleSet, descriptors: &[&[Entry]], hits: u64, now: u64) -> Vec<bool> {
        let hits = vec![hits; descriptors.len()];
        rs.decide("d", descriptors, &hits, now)
            .unwrap()
            .into_iter()
            .map(|o| match o {
                Outcome::Limited { ok, .. } => ok,
                _ => true,
            })
            .collect()
    }

    const YAML: &str = "domain: d\ndescriptors:\n  - key: ip\n    rate_limit: {unit: second, requests_per_unit: 2}\n  - key: shadow\n    shadow_mode: true\n    rate_limit: {unit: second, requests_per_unit: 1}\n";

    #[test]
    fn each_value_counts_apart_in_aligned_windows() {
        let rs = set(YAML, None);
        let (a, b) = ([e("ip", "a")], [e("ip", "b")]);
        let t = 1_700_000_000 * SEC + SEC / 2;
        assert_eq!(oks(&rs, &[&a, &a, &a, &b], 1, t), [true, true, false, true]);
        // The window is aligned to the second: the next one starts at the boundary.
        assert_eq!(oks(&rs, &[&a], 1, t + SEC / 2 - 1), [false]);
        assert_eq!(oks(&rs, &[&a], 1, t + SEC / 2), [true]);
        let out = rs.decide("d", &[&a], &[1], t + SEC / 2 + SEC / 4).unwrap();
        let Outcome::Limited {
            remaining,
            reset_ns,
            over,
            ..
        } = out[0]
        else {
            panic!("{out:?}")
        };
        assert_eq!((remaining, reset_ns, over), (0, 3 * SEC / 4, false));
    }

    #[test]
    fn hits_beyond_the_limit_are_over_and_consume_nothing() {
        let rs = set(YAML, None);
        let a = [e("ip", "a")];
        assert_eq!(oks(&rs, &[&a], 3, 0), [false]);
        assert_eq!(oks(&rs, &[&a], 2, 0), [true]);
    }

    #[test]
    fn shadow_mode_counts_but_answers_ok() {
        let rs = set(YAML, None);
        let s = [e("shadow", "x")];
        assert_eq!(oks(&rs, &[&s, &s, &s], 1, 0), [true, true, true]);
        let m = rs.rules().find(|r| r.def.shadow).unwrap().metrics();
        assert_eq!(
            (
                m.count(HitResult::Allowed),
                m.count(HitResult::ShadowDenied)
            ),
            (1, 2)
        );
    }

    #[test]
    fn replaces_drops_the_named_limit_and_unknown_domains_pass() {
        let yaml = "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 1, name: base}\n  - key: b\n    rate_limit: {unit: second, requests_per_unit: 5, replaces: [{name: base}]}\n";
        let rs = set(yaml, None);
        let (a, b) = ([e("a", "1")], [e("b", "1")]);
        // Alone, `a` is limited to 1; with `b` in the same request it is replaced.
        assert_eq!(oks(&rs, &[&a, &a], 1, 0), [true, false]);
        let out = rs.decide("d", &[&a, &b], &[1, 1], 0).unwrap();
        assert_eq!(out[0], Outcome::NoLimit);
        assert!(matches!(out[1], Outcome::Limited { ok: true, .. }));
        assert!(rs.decide("other", &[&a], &[1], 0).is_none());
    }

    #[test]
    fn zero_requests_per_unit_always_over_and_unlimited_always_ok() {
        let yaml = "domain: d\ndescriptors:\n  - key: z\n    rate_limit: {unit: minute, requests_per_unit: 0}\n  - key: u\n    rate_limit: {unlimited: true}\n";
        let rs = set(yaml, None);
        assert_eq!(oks(&rs, &[&[e("z", "1")]], 1, 0), [false]);
        assert_eq!(
            rs.decide("d", &[&[e("u", "1")]], &[1_000_000], 0).unwrap()[0],
            Outcome::Unlimited
        );
    }

    #[test]
    fn reload_keeps_state_of_unchanged_limits_and_applies_new_limits() {
        let rs = set(YAML, None);
        let a = [e("ip", "a")];
        assert_eq!(oks(&rs, &[&a, &a], 1, 0), [true, true]);
        let same = set(YAML, Some(&rs));
        assert_eq!(oks(&same, &[&a], 1, 1), [false], "state carried over");
        let raised = set(
            &YAML.replace("requests_per_unit: 2", "requests_per_unit: 3"),
            Some(&same),
        );
        assert_eq!(
            oks(&raised, &[&a, &a], 1, 2),
            [true, false],
            "count kept, new limit applied"
        );
        let per_minute = set(
            &YAML.replace(
                "{unit: second, requests_per_unit: 2}",
                "{unit: minute, requests_per_unit: 2}",
            ),
            Some(&raised),
        );
        assert_eq!(
            oks(&per_minute, &[&a, &a, &a], 1, 3),
            [true, true, false],
            "a new window is a new table"
        );
    }

    #[test]
    fn a_full_table_evicts_and_counts_it() {
        let d = Domain::from_yaml("t.yaml", YAML).unwrap();
        let rs = RuleSet::build(
            vec![("t.yaml".into(), d)],
            None,
            TableSettings { keys_per_limit: 8 },
        )
        .unwrap();
        let values: Vec<[Entry; 1]> = (0..200).map(|i| [e("ip", &i.to_string())]).collect();
        for v in &values {
            assert_eq!(oks(&rs, &[v], 1, 0), [true]);
        }
        let ip = rs.rules().find(|r| r.def.full_key == "d.ip").unwrap();
        assert!(ip.evicted() > 0);
        assert_eq!(ip.metrics().count(HitResult::Allowed), 200);
    }

    #[test]
    fn build_refuses_duplicate_domains_bounds_and_unknown_algorithms() {
        let d = || Domain::from_yaml("a.yaml", YAML).unwrap();
        let err = RuleSet::build(
            vec![("a.yaml".into(), d()), ("b.yaml".into(), d())],
            None,
            SETTINGS,
        )
        .unwrap_err();
        assert_eq!(
            err.to_string(),
            "b.yaml: duplicate domain 'd' in config file"
        );
        let big = Domain::from_yaml(
            "c.yaml",
            &YAML.replace("requests_per_unit: 2", "requests_per_unit: 4000000000"),
        )
        .unwrap();
        let err = RuleSet::build(vec![("c.yaml".into(), big)], None, SETTINGS)
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with("c.yaml: descriptor 'd.ip': requests_per_unit: limit is too large"),
            "{err}"
        );
        let alg = Domain::from_yaml(
            "e.yaml",
            &YAML.replace(
                "requests_per_unit: 2}",
                "requests_per_unit: 2, algorithm: nope}",
            ),
        )
        .unwrap();
        let err = RuleSet::build(vec![("e.yaml".into(), alg)], None, SETTINGS)
            .unwrap_err()
            .to_string();
        assert!(err.contains("algorithm 'nope'"), "{err}");
    }
}
