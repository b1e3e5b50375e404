//! TLS (`rediss://`, feature `tls`) against the TLS-only servers scripts/test-redis
//! starts with a throwaway CA: a server (`SLUICEGATE_REDIS_TLS_URL`), a server
//! requiring client certificates (`SLUICEGATE_REDIS_MTLS_URL`) and a 3-master
//! cluster requiring them (`SLUICEGATE_REDIS_TLS_CLUSTER_URL`), with the CA's and
//! the client's PEM files in `SLUICEGATE_REDIS_TLS_CA`,
//! `SLUICEGATE_REDIS_TLS_CLIENT_CERT` and `SLUICEGATE_REDIS_TLS_CLIENT_KEY`.
//! Where the script set them, a connection that fails is a test failure; without
//! them (a plain `cargo test`) the tests say so and pass.
// Written against the deprecated `Algorithm` names, which must keep working;
// tests/isolation.rs and tests/operations.rs use `Spec` and `Kind`.
#![allow(deprecated)]
#![cfg(feature = "tls")]

mod common;

use std::time::Duration;

use sluicegate::Quota;
use sluicegate_redis::{
    Algorithm, Backend, ClientCert, Config, Limit, RedisLimiter, Source, TlsConfig,
};

fn pem(var: &str) -> Vec<u8> {
    let path = std::env::var(var).unwrap_or_else(|_| panic!("{var} is not set"));
    std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

fn tls_env() -> Option<(String, Vec<u8>)> {
    let url = std::env::var("SLUICEGATE_REDIS_TLS_URL").ok()?;
    Some((url, pem("SLUICEGATE_REDIS_TLS_CA")))
}

/// The server at the URL in `var`, trusting the private CA: with the client
/// certificate, and without it.
fn mtls_env(var: &str) -> Option<(Backend, Backend)> {
    let url = std::env::var(var).ok()?;
    let with_tls = |client| {
        let tls = TlsConfig {
            root_ca_pem: Some(pem("SLUICEGATE_REDIS_TLS_CA")),
            client,
        };
        Backend::from_url(&url).unwrap().with_tls(tls).unwrap()
    };
    let client = ClientCert {
        cert_pem: pem("SLUICEGATE_REDIS_TLS_CLIENT_CERT"),
        key_pem: pem("SLUICEGATE_REDIS_TLS_CLIENT_KEY"),
    };
    Some((with_tls(Some(client)), with_tls(None)))
}

fn not_run(var: &str) {
    eprintln!("{var} not set (scripts/test-redis sets it): not run");
}

/// A check through `backend` fails as unavailable: the handshake was refused
/// (`why` says what the client lacked).
async fn assert_refused(backend: Backend, why: &str) {
    let rl = RedisLimiter::new(backend, &common::fresh("tls"), limit(), cfg()).unwrap();
    let e = rl.try_check_n("k", 1).await.expect_err(why);
    assert!(e.is_unavailable(), "{why}: {e:?}");
}

fn cfg() -> Config {
    Config {
        timeout: Duration::from_millis(2000),
        connect_timeout: Duration::from_millis(2000),
        ..Config::default()
    }
}

/// A burst of 3 that does not refill during a test: at 10 per second a unit came
/// back after 100 ms, and a loaded machine took that long over the cluster test's
/// 64 round trips before its batch expected every key spent.
fn limit() -> Limit {
    Limit::new(Algorithm::TokenBucket, Quota::per_hour(10).burst(3)).unwrap()
}

/// The TLS server at `url`, its certificate verified against `root_ca_pem`,
/// with no client certificate.
fn private_ca(url: String, root_ca_pem: Vec<u8>) -> Backend {
    Backend::StandaloneTls {
        url,
        tls: TlsConfig {
            root_ca_pem: Some(root_ca_pem),
            client: None,
        },
    }
}

/// Checks through `rediss://`, the server's certificate verified against the CA:
/// the decisions are Redis's and count down as on a plain connection.
#[tokio::test]
async fn checks_over_tls_with_a_private_ca() {
    let Some((url, root_ca_pem)) = tls_env() else {
        return not_run("SLUICEGATE_REDIS_TLS_URL");
    };
    let backend = private_ca(url, root_ca_pem);
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
        return not_run("SLUICEGATE_REDIS_TLS_URL");
    };
    let backend = Backend::from_url(&url).unwrap();
    assert_refused(backend, "a certificate no trusted root signed").await;
}

/// A plain `redis://` client against the TLS port is not a TLS client: it fails
/// too (the server was started with `--port 0`, TLS only).
#[tokio::test]
async fn plain_text_to_the_tls_port_fails() {
    let Some((url, _)) = tls_env() else {
        return not_run("SLUICEGATE_REDIS_TLS_URL");
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

/// A server with `tls-auth-clients yes`: checks work with the client certificate
/// and are refused without it (the server ends the handshake).
#[tokio::test]
async fn client_certificates_standalone() {
    let var = "SLUICEGATE_REDIS_MTLS_URL";
    let Some((backend, without)) = mtls_env(var) else {
        return not_run(var);
    };
    let rl = RedisLimiter::new(backend, &common::fresh("mtls"), limit(), cfg()).unwrap();
    let r = rl
        .try_check_n("k", 2)
        .await
        .expect("check with a client certificate");
    assert!(r.decision.allowed);
    assert_eq!(r.decision.remaining, 1);

    assert_refused(without, "no client certificate").await;
}

/// A 3-master cluster with `tls-cluster yes` and `tls-auth-clients yes`, over
/// `rediss+cluster://` with the CA and the client certificate: keys on every
/// master are decided by Redis; without the client certificate nothing connects.
#[tokio::test]
async fn a_tls_cluster_with_client_certificates() {
    let var = "SLUICEGATE_REDIS_TLS_CLUSTER_URL";
    let Some((backend, without)) = mtls_env(var) else {
        return not_run(var);
    };
    assert!(matches!(backend, Backend::ClusterTls { .. }));
    let rl = RedisLimiter::new(backend, &common::fresh("tlsc"), limit(), cfg()).unwrap();
    // 32 keys: the slots of the hash tags "0".."31" fall on all three masters.
    let keys: Vec<String> = (0..32).map(|i| i.to_string()).collect();
    for k in &keys {
        let r = rl
            .try_check_n(k, 3)
            .await
            .expect("check on the TLS cluster");
        assert!(
            r.decision.allowed && r.decision.remaining == 0,
            "{k}: {r:?}"
        );
        let r = rl.try_check_n(k, 1).await.unwrap();
        assert!(!r.decision.allowed, "{k}: the burst of 3 is spent");
    }
    let many: Vec<(&str, u64)> = keys.iter().map(|k| (k.as_str(), 1)).collect();
    for v in rl.check_many(&many).await {
        let v = v.unwrap();
        assert_eq!(v.source, Source::Redis);
        assert!(!v.decision.allowed);
    }

    assert_refused(without, "no client certificate").await;
}

/// The blocking API's own connections over TLS (the calling thread does the
/// handshake, writes and reads): with the private CA, with a client
/// certificate, refused without it; on the TLS cluster there is no pool and the
/// calls go through the cluster connection.
#[test]
fn blocking_calls_over_tls_on_the_calling_thread() {
    use sluicegate_redis::blocking;
    let Some((url, root_ca_pem)) = tls_env() else {
        return not_run("SLUICEGATE_REDIS_TLS_URL");
    };
    let backend = private_ca(url, root_ca_pem);
    let rl = blocking::RedisLimiter::new(backend, &common::fresh("btls"), limit(), cfg()).unwrap();
    rl.connect().expect("connect over rediss://");
    for want in [2, 1, 0] {
        let r = rl.try_check_n("k", 1).expect("check over rediss://");
        assert_eq!((r.decision.allowed, r.decision.remaining), (true, want));
    }
    let v = rl.check("k").unwrap();
    assert_eq!((v.source, v.decision.allowed), (Source::Redis, false));
    assert_eq!(rl.stats().direct_calls, 4);

    let var = "SLUICEGATE_REDIS_MTLS_URL";
    let Some((backend, without)) = mtls_env(var) else {
        return not_run(var);
    };
    let rl = blocking::RedisLimiter::new(backend, &common::fresh("bmtls"), limit(), cfg()).unwrap();
    let r = rl
        .try_check_n("k", 2)
        .expect("check with a client certificate");
    assert_eq!(r.decision.remaining, 1);
    assert_eq!(rl.stats().direct_calls, 1);
    let refused =
        blocking::RedisLimiter::new(without, &common::fresh("bmtls"), limit(), cfg()).unwrap();
    assert!(refused.connect().unwrap_err().is_unavailable());
    assert!(refused.try_check_n("k", 1).unwrap_err().is_unavailable());

    let var = "SLUICEGATE_REDIS_TLS_CLUSTER_URL";
    let Some((backend, _)) = mtls_env(var) else {
        return not_run(var);
    };
    let rl = blocking::RedisLimiter::new(backend, &common::fresh("btlsc"), limit(), cfg()).unwrap();
    for k in ["0", "1", "2", "3"] {
        let r = rl.try_check_n(k, 3).expect("check on the TLS cluster");
        assert_eq!(r.decision.remaining, 0, "{k}");
        assert!(!rl.check(k).unwrap().decision.allowed);
    }
    assert_eq!(rl.stats().direct_calls, 0);
}
