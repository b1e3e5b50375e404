//! An axum service behind a rate-limit policy.
//!
//! ```text
//! cargo run -p sluicegate-policy --features tower --example axum [rules.toml]
//! curl -i -X POST http://127.0.0.1:3000/login     # the sixth in a minute answers 429
//! curl http://127.0.0.1:3000/metrics
//! ```
//! With a file argument the policy is read from it and reloaded when it changes.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::routing::{get, post};
use sluicegate_policy::{Policy, PolicyLayer, Watcher};

const RULES: &str = r#"
[[rule]]
name = "login"
match = { path = "/login", method = "POST" }
key = ["ip"]
limit = "5/minute"
algorithm = "sliding_window"

[[rule]]
name = "per-client"
match = { path = "/api/*" }
key = ["ip"]
limit = "10/second burst 20"

[[rule]]
name = "global"
limit = "10000/second"
"#;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let path = std::env::args().nth(1);
    let policy = Arc::new(match &path {
        Some(p) => Policy::from_path(p)?,
        None => Policy::from_toml(RULES)?,
    });
    let _watcher = match &path {
        Some(p) => Some(Watcher::spawn(
            policy.clone(),
            p,
            Duration::from_millis(500),
        )?),
        None => None,
    };
    let metrics = policy.clone();
    let limited = Router::new()
        .route("/login", post(|| async { "welcome\n" }))
        .route("/api/{*rest}", get(|| async { "data\n" }))
        // Trust X-Forwarded-For only from a proxy on this host.
        .layer(PolicyLayer::new(policy).trusted_proxies(["127.0.0.1", "::1"])?);
    // Metrics outside the limited routes.
    let app = limited.route(
        "/metrics",
        get(move || async move { metrics.metrics_text() }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:3000").await?;
    println!("listening on http://{}", listener.local_addr()?);
    axum::serve(
        listener,
        app.into_make_service_with_connect_info::<SocketAddr>(),
    )
    .await?;
    Ok(())
}
