//! The blocking client against the round-trip floor (issue 28, item 3), against
//! a local redis-server (`scripts/bench-redis` starts one and sets
//! `SLUICEGATE_REDIS_URL`). In one run, on an idle machine and then with the
//! other core kept busy (a `yes > /dev/null` of the bench's own), interleaved
//! rounds of:
//!
//! * the anchor: `PING` over a plain `std::net::TcpStream` from the same thread;
//! * the script's own server time: `usec_per_call` of `EVALSHA` in `INFO
//!   commandstats`, over the checks measured (`CONFIG RESETSTAT` before each
//!   round);
//! * the blocking `check` on the calling thread's connection (the default), and
//!   through the private runtime (`blocking_connections: 0`: the path every
//!   blocking call took before).
//!
//! Each latency is the median of per-call times, the three kinds taken one
//! after another in turn (20 rounds of 500 each). Target: the check at most
//! 1.1 × (anchor + script time).

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use sluicegate_redis::{blocking, Backend, Config, Kind, Limit, Quota};

/// Per-call times of `n` calls of `f`, appended to `out`.
fn time(n: usize, out: &mut Vec<Duration>, mut f: impl FnMut()) {
    for _ in 0..n {
        let t = Instant::now();
        f();
        out.push(t.elapsed());
    }
}

fn median(v: &mut [Duration]) -> f64 {
    v.sort_unstable();
    v[v.len() / 2].as_secs_f64() * 1e6
}

/// `PING` over a plain socket, the reply read whole.
struct Ping(TcpStream);

impl Ping {
    fn new(addr: &str) -> Self {
        let s = TcpStream::connect(addr).unwrap();
        s.set_nodelay(true).unwrap();
        Self(s)
    }

    fn ping(&mut self) {
        self.0.write_all(b"PING\r\n").unwrap();
        let mut buf = [0u8; 7];
        self.0.read_exact(&mut buf).unwrap();
        assert_eq!(&buf, b"+PONG\r\n");
    }
}

/// `EVALSHA`'s calls and microseconds in `INFO commandstats`.
fn evalsha(c: &mut redis::Connection) -> (u64, u64) {
    let info: String = redis::cmd("INFO").arg("commandstats").query(c).unwrap();
    let Some(line) = info.lines().find(|l| l.starts_with("cmdstat_evalsha:")) else {
        return (0, 0);
    };
    let field = |name: &str| {
        line.split([':', ','])
            .find_map(|kv| kv.strip_prefix(name)?.strip_prefix('='))
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    };
    (field("calls"), field("usec"))
}

fn reset(c: &mut redis::Connection) {
    let _: () = redis::cmd("CONFIG").arg("RESETSTAT").query(c).unwrap();
}

struct Row {
    anchor: f64,
    script: f64,
    direct: f64,
    runtime: f64,
    calls: u64,
}

fn measure(url: &str, addr: &str) -> Row {
    let limit = Limit::from_quota(
        Kind::TokenBucket,
        Quota::per_second(1_000_000).burst(1_000_000),
    )
    .unwrap();
    let cfg = |pool| Config {
        timeout: Duration::from_secs(1),
        blocking_connections: pool,
        ..Config::default()
    };
    let name = format!("floor-{}", std::process::id());
    let direct =
        blocking::RedisLimiter::new(Backend::from_url(url).unwrap(), &name, limit, cfg(8)).unwrap();
    let runtime =
        blocking::RedisLimiter::new(Backend::from_url(url).unwrap(), &name, limit, cfg(0)).unwrap();
    let mut ping = Ping::new(addr);
    let mut admin = redis::Client::open(url).unwrap().get_connection().unwrap();
    for _ in 0..2000 {
        ping.ping();
        direct.check("k").unwrap();
        runtime.check("k").unwrap();
    }
    let (mut p, mut d, mut r) = (Vec::new(), Vec::new(), Vec::new());
    let (mut calls, mut usec) = (0, 0);
    for _ in 0..20 {
        // One of each in turn, so that the machine's drift (other processes,
        // frequency) falls on the three alike; the script's time over both
        // kinds of check (the same script, the same server work).
        reset(&mut admin);
        for _ in 0..500 {
            time(1, &mut p, || ping.ping());
            time(1, &mut d, || {
                direct.check("k").unwrap();
            });
            time(1, &mut r, || {
                runtime.check("k").unwrap();
            });
        }
        let (c, u) = evalsha(&mut admin);
        calls += c;
        usec += u;
    }
    assert!(direct.stats().direct_calls >= 10_000);
    assert_eq!(runtime.stats().direct_calls, 0);
    Row {
        anchor: median(&mut p),
        script: usec as f64 / calls.max(1) as f64,
        // Each kind's share (the same script).
        direct: median(&mut d),
        runtime: median(&mut r),
        calls: calls / 2,
    }
}

fn load() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

fn main() {
    let url = std::env::var("SLUICEGATE_REDIS_URL")
        .unwrap_or_else(|_| panic!("SLUICEGATE_REDIS_URL is not set: run scripts/bench-redis"));
    let addr = url
        .strip_prefix("redis://")
        .expect("a plain redis:// URL")
        .trim_end_matches('/')
        .to_owned();
    println!();
    println!("| blocking client, sequential (Rust) | machine | anchor: PING, plain socket | EVALSHA server time | floor | check, calling thread (after) | ratio | check, through the runtime (before) | ratio | target ≤ 1.1× |");
    println!("|---|---|---:|---:|---:|---:|---:|---:|---:|---|");
    for busy in [false, true] {
        let mut yes = busy.then(|| {
            std::process::Command::new("yes")
                .stdout(std::process::Stdio::null())
                .spawn()
                .expect("yes")
        });
        if busy {
            std::thread::sleep(Duration::from_millis(200));
        }
        let l = load();
        let row = measure(&url, &addr);
        if let Some(y) = yes.as_mut() {
            let _ = y.kill();
            let _ = y.wait();
        }
        let floor = row.anchor + row.script;
        let (after, before) = (row.direct / floor, row.runtime / floor);
        println!(
            "| `blocking::RedisLimiter::check` | {} (load {l}) | {:.1} µs | {:.2} µs ({} calls) | {floor:.1} µs | {:.1} µs | {after:.2}× | {:.1} µs | {before:.2}× | {} |",
            if busy { "other core busy (`yes`)" } else { "idle" },
            row.anchor,
            row.script,
            row.calls,
            row.direct,
            row.runtime,
            if after <= 1.1 { "met" } else { "MISSED" },
        );
    }
}
