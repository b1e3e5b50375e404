//! `sluicegate store import|export`, the binary itself, on SQLite and (when
//! `SLUICEGATE_TEST_POSTGRES_URL` names a database: scripts/test-store sets it)
//! PostgreSQL: a file imported and exported gives the same rules; the export
//! imported again changes nothing; an invalid file saves nothing and its errors
//! name file:line:column and the rule; `--by` and SLUICEGATE_USER write
//! `updated_by`; passwords in the store URL are never printed.

use std::process::{Command, Output};

fn run(args: &[&str], envs: &[(&str, &str)]) -> Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_sluicegate"));
    c.args(args).env_remove("SLUICEGATE_USER");
    for (k, v) in envs {
        c.env(k, v);
    }
    c.output().unwrap()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

const RULES: &str = r#"[defaults]
algorithm = "sliding_window"
capacity = 4096

[redis]
url = "redis://127.0.0.1:6379/1"
prefix = "app:"

[shared]
path = "cli-store-test"

[[rule]]
name = "login"
match = { method = ["POST", "PUT"], path = "/login" }
key = ["ip"]
limit = "5/minute"
backend = "redis"
on_error = "local"

[[rule]]
name = "api \"v2\""
match = { "header:x-tenant" = "a b" }
key = ["header:x-api-key"]
limit = "100/s; 5000/hour"
mode = "shadow"
capacity = 500
"#;

fn round_trip(url: &str, domain: &str) {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("rules.toml");
    std::fs::write(&file, RULES).unwrap();
    let file = file.to_str().unwrap();

    let out = run(
        &["store", "import", "--store", url, "--domain", domain, file],
        &[("SLUICEGATE_USER", "ci-bot")],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let said = text(&out.stderr);
    assert!(
        said.contains("2 created, 0 replaced, 0 deleted, 0 unchanged; tables replaced"),
        "{said}"
    );
    assert!(said.contains("by ci-bot"), "{said}");

    let out = run(
        &["store", "export", "--store", url, "--domain", domain],
        &[],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let exported = text(&out.stdout);
    // The export is the file, under a comment naming the domain.
    let (head, body) = exported.split_once("\n\n").unwrap();
    assert!(
        head.starts_with(&format!("# Domain \"{domain}\"")),
        "{head}"
    );
    assert_eq!(body, RULES);

    // Imported again (from standard input): nothing changes.
    let mut c = Command::new(env!("CARGO_BIN_EXE_sluicegate"));
    c.args([
        "store", "import", "--store", url, "--domain", domain, "--by", "alice", "-",
    ]);
    let mut child = c
        .stdin(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write;
    child
        .stdin
        .take()
        .unwrap()
        .write_all(exported.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("unchanged (version 1, 2 rules)"),
        "{}",
        text(&out.stderr)
    );

    // An edit: one rule dropped, one changed; `--by` names the importer.
    let edited = RULES.replace("5/minute", "10/minute");
    let edited = format!(
        "{}\n",
        edited[..edited.find("[[rule]]\nname = \"api").unwrap()].trim_end()
    );
    let edited = edited.as_str();
    std::fs::write(dir.path().join("rules.toml"), edited).unwrap();
    let out = run(
        &[
            "store", "import", "--store", url, "--domain", domain, "--by", "alice", file,
        ],
        &[("SLUICEGATE_USER", "ci-bot")],
    );
    let said = text(&out.stderr);
    assert!(
        said.contains("at version 2 by alice: 0 created, 1 replaced, 1 deleted, 0 unchanged"),
        "{said}"
    );
    let out = run(
        &["store", "export", "--store", url, "--domain", domain],
        &[],
    );
    assert!(text(&out.stdout).ends_with(edited), "{}", text(&out.stdout));

    // An invalid file: nothing saved, the errors located as `lint` locates them.
    std::fs::write(
        dir.path().join("rules.toml"),
        "[[rule]]\nname = \"x\"\nlimit = \"5/fortnight\"\n\n[[rule]]\nname = \"y\"\nlimit = \"1/s\"\nkey = [\"IP\"]\n",
    )
    .unwrap();
    let out = run(
        &["store", "import", "--store", url, "--domain", domain, file],
        &[],
    );
    assert_eq!(out.status.code(), Some(1));
    let said = text(&out.stderr);
    assert!(
        said.contains(&format!("{file}:3:12: error: rule `x`: bad limit")),
        "{said}"
    );
    assert!(
        said.contains(&format!("{file}:8:8: error: rule `y`")),
        "{said}"
    );
    let out = run(
        &["store", "export", "--store", url, "--domain", domain],
        &[],
    );
    assert!(text(&out.stdout).ends_with(edited), "unchanged");

    // No such domain.
    let out = run(
        &["store", "export", "--store", url, "--domain", "nope"],
        &[],
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("no domain `nope` in the store"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn sqlite_round_trip() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite:{}", dir.path().join("rules.db").display());
    round_trip(&url, "api");
}

#[test]
fn postgres_round_trip() {
    let Ok(url) = std::env::var("SLUICEGATE_TEST_POSTGRES_URL") else {
        assert!(
            std::env::var_os("SLUICEGATE_TEST_POSTGRES_REQUIRED").is_none(),
            "SLUICEGATE_TEST_POSTGRES_REQUIRED is set but SLUICEGATE_TEST_POSTGRES_URL is not"
        );
        eprintln!(
            "SLUICEGATE_TEST_POSTGRES_URL is unset: PostgreSQL test skipped (scripts/test-store runs it)"
        );
        return;
    };
    // A domain of its own in the shared database.
    let domain = format!(
        "cli-{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos()
    );
    round_trip(&url, &domain);
}

#[test]
fn bad_stores_are_named_without_their_password() {
    let out = run(
        &[
            "store",
            "export",
            "--store",
            "mysql://admin:s3cret@db/rules",
            "--domain",
            "d",
        ],
        &[],
    );
    assert_eq!(out.status.code(), Some(1));
    let said = text(&out.stderr);
    assert!(
        said.contains("admin:***@db") && !said.contains("s3cret"),
        "{said}"
    );
    // A PostgreSQL server that is not there: unavailable, the password hidden.
    let out = run(
        &[
            "store",
            "export",
            "--store",
            "postgres://admin:s3cret@127.0.0.1:1/rules?connect_timeout=2",
            "--domain",
            "d",
        ],
        &[],
    );
    assert_eq!(out.status.code(), Some(1));
    let said = text(&out.stderr);
    assert!(
        said.contains("unavailable") && !said.contains("s3cret"),
        "{said}"
    );
    let out = run(&["store", "import", "--domain", "d", "x.toml"], &[]);
    assert_eq!(out.status.code(), Some(2), "--store is required");
}
