//! Every validation error and warning, with the line, column and rule it names.

use sluicegate_policy::{Code, Diagnostic, PolicyDef, Severity};

fn errors(text: &str) -> Vec<Diagnostic> {
    match PolicyDef::parse(text, Some("rules.toml")) {
        Ok(_) => panic!("accepted:\n{text}"),
        Err(e) => e.diagnostics().to_vec(),
    }
}

/// The only error: its code, line, column and rule.
fn one(text: &str) -> (Code, usize, usize, Option<String>) {
    let all: Vec<Diagnostic> = errors(text)
        .into_iter()
        .filter(|d| d.severity == Severity::Error)
        .collect();
    assert_eq!(all.len(), 1, "{all:#?}");
    let d = &all[0];
    assert_eq!(d.file, "rules.toml");
    (d.code, d.line, d.column, d.rule.clone())
}

/// Rule "a" of 5/s followed by `rest`, from line 4 on.
fn rule_a(rest: &str) -> String {
    format!("[[rule]]\nname = \"a\"\nlimit = \"5/s\"\n{rest}")
}

fn rule(s: &str) -> Option<String> {
    Some(s.to_owned())
}

#[test]
fn unknown_attribute_syntax_in_match_and_key() {
    let text = &rule_a("match = { \"header:X-Key\" = \"*\" }\n");
    assert_eq!(one(text), (Code::BadAttribute, 4, 11, rule("a")));
    let d = &errors(text)[0];
    assert!(d.message.contains("header:x-key"), "{}", d.message);
    let text = "[[rule]]\nname = \"b\"\nlimit = \"5/s\"\nkey = [\"ip\", \"Tenant\"]\n";
    assert_eq!(one(text), (Code::BadAttribute, 4, 14, rule("b")));
    let text = "[[rule]]\nname = \"c\"\nlimit = \"5/s\"\nkey = [\"header:\"]\n";
    assert_eq!(one(text), (Code::BadAttribute, 4, 8, rule("c")));
}

#[test]
fn unknown_algorithm_in_rule_and_defaults() {
    let text = &rule_a("algorithm = \"gcra\"\n");
    assert_eq!(one(text), (Code::UnknownAlgorithm, 4, 13, rule("a")));
    assert!(
        errors(text)[0]
            .message
            .contains("token_bucket, leaky_bucket")
    );
    let text = "[defaults]\nalgorithm = \"leaky\"\n";
    assert_eq!(one(text), (Code::UnknownAlgorithm, 2, 13, None));
}

#[test]
fn bad_rate_points_at_the_character() {
    // "5/fortnight": the unit starts at byte 2 of the string, column 10 + 2.
    let text = "[[rule]]\nname = \"a\"\nlimit = \"5/fortnight\"\n";
    assert_eq!(one(text), (Code::BadRate, 3, 12, rule("a")));
    let text = "[[rule]]\nname = \"a\"\nlimit = \"10/second; 5/month\"\n";
    let (code, line, col, _) = one(text);
    assert_eq!((code, line), (Code::BadRate, 3));
    assert_eq!(col, 10 + "10/second; 5/".len());
    assert!(errors(text)[0].message.contains("month"));
    let text = "[[rule]]\nname = \"a\"\nlimit = \"\"\n";
    assert_eq!(one(text).0, Code::BadRate);
}

#[test]
fn bad_cidr_in_string_and_list() {
    let text = &rule_a("match = { ip = \"10.0.0.0/33\" }\n");
    assert_eq!(one(text), (Code::BadCidr, 4, 17, rule("a")));
    let text = &rule_a("match = { ip = [\"10.0.0.0/8\", \"10.1.2.3/16\"] }\n");
    assert_eq!(one(text), (Code::BadCidr, 4, 32, rule("a")));
    assert!(errors(text)[0].message.contains("10.1.0.0/16"));
}

#[test]
fn duplicate_rule_name() {
    let text =
        "[[rule]]\nname = \"a\"\nlimit = \"5/s\"\n\n[[rule]]\nname = \"a\"\nlimit = \"6/s\"\n";
    assert_eq!(one(text), (Code::DuplicateName, 6, 8, rule("a")));
    assert!(errors(text)[0].message.contains("line 2"));
}

#[test]
fn redis_backend_without_redis_table() {
    let text = &rule_a("backend = \"hybrid\"\n");
    assert_eq!(one(text), (Code::Redis, 4, 11, rule("a")));
    // From [defaults]: pointed at the default.
    let text = "[defaults]\nbackend = \"redis\"\n[[rule]]\nname = \"a\"\nlimit = \"5/s\"\n";
    assert_eq!(one(text), (Code::Redis, 2, 11, rule("a")));
    let ok = "[redis]\nurl = \"redis://127.0.0.1:6379\"\n[[rule]]\nname = \"a\"\nlimit = \"5/s\"\nbackend = \"redis\"\n";
    assert!(PolicyDef::parse(ok, None).is_ok());
    let bad_url = "[redis]\nurl = \"http://x\"\n";
    assert_eq!(one(bad_url), (Code::Redis, 2, 7, None));
    // Lease settings: 1 ms to an hour, pointed at the value.
    let text = "[redis]\nurl = \"redis://h\"\nlease_horizon_ms = 0\n";
    assert_eq!(one(text), (Code::BadValue, 3, 20, None));
    assert!(errors(text)[0].message.contains("lease_horizon_ms"));
    let text = "[redis]\nurl = \"redis://h\"\nlease_ttl_ms = 3600001\n";
    assert_eq!(one(text), (Code::BadValue, 3, 16, None));
    let ok = "[redis]\nurl = \"redis://h\"\nlease_horizon_ms = 1000\nlease_ttl_ms = 3600000\n";
    assert!(PolicyDef::parse(ok, None).is_ok());
    // An algorithm with no Redis script.
    let text = "[redis]\nurl = \"redis://h\"\n[[rule]]\nname = \"a\"\nlimit = \"5/s\"\nalgorithm = \"sliding_log\"\nbackend = \"redis\"\n";
    assert_eq!(one(text), (Code::Redis, 7, 11, rule("a")));
}

#[test]
fn limit_over_the_algorithms_bound() {
    // The sliding log holds at most 2^20 slots.
    let text = "[[rule]]\nname = \"a\"\nlimit = \"5/s; 2000000/hour\"\nalgorithm = \"fixed_window\"\n[[rule]]\nname = \"b\"\nlimit = \"2000000/hour\"\nalgorithm = \"sliding_log\"\n";
    let (code, line, col, r) = one(text);
    assert_eq!((code, line, col, r), (Code::Limit, 7, 10, rule("b")));
    // Nine limits: over Spec::MAX_LIMITS.
    let text = "[[rule]]\nname = \"a\"\nlimit = \"1/s;2/s;3/s;4/s;5/s;6/s;7/s;8/s;9/s\"\n";
    assert_eq!(one(text).0, Code::Limit);
    assert!(errors(text)[0].message.contains("8"));
    // The second quota is zero: pointed at it.
    let text = "[[rule]]\nname = \"a\"\nlimit = \"5/s; 0/hour\"\n";
    assert_eq!(one(text), (Code::BadRate, 3, 15, rule("a")));
    // A keyed sliding log.
    let text = &rule_a("algorithm = \"sliding_log\"\nkey = [\"ip\"]\n");
    assert_eq!(one(text), (Code::Limit, 4, 13, rule("a")));
    // A burst on a window.
    let text = "[[rule]]\nname = \"a\"\nlimit = \"5/s burst 9\"\nalgorithm = \"fixed_window\"\n";
    assert_eq!(one(text), (Code::Limit, 3, 10, rule("a")));
    // Stripes on a kind that cannot be striped, and a max delay on a non-shaper.
    let text = &rule_a("algorithm = \"fixed_window\"\nstripes = 4\n");
    assert_eq!(one(text), (Code::Limit, 5, 11, rule("a")));
    let text = &rule_a("max_delay_ms = 4\n");
    assert_eq!(one(text), (Code::Limit, 4, 16, rule("a")));
}

#[test]
fn bad_values_and_syntax() {
    let text = &rule_a("mode = \"dry-run\"\n");
    assert_eq!(one(text), (Code::BadValue, 4, 8, rule("a")));
    assert!(errors(text)[0].message.contains("enforce, shadow"));
    let text = &rule_a("capacity = 0\n");
    assert_eq!(one(text), (Code::BadValue, 4, 12, rule("a")));
    let text = &rule_a("on_error = \"retry\"\n");
    assert_eq!(one(text), (Code::BadValue, 4, 12, rule("a")));
    // Unknown field, missing limit, not TOML: the reader's message, located.
    let text = &rule_a("limits = \"6/s\"\n");
    let (code, line, _, _) = one(text);
    assert_eq!((code, line), (Code::Syntax, 4));
    let text = "[[rule]]\nname = \"a\"\n";
    assert_eq!(one(text).0, Code::Syntax);
    let text = "[[rule]]\nname = \"a\nlimit = 1\n";
    assert_eq!((one(text).0, one(text).1), (Code::Syntax, 2));
}

#[test]
fn every_error_is_reported_in_file_order() {
    let text = "[[rule]]\nname = \"a\"\nlimit = \"5/x\"\n[[rule]]\nname = \"b\"\nlimit = \"5/s\"\nalgorithm = \"nope\"\n";
    let all = errors(text);
    let at: Vec<(usize, Code)> = all.iter().map(|d| (d.line, d.code)).collect();
    assert_eq!(at, [(3, Code::BadRate), (7, Code::UnknownAlgorithm)]);
    let shown = PolicyDef::parse(text, Some("rules.toml"))
        .unwrap_err()
        .to_string();
    assert!(
        shown.starts_with("rules.toml:3:12: error: rule `a`: bad limit"),
        "{shown}"
    );
}

#[test]
fn warnings_never_matches_and_shadowed() {
    let text = r#"
[[rule]]
name = "a"
limit = "5/s"
match = { path = "api/*" }

[[rule]]
name = "b"
limit = "5/s"
match = { method = ["post"] }

[[rule]]
name = "c"
limit = "5/s"
match = { tenant = [] }

[[rule]]
name = "d"
limit = "5/s"
match = { path = "api/*" }
"#;
    let def = PolicyDef::parse(text, Some("rules.toml")).unwrap();
    let w: Vec<(Code, usize, usize, Option<String>)> = def
        .warnings()
        .iter()
        .map(|d| (d.code, d.line, d.column, d.rule.clone()))
        .collect();
    assert_eq!(
        w,
        [
            (Code::NeverMatches, 5, 18, rule("a")),
            (Code::NeverMatches, 10, 20, rule("b")),
            (Code::NeverMatches, 15, 20, rule("c")),
            (Code::Shadowed, 18, 8, rule("d")),
            (Code::NeverMatches, 20, 18, rule("d")),
        ]
    );
    assert!(
        def.warnings()
            .iter()
            .all(|d| d.severity == Severity::Warning)
    );
    assert!(def.warnings()[3].message.contains("rule `a` (line 3)"));
}

#[test]
fn the_issue_example_parses() {
    let text = include_str!("../../examples/policies/rules.toml");
    let def = PolicyDef::parse(text, Some("rules.toml")).unwrap();
    assert!(def.warnings().is_empty(), "{:#?}", def.warnings());
    assert!(def.rules().len() >= 4);
    assert!(def.redis().is_some());
}

/// A repeated rule is found among many others, whatever lies between, by what it
/// limits and matches (the same limit spelt another way included); a rule that
/// differs in any of that is not a repeat.
#[test]
fn repeats_found_among_many() {
    let mut t = String::new();
    let mut rule = |name: &str, body: &str| {
        t += &format!("[[rule]]\nname = \"{name}\"\n{body}\n");
    };
    for i in 0..50 {
        rule(
            &format!("t{i}"),
            &format!("limit = \"5/s\"\nmatch = {{ tenant = \"t{i}\" }}"),
        );
    }
    let same = "match = { tenant = \"t7\" }";
    rule("spelt", &format!("limit = \"5/second\"\n{same}"));
    rule("keyed", &format!("limit = \"5/s\"\nkey = [\"ip\"]\n{same}"));
    rule(
        "shadow",
        &format!("limit = \"5/s\"\nmode = \"shadow\"\n{same}"),
    );
    rule("other-limit", &format!("limit = \"6/s\"\n{same}"));
    rule(
        "window",
        &format!("limit = \"5/s\"\nalgorithm = \"fixed_window\"\n{same}"),
    );
    rule(
        "list",
        "limit = \"5/s\"\nmatch = { tenant = [\"t7\", \"t8\"] }",
    );
    rule(
        "list-again",
        "limit = \"5/s\"\nmatch = { tenant = [\"t7\", \"t8\"] }",
    );
    let def = PolicyDef::parse(&t, None).unwrap();
    let repeats: Vec<(Option<&str>, &str)> = def
        .warnings()
        .iter()
        .filter(|d| d.code == Code::Shadowed)
        .map(|d| (d.rule.as_deref(), d.message.as_str()))
        .collect();
    assert_eq!(repeats.len(), 2, "{repeats:?}");
    assert_eq!(repeats[0].0, Some("spelt"));
    assert!(repeats[0].1.contains("rule `t7`"), "{}", repeats[0].1);
    assert_eq!(repeats[1].0, Some("list-again"));
    assert!(repeats[1].1.contains("rule `list`"), "{}", repeats[1].1);
}
