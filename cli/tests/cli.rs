//! The `sluicegate` binary as a user runs it: exit statuses, the JSON schema,
//! gzip and standard input, malformed lines, lint's messages, explain's output,
//! charts.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use serde_json::Value;
use sluicegate_cli::input::Format;
use sluicegate_cli::synth::{Config, Entry, generate, write};

const RULES: &str = include_str!("../examples/shop-rules.toml");

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_sluicegate"))
}

fn run(args: &[&str], stdin: Option<&[u8]>) -> Output {
    let mut cmd = bin();
    cmd.args(args).stdout(Stdio::piped()).stderr(Stdio::piped());
    cmd.stdin(if stdin.is_some() {
        Stdio::piped()
    } else {
        Stdio::null()
    });
    let mut child = cmd.spawn().unwrap();
    if let Some(bytes) = stdin {
        let mut pipe = child.stdin.take().unwrap();
        pipe.write_all(bytes).unwrap();
    }
    child.wait_with_output().unwrap()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

struct Fixture {
    dir: tempfile::TempDir,
    malformed: u64,
    lines: u64,
}

impl Fixture {
    fn new() -> Fixture {
        let dir = tempfile::tempdir().unwrap();
        let entries = generate(&Config {
            lines: 8_000,
            seed: 3,
            malformed_per_10k: 30,
            ..Config::default()
        });
        let malformed = entries
            .iter()
            .filter(|e| matches!(e, Entry::Malformed(_)))
            .count() as u64;
        let mut log = Vec::new();
        write(&entries, Format::Combined, &mut log).unwrap();
        std::fs::write(dir.path().join("access.log"), &log).unwrap();
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        gz.write_all(&log).unwrap();
        std::fs::write(dir.path().join("access.log.gz"), gz.finish().unwrap()).unwrap();
        std::fs::write(dir.path().join("rules.toml"), RULES).unwrap();
        Fixture {
            dir,
            malformed,
            lines: 8_000,
        }
    }
    fn path(&self, name: &str) -> String {
        self.dir.path().join(name).to_str().unwrap().to_owned()
    }
}

fn replay_json(fx: &Fixture, log: &str, stdin: Option<&[u8]>) -> Value {
    let out = run(
        &["replay", "--policy", &fx.path("rules.toml"), "--json", log],
        stdin,
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let s = text(&out.stdout);
    assert_eq!(s.lines().count(), 1, "exactly one JSON object: {s}");
    serde_json::from_str(&s).unwrap()
}

#[test]
fn replay_json_schema_and_gzip_and_stdin_agree() {
    let fx = Fixture::new();
    let plain = replay_json(&fx, &fx.path("access.log"), None);
    let gz = replay_json(&fx, &fx.path("access.log.gz"), None);
    let bytes = std::fs::read(fx.path("access.log.gz")).unwrap();
    let stdin = replay_json(&fx, "-", Some(&bytes));
    // Only the samples' source names differ.
    let strip = |mut v: Value| {
        v["malformed"] = Value::Null;
        v
    };
    assert_eq!(strip(plain.clone()), strip(gz.clone()));
    assert_eq!(strip(plain.clone()), strip(stdin.clone()));
    assert_eq!(plain["malformed"][3]["line"], gz["malformed"][3]["line"]);
    assert_eq!(stdin["malformed"][0]["source"], "-");

    for field in ["lines", "parsed", "skipped", "allowed", "denied"] {
        assert!(plain[field].is_u64(), "{field}");
    }
    assert_eq!(plain["lines"], fx.lines);
    assert_eq!(plain["skipped"], fx.malformed);
    let n = |v: &Value| v.as_u64().unwrap();
    assert_eq!(
        n(&plain["parsed"]) + n(&plain["skipped"]),
        n(&plain["lines"])
    );
    assert_eq!(
        n(&plain["allowed"]) + n(&plain["denied"]),
        n(&plain["parsed"])
    );
    let samples = plain["malformed"].as_array().unwrap();
    assert_eq!(samples.len(), 10);
    assert!(
        samples
            .iter()
            .all(|s| s["line"].is_u64() && s["reason"].is_string() && s["text"].is_string())
    );
    let rules = plain["rules"].as_array().unwrap();
    let names: Vec<&str> = rules.iter().map(|r| r["name"].as_str().unwrap()).collect();
    assert_eq!(
        names,
        ["per-ip", "catalogue", "login", "promo", "site-ceiling"]
    );
    for r in rules {
        for field in [
            "matched",
            "allowed",
            "denied",
            "shadow_denied",
            "denied_by_other",
            "peak_offered_per_s",
            "peak_admitted_per_s",
        ] {
            assert!(r[field].is_u64(), "{field}");
        }
        for k in r["top_denied_keys"].as_array().unwrap() {
            assert!(k["key"].is_string() && k["denied"].is_u64());
        }
        let matched = n(&r["matched"]);
        let parts =
            n(&r["allowed"]) + n(&r["denied"]) + n(&r["shadow_denied"]) + n(&r["denied_by_other"]);
        assert_eq!(matched, parts, "{}", r["name"]);
    }
    assert_eq!(rules[1]["top_denied_keys"][0]["key"], "192.0.2.66");
    assert_eq!(rules[4]["mode"], "shadow");
    assert_eq!(rules[4]["denied"], 0);
}

#[test]
fn text_report_and_charts() {
    let fx = Fixture::new();
    let svg = fx.path("replay.svg");
    let png = fx.path("replay.png");
    for chart in [&svg, &png] {
        let out = run(
            &[
                "replay",
                "--policy",
                &fx.path("rules.toml"),
                "--chart",
                chart,
                &fx.path("access.log"),
            ],
            None,
        );
        assert!(out.status.success(), "{}", text(&out.stderr));
        let report = text(&out.stdout);
        assert!(
            report.starts_with(&format!("{} lines: ", fx.lines)),
            "{report}"
        );
        assert!(
            report.contains("rule catalogue (enforce, 120/minute, fixed_window, per ip, local)"),
            "{report}"
        );
        assert!(report.contains("192.0.2.66"));
        // Progress is for terminals: nothing but the summary line in a pipe.
        assert_eq!(
            text(&out.stderr).lines().count(),
            1,
            "{}",
            text(&out.stderr)
        );
    }
    let svg = std::fs::read_to_string(&svg).unwrap();
    assert!(
        svg.starts_with("<svg") && svg.contains("catalogue (120/minute, fixed_window, enforce)")
    );
    let png = std::fs::read(&png).unwrap();
    assert!(png.starts_with(b"\x89PNG") && png.len() > 20_000);
}

#[test]
fn exit_statuses() {
    let fx = Fixture::new();
    let code = |args: &[&str]| run(args, None).status.code();
    // Usage: 2.
    assert_eq!(code(&["replay", &fx.path("access.log")]), Some(2)); // no --policy
    assert_eq!(
        code(&["replay", "--policy", &fx.path("rules.toml")]),
        Some(2)
    ); // no log
    assert_eq!(
        code(&[
            "replay",
            "--policy",
            &fx.path("rules.toml"),
            "--field",
            "colour=x",
            "-"
        ]),
        Some(2)
    );
    assert_eq!(
        code(&["replay", "--policy", &fx.path("rules.toml"), "-", "-"]),
        Some(2)
    );
    assert_eq!(
        code(&["explain", &fx.path("rules.toml"), "--attr", "novalue"]),
        Some(2)
    );
    assert_eq!(code(&["frobnicate"]), Some(2));
    // Errors: 1, with the reason.
    let fails_saying = |args: &[&str], reason: &str| {
        let out = run(args, None);
        assert_eq!(out.status.code(), Some(1));
        let stderr = text(&out.stderr);
        assert!(stderr.contains(reason), "{stderr}");
    };
    let (rules, log) = (fx.path("rules.toml"), fx.path("access.log"));
    let missing = fx.path("missing.log");
    fails_saying(&["replay", "--policy", &rules, &missing], "missing.log");
    let bad = fx.path("bad.toml");
    std::fs::write(&bad, "[[rule]]\nname = \"a\"\nlimit = \"5/fortnight\"\n").unwrap();
    fails_saying(
        &["replay", "--policy", &bad, &log],
        "bad.toml:3:12: error: rule `a`",
    );
    // Success: 0.
    assert_eq!(code(&["replay", "--policy", &rules, &log]), Some(0));
    assert_eq!(code(&["--version"]), Some(0));
}

fn lint(dir: &Path, body: &str) -> (Option<i32>, String) {
    let p: PathBuf = dir.join("lint.toml");
    std::fs::write(&p, body).unwrap();
    let out = run(&["lint", p.to_str().unwrap()], None);
    (out.status.code(), text(&out.stdout))
}

#[test]
fn lint_messages_and_statuses() {
    let dir = tempfile::tempdir().unwrap();
    let (code, out) = lint(dir.path(), RULES);
    assert_eq!(code, Some(0));
    assert!(out.ends_with("lint.toml: 0 errors, 0 warnings\n"), "{out}");

    let errors = "[[rule]]\nname = \"a\"\nlimit = \"5/fortnight\"\n\n[[rule]]\nname = \"a\"\nlimit = \"1/s\"\nalgorithm = \"gcra\"\n";
    let (code, out) = lint(dir.path(), errors);
    assert_eq!(code, Some(1));
    assert!(out.contains("lint.toml:3:12: error: rule `a`: "), "{out}");
    assert!(
        out.contains("lint.toml:8:13: error: rule `a`: unknown algorithm"),
        "{out}"
    );
    assert!(
        out.lines()
            .any(|l| l.contains("lint.toml:6:") && l.contains("error")),
        "duplicate name: {out}"
    );

    // Warnings only: exit 0. A rule identical to an earlier one, and a sliding
    // window limit over half of its bound (1,048,575 per window).
    let warnings = "[[rule]]\nname = \"a\"\nlimit = \"1/s\"\n\n[[rule]]\nname = \"b\"\nlimit = \"1/s\"\n\n[[rule]]\nname = \"c\"\nlimit = \"600000/second\"\nalgorithm = \"sliding_window\"\nmatch = { path = \"/x\" }\n";
    let (code, out) = lint(dir.path(), warnings);
    assert_eq!(code, Some(0), "{out}");
    assert!(out.contains("warning: rule `b`"), "{out}");
    assert!(out.contains("lint.toml:11:10: warning: rule `c`: limit 1 of `600000/second` is over half of what sliding_window allows"), "{out}");
    assert!(out.ends_with("0 errors, 2 warnings\n"), "{out}");

    let out = run(
        &["lint", dir.path().join("nope.toml").to_str().unwrap()],
        None,
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stdout).contains("nope.toml: error: cannot read the rule file"));
}

#[test]
fn explain_shows_matching_rules_keys_limits_backends() {
    let fx = Fixture::new();
    let rules = fx.path("rules.toml");
    let out = run(
        &[
            "explain",
            &rules,
            "--attr",
            "ip=2001:db8:7::42",
            "--attr",
            "path=/login",
            "--attr",
            "method=POST",
        ],
        None,
    );
    assert!(out.status.success());
    let s = text(&out.stdout);
    assert!(s.starts_with("3 of 5 rules match\n"), "{s}");
    assert!(s.contains("  login: matches (line 24)\n      enforce 5/minute (sliding_window), key ip = \"2001:db8:7::\"\n      backend local, on_error local\n"), "{s}");
    assert!(s.contains("  catalogue: no match"), "{s}");
    assert!(
        s.contains("site-ceiling: matches") && s.contains("one limiter for every matching request"),
        "{s}"
    );
    let out = run(
        &["explain", &rules, "--json", "--attr", "path=/promo/spring"],
        None,
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let promo = v
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["name"] == "promo")
        .unwrap();
    assert_eq!(
        (promo["matches"].as_bool(), promo["limit"].as_str()),
        (Some(true), Some("100/second burst 100"))
    );
    assert_eq!(v[0]["key"], "\\0"); // per-ip without an ip attribute
}

#[test]
fn generate_log_is_seeded() {
    let args = [
        "generate-log",
        "--lines",
        "500",
        "--seed",
        "5",
        "--format",
        "json",
    ];
    let (a, b) = (run(&args, None), run(&args, None));
    assert!(a.status.success());
    assert_eq!(a.stdout, b.stdout);
    assert_eq!(a.stdout.iter().filter(|c| **c == b'\n').count(), 500);
}
