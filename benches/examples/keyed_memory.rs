//! Resident memory per key of keyed limiters, measured from the process.
//!
//! Each measurement runs in a fresh child process (so no allocator reuse between
//! contenders): it reads its resident set size, builds the keyed limiter, makes
//! `n` distinct keys live (one admitted request each), reads the resident set
//! again and prints the difference. The parent prints a markdown table.
//!
//! ```text
//! cargo run --release -p sluicegate-benches --example keyed_memory
//! ```
//!
//! Contenders: sluicegate's `KeyedLimiter` (capacity = n keys, i.e. a full table,
//! and capacity = 1.25·n), governor's keyed limiter (DashMap) with `u64` and
//! `String` keys, and the seeds' `RwLock<HashMap<String, Mutex<bucket>>>`.

// A broken measurement should fail loudly.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashMap;
use std::hash::Hash;
use std::num::NonZeroU32;
use std::process::Command;
use std::sync::{Mutex, RwLock};
use std::time::Instant;

use sluicegate::keyed::{FullPolicy, KeyedLimiter};
use sluicegate::{Gcra, Quota};

fn rss() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap();
    let pages: u64 = statm.split_whitespace().nth(1).unwrap().parse().unwrap();
    pages * 4096
}

/// The seeds' design: a map of per-key mutexes behind a read-write lock.
struct Bucket {
    tokens: f64,
    last: Instant,
}

fn measure(contender: &str, n: u64) -> (u64, u64) {
    // Keys are built before the first reading so their own memory is not counted
    // for the String contenders (the map's copy of each key is).
    let strings: Vec<String> = if contender.contains("string") {
        (0..n).map(|i| format!("client-{i:012}")).collect()
    } else {
        Vec::new()
    };
    let before = rss();
    let live = match contender {
        "sluicegate-full" | "sluicegate-1.25x" => {
            let capacity = if contender == "sluicegate-full" {
                n as usize
            } else {
                (n as usize) * 5 / 4
            };
            let t = KeyedLimiter::<Gcra, ()>::with_clock(Quota::per_minute(10), capacity, ())
                .unwrap()
                .with_policy(FullPolicy::Reject);
            for k in 0..n {
                t.check_at(&k, 0);
            }
            let live = t.len_at(0) as u64;
            let after = rss();
            std::hint::black_box(&t);
            return (after - before, live);
        }
        "governor-u64" => {
            let l = governor::RateLimiter::keyed(governor::Quota::per_minute(
                NonZeroU32::new(10).unwrap(),
            ));
            for k in 0..n {
                let _ = l.check_key(&k);
            }
            let after = rss();
            std::hint::black_box(&l);
            return (after - before, l.len() as u64);
        }
        "governor-string" => {
            let l = governor::RateLimiter::keyed(governor::Quota::per_minute(
                NonZeroU32::new(10).unwrap(),
            ));
            for k in &strings {
                let _ = l.check_key(k);
            }
            let after = rss();
            std::hint::black_box(&l);
            return (after - before, l.len() as u64);
        }
        "rwlock-hashmap-string" => {
            let map: RwLock<HashMap<String, Mutex<Bucket>>> = RwLock::new(HashMap::new());
            for k in &strings {
                check_mutex_map(&map, k);
            }
            let after = rss();
            let live = map.read().unwrap().len() as u64;
            std::hint::black_box(&map);
            return (after - before, live);
        }
        other => panic!("unknown contender {other}"),
    };
    #[allow(unreachable_code)]
    live
}

fn check_mutex_map<K: Hash + Eq + Clone + ToString>(
    map: &RwLock<HashMap<String, Mutex<Bucket>>>,
    key: &K,
) -> bool {
    let k = key.to_string();
    if let Some(b) = map.read().unwrap().get(&k) {
        let mut b = b.lock().unwrap();
        return take(&mut b);
    }
    let mut w = map.write().unwrap();
    let b = w.entry(k).or_insert_with(|| {
        Mutex::new(Bucket {
            tokens: 10.0,
            last: Instant::now(),
        })
    });
    take(b.get_mut().unwrap())
}

fn take(b: &mut Bucket) -> bool {
    let now = Instant::now();
    b.tokens = (b.tokens + now.duration_since(b.last).as_secs_f64() / 6.0).min(10.0);
    b.last = now;
    if b.tokens >= 1.0 {
        b.tokens -= 1.0;
        true
    } else {
        false
    }
}

const CONTENDERS: [&str; 5] = [
    "sluicegate-full",
    "sluicegate-1.25x",
    "governor-u64",
    "governor-string",
    "rwlock-hashmap-string",
];

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.len() == 4 && args[1] == "--child" {
        let n: u64 = args[3].parse().unwrap();
        let (bytes, live) = measure(&args[2], n);
        println!("{bytes} {live}");
        return;
    }
    println!("| contender | keys offered | keys tracked | resident bytes | bytes per tracked key |");
    println!("|---|---:|---:|---:|---:|");
    for n in [100_000u64, 1_000_000] {
        for c in CONTENDERS {
            let out = Command::new(&args[0])
                .args(["--child", c, &n.to_string()])
                .output()
                .unwrap();
            assert!(out.status.success(), "{c}: {}", String::from_utf8_lossy(&out.stderr));
            let text = String::from_utf8(out.stdout).unwrap();
            let mut parts = text.split_whitespace().map(|x| x.parse::<u64>().unwrap());
            let (bytes, live) = (parts.next().unwrap(), parts.next().unwrap());
            println!(
                "| {c} | {n} | {live} | {bytes} | {:.1} |",
                bytes as f64 / live.max(1) as f64
            );
        }
    }
}
