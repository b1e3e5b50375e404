//! Policies from values go through the rule file's validator: each value is
//! accepted or rejected as the same value in a file is, with the same message;
//! the finding names the rule and field instead of a line.

use sluicegate::Kind;
use sluicegate_policy::{
    Backend, Diagnostic, Mode, OnError, Policy, PolicyDef, RedisSettings, RuleBuilder, RuleDef,
    Severity,
};

/// Every finding without its position (a line for text, none for values).
fn unlocated(d: &[Diagnostic]) -> Vec<Diagnostic> {
    d.iter()
        .map(|d| Diagnostic {
            file: String::new(),
            line: 0,
            column: 0,
            ..d.clone()
        })
        .collect()
}

/// The same rule as text (with a `[redis]` table) and as values: the same verdict.
fn same(toml_rule: &str, rule: RuleBuilder) {
    let text = format!("[redis]\nurl = \"redis://h\"\n[[rule]]\nname = \"r\"\n{toml_rule}\n");
    let file = PolicyDef::parse(&text, None);
    let values = PolicyDef::builder()
        .redis(RedisSettings::new("redis://h"))
        .rule(rule)
        .build();
    match (file, values) {
        (Ok(f), Ok(v)) => {
            assert_eq!(
                unlocated(f.warnings()),
                unlocated(v.warnings()),
                "{toml_rule}"
            );
            let (f, v) = (&f.rules()[0], &v.rules()[0]);
            assert_eq!(
                (f.spec(), f.key(), f.backend(), f.mode(), f.on_error()),
                (v.spec(), v.key(), v.backend(), v.mode(), v.on_error()),
                "{toml_rule}"
            );
            assert_eq!((f.capacity(), f.stripes()), (v.capacity(), v.stripes()));
            assert_eq!((f.line(), v.line()), (4, 0), "{toml_rule}");
        }
        (Err(f), Err(v)) => {
            assert_eq!(
                unlocated(f.diagnostics()),
                unlocated(v.diagnostics()),
                "{toml_rule}"
            );
            assert!(f.diagnostics().iter().all(|d| d.line > 0), "{toml_rule}");
            assert!(v.diagnostics().iter().all(|d| d.line == 0), "{toml_rule}");
        }
        (f, v) => panic!("{toml_rule}: file {f:?}, values {v:?}"),
    }
}

fn r() -> RuleBuilder {
    RuleDef::builder("r")
}

#[test]
fn every_field_is_validated_as_in_a_file() {
    same("limit = \"5/minute\"", r().limit("5/minute"));
    same("limit = \"5/fortnight\"", r().limit("5/fortnight"));
    same("limit = \"0/s\"", r().limit("0/s"));
    same(
        "limit = \"1/s; 10/minute\"\nkey = [\"ip\"]",
        r().limit("1/s; 10/minute").key(["ip"]),
    );
    same(
        "limit = \"1/s\"\nkey = [\"IP\"]",
        r().limit("1/s").key(["IP"]),
    );
    same(
        "limit = \"1/s\"\nkey = [\"ip\", \"ip\"]",
        r().limit("1/s").key(["ip", "ip"]),
    );
    same(
        "limit = \"1/s\"\nalgorithm = \"gcra\"",
        r().limit("1/s").algorithm("gcra"),
    );
    same(
        "limit = \"1/s\"\nalgorithm = \"sliding_log\"\nkey = [\"ip\"]",
        r().limit("1/s").algorithm(Kind::SlidingLog).key(["ip"]),
    );
    same(
        "limit = \"1/s\"\nbackend = \"memcached\"",
        r().limit("1/s").backend("memcached"),
    );
    same(
        "limit = \"1/s\"\nbackend = \"hybrid\"",
        r().limit("1/s").backend(Backend::Hybrid),
    );
    same(
        "limit = \"1/s\"\nmode = \"dry\"",
        r().limit("1/s").mode("dry"),
    );
    same(
        "limit = \"1/s\"\nmode = \"shadow\"",
        r().limit("1/s").mode(Mode::Shadow),
    );
    same(
        "limit = \"1/s\"\non_error = \"open\"",
        r().limit("1/s").on_error(OnError::Open),
    );
    same(
        "limit = \"1/s\"\ncapacity = 0",
        r().limit("1/s").capacity(0),
    );
    same(
        "limit = \"1/s\"\ncapacity = 5000000000",
        r().limit("1/s").capacity(5_000_000_000),
    );
    same("limit = \"1/s\"\nstripes = 4", r().limit("1/s").stripes(4));
    same(
        "limit = \"1/s\"\nstripes = 4\nkey = [\"ip\"]",
        r().limit("1/s").stripes(4).key(["ip"]),
    );
    same(
        "limit = \"1/s\"\nstripes = 1000",
        r().limit("1/s").stripes(1000),
    );
    same(
        "limit = \"1/s\"\nalgorithm = \"shaper\"\nmax_delay_ms = 100",
        r().limit("1/s").algorithm("shaper").max_delay_ms(100),
    );
    same(
        "limit = \"1/s\"\nmax_delay_ms = 100",
        r().limit("1/s").max_delay_ms(100),
    );
    same(
        "limit = \"1/s\"\nmatch = { ip = \"10.0.0.300\" }",
        r().limit("1/s").matching("ip", "10.0.0.300"),
    );
    same(
        "limit = \"1/s\"\nmatch = { ip = [\"10.0.0.1/8\", \"::1\"] }",
        r().limit("1/s").matching_any("ip", ["10.0.0.1/8", "::1"]),
    );
    same(
        "limit = \"1/s\"\nmatch = { path = \"login\", method = \"post\" }",
        r().limit("1/s")
            .matching("path", "login")
            .matching("method", "post"),
    );
    same(
        "limit = \"1/s\"\nmatch = { method = [] }",
        r().limit("1/s")
            .matching_any("method", Vec::<String>::new()),
    );
    same(
        "limit = \"1/s\"\nmatch = { Tenant = \"a\" }",
        r().limit("1/s").matching("Tenant", "a"),
    );
    // The lint `sluicegate lint` once added on its own: over half the bound.
    same("limit = \"4294967295/s\"", r().limit("4294967295/s"));
}

#[test]
fn defaults_and_redis_are_validated_as_in_a_file() {
    let text = "[defaults]\nalgorithm = \"gcra\"\ncapacity = 0\nipv6_prefix = 200\nmode = \"x\"\n";
    let file = PolicyDef::parse(text, None).unwrap_err();
    let values = PolicyDef::builder()
        .default_algorithm("gcra")
        .default_capacity(0)
        .ipv6_prefix(200)
        .default_mode("x")
        .build()
        .unwrap_err();
    let mut f = unlocated(file.diagnostics());
    let mut v = unlocated(values.diagnostics());
    f.sort_by(|a, b| a.message.cmp(&b.message));
    v.sort_by(|a, b| a.message.cmp(&b.message));
    assert_eq!(f, v);
    assert_eq!(f.len(), 4);

    let file = PolicyDef::parse("[redis]\nurl = \"http://x\"\n", None).unwrap_err();
    let values = PolicyDef::builder()
        .redis(RedisSettings::new("http://x"))
        .build()
        .unwrap_err();
    assert_eq!(
        unlocated(file.diagnostics()),
        unlocated(values.diagnostics())
    );
}

#[test]
fn findings_name_the_rule_and_field() {
    let err = PolicyDef::builder()
        .source("tenants")
        .rule(r().limit("1/s"))
        .rule(
            RuleDef::builder("t2")
                .limit("1/s")
                .matching("ip", "10.0.0.0/33"),
        )
        .rule(r().limit("2/s"))
        .build()
        .unwrap_err();
    let text: Vec<String> = err
        .diagnostics()
        .iter()
        .filter(|d| d.severity == Severity::Error)
        .map(ToString::to_string)
        .collect();
    assert_eq!(
        text,
        [
            "tenants: error: rule `t2`, field `match.ip`: `10.0.0.0/33`: the prefix length must be 0 to 32",
            "tenants: error: rule `r`, field `name`: a rule with this name is already defined",
        ]
    );
}

#[test]
fn identical_rules_are_found_among_many() {
    let rules = (0..2000).map(|i| {
        RuleDef::builder(format!("t{i}"))
            .matching("tenant", format!("t{}", i % 1000))
            .limit("5/s")
    });
    let def = PolicyDef::builder().rules(rules).build().unwrap();
    assert_eq!(def.warnings().len(), 1000);
    assert!(
        def.warnings()[0]
            .message
            .starts_with("identical to rule `t0`: ")
    );
    assert_eq!(def.warnings()[0].rule.as_deref(), Some("t1000"));
}

#[test]
fn a_file_round_trips_through_its_builder() {
    let text = r#"
[defaults]
ipv6_prefix = 56
[state]
memory = "3 MiB"
[redis]
url = "redis://h"
prefix = "p:"
lease_ttl_ms = 500
[[rule]]
name = "a"
match = { path = ["/api/*", "/v2/**"], ip = "10.0.0.0/8", "header:x-k" = "*" }
key = ["ip", "header:x-k"]
limit = "5/s burst 10; 100/hour"
algorithm = "token_bucket"
backend = "hybrid"
on_error = "closed"
mode = "shadow"
capacity = 1234
[[rule]]
name = "b"
limit = "1000/s"
stripes = 8
[[rule]]
name = "c"
limit = "10/s"
algorithm = "shaper"
max_delay_ms = 300
"#;
    let def = PolicyDef::parse(text, Some("f.toml")).unwrap();
    let again = def.to_builder().build().unwrap();
    assert_eq!(again.source(), "f.toml");
    assert_eq!(again.redis(), def.redis());
    assert_eq!((again.ipv6_prefix(), again.state()), (56, def.state()));
    assert_eq!(def.state().memory, 3 << 20);
    for (a, b) in def.rules().iter().zip(again.rules()) {
        assert_eq!(a.to_builder(), b.to_builder());
        assert_eq!(a.spec(), b.spec());
        let req = [("path", "/api/x"), ("ip", "10.1.1.1"), ("header:x-k", "v")];
        assert_eq!(a.matches(&req), b.matches(&req));
    }
    assert!(def.rules()[0].matches(&[("path", "/api/x"), ("ip", "10.1.1.1"), ("header:x-k", "v")]));
}

#[test]
fn a_policy_from_values_checks_and_reloads() {
    let def = |limit: &str| {
        PolicyDef::builder()
            .rule(
                RuleDef::builder("per-tenant")
                    .key(["tenant"])
                    .limit(limit)
                    .algorithm(Kind::FixedWindow),
            )
            .build()
            .unwrap()
    };
    let p = Policy::from_def(def("2/minute")).unwrap();
    let t = [("tenant", "acme")];
    assert!(p.check_n_at(&t, 2, 0).allowed());
    assert!(!p.check_n_at(&t, 1, 0).allowed());
    let r = p.reload_from_def(def("3/minute")).unwrap();
    assert_eq!((r.kept, r.changed), (0, 1));
    assert!(p.check_n_at(&t, 1, 0).allowed());
    assert!(!p.check_n_at(&t, 1, 0).allowed());
    // A bad definition cannot be made: a reload only ever gets a valid one.
    assert!(
        PolicyDef::builder()
            .rule(RuleDef::builder("x").limit("nope"))
            .build()
            .is_err()
    );
}
