//! The Prometheus text exposition parses (format 0.0.4) and counts what happened.

use std::collections::{HashMap, HashSet};

use sluicegate_policy::Policy;

/// Checks every line of `text` against the text format; returns the samples as
/// `name{labels}` → value.
fn parse(text: &str) -> HashMap<String, f64> {
    assert!(text.ends_with('\n'));
    let mut typed: HashSet<String> = HashSet::new();
    let mut helped: HashSet<String> = HashSet::new();
    let mut samples = HashMap::new();
    let metric_name = |s: &str| {
        !s.is_empty()
            && s.chars()
                .next()
                .is_some_and(|c| c.is_ascii_alphabetic() || c == '_' || c == ':')
            && s.chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
    };
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# HELP ") {
            let (name, help) = rest.split_once(' ').unwrap();
            assert!(metric_name(name) && !help.is_empty(), "{line}");
            assert!(helped.insert(name.to_owned()), "HELP twice: {line}");
            continue;
        }
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').unwrap();
            assert!(metric_name(name), "{line}");
            assert!(["counter", "gauge"].contains(&kind), "{line}");
            assert!(typed.insert(name.to_owned()), "TYPE twice: {line}");
            continue;
        }
        assert!(!line.starts_with('#'), "{line}");
        // name{label="value",...} number
        let (series, value) = line.rsplit_once(' ').unwrap();
        let value: f64 = value.parse().unwrap_or_else(|_| panic!("value in {line}"));
        // A series without labels (`sluicegate_policy_state_bytes 123`) is valid.
        let (name, labels) = series.split_once('{').unwrap_or((series, "}"));
        assert!(
            metric_name(name) && typed.contains(name),
            "undeclared: {line}"
        );
        let labels = labels.strip_suffix('}').unwrap();
        let mut rest = labels;
        while !rest.is_empty() {
            let (label, after) = rest.split_once("=\"").unwrap();
            assert!(metric_name(label), "{line}");
            // The value runs to the first unescaped quote.
            let mut end = None;
            let mut escaped = false;
            for (i, c) in after.char_indices() {
                match (escaped, c) {
                    (false, '\\') => escaped = true,
                    (false, '"') => {
                        end = Some(i);
                        break;
                    }
                    (true, c) => {
                        assert!(['\\', '"', 'n'].contains(&c), "bad escape in {line}");
                        escaped = false;
                    }
                    _ => {}
                }
            }
            let end = end.unwrap_or_else(|| panic!("unterminated label in {line}"));
            rest = &after[end + 1..];
            rest = rest.strip_prefix(',').unwrap_or(rest);
        }
        assert!(samples.insert(series.to_owned(), value).is_none(), "{line}");
    }
    samples
}

#[test]
fn exposition_parses_and_counts() {
    let p = Policy::from_toml(
        r#"
[[rule]]
name = "login \"quoted\" \\ name"
key = ["ip"]
limit = "1/minute"

[[rule]]
name = "trial"
limit = "1/minute"
mode = "shadow"
"#,
    )
    .unwrap();
    for ip in ["192.0.2.1", "192.0.2.1", "192.0.2.2"] {
        p.check_n_at(&[("ip", ip)], 1, 0);
    }
    p.reload_from_toml("[[rule]]\nname = \"x\"\nlimit = \"1/s\"\nalgorithm = \"\nbad\"\n")
        .unwrap_err();
    let text = p.metrics_text_at(0);
    let s = parse(&text);
    let login = r#"rule="login \"quoted\" \\ name""#;
    let get = |k: &str| *s.get(k).unwrap_or_else(|| panic!("{k} missing in\n{text}"));
    assert_eq!(
        get(&format!(
            "sluicegate_policy_requests_total{{{login},outcome=\"allowed\"}}"
        )),
        2.0
    );
    assert_eq!(
        get(&format!(
            "sluicegate_policy_requests_total{{{login},outcome=\"denied\"}}"
        )),
        1.0
    );
    assert_eq!(get(&format!("sluicegate_policy_keys{{{login}}}")), 2.0);
    assert_eq!(
        get("sluicegate_policy_requests_total{rule=\"trial\",outcome=\"allowed\"}"),
        1.0
    );
    assert_eq!(
        get("sluicegate_policy_requests_total{rule=\"trial\",outcome=\"shadow_denied\"}"),
        2.0
    );
    assert_eq!(
        get("sluicegate_policy_reloads_total{result=\"error\"}"),
        1.0
    );
    assert_eq!(get("sluicegate_policy_reloads_total{result=\"ok\"}"), 0.0);
    let err = s
        .iter()
        .find(|(k, _)| k.starts_with("sluicegate_policy_last_reload_error{"))
        .unwrap();
    assert_eq!(*err.1, 1.0);
    assert!(err.0.contains("<policy>:"), "{}", err.0);
}
