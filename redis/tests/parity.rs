//! The shared suite: the same traffic through the Redis scripts and the local
//! algorithms, decision by decision.
//!
//! Redis decides at its own `TIME` (microseconds), which no client can set; every
//! reply carries the `now_us` it used, and the local algorithm's pure `decide` is
//! run on the local word at `now_us × 1000` ns. The local parameters are the
//! Redis limit's, i.e. the quota with its emission interval rounded up to a whole
//! microsecond (see `Limit`). Every field must be equal, except the sliding
//! window's `retry_after`/`reset_after`, which Redis rounds up to the microsecond:
//! `local ≤ redis < local + 1 µs`.
// Written against the deprecated `Algorithm` names, which must keep working;
// tests/isolation.rs and tests/operations.rs use `Spec` and `Kind`.
#![allow(deprecated)]

mod common;

use std::time::Duration;

use sluicegate::{Algorithm as _, Decision, Fixed, Gcra, Leaky, Quota, Shaping, Sliding, Step};
use sluicegate_redis::{Algorithm, Backend, Limit, Reply};

use common::Rng;

/// The local decision function with the Redis limit's parameters.
fn local_decider(limit: &Limit) -> Box<dyn Fn(u64, u64, u64) -> Step + Send> {
    let q = limit.quota();
    match limit.algorithm() {
        Algorithm::TokenBucket | Algorithm::LeakyBucket | Algorithm::Shaper { .. } => {
            let t_ns = limit.emission_interval_us() * 1000;
            let local_q = Quota::from_nanos(1, t_ns).burst(q.burst_size());
            match limit.algorithm() {
                Algorithm::TokenBucket => {
                    let p = Gcra::params(&local_q).unwrap();
                    Box::new(move |w, now, n| Gcra::decide(&p, w, now, n))
                }
                Algorithm::LeakyBucket => {
                    let p = Leaky::params(&local_q).unwrap();
                    Box::new(move |w, now, n| Leaky::decide(&p, w, now, n))
                }
                Algorithm::Shaper { max_delay } => {
                    let slack_ns = max_delay.as_micros() as u64 * 1000;
                    let p = sluicegate::ShaperParams::new(&local_q, slack_ns).unwrap();
                    Box::new(move |w, now, n| Shaping::decide(&p, w, now, n))
                }
                _ => unreachable!(),
            }
        }
        Algorithm::FixedWindow => {
            let p = Fixed::params(&q).unwrap();
            Box::new(move |w, now, n| Fixed::decide(&p, w, now, n))
        }
        Algorithm::SlidingWindow => {
            let p = Sliding::params(&q).unwrap();
            Box::new(move |w, now, n| Sliding::decide(&p, w, now, n))
        }
    }
}

fn same(alg: Algorithm, redis: &Decision, local: &Decision) -> bool {
    let close = |r: u64, l: u64| {
        if alg == Algorithm::SlidingWindow {
            r >= l && r < l + 1000
        } else {
            r == l
        }
    };
    redis.allowed == local.allowed
        && redis.remaining == local.remaining
        && redis.limit == local.limit
        && close(redis.retry_after_ns, local.retry_after_ns)
        && close(redis.reset_after_ns, local.reset_after_ns)
}

/// Runs `count` requests of random cost (peeks and consumes) with random gaps and
/// compares every decision; returns how many were admitted and denied.
async fn run(
    backend: Backend,
    limit: Limit,
    seed: u64,
    count: usize,
    max_gap_us: u64,
) -> (u32, u32) {
    let rl = common::limiter(backend, limit);
    let decide = local_decider(&limit);
    let mut rng = Rng(seed);
    let mut word = 0u64;
    let (mut admitted, mut denied) = (0, 0);
    let cap = limit.capacity();
    for i in 0..count {
        let n = match rng.below(10) {
            0 => 0,
            1 => cap,
            2 => 1 + rng.below(cap),
            _ => 1,
        };
        let peek = rng.below(8) == 0;
        let r: Reply = if peek {
            rl.try_peek_n("k", n).await.unwrap()
        } else {
            rl.try_check_n("k", n).await.unwrap()
        };
        let step = decide(word, r.now_us * 1000, n);
        assert!(
            same(limit.algorithm(), &r.decision, &step.decision),
            "{:?} request {i} (n = {n}, peek = {peek}) at {} µs:\n redis {:?}\n local {:?}",
            limit.algorithm(),
            r.now_us,
            r.decision,
            step.decision
        );
        assert_eq!(
            r.delay_ns,
            if step.decision.allowed {
                step.delay_ns
            } else {
                0
            }
        );
        if !peek {
            if let Some(next) = step.next {
                word = next;
            }
            if r.decision.allowed {
                assert_eq!(r.granted, n);
                admitted += 1;
            } else {
                denied += 1;
            }
        }
        if rng.below(3) != 0 {
            tokio::time::sleep(Duration::from_micros(rng.below(max_gap_us))).await;
        }
    }
    (admitted, denied)
}

fn limits() -> Vec<(Limit, u64)> {
    let ms = Duration::from_millis;
    vec![
        (
            Limit::new(Algorithm::TokenBucket, Quota::per_second(50).burst(5)).unwrap(),
            25_000,
        ),
        // T = 333 333 334 ns is not whole microseconds: Redis uses 333 334 µs.
        (
            Limit::new(Algorithm::TokenBucket, Quota::new(3, ms(100)).burst(4)).unwrap(),
            40_000,
        ),
        (
            Limit::new(Algorithm::LeakyBucket, Quota::per_second(100).burst(10)).unwrap(),
            12_000,
        ),
        (
            Limit::new(
                Algorithm::Shaper { max_delay: ms(40) },
                Quota::per_second(100).burst(2),
            )
            .unwrap(),
            15_000,
        ),
        (
            Limit::new(Algorithm::FixedWindow, Quota::new(8, ms(50))).unwrap(),
            10_000,
        ),
        (
            Limit::new(Algorithm::SlidingWindow, Quota::new(8, ms(50))).unwrap(),
            10_000,
        ),
        (
            Limit::new(Algorithm::SlidingWindow, Quota::new(5, ms(30))).unwrap(),
            8_000,
        ),
    ]
}

/// Runs `each(backend, i, limit, gap)` for the `i`th `(limit, gap)` of [`limits`],
/// all at once (a task each), and waits for every one.
async fn each_limit<F>(backend: Backend, each: impl Fn(Backend, u64, Limit, u64) -> F)
where
    F: std::future::Future<Output = ()> + Send + 'static,
{
    let tasks: Vec<_> = limits()
        .into_iter()
        .enumerate()
        .map(|(i, (limit, gap))| tokio::spawn(each(backend.clone(), i as u64, limit, gap)))
        .collect();
    for t in tasks {
        t.await.unwrap();
    }
}

async fn suite(backend: Backend) {
    each_limit(backend, |b, i, limit, gap| async move {
        let (a, d) = run(b, limit, 0x9E37_79B9_7F4A_7C15 ^ i, 300, gap).await;
        // The traffic must have exercised both answers.
        assert!(
            a > 20 && d > 20,
            "{:?}: {a} admitted, {d} denied",
            limit.algorithm()
        );
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_decides_like_the_local_algorithms_standalone() {
    common::within_a_minute(suite(common::standalone())).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_decides_like_the_local_algorithms_cluster() {
    common::within_a_minute(suite(common::cluster())).await;
}

/// Coalescing (`Config::coalesce`): rounds of 12 concurrent consuming checks of
/// one key, random costs (0 to the capacity), merged into one flight; every reply
/// must be the local algorithm's decision with the costs applied one after
/// another in arrival order (the order `join_all` first polls them), each at the
/// `now_us` its reply carries: exactly what sequential single calls decide.
async fn coalesced(backend: Backend, limit: Limit, seed: u64) -> (u32, u32, u32) {
    let cfg = sluicegate_redis::Config {
        timeout: Duration::from_millis(500),
        connect_timeout: Duration::from_millis(500),
        coalesce: Some(Duration::from_millis(2)),
        ..sluicegate_redis::Config::default()
    };
    let rl =
        sluicegate_redis::RedisLimiter::new(backend, &common::fresh("co"), limit, cfg).unwrap();
    let decide = local_decider(&limit);
    let mut rng = Rng(seed);
    let mut word = 0u64;
    let cap = limit.capacity();
    let (mut admitted, mut denied, mut admitted_after_denial) = (0, 0, 0);
    for round in 0..25 {
        let costs: Vec<u64> = (0..12)
            .map(|_| match rng.below(6) {
                0 => 0,
                1 => cap,
                _ => 1 + rng.below(cap),
            })
            .collect();
        let replies =
            futures_util::future::join_all(costs.iter().map(|&n| rl.try_check_n("k", n))).await;
        let mut prev_now = 0;
        let mut seen_denial = false;
        for (i, (r, &n)) in replies.into_iter().zip(&costs).enumerate() {
            let r: Reply = r.unwrap();
            assert!(r.now_us >= prev_now, "round {round}: replies out of order");
            prev_now = r.now_us;
            let step = decide(word, r.now_us * 1000, n);
            assert!(
                same(limit.algorithm(), &r.decision, &step.decision),
                "{:?} round {round} item {i} (n = {n}) at {} µs:\n redis {:?}\n local {:?}",
                limit.algorithm(),
                r.now_us,
                r.decision,
                step.decision
            );
            if let Some(next) = step.next {
                word = next;
            }
            if n > 0 {
                if r.decision.allowed {
                    assert_eq!(r.granted, n);
                    admitted += 1;
                    if seen_denial {
                        admitted_after_denial += 1;
                    }
                } else {
                    denied += 1;
                    seen_denial = true;
                }
            }
        }
        tokio::time::sleep(Duration::from_micros(rng.below(60_000))).await;
    }
    (admitted, denied, admitted_after_denial)
}

async fn coalesced_suite(backend: Backend) {
    each_limit(backend, |b, i, limit, _| async move {
        let (a, d, after) = coalesced(b, limit, 0xC0A1_E5CE ^ i).await;
        assert!(
            a > 10 && d > 10,
            "{:?}: {a} admitted, {d} denied",
            limit.algorithm()
        );
        // A smaller cost after a denied one in the same flight: merging the
        // costs into one sum would have denied it.
        assert!(
            after > 0,
            "{:?}: no admission after a denial",
            limit.algorithm()
        );
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn coalesced_checks_decide_like_sequential_ones_standalone() {
    let backend = common::standalone();
    common::within_a_minute(coalesced_suite(backend.clone())).await;
    // The flights went as the multi-cost scripts.
    let mut c = common::raw(&backend).await;
    for src in [
        sluicegate_redis::script::GCRA_LUA,
        sluicegate_redis::script::FIXED_WINDOW_LUA,
        sluicegate_redis::script::SLIDING_WINDOW_LUA,
    ] {
        let sha = redis::Script::new(&sluicegate_redis::script::multi_source(src))
            .get_hash()
            .to_owned();
        let cached: Vec<bool> = redis::cmd("SCRIPT")
            .arg("EXISTS")
            .arg(sha)
            .query_async(&mut c)
            .await
            .unwrap();
        assert_eq!(cached, vec![true]);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn coalesced_checks_decide_like_sequential_ones_cluster() {
    common::within_a_minute(coalesced_suite(common::cluster())).await;
}

/// The windows' lease mode against the local algorithm: a lease of `n` at
/// `now_us` grants `g = min(n, remaining)` with `remaining` what a peek at cost 0
/// reports, and decides exactly as a consume of `g`; with `g = 0` it is the
/// denial of one unit and writes nothing. Mixed with plain consumes. Returns how
/// many leases were granted in full, in part, and denied.
async fn leases(
    backend: Backend,
    limit: Limit,
    seed: u64,
    count: usize,
    max_gap_us: u64,
) -> [u32; 3] {
    let rl = common::limiter(backend, limit);
    let decide = local_decider(&limit);
    let mut rng = Rng(seed);
    let mut word = 0u64;
    let mut seen = [0u32; 3];
    let cap = limit.capacity();
    for i in 0..count {
        let n = match rng.below(4) {
            0 => cap,
            1 => 1 + rng.below(cap),
            _ => 1,
        };
        if rng.below(5) == 0 {
            let r = rl.try_check_n("k", n).await.unwrap();
            let step = decide(word, r.now_us * 1000, n);
            assert!(same(limit.algorithm(), &r.decision, &step.decision));
            if let Some(next) = step.next {
                word = next;
            }
            continue;
        }
        let r = rl.try_lease("k", n).await.unwrap();
        let now = r.now_us * 1000;
        let available = decide(word, now, 0).decision.remaining;
        let g = n.min(available);
        let step = decide(word, now, g.max(1));
        assert!(
            same(limit.algorithm(), &r.decision, &step.decision)
                && r.granted == g
                && r.decision.allowed == (g > 0),
            "{:?} lease {i} (n = {n}, {available} available) at {} µs:\n redis {r:?}\n local {:?}",
            limit.algorithm(),
            r.now_us,
            step.decision
        );
        if let Some(next) = step.next {
            word = next;
        }
        seen[if g == n {
            0
        } else if g > 0 {
            1
        } else {
            2
        }] += 1;
        if rng.below(3) != 0 {
            tokio::time::sleep(Duration::from_micros(rng.below(max_gap_us))).await;
        }
    }
    seen
}

async fn lease_suite(backend: Backend) {
    each_limit(backend, |b, i, limit, gap| async move {
        // Leases are the windows' only (the seed still counts every limit).
        if !matches!(
            limit.algorithm(),
            Algorithm::FixedWindow | Algorithm::SlidingWindow
        ) {
            return;
        }
        let [full, part, denied] = leases(b, limit, 0x1EA5_E000 ^ i, 300, gap).await;
        assert!(
            full > 20 && part > 5 && denied > 20,
            "{:?}: {full} granted in full, {part} in part, {denied} denied",
            limit.algorithm()
        );
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn window_leases_decide_like_the_local_algorithms_standalone() {
    common::within_a_minute(lease_suite(common::standalone())).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn window_leases_decide_like_the_local_algorithms_cluster() {
    common::within_a_minute(lease_suite(common::cluster())).await;
}
