//! Unit tests of the YAML reader (a file of its own to keep yaml.rs short).

use super::*;

const NESTED: &str = r#"
domain: edge
descriptors:
  - key: remote_address
    rate_limit: {unit: second, requests_per_unit: 10}
  - key: path
    value: /login
    rate_limit: {unit: minute, requests_per_unit: 5, name: login}
    descriptors:
      - key: user
        rate_limit: {unit: hour, requests_per_unit: 100}
  - key: path
    value: "/api/*"
    rate_limit: {unit: second, requests_per_unit: 50}
  - key: path
    rate_limit: {unlimited: true}
  - key: tenant
    value: free
    shadow_mode: true
    detailed_metric: true
    rate_limit: {unit: day, requests_per_unit: 1000, replaces: [{name: login}]}
"#;

fn nested() -> DescriptorTree {
    DescriptorTree::from_yaml("nested.yaml", NESTED).unwrap()
}

#[test]
fn precedence_exact_then_wildcard_then_key_only() {
    let d = nested();
    assert_eq!(
        d.resolve([("path", "/login")]).unwrap().full_key,
        "edge.path_/login"
    );
    assert_eq!(
        d.resolve([("path", "/api/x")]).unwrap().full_key,
        "edge.path_/api/*"
    );
    let other = d.resolve([("path", "/other")]).unwrap();
    assert_eq!(
        (other.full_key.as_str(), &other.kind),
        ("edge.path", &LimitKind::Unlimited)
    );
    assert_eq!(
        d.resolve([("remote_address", "1.2.3.4")]).unwrap().full_key,
        "edge.remote_address"
    );
}

#[test]
fn limit_applies_only_at_the_descriptors_depth() {
    let d = nested();
    assert_eq!(
        d.resolve([("path", "/login"), ("user", "bob")])
            .unwrap()
            .full_key,
        "edge.path_/login.user"
    );
    // Deeper than the tree: the limit at depth 1 does not apply to a depth-2 descriptor.
    assert!(d
        .resolve([("remote_address", "1.2.3.4"), ("user", "bob")])
        .is_none());
    // A missing step stops the walk.
    assert!(d.resolve([("path", "/login"), ("nope", "x")]).is_none());
    assert!(d.resolve([("unknown", "x")]).is_none());
    assert!(d.resolve(std::iter::empty::<(&str, &str)>()).is_none());
}

#[test]
fn flags_name_and_replaces_are_kept() {
    let d = nested();
    let t = d.resolve([("tenant", "free")]).unwrap();
    assert!(t.shadow && t.detailed_metric);
    assert_eq!(t.replaces, vec!["login".to_owned()]);
    let l = d.resolve([("path", "/login")]).unwrap();
    assert_eq!(l.name, "login");
    assert_eq!(
        l.kind,
        LimitKind::Rate {
            requests_per_unit: 5,
            unit: Unit::Minute,
            algorithm: None
        }
    );
}

#[test]
fn wildcards_match_like_upstream() {
    let p = |s: &str| s.split('*').map(str::to_owned).collect::<Vec<_>>();
    assert!(wildcard_match(&p("/api/*"), "/api/"));
    assert!(wildcard_match(&p("/api/*"), "/api/v1/x"));
    assert!(!wildcard_match(&p("/api/*"), "/ap"));
    assert!(wildcard_match(&p("a*b*c"), "a-b-c"));
    assert!(wildcard_match(&p("a*b*c"), "abc"));
    assert!(!wildcard_match(&p("a*b*c"), "ac"));
    assert!(!wildcard_match(&p("ab*ba"), "aba"));
    assert!(wildcard_match(&p("exact"), "exact"));
}

fn error_of(yaml: &str) -> String {
    DescriptorTree::from_yaml("bad.yaml", yaml)
        .unwrap_err()
        .to_string()
}

#[test]
fn invalid_files_are_refused_with_the_reason() {
    let cases = [
            ("descriptors: []\n", "missing field `domain`"),
            ("domain: ''\n", "empty domain"),
            ("domain: d\ndescriptors:\n  - value: x\n", "missing field `key`"),
            ("domain: d\ndescriptors:\n  - key: ''\n", "empty key"),
            ("domain: d\ndescriptors:\n  - key: k\n    colour: red\n", "unknown field `colour`"),
            ("domain: d\ndescriptors:\n  - key: k\n  - key: k\n", "duplicate descriptor composite key 'd.k'"),
            ("domain: d\ndescriptors:\n  - {key: k, value: v}\n  - {key: k, value: v}\n", "duplicate descriptor composite key 'd.k_v'"),
            ("domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: fortnight, requests_per_unit: 1}\n", "invalid rate limit unit 'fortnight'"),
            ("domain: d\ndescriptors:\n  - key: k\n    rate_limit: {requests_per_unit: 1}\n", "invalid rate limit unit ''"),
            ("domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unlimited: true, unit: second}\n", "should not specify rate limit unit when unlimited"),
            ("domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1, replaces: [{name: ''}]}\n", "empty replaces entry"),
            ("domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1, name: a, replaces: [{name: a}]}\n", "same descriptor"),
            ("domain: d\ndescriptors:\n  - key: k\n    quota_mode: true\n", "'quota_mode' is not supported"),
            ("domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: -1}\n", "invalid type: integer `-1`, expected u32"),
            ("domain: d\ndescriptors: [\n", "bad.yaml"),
        ];
    for (yaml, want) in cases {
        let got = error_of(yaml);
        assert!(got.contains(want), "{yaml:?}: {got:?} lacks {want:?}");
        assert!(got.starts_with("bad.yaml: "), "{got}");
    }
}

#[test]
fn parse_errors_carry_line_and_column() {
    let got = error_of("domain: d\ndescriptors:\n  - key: k\n    colour: red\n");
    assert!(got.contains("line 4 column"), "{got}");
}

#[test]
fn units_cover_upstreams_and_ignore_case() {
    for (name, secs) in [
        ("SECOND", 1),
        ("minute", 60),
        ("Hour", 3600),
        ("day", 86_400),
        ("week", 604_800),
        ("month", 2_592_000),
        ("year", 31_536_000),
    ] {
        let yaml = format!("domain: d\ndescriptors:\n  - key: k\n    rate_limit: {{unit: {name}, requests_per_unit: 3}}\n");
        let d = DescriptorTree::from_yaml("u.yaml", &yaml).unwrap();
        let LimitKind::Rate { unit, .. } = d.limits()[0].kind else {
            panic!("not a rate")
        };
        assert_eq!(unit_seconds(unit), Some(secs), "{name}");
    }
}
