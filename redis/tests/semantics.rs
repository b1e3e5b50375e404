//! What the scripts promise about the stored state, the script cache, keys and
//! concurrency, on real servers.
// Written against the deprecated `Algorithm` names, which must keep working;
// tests/isolation.rs and tests/operations.rs use `Spec` and `Kind`.
#![allow(deprecated)]

mod common;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use redis::AsyncCommands;
use sluicegate::Quota;
use sluicegate_redis::{blocking, Algorithm, Config, Error, Kind, Limit, RedisLimiter, Source};

fn all_algorithms() -> Vec<Limit> {
    let q = Quota::per_minute(5);
    vec![
        Limit::new(Algorithm::TokenBucket, q).unwrap(),
        Limit::new(Algorithm::LeakyBucket, q).unwrap(),
        Limit::new(
            Algorithm::Shaper {
                max_delay: Duration::ZERO,
            },
            q,
        )
        .unwrap(),
        Limit::new(Algorithm::FixedWindow, q).unwrap(),
        Limit::new(Algorithm::SlidingWindow, q).unwrap(),
    ]
}

#[tokio::test]
async fn denial_and_peek_write_nothing_and_expiry_is_the_fresh_instant() {
    let backend = common::standalone();
    let mut raw = common::raw(&backend).await;
    for limit in all_algorithms() {
        let rl = common::limiter(backend.clone(), limit);
        let key = rl.redis_key("k");
        // A peek on an absent key leaves it absent.
        let p = rl.try_peek_n("k", 3).await.unwrap();
        assert!(p.decision.allowed);
        assert_eq!(p.granted, 0);
        assert!(
            !raw.exists::<_, bool>(&key).await.unwrap(),
            "{:?}: peek wrote",
            limit.algorithm()
        );
        // Spend everything.
        let r = rl.try_check_n("k", 5).await.unwrap();
        assert!(r.decision.allowed && r.decision.remaining == 0);
        let value: String = raw.get(&key).await.unwrap();
        let pttl: i64 = raw.pttl(&key).await.unwrap();
        // PX is when the key decides like an absent one: the reset for the bucket,
        // the end of the window for the fixed window, the end of the next window for
        // the sliding window.
        let reset_ms = r.decision.reset_after_ns.div_ceil(1_000_000) as i64;
        match limit.algorithm() {
            Algorithm::SlidingWindow => assert!(pttl > reset_ms - 50 && pttl <= 120_000, "{pttl}"),
            _ => assert!(
                pttl <= reset_ms && pttl > reset_ms - 50,
                "{:?}: pttl {pttl} reset {reset_ms}",
                limit.algorithm()
            ),
        }
        // Denials and peeks change neither the value nor the expiry.
        for _ in 0..3 {
            let d = rl.try_check_n("k", 1).await.unwrap();
            assert!(!d.decision.allowed && d.decision.retry_after_ns > 0);
            assert_eq!(d.granted, 0);
            rl.try_peek_n("k", 0).await.unwrap();
        }
        let after: String = raw.get(&key).await.unwrap();
        let pttl_after: i64 = raw.pttl(&key).await.unwrap();
        assert_eq!(after, value, "{:?}: a denial wrote", limit.algorithm());
        assert!(
            pttl_after <= pttl,
            "{:?}: a denial extended the expiry",
            limit.algorithm()
        );
    }
}

#[tokio::test]
async fn cost_above_capacity_is_an_error_and_never_sent() {
    let rl = common::limiter(
        common::standalone(),
        Limit::new(Algorithm::TokenBucket, Quota::per_second(5).burst(3)).unwrap(),
    );
    assert!(matches!(rl.check_n("k", 4).await, Err(Error::Capacity(e)) if e.capacity == 3));
    let mut raw = common::raw(&common::standalone()).await;
    assert!(!raw.exists::<_, bool>(rl.redis_key("k")).await.unwrap());
}

#[tokio::test]
async fn lease_grants_up_to_n() {
    let rl = common::limiter(
        common::standalone(),
        Limit::new(Algorithm::TokenBucket, Quota::per_hour(10)).unwrap(),
    );
    let a = rl.try_lease("k", 4).await.unwrap();
    assert_eq!((a.granted, a.decision.remaining), (4, 6));
    let b = rl.try_lease("k", 100).await.unwrap(); // clamped to capacity, gets the 6 left
    assert_eq!((b.granted, b.decision.remaining), (6, 0));
    let c = rl.try_lease("k", 3).await.unwrap();
    assert!(!c.decision.allowed && c.granted == 0);
    assert!(c.decision.retry_after_ns >= 359_000_000_000); // one unit per 6 minutes

    // A window leases from the window it is decided in; a shaper with a delay
    // does not lease.
    let w = common::limiter(
        common::standalone(),
        Limit::new(Algorithm::FixedWindow, Quota::per_hour(10)).unwrap(),
    );
    let d = w.try_lease("k", 4).await.unwrap();
    assert_eq!((d.granted, d.decision.remaining), (4, 6));
    let shaper = Algorithm::Shaper {
        max_delay: Duration::from_millis(5),
    };
    let s = common::limiter(
        common::standalone(),
        Limit::new(shaper, Quota::per_second(10)).unwrap(),
    );
    assert!(s.try_lease("k", 1).await.is_err());
}

#[tokio::test]
async fn script_cache_flush_takes_the_eval_path_once() {
    let backend = common::standalone();
    let mut raw = common::raw(&backend).await;
    let rl = common::limiter(
        backend,
        Limit::new(Algorithm::FixedWindow, Quota::per_hour(3)).unwrap(),
    );
    assert_eq!(rl.try_check_n("k", 1).await.unwrap().decision.remaining, 2);
    let _: () = redis::cmd("SCRIPT")
        .arg("FLUSH")
        .query_async(&mut raw)
        .await
        .unwrap();
    // NOSCRIPT → EVAL: charged exactly once (not zero, not twice).
    assert_eq!(rl.try_check_n("k", 1).await.unwrap().decision.remaining, 1);
    let sha = redis::Script::new(sluicegate_redis::script::FIXED_WINDOW_LUA)
        .get_hash()
        .to_owned();
    let cached: Vec<bool> = redis::cmd("SCRIPT")
        .arg("EXISTS")
        .arg(&sha)
        .query_async(&mut raw)
        .await
        .unwrap();
    assert_eq!(cached, vec![true], "EVAL re-cached the script");
    assert_eq!(rl.try_check_n("k", 1).await.unwrap().decision.remaining, 0);
}

#[tokio::test]
async fn keys_carry_prefix_and_hash_tag_and_work_on_the_cluster() {
    let limit = Limit::new(Algorithm::SlidingWindow, Quota::per_hour(2)).unwrap();
    let cfg = Config {
        prefix: "myapp:".into(),
        timeout: Duration::from_millis(500),
        ..Config::default()
    };
    let rl = RedisLimiter::new(common::cluster(), "login", limit, cfg).unwrap();
    assert_eq!(rl.redis_key("u1"), "myapp:login:sliding_window:{u1}");
    // Many keys: they land on all three masters, each routed by its slot.
    let run = common::fresh("c");
    for i in 0..60 {
        let k = format!("{run}-{i}");
        assert_eq!(rl.check(&k).await.unwrap().source, Source::Redis);
        assert!(rl.check(&k).await.unwrap().decision.allowed);
        let d = rl.check(&k).await.unwrap();
        assert!(!d.decision.allowed && d.source == Source::Redis);
    }
}

/// Many tasks on one key, through four limiters (four connections, as four
/// processes would be): exactly the burst is admitted, never more.
async fn no_over_admission(backend: sluicegate_redis::Backend) {
    let limit = Limit::new(Algorithm::TokenBucket, Quota::per_hour(3600).burst(200)).unwrap();
    let name = common::fresh("hot");
    let cfg = Config {
        timeout: Duration::from_secs(2),
        ..Config::default()
    };
    let limiters: Vec<_> = (0..4)
        .map(|_| RedisLimiter::new(backend.clone(), &name, limit, cfg.clone()).unwrap())
        .collect();
    let admitted = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for t in 0..64 {
        let rl = limiters[t % 4].clone();
        let admitted = Arc::clone(&admitted);
        tasks.push(tokio::spawn(async move {
            for _ in 0..10 {
                let v = rl.check("one-key").await.unwrap();
                assert_eq!(v.source, Source::Redis);
                if v.decision.allowed {
                    admitted.fetch_add(1, Ordering::Relaxed);
                }
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    // 640 checks within well under a second: the burst of 200 plus at most one
    // refilled unit per second of the run.
    let a = admitted.load(Ordering::Relaxed);
    assert!((200..=202).contains(&a), "admitted {a}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_tasks_one_key_no_over_admission_standalone() {
    common::within_a_minute(no_over_admission(common::standalone())).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_tasks_one_key_no_over_admission_cluster() {
    common::within_a_minute(no_over_admission(common::cluster())).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_many_pipelines_in_order_and_survives_a_script_flush() {
    let backend = common::standalone();
    let rl = common::limiter(
        backend.clone(),
        Limit::new(Algorithm::FixedWindow, Quota::per_hour(3)).unwrap(),
    );
    rl.peek_n("warm", 0).await.unwrap(); // connected: the batch goes as one pipeline
    let items: Vec<(&str, u64)> = vec![
        ("a", 1),
        ("b", 3),
        ("a", 1),
        ("a", 1),
        ("a", 1),
        ("b", 1),
        ("c", 4),
    ];
    let v = rl.check_many(&items).await;
    assert!(matches!(v[6], Err(Error::Capacity(_))));
    let allowed: Vec<bool> = v[..6]
        .iter()
        .map(|r| r.as_ref().unwrap().decision.allowed)
        .collect();
    // Per key, in order: a admits 3 of 4; b takes all 3 then is denied.
    assert_eq!(allowed, vec![true, true, true, true, false, false]);
    assert!(v[..6]
        .iter()
        .all(|r| r.as_ref().unwrap().source == Source::Redis));
    // Script cache flushed: every EVALSHA of the batch gets NOSCRIPT (none ran),
    // and they are sent again as EVAL: each charged exactly once.
    let mut raw = common::raw(&backend).await;
    let _: () = redis::cmd("SCRIPT")
        .arg("FLUSH")
        .query_async(&mut raw)
        .await
        .unwrap();
    let v = rl.check_many(&[("d", 1), ("d", 1), ("e", 2)]).await;
    let rem: Vec<u64> = v
        .iter()
        .map(|r| r.as_ref().unwrap().decision.remaining)
        .collect();
    assert_eq!(rem, vec![2, 1, 1]);
    assert!(v
        .iter()
        .all(|r| r.as_ref().unwrap().source == Source::Redis));
}

#[test]
fn blocking_api_from_threads() {
    let limit = Limit::new(Algorithm::TokenBucket, Quota::per_hour(3600).burst(50)).unwrap();
    let cfg = Config {
        timeout: Duration::from_secs(2),
        ..Config::default()
    };
    let rl = blocking::RedisLimiter::new(common::standalone(), &common::fresh("blk"), limit, cfg)
        .unwrap();
    let admitted = AtomicU64::new(0);
    std::thread::scope(|s| {
        for _ in 0..4 {
            s.spawn(|| {
                for _ in 0..20 {
                    if rl.check("k").unwrap().decision.allowed {
                        admitted.fetch_add(1, Ordering::Relaxed);
                    }
                }
            });
        }
    });
    assert!((50..=51).contains(&admitted.load(Ordering::Relaxed)));
    assert_eq!(rl.peek_n("k", 0).unwrap().decision.limit, 50);
    // Calls on the threads' own connections (tests/blocking.rs has the rest).
    assert!(rl.stats().direct_calls > 0);
}

/// On a cluster the blocking API has no pool: every call goes through the
/// cluster connection (routed by slot), from plain threads as from a runtime.
#[test]
fn blocking_api_on_a_cluster_goes_through_the_cluster_connection() {
    let limit = Limit::from_quota(Kind::TokenBucket, Quota::per_hour(1).burst(5)).unwrap();
    let cfg = Config {
        timeout: Duration::from_secs(2),
        ..Config::default()
    };
    let rl =
        blocking::RedisLimiter::new(common::cluster(), &common::fresh("blkc"), limit, cfg).unwrap();
    rl.connect().unwrap();
    for k in ["a", "b", "c", "d"] {
        for want in (0..5).rev() {
            let v = rl.check(k).unwrap();
            assert_eq!(
                (v.source, v.decision.remaining),
                (Source::Redis, want),
                "{k}"
            );
        }
        assert!(!rl.try_check_n(k, 1).unwrap().decision.allowed);
    }
    assert_eq!(rl.stats().direct_calls, 0);
}

/// Coalescing with Redis unreachable: one flight of 16 checks fails, and each
/// check is answered by the policy, no later than the window plus the connect
/// timeout (plus scheduling slack); costs above the capacity are still errors.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_coalesced_flight_fails_each_check_over_to_the_policy() {
    let limit = Limit::new(Algorithm::TokenBucket, Quota::per_second(10).burst(5)).unwrap();
    let cfg = Config {
        timeout: Duration::from_millis(25),
        connect_timeout: Duration::from_millis(25),
        policy: sluicegate_redis::FailurePolicy::Closed,
        coalesce: Some(Duration::from_millis(2)),
        ..Config::default()
    };
    let rl = RedisLimiter::new(
        sluicegate_redis::Backend::from_url("redis://127.0.0.1:1").unwrap(),
        "co-down",
        limit,
        cfg,
    )
    .unwrap();
    let t = std::time::Instant::now();
    let vs = futures_util::future::join_all((0..16).map(|_| rl.check("k"))).await;
    assert!(t.elapsed() < Duration::from_millis(2 + 25 + 25 + 100));
    for v in vs {
        let v = v.unwrap();
        assert_eq!(v.source, Source::FailClosed);
        assert!(!v.decision.allowed);
    }
    assert!(matches!(rl.check_n("k", 6).await, Err(Error::Capacity(_))));
    assert!(rl.try_check_n("k", 1).await.is_err());
}
