//! Hybrid mode's over-admission bound, across four real processes: each is this
//! test binary run again (the ignored `fleet_process` test, with its settings in
//! the environment), with its own `HybridLimiter` and connection, checking 8
//! shared keys in alternating quiet and flat-out phases (quiet phases grow each
//! key's leases from its own rate; flat-out phases spend them and fight for the
//! rest). Every admission is reported with the wall-clock interval that holds
//! it; the parent counts them per key against the bound the docs state for the
//! whole fleet (`sluicegate_redis::hybrid`, "Accuracy bound"): for the token
//! bucket at most `b + r·(Δ + L)` over every interval `Δ`, for the windows at
//! most the limit per aligned window (checked as tests/hybrid.rs checks it).
//!
//! Redis runs on this host (scripts/test-redis starts it), so its `TIME` is this
//! host's `CLOCK_REALTIME`, the clock `SystemTime` reads: an admission's window
//! is known up to the interval around its check. Each algorithm runs for 2 s.

mod common;

use std::collections::HashMap;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use sluicegate::{Kind, Quota, Spec};
use sluicegate_redis::{Config, HybridConfig, HybridLimiter, Limit, RedisLimiter};

use common::Rng;

const PROCESSES: usize = 4;
const KEYS: u64 = 8;
const RUN: Duration = Duration::from_secs(2);
/// The child's settings, in the environment.
const ENV: &str = "SLUICEGATE_FLEET_PROCESS";

/// The token bucket's rate per second and burst, and its lease TTL.
const RATE: u64 = 20;
const LEASE_TTL: Duration = Duration::from_millis(500);
/// The windows' limit and window.
const PER_WINDOW: u64 = 50;
const WINDOW_US: u64 = 500_000;

fn limit(kind: Kind) -> Limit {
    let quota = if kind == Kind::TokenBucket {
        Quota::per_second(RATE)
    } else {
        Quota::new(PER_WINDOW, Duration::from_micros(WINDOW_US))
    };
    Limit::from_spec(&Spec::new(kind, &[quota]).unwrap()).unwrap()
}

fn wall_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_micros() as u64
}

/// One process of a fleet: runs when the parent sets `ENV` to
/// `<algorithm> <name> <seed>`, and prints `<key> <before_us> <after_us>` per
/// admission, then `stats <local> <round_trips>`.
#[test]
#[ignore = "one process of the fleet tests, which run it"]
fn fleet_process() {
    let Ok(args) = std::env::var(ENV) else {
        panic!("run by the fleet tests, with {ENV} set");
    };
    let mut parts = args.split(' ');
    let kind: Kind = parts.next().unwrap().parse().unwrap();
    let name = parts.next().unwrap().to_owned();
    let seed: u64 = parts.next().unwrap().parse().unwrap();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let cfg = Config {
        timeout: Duration::from_millis(500),
        ..Config::default()
    };
    let hc = HybridConfig {
        lease_ttl: LEASE_TTL,
        horizon: Duration::from_millis(300),
        ..HybridConfig::default()
    };
    let rl = RedisLimiter::new(common::standalone(), &name, limit(kind), cfg).unwrap();
    let h = HybridLimiter::new(rl, hc).unwrap();
    let start = Instant::now();
    let lines = rt.block_on(async {
        let mut tasks = Vec::new();
        for t in 0..2u64 {
            let h = h.clone();
            tasks.push(tokio::spawn(async move {
                let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9) ^ (t + 1));
                let mut out = Vec::new();
                while start.elapsed() < RUN {
                    let key = rng.below(KEYS);
                    let before = wall_us();
                    let v = h.check(&format!("k{key}")).await.unwrap();
                    let after = wall_us();
                    assert!(v.is_authoritative(), "{v:?}");
                    if v.decision.allowed {
                        out.push(format!("{key} {before} {after}"));
                    }
                    // Quiet (about 10 checks a second per key over the fleet) and
                    // flat-out phases of 300 ms, out of step between processes.
                    let phase = (start.elapsed().as_millis() as u64 / 300 + seed) % 2;
                    if phase == 0 {
                        let ms = 60 + rng.below(80);
                        tokio::time::sleep(Duration::from_millis(ms)).await;
                    } else {
                        tokio::task::yield_now().await;
                    }
                }
                out
            }));
        }
        let mut lines = Vec::new();
        for t in tasks {
            lines.extend(t.await.unwrap());
        }
        lines
    });
    let mut out = lines.join("\n");
    let s = h.stats();
    out.push_str(&format!("\nstats {} {}\n", s.local, s.round_trips));
    print!("{out}");
}

/// Each key's admissions, each as the `[before, after]` wall-clock µs that hold it.
type Admitted = HashMap<u64, Vec<(u64, u64)>>;

/// Runs four processes of `kind` on one name; each key's admissions and the
/// summed `(local, round_trips)`.
fn run_fleet(kind: Kind) -> (Admitted, (u64, u64)) {
    let name = common::fresh("fleet4");
    let exe = std::env::current_exe().unwrap();
    let children: Vec<_> = (0..PROCESSES)
        .map(|i| {
            Command::new(&exe)
                .args(["--exact", "fleet_process", "--ignored", "--nocapture"])
                .args(["--test-threads", "1", "-q"])
                .env(ENV, format!("{} {name} {i}", kind.name()))
                .stdout(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let mut admitted = Admitted::new();
    let (mut local, mut trips) = (0, 0);
    for child in children {
        let out = child.wait_with_output().unwrap();
        assert!(out.status.success(), "a fleet process failed");
        for line in String::from_utf8(out.stdout).unwrap().lines() {
            let f: Vec<&str> = line.split(' ').collect();
            match f.as_slice() {
                ["stats", l, r] => {
                    local += l.parse::<u64>().unwrap();
                    trips += r.parse::<u64>().unwrap();
                }
                [k, b, a] if k.parse::<u64>().is_ok() => admitted
                    .entry(k.parse().unwrap())
                    .or_default()
                    .push((b.parse().unwrap(), a.parse().unwrap())),
                _ => {} // the test harness's own lines
            }
        }
    }
    (admitted, (local, trips))
}

/// The first interval `[s, e]` (µs) in which more admissions certainly lie
/// than a bucket of `burst`, `rate` per second and lease TTL `ttl_us` allows:
/// `burst + rate·(e − s + ttl)`; each admission lies somewhere in its own
/// `[before, after]`, so only those wholly inside `[s, e]` certainly count.
fn over_bucket(
    admitted: &[(u64, u64)],
    burst: u64,
    rate: u64,
    ttl_us: u64,
) -> Option<(u64, u64, u64)> {
    let mut a = admitted.to_vec();
    a.sort_unstable();
    for (i, &(s, _)) in a.iter().enumerate() {
        let mut ends: Vec<u64> = a[i..].iter().map(|x| x.1).filter(|&e| e >= s).collect();
        ends.sort_unstable();
        // The admissions that start at or after s, counted by their end.
        for (c, &e) in ends.iter().enumerate() {
            let inside = (c + 1) as u64;
            let allowed = burst as f64 + rate as f64 * (e - s + ttl_us) as f64 / 1e6;
            if inside as f64 > allowed + 1e-9 {
                return Some((s, e, inside));
            }
        }
    }
    None
}

fn fleet(kind: Kind) {
    let (admitted, (local, trips)) = run_fleet(kind);
    let total: usize = admitted.values().map(Vec::len).sum();
    eprintln!(
        "{kind}: {PROCESSES} processes, {KEYS} keys: {total} admitted, {local} answered locally, {trips} round trips"
    );
    assert_eq!(
        admitted.len() as u64,
        KEYS,
        "{kind}: every key admitted some"
    );
    for (key, a) in &admitted {
        let over = if kind == Kind::TokenBucket {
            over_bucket(a, RATE, RATE, LEASE_TTL.as_micros() as u64)
        } else {
            common::over_limit(a, WINDOW_US, PER_WINDOW)
        };
        if let Some((s, e, n)) = over {
            panic!("{kind}: key {key}: {n} admitted in [{s}, {e}], over the documented bound");
        }
        // Not starved: the flat-out phases take most of what the key allows.
        let secs = RUN.as_secs_f64();
        let quota = if kind == Kind::TokenBucket {
            (RATE as f64) * (1.0 + secs)
        } else {
            PER_WINDOW as f64 * secs * 1e6 / WINDOW_US as f64
        };
        assert!(
            a.len() as f64 >= 0.3 * quota,
            "{kind}: key {key}: only {} admitted",
            a.len()
        );
    }
    // The many keys are served locally, not by a round trip per check.
    assert!(local > trips, "{kind}: {local} local, {trips} round trips");
}

#[test]
fn four_processes_of_token_buckets_stay_within_b_plus_r_delta_plus_l() {
    fleet(Kind::TokenBucket);
}

#[test]
fn four_processes_of_fixed_windows_stay_within_the_limit() {
    fleet(Kind::FixedWindow);
}

#[test]
fn four_processes_of_sliding_windows_stay_within_the_limit() {
    fleet(Kind::SlidingWindow);
}

#[test]
fn the_bucket_check_sees_an_excess() {
    // 2/s, burst 2, no TTL: three at once is one too many...
    let a = [(0, 1), (2, 3), (4, 5)];
    assert_eq!(over_bucket(&a, 2, 2, 0), Some((0, 5, 3)));
    // ...and is within the bound with a lease TTL of half a second (2 + 2·0.5).
    assert_eq!(over_bucket(&a, 2, 2, 500_000), None);
    // Spread over 1 s they fit: 2 + 2·1.
    let b = [(0, 1), (500_000, 500_001), (1_000_000, 1_000_001)];
    assert_eq!(over_bucket(&b, 2, 2, 0), None);
    // Each admission counts in the intervals that certainly hold it: the
    // third, somewhere in [4, 2_000_000], is not certainly within 1 s of the
    // first two.
    let c = [(0, 1), (2, 3), (4, 2_000_000)];
    assert_eq!(over_bucket(&c, 2, 2, 0), None);
}
