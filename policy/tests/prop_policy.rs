//! A random policy (several rules, keys, shadow flags) against a model built from
//! independent reference limiters: exact fixed-window and GCRA arithmetic written
//! here, not the crate's. The model admits a request only if every matching
//! enforcing rule admits it and then charges all of them (all-or-nothing); shadow
//! rules are charged on their own and never deny.

use std::collections::HashMap;

use proptest::prelude::*;
use sluicegate_policy::{Mode, Policy};

#[derive(Clone, Debug)]
struct RuleCfg {
    window: bool,
    amount: u64,
    burst: u64,
    matches: Option<&'static str>,
    keyed: bool,
    shadow: bool,
}

#[derive(Clone, Debug)]
struct Req {
    a: Option<&'static str>,
    k: &'static str,
    n: u64,
    dt_ms: u64,
}

const SEC: u64 = 1_000_000_000;

fn rule_cfg() -> impl Strategy<Value = RuleCfg> {
    (
        any::<bool>(),
        prop::sample::select(vec![1u64, 2, 4, 5]),
        0u64..3,
        prop::sample::select(vec![None, Some("x"), Some("y")]),
        any::<bool>(),
        prop::bool::weighted(0.3),
    )
        .prop_map(|(window, amount, extra, matches, keyed, shadow)| RuleCfg {
            window,
            amount,
            burst: if window { amount } else { amount + extra },
            matches,
            keyed,
            shadow,
        })
}

fn req() -> impl Strategy<Value = Req> {
    (
        prop::sample::select(vec![None, Some("x"), Some("y")]),
        prop::sample::select(vec!["1", "2", "3"]),
        prop::sample::select(vec![1u64, 1, 1, 2, 7]),
        prop::sample::select(vec![0u64, 0, 50, 125, 400, 1100]),
    )
        .prop_map(|(a, k, n, dt_ms)| Req { a, k, n, dt_ms })
}

fn toml(rules: &[RuleCfg]) -> String {
    let mut t = String::new();
    for (i, r) in rules.iter().enumerate() {
        t += &format!("[[rule]]\nname = \"r{i}\"\n");
        t += &format!(
            "algorithm = \"{}\"\n",
            if r.window {
                "fixed_window"
            } else {
                "token_bucket"
            }
        );
        t += &format!("limit = \"{}/second burst {}\"\n", r.amount, r.burst);
        if let Some(m) = r.matches {
            t += &format!("match = {{ a = \"{m}\" }}\n");
        }
        t += if r.keyed {
            "key = [\"k\"]\n"
        } else {
            "key = []\n"
        };
        t += if r.shadow { "mode = \"shadow\"\n" } else { "" };
    }
    t
}

/// One reference limiter: a fixed window, or GCRA in exact integer arithmetic
/// (times scaled by `amount` so the emission interval `SEC/amount` is whole).
#[derive(Clone, Debug, Default)]
struct Model {
    window: u64,
    count: u64,
    tat: u128,
}

impl Model {
    fn admits(&self, r: &RuleCfg, now: u64, n: u64) -> bool {
        if r.window {
            let count = if now / SEC == self.window {
                self.count
            } else {
                0
            };
            count + n <= r.amount
        } else {
            let t = u128::from(now) * u128::from(r.amount);
            let tat = self.tat.max(t);
            n <= r.burst
                && tat + u128::from(n) * u128::from(SEC)
                    <= t + u128::from(r.burst) * u128::from(SEC)
        }
    }
    fn charge(&mut self, r: &RuleCfg, now: u64, n: u64) {
        if r.window {
            if now / SEC != self.window {
                self.window = now / SEC;
                self.count = 0;
            }
            self.count += n;
        } else {
            let t = u128::from(now) * u128::from(r.amount);
            self.tat = self.tat.max(t) + u128::from(n) * u128::from(SEC);
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

    #[test]
    fn policy_matches_independent_model(
        rules in prop::collection::vec(rule_cfg(), 1..6),
        reqs in prop::collection::vec(req(), 1..60),
    ) {
        let policy = Policy::from_toml(&toml(&rules)).unwrap();
        let mut models: HashMap<(usize, &str), Model> = HashMap::new();
        let mut now = 5 * SEC;
        for q in &reqs {
            now += q.dt_ms * 1_000_000;
            let mut attrs = vec![("k", q.k)];
            if let Some(a) = q.a {
                attrs.push(("a", a));
            }
            let matching: Vec<usize> = (0..rules.len())
                .filter(|&i| rules[i].matches.is_none() || rules[i].matches == q.a)
                .collect();
            let key = |i: usize| if rules[i].keyed { q.k } else { "" };
            // Shadow rules: each on its own.
            let mut shadow_ok = HashMap::new();
            for &i in matching.iter().filter(|&&i| rules[i].shadow) {
                let m = models.entry((i, key(i))).or_default();
                let ok = m.admits(&rules[i], now, q.n);
                if ok {
                    m.charge(&rules[i], now, q.n);
                }
                shadow_ok.insert(i, ok);
            }
            // Enforcing rules: all or nothing.
            let enforcing: Vec<usize> = matching.iter().copied().filter(|&i| !rules[i].shadow).collect();
            let admit = enforcing.iter().all(|&i| {
                models.entry((i, key(i))).or_default().admits(&rules[i], now, q.n)
            });
            if admit {
                for &i in &enforcing {
                    models.entry((i, key(i))).or_default().charge(&rules[i], now, q.n);
                }
            }

            let d = policy.check_n_at(&attrs, q.n, now);
            prop_assert_eq!(d.allowed(), admit, "request {:?} at {}", q, now);
            let names: Vec<String> = d.rules().map(|r| r.name.to_owned()).collect();
            let want: Vec<String> = matching.iter().map(|i| format!("r{i}")).collect();
            prop_assert_eq!(names, want);
            for r in d.rules().filter(|r| r.mode == Mode::Shadow) {
                let i: usize = r.name[1..].parse().unwrap();
                prop_assert_eq!(r.allowed, shadow_ok[&i], "shadow rule {}", r.name);
            }
            if !admit {
                prop_assert!(d.denying().count() >= 1);
                prop_assert!(d.denying().all(|r| r.mode == Mode::Enforce));
            }
        }
        // The counters agree with the model's decisions.
        let stats = policy.metrics_at(now);
        let total: u64 = stats.iter().map(|s| s.allowed + s.denied + s.shadow_denied).sum();
        prop_assert!(total <= (reqs.len() * rules.len()) as u64);
    }
}
