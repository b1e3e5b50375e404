//! Hybrid mode on a real server: most checks without a round trip at a steady
//! rate, the global quota never exceeded across several processes' limiters, and
//! the negative cache after a denial.

mod common;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use sluicegate::Quota;
use sluicegate_redis::{
    Algorithm, Config, HybridConfig, HybridLimiter, Limit, RedisLimiter, Source,
};

fn cfg() -> Config {
    Config {
        timeout: Duration::from_millis(500),
        ..Config::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn steady_rate_under_the_quota_is_served_locally() {
    let limit = Limit::new(Algorithm::TokenBucket, Quota::per_second(2000).burst(1000)).unwrap();
    let rl =
        RedisLimiter::new(common::standalone(), &common::fresh("steady"), limit, cfg()).unwrap();
    let h = HybridLimiter::new(rl, HybridConfig::default()).unwrap();
    // 500 checks a second (a quarter of the quota) for one second.
    let mut tick = tokio::time::interval(Duration::from_millis(2));
    let mut allowed = 0;
    for _ in 0..500 {
        tick.tick().await;
        if h.check("k").await.unwrap().decision.allowed {
            allowed += 1;
        }
    }
    let s = h.stats();
    assert_eq!(allowed, 500, "under the quota everything is admitted");
    assert!(
        s.local_share() >= 0.95,
        "only {:.1}% local ({s:?})",
        100.0 * s.local_share()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_global_quota_is_never_exceeded_by_a_fleet() {
    // Four processes' limiters (four connections) on one key: 200/s, bursts of 40.
    let limit = Limit::new(Algorithm::TokenBucket, Quota::per_second(200).burst(40)).unwrap();
    let name = common::fresh("fleet");
    let fleet: Vec<HybridLimiter> = (0..4)
        .map(|_| {
            let rl = RedisLimiter::new(common::standalone(), &name, limit, cfg()).unwrap();
            HybridLimiter::new(rl, HybridConfig::default()).unwrap()
        })
        .collect();
    let admitted = Arc::new(AtomicU64::new(0));
    let start = Instant::now();
    let run = Duration::from_millis(1000);
    let mut tasks = Vec::new();
    for t in 0..16 {
        let (h, admitted) = (fleet[t % 4].clone(), Arc::clone(&admitted));
        tasks.push(tokio::spawn(async move {
            let mut n = 0;
            while start.elapsed() < run && n < 100_000 {
                n += 1;
                let v = h.check("shared").await.unwrap();
                assert_ne!(v.source, Source::FailOpen);
                if v.decision.allowed {
                    admitted.fetch_add(1, Ordering::Relaxed);
                }
                tokio::task::yield_now().await;
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let elapsed = start.elapsed().as_secs_f64();
    let a = admitted.load(Ordering::Relaxed) as f64;
    // Every admitted unit was charged on Redis during the run: at most b + r·Δ.
    let bound = 40.0 + 200.0 * elapsed + 1.0;
    assert!(a <= bound, "admitted {a} > {bound:.0}");
    // And the fleet is not starved: leases drop to single units when scarce.
    assert!(
        a >= 0.6 * (40.0 + 200.0 * elapsed),
        "admitted only {a} in {elapsed:.3} s"
    );
    let local: u64 = fleet.iter().map(|h| h.stats().local).sum();
    let trips: u64 = fleet.iter().map(|h| h.stats().round_trips).sum();
    assert!(
        local > trips,
        "the local tier answered {local}, Redis {trips}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_denial_is_cached_locally_until_retry_after() {
    let limit = Limit::new(Algorithm::TokenBucket, Quota::per_hour(5)).unwrap();
    let rl = RedisLimiter::new(common::standalone(), &common::fresh("neg"), limit, cfg()).unwrap();
    let h = HybridLimiter::new(rl, HybridConfig::default()).unwrap();
    for _ in 0..5 {
        assert!(h.check("k").await.unwrap().decision.allowed);
    }
    let before = h.stats().round_trips;
    let denied = h.check("k").await.unwrap();
    assert!(!denied.decision.allowed);
    let trips = h.stats().round_trips;
    assert!(trips <= before + 1);
    for _ in 0..200 {
        let v = h.check("k").await.unwrap();
        assert!(!v.decision.allowed && v.source == Source::LocalDenial);
        assert!(v.decision.retry_after_ns > 700_000_000_000); // 12 minutes per unit
    }
    assert_eq!(
        h.stats().round_trips,
        trips,
        "no round trip while the denial is cached"
    );
}
