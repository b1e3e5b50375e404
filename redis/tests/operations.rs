//! What an operator needs, on servers of the tests' own: batches of any size
//! answered by a healthy server and never charged twice after a timeout;
//! misconfiguration reported by `connect()` with its cause; the last error and
//! the counters of policy answers; a log line on every breaker transition.

mod common;

use std::error::Error as _;
use std::io::{Read, Write};
use std::net::TcpListener;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use common::Server;
use sluicegate_redis::{
    Backend, BreakerConfig, Config, Error, FailurePolicy, Kind, Limit, Quota, RedisLimiter, Source,
};

fn cfg(policy: FailurePolicy) -> Config {
    Config {
        timeout: Duration::from_millis(25),
        connect_timeout: Duration::from_millis(50),
        breaker: BreakerConfig {
            failure_threshold: 3,
            cooldown: Duration::from_millis(200),
        },
        policy,
        ..Config::default()
    }
}

fn limiter(url: &str, name: &str, kind: Kind, q: Quota, c: Config) -> RedisLimiter {
    let limit = Limit::from_quota(kind, q).unwrap();
    RedisLimiter::new(Backend::from_url(url).unwrap(), name, limit, c).unwrap()
}

/// A fixed window of a million an hour (more than any test here checks) named
/// `name` on `server`.
fn million_an_hour(server: &Server, name: &str, c: Config) -> RedisLimiter {
    let q = Quota::per_hour(1_000_000);
    limiter(&server.url(), name, Kind::FixedWindow, q, c)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_batch_is_answered_by_a_healthy_server() {
    let server = Server::start();
    // The default 25 ms timeout; 5 000 and 20 000 checks, on 100 keys.
    let rl = million_an_hour(&server, "batch", cfg(FailurePolicy::Open));
    rl.connect().await.unwrap();
    for size in [5_000usize, 20_000] {
        let keys: Vec<String> = (0..100).map(|i| format!("k{i}")).collect();
        let items: Vec<(&str, u64)> = (0..size).map(|i| (keys[i % 100].as_str(), 1)).collect();
        let t = Instant::now();
        let v = rl.check_many(&items).await;
        let by_redis = v
            .iter()
            .filter(|r| r.as_ref().unwrap().source == Source::Redis)
            .count();
        // Today: every one answered by the failure policy (one 25 ms timeout
        // for the whole pipeline).
        assert_eq!(
            by_redis,
            size,
            "{size}: {by_redis} by Redis in {:?}",
            t.elapsed()
        );
    }
    assert_eq!(rl.stats().policy_answers(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_that_times_out_is_never_charged_twice() {
    let server = Server::start();
    let c = Config {
        // A timeout shorter than some pipelines take: some time out.
        timeout: Duration::from_micros(300),
        pipeline_max: 64,
        breaker: BreakerConfig {
            failure_threshold: 1_000_000,
            cooldown: Duration::from_millis(1),
        },
        ..cfg(FailurePolicy::Closed)
    };
    let rl = million_an_hour(&server, "once", c);
    let mut redis_admitted = 0u64;
    let mut sent_unanswered = 0u64;
    for _ in 0..20 {
        let items = vec![("k", 1u64); 2_000];
        let v = rl.check_many(&items).await;
        let answered = v
            .iter()
            .filter(|r| r.as_ref().unwrap().source == Source::Redis)
            .count() as u64;
        redis_admitted += answered;
        if answered < items.len() as u64 {
            // At most the pipeline that timed out ran unseen; none after it was
            // sent, and nothing was sent again.
            sent_unanswered += 64;
        }
    }
    // Let anything in flight land, then read what Redis charged.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let probe = million_an_hour(&server, "once", cfg(FailurePolicy::Closed));
    // A peek of 0: `remaining` is what is left now.
    let charged = 1_000_000 - probe.peek_n("k", 0).await.unwrap().decision.remaining;
    assert!(
        redis_admitted <= charged && charged <= redis_admitted + sent_unanswered,
        "charged {charged}, answered by Redis {redis_admitted}, at most {sent_unanswered} unseen"
    );
    println!("timed-out batches: {redis_admitted} answered by Redis, {charged} charged");
}

/// A fake server: answers every connection with an HTTP error and closes.
fn http_server() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for s in l.incoming().take(8) {
            let Ok(mut s) = s else { continue };
            let mut buf = [0u8; 512];
            let _ = s.set_read_timeout(Some(Duration::from_millis(100)));
            let _ = s.read(&mut buf);
            let _ = s.write_all(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n");
        }
    });
    port
}

fn closed_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn misconfiguration_is_reported_by_connect_with_its_cause() {
    let server = Server::start();
    server
        .cmd(&["CONFIG", "SET", "requirepass", "s3cret"])
        .unwrap();
    let port = server.port;
    let q = Quota::per_second(10);
    let others = [
        (
            "HTTP server",
            format!("redis://127.0.0.1:{}", http_server()),
            "",
        ),
        (
            "closed port",
            format!("redis://127.0.0.1:{}", closed_port()),
            "refused",
        ),
    ];
    for (what, url, expect) in common::misconfigured(port).into_iter().chain(others) {
        let rl = limiter(&url, "cfg", Kind::TokenBucket, q, cfg(FailurePolicy::Open));
        let e = rl.connect().await.expect_err(what);
        let text = common::chain(&e);
        assert!(e.is_unavailable(), "{what}: {text}");
        assert!(
            text.to_lowercase().contains(&expect.to_lowercase()),
            "{what}: {text}"
        );
        assert!(
            e.source().is_some() || matches!(e, Error::Timeout),
            "{what}: {text}"
        );
        // A check is answered by the policy, and the cause stays readable.
        let v = rl.check("k").await.unwrap();
        assert_eq!(v.source, Source::FailOpen, "{what}");
        assert_eq!(rl.stats().fail_open, 1, "{what}");
        assert!(rl.last_error().is_some(), "{what}");
        println!("{what}: {text}");
    }
    // The right password: connect succeeds and Redis decides.
    let url = format!("redis://:s3cret@127.0.0.1:{port}");
    let rl = limiter(&url, "cfg", Kind::TokenBucket, q, cfg(FailurePolicy::Open));
    rl.connect().await.unwrap();
    assert_eq!(rl.check("k").await.unwrap().source, Source::Redis);
}

static LINES: Mutex<Vec<String>> = Mutex::new(Vec::new());

struct Capture;

impl log::Log for Capture {
    fn enabled(&self, _: &log::Metadata) -> bool {
        true
    }
    fn log(&self, r: &log::Record) {
        if r.target().starts_with("sluicegate_redis") {
            LINES
                .lock()
                .unwrap()
                .push(format!("{} {}", r.level(), r.args()));
        }
    }
    fn flush(&self) {}
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_breaker_transition_is_logged_and_counted() {
    log::set_logger(&Capture).unwrap();
    log::set_max_level(log::LevelFilter::Info);
    let mut server = Server::start();
    let rl = limiter(
        &server.url(),
        "log",
        Kind::TokenBucket,
        Quota::per_second(1000),
        cfg(FailurePolicy::Closed),
    );
    assert_eq!(rl.check("k").await.unwrap().source, Source::Redis);
    server.kill();
    for _ in 0..3 {
        assert_eq!(rl.check("k").await.unwrap().source, Source::FailClosed);
    }
    assert!(rl.circuit_open());
    // A probe that fails opens it again.
    tokio::time::sleep(Duration::from_millis(220)).await;
    assert_eq!(rl.check("k").await.unwrap().source, Source::FailClosed);
    server.restart();
    tokio::time::sleep(Duration::from_millis(220)).await;
    assert_eq!(rl.check("k").await.unwrap().source, Source::Redis);
    let s = rl.stats();
    assert_eq!((s.circuit_opened, s.fail_closed, s.redis), (1, 4, 2));
    let lines = LINES.lock().unwrap().clone();
    let port = server.port.to_string();
    let has = |level: &str, what: &str| {
        lines
            .iter()
            .any(|l| l.starts_with(level) && l.contains(what) && l.contains(&port))
    };
    assert!(has("WARN", "circuit open for"), "{lines:#?}");
    assert!(has("INFO", "half-open"), "{lines:#?}");
    assert!(has("WARN", "open again"), "{lines:#?}");
    assert!(has("INFO", "circuit closed"), "{lines:#?}");
}
