//! How long a change in the rule store takes to be enforced by its readers.
//!
//! Two `Policy::from_store` readers (default poll interval) on one SQLite
//! file, each on its own thread, and a writer that creates a rule, waits until
//! both enforce it, deletes it and waits again, `N` times (default 50). Each
//! write waits a different time first (0 to 199 ms, spread evenly), so writes
//! fall at every point of the readers' poll cycle, not always just after a
//! poll. Prints the median and the max of each, from the commit to the
//! reader's first check that sees it, and what one poll costs.
//!
//! ```text
//! cargo run --release -p sluicegate-policy --features store --example store_latency -- 50
//! ```

use std::sync::mpsc;
use std::time::{Duration, Instant};

use sluicegate_policy::Policy;
use sluicegate_policy::store::{RuleRecord, Store};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let n: usize = std::env::args().nth(1).map_or(Ok(50), |a| a.parse())?;
    let dir = tempfile::tempdir()?;
    let url = format!("sqlite:{}", dir.path().join("rules.db").display());
    let store = Store::open(&url)?;
    store.create_rule("d", RuleRecord::new("base", "1000/s"), None, "bench")?;

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
                let Ok(p) = Policy::from_store(url, "d") else {
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
        // Golden-ratio steps spread the pauses evenly over 0..200 ms.
        let pause = |k: usize| Duration::from_millis((k as u64 * 123) % 200);
        for i in 0..n {
            let tenant = format!("t{i}");
            std::thread::sleep(pause(2 * i));
            let rule = format!("r-{tenant}");
            let made = store.create_rule(
                "d",
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
            store.delete_rule("d", &rule, made.meta.version, "bench")?;
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
    // What one poll costs a reader: the store opened anew, the version read.
    let polls = 1000;
    let start = Instant::now();
    for _ in 0..polls {
        Store::open(&url)?.version("d")?;
    }
    println!(
        "one poll (open the file, read the domain's version): {:.0} µs",
        start.elapsed().as_secs_f64() * 1e6 / f64::from(polls)
    );
    for (what, mut all) in [("create", created), ("delete", deleted)] {
        all.sort_unstable();
        let median = all[all.len() / 2];
        let max = all[all.len() - 1];
        println!(
            "{what}: {} observations ({n} changes x {READERS} readers): median {:.1} ms, max {:.1} ms",
            all.len(),
            median.as_secs_f64() * 1e3,
            max.as_secs_f64() * 1e3
        );
    }
    Ok(())
}
