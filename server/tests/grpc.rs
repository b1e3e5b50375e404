//! End to end through a real server on 127.0.0.1 (free ports) with tonic clients:
//! envoy-types' generated RLS client, tonic-health's health client, and a plain
//! HTTP/1.1 GET for /metrics. Each test stops the server it started.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitResponse;
use sluicegate_server::{Bound, Config, ServiceSettings};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tonic::transport::Channel;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;
use tonic_health::pb::HealthCheckRequest;

#[path = "common/request.rs"]
mod common_request;
use common_request::request;

#[path = "../../redis/tests/common/mod.rs"]
mod redis_common;

/// Daily windows: a test never straddles a window boundary in practice.
const EDGE: &str = r#"
domain: edge
descriptors:
  - key: remote_address
    rate_limit: {unit: day, requests_per_unit: 3}
  - key: path
    value: /login
    rate_limit: {unit: day, requests_per_unit: 2, name: login}
    descriptors:
      - key: user
        rate_limit: {unit: day, requests_per_unit: 1}
  - key: bulk
    rate_limit: {unit: day, requests_per_unit: 10}
  - key: trial
    shadow_mode: true
    rate_limit: {unit: day, requests_per_unit: 1}
  - key: internal
    rate_limit: {unlimited: true}
"#;

struct Running {
    grpc: SocketAddr,
    http: SocketAddr,
    dir: PathBuf,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<std::io::Result<()>>,
}

impl Running {
    async fn start(name: &str, yaml: &str) -> Running {
        Running::start_with(name, &[("edge.yaml", yaml)]).await
    }

    /// A server on the config files `files` (name, text).
    async fn start_with(name: &str, files: &[(&str, &str)]) -> Running {
        let dir =
            std::env::temp_dir().join(format!("sluicegate-server-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        for (file, text) in files {
            std::fs::write(dir.join(file), text).unwrap();
        }
        let config = Config {
            config_path: Some(dir.clone()),
            grpc: "127.0.0.1:0".parse().unwrap(),
            http: "127.0.0.1:0".parse().unwrap(),
            reload_interval: Duration::from_millis(100),
            keys_per_limit: 1024,
            state_memory: 8 << 20,
            service: ServiceSettings {
                max_hits_addend: 1_000_000,
                response_headers: true,
            },
            ..Default::default()
        };
        let bound = Bound::bind(config).await.unwrap();
        let (grpc, http) = (bound.grpc_addr().unwrap(), bound.http_addr().unwrap());
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(bound.serve(async move {
            let _ = rx.await;
        }));
        Running {
            grpc,
            http,
            dir,
            stop: Some(tx),
            task,
        }
    }

    async fn client(&self) -> RateLimitServiceClient<Channel> {
        RateLimitServiceClient::connect(format!("http://{}", self.grpc))
            .await
            .unwrap()
    }

    async fn stop(mut self) {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
        let task = &mut self.task;
        tokio::time::timeout(Duration::from_secs(10), task)
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

async fn ask(
    c: &mut RateLimitServiceClient<Channel>,
    descriptors: &[&[(&str, &str)]],
    hits: u32,
) -> RateLimitResponse {
    c.should_rate_limit(request("edge", descriptors, hits))
        .await
        .unwrap()
        .into_inner()
}

fn codes(r: &RateLimitResponse) -> Vec<Code> {
    r.statuses
        .iter()
        .map(|s| Code::try_from(s.code).unwrap())
        .collect()
}

async fn http_get(addr: SocketAddr, path: &str) -> String {
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    s.write_all(format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).await.unwrap();
    out
}

#[tokio::test]
async fn limits_per_descriptor_nested_hits_shadow_unlimited() {
    let srv = Running::start("limits", EDGE).await;
    let mut c = srv.client().await;

    // Each remote address counts apart: 3 per day.
    for _ in 0..3 {
        assert_eq!(
            ask(&mut c, &[&[("remote_address", "10.0.0.1")]], 0)
                .await
                .overall_code,
            Code::Ok as i32
        );
    }
    let over = ask(&mut c, &[&[("remote_address", "10.0.0.1")]], 0).await;
    assert_eq!(
        (over.overall_code, codes(&over)),
        (Code::OverLimit as i32, vec![Code::OverLimit])
    );
    let st = &over.statuses[0];
    assert_eq!(st.current_limit.as_ref().unwrap().requests_per_unit, 3);
    assert!(st.duration_until_reset.as_ref().unwrap().seconds <= 86_400);
    assert_eq!(
        ask(&mut c, &[&[("remote_address", "10.0.0.2")]], 0)
            .await
            .overall_code,
        Code::Ok as i32
    );

    // Nested: path+user is its own limit (1/day), separate from path alone (2/day).
    let nested: &[(&str, &str)] = &[("path", "/login"), ("user", "ann")];
    assert_eq!(codes(&ask(&mut c, &[nested], 1).await), [Code::Ok]);
    assert_eq!(codes(&ask(&mut c, &[nested], 1).await), [Code::OverLimit]);
    let login: &[(&str, &str)] = &[("path", "/login")];
    let r = ask(&mut c, &[login, nested], 1).await;
    assert_eq!(
        (codes(&r), r.overall_code),
        (vec![Code::Ok, Code::OverLimit], Code::OverLimit as i32)
    );

    // hits_addend: 7 of 10, then 4 more is over, 3 fits exactly.
    assert_eq!(
        ask(&mut c, &[&[("bulk", "b")]], 7).await.statuses[0].limit_remaining,
        3
    );
    assert_eq!(
        codes(&ask(&mut c, &[&[("bulk", "b")]], 4).await),
        [Code::OverLimit]
    );
    assert_eq!(
        ask(&mut c, &[&[("bulk", "b")]], 3).await.statuses[0].limit_remaining,
        0
    );

    // Shadow mode: over the limit but OK.
    for _ in 0..3 {
        assert_eq!(
            ask(&mut c, &[&[("trial", "t")]], 1).await.overall_code,
            Code::Ok as i32
        );
    }
    // Unlimited: OK with u32::MAX remaining, whatever the hits.
    let u = ask(&mut c, &[&[("internal", "x")]], 1_000_000).await;
    assert_eq!(
        (u.overall_code, u.statuses[0].limit_remaining),
        (Code::Ok as i32, u32::MAX)
    );

    // Headers when asked for: one item per limited descriptor.
    let h = ask(&mut c, &[&[("remote_address", "10.0.0.9")]], 1)
        .await
        .response_headers_to_add;
    assert_eq!(h[0].key, "RateLimit-Policy");
    assert_eq!(h[0].value, "\"edge.remote_address\";q=3;w=86400");
    assert!(
        h[1].value.starts_with("\"edge.remote_address\";r=2;t="),
        "{}",
        h[1].value
    );

    let metrics = http_get(srv.http, "/metrics").await;
    assert!(metrics.starts_with("HTTP/1.1 200"), "{metrics}");
    for line in [
        "sluicegate_server_rule_hits_total{rule=\"edge.remote_address\",shadow=\"false\",result=\"allowed\"} 5",
        "sluicegate_server_rule_hits_total{rule=\"edge.remote_address\",shadow=\"false\",result=\"denied\"} 1",
        "sluicegate_server_rule_hits_total{rule=\"edge.trial\",shadow=\"true\",result=\"shadow_denied\"} 2",
        "sluicegate_server_rule_hits_total{rule=\"edge.bulk\",shadow=\"false\",result=\"denied\"} 4",
        "sluicegate_server_decision_seconds_count 1",
    ] {
        assert!(metrics.contains(line), "missing {line}:\n{metrics}");
    }
    srv.stop().await;
}

#[tokio::test]
async fn malformed_requests_get_invalid_argument() {
    let srv = Running::start("malformed", EDGE).await;
    let mut c = srv.client().await;
    let cases = [
        (
            request("", &[&[("remote_address", "a")]], 1),
            "rate limit domain must not be empty",
        ),
        (
            request("edge", &[], 1),
            "rate limit descriptor list must not be empty",
        ),
        (
            request("edge", &[&[("remote_address", "a")]], u32::MAX),
            "hits_addend 4294967295 is larger than this server's maximum 1000000",
        ),
        (request("edge", &[&[]], 1), "descriptor 0 has no entries"),
    ];
    for (req, want) in cases {
        let e = c.should_rate_limit(req).await.unwrap_err();
        assert_eq!(e.code(), tonic::Code::InvalidArgument, "{e:?}");
        assert!(e.message().contains(want), "{} lacks {want}", e.message());
    }
    // The server is still answering.
    assert_eq!(
        ask(&mut c, &[&[("remote_address", "z")]], 1)
            .await
            .overall_code,
        Code::Ok as i32
    );
    srv.stop().await;
}

#[tokio::test]
async fn health_serving_then_graceful_stop() {
    let srv = Running::start("health", EDGE).await;
    let channel = Channel::from_shared(format!("http://{}", srv.grpc))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut health = HealthClient::new(channel);
    for service in ["", sluicegate_server::SERVICE_NAME] {
        let r = health
            .check(HealthCheckRequest {
                service: service.into(),
            })
            .await
            .unwrap()
            .into_inner();
        assert_eq!(r.status, ServingStatus::Serving as i32, "{service:?}");
    }
    let unknown = health
        .check(HealthCheckRequest {
            service: "nope".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(unknown.code(), tonic::Code::NotFound);
    assert!(http_get(srv.http, "/healthz")
        .await
        .ends_with("{\"status\":\"ok\"}\n"));
    let (grpc, http) = (srv.grpc, srv.http);
    srv.stop().await;
    // Both ports are closed once serve() has returned.
    assert!(tokio::net::TcpStream::connect(grpc).await.is_err());
    assert!(tokio::net::TcpStream::connect(http).await.is_err());
}

#[tokio::test]
async fn reload_applies_valid_files_and_keeps_old_rules_on_errors() {
    let srv = Running::start("reload", EDGE).await;
    let mut c = srv.client().await;
    let file = srv.dir.join("edge.yaml");
    let a: &[(&str, &str)] = &[("remote_address", "r1")];
    for _ in 0..3 {
        assert_eq!(ask(&mut c, &[a], 1).await.overall_code, Code::Ok as i32);
    }
    // Raise the limit to 5: the count (3) carries over. Each probe asks for one hit
    // (a request's hits_addend 0 means 1): denied under the old limit (consuming
    // nothing), admitted as the 4th under the new one.
    std::fs::write(
        &file,
        EDGE.replace("requests_per_unit: 3", "requests_per_unit: 5"),
    )
    .unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let r = ask(&mut c, &[a], 0).await;
        if r.statuses[0]
            .current_limit
            .as_ref()
            .unwrap()
            .requests_per_unit
            == 5
        {
            assert_eq!(r.statuses[0].limit_remaining, 1, "state carried over");
            break;
        }
        assert!(Instant::now() < deadline, "reload not seen within 5 s");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // An invalid file: the old rules stay, the failure is counted.
    std::fs::write(&file, "domain: edge\ndescriptors:\n  - key: remote_address\n    rate_limit: {unit: fortnight, requests_per_unit: 1}\n").unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    while !http_get(srv.http, "/metrics")
        .await
        .contains("sluicegate_server_config_reloads_total{result=\"error\"} 1")
    {
        assert!(
            Instant::now() < deadline,
            "failed reload not counted within 5 s"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let r = ask(&mut c, &[a], 0).await;
    assert_eq!(
        r.statuses[0]
            .current_limit
            .as_ref()
            .unwrap()
            .requests_per_unit,
        5
    );
    srv.stop().await;
}

#[tokio::test]
async fn invalid_config_binds_nothing() {
    let dir =
        std::env::temp_dir().join(format!("sluicegate-server-invalid-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("a.yaml"),
        "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second}\n  - key: k\n",
    )
    .unwrap();
    // A fixed port that must stay free: the config is checked before binding.
    let probe = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = probe.local_addr().unwrap();
    drop(probe);
    let config = Config {
        config_path: Some(dir.clone()),
        grpc: addr,
        http: "127.0.0.1:0".parse().unwrap(),
        reload_interval: Duration::ZERO,
        keys_per_limit: 64,
        state_memory: 1 << 20,
        service: ServiceSettings {
            max_hits_addend: 10,
            response_headers: false,
        },
        ..Default::default()
    };
    let err = Bound::bind(config).await.unwrap_err().to_string();
    assert!(
        err.contains("a.yaml: duplicate descriptor composite key 'd.k'"),
        "{err}"
    );
    assert!(
        std::net::TcpListener::bind(addr).is_ok(),
        "the port was left bound"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn toml_policy_errors_name_the_file_line_and_column() {
    let text = "[[rule]]\nname = \"a\"\nlimit = \"5/fortnight\"\n";
    let err = sluicegate_server::build_rules(
        &[("conf/api.toml".into(), text.into())],
        None,
        sluicegate_server::TableSettings::new(64, 1 << 20).unwrap(),
    )
    .unwrap_err()
    .to_string();
    assert!(
        err.starts_with("conf/api.toml:3:12: error: rule `a`: bad limit"),
        "{err}"
    );
}

/// Forwards each loopback connection to `to` from a task of the calling runtime:
/// the server's Redis round trips then need that runtime's threads free, as a
/// busy server's other I/O does. A check that blocked its worker thread (the
/// `block_in_place`-less path a current-thread runtime took before the async
/// check) stalls its own round trip until the Redis timeout.
async fn proxy(to: SocketAddr) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut client, _)) = listener.accept().await {
            tokio::spawn(async move {
                if let Ok(mut redis) = tokio::net::TcpStream::connect(to).await {
                    let _ = (client.set_nodelay(true), redis.set_nodelay(true));
                    let _ = tokio::io::copy_bidirectional(&mut client, &mut redis).await;
                }
            });
        }
    });
    addr
}

/// The counter `name{rule="<rule>"...}` in the `/metrics` text (0 if absent).
fn counter(metrics: &str, name: &str, labels: &[&str]) -> u64 {
    metrics
        .lines()
        .find(|l| l.starts_with(name) && labels.iter().all(|x| l.contains(x)))
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
        .unwrap_or(0)
}

/// 200 requests for one user, 8 in flight at a time over 2 connections,
/// against a TOML domain with a local per-user rule (1,000/hour) and a `redis`
/// one (100/hour, `on_error = "closed"`). Always: every request is answered,
/// never more than 100 admitted, and the local rule counts exactly the admitted
/// ones (the denied were given back). Without a backend error: exactly 100
/// admitted. Returns the `redis` rule's backend errors (round trips past Redis's
/// fixed 25 ms timeout, which then open its breaker).
async fn redis_rules_under_concurrency(name: &str) -> u64 {
    let redis = redis_common::Server::start();
    let to: SocketAddr = format!("127.0.0.1:{}", redis.port).parse().unwrap();
    let via = proxy(to).await;
    let toml = format!(
        "[redis]\nurl = \"redis://{via}\"\n\
         [[rule]]\nname = \"local\"\nkey = [\"user\"]\nlimit = \"1000/hour\"\n\
         [[rule]]\nname = \"shared\"\nkey = [\"user\"]\nlimit = \"100/hour\"\nbackend = \"redis\"\non_error = \"closed\"\n"
    );
    let srv = Running::start_with(name, &[("api.toml", &toml)]).await;
    let mut clients = Vec::new();
    for _ in 0..2 {
        clients.push(srv.client().await);
    }
    let slots = std::sync::Arc::new(tokio::sync::Semaphore::new(8));
    let started = Instant::now();
    let tasks: Vec<_> = (0..200)
        .map(|i| {
            let mut c = clients[i % clients.len()].clone();
            let slots = slots.clone();
            tokio::spawn(async move {
                let _slot = slots.acquire_owned().await.unwrap();
                let r = c
                    .should_rate_limit(request("api", &[&[("user", "ann")]], 1))
                    .await
                    .unwrap()
                    .into_inner();
                Code::try_from(r.overall_code).unwrap()
            })
        })
        .collect();
    let mut ok = 0;
    for t in tasks {
        let code = tokio::time::timeout(Duration::from_secs(30), t)
            .await
            .expect("every request is answered")
            .unwrap();
        ok += u64::from(code == Code::Ok);
    }
    let took = started.elapsed();
    let metrics = http_get(srv.http, "/metrics").await;
    let hits = "sluicegate_server_rule_hits_total";
    let local = counter(&metrics, hits, &["\"api.local\"", "\"allowed\""]);
    let errors = counter(
        &metrics,
        "sluicegate_server_rule_backend_errors_total",
        &["\"api.shared\""],
    );
    assert!(ok <= 100, "never over the Redis rule's quota: {ok}");
    assert_eq!(local, ok, "the local rule keeps only the admitted requests");
    if errors == 0 {
        assert_eq!(ok, 100, "exactly the Redis rule's quota ({took:?})");
        // One more request (a peek): the shared rule has nothing left.
        let mut c = srv.client().await;
        let r = c
            .should_rate_limit(request("api", &[&[("user", "ann")]], 0))
            .await
            .unwrap()
            .into_inner();
        let remaining: Vec<u32> = r.statuses.iter().map(|s| s.limit_remaining).collect();
        assert_eq!(remaining, [0], "the rule closest to its limit is reported");
    }
    srv.stop().await;
    drop(redis);
    errors
}

/// The server, its clients and the way to Redis on one runtime thread, then on
/// two workers (one after the other: two at once on a 2-core machine could miss
/// Redis's 25 ms timeout). Before the async check, each round trip on the
/// current-thread runtime blocked its one thread (no `block_in_place` there),
/// so the proxy never ran: every check timed out and none was admitted.
///
/// A round trip can still miss the fixed 25 ms timeout on a starved machine (a
/// debug build sharing 2 cores with other work); the backend-error counter says
/// so, and such a run is repeated, at most three times in all. A run without
/// backend errors must admit exactly the quota.
#[test]
fn redis_rules_under_concurrency_on_both_runtimes() {
    let one = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let two = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    for (flavour, rt) in [("one-thread", &one), ("two-workers", &two)] {
        for attempt in 1.. {
            let name = format!("redis-{flavour}-{attempt}");
            let errors = rt.block_on(redis_rules_under_concurrency(&name));
            if errors == 0 {
                break;
            }
            assert!(
                attempt < 3,
                "{flavour}: round trips timed out in {attempt} runs ({errors} in the last)"
            );
            eprintln!("{flavour}: {errors} round trips timed out (a starved machine?): again");
        }
    }
}
