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
//! and capacity = 1.25·n; full-table policy `Reject`, so a key that finds no free
//! slot is not tracked), governor's keyed limiter (DashMap) with `u64` and
//! `String` keys, and the seeds' `RwLock<HashMap<String, Mutex<bucket>>>`.
//!
//! `u64` keys are random-looking 64-bit ids (splitmix64 of `0..n`), as in the
//! criterion `keyed` groups: foldhash spreads the integers `0..n` more evenly than
//! random keys, which would flatter the table's placement. Our rows also give the
//! table's slots and bytes per slot (the unit the table is sized in).

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

/// A random-looking 64-bit id for key `i` (splitmix64's output function).
fn id(i: u64) -> u64 {
    let mut z = i.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// (resident bytes added, keys tracked, slots — 0 for the maps).
fn measure(contender: &str, n: u64) -> (u64, u64, u64) {
    // Keys are built before the first reading so their own memory is not counted
    // for the String contenders (the map's copy of each key is).
    let strings: Vec<String> = if contender.contains("string") {
        (0..n).map(|i| format!("client-{i:012}")).collect()
    } else {
        Vec::new()
    };
    let before = rss();
    match contender {
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
                t.check_at(&id(k), 0);
            }
            let after = rss();
            std::hint::black_box(&t);
            (after - before, t.len_at(0) as u64, t.capacity() as u64)
        }
        "governor-u64" => {
            let l = governor::RateLimiter::keyed(governor::Quota::per_minute(
                NonZeroU32::new(10).unwrap(),
            ));
            for k in 0..n {
                let _ = l.check_key(&id(k));
            }
            let after = rss();
            std::hint::black_box(&l);
            (after - before, l.len() as u64, 0)
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
            (after - before, l.len() as u64, 0)
        }
        "rwlock-hashmap-string" => {
            let map: RwLock<HashMap<String, Mutex<Bucket>>> = RwLock::new(HashMap::new());
            for k in &strings {
                check_mutex_map(&map, k);
            }
            let after = rss();
            let live = map.read().unwrap().len() as u64;
            std::hint::black_box(&map);
            (after - before, live, 0)
        }
        other => panic!("unknown contender {other}"),
    }
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
        let (bytes, live, slots) = measure(&args[2], n);
        println!("{bytes} {live} {slots}");
        return;
    }
    println!(
        "| contender | keys offered | keys tracked | resident bytes | bytes per tracked key \
         | slots | bytes per slot |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|");
    for n in [100_000u64, 1_000_000] {
        for c in CONTENDERS {
            let out = Command::new(&args[0])
                .args(["--child", c, &n.to_string()])
                .output()
                .unwrap();
            assert!(
                out.status.success(),
                "{c}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            let text = String::from_utf8(out.stdout).unwrap();
            let mut parts = text.split_whitespace().map(|x| x.parse::<u64>().unwrap());
            let (bytes, live, slots) = (
                parts.next().unwrap(),
                parts.next().unwrap(),
                parts.next().unwrap(),
            );
            let per_slot = if slots == 0 {
                ("—".to_string(), "—".to_string())
            } else {
                (
                    slots.to_string(),
                    format!("{:.1}", bytes as f64 / slots as f64),
                )
            };
            println!(
                "| {c} | {n} | {live} | {bytes} | {:.1} | {} | {} |",
                bytes as f64 / live.max(1) as f64,
                per_slot.0,
                per_slot.1
            );
        }
    }
}
