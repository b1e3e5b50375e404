//! Fault tests on servers of the test's own: Redis killed, restarted (its script
//! cache lost: the NOSCRIPT path), and paused with SIGSTOP mid-run, each under
//! every failure policy. Each checks that the latency of a check stays bounded
//! (the timeout and the connect timeout, then nothing once the breaker is open),
//! that the policy's answers are what it promises with no over-admission beyond
//! its bound, and that checks go back to Redis when it returns.
//!
//! The scenarios run one after another in one test, so that no two of them share
//! the machine's cores while latencies are measured.
// Written against the deprecated `Algorithm` names, which must keep working;
// tests/isolation.rs and tests/operations.rs use `Spec` and `Kind`.
#![allow(deprecated)]

mod common;

use std::time::{Duration, Instant};

use common::Server;
use sluicegate::Quota;
use sluicegate_redis::{
    Algorithm, Backend, BreakerConfig, Config, FailurePolicy, HybridConfig, HybridLimiter, Limit,
    RedisLimiter, Source,
};

use common::fault::{cfg, outage_latency, Sample, CONNECT, COOLDOWN, SLACK, TIMEOUT};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Fault {
    Kill,
    Restart,
    Pause,
}

/// 8 tasks checking one key for `for_` (a check per millisecond each).
async fn load(rl: &RedisLimiter, for_: Duration) -> Vec<Sample> {
    common::fault::load(rl, &["k"], Instant::now(), for_).await
}

fn percentile(s: &[Sample], p: f64) -> Duration {
    let mut l: Vec<_> = s.iter().map(|x| x.latency).collect();
    l.sort();
    l[((l.len() - 1) as f64 * p) as usize]
}

async fn scenario(policy: FailurePolicy, fault: Fault) -> String {
    let mut server = Server::start();
    // 100 per second, bursts of 20; the local share (50%) is 50/s, bursts of 10.
    let limit = Limit::new(Algorithm::TokenBucket, Quota::per_second(100).burst(20)).unwrap();
    let cfg = cfg(policy);
    let rl = RedisLimiter::new(Backend::from_url(&server.url()).unwrap(), "f", limit, cfg).unwrap();

    // Connected first (a cold connect on a loaded machine may take longer than
    // the 25 ms connect timeout; the faults, not the first connect, are tested).
    let warm = std::time::Instant::now();
    while rl.connect().await.is_err() {
        assert!(
            warm.elapsed() < Duration::from_secs(2),
            "{policy:?} {fault:?}: no connection"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // Healthy: Redis decides.
    let healthy = load(&rl, Duration::from_millis(150)).await;
    let other: Vec<_> = healthy
        .iter()
        .filter(|s| s.verdict.source != Source::Redis)
        .map(|s| (s.verdict.source, s.latency))
        .collect();
    assert!(
        other.is_empty(),
        "{policy:?} {fault:?}: healthy, yet answered by {other:?} ({:?})",
        rl.last_error()
    );
    let healthy_admitted = healthy
        .iter()
        .filter(|s| s.verdict.decision.allowed)
        .count();
    assert!(
        healthy_admitted <= 20 + 15 + 1,
        "healthy over-admission: {healthy_admitted}"
    );

    let outage_len = Duration::from_millis(400);
    let outage = match fault {
        Fault::Kill => {
            server.kill();
            load(&rl, outage_len).await
        }
        Fault::Pause => {
            server.pause();
            load(&rl, outage_len).await
        }
        Fault::Restart => {
            // Checks run while the server dies and comes back empty.
            let rl2 = rl.clone();
            let during = tokio::spawn(async move { load(&rl2, outage_len).await });
            tokio::time::sleep(Duration::from_millis(50)).await;
            server.restart();
            during.await.unwrap()
        }
    };
    let t_back = Instant::now();
    match fault {
        Fault::Kill => server.restart(),
        Fault::Pause => server.resume(),
        Fault::Restart => {}
    }

    // Latency: no check waits past the timeout plus one connect attempt.
    let (max, slow) = outage_latency(&outage, &format!("{policy:?} {fault:?}"));
    let degraded: Vec<&Sample> = outage
        .iter()
        .filter(|s| s.verdict.source != Source::Redis)
        .collect();
    if fault != Fault::Restart {
        // Once the breaker is open, a dead Redis costs nothing per check: only the
        // checks before it opened and one probe per cooldown wait.
        assert!(
            slow * 10 < outage.len(),
            "{policy:?} {fault:?}: {slow} of {} checks slow",
            outage.len()
        );
        assert!(!degraded.is_empty());
    }
    // The policy's answers.
    let admitted = degraded
        .iter()
        .filter(|s| s.verdict.decision.allowed)
        .count();
    match policy {
        FailurePolicy::Open => {
            assert!(degraded
                .iter()
                .all(|s| s.verdict.source == Source::FailOpen && s.verdict.decision.allowed))
        }
        FailurePolicy::Closed => {
            assert!(degraded
                .iter()
                .all(|s| s.verdict.source == Source::FailClosed));
            assert_eq!(admitted, 0, "fail closed admitted");
        }
        FailurePolicy::Local { .. } => {
            assert!(degraded
                .iter()
                .all(|s| s.verdict.source == Source::LocalFallback));
            // The local share: burst 10 plus 50/s over the outage.
            let cap = 10 + (50.0 * (outage_len + SLACK).as_secs_f64()).ceil() as usize;
            assert!(
                admitted <= cap,
                "local fallback admitted {admitted} > {cap}"
            );
            if fault != Fault::Restart {
                assert!(admitted >= 10, "local fallback admitted only {admitted}");
            }
        }
    }

    // Recovery: back on Redis within one cooldown (plus a probe), the NOSCRIPT
    // path taken on the restarted server.
    let deadline = Instant::now() + COOLDOWN + Duration::from_secs(2);
    let recovered = loop {
        let v = rl.check("k").await.unwrap();
        if v.source == Source::Redis {
            break t_back.elapsed();
        }
        assert!(
            Instant::now() < deadline,
            "{policy:?} {fault:?}: no recovery"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    };
    assert!(
        recovered <= COOLDOWN + Duration::from_millis(500),
        "{policy:?} {fault:?}: recovered after {recovered:?}"
    );
    let after = load(&rl, Duration::from_millis(100)).await;
    assert!(
        after.iter().all(|s| s.verdict.source == Source::Redis),
        "{policy:?} {fault:?}: after recovery"
    );
    if fault != Fault::Pause {
        let mut c = redis::Client::open(server.url())
            .unwrap()
            .get_connection()
            .unwrap();
        let sha = redis::Script::new(sluicegate_redis::script::GCRA_LUA)
            .get_hash()
            .to_owned();
        let cached: Vec<bool> = redis::cmd("SCRIPT")
            .arg("EXISTS")
            .arg(sha)
            .query(&mut c)
            .unwrap();
        assert_eq!(
            cached,
            vec![true],
            "the new server got the script through EVAL"
        );
    }
    format!(
        "{:<28} {:<8} outage checks {:>5}  p50 {:>9.3?}  p99 {:>9.3?}  max {:>9.3?}  slow(>5ms) {:>3}  policy-admitted {:>4}  recovered in {:>9.3?}",
        format!("{policy:?}"),
        format!("{fault:?}"),
        outage.len(),
        percentile(&outage, 0.5),
        percentile(&outage, 0.99),
        max,
        slow,
        admitted,
        recovered
    )
}

/// The hybrid mode with Redis killed mid-run, fail closed: it spends what it had
/// leased (at most one batch) and then denies, at no latency; back on Redis after.
async fn hybrid_killed() -> String {
    let mut server = Server::start();
    let limit = Limit::new(Algorithm::TokenBucket, Quota::per_second(1000).burst(500)).unwrap();
    let cfg = Config {
        timeout: TIMEOUT,
        connect_timeout: CONNECT,
        breaker: BreakerConfig {
            failure_threshold: 3,
            cooldown: COOLDOWN,
        },
        policy: FailurePolicy::Closed,
        ..Config::default()
    };
    let rl = RedisLimiter::new(Backend::from_url(&server.url()).unwrap(), "h", limit, cfg).unwrap();
    let h = HybridLimiter::new(rl, HybridConfig::default()).unwrap();
    let mut tick = tokio::time::interval(Duration::from_millis(1));
    for _ in 0..200 {
        tick.tick().await;
        assert!(h.check("k").await.unwrap().decision.allowed);
    }
    server.kill();
    let (mut admitted, mut max, mut checks) = (0u64, Duration::ZERO, 0);
    let end = Instant::now() + Duration::from_millis(300);
    while Instant::now() < end {
        tick.tick().await;
        let t = Instant::now();
        let v = h.check("k").await.unwrap();
        max = max.max(t.elapsed());
        checks += 1;
        if v.decision.allowed {
            admitted += 1;
        }
    }
    assert!(
        max <= TIMEOUT + CONNECT + SLACK,
        "hybrid: a check took {max:?}"
    );
    // Fail closed: only units leased before the kill (at most one batch).
    assert!(
        admitted <= h.max_batch(),
        "hybrid admitted {admitted} > {}",
        h.max_batch()
    );
    server.restart();
    let back = Instant::now();
    loop {
        tick.tick().await;
        let v = h.check("k").await.unwrap();
        if v.decision.allowed {
            break;
        }
        assert!(
            back.elapsed() < COOLDOWN + Duration::from_secs(2),
            "hybrid: no recovery"
        );
    }
    format!("hybrid, fail closed, kill -9: {checks} checks in the outage, max {max:?}, {admitted} admitted from the lease held, allowed again after {:?}", back.elapsed())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_fault_under_every_policy() {
    let run = async {
        let mut lines = Vec::new();
        for policy in [
            FailurePolicy::Open,
            FailurePolicy::Closed,
            FailurePolicy::Local { share_percent: 50 },
        ] {
            for fault in [Fault::Kill, Fault::Restart, Fault::Pause] {
                lines.push(scenario(policy, fault).await);
            }
        }
        lines.push(hybrid_killed().await);
        lines
    };
    common::fault::report_within(Duration::from_secs(120), run).await;
}
