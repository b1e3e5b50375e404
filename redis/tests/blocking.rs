//! The blocking API's own connections (src/direct.rs), on servers of the tests'
//! own: a check is written and read by the calling thread (it completes while
//! the limiter's runtime thread is held busy), from plain threads and from
//! inside Tokio runtimes of both flavours; many threads sharing one limiter stay
//! exact; the breaker, the failure policy and NOSCRIPT work as on the async
//! path when the server is killed, restarted and paused; errors are classified
//! as there; a pool of 0 is the runtime path.

mod common;

use std::error::Error as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use common::fault::{cfg as fault_cfg, CONNECT, COOLDOWN, SLACK, TIMEOUT};
use common::Server;
use sluicegate_redis::{
    blocking, Backend, Config, Error, FailurePolicy, Kind, Limit, Quota, Source,
};

fn cfg() -> Config {
    Config {
        timeout: Duration::from_secs(2),
        connect_timeout: Duration::from_secs(2),
        ..Config::default()
    }
}

/// `burst` units per key that do not come back during a test (one an hour).
fn hourly(burst: u64) -> Limit {
    Limit::from_quota(Kind::TokenBucket, Quota::per_hour(1).burst(burst)).unwrap()
}

fn limiter(server: &Server, limit: Limit, cfg: Config) -> blocking::RedisLimiter {
    let backend = Backend::from_url(&server.url()).unwrap();
    blocking::RedisLimiter::new(backend, &common::fresh("blk"), limit, cfg).unwrap()
}

/// Holds the limiter's runtime thread (its only worker) busy in a task until
/// the returned sender is dropped or sent to, or 20 s pass: a call that needs
/// that thread cannot complete meanwhile.
fn hold_runtime(rl: &blocking::RedisLimiter) -> mpsc::Sender<()> {
    let (started_tx, started_rx) = mpsc::channel();
    let (release_tx, release_rx) = mpsc::channel::<()>();
    rl.handle().spawn(async move {
        started_tx.send(()).unwrap();
        // Blocking on purpose: the worker thread is held, not yielded.
        let _ = release_rx.recv_timeout(Duration::from_secs(20));
    });
    started_rx
        .recv_timeout(Duration::from_secs(5))
        .expect("the runtime's worker runs the holding task");
    release_tx
}

/// 100 units of one key, checked one after another with the runtime's thread
/// held: every call completes (so the calling thread wrote and read it), the
/// decisions count down exactly, and each was a call on the calling thread.
#[test]
fn sequential_calls_run_on_the_calling_thread() {
    let server = Server::start();
    let rl = limiter(&server, hourly(100), cfg());
    let release = hold_runtime(&rl);
    let t = Instant::now();
    rl.connect().unwrap();
    for want in (50..100).rev() {
        let v = rl.check("k").unwrap();
        assert_eq!(v.source, Source::Redis);
        assert!(v.decision.allowed);
        assert_eq!(v.decision.remaining, want);
    }
    // A peek charges nothing; the raw call charges like a check.
    // (`remaining` after the units a check of it would take.)
    assert_eq!(rl.peek_n("k", 1).unwrap().decision.remaining, 49);
    for want in (0..50).rev() {
        let r = rl.try_check_n("k", 1).unwrap();
        assert!(r.decision.allowed && r.now_us > 0);
        assert_eq!(r.decision.remaining, want);
    }
    let v = rl.check("k").unwrap();
    assert!(!v.decision.allowed && v.decision.retry_after_ns > 0);
    // 50 checks, 1 peek, 50 raw calls, 1 denied check: all on this thread,
    // long before the holding task lets go (20 s).
    let s = rl.stats();
    assert_eq!(s.direct_calls, 102, "{s:?}");
    assert_eq!(s.redis, 52);
    assert!(t.elapsed() < Duration::from_secs(10), "{:?}", t.elapsed());
    // The key named as the async path names it.
    let rkey = rl.as_async().redis_key("k");
    assert!(rkey.ends_with(":token_bucket:{k}"));
    assert!(matches!(
        server.cmd(&["EXISTS", &rkey]),
        Some(redis::Value::Int(1))
    ));
    drop(release);
}

/// A pool of 0: every call goes through the runtime, as before the pool (and
/// so waits for a held runtime thread).
#[test]
fn a_pool_of_zero_goes_through_the_runtime() {
    let server = Server::start();
    let rl = limiter(
        &server,
        hourly(10),
        Config {
            blocking_connections: 0,
            ..cfg()
        },
    );
    for want in (0..10).rev() {
        assert_eq!(rl.check("k").unwrap().decision.remaining, want);
    }
    assert_eq!(rl.stats().direct_calls, 0);
    let release = hold_runtime(&rl);
    let (tx, rx) = mpsc::channel();
    let rl2 = rl.clone();
    std::thread::spawn(move || tx.send(rl2.check("k").map(|v| v.source)));
    // Held: no answer yet.
    assert!(rx.recv_timeout(Duration::from_millis(300)).is_err());
    release.send(()).unwrap();
    let source = rx.recv_timeout(Duration::from_secs(5)).unwrap().unwrap();
    assert_eq!(source, Source::Redis);
    assert_eq!(rl.stats().direct_calls, 0);
}

/// From inside a current-thread and a multi-thread Tokio runtime (a sync API
/// called in an async server), with the limiter's own runtime thread held:
/// the calls run on the calling thread there too. A batch, which pipelines on
/// the runtime's connection, still works once the runtime is free.
#[test]
fn inside_tokio_runtimes_of_both_flavours() {
    let server = Server::start();
    let rl = limiter(&server, hourly(20), cfg());
    for flavour in ["current_thread", "multi_thread"] {
        let outer = match flavour {
            "current_thread" => tokio::runtime::Builder::new_current_thread(),
            _ => tokio::runtime::Builder::new_multi_thread(),
        }
        .enable_all()
        .build()
        .unwrap();
        let key = format!("k-{flavour}");
        let release = hold_runtime(&rl);
        let before = rl.stats().direct_calls;
        let rl2 = rl.clone();
        let key2 = key.clone();
        let remaining: Vec<u64> = outer.block_on(async move {
            let mut out = Vec::new();
            for _ in 0..5 {
                let v = rl2.check(&key2).unwrap();
                assert_eq!(v.source, Source::Redis, "{flavour}");
                out.push(v.decision.remaining);
                tokio::task::yield_now().await;
            }
            out
        });
        assert_eq!(remaining, [19, 18, 17, 16, 15], "{flavour}");
        assert_eq!(rl.stats().direct_calls - before, 5, "{flavour}");
        drop(release);
        let rl2 = rl.clone();
        let batch = outer.block_on(async move { rl2.check_many(&[(key.as_str(), 2)]) });
        assert_eq!(batch[0].as_ref().unwrap().decision.remaining, 13);
    }
}

/// 16 threads share one limiter (more than its 8 pooled connections, and a
/// second limiter with 2, so calls also overflow to the multiplexed
/// connection): 4 keys of 50 units an hour, 40 checks per thread per key;
/// exactly 50 admitted per key, every decision Redis's.
#[test]
fn many_threads_sharing_one_limiter_stay_exact() {
    let server = Server::start();
    for pool in [8, 2] {
        let rl = limiter(
            &server,
            hourly(50),
            Config {
                blocking_connections: pool,
                ..cfg()
            },
        );
        let keys = ["a", "b", "c", "d"];
        let admitted: Vec<AtomicU64> = keys.iter().map(|_| AtomicU64::new(0)).collect();
        std::thread::scope(|s| {
            for t in 0..16 {
                let (rl, admitted) = (&rl, &admitted);
                s.spawn(move || {
                    for i in 0..40 * keys.len() {
                        let k = (i + t) % keys.len();
                        let v = rl.check(keys[k]).unwrap();
                        assert_eq!(v.source, Source::Redis);
                        if v.decision.allowed {
                            admitted[k].fetch_add(1, Ordering::Relaxed);
                        }
                    }
                });
            }
        });
        for (k, a) in keys.iter().zip(&admitted) {
            assert_eq!(a.load(Ordering::Relaxed), 50, "pool {pool}, key {k}");
            assert_eq!(rl.peek_n(k, 0).unwrap().decision.remaining, 0);
        }
        let s = rl.stats();
        assert_eq!(s.redis, 16 * 40 * 4 + 4, "pool {pool}: {s:?}");
        assert!(s.direct_calls > 0 && s.direct_calls <= s.redis, "{s:?}");
        println!(
            "pool {pool}: {} of {} calls on the calling thread",
            s.direct_calls, s.redis
        );
    }
}

/// Checks `k` until one is answered by `want` (or `within` passes): the
/// slowest check on the way and how many were made.
fn until(rl: &blocking::RedisLimiter, want: Source, within: Duration) -> (Duration, usize) {
    let start = Instant::now();
    let (mut slowest, mut n) = (Duration::ZERO, 0);
    loop {
        let t = Instant::now();
        let v = rl.check("k").unwrap();
        slowest = slowest.max(t.elapsed());
        n += 1;
        if v.source == want {
            return (slowest, n);
        }
        assert!(
            start.elapsed() < within,
            "no answer from {want:?} within {within:?} (last {v:?})"
        );
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// Redis killed, started again empty (its script cache lost: NOSCRIPT, then
/// EVAL), and paused with SIGSTOP, under a local fallback: each check is
/// answered within the timeout and a connect attempt, the breaker opens, and
/// checks go back to Redis when it returns; all on the calling thread.
#[test]
fn kill_restart_and_pause_on_the_calling_thread() {
    let mut server = Server::start();
    let limit = Limit::from_quota(Kind::TokenBucket, Quota::per_second(1000).burst(1000)).unwrap();
    let rl = limiter(
        &server,
        limit,
        fault_cfg(FailurePolicy::Local { share_percent: 50 }),
    );
    // Connected first: a cold connect on a loaded machine may take longer than
    // the 25 ms connect timeout; the faults are tested, not the first connect.
    let warm = Instant::now();
    while rl.connect().is_err() {
        assert!(warm.elapsed() < Duration::from_secs(2), "no connection");
        std::thread::sleep(Duration::from_millis(10));
    }
    let bound = TIMEOUT + CONNECT + SLACK;
    assert_eq!(rl.check("k").unwrap().source, Source::Redis);

    server.kill();
    let (slowest, _) = until(&rl, Source::LocalFallback, Duration::from_secs(2));
    assert!(slowest <= bound, "{slowest:?}");
    // The breaker opens after 3 failures; while open, no call is made.
    let t = Instant::now();
    for _ in 0..20 {
        let v = rl.check("k").unwrap();
        assert_eq!(v.source, Source::LocalFallback);
    }
    assert!(rl.stats().circuit_opened >= 1, "{:?}", rl.stats());
    assert!(t.elapsed() <= 20 * bound);
    let e = rl.last_error().expect("why the policy answers");
    assert!(e.is_unavailable(), "{e:?}");
    assert!(rl.try_check_n("k", 1).unwrap_err().is_unavailable());

    // Back, empty: the script is loaded again with EVAL (NOSCRIPT).
    server.restart();
    let (slowest, _) = until(&rl, Source::Redis, COOLDOWN * 10 + Duration::from_secs(2));
    assert!(slowest <= bound, "{slowest:?}");
    assert_eq!(rl.check("k").unwrap().source, Source::Redis);

    // Paused: the socket stays open and nothing answers; the call times out
    // (its connection is closed, never reused with a reply in it).
    server.pause();
    let (slowest, _) = until(&rl, Source::LocalFallback, Duration::from_secs(2));
    assert!(slowest <= bound, "{slowest:?}");
    server.resume();
    until(&rl, Source::Redis, COOLDOWN * 10 + Duration::from_secs(2));
    let before = rl.stats();
    for _ in 0..10 {
        assert_eq!(rl.check("k").unwrap().source, Source::Redis);
    }
    let after = rl.stats();
    assert_eq!(after.direct_calls - before.direct_calls, 10, "{after:?}");
}

/// Errors on the calling thread's connection are classified as on the async
/// path: a key of another type is that check's data error (the breaker does
/// not count it, the connection stays in use), a cost above the capacity is
/// never sent, the script flushed from the server is sent again as EVAL.
#[test]
fn errors_are_classified_as_on_the_async_path() {
    let server = Server::start();
    let rl = limiter(
        &server,
        hourly(10),
        Config {
            blocking_connections: 1,
            policy: FailurePolicy::Closed,
            ..cfg()
        },
    );
    let rkey = rl.as_async().redis_key("listy");
    server.cmd(&["RPUSH", &rkey, "x"]).unwrap();
    for _ in 0..5 {
        let e = rl.check("listy").unwrap_err();
        assert!(matches!(e, Error::Data(_)), "{e:?}");
        assert!(e.source().is_some());
    }
    let s = rl.stats();
    assert_eq!((s.data_errors, s.circuit_opened), (5, 0), "{s:?}");
    assert!(matches!(rl.check_n("k", 11), Err(Error::Capacity(_))));
    assert_eq!(rl.check("k").unwrap().decision.remaining, 9);
    server.cmd(&["SCRIPT", "FLUSH"]).unwrap();
    let v = rl.check("k").unwrap();
    assert_eq!((v.source, v.decision.remaining), (Source::Redis, 8));
    // One pooled connection served all of it (the data errors kept it).
    let clients = server.cmd(&["CLIENT", "LIST"]).unwrap();
    let redis::Value::BulkString(list) = clients else {
        panic!("{clients:?}")
    };
    let list = String::from_utf8(list).unwrap();
    assert_eq!(list.lines().count(), 2, "the pool's and this one:\n{list}");
    assert_eq!(rl.stats().direct_calls, 7);
}

/// `connect()` on the calling thread reports what is wrong with the cause, as
/// the async `connect()` does, and the connection it opened serves the next
/// check.
#[test]
fn connect_reports_misconfiguration() {
    let server = Server::start();
    server
        .cmd(&["CONFIG", "SET", "requirepass", "s3cret"])
        .unwrap();
    let port = server.port;
    for (what, url, expect) in common::misconfigured(port) {
        let rl = blocking::RedisLimiter::new(
            Backend::from_url(&url).unwrap(),
            "cfg",
            hourly(5),
            fault_cfg(FailurePolicy::Open),
        )
        .unwrap();
        let e = rl.connect().expect_err(what);
        let text = common::chain(&e);
        assert!(e.is_unavailable(), "{what}: {text}");
        assert!(
            text.to_lowercase().contains(&expect.to_lowercase()),
            "{what}: {text}"
        );
        assert_eq!(rl.check("k").unwrap().source, Source::FailOpen, "{what}");
        assert!(rl.last_error().is_some(), "{what}");
    }
    let url = format!("redis://:s3cret@127.0.0.1:{port}");
    let rl = blocking::RedisLimiter::new(Backend::from_url(&url).unwrap(), "cfg", hourly(5), cfg())
        .unwrap();
    rl.connect().unwrap();
    assert_eq!(rl.check("k").unwrap().source, Source::Redis);
    assert_eq!(rl.stats().direct_calls, 1);
}
