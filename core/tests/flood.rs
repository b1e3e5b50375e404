//! A flood of unique keys against a bounded table. Its own test binary, so the
//! resident-memory readings see no other test's allocations.
#![cfg(all(feature = "std", target_os = "linux", not(miri)))]

use sluicegate::keyed::{FullPolicy, KeyedLimiter};
use sluicegate::{Gcra, Quota};

/// Resident memory of this process in bytes (Linux).
fn rss() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap();
    let pages: u64 = statm.split_whitespace().nth(1).unwrap().parse().unwrap();
    pages * 4096
}

/// Resident bytes per slot of a table of `capacity` slots, built and dropped.
fn bytes_per_slot(capacity: usize) -> f64 {
    let before = rss();
    let t = KeyedLimiter::<Gcra, ()>::with_clock(Quota::per_minute(5), capacity, ()).unwrap();
    let built = rss();
    let per_slot = built.saturating_sub(before) as f64 / t.capacity() as f64;
    drop(t);
    per_slot
}

/// 10 million unique keys (1 million in a debug build) against a table of a
/// tenth as many slots: resident memory stays flat and the tracked victims keep
/// their limits.
#[test]
fn flood_of_unique_keys_keeps_memory_flat_and_victims_limited() {
    // The table's size per slot, on a million slots in both builds: the
    // allocator's page-granular noise (up to a few dozen pages seen here) is then
    // below 0.1 byte per slot. On the debug flood's 100,000 slots it was 0.6, and
    // a table of 16.25 bytes per slot once read as 17.
    let per_slot = bytes_per_slot(1_000_000);
    assert!(per_slot <= 16.5, "{per_slot} bytes per slot");
    let (keys, capacity) = if cfg!(debug_assertions) {
        (1_000_000u64, 100_000usize)
    } else {
        (10_000_000u64, 1_000_000usize)
    };
    for policy in [FullPolicy::EvictStalest, FullPolicy::Reject] {
        let t = KeyedLimiter::<Gcra, ()>::with_clock(Quota::per_minute(5), capacity, ())
            .unwrap()
            .with_policy(policy);
        let built = rss();
        // Victims: exhausted at t = 0, so they hold a minute of debt.
        let victims: Vec<String> = (0..1000).map(|i| format!("victim-{i}")).collect();
        for v in &victims {
            assert!(t.check_n_at(v.as_str(), 5, 0).unwrap().allowed);
        }
        let mut peak = built;
        for k in 0..keys {
            let now = k * 100; // the flood spans one simulated second (10M keys)
            t.check_at(&k, now);
            if k % 100_000 == 0 {
                peak = peak.max(rss());
                for v in victims.iter().step_by(97) {
                    assert!(
                        !t.check_at(v.as_str(), now).allowed,
                        "{v} lost its limit ({policy:?})"
                    );
                }
            }
        }
        for v in &victims {
            assert!(
                !t.check_at(v.as_str(), keys * 100).allowed,
                "{v} lost its limit ({policy:?})"
            );
        }
        let growth = peak.saturating_sub(built);
        assert!(
            growth < 2 << 20,
            "resident memory grew by {growth} bytes under the flood"
        );
        let s = t.stats();
        match policy {
            FullPolicy::EvictStalest => assert!(s.evicted > 0),
            FullPolicy::Reject => assert!(s.rejected > 0),
            FullPolicy::AllowUnlimited => {}
        }
        drop(t);
    }
}
