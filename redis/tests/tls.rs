//! TLS (`rediss://`, feature `tls`) against the TLS-only server scripts/test-redis
//! starts with a throwaway CA: `SLUICEGATE_REDIS_TLS_URL` and
//! `SLUICEGATE_REDIS_TLS_CA` (the CA's PEM file). Where the script set them, a
//! connection that fails is a test failure; without them (a plain `cargo test`)
//! the tests say so and pass.
#![cfg(feature = "tls")]

mod common;

use std::time::Duration;

use sluicegate::Quota;
use sluicegate_redis::{Algorithm, Backend, Config, Limit, RedisLimiter, Source};

fn tls_env() -> Option<(String, Vec<u8>)> {
    let url = std::env::var("SLUICEGATE_REDIS_TLS_URL").ok()?;
    let ca = std::env::var("SLUICEGATE_REDIS_TLS_CA")
        .expect("SLUICEGATE_REDIS_TLS_URL is set but SLUICEGATE_REDIS_TLS_CA is not");
    let pem = std::fs::read(&ca).unwrap_or_else(|e| panic!("{ca}: {e}"));
    Some((url, pem))
}

fn cfg() -> Config {
    Config {
        timeout: Duration::from_millis(2000),
        connect_timeout: Duration::from_millis(2000),
        ..Config::default()
    }
}

fn limit() -> Limit {
    Limit::new(Algorithm::TokenBucket, Quota::per_second(10).burst(3)).unwrap()
}

/// Checks through `rediss://`, the server's certificate verified against the CA:
/// the decisions are Redis's and count down as on a plain connection.
#[tokio::test]
async fn checks_over_tls_with_a_private_ca() {
    let Some((url, root_ca_pem)) = tls_env() else {
        eprintln!("SLUICEGATE_REDIS_TLS_URL not set (scripts/test-redis sets it): not run");
        return;
    };
    let backend = Backend::StandaloneTls { url, root_ca_pem };
    let rl = RedisLimiter::new(backend, &common::fresh("tls"), limit(), cfg()).unwrap();
    // try_: the raw error, so that a TLS failure fails the test instead of being
    // answered by the failure policy.
    for want in [2, 1, 0] {
        let r = rl.try_check_n("k", 1).await.expect("check over rediss://");
        assert!(r.decision.allowed);
        assert_eq!(r.decision.remaining, want);
        assert!(r.now_us > 0);
    }
    let r = rl.try_check_n("k", 1).await.unwrap();
    assert!(!r.decision.allowed, "the burst of 3 is spent");
    // The policy-applying call too: answered by Redis, not the policy.
    let v = rl.check("other").await.unwrap();
    assert!(v.decision.allowed);
    assert_eq!(v.source, Source::Redis);
    // Batched checks on the TLS connection.
    let many = rl.check_many(&[("a", 1), ("b", 3)]).await;
    let remaining: Vec<u64> = many
        .iter()
        .map(|r| r.as_ref().unwrap().decision.remaining)
        .collect();
    assert_eq!(remaining, [2, 0]);
}

/// The same server without the private CA (system roots and webpki-roots only):
/// the handshake must fail, so the CA really is what made the test above pass.
#[tokio::test]
async fn an_untrusted_certificate_is_refused() {
    let Some((url, _)) = tls_env() else {
        eprintln!("SLUICEGATE_REDIS_TLS_URL not set (scripts/test-redis sets it): not run");
        return;
    };
    let rl = RedisLimiter::new(
        Backend::from_url(&url).unwrap(),
        &common::fresh("tls"),
        limit(),
        cfg(),
    )
    .unwrap();
    let e = rl
        .try_check_n("k", 1)
        .await
        .expect_err("a certificate no trusted root signed");
    assert!(e.is_unavailable(), "{e:?}");
}

/// A plain `redis://` client against the TLS port is not a TLS client: it fails
/// too (the server was started with `--port 0`, TLS only).
#[tokio::test]
async fn plain_text_to_the_tls_port_fails() {
    let Some((url, _)) = tls_env() else {
        eprintln!("SLUICEGATE_REDIS_TLS_URL not set (scripts/test-redis sets it): not run");
        return;
    };
    let plain = url.replacen("rediss://", "redis://", 1);
    let cfg = Config {
        timeout: Duration::from_millis(300),
        connect_timeout: Duration::from_millis(300),
        ..Config::default()
    };
    let rl = RedisLimiter::new(
        Backend::from_url(&plain).unwrap(),
        &common::fresh("tls"),
        limit(),
        cfg,
    )
    .unwrap();
    assert!(rl.try_check_n("k", 1).await.is_err());
}
