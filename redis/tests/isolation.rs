//! Fault isolation on servers of the tests' own: a per-key data error
//! (`WRONGTYPE`) fails that check alone and never opens the breaker; limiters
//! of different algorithms under one name never read each other's values; the
//! hybrid mode with the server SIGSTOPped keeps every check within timeout +
//! connect timeout, and at a half-open probe only the probing check waits; bad
//! ports are refused at construction.

mod common;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::Server;
use redis::AsyncCommands;
use sluicegate_redis::{
    Config, Error, FailurePolicy, HybridConfig, HybridLimiter, Kind, Limit, Quota, RedisLimiter,
    Source, Spec,
};

use common::fault::{cfg, CONNECT, COOLDOWN, SLACK, TIMEOUT};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrongtype_key_fails_its_own_checks_and_never_opens_the_breaker() {
    let server = Server::start();
    let limit = Limit::from_quota(Kind::TokenBucket, Quota::per_second(100).burst(20)).unwrap();
    let rl = RedisLimiter::from_spec(
        &server.url(),
        "w",
        &limit.spec().unwrap(),
        cfg(FailurePolicy::Open),
    )
    .unwrap();
    let mut raw = redis::Client::open(server.url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let _: () = raw.hset(rl.redis_key("bad"), "f", "v").await.unwrap();
    for _ in 0..10 {
        // Today's behaviour was a policy answer (fail open: admitted) and, after
        // three, an open circuit for every key.
        match rl.check("bad").await {
            Err(Error::Data(e)) => assert_eq!(e.code(), Some("WRONGTYPE"), "{e:?}"),
            other => panic!("expected a data error, got {other:?}"),
        }
        let good = rl.check("good").await.unwrap();
        assert_eq!(good.source, Source::Redis);
    }
    assert!(!rl.circuit_open());
    let s = rl.stats();
    assert_eq!((s.data_errors, s.fail_open, s.circuit_opened), (10, 0, 0));
    assert!(matches!(rl.last_error(), Some(Error::Data(_))));
    // The batch path classifies the same way.
    let v = rl.check_many(&[("bad", 1), ("good", 1)]).await;
    assert!(matches!(v[0], Err(Error::Data(_))));
    assert_eq!(v[1].as_ref().unwrap().source, Source::Redis);
    // And the hybrid mode.
    let h = HybridLimiter::new(rl.clone(), HybridConfig::default()).unwrap();
    assert!(matches!(h.check("bad").await, Err(Error::Data(_))));
    assert!(!rl.circuit_open());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn limiters_of_different_algorithms_under_one_name_do_not_collide() {
    let server = Server::start();
    let q = Quota::per_hour(3);
    let make = |kind| {
        let spec = Spec::new(kind, &[q]).unwrap();
        RedisLimiter::from_spec(&server.url(), "same", &spec, cfg(FailurePolicy::Open)).unwrap()
    };
    let kinds = [
        Kind::TokenBucket,
        Kind::FixedWindow,
        Kind::SlidingWindow,
        Kind::LeakyBucket,
        Kind::Shaper,
    ];
    let limiters: Vec<RedisLimiter> = kinds.into_iter().map(make).collect();
    // Interleaved on one key: each limiter admits its own 3 and denies the 4th,
    // decided by Redis (today: script errors or a window reading a GCRA value).
    for round in 0..4 {
        for (kind, rl) in kinds.iter().zip(&limiters) {
            let v = rl.check("user").await.unwrap();
            assert_eq!(v.source, Source::Redis, "{kind}: round {round}");
            assert_eq!(v.decision.allowed, round < 3, "{kind}: round {round}");
        }
    }
    assert_eq!(
        limiters
            .iter()
            .map(|l| l.redis_key("user"))
            .collect::<std::collections::HashSet<_>>()
            .len(),
        kinds.len()
    );
}

#[test]
fn bad_ports_are_refused_at_construction() {
    let spec = Spec::parse(Kind::TokenBucket, "10/s").unwrap();
    for url in [
        "redis://127.0.0.1:notaport",
        "redis://127.0.0.1:99999",
        "redis+cluster://127.0.0.1:7000,127.0.0.1:99999",
    ] {
        match RedisLimiter::from_spec(url, "x", &spec, Config::default()) {
            Err(Error::Config(c)) => assert_eq!(c.field(), "url", "{url}"),
            other => panic!("{url}: {other:?}"),
        }
    }
}

/// The hybrid mode with the server SIGSTOPped, 8 tasks on one key whose
/// leases are single units (so every admission is a round trip): no check
/// waits past timeout + connect timeout; once the circuit is open, the checks
/// that wait are at most one probe per cooldown.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hybrid_under_sigstop_every_check_is_bounded_and_only_the_probe_waits() {
    let server = Server::start();
    let limit = Limit::from_quota(Kind::TokenBucket, Quota::per_second(5000).burst(5)).unwrap();
    let rl = RedisLimiter::new(
        sluicegate_redis::Backend::from_url(&server.url()).unwrap(),
        "stop",
        limit,
        cfg(FailurePolicy::Closed),
    )
    .unwrap();
    // Leases of one unit: every check past the first makes a round trip.
    let one = HybridConfig {
        max_batch: Some(1),
        ..HybridConfig::default()
    };
    let h = HybridLimiter::new(rl, one).unwrap();
    assert_eq!(h.max_batch(), 1);
    // Warm: connected, the script cached.
    for _ in 0..20 {
        h.check("k").await.unwrap();
    }
    let outage = Duration::from_millis(700);
    let latencies = Arc::new(Mutex::new(Vec::new()));
    let start = Instant::now();
    let end = start + outage;
    server.pause();
    let mut tasks = Vec::new();
    for _ in 0..8 {
        let (h, latencies) = (h.clone(), Arc::clone(&latencies));
        tasks.push(tokio::spawn(async move {
            while Instant::now() < end {
                let t = Instant::now();
                let v = h.check("k").await.unwrap();
                latencies
                    .lock()
                    .unwrap()
                    .push((t.duration_since(start), t.elapsed(), v.source));
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    server.resume();
    let l = latencies.lock().unwrap();
    let max = l.iter().map(|x| x.1).max().unwrap();
    let bound = TIMEOUT + CONNECT + SLACK;
    assert!(max <= bound, "a check took {max:?} (bound {bound:?})");
    // After the first cooldown, the circuit is open or half-open: a check waits
    // only if it is the probe, so at most one slow check per cooldown.
    let settled = TIMEOUT + CONNECT + SLACK;
    let slow_late = l
        .iter()
        .filter(|x| x.0 > settled && x.1 > Duration::from_millis(10))
        .count();
    let probes = (outage.as_millis() / COOLDOWN.as_millis()) as usize + 1;
    assert!(
        slow_late <= probes,
        "{slow_late} slow checks after the circuit opened ({probes} probes); {} checks",
        l.len()
    );
    assert!(l.iter().all(|x| x.2 != Source::Redis || x.0 < settled));
    println!(
        "hybrid SIGSTOP: {} checks, max {max:?}, {slow_late} slow after the breaker opened",
        l.len()
    );
}
