//! Unit tests of the engine (a file of its own to keep engine.rs short).

use super::*;
use crate::metrics::HitResult;
use crate::yaml::DescriptorTree;

/// Each test's own pool: 1,024 keys per limit, 4 MiB in all.
fn settings() -> TableSettings {
    TableSettings::new(1024, 4 << 20).unwrap()
}
const SEC: u64 = 1_000_000_000;

fn set(yaml: &str, old: Option<&RuleSet>) -> RuleSet {
    let d = DescriptorTree::from_yaml("t.yaml", yaml).unwrap();
    RuleSet::build(vec![("t.yaml".into(), Source::Yaml(d))], old, settings()).unwrap()
}

/// The TOML policy `text` for domain `api`.
fn toml_source(text: impl Into<String>) -> Source {
    toml_source_for("api", text)
}

/// The TOML policy `text` for `domain`.
fn toml_source_for(domain: &str, text: impl Into<String>) -> Source {
    let text = text.into();
    let def = sluicegate_policy::PolicyDef::parse(&text, None).unwrap();
    Source::Toml {
        domain: domain.into(),
        text,
        def,
    }
}

fn e(k: &str, v: &str) -> Entry {
    Entry {
        key: k.into(),
        value: v.into(),
    }
}

impl RuleSet {
    /// [`RuleSet::decide_except`] run to its end on this thread (these rule sets
    /// are local: their checks never wait).
    fn decide_except_now<'a>(
        &'a self,
        domain: &str,
        descriptors: &[&[Entry]],
        hits: &[u64],
        now_ns: u64,
        headers: bool,
        skip: &[bool],
    ) -> Option<Vec<Outcome<'a>>> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        rt.block_on(self.decide_except(domain, descriptors, hits, now_ns, headers, skip))
    }
}

fn oks(rs: &RuleSet, descriptors: &[&[Entry]], hits: u64, now: u64) -> Vec<bool> {
    let hits = vec![hits; descriptors.len()];
    rs.decide_except_now("d", descriptors, &hits, now, false, &[])
        .unwrap()
        .into_iter()
        .map(|o| match o {
            Outcome::Limited(l) => l.ok,
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
    let out = rs
        .decide_except_now("d", &[&a], &[1], t + SEC / 2 + SEC / 4, false, &[])
        .unwrap();
    let Outcome::Limited(l) = &out[0] else {
        panic!("{out:?}")
    };
    assert_eq!((l.remaining, l.reset_ns, l.ok), (0, 3 * SEC / 4, true));
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
    let m = rs.yaml_rule("d", "d.shadow").unwrap().metrics();
    assert_eq!(m.count(HitResult::Allowed), 1);
    assert_eq!(m.count(HitResult::ShadowDenied), 2);
}

#[test]
fn replaces_drops_the_named_limit_and_unknown_domains_pass() {
    let yaml = "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 1, name: base}\n  - key: b\n    rate_limit: {unit: second, requests_per_unit: 5, replaces: [{name: base}]}\n";
    let rs = set(yaml, None);
    let (a, b) = ([e("a", "1")], [e("b", "1")]);
    // Alone, `a` is limited to 1; with `b` in the same request it is replaced.
    assert_eq!(oks(&rs, &[&a, &a], 1, 0), [true, false]);
    let out = rs
        .decide_except_now("d", &[&a, &b], &[1, 1], 0, false, &[])
        .unwrap();
    assert_eq!(out[0], Outcome::NoLimit);
    assert!(matches!(&out[1], Outcome::Limited(l) if l.ok));
    assert!(rs
        .decide_except_now("other", &[&a], &[1], 0, false, &[])
        .is_none());
}

#[test]
fn zero_requests_per_unit_always_over_and_unlimited_always_ok() {
    let yaml = "domain: d\ndescriptors:\n  - key: z\n    rate_limit: {unit: minute, requests_per_unit: 0}\n  - key: u\n    rate_limit: {unlimited: true}\n";
    let rs = set(yaml, None);
    assert_eq!(oks(&rs, &[&[e("z", "1")]], 1, 0), [false]);
    assert_eq!(
        rs.decide_except_now("d", &[&[e("u", "1")]], &[1_000_000], 0, false, &[])
            .unwrap()[0],
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
fn a_full_table_evicts_into_the_sketch_and_never_over_admits() {
    let d = DescriptorTree::from_yaml("t.yaml", YAML).unwrap();
    let rs = RuleSet::build(
        vec![("t.yaml".into(), Source::Yaml(d))],
        None,
        TableSettings::new(8, 1 << 20).unwrap(),
    )
    .unwrap();
    let values: Vec<[Entry; 1]> = (0..200).map(|i| [e("ip", &i.to_string())]).collect();
    // Every value spends its whole window (2 per second) at t = 0.
    let admitted: u64 = values
        .iter()
        .map(|v| oks(&rs, &[v, v, v], 1, 0).iter().filter(|ok| **ok).count() as u64)
        .sum();
    // Bounded memory never over-admits: an evicted value's state is kept in the
    // table's sketch, so no value gets more than its 2 per window back ...
    assert!((16..=2 * 200).contains(&admitted), "{admitted}");
    for v in &values {
        assert_eq!(oks(&rs, &[v], 1, 0), [false], "{v:?} got its limit back");
    }
    // ... and the table made room by evicting (the default). In the domain's
    // shared pool a limit at its bound of live keys takes a slot only among the
    // ones it holds, so a new value whose candidate slots hold none of them is
    // turned away (`rejected`: early to limit, never late); most are placed.
    let ip = rs.yaml_rule("d", "d.ip").unwrap();
    let rows = rs.metric_rows(0);
    let counts = rows.iter().find(|r| r.0 == "d.ip").unwrap().3;
    assert!(counts.evicted > counts.rejected, "{counts:?}");
    assert!(counts.rejected < 20, "{counts:?}");
    assert_eq!(counts.backend_errors, 0);
    assert_eq!(
        ip.metrics().count(HitResult::Denied),
        3 * 200 - admitted + 200
    );
    // Once the window has passed, a value starts over.
    assert_eq!(oks(&rs, &[&values[199]], 1, SEC), [true]);
}

#[test]
fn build_refuses_duplicate_domains_bounds_and_unknown_algorithms() {
    let d = |file: &str| Source::Yaml(DescriptorTree::from_yaml(file, YAML).unwrap());
    let err = RuleSet::build(
        vec![
            ("a.yaml".into(), d("a.yaml")),
            ("b.yaml".into(), d("b.yaml")),
        ],
        None,
        settings(),
    )
    .unwrap_err();
    assert_eq!(
        err.to_string(),
        "b.yaml: duplicate descriptor composite key 'd.ip' (also in a.yaml)"
    );
    let err = RuleSet::build(
        vec![
            ("a.yaml".into(), d("a.yaml")),
            ("d.toml".into(), toml_source_for("d", "")),
        ],
        None,
        settings(),
    )
    .unwrap_err();
    assert_eq!(
        err.to_string(),
        "d.toml: duplicate domain 'd' in config file (also in a.yaml)"
    );
    // The error of building one file `name` holding `yaml`.
    let build_error = |name: &str, yaml: &str| {
        let d = DescriptorTree::from_yaml(name, yaml).unwrap();
        let built = RuleSet::build(vec![(name.into(), Source::Yaml(d))], None, settings());
        built.unwrap_err().to_string()
    };
    let err = build_error(
        "c.yaml",
        &YAML.replace("requests_per_unit: 2", "requests_per_unit: 4000000000"),
    );
    assert!(
        err.starts_with("c.yaml: descriptor 'd.ip': ") && err.contains("too large"),
        "{err}"
    );
    let err = build_error(
        "e.yaml",
        &YAML.replace(
            "requests_per_unit: 2}",
            "requests_per_unit: 2, algorithm: nope}",
        ),
    );
    assert!(
        err.starts_with("e.yaml: descriptor 'd.ip': ") && err.contains("nope"),
        "{err}"
    );
}

#[test]
fn the_algorithm_extension_picks_any_kind() {
    // A sliding window: the previous second still weighs at the start of the next.
    let yaml = YAML.replace(
        "requests_per_unit: 2}",
        "requests_per_unit: 2, algorithm: sliding_window}",
    );
    let rs = set(&yaml, None);
    let a = [e("ip", "a")];
    assert_eq!(oks(&rs, &[&a, &a, &a], 1, 10 * SEC), [true, true, false]);
    assert_eq!(
        oks(&rs, &[&a], 1, 11 * SEC),
        [false],
        "a fixed window would admit"
    );
    assert_eq!(oks(&rs, &[&a], 1, 11 * SEC + SEC / 2), [true]);
    // A token bucket with the same rate.
    let rs = set(
        &YAML.replace(
            "requests_per_unit: 2}",
            "requests_per_unit: 2, algorithm: token_bucket}",
        ),
        None,
    );
    assert_eq!(oks(&rs, &[&a, &a, &a], 1, 10 * SEC), [true, true, false]);
    assert_eq!(
        oks(&rs, &[&a], 1, 10 * SEC + SEC / 2),
        [true],
        "one token back after half a second"
    );
}

#[test]
fn a_toml_domain_checks_descriptor_entries_as_attributes() {
    let toml = "[[rule]]\nname = \"per-user\"\nmatch = { path = \"/api/*\" }\nkey = [\"user\"]\nlimit = \"2/minute\"\n\n[[rule]]\nname = \"try\"\nlimit = \"1/minute\"\nmode = \"shadow\"\n";
    let src = toml_source(toml);
    let rs = RuleSet::build(vec![("api.toml".into(), src)], None, settings()).unwrap();
    let ann = [e("path", "/api/x"), e("user", "ann")];
    let out = rs
        .decide_except_now("api", &[&ann, &ann, &ann], &[1, 1, 1], 0, true, &[])
        .unwrap();
    let l: Vec<&Limited> = out
        .iter()
        .map(|o| match o {
            Outcome::Limited(l) => l,
            o => panic!("{o:?}"),
        })
        .collect();
    assert_eq!(
        l.iter().map(|l| l.ok).collect::<Vec<_>>(),
        [true, true, false]
    );
    assert_eq!(
        (l[2].name.as_ref(), l[2].requests_per_unit, l[2].unit),
        ("per-user", 2, Unit::Minute)
    );
    assert_eq!(l[0].headers.as_ref().unwrap().0, "\"per-user\";q=2;w=60");
    // Only the shadow rule matches elsewhere: OK, reported with its own limit.
    let other = [e("path", "/home")];
    let out = rs
        .decide_except_now("api", &[&other], &[1], 0, false, &[])
        .unwrap();
    assert!(matches!(&out[0], Outcome::Limited(l) if l.ok && l.name == "try"));
    let rows = rs.metric_rows(0);
    let per_user = rows.iter().find(|r| r.0 == "api.per-user").unwrap();
    assert_eq!(
        (
            per_user.2.count(HitResult::Allowed),
            per_user.2.count(HitResult::Denied)
        ),
        (2, 1)
    );
    let shadow = rows.iter().find(|r| r.0 == "api.try").unwrap();
    assert!(shadow.1);
    assert_eq!(shadow.2.count(HitResult::ShadowDenied), 3);
}

#[test]
fn a_toml_domain_reloads_in_place_keeping_state() {
    let toml = |n: u32| {
        format!("[[rule]]\nname = \"per-user\"\nkey = [\"user\"]\nlimit = \"{n}/minute\"\nalgorithm = \"fixed_window\"\n")
    };
    let build = |n: u32, old: Option<&RuleSet>| {
        let src = toml_source(toml(n));
        RuleSet::build(vec![("api.toml".into(), src)], old, settings()).unwrap()
    };
    let ann = [e("user", "ann")];
    let first = build(2, None);
    assert_eq!(
        first
            .decide_except_now("api", &[&ann, &ann], &[1, 1], 0, false, &[])
            .unwrap()
            .iter()
            .filter(|o| matches!(o, Outcome::Limited(l) if l.ok))
            .count(),
        2
    );
    // Raised to 3: the two hits of this minute still count, one more fits.
    let raised = build(3, Some(&first));
    let ok: Vec<bool> = raised
        .decide_except_now("api", &[&ann, &ann], &[1, 1], 1, false, &[])
        .unwrap()
        .iter()
        .map(|o| matches!(o, Outcome::Limited(l) if l.ok))
        .collect();
    assert_eq!(ok, [true, false]);
    // Counters follow the rule's name across the reload.
    let rows = raised.metric_rows(1);
    let per_user = &rows.iter().find(|r| r.0 == "api.per-user").unwrap().2;
    assert_eq!(per_user.count(HitResult::Allowed), 3);
    assert_eq!(per_user.count(HitResult::Denied), 1);
}

#[test]
fn detailed_metrics_name_the_domain_even_with_dots() {
    let yaml = "domain: edge.example\ndescriptors:\n  - key: ip\n    detailed_metric: true\n    rate_limit: {unit: second, requests_per_unit: 5}\n";
    let d = DescriptorTree::from_yaml("t.yaml", yaml).unwrap();
    let rs = RuleSet::build(vec![("t.yaml".into(), Source::Yaml(d))], None, settings()).unwrap();
    rs.decide_except_now(
        "edge.example",
        &[&[e("ip", "10.0.0.1")]],
        &[1],
        0,
        false,
        &[],
    )
    .unwrap();
    let mut out = String::new();
    for (rule, shadow, m, _) in rs.metric_rows(0) {
        crate::metrics::render_rule(&mut out, &rule, shadow, &m);
    }
    assert!(out.contains("rule=\"edge.example.ip\",shadow=\"false\",value=\"edge.example.ip_10.0.0.1\",result=\"allowed\"} 1"), "{out}");
}

#[test]
fn a_domain_split_across_files_is_one_domain() {
    let a = "domain: d\ndescriptors:\n  - key: ip\n    rate_limit: {unit: second, requests_per_unit: 1}\n";
    let b = "domain: d\ndescriptors:\n  - key: user\n    rate_limit: {unit: second, requests_per_unit: 2}\n    descriptors:\n      - key: ip\n        rate_limit: {unit: second, requests_per_unit: 3}\n";
    let src = |file: &str, yaml: &str| {
        (
            file.to_owned(),
            Source::Yaml(DescriptorTree::from_yaml(file, yaml).unwrap()),
        )
    };
    let build = |old: Option<&RuleSet>| {
        RuleSet::build(vec![src("a.yaml", a), src("b.yaml", b)], old, settings()).unwrap()
    };
    let rs = build(None);
    assert_eq!(rs.domain_count(), 1);
    let (ip, user) = ([e("ip", "1")], [e("user", "u")]);
    let nested = [e("user", "u"), e("ip", "1")];
    let t = 1_700_000_000 * SEC;
    assert_eq!(oks(&rs, &[&ip, &ip], 1, t), [true, false]);
    assert_eq!(oks(&rs, &[&user, &user, &user], 1, t), [true, true, false]);
    let n: &[Entry] = &nested;
    assert_eq!(oks(&rs, &[n; 4], 1, t), [true, true, true, false]);
    // A reload of both files keeps every limit's state: one policy, reloaded in place.
    let again = build(Some(&rs));
    assert_eq!(
        oks(&again, &[&ip, &user, &nested], 1, t),
        [false, false, false]
    );
    // Errors in a merged file name that file.
    let bad = b.replace(
        "requests_per_unit: 3",
        "requests_per_unit: 3, algorithm: nope",
    );
    let err = RuleSet::build(
        vec![src("a.yaml", a), src("b.yaml", &bad)],
        None,
        settings(),
    )
    .unwrap_err();
    assert!(
        err.to_string()
            .starts_with("b.yaml: descriptor 'd.user.ip': unknown algorithm"),
        "{err}"
    );
}
