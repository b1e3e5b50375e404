//! Issue 11, item 1: a flood of new keys never lifts a victim's limit. The flood
//! matrix: tables of 16 to 10⁶ slots (the two largest in release builds only),
//! flood rates from 80 % table load to 10× the table's turnover, flood cost 1 and
//! the whole burst, 1 and 4 threads. Every victim must stay within its exact
//! token-bucket bound; the share of innocent new keys denied on their first
//! request (limited early: their own state is fresh) is measured, and held to
//! ≤ 1 % at 80 % load. `cargo test --release -p sluicegate --test flood_bound --
//! --nocapture` prints the matrix.
#![cfg(all(feature = "std", not(miri)))]

use std::sync::Barrier;
use std::sync::atomic::{AtomicU64, Ordering};

use sluicegate::keyed::KeyedLimiter;
use sluicegate::{Gcra, Quota};

const MS: u64 = 1_000_000;
/// Quota 10/s, burst 10 (as in the issue).
const RATE: u64 = 10;
const BURST: u64 = 10;
const VICTIMS: u64 = 4;
/// Innocent keys (cost 1, live 100 ms) take this share of the table.
const INNOCENT_SHARE: f64 = 0.1;

struct Case {
    capacity: usize,
    cost: u64,
    /// Live keys (victims, innocents and flood) over slots, if none were evicted.
    load: f64,
    threads: u64,
}

struct Outcome {
    ms: u64,
    victim_max: u64,
    bound: u64,
    innocents: u64,
    innocents_denied: u64,
}

fn run(case: &Case, budget: u64) -> Outcome {
    let t = KeyedLimiter::<Gcra, ()>::with_clock(
        Quota::per_second(RATE).burst(BURST),
        case.capacity,
        (),
    )
    .unwrap();
    // A key of cost c stays live c/RATE seconds: this many per ms fill the table.
    let fill = |cost: u64| case.capacity as f64 / (cost as f64 * 1000.0 / RATE as f64);
    let innocent_per_ms = fill(1) * INNOCENT_SHARE;
    let flood_share = case.load - INNOCENT_SHARE - VICTIMS as f64 / case.capacity as f64;
    let per_ms = fill(case.cost) * flood_share.max(0.0);
    // Long enough for the flood to turn the table over twice (a flood key lives
    // cost × 100 ms), and for the budget of checks.
    let lifetime_ms = case.cost * 1000 / RATE;
    let ms = ((budget as f64 / (per_ms + innocent_per_ms + 20.0)) as u64)
        .max(2 * lifetime_ms)
        .clamp(50, 100_000);
    let victims: Vec<AtomicU64> = (0..VICTIMS).map(|_| AtomicU64::new(0)).collect();
    let (innocents, denied) = (AtomicU64::new(0), AtomicU64::new(0));
    // The threads share one simulated clock: they meet every few ms, so no thread's
    // `now` runs ahead of another's by more than that (a real clock's skew).
    let barrier = Barrier::new(case.threads as usize);
    std::thread::scope(|s| {
        for th in 0..case.threads {
            let (t, victims, innocents, denied) = (&t, &victims, &innocents, &denied);
            let barrier = &barrier;
            s.spawn(move || {
                let (mut next_flood, mut next_innocent) = (0u64, 0u64);
                for ms_i in 0..ms {
                    let now = ms_i * MS;
                    if ms_i % 16 == 0 {
                        barrier.wait();
                    }
                    // This thread's share of the flood keys due by the end of this ms.
                    let due = (((ms_i + 1) as f64 * per_ms) / case.threads as f64) as u64;
                    while next_flood < due {
                        let key = (th << 48) | next_flood;
                        let _ = t.check_n_at(&key, case.cost, now);
                        next_flood += 1;
                    }
                    // 4 checks per ms per victim, spread over the threads.
                    for _ in 0..4 / case.threads {
                        for (v, admitted) in victims.iter().enumerate() {
                            if t.check_at(&(u64::MAX - v as u64), now).allowed {
                                admitted.fetch_add(1, Ordering::Relaxed);
                            }
                        }
                    }
                    if th == 0 {
                        let due = ((ms_i + 1) as f64 * innocent_per_ms) as u64;
                        while next_innocent < due {
                            let key = (1u64 << 62) | next_innocent;
                            innocents.fetch_add(1, Ordering::Relaxed);
                            if !t.check_at(&key, now).allowed {
                                denied.fetch_add(1, Ordering::Relaxed);
                            }
                            next_innocent += 1;
                        }
                    }
                }
            });
        }
    });
    Outcome {
        ms,
        victim_max: victims
            .iter()
            .map(|a| a.load(Ordering::Relaxed))
            .max()
            .unwrap(),
        // Over [0, ms − 1] ms: burst + rate × span.
        bound: BURST + RATE * (ms - 1) / 1000,
        innocents: innocents.into_inner(),
        innocents_denied: denied.into_inner(),
    }
}

#[test]
fn a_flood_of_new_keys_never_lifts_a_victims_limit() {
    let release = !cfg!(debug_assertions);
    let capacities: &[usize] = if release {
        &[16, 256, 4096, 100_000, 1_000_000]
    } else {
        &[16, 256, 4096]
    };
    let budget = if release { 1_000_000 } else { 30_000 };
    println!("capacity\tcost\tload\tthreads\tms\tvictim_max\tbound\tinnocent_early");
    for &capacity in capacities {
        for cost in [1, BURST] {
            for load in [0.8, 2.0, 10.0] {
                for threads in [1, 4] {
                    let case = Case {
                        capacity,
                        cost,
                        load,
                        threads,
                    };
                    let o = run(&case, budget);
                    println!(
                        "{capacity}\t{cost}\t{load}\t{threads}\t{}\t{}\t{}\t{}/{} ({:.2} %)",
                        o.ms,
                        o.victim_max,
                        o.bound,
                        o.innocents_denied,
                        o.innocents,
                        100.0 * o.innocents_denied as f64 / o.innocents as f64
                    );
                    assert!(
                        o.victim_max <= o.bound,
                        "capacity {capacity} cost {cost} load {load} threads {threads}: \
                         a victim was admitted {} times, bound {}",
                        o.victim_max,
                        o.bound
                    );
                    // At 80 % load (with enough innocents to measure a share).
                    if load <= 0.8 && o.innocents >= 500 {
                        assert!(
                            o.innocents_denied * 100 <= o.innocents,
                            "capacity {capacity} cost {cost} threads {threads}: {} of {} \
                             innocent keys limited early at 80 % load",
                            o.innocents_denied,
                            o.innocents
                        );
                    }
                }
            }
        }
    }
}
