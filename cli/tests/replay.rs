//! Replay counts against an independent computation: the generator's events
//! (not the parsed lines) run through small reference limiters written here from
//! the algorithms' definitions, with the policy's all-or-nothing rule across
//! enforcing rules and independent shadow rules.

use std::collections::HashMap;

use sluicegate_cli::input::{Format, LogReader};
use sluicegate_cli::replay::Replay;
use sluicegate_cli::report::Report;
use sluicegate_cli::synth::{Config, Entry, Event, SCRAPER_IP, generate, logged_time_ns, write};
use sluicegate_policy::Policy;

const RULES: &str = include_str!("../examples/shop-rules.toml");
const S: u64 = 1_000_000_000;

/// A reference limiter per key: `allows` looks, `take` consumes one unit.
enum Reference {
    /// Continuous token bucket: `credit` in nanoseconds of refill (a token is
    /// `t` ns), capped at `burst` tokens.
    Bucket {
        t: u64,
        burst: u64,
        state: HashMap<String, (u64, u64)>,
    },
    /// Windows aligned to multiples of `w`: (window index, count).
    Fixed {
        w: u64,
        limit: u64,
        state: HashMap<String, (u64, u64)>,
    },
    /// Sliding window counter: (window index, previous count, current count).
    Sliding {
        w: u64,
        limit: u64,
        state: HashMap<String, (u64, u64, u64)>,
    },
}

impl Reference {
    fn allows(&self, key: &str, now: u64) -> bool {
        match self {
            Reference::Bucket { t, burst, state } => {
                let full = burst * t;
                let credit = match state.get(key) {
                    Some(&(credit, last)) => (credit + now.saturating_sub(last)).min(full),
                    None => full,
                };
                credit >= *t
            }
            Reference::Fixed { w, limit, state } => {
                let count = match state.get(key) {
                    Some(&(idx, c)) if idx == now / w => c,
                    _ => 0,
                };
                count < *limit
            }
            Reference::Sliding { w, limit, state } => {
                let (prev, cur) = self.sliding_counts(state.get(key).copied(), now, *w);
                let elapsed = now % w;
                // Exactly: prev·(W − e)/W + cur + 1 ≤ limit, in integers (never
                // rounded in the request's favour).
                let (w, limit) = (u128::from(*w), u128::from(*limit));
                u128::from(prev) * (w - u128::from(elapsed)) + u128::from(cur + 1) * w <= limit * w
            }
        }
    }

    fn sliding_counts(&self, s: Option<(u64, u64, u64)>, now: u64, w: u64) -> (u64, u64) {
        match s {
            Some((idx, p, c)) if idx == now / w => (p, c),
            Some((idx, _, c)) if idx + 1 == now / w => (c, 0),
            _ => (0, 0),
        }
    }

    fn take(&mut self, key: &str, now: u64) {
        match self {
            Reference::Bucket { t, burst, state } => {
                let full = *burst * *t;
                let e = state.entry(key.to_owned()).or_insert((full, now));
                e.0 = (e.0 + now.saturating_sub(e.1)).min(full) - *t;
                e.1 = e.1.max(now);
            }
            Reference::Fixed { w, state, .. } => {
                let e = state.entry(key.to_owned()).or_insert((now / *w, 0));
                if e.0 != now / *w {
                    *e = (now / *w, 0);
                }
                e.1 += 1;
            }
            Reference::Sliding { w, state, .. } => {
                let w = *w;
                let s = state.get(key).copied();
                let (prev, cur) = match s {
                    Some((idx, p, c)) if idx == now / w => (p, c),
                    Some((idx, _, c)) if idx + 1 == now / w => (c, 0),
                    _ => (0, 0),
                };
                state.insert(key.to_owned(), (now / w, prev, cur + 1));
            }
        }
    }
}

struct RefRule {
    name: &'static str,
    shadow: bool,
    keyed: bool,
    matches: fn(&Event) -> bool,
    limiter: Reference,
}

#[derive(Debug, Default, PartialEq, Eq)]
struct Counts {
    matched: u64,
    allowed: u64,
    denied: u64,
    shadow_denied: u64,
    denied_by_other: u64,
    keys: HashMap<String, u64>,
}

/// examples/shop-rules.toml, written again from its text by hand.
fn reference_rules() -> Vec<RefRule> {
    let bucket = |per_s: u64, burst: u64| Reference::Bucket {
        t: S / per_s,
        burst,
        state: HashMap::new(),
    };
    vec![
        RefRule {
            name: "per-ip",
            shadow: false,
            keyed: true,
            matches: |_| true,
            limiter: bucket(5, 20),
        },
        RefRule {
            name: "catalogue",
            shadow: false,
            keyed: true,
            matches: |e| e.path.starts_with("/products/"),
            limiter: Reference::Fixed {
                w: 60 * S,
                limit: 120,
                state: HashMap::new(),
            },
        },
        RefRule {
            name: "login",
            shadow: false,
            keyed: true,
            matches: |e| e.path == "/login",
            limiter: Reference::Sliding {
                w: 60 * S,
                limit: 5,
                state: HashMap::new(),
            },
        },
        RefRule {
            name: "promo",
            shadow: false,
            keyed: false,
            matches: |e| e.path.starts_with("/promo/"),
            limiter: bucket(100, 100),
        },
        RefRule {
            name: "site-ceiling",
            shadow: true,
            keyed: false,
            matches: |_| true,
            limiter: Reference::Sliding {
                w: 60 * S,
                limit: 3000,
                state: HashMap::new(),
            },
        },
    ]
}

fn reference(entries: &[Entry], format: Format) -> (Vec<Counts>, u64, u64) {
    let mut rules = reference_rules();
    let mut counts: Vec<Counts> = rules.iter().map(|_| Counts::default()).collect();
    let (mut allowed, mut denied) = (0, 0);
    for e in entries {
        let Entry::Request(ev) = e else { continue };
        let now = logged_time_ns(ev.time_ns, format);
        let matched: Vec<usize> = (0..rules.len())
            .filter(|&i| (rules[i].matches)(ev))
            .collect();
        let key = |r: &RefRule| {
            if r.keyed {
                ev.ip.clone()
            } else {
                String::new()
            }
        };
        let verdicts: Vec<bool> = matched
            .iter()
            .map(|&i| rules[i].limiter.allows(&key(&rules[i]), now))
            .collect();
        let admitted = matched
            .iter()
            .zip(&verdicts)
            .all(|(&i, ok)| rules[i].shadow || *ok);
        for (&i, &ok) in matched.iter().zip(&verdicts) {
            let k = key(&rules[i]);
            let c = &mut counts[i];
            c.matched += 1;
            if rules[i].shadow {
                if ok {
                    c.allowed += 1;
                    rules[i].limiter.take(&k, now);
                } else {
                    c.shadow_denied += 1;
                    *c.keys.entry(k).or_default() += 1;
                }
            } else if !ok {
                c.denied += 1;
                *c.keys.entry(k).or_default() += 1;
            } else if admitted {
                c.allowed += 1;
                rules[i].limiter.take(&k, now);
            } else {
                c.denied_by_other += 1;
            }
        }
        if admitted {
            allowed += 1;
        } else {
            denied += 1;
        }
    }
    (counts, allowed, denied)
}

fn replay(log: &[u8], format: Format) -> Report {
    let mut replay = Replay::new(Policy::from_toml(RULES).unwrap());
    let mut reader = LogReader::new(format, Default::default());
    reader.read("log", log, |r| replay.check(r)).unwrap();
    Report::new(&replay, reader.stats())
}

#[test]
fn replay_matches_the_reference_in_every_format() {
    let entries = generate(&Config {
        lines: 30_000,
        seed: 42,
        ..Config::default()
    });
    for format in [Format::Combined, Format::Json] {
        let mut log = Vec::new();
        write(&entries, format, &mut log).unwrap();
        let report = replay(&log, format);
        let (want, allowed, denied) = reference(&entries, format);
        assert_eq!(
            (report.allowed, report.denied),
            (allowed, denied),
            "{format:?}"
        );
        assert_eq!(report.lines, 30_000);
        assert_eq!(report.parsed, allowed + denied);
        assert_eq!(report.rules.len(), want.len());
        for ((got, want), r) in report.rules.iter().zip(&want).zip(reference_rules()) {
            let name = &got.name;
            assert_eq!(name, r.name);
            assert_eq!(
                (
                    got.matched,
                    got.allowed,
                    got.denied,
                    got.shadow_denied,
                    got.denied_by_other
                ),
                (
                    want.matched,
                    want.allowed,
                    want.denied,
                    want.shadow_denied,
                    want.denied_by_other
                ),
                "{format:?} rule {name}"
            );
            let mut top: Vec<(&String, &u64)> = want.keys.iter().collect();
            top.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
            let top: Vec<(String, u64)> = top
                .into_iter()
                .take(10)
                .map(|(k, v)| (k.clone(), *v))
                .collect();
            let got_top: Vec<(String, u64)> = got
                .top_denied_keys
                .iter()
                .map(|k| (k.key.clone(), k.denied))
                .collect();
            assert_eq!(got_top, top, "{format:?} rule {name}");
            assert!(got.top_denied_exact);
        }
        // The traffic is what the rules are for: each one acts.
        let by = |n: &str| report.rules.iter().find(|r| r.name == n).unwrap();
        assert_eq!(by("catalogue").top_denied_keys[0].key, SCRAPER_IP);
        assert!(by("catalogue").denied > 1000);
        assert!(by("promo").denied > 100 && by("promo").peak_admitted_per_s <= 100 + 100);
        assert!(by("login").denied > 0 && by("per-ip").denied > 0);
        assert!(by("site-ceiling").shadow_denied > 0 && by("site-ceiling").denied == 0);
    }
}

#[test]
fn out_of_order_lines_are_decided_as_no_time_passing() {
    // A one-minute fixed window: a line from an earlier minute than one already
    // seen counts in the later (stored) window, so it can only be denied sooner.
    let policy = "[[rule]]\nname = \"w\"\nkey = [\"ip\"]\nlimit = \"2/minute\"\nalgorithm = \"fixed_window\"\n";
    let line = |t: &str| {
        format!("192.0.2.1 - - [02/Mar/2026:{t} +0000] \"GET / HTTP/1.1\" 200 1 \"-\" \"ua\"\n")
    };
    let log = [
        line("09:01:00"),
        line("09:00:59"),
        line("09:00:58"),
        line("09:02:00"),
    ]
    .concat();
    let mut rp = Replay::new(Policy::from_toml(policy).unwrap());
    let mut reader = LogReader::new(Format::Combined, Default::default());
    let mut decisions = Vec::new();
    reader
        .read("log", log.as_bytes(), |r| {
            let before = rp.totals().0;
            rp.check(r);
            decisions.push(rp.totals().0 > before);
        })
        .unwrap();
    assert_eq!(decisions, [true, true, false, true]);
    // A whole generated log with neighbours swapped replays like any other.
    let swapped = generate(&Config {
        lines: 20_000,
        seed: 9,
        disorder: true,
        ..Config::default()
    });
    let mut log = Vec::new();
    write(&swapped, Format::Combined, &mut log).unwrap();
    let r = replay(&log, Format::Combined);
    assert_eq!(r.parsed, r.allowed + r.denied);
    assert_eq!(r.lines, 20_000);
}
