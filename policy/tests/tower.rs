//! The tower layer end to end: a real axum server on a free loopback port, plain
//! HTTP/1.1 requests over TCP.
#![cfg(feature = "tower")]

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::routing::{get, post};
use sluicegate_policy::{Policy, PolicyLayer};

const RULES: &str = r#"
[[rule]]
name = "login"
match = { path = "/login", method = "POST" }
key = ["ip"]
limit = "2/minute"

[[rule]]
name = "api-per-key"
match = { path = "/api/*", "header:x-api-key" = "*" }
key = ["header:x-api-key"]
limit = "1/minute"

[[rule]]
name = "trial"
match = { path = "/api/*" }
limit = "1/minute"
mode = "shadow"
"#;

struct Reply {
    status: u16,
    headers: Vec<(String, String)>,
    body: String,
}

impl Reply {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

fn request(addr: SocketAddr, method: &str, path: &str, headers: &[(&str, &str)]) -> Reply {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut req = format!(
        "{method} {path} HTTP/1.1\r\nHost: test\r\nConnection: close\r\nContent-Length: 0\r\n"
    );
    for (n, v) in headers {
        req += &format!("{n}: {v}\r\n");
    }
    req += "\r\n";
    s.write_all(req.as_bytes()).unwrap();
    let mut raw = String::new();
    s.read_to_string(&mut raw).unwrap();
    let (head, body) = raw.split_once("\r\n\r\n").unwrap();
    let mut lines = head.lines();
    let status = lines
        .next()
        .unwrap()
        .split(' ')
        .nth(1)
        .unwrap()
        .parse()
        .unwrap();
    let headers = lines
        .map(|l| {
            let (n, v) = l.split_once(':').unwrap();
            (n.trim().to_owned(), v.trim().to_owned())
        })
        .collect();
    Reply {
        status,
        headers,
        body: body.to_owned(),
    }
}

#[test]
fn axum_end_to_end() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let policy = Arc::new(Policy::from_toml(RULES).unwrap());
    let layer = PolicyLayer::new(policy.clone())
        .trusted_proxies(["127.0.0.1"])
        .unwrap();
    let app = Router::new()
        .route("/login", post(|| async { "welcome" }))
        .route("/api/{*rest}", get(|| async { "data" }))
        .route("/", get(|| async { "home" }))
        .layer(layer);
    let listener = rt
        .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
        .unwrap();
    let addr = listener.local_addr().unwrap();
    rt.spawn(async move {
        let svc = app.into_make_service_with_connect_info::<SocketAddr>();
        axum::serve(listener, svc).await.unwrap();
    });

    // Two logins from this client pass with the RateLimit fields; the third is 429.
    for left in [1, 0] {
        let r = request(addr, "POST", "/login", &[]);
        assert_eq!((r.status, r.body.as_str()), (200, "welcome"));
        assert_eq!(r.header("ratelimit-policy"), Some(r#""login";q=2;w=60"#));
        let rl = r.header("ratelimit").unwrap();
        assert!(rl.starts_with(&format!("\"login\";r={left};t=")), "{rl}");
    }
    let r = request(addr, "POST", "/login", &[]);
    assert_eq!(r.status, 429);
    assert_eq!(r.header("content-type"), Some("application/problem+json"));
    let retry: u64 = r.header("retry-after").unwrap().parse().unwrap();
    assert!((29..=30).contains(&retry), "{retry}");
    assert_eq!(r.header("ratelimit-policy"), Some(r#""login";q=2;w=60"#));
    assert!(
        r.header("ratelimit")
            .unwrap()
            .starts_with("\"login\";r=0;t=")
    );
    assert!(r.body.contains("\"status\":429"), "{}", r.body);
    assert!(r.body.contains("\"rules\":[\"login\"]"), "{}", r.body);

    // Behind the trusted proxy (this host), X-Forwarded-For names the client:
    // another client has its own limit; an untrusted hop cannot be spoofed past.
    let other = [("X-Forwarded-For", "198.51.100.7")];
    assert_eq!(request(addr, "POST", "/login", &other).status, 200);
    let spoof = [("X-Forwarded-For", "203.0.113.1, 198.51.100.7")];
    assert_eq!(request(addr, "POST", "/login", &spoof).status, 200);
    assert_eq!(request(addr, "POST", "/login", &spoof).status, 429);

    // Per API key, with a shadow rule that never denies.
    let key_a = [("X-Api-Key", "a")];
    assert_eq!(request(addr, "GET", "/api/items", &key_a).status, 200);
    assert_eq!(request(addr, "GET", "/api/items", &key_a).status, 429);
    let r = request(addr, "GET", "/api/items", &[("X-Api-Key", "b")]);
    assert_eq!(r.status, 200);
    // The RateLimit fields name enforcing rules only.
    assert_eq!(
        r.header("ratelimit-policy"),
        Some(r#""api-per-key";q=1;w=60"#)
    );
    // Unmatched routes pass without fields.
    let r = request(addr, "GET", "/", &[]);
    assert_eq!((r.status, r.body.as_str()), (200, "home"));
    assert_eq!(r.header("ratelimit"), None);

    let m = policy.metrics_at(0);
    assert_eq!((m[0].allowed, m[0].denied), (4, 2));
    assert_eq!((m[2].allowed, m[2].shadow_denied), (1, 2));
    rt.shutdown_timeout(Duration::from_secs(1));
}
