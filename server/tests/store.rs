//! `--store` in process: a domain defined both in a config file and in the
//! store is an error naming it; a store that cannot be reached is an error,
//! unless the snapshots of a previous run are there to start from; a rule
//! written through the admin API is enforced over gRPC (the full matrix, TLS
//! and the page are in scripts/test-admin).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use sluicegate_policy::store::{RuleRecord, Store};
use sluicegate_server::{AdminConfig, BindError, Bound, Config, StoreConfig};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

#[path = "common/request.rs"]
mod common_request;
use common_request::request;

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

/// One HTTP/1.1 request: (status, body).
async fn http(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[&str],
    body: &str,
) -> (u16, String) {
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    let mut req = format!(
        "{method} {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: {}\r\n",
        body.len()
    );
    for h in headers {
        req += h;
        req += "\r\n";
    }
    req += "\r\n";
    req += body;
    s.write_all(req.as_bytes()).await.unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).await.unwrap();
    let status = out[9..12].parse().unwrap();
    let body = out.split_once("\r\n\r\n").map_or("", |(_, b)| b).to_owned();
    (status, body)
}

#[tokio::test]
async fn a_rule_written_through_the_admin_api_is_enforced() {
    let d = dir("admin");
    let url = format!("sqlite:{}", d.join("rules.db").display());
    let tokens = d.join("tokens");
    std::fs::write(
        &tokens,
        "ops write 0123456789abcdef0123\nviewer read fedcba9876543210fedc\n",
    )
    .unwrap();
    let mut cfg = config(None, &url, None);
    cfg.admin = Some(AdminConfig {
        addr: "127.0.0.1:0".parse().unwrap(),
        tokens,
        tls: None,
    });
    let bound = Bound::bind(cfg).await.unwrap();
    let (grpc, admin) = (bound.grpc_addr().unwrap(), bound.admin_addr().unwrap());
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(bound.serve(async move {
        let _ = rx.await;
    }));
    let write = "Authorization: Bearer 0123456789abcdef0123";
    let read = "Authorization: Bearer fedcba9876543210fedc";
    let json = "Content-Type: application/json";
    let path = "/admin/v1/domains/api/rules/per-user";
    let rule = r#"{"key": ["user"], "limit": "1/hour", "algorithm": "fixed_window"}"#;
    assert_eq!(http(admin, "PUT", path, &[json], rule).await.0, 401);
    assert_eq!(http(admin, "PUT", path, &[read, json], rule).await.0, 403);
    let (status, body) = http(
        admin,
        "PUT",
        path,
        &[write, json],
        r#"{"limit": "1/fortnight"}"#,
    )
    .await;
    assert_eq!(status, 422, "{body}");
    assert!(body.contains(r#""field":"limit""#), "{body}");
    let (status, body) = http(admin, "PUT", path, &[write, json], rule).await;
    assert_eq!(status, 201, "{body}");
    assert!(
        body.contains(r#""updated_by":"ops""#) && body.contains(r#""version":1"#),
        "{body}"
    );
    assert_eq!(http(admin, "PUT", path, &[write, json], rule).await.0, 428);
    assert_eq!(
        http(admin, "PUT", path, &[write, json, "If-Match: \"9\""], rule)
            .await
            .0,
        412
    );
    // Enforced over gRPC within a second: one request per user per hour.
    let mut c = RateLimitServiceClient::connect(format!("http://{grpc}"))
        .await
        .unwrap();
    let start = Instant::now();
    loop {
        let r = c
            .should_rate_limit(request("api", &[&[("user", "alice")]], 1))
            .await
            .unwrap();
        if r.into_inner().overall_code == Code::OverLimit as i32 {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(1),
            "not enforced within 1 s"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let (status, body) = http(admin, "GET", "/admin/v1/audit", &[read], "").await;
    assert_eq!(status, 200);
    assert_eq!(body.matches(r#""action":"#).count(), 1, "{body}"); // only the create was saved
    let _ = tx.send(());
    task.await.unwrap().unwrap();
    let _ = std::fs::remove_dir_all(&d);
}
