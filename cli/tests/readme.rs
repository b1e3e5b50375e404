//! The `$ sluicegate …` sessions in the READMEs (the repository's and this
//! crate's), run as shown: each command must succeed, and every output line the
//! README shows must start a line the command printed, in that order (a line
//! reading `...` stands for lines left out). The commands run in a scratch
//! directory holding the rule file they name, as they would from a checkout.

use std::path::{Path, PathBuf};
use std::process::Command;

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// One `$ sluicegate …` line and the output lines shown under it.
struct Session {
    line: usize,
    args: Vec<String>,
    shown: Vec<String>,
}

fn sessions(readme: &str) -> Vec<Session> {
    let text = std::fs::read_to_string(workspace().join(readme)).unwrap();
    let mut out: Vec<Session> = Vec::new();
    let mut in_console = false;
    for (i, line) in text.lines().enumerate() {
        if line.starts_with("```") {
            in_console = line == "```console";
            continue;
        }
        if !in_console {
            continue;
        }
        if let Some(cmd) = line.strip_prefix("$ ") {
            // A shell comment ends the command.
            let cmd = cmd.split(" #").next().unwrap();
            let mut words = cmd.split_whitespace().map(str::to_owned);
            assert_eq!(
                words.next().as_deref(),
                Some("sluicegate"),
                "{readme}:{}",
                i + 1
            );
            out.push(Session {
                line: i + 1,
                args: words.collect(),
                shown: Vec::new(),
            });
        } else if let Some(s) = out.last_mut() {
            if line.trim() != "..." {
                s.shown.push(line.trim_end().to_owned());
            }
        }
    }
    assert!(!out.is_empty(), "{readme} shows no `$ sluicegate` session");
    out
}

fn run_sessions(readme: &str) {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("cli/examples")).unwrap();
    std::fs::copy(
        workspace().join("cli/examples/shop-rules.toml"),
        dir.path().join("cli/examples/shop-rules.toml"),
    )
    .unwrap();
    // A replay needs the log the README's first session generates; the
    // repository README starts at `lint`, so make the same log for it.
    let generate = Command::new(env!("CARGO_BIN_EXE_sluicegate"))
        .args(["generate-log", "--lines", "20000", "-o", "access.log"])
        .current_dir(dir.path())
        .output()
        .unwrap();
    assert!(generate.status.success());
    for s in sessions(readme) {
        let out = Command::new(env!("CARGO_BIN_EXE_sluicegate"))
            .args(&s.args)
            .current_dir(dir.path())
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{readme}:{}: sluicegate {:?} failed: {}",
            s.line,
            s.args,
            String::from_utf8_lossy(&out.stderr)
        );
        let mut printed = stdout.lines();
        for shown in &s.shown {
            assert!(
                printed.any(|p| p.starts_with(shown.as_str())),
                "{readme}:{}: `{shown}` is not printed (in order) by sluicegate {:?}:\n{stdout}",
                s.line,
                s.args
            );
        }
    }
}

#[test]
fn repository_readme_sessions() {
    run_sessions("README.md");
}

#[test]
fn cli_readme_sessions() {
    run_sessions("cli/README.md");
}
