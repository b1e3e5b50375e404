//! How long a change in the rule store takes to be enforced by its readers.
//!
//! Two `Policy::from_store` readers (default poll interval) on one store (a
//! SQLite file in a temporary directory, or the PostgreSQL database of the URL
//! given, in a domain of its own), each on its own thread, and a writer that
//! creates a rule, waits until
//! both enforce it, deletes it and waits again, `N` times (default 50). Each
//! write waits a different time first (0 to 199 ms, spread evenly), so writes
//! fall at every point of the readers' poll cycle, not always just after a
//! poll. Prints the median and the max of each, from the commit to the
//! reader's first check that sees it, and what one poll costs.
//!
//! ```text
//! cargo run --release -p sluicegate-policy --features store --example store_latency -- 50
//! cargo run --release -p sluicegate-policy --features postgres --example store_latency -- 100 postgres://localhost/rules
//! ```
//!
//! On SQLite a change waits for the readers' next poll (every 200 ms); on
//! PostgreSQL the writer's `NOTIFY` wakes them.

use std::sync::mpsc;
use std::time::{Duration, Instant};

use sluicegate_policy::Policy;
use sluicegate_policy::store::{RuleRecord, Store};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let n: usize = std::env::args().nth(1).map_or(Ok(50), |a| a.parse())?;
    let dir = tempfile::tempdir()?;
    let url = match std::env::args().nth(2) {
        Some(u) if u != "sqlite" => u,
        _ => format!("sqlite:{}", dir.path().join("rules.db").display()),
    };
    let store = Store::open(&url)?;
    let stamp = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH)?;
    let domain = format!("latency-{}-{}", std::process::id(), stamp.as_millis());
    let domain = domain.as_str();
    store.create_rule(domain, RuleRecord::new("base", "1000/s"), None, "bench")?;

    const READERS: usize = 2;
    let mut created = Vec::new();
    let mut deleted = Vec::new();
    std::thread::scope(|s| -> Result<(), Box<dyn std::error::Error>> {
        let (acks_tx, acks) = mpsc::channel::<Duration>();
        let mut to_readers = Vec::new();
        for _ in 0..READERS {
            let (tx, rx) = mpsc::channel::<(String, bool, Instant)>();
            to_readers.push(tx);
            let acks_tx = acks_tx.clone();
            let url = url.as_str();
            s.spawn(move || {
                let Ok(p) = Policy::from_store(url, domain) else {
                    return;
                };
                // Ready: the first change is timed from a reader already following.
                let _ = acks_tx.send(Duration::ZERO);
                for (tenant, present, t0) in rx {
                    let req = [("tenant", tenant.as_str())];
                    let rule = format!("r-{tenant}");
                    while p.check_n(&req, 0).rules().any(|r| r.name == rule) != present {
                        std::thread::yield_now();
                    }
                    let _ = acks_tx.send(t0.elapsed());
                }
            });
        }
        for _ in 0..READERS {
            acks.recv_timeout(Duration::from_secs(10))?;
        }
        // Golden-ratio steps spread the pauses evenly over 0..200 ms: writes
        // fall at every point of a poll cycle. PostgreSQL's readers are woken
        // by NOTIFY whatever the cycle's point: no pause.
        let polled = url.starts_with("sqlite");
        let pause =
            |k: usize| Duration::from_millis(if polled { (k as u64 * 123) % 200 } else { 0 });
        for i in 0..n {
            let tenant = format!("t{i}");
            std::thread::sleep(pause(2 * i));
            let rule = format!("r-{tenant}");
            let made = store.create_rule(
                domain,
                RuleRecord::new(&rule, "1/hour").matching("tenant", &tenant),
                None,
                "bench",
            )?;
            let t0 = Instant::now();
            for tx in &to_readers {
                tx.send((tenant.clone(), true, t0))?;
            }
            for _ in 0..READERS {
                created.push(acks.recv_timeout(Duration::from_secs(10))?);
            }
            std::thread::sleep(pause(2 * i + 1));
            store.delete_rule(domain, &rule, made.meta.version, "bench")?;
            let t0 = Instant::now();
            for tx in &to_readers {
                tx.send((tenant.clone(), false, t0))?;
            }
            for _ in 0..READERS {
                deleted.push(acks.recv_timeout(Duration::from_secs(10))?);
            }
        }
        Ok(())
    })
    .map_err(|e| e.to_string())?;
    // What one poll costs a reader: SQLite's store opened anew and the
    // version read; PostgreSQL's version read on the reader's connection.
    let polls = 1000;
    let sqlite = url.starts_with("sqlite");
    let start = Instant::now();
    for _ in 0..polls {
        if sqlite {
            Store::open(&url)?.version(domain)?;
        } else {
            store.version(domain)?;
        }
    }
    let (backend, what) = if sqlite {
        ("SQLite", "open the file, read the domain's version")
    } else {
        ("PostgreSQL", "read the domain's version")
    };
    println!(
        "{backend}: one poll ({what}): {:.0} µs",
        start.elapsed().as_secs_f64() * 1e6 / f64::from(polls)
    );
    for (what, mut all) in [("create", created), ("delete", deleted)] {
        all.sort_unstable();
        let median = all[all.len() / 2];
        let max = all[all.len() - 1];
        println!(
            "{backend}: {what}: {} observations ({n} changes x {READERS} readers): median {:.1} ms, max {:.1} ms",
            all.len(),
            median.as_secs_f64() * 1e3,
            max.as_secs_f64() * 1e3
        );
    }
    Ok(())
}
