//! Hybrid mode on a real server: most checks without a round trip at a steady
//! rate, the global quota never exceeded across several processes' limiters, and
//! the negative cache after a denial; for the token bucket and for both windows
//! (whose fleet tests count every admission in its Redis-time window, and whose
//! leases must expire at their window's end).
// Written against the deprecated `Algorithm` names, which must keep working;
// tests/isolation.rs and tests/operations.rs use `Spec` and `Kind`.
#![allow(deprecated)]

mod common;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use redis::aio::MultiplexedConnection;
use sluicegate::Quota;
use sluicegate_redis::{
    Algorithm, Config, HybridConfig, HybridLimiter, Limit, RedisLimiter, Source, Verdict,
};

use common::Rng;

const WINDOWS: [Algorithm; 2] = [Algorithm::FixedWindow, Algorithm::SlidingWindow];

/// Prints `h`'s share of checks answered without a round trip, and asserts it
/// is at least `min`.
fn assert_local_share(what: impl std::fmt::Display, h: &HybridLimiter, min: f64) {
    let s = h.stats();
    let pct = 100.0 * s.local_share();
    eprintln!("{what}: {pct:.1}% local ({s:?})");
    assert!(
        s.local_share() >= min,
        "{what}: only {pct:.1}% local ({s:?})"
    );
}

fn cfg() -> Config {
    Config {
        timeout: Duration::from_millis(500),
        ..Config::default()
    }
}

/// 500 checks of one key, one every 2 ms (500 a second for one second); how many
/// were admitted.
async fn steady_500(h: &HybridLimiter) -> u32 {
    let mut tick = tokio::time::interval(Duration::from_millis(2));
    let mut allowed = 0;
    for _ in 0..500 {
        tick.tick().await;
        if h.check("k").await.unwrap().decision.allowed {
            allowed += 1;
        }
    }
    allowed
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn steady_rate_under_the_quota_is_served_locally() {
    let limit = Limit::new(Algorithm::TokenBucket, Quota::per_second(2000).burst(1000)).unwrap();
    let h = hybrid(&common::fresh("steady"), limit, HybridConfig::default());
    // A quarter of the quota.
    let allowed = steady_500(&h).await;
    assert_eq!(allowed, 500, "under the quota everything is admitted");
    assert_local_share("steady 500/s under 2000/s", &h, 0.95);
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
    // And the fleet is not starved: a denied process waits until a batch's worth
    // has refilled, then leases a batch (the units wait in Redis, never lost).
    assert!(
        a >= 0.6 * (40.0 + 200.0 * elapsed),
        "admitted only {a} in {elapsed:.3} s"
    );
    let local: u64 = fleet.iter().map(|h| h.stats().local).sum();
    let trips: u64 = fleet.iter().map(|h| h.stats().round_trips).sum();
    eprintln!(
        "fleet of 4 at saturation: {a} admitted in {elapsed:.3} s (bound {bound:.0}), {local} answered locally, {trips} round trips ({:.1}% local)",
        100.0 * local as f64 / (local + trips).max(1) as f64
    );
    assert!(
        local > trips,
        "the local tier answered {local}, Redis {trips}"
    );
}

/// `answers_locally` forecasts the next check on one thread: `false` before
/// each check that made a round trip, `true` before (nearly) every check served
/// by the lease or the cached denial; it spends nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn answers_locally_forecasts_whether_a_check_waits() {
    let limit = Limit::new(Algorithm::TokenBucket, Quota::per_second(2000).burst(1000)).unwrap();
    let h = hybrid(&common::fresh("forecast"), limit, HybridConfig::default());
    assert!(!h.answers_locally("k", 1), "no lease yet");
    assert!(!h.answers_locally("k", 0), "n = 0 peeks at Redis");
    assert!(
        h.answers_locally("k", 1001),
        "above the capacity: an error at once"
    );
    let mut tick = tokio::time::interval(Duration::from_millis(2));
    let (mut local, mut wrong) = (0, 0);
    for _ in 0..500 {
        tick.tick().await;
        let forecast = h.answers_locally("k", 1);
        let trips = h.stats().round_trips;
        assert_eq!(
            h.answers_locally("k", 1),
            forecast,
            "a forecast spends nothing"
        );
        assert!(h.check("k").await.unwrap().decision.allowed);
        let waited = h.stats().round_trips > trips;
        if forecast {
            local += 1;
            // A lease can expire between the forecast and the check.
            wrong += u32::from(waited);
        } else {
            assert!(waited, "a check forecast to wait made no round trip");
        }
    }
    assert!(local >= 450, "only {local} of 500 forecast local");
    assert!(
        wrong <= 5,
        "{wrong} checks forecast local made a round trip"
    );
    // A cached denial answers locally too.
    let limit = Limit::new(Algorithm::TokenBucket, Quota::per_hour(2)).unwrap();
    let h = hybrid(
        &common::fresh("forecast-deny"),
        limit,
        HybridConfig::default(),
    );
    for _ in 0..3 {
        h.check("k").await.unwrap();
    }
    assert!(!h.check("k").await.unwrap().decision.allowed);
    assert!(h.answers_locally("k", 1), "the denial is cached");
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

/// A key seen a few times a second under a window: its lease lasts to the
/// lease's expiry (the window's end here, the TTL being the window), not just
/// the horizon, so about one round trip a window serves it.
async fn window_slow_key(alg: Algorithm) {
    let limit = Limit::new(alg, Quota::per_second(1000)).unwrap();
    let hc = HybridConfig {
        horizon: Duration::from_millis(100),
        lease_ttl: Duration::from_secs(1),
        ..HybridConfig::default()
    };
    let h = hybrid(&common::fresh("slow-key"), limit, hc);
    // 20 checks a second for 2 s: leases of the horizon's 2 units would make
    // every other check a round trip.
    let mut tick = tokio::time::interval(Duration::from_millis(50));
    for _ in 0..40 {
        tick.tick().await;
        assert!(h.check("k").await.unwrap().decision.allowed);
    }
    assert_local_share(format!("{alg:?} 20/s"), &h, 0.75);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_key_leases_until_its_window_ends() {
    for alg in WINDOWS {
        window_slow_key(alg).await;
    }
}

/// Redis `TIME` in microseconds.
async fn redis_us(c: &mut MultiplexedConnection) -> u64 {
    let (s, us): (u64, u64) = redis::cmd("TIME").query_async(c).await.unwrap();
    s * 1_000_000 + us
}

/// Sleeps until Redis time is at least `at_us`.
async fn sleep_until_redis(c: &mut MultiplexedConnection, at_us: u64) {
    loop {
        let now = redis_us(c).await;
        if now >= at_us {
            return;
        }
        tokio::time::sleep(Duration::from_micros(at_us - now)).await;
    }
}

fn hybrid(name: &str, limit: Limit, hc: HybridConfig) -> HybridLimiter {
    let rl = RedisLimiter::new(common::standalone(), name, limit, cfg()).unwrap();
    HybridLimiter::new(rl, hc).unwrap()
}

async fn window_steady(alg: Algorithm) {
    let limit = Limit::new(alg, Quota::per_second(2000)).unwrap();
    let h = hybrid(&common::fresh("wsteady"), limit, HybridConfig::default());
    // A quarter of the limit, for a second: at least one window change, where the
    // leases of the old window expire.
    let allowed = steady_500(&h).await;
    assert_eq!(
        allowed, 500,
        "{alg:?}: under the limit everything is admitted"
    );
    assert_local_share(format!("{alg:?} steady"), &h, 0.95);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn windows_at_a_steady_rate_under_the_limit_are_served_locally() {
    for alg in WINDOWS {
        window_steady(alg).await;
    }
}

/// Four processes' limiters on one key of a window of 100 per 200 ms: two of them
/// at a slow random pace (leases left over at the windows' ends), two flat out
/// (taking whatever the others leave). Every check is bracketed by Redis `TIME`
/// on its own connection, so each admission's window is known up to that
/// bracket.
async fn window_fleet(alg: Algorithm) {
    let w_us = 200_000;
    let per_window = 100;
    let limit = Limit::new(alg, Quota::new(per_window, Duration::from_micros(w_us))).unwrap();
    let name = common::fresh("wfleet");
    // The paced ones lease large batches, which their slow pace leaves unspent
    // at the windows' ends.
    let paced_cfg = HybridConfig {
        horizon: Duration::from_millis(200),
        max_batch: Some(40),
        ..HybridConfig::default()
    };
    let fleet: Vec<HybridLimiter> = (0..4)
        .map(|i| {
            let hc = if i < 2 {
                paced_cfg
            } else {
                HybridConfig::default()
            };
            hybrid(&name, limit, hc)
        })
        .collect();
    let run = Duration::from_millis(2000);
    let start = Instant::now();
    let mut tasks = Vec::new();
    for t in 0..12u64 {
        let paced = t < 4;
        let h = fleet[if paced { t % 2 } else { 2 + t % 2 } as usize].clone();
        tasks.push(tokio::spawn(async move {
            let mut c = common::raw(&common::standalone()).await;
            let mut rng = Rng(0x5EED ^ ((t + 1) * 0x9E37_79B9));
            let mut admitted = Vec::new();
            let mut checks = 0u64;
            while start.elapsed() < run {
                let before = redis_us(&mut c).await;
                let v = h.check("shared").await.unwrap();
                let after = redis_us(&mut c).await;
                checks += 1;
                assert!(v.is_authoritative(), "{v:?}");
                if v.decision.allowed {
                    admitted.push((before, after));
                }
                if paced {
                    tokio::time::sleep(Duration::from_millis(5 + rng.below(30))).await;
                } else {
                    tokio::task::yield_now().await;
                }
            }
            (admitted, checks)
        }));
    }
    let mut admitted = Vec::new();
    let mut checks = 0;
    for t in tasks {
        let (a, c) = t.await.unwrap();
        admitted.extend(a);
        checks += c;
    }
    if let Some((i, j, count)) = common::over_limit(&admitted, w_us, per_window) {
        panic!(
            "{alg:?}: {count} admitted in windows {i}..={j}, more than {} allow",
            (j - i + 1) * per_window
        );
    }
    // Not starved: the flat-out tasks take most of each window (what sits unspent
    // in the others' leases at a window's end is lost to it).
    let windows = (run.as_micros() as u64 / w_us) as f64;
    assert!(
        admitted.len() as f64 >= 0.5 * per_window as f64 * windows,
        "{alg:?}: admitted only {} in {windows} windows",
        admitted.len()
    );
    let local: u64 = fleet.iter().map(|h| h.stats().local).sum();
    let trips: u64 = fleet.iter().map(|h| h.stats().round_trips).sum();
    println!(
        "{alg:?}: {} admitted in {windows} windows of {per_window}, {checks} checks, {local} local, {trips} round trips",
        admitted.len()
    );
    // A saturated sliding window frees its units one at a time, each a short
    // denial to cache and a lease of one: more round trips than a fixed window's.
    let share = if alg == Algorithm::SlidingWindow {
        2
    } else {
        1
    };
    assert!(
        share * local > trips,
        "{alg:?}: the local tier answered {local}, Redis {trips} ({checks} checks)"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fleet_never_exceeds_the_window_limit() {
    for alg in WINDOWS {
        window_fleet(alg).await;
    }
}

#[test]
fn the_window_count_check_sees_an_excess() {
    // 3 in window 0, 2 that may be in 0 or 1, 1 in window 1: fits 3 per window...
    let mut a = vec![(1, 2), (3, 4), (5, 6), (9, 11), (9, 12), (15, 16)];
    assert_eq!(common::over_limit(&a, 10, 3), None);
    // ...but not 2 (three certainly in window 0), nor, with one more that may be
    // in either, 3 (seven in two windows, though no window certainly holds four).
    assert_eq!(common::over_limit(&a, 10, 2), Some((0, 0, 3)));
    a.push((8, 13));
    assert_eq!(common::over_limit(&a, 10, 3), Some((0, 1, 7)));
}

async fn window_lease_expiry(alg: Algorithm) {
    let w_us = 600_000;
    let limit = Limit::new(alg, Quota::new(10_000, Duration::from_micros(w_us))).unwrap();
    // Leases live longer than the window, but for its end.
    let hc = HybridConfig {
        lease_ttl: Duration::from_secs(5),
        ..HybridConfig::default()
    };
    let h = hybrid(&common::fresh("wexpiry"), limit, hc);
    let mut c = common::raw(&common::standalone()).await;
    // Start 50 ms into a window.
    let now = redis_us(&mut c).await;
    let mut start = now - now % w_us + 50_000;
    if start < now {
        start += w_us;
    }
    let end = start - 50_000 + w_us;
    sleep_until_redis(&mut c, start).await;
    // One check a millisecond for 150 ms: leases of about 100 ms of checks.
    for _ in 0..150 {
        assert!(h.check("k").await.unwrap().decision.allowed);
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    // Until a lease with units to spare.
    loop {
        let v = h.check("k").await.unwrap();
        if v.source == Source::Lease && v.decision.remaining >= 5 {
            break;
        }
    }
    // Late in the window, the lease still serves...
    sleep_until_redis(&mut c, end - 60_000).await;
    let trips = h.stats().round_trips;
    let v = h.check("k").await.unwrap();
    assert_eq!(v.source, Source::Lease, "{alg:?}: {v:?}");
    assert!(v.decision.remaining >= 1);
    // ...but not once the window is over: its units were charged to the old one.
    sleep_until_redis(&mut c, end + 5_000).await;
    let v = h.check("k").await.unwrap();
    assert_eq!(v.source, Source::Redis, "{alg:?}: {v:?}");
    assert_eq!(h.stats().round_trips, trips + 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn window_leases_expire_at_the_window_end() {
    for alg in WINDOWS {
        window_lease_expiry(alg).await;
    }
}

/// Nanoseconds until the next midnight UTC (the end of a day window).
fn until_midnight_ns() -> u64 {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64;
    let day = 86_400_000_000_000;
    day - now % day
}

/// Two processes' limiters of `alg` at `quota` on one fresh name.
fn two_processes(tag: &str, alg: Algorithm, quota: Quota) -> (HybridLimiter, HybridLimiter) {
    let limit = Limit::new(alg, quota).unwrap();
    let name = common::fresh(tag);
    let one = || hybrid(&name, limit, HybridConfig::default());
    (one(), one())
}

/// That `v` was admitted (or denied, as `allowed` says) and answered by `source`.
#[track_caller]
fn assert_answer(alg: Algorithm, v: &Verdict, allowed: bool, source: Source) {
    assert!(
        v.decision.allowed == allowed && v.source == source,
        "{alg:?}: {v:?}"
    );
}

async fn window_negative_cache(alg: Algorithm) {
    // Two processes on one key of 5 a day: one spends them all.
    let (a, b) = two_processes("wneg", alg, Quota::per_day(5));
    // The first check of a cold key is a plain one, the rest spend leases.
    for _ in 0..5 {
        assert!(a.check("k").await.unwrap().decision.allowed);
    }
    // Its front limiter knows this process alone used the window (all but the
    // plain check's unit, which only Redis counts): the front denies a cost of
    // 2 without a round trip, a cost of 1 takes one, and is cached.
    let trips = a.stats().round_trips;
    let v = a.check_n("k", 2).await.unwrap();
    assert_answer(alg, &v, false, Source::LocalDenial);
    assert_eq!(a.stats().round_trips, trips);
    let v = a.check("k").await.unwrap();
    assert_answer(alg, &v, false, Source::Redis);
    let v = a.check("k").await.unwrap();
    assert_answer(alg, &v, false, Source::LocalDenial);
    assert_eq!(a.stats().round_trips, trips + 1);
    // The other asks Redis once, is denied until the day's end, and caches it.
    let v = b.check("k").await.unwrap();
    assert_answer(alg, &v, false, Source::Redis);
    let midnight = until_midnight_ns();
    assert!(
        v.decision.retry_after_ns + 5_000_000_000 >= midnight,
        "{alg:?}: {v:?}"
    );
    let trips = b.stats().round_trips;
    for i in 0..200 {
        let v = b.check_n("k", 1 + i % 5).await.unwrap();
        assert_answer(alg, &v, false, Source::LocalDenial);
        assert!(v.decision.retry_after_ns > 0);
    }
    assert_eq!(
        b.stats().round_trips,
        trips,
        "{alg:?}: no round trip while cached"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_window_denial_is_cached_locally() {
    for alg in WINDOWS {
        window_negative_cache(alg).await;
    }
}

async fn window_partial_lease(alg: Algorithm) {
    let (a, b) = two_processes("wpart", alg, Quota::per_day(10));
    assert!(a.check_n("k", 5).await.unwrap().decision.allowed);
    // b's first check of the key is a plain one (a cold key: no lease yet).
    let v = b.check("k").await.unwrap();
    assert_answer(alg, &v, true, Source::Redis);
    assert_eq!(b.keys(), 0, "{alg:?}: no lease state for a cold key");
    // 4 left: granted to b (the key is warm now), kept in its lease, and its
    // request of 6 denied.
    let v = b.check_n("k", 6).await.unwrap();
    assert_answer(alg, &v, false, Source::Redis);
    assert_eq!(v.decision.remaining, 4);
    assert!(v.decision.retry_after_ns > 0);
    let trips = b.stats().round_trips;
    // Another 6 is denied locally; the 4 serve smaller requests, locally.
    let v = b.check_n("k", 6).await.unwrap();
    assert_eq!(v.source, Source::LocalDenial, "{alg:?}: {v:?}");
    for _ in 0..4 {
        let v = b.check("k").await.unwrap();
        assert_answer(alg, &v, true, Source::Lease);
    }
    assert_eq!(b.stats().round_trips, trips);
    // Then one more is Redis' denial of one unit, cached for every cost.
    let v = b.check("k").await.unwrap();
    assert_answer(alg, &v, false, Source::Redis);
    let v = b.check("k").await.unwrap();
    assert_answer(alg, &v, false, Source::LocalDenial);
    assert_eq!(b.stats().round_trips, trips + 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partial_window_lease_serves_smaller_requests() {
    for alg in WINDOWS {
        window_partial_lease(alg).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_key_map_holds_at_most_max_keys() {
    let limit = Limit::new(Algorithm::FixedWindow, Quota::per_second(100)).unwrap();
    let hc = HybridConfig {
        max_keys: 8,
        ..HybridConfig::default()
    };
    let h = hybrid(&common::fresh("keys"), limit, hc);
    for i in 0..100 {
        assert!(h.check(&format!("k{i}")).await.unwrap().decision.allowed);
        assert!(h.keys() <= 8, "{} keys after {i}", h.keys());
    }
    // A key dropped from the map starts over with a fresh lease: still admitted
    // within the limit, never more.
    for _ in 0..5 {
        assert!(h.check("k0").await.unwrap().decision.allowed);
    }
}

/// 16 checks of `key` at once; the round trips they made.
async fn sixteen_at_once(h: &HybridLimiter, key: &str) -> u64 {
    let before = h.stats().round_trips;
    let checks: Vec<_> = (0..16)
        .map(|_| {
            let h = h.clone();
            let key = key.to_owned();
            tokio::spawn(async move { h.check(&key).await.unwrap() })
        })
        .collect();
    for c in checks {
        assert!(c.await.unwrap().decision.allowed);
    }
    h.stats().round_trips - before
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_checks_of_a_quiet_key_share_one_lease() {
    // A key gone quiet has no rate to size its lease by: the checks waiting for
    // its flight are counted into it, instead of each leasing its own unit in
    // turn (16 round trips one after another).
    for alg in [Algorithm::TokenBucket, Algorithm::FixedWindow] {
        let limit = Limit::new(alg, Quota::per_second(1000)).unwrap();
        let hc = HybridConfig {
            lease_ttl: Duration::from_millis(20),
            ..HybridConfig::default()
        };
        let h = hybrid(&common::fresh("quiet"), limit, hc);
        let mut worst = 0;
        for _ in 0..3 {
            worst = worst.max(sixteen_at_once(&h, "k").await);
            // Quiet for longer than two TTLs, and into the next window.
            tokio::time::sleep(Duration::from_millis(1100)).await;
        }
        eprintln!("{alg:?}: at most {worst} round trips for 16 checks at once");
        assert!(
            worst <= 6,
            "{alg:?}: {worst} round trips for 16 checks at once"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bucket_key_at_a_steady_rate_makes_one_round_trip_per_ttl() {
    // 40 checks a second for 3 s with a 250 ms TTL: 10 checks per lease life,
    // so at the floor (one round trip per TTL: the check at the expiry's tick)
    // 12 round trips, plus 2 or 3 to learn the rate: 14 or 15 were seen. A
    // lease sized at the mean rate, read low across the gap after each expiry,
    // runs out before its TTL: 17 were seen that way.
    let limit = Limit::new(Algorithm::TokenBucket, Quota::per_second(1000)).unwrap();
    let hc = HybridConfig {
        lease_ttl: Duration::from_millis(250),
        ..HybridConfig::default()
    };
    let h = hybrid(&common::fresh("floor"), limit, hc);
    let mut tick = tokio::time::interval(Duration::from_millis(25));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    for _ in 0..120 {
        tick.tick().await;
        assert!(h.check("k").await.unwrap().decision.allowed);
    }
    let trips = h.stats().round_trips;
    eprintln!("40/s for 3 s, TTL 250 ms: {trips} round trips");
    assert!(trips <= 15, "{trips} round trips: more than one per TTL");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cold_key_is_one_plain_check_and_keeps_no_lease_state() {
    // 300 keys each checked once (a key seen less than once a lease's life):
    // one script call per check, as the `redis` backend makes, each charging
    // exactly its cost, and no lease state kept. Before cold keys were told
    // apart, each of them got an entry and a lease of its own.
    for alg in [
        Algorithm::TokenBucket,
        Algorithm::FixedWindow,
        Algorithm::SlidingWindow,
    ] {
        let limit = Limit::new(alg, Quota::per_hour(10)).unwrap();
        let h = hybrid(&common::fresh("cold"), limit, HybridConfig::default());
        for i in 0..300 {
            let v = h.check_n(&format!("k{i}"), 3).await.unwrap();
            assert_answer(alg, &v, true, Source::Redis);
            // Charged 3 on Redis and nothing leased: 7 left of 10.
            assert_eq!(v.decision.remaining, 7, "{alg:?}: {v:?}");
        }
        assert_eq!(h.stats().round_trips, 300);
        // Two keys may share a slot of the sketch, which makes the second look
        // warm (and take the lease path): a few at most of 300 in 2^16 slots.
        let plain = h.remote().stats().redis;
        assert!(h.keys() <= 4, "{alg:?}: {} keys hold lease state", h.keys());
        assert!(plain >= 296, "{alg:?}: {plain} of 300 were plain checks");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_checked_again_within_a_lease_life_is_leased_for_its_rate() {
    // Checked every 20 ms (50 a second) with a 500 ms TTL: the first check is a
    // plain one, the second leases for the rate their gap shows (about 1.25 ×
    // 50/s × 0.5 s = 32 units), and the next ones are spent from that lease.
    let limit = Limit::new(Algorithm::TokenBucket, Quota::per_second(1000)).unwrap();
    let h = hybrid(&common::fresh("warm"), limit, HybridConfig::default());
    let mut tick = tokio::time::interval(Duration::from_millis(20));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut sources = Vec::new();
    for _ in 0..12 {
        tick.tick().await;
        let v = h.check("k").await.unwrap();
        assert!(v.decision.allowed);
        sources.push(v.source);
    }
    assert_eq!(&sources[..2], [Source::Redis, Source::Redis]);
    assert!(
        sources[2..].iter().all(|s| *s == Source::Lease),
        "the second check's lease holds the next ten: {sources:?}"
    );
    assert_eq!(h.keys(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cold_keys_denial_is_cached_locally() {
    let limit = Limit::new(Algorithm::TokenBucket, Quota::per_hour(2)).unwrap();
    let name = common::fresh("colddeny");
    let other = hybrid(&name, limit, HybridConfig::default());
    assert!(other.check_n("k", 2).await.unwrap().decision.allowed);
    let h = hybrid(&name, limit, HybridConfig::default());
    let v = h.check("k").await.unwrap();
    assert_answer(Algorithm::TokenBucket, &v, false, Source::Redis);
    for _ in 0..50 {
        let v = h.check("k").await.unwrap();
        assert_answer(Algorithm::TokenBucket, &v, false, Source::LocalDenial);
        assert!(v.decision.retry_after_ns > 0);
    }
    assert_eq!(h.stats().round_trips, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn window_keys_at_half_their_rate_are_never_denied() {
    // 200 keys of 20 a second, each checked 10 times a second for 3 s (20
    // keys every 10 ms): every check is admitted, and most from leases. A
    // warm key's first lease sized for the rest of a window it could not
    // place (no Redis time of its own yet) over-charged a sliding window,
    // whose estimate then denied checks under the rate.
    for alg in WINDOWS {
        let limit = Limit::new(alg, Quota::per_second(20)).unwrap();
        let h = hybrid(&common::fresh("halfrate"), limit, HybridConfig::default());
        let mut tick = tokio::time::interval(Duration::from_millis(10));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut denied = 0;
        for t in 0..300 {
            tick.tick().await;
            for k in 0..20 {
                let key = format!("k{}", (t % 10) * 20 + k);
                let v = h.check(&key).await.unwrap();
                if !v.decision.allowed {
                    denied += 1;
                    eprintln!("DENIED t={t} {key} {v:?}");
                }
            }
        }
        assert_eq!(denied, 0, "{alg:?}: {:?}", h.stats());
        assert_local_share(format!("{alg:?}: 200 keys at half their rate"), &h, 0.75);
    }
}
