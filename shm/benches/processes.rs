//! Processes against threads on one limiter: P worker processes hammering one
//! shared single limiter, against P threads on one in-process limiter (and P
//! threads on the shared one, which separates the cost of the region from the
//! cost of being other processes). Every check admits and so writes the word:
//! the rate is 10⁹/s, far above what the workers take, and the burst a
//! second's worth (a worker preempted between reading the clock and checking
//! decides at a time up to that much behind the others'), so the bucket never
//! empties and every check is a compare-and-swap on one cache line.
//!
//! ```text
//! cargo bench -p sluicegate-shm --bench processes            # 2 workers, 5 rounds of 1 s
//! cargo bench -p sluicegate-shm --bench processes -- 4       # 4 workers
//! ```
//!
//! Each round runs every case once, in turn; the medians of the rounds are
//! printed with the ratio to the in-process threads of the same run.

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::sync::Barrier;
use std::time::{Duration, Instant};

use sluicegate::{AnyLimiter, Kind, Spec};
use sluicegate_shm::{Options, Region};

/// The environment variable that makes this binary a worker process of the
/// region at its value.
const CHILD: &str = "SLUICEGATE_BENCH_CHILD";

fn spec() -> Spec {
    Spec::parse(Kind::TokenBucket, "1000000000/s burst 1000000000").expect("a valid spec")
}

fn options() -> Options {
    Options::default().memory(1 << 20).limits(8)
}

/// Checks as fast as it can for `run`, 1,024 at a time at one reading of the
/// region's clock (the time base every process shares; read once per batch so
/// the clock's own cost stays out); returns how many it made (every one
/// admitted, or the bench is broken).
fn hammer(check: impl Fn(u64) -> bool, run: Duration) -> u64 {
    let mut done = 0u64;
    let start = Instant::now();
    loop {
        let now = sluicegate_shm::now();
        for _ in 0..1024 {
            assert!(
                check(now),
                "the bench's bucket emptied: its numbers mean nothing"
            );
        }
        done += 1024;
        if start.elapsed() >= run {
            return done;
        }
    }
}

fn main() {
    if let Ok(path) = std::env::var(CHILD) {
        return child(&path);
    }
    let args: Vec<String> = std::env::args().skip(1).collect();
    // `cargo bench -- --test` (CI): one short round, to show it runs.
    let test = args.iter().any(|a| a == "--test");
    let workers: usize = args.iter().find_map(|a| a.parse().ok()).unwrap_or(2).max(1);
    let (rounds, run) = if test {
        (1, Duration::from_millis(20))
    } else {
        (5, Duration::from_secs(1))
    };
    let path = std::env::temp_dir().join(format!("sg-bench-proc-{}", std::process::id()));
    sluicegate_shm::unlink(&path).expect("no stale region");
    let region = Region::open(&path, &options()).expect("a region");
    let shared = region.limiter(&spec()).expect("a shared limiter");
    let local = AnyLimiter::with_clock(&spec(), ()).expect("a limiter");
    let mut rates: [Vec<f64>; 3] = Default::default();
    for _ in 0..rounds {
        rates[0].push(threads(workers, run, |now| {
            local.check_n_at(1, now).is_ok_and(|o| o.decision.allowed)
        }));
        rates[1].push(threads(workers, run, |now| {
            shared.check_n_at(1, now).is_ok_and(|o| o.decision.allowed)
        }));
        rates[2].push(processes(workers, run, &path));
    }
    sluicegate_shm::unlink(&path).expect("removed");
    let anchor = median(&mut rates[0].clone());
    println!("{workers} workers, {rounds} rounds of {run:?}: checks per second (median)");
    let names = [
        "threads, in-process limiter",
        "threads, shared limiter",
        "processes, shared limiter",
    ];
    for (name, r) in names.iter().zip(&mut rates) {
        let m = median(r);
        println!("  {name:<30} {:>8.1} M/s  {:.2}x", m / 1e6, m / anchor);
    }
}

/// `workers` threads running `check` for `run` at once: checks per second.
fn threads(workers: usize, run: Duration, check: impl Fn(u64) -> bool + Sync) -> f64 {
    let start = Barrier::new(workers);
    let total: u64 = std::thread::scope(|s| {
        let handles: Vec<_> = (0..workers)
            .map(|_| {
                s.spawn(|| {
                    start.wait();
                    hammer(&check, run)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("a worker thread"))
            .sum()
    });
    total as f64 / run.as_secs_f64()
}

/// `workers` processes (this binary again) on the region at `path`, started
/// together (each waits for a line on its stdin): checks per second.
fn processes(workers: usize, run: Duration, path: &std::path::Path) -> f64 {
    let exe = std::env::current_exe().expect("this binary");
    let mut children: Vec<_> = (0..workers)
        .map(|_| {
            Command::new(&exe)
                .env(CHILD, path)
                .env("SLUICEGATE_BENCH_RUN_MS", run.as_millis().to_string())
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .spawn()
                .expect("a worker process")
        })
        .collect();
    let mut outs: Vec<_> = children
        .iter_mut()
        .map(|c| BufReader::new(c.stdout.take().expect("its stdout")))
        .collect();
    for out in &mut outs {
        let mut line = String::new();
        out.read_line(&mut line).expect("ready");
        assert_eq!(line.trim(), "ready");
    }
    for c in &mut children {
        let mut stdin = c.stdin.take().expect("its stdin");
        stdin.write_all(b"go\n").expect("go");
    }
    let mut total = 0u64;
    for (c, out) in children.iter_mut().zip(&mut outs) {
        let mut line = String::new();
        out.read_line(&mut line).expect("a count");
        total += line.trim().parse::<u64>().expect("a count");
        assert!(c.wait().expect("exit").success());
    }
    total as f64 / run.as_secs_f64()
}

/// A worker process: opens the region, says it is ready, waits for the go,
/// hammers, prints its count.
fn child(path: &str) {
    let run = std::env::var("SLUICEGATE_BENCH_RUN_MS")
        .ok()
        .and_then(|v| v.parse().ok())
        .map_or(Duration::from_secs(1), Duration::from_millis);
    let region = Region::open(path, &options()).expect("the region");
    let l = region.limiter(&spec()).expect("the shared limiter");
    println!("ready");
    let mut go = String::new();
    std::io::stdin().read_line(&mut go).expect("go");
    let n = hammer(
        |now| l.check_n_at(1, now).is_ok_and(|o| o.decision.allowed),
        run,
    );
    println!("{n}");
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}
