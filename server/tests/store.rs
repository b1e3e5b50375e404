//! `--store` at start, in process: a domain defined both in a config file and
//! in the store is an error naming it; a store that cannot be reached is an
//! error, unless the snapshots of a previous run are there to start from.

use std::path::PathBuf;
use std::time::Duration;

use sluicegate_policy::store::{RuleRecord, Store};
use sluicegate_server::{BindError, Bound, Config, StoreConfig};

fn dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("sluicegate-store-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn config(config_path: Option<PathBuf>, url: &str, snapshot: Option<PathBuf>) -> Config {
    Config {
        config_path,
        grpc: "127.0.0.1:0".parse().unwrap(),
        http: "127.0.0.1:0".parse().unwrap(),
        reload_interval: Duration::ZERO,
        store: Some(StoreConfig {
            url: url.to_owned(),
            snapshot,
        }),
        ..Config::default()
    }
}

#[tokio::test]
async fn a_domain_in_both_the_config_and_the_store_is_an_error_naming_it() {
    let d = dir("both");
    let url = format!("sqlite:{}", d.join("rules.db").display());
    Store::open(&url)
        .unwrap()
        .create_rule("api", RuleRecord::new("a", "1/s"), None, "test")
        .unwrap();
    let files = d.join("config");
    std::fs::create_dir_all(&files).unwrap();
    std::fs::write(
        files.join("api.toml"),
        "[[rule]]\nname = \"b\"\nlimit = \"1/s\"\n",
    )
    .unwrap();
    let err = Bound::bind(config(Some(files.clone()), &url, None))
        .await
        .unwrap_err();
    assert!(matches!(err, BindError::Config(_)));
    let msg = err.to_string();
    assert!(
        msg.contains("api.toml") && msg.contains("domain 'api' is defined both"),
        "{msg}"
    );
    // Another domain in the file: both are served.
    std::fs::rename(files.join("api.toml"), files.join("web.toml")).unwrap();
    let bound = Bound::bind(config(Some(files), &url, None)).await.unwrap();
    bound.serve(async {}).await.unwrap();
    let _ = std::fs::remove_dir_all(&d);
}

#[tokio::test]
async fn an_unreachable_store_starts_from_its_snapshots_or_not_at_all() {
    let d = dir("snapshot");
    let db = d.join("rules.db");
    let url = format!("sqlite:{}", db.display());
    let snapshots = d.join("snapshots");
    Store::open(&url)
        .unwrap()
        .create_rule("api", RuleRecord::new("a", "1/s"), None, "test")
        .unwrap();
    // A first run writes the snapshots.
    let bound = Bound::bind(config(None, &url, Some(snapshots.clone())))
        .await
        .unwrap();
    bound.serve(async {}).await.unwrap();
    assert!(snapshots.join("api.json").exists());
    // The store gone (a path in a directory that does not exist): without
    // snapshots, an error naming the store; with them, the server starts
    // (an empty snapshot directory is an error too).
    let gone = format!(
        "sqlite:{}",
        d.join("missing-dir").join("rules.db").display()
    );
    let err = Bound::bind(config(None, &gone, None)).await.unwrap_err();
    assert!(err.to_string().contains("unavailable"), "{err}");
    let empty = d.join("empty");
    let err = Bound::bind(config(None, &gone, Some(empty)))
        .await
        .unwrap_err();
    assert!(err.to_string().contains("no domain snapshot"), "{err}");
    let bound = Bound::bind(config(None, &gone, Some(snapshots)))
        .await
        .unwrap();
    bound.serve(async {}).await.unwrap();
    let _ = std::fs::remove_dir_all(&d);
}
