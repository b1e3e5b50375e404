//! Keyed tables under eviction and at the limits of memory (issue 11): a
//! property test that no key is ever admitted beyond what its own limiter admits,
//! and caller-sized allocations that fail with an error instead of aborting.
#![cfg(feature = "std")]

use std::collections::HashMap;

mod common;

use common::seeded_table;
use proptest::prelude::*;
use sluicegate::keyed::{FullPolicy, KeyedLimiter};
use sluicegate::{Algorithm, ConfigError, Fixed, Gcra, Limiter, Quota};

/// Replays `ops` through a tiny table that must evict, and through one limiter
/// per key charged only with what the table admitted: every admission of the
/// table must be one the key's own limiter admits.
fn never_over_admits<A: Algorithm>(quota: Quota, ops: &[(u8, u64, u64)]) {
    let table = seeded_table::<A>(quota, 16, 3, FullPolicy::EvictStalest);
    let mut own: HashMap<u8, Limiter<A, ()>> = HashMap::new();
    let mut now = 0u64;
    for &(key, dt, n) in ops {
        now = now.saturating_add(dt);
        let reference = own
            .entry(key)
            .or_insert_with(|| Limiter::from_params(A::params(&quota).unwrap(), ()));
        let got = table.check_n_at(&key, n, now).unwrap();
        if got.allowed {
            let want = reference.check_n_at(n, now).unwrap();
            assert!(want.allowed, "key {key} over-admitted: {n} at {now}");
        }
    }
}

fn ops() -> impl Strategy<Value = Vec<(u8, u64, u64)>> {
    prop::collection::vec(
        (
            0u8..64,
            prop_oneof![Just(0u64), 0u64..20_000_000, 0u64..400_000_000],
            1u64..5,
        ),
        1..400,
    )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn eviction_never_over_admits_a_token_bucket_key(ops in ops()) {
        never_over_admits::<Gcra>(Quota::per_second(4).burst(5), &ops);
    }

    #[test]
    fn eviction_never_over_admits_a_fixed_window_key(ops in ops()) {
        never_over_admits::<Fixed>(Quota::per_second(6), &ops);
    }
}

#[test]
fn the_sketch_evicts_in_these_runs() {
    // The property above is only meaningful if the 16-slot table does evict.
    let t = seeded_table::<Gcra>(Quota::per_minute(1), 16, 3, FullPolicy::EvictStalest);
    for k in 0..64u8 {
        t.check_at(&k, 0);
    }
    assert!(t.stats().evicted >= 16, "{:?}", t.stats());
    // Every evicted key still has its minute of debt.
    for k in 0..64u8 {
        assert!(!t.check_at(&k, 1).allowed, "key {k}");
    }
}

#[test]
fn huge_capacities_are_an_error_not_an_abort() {
    let q = Quota::per_second(10);
    for capacity in [usize::MAX, usize::MAX / 16 + 1, 1 << 40] {
        match KeyedLimiter::<Gcra, ()>::with_clock(q, capacity, ()) {
            Err(ConfigError::Alloc { bytes }) => assert!(bytes >= capacity),
            other => panic!("capacity {capacity}: {:?}", other.map(|t| t.capacity())),
        }
    }
    let e = KeyedLimiter::<Gcra, ()>::with_clock(q, usize::MAX, ()).unwrap_err();
    assert!(e.to_string().contains("could not allocate"), "{e}");
}

/// Under an address-space limit of 256 MiB (the test binary re-executed under
/// `prlimit --as`), a table of 2²⁵ keys (512 MiB) fails with an error, and a
/// small one still works.
#[test]
#[cfg(target_os = "linux")]
fn allocation_failure_under_an_address_space_limit_is_an_error() {
    const CHILD: &str = "SLUICEGATE_AS_LIMIT_CHILD";
    if std::env::var_os(CHILD).is_some() {
        let q = Quota::per_second(10);
        let big = KeyedLimiter::<Gcra, ()>::with_clock(q, 1 << 25, ());
        assert!(
            matches!(big, Err(ConfigError::Alloc { .. })),
            "{:?}",
            big.map(|t| t.capacity())
        );
        let small = KeyedLimiter::<Gcra, ()>::with_clock(q, 1 << 10, ()).unwrap();
        assert!(small.check_at(&1u8, 0).allowed);
        return;
    }
    let exe = std::env::current_exe().unwrap();
    let out = std::process::Command::new("prlimit")
        .arg(format!("--as={}", 256u64 << 20))
        .arg(&exe)
        .args([
            "--exact",
            "allocation_failure_under_an_address_space_limit_is_an_error",
        ])
        .args(["--test-threads", "1"])
        .env(CHILD, "1")
        .output()
        .expect("prlimit (util-linux) runs the child");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("1 passed"),
        "child failed: {:?}\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
}
