//! Benchmarks against a local redis-server (`scripts/bench-redis` starts one and
//! sets `SLUICEGATE_REDIS_URL`): a PING round trip as the floor, our check, and
//! redis_rate's GCRA script run through redis-rs, each sequential from one
//! client; the hybrid mode's local hits from one and two threads (`hybrid_local_hit`:
//! the key map, the lease and the counters under contention); then throughput with
//! pipelining and the hybrid mode's local share, printed as a table with the
//! targets (issue 15's): one client's sequential check, async and blocking,
//! against PING from the same connection kind; `check_many(256)` against a
//! pipeline of 256 PINGs; the hybrid local share per algorithm, paced and at
//! saturation. `scripts/bench-redis` adds the Python client's row.
// Written against the deprecated `Algorithm` names, which must keep working.
#![allow(deprecated)]

use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::Criterion;
use sluicegate::Quota;
use sluicegate_redis::{
    blocking, Algorithm, Backend, Config, HybridConfig, HybridLimiter, Limit, RedisLimiter,
};
use tokio::runtime::Runtime;

const REDIS_RATE: &str = include_str!("redis_rate_gcra.lua");

struct Env {
    rt: Runtime,
    url: String,
    conn: redis::aio::MultiplexedConnection,
    ours: RedisLimiter,
    ours_blocking: blocking::RedisLimiter,
    rate_script: redis::Script,
}

fn env() -> Env {
    let url = std::env::var("SLUICEGATE_REDIS_URL")
        .unwrap_or_else(|_| panic!("SLUICEGATE_REDIS_URL is not set: run scripts/bench-redis"));
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let conn = rt
        .block_on(
            redis::Client::open(url.as_str())
                .unwrap()
                .get_multiplexed_async_connection(),
        )
        .unwrap();
    let ours = limiter(&url, "bench");
    let (limit, cfg) = never_exhausted();
    let ours_blocking =
        blocking::RedisLimiter::new(Backend::from_url(&url).unwrap(), "bench", limit, cfg).unwrap();
    Env {
        rt,
        url,
        conn,
        ours,
        ours_blocking,
        rate_script: redis::Script::new(REDIS_RATE),
    }
}

/// A quota no benchmark exhausts, so every check does the full admit-and-write
/// path, and a timeout no healthy run reaches.
fn never_exhausted() -> (Limit, Config) {
    let limit = Limit::new(
        Algorithm::TokenBucket,
        Quota::per_second(1_000_000).burst(1_000_000),
    )
    .unwrap();
    let cfg = Config {
        timeout: Duration::from_secs(1),
        ..Config::default()
    };
    (limit, cfg)
}

fn limiter(url: &str, name: &str) -> RedisLimiter {
    let (limit, cfg) = never_exhausted();
    RedisLimiter::new(Backend::from_url(url).unwrap(), name, limit, cfg).unwrap()
}

async fn ping(c: &mut redis::aio::MultiplexedConnection) {
    let _: String = redis::cmd("PING").query_async(c).await.unwrap();
}

async fn redis_rate(s: &redis::Script, c: &mut redis::aio::MultiplexedConnection) {
    let _: redis::Value = s
        .key("bench:redis_rate")
        .arg(1_000_000)
        .arg(1_000_000)
        .arg(1)
        .arg(1)
        .invoke_async(c)
        .await
        .unwrap();
}

fn criterion_benches(c: &mut Criterion, e: &mut Env) {
    let mut g = c.benchmark_group("sequential_round_trip");
    g.bench_function("ping", |b| b.iter(|| e.rt.block_on(ping(&mut e.conn))));
    g.bench_function("sluicegate_check", |b| {
        b.iter(|| black_box(e.rt.block_on(e.ours.check("k")).unwrap()))
    });
    g.bench_function("redis_rate_gcra", |b| {
        b.iter(|| e.rt.block_on(redis_rate(&e.rate_script, &mut e.conn)))
    });
    g.finish();
    hybrid_benches(c, e);
}

/// A hybrid limiter whose quota no benchmark exhausts (a token bucket of 10^6/s
/// with a burst of 2^40, or a fixed window of 5·10^8/s; leases of up to 2^20
/// units), so every check is a lease hit but the few that lease.
fn hybrid_limiter(url: &str, name: &str, alg: Algorithm) -> HybridLimiter {
    let quota = if alg == Algorithm::TokenBucket {
        Quota::per_second(1_000_000).burst(1 << 40)
    } else {
        Quota::per_second(500_000_000)
    };
    let limit = Limit::new(alg, quota).unwrap();
    let cfg = Config {
        timeout: Duration::from_secs(1),
        ..Config::default()
    };
    let name = format!("{name}-{}", std::process::id());
    let rl = RedisLimiter::new(Backend::from_url(url).unwrap(), &name, limit, cfg).unwrap();
    let hc = HybridConfig {
        max_batch: Some(1 << 20),
        ..HybridConfig::default()
    };
    HybridLimiter::new(rl, hc).unwrap()
}

/// `iters` checks of `key` on each of `keys.len()` threads at once (each thread
/// its key), on plain threads that drive their own futures (`Handle::block_on`)
/// while `rt`'s worker does the I/O of the rare lease. Returns the slowest
/// thread's time: per iteration, the time of one check on one thread.
fn hybrid_threads(
    rt: &tokio::runtime::Runtime,
    h: &HybridLimiter,
    keys: &[&str],
    iters: u64,
) -> Duration {
    let start = std::sync::Barrier::new(keys.len());
    std::thread::scope(|s| {
        let threads: Vec<_> = keys
            .iter()
            .map(|&key| {
                let (handle, h, start) = (rt.handle().clone(), h.clone(), &start);
                s.spawn(move || {
                    handle.block_on(async move {
                        start.wait();
                        let t = Instant::now();
                        for _ in 0..iters {
                            black_box(h.check(key).await.unwrap());
                        }
                        t.elapsed()
                    })
                })
            })
            .collect();
        threads
            .into_iter()
            .map(|t| t.join().unwrap())
            .max()
            .unwrap_or_default()
    })
}

fn hybrid_benches(c: &mut Criterion, e: &Env) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let warm = |alg| {
        rt.block_on(async {
            let h = hybrid_limiter(&e.url, &format!("bench-hybrid-{alg:?}"), alg);
            // The keys exist and hold a lease sized for a high local rate.
            for key in ["a", "b"] {
                for _ in 0..100_000 {
                    h.check(key).await.unwrap();
                }
            }
            h
        })
    };
    let h = warm(Algorithm::TokenBucket);
    let w = warm(Algorithm::FixedWindow);
    let mut g = c.benchmark_group("hybrid_local_hit");
    g.bench_function("1_thread", |b| {
        b.iter_custom(|iters| hybrid_threads(&rt, &h, &["a"], iters))
    });
    g.bench_function("2_threads_own_keys", |b| {
        b.iter_custom(|iters| hybrid_threads(&rt, &h, &["a", "b"], iters))
    });
    g.bench_function("2_threads_one_key", |b| {
        b.iter_custom(|iters| hybrid_threads(&rt, &h, &["a", "a"], iters))
    });
    g.bench_function("fixed_window_1_thread", |b| {
        b.iter_custom(|iters| hybrid_threads(&rt, &w, &["a"], iters))
    });
    g.bench_function("fixed_window_2_threads_own_keys", |b| {
        b.iter_custom(|iters| hybrid_threads(&rt, &w, &["a", "b"], iters))
    });
    g.finish();
    for (what, h) in [("token bucket", &h), ("fixed window", &w)] {
        let s = h.stats();
        println!(
            "hybrid_local_hit, {what}: {:.4}% of {} checks local",
            100.0 * s.local_share(),
            s.local + s.round_trips
        );
    }
}

/// A hybrid limiter of `quota` with the default lease settings, under a name of
/// this run's own.
fn one_key_hybrid(url: &str, what: &str, alg: Algorithm, quota: Quota) -> HybridLimiter {
    let cfg = Config {
        timeout: Duration::from_secs(1),
        ..Config::default()
    };
    let name = format!("{what}-{alg:?}-{}", std::process::id());
    let limit = Limit::new(alg, quota).unwrap();
    HybridLimiter::new(
        RedisLimiter::new(Backend::from_url(url).unwrap(), &name, limit, cfg).unwrap(),
        HybridConfig::default(),
    )
    .unwrap()
}

/// 4000 checks of one key at 2000/s through a hybrid limiter of `quota`: how
/// many were admitted, and the share answered locally.
async fn hybrid_steady(url: &str, alg: Algorithm, quota: Quota) -> (u64, f64) {
    let h = one_key_hybrid(url, "hybrid", alg, quota);
    let mut tick = tokio::time::interval(Duration::from_micros(500));
    let mut allowed = 0u64;
    for _ in 0..4000 {
        tick.tick().await;
        if h.check("k").await.unwrap().decision.allowed {
            allowed += 1;
        }
    }
    (allowed, h.stats().local_share())
}

/// One key checked back to back for a second (one client, as fast as answers
/// come) through a hybrid limiter of `quota`, from wherever in a window it
/// starts: how many were admitted, their bound (the bucket: `b + r·t` for the
/// elapsed `t`; a window: its limit for every window the second touched), and
/// the share answered locally.
async fn hybrid_saturated(url: &str, alg: Algorithm, quota: Quota) -> (u64, u64, f64) {
    let h = one_key_hybrid(url, "saturated", alg, quota);
    let start = Instant::now();
    let mut allowed = 0u64;
    while start.elapsed() < Duration::from_secs(1) {
        if h.check("k").await.unwrap().decision.allowed {
            allowed += 1;
        }
    }
    // Windows: at most two windows' limits meet a second that straddles one edge;
    // the bucket: its burst plus what refilled.
    let secs = start.elapsed().as_secs_f64();
    let rate = quota.amount() as f64 / quota.period().as_secs_f64();
    let bound = if alg == Algorithm::TokenBucket {
        quota.burst_size() + (rate * secs).ceil() as u64
    } else {
        quota.amount() * (secs.ceil() as u64 + 1)
    };
    (allowed, bound, h.stats().local_share())
}

/// Checks per second of 64 tasks checking one hot key back to back for `for_`,
/// through one limiter (one multiplexed connection), coalescing off or on.
async fn hot_key(url: &str, coalesce: Option<Duration>, for_: Duration) -> f64 {
    let cfg = Config {
        timeout: Duration::from_secs(1),
        coalesce,
        ..Config::default()
    };
    let name = format!("hot-{}-{}", coalesce.is_some(), std::process::id());
    let limit = Limit::new(Algorithm::TokenBucket, Quota::per_second(1_000_000)).unwrap();
    let rl = RedisLimiter::new(Backend::from_url(url).unwrap(), &name, limit, cfg).unwrap();
    rl.check("hot").await.unwrap();
    let end = Instant::now() + for_;
    let tasks: Vec<_> = (0..64)
        .map(|_| {
            let rl = rl.clone();
            tokio::spawn(async move {
                let mut n = 0u64;
                while Instant::now() < end {
                    black_box(rl.check("hot").await.unwrap());
                    n += 1;
                }
                n
            })
        })
        .collect();
    let start = Instant::now();
    let mut total = 0;
    for t in tasks {
        total += t.await.unwrap();
    }
    total as f64 / start.elapsed().as_secs_f64()
}

/// Operations per second of `f` run back to back for `for_`.
fn rate(for_: Duration, mut f: impl FnMut() -> u64) -> f64 {
    let start = Instant::now();
    let mut ops = 0;
    while start.elapsed() < for_ {
        ops += f();
    }
    ops as f64 / start.elapsed().as_secs_f64()
}

fn table(e: &mut Env) {
    // Interleaved rounds, so that drift in the machine's speed (other processes,
    // frequency) falls on all three alike.
    let round = Duration::from_millis(50);
    let (mut ping_rate, mut ours_rate, mut rr_rate) = (0.0, 0.0, 0.0);
    let (mut blocking_ping_rate, mut blocking_rate) = (0.0, 0.0);
    // A blocking client's PING: redis-rs's synchronous connection.
    let mut sync_conn = redis::Client::open(e.url.as_str())
        .unwrap()
        .get_connection()
        .unwrap();
    let rounds = 40;
    for _ in 0..rounds {
        ping_rate += rate(round, || {
            e.rt.block_on(ping(&mut e.conn));
            1
        }) / rounds as f64;
        ours_rate += rate(round, || {
            e.rt.block_on(e.ours.check("k")).unwrap();
            1
        }) / rounds as f64;
        blocking_ping_rate += rate(round, || {
            let _: String = redis::cmd("PING").query(&mut sync_conn).unwrap();
            1
        }) / rounds as f64;
        blocking_rate += rate(round, || {
            e.ours_blocking.check("k").unwrap();
            1
        }) / rounds as f64;
        rr_rate += rate(round, || {
            e.rt.block_on(redis_rate(&e.rate_script, &mut e.conn));
            1
        }) / rounds as f64;
    }
    let d = Duration::from_secs(2);
    // Pipelined: batches of 256 checks over 64 keys, one write and one read each,
    // two batches in flight so the server never waits for the client to build one.
    let keys: Vec<String> = (0..64).map(|i| format!("p{i}")).collect();
    let items: Vec<(&str, u64)> = (0..256).map(|i| (keys[i % 64].as_str(), 1)).collect();
    // Interleaved with the same shape of PING pipelines (two of 256 in flight).
    let mut pings = redis::pipe();
    for _ in 0..256 {
        pings.cmd("PING");
    }
    let (mut piped, mut piped_ping) = (0.0, 0.0);
    for _ in 0..4 {
        piped += rate(d / 4, || {
            let (a, b) = e.rt.block_on(async {
                tokio::join!(e.ours.check_many(&items), e.ours.check_many(&items))
            });
            (a.len() + b.len()) as u64
        }) / 4.0;
        piped_ping += rate(d / 4, || {
            let (mut c1, mut c2) = (e.conn.clone(), e.conn.clone());
            e.rt.block_on(async {
                let (a, b): (
                    redis::RedisResult<Vec<String>>,
                    redis::RedisResult<Vec<String>>,
                ) = tokio::join!(pings.query_async(&mut c1), pings.query_async(&mut c2));
                (a.unwrap().len() + b.unwrap().len()) as u64
            })
        }) / 4.0;
    }
    // One hot key, 64 concurrent tasks: one script call per check, or per-key
    // coalescing (a flight per key, sent after one yield). Interleaved rounds.
    let (mut plain, mut coalesced) = (0.0, 0.0);
    for _ in 0..4 {
        plain +=
            e.rt.block_on(hot_key(&e.url, None, Duration::from_millis(500))) / 4.0;
        coalesced += e.rt.block_on(hot_key(
            &e.url,
            Some(Duration::ZERO),
            Duration::from_millis(500),
        )) / 4.0;
    }
    // Hybrid, per algorithm, on one key of a 10 000/s quota: a steady 2000
    // checks/s (a fifth of it; two seconds of 1 s windows: window changes), and
    // one client as fast as it can (saturation).
    let algorithms = [
        (
            "token bucket",
            Algorithm::TokenBucket,
            Quota::per_second(10_000).burst(5_000),
        ),
        (
            "fixed window",
            Algorithm::FixedWindow,
            Quota::per_second(10_000),
        ),
        (
            "sliding window",
            Algorithm::SlidingWindow,
            Quota::per_second(10_000),
        ),
    ];
    let hybrid: Vec<(&str, u64, f64)> = algorithms
        .iter()
        .map(|&(what, alg, quota)| {
            let (allowed, share) = e.rt.block_on(hybrid_steady(&e.url, alg, quota));
            (what, allowed, share)
        })
        .collect();
    let saturated: Vec<(&str, u64, u64, f64)> = algorithms
        .iter()
        .map(|&(what, alg, quota)| {
            let (allowed, bound, share) = e.rt.block_on(hybrid_saturated(&e.url, alg, quota));
            (what, allowed, bound, share)
        })
        .collect();

    let yes = |ok: bool| if ok { "met" } else { "MISSED" };
    println!();
    println!("| measurement | result | target | |");
    println!("|---|---|---|---|");
    println!("| PING round trip, sequential (floor) | {ping_rate:.0} ops/s | | |");
    println!(
        "| sluicegate check, sequential | {ours_rate:.0} checks/s ({:.2}× PING) | ≥ 0.9× PING | {} |",
        ours_rate / ping_rate,
        yes(ours_rate >= 0.9 * ping_rate)
    );
    println!(
        "| redis_rate GCRA script, sequential | {rr_rate:.0} checks/s ({:.2}× PING) | (comparison) | |",
        rr_rate / ping_rate
    );
    println!(
        "| PING, blocking client (redis-rs sync connection), sequential (floor) | {blocking_ping_rate:.0} ops/s | | |"
    );
    println!(
        "| sluicegate blocking check, sequential | {blocking_rate:.0} checks/s ({:.2}× blocking PING) | ≥ 0.9× PING | {} |",
        blocking_rate / blocking_ping_rate,
        yes(blocking_rate >= 0.9 * blocking_ping_rate)
    );
    println!("| PING, pipelined (2 × 256 in flight) | {piped_ping:.0} ops/s | | |");
    println!(
        "| sluicegate check, pipelined (2 × check_many of 256 in flight) | {piped:.0} checks/s ({:.2}× pipelined PING) | ≥ 100 000/s and ≥ 0.5× PING | {} |",
        piped / piped_ping,
        yes(piped >= 100_000.0 && piped >= 0.5 * piped_ping)
    );
    println!(
        "| one hot key, 64 tasks, one script call per check | {plain:.0} checks/s | (anchor) | |"
    );
    println!(
        "| one hot key, 64 tasks, coalesced per key (`Config::coalesce`) | {coalesced:.0} checks/s ({:.2}× uncoalesced) | (gain) | |",
        coalesced / plain
    );
    for (what, allowed, share) in hybrid {
        println!(
            "| hybrid {what}, steady 2000/s under a 10 000/s quota | {:.1}% without a round trip ({allowed}/4000 admitted) | ≥ 95% | {} |",
            100.0 * share,
            yes(share >= 0.95)
        );
    }
    for (what, allowed, bound, share) in saturated {
        println!(
            "| hybrid {what}, one client saturating a 10 000/s quota for 1 s | {:.1}% without a round trip ({allowed} admitted, bound {bound}) | ≥ 95%, within the bound | {} |",
            100.0 * share,
            yes(share >= 0.95 && allowed <= bound)
        );
    }
}

fn main() {
    let mut e = env();
    let mut c = Criterion::default()
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2))
        .sample_size(30)
        .configure_from_args();
    criterion_benches(&mut c, &mut e);
    c.final_summary();
    table(&mut e);
}
