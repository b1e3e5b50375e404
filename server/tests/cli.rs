//! The binary's command line: the start command and its flags are a contract
//! with every deployment (issue 28 kept them while it changed what is under
//! them), and the binary is built with its allocator.

use std::process::Command;

fn server() -> Command {
    Command::new(env!("CARGO_BIN_EXE_sluicegate-server"))
}

/// The long flags `--help` lists, in its order.
fn flags() -> Vec<String> {
    let out = server().arg("--help").output().expect("run --help");
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8(out.stdout).expect("utf-8 help");
    text.lines()
        .filter_map(|l| {
            let l = l.trim_start();
            let rest = l
                .strip_prefix("-h, ")
                .or_else(|| l.strip_prefix("-V, "))
                .unwrap_or(l);
            let flag = rest.strip_prefix("--")?;
            Some(
                flag.split([' ', '=', '<'])
                    .next()
                    .unwrap_or(flag)
                    .to_owned(),
            )
        })
        .collect()
}

#[test]
fn the_flags_are_the_ones_deployments_use() {
    assert_eq!(
        flags(),
        [
            "config",
            "store",
            "store-snapshot",
            "admin",
            "admin-tokens",
            "grpc-tls-cert",
            "grpc-tls-key",
            "grpc-client-ca",
            "admin-tls-cert",
            "admin-tls-key",
            "admin-client-ca",
            "http-tls-cert",
            "http-tls-key",
            "http-client-ca",
            "grpc",
            "http",
            "reload-interval",
            "keys-per-limit",
            "state-memory",
            "max-hits-addend",
            "response-headers",
            "help",
            "version",
        ]
    );
}

#[test]
fn a_usage_error_exits_2_before_binding_anything() {
    let out = server().arg("--no-such-flag").output().expect("run");
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let out = server()
        .args([
            "--config",
            "/nonexistent/sluicegate",
            "--grpc",
            "127.0.0.1:0",
        ])
        .args(["--http", "127.0.0.1:0"])
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("invalid configuration"));
}

/// The default build's allocator (feature `mimalloc`) is linked into the binary.
#[cfg(feature = "mimalloc")]
#[test]
fn the_binary_allocates_with_mimalloc() {
    let bin = std::fs::read(env!("CARGO_BIN_EXE_sluicegate-server")).expect("read the binary");
    let needle = b"mi_malloc_aligned";
    assert!(bin.windows(needle.len()).any(|w| w == needle));
}
