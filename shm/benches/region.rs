//! A region's cost against the same limiter in process memory, one thread
//! (issue 26's targets: keyed ≤ 1.3×, single ≤ 1.2× on the time-passed-in
//! forms; the clocked forms beside them, and the time base's own cost).
//!
//! * `shm_keyed_100k`: 100,000 keys in one fixed pseudo-random order, quota
//!   1/minute with a burst of 2²⁰ (every call admitted, every key live), 1.25
//!   slots per key. `in-process check_n_at` is core's `AnyKeyed` (a table of its
//!   own, `u64` keys); `pool check_n_at` the same in an in-process `Pool`;
//!   `region check_n_at` a `SharedKeyed` in a region of the same slot count
//!   (keys as 8 bytes, hashed by XXH3); `region check` the same on the region's
//!   clock.
//! * `shm_single`: `AnyLimiter` against `SharedLimiter`, time passed in and
//!   clocked.
//! * `time_base`: `CLOCK_MONOTONIC` (the region's) against the default clock.
//!
//! `cargo bench -p sluicegate-shm` prints medians; compare within one run.

use std::hint::black_box;

use criterion::{Criterion, criterion_main};
use sluicegate::keyed::{AnyKeyed, Pool};
use sluicegate::{AnyLimiter, Clock, DefaultClock, Kind, Spec};
use sluicegate_shm::{Options, Region};

const KEYS: usize = 100_000;

fn keys() -> Vec<u64> {
    let mut v: Vec<u64> = (0..KEYS as u64)
        .map(|i| {
            let mut z = i.wrapping_add(0x9E37_79B9_7F4A_7C15);
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            z ^ (z >> 31)
        })
        .collect();
    // A fixed shuffle: consecutive calls hit unrelated slots.
    let mut s = 0x2545_F491_4F6C_DD1Du64;
    for i in (1..v.len()).rev() {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        v.swap(i, (s % (i as u64 + 1)) as usize);
    }
    v
}

fn region(bytes: usize) -> Region {
    let path = std::env::temp_dir().join(format!("sg-bench-{}", std::process::id()));
    sluicegate_shm::unlink(&path).unwrap();
    let r = Region::open(&path, &Options::default().memory(bytes).limits(16)).unwrap();
    // The mapping stays; the name goes.
    sluicegate_shm::unlink(&path).unwrap();
    r
}

fn keyed(c: &mut Criterion) {
    let spec = Spec::parse(Kind::TokenBucket, "1/minute burst 1048576").unwrap();
    let keys = keys();
    let slots = KEYS * 5 / 4;
    let own = AnyKeyed::with_clock(&spec, slots, ()).unwrap();
    // Memory for the same slot count (16 B each, plus the sketch).
    let bytes = slots * 16 + slots / 2;
    let pool = Pool::with_memory(bytes).unwrap();
    let pooled = AnyKeyed::in_pool(&pool, &spec, KEYS * 2, ()).unwrap();
    let r = region(bytes);
    let shared = r.keyed(&spec, KEYS * 2).unwrap();
    // Place every key first, and check each is admitted.
    for k in &keys {
        assert!(own.check_n_at(k, 1, 0).unwrap().decision.allowed);
        assert!(pooled.check_n_at(k, 1, 0).unwrap().decision.allowed);
        assert!(
            shared
                .check_n_at(k.to_le_bytes(), 1, 0)
                .unwrap()
                .decision
                .allowed
        );
    }
    let mut g = c.benchmark_group("shm_keyed_100k");
    let mut i = 0;
    g.bench_function("in-process check_n_at", |b| {
        b.iter(|| {
            i = (i + 1) % KEYS;
            black_box(own.check_n_at(&keys[i], 1, 0).unwrap())
        })
    });
    g.bench_function("pool check_n_at", |b| {
        b.iter(|| {
            i = (i + 1) % KEYS;
            black_box(pooled.check_n_at(&keys[i], 1, 0).unwrap())
        })
    });
    g.bench_function("region check_n_at", |b| {
        b.iter(|| {
            i = (i + 1) % KEYS;
            black_box(shared.check_n_at(keys[i].to_le_bytes(), 1, 0).unwrap())
        })
    });
    let clocked = AnyKeyed::with_clock(&spec, slots, DefaultClock::default()).unwrap();
    g.bench_function("in-process check", |b| {
        b.iter(|| {
            i = (i + 1) % KEYS;
            black_box(clocked.check_n(&keys[i], 1).unwrap())
        })
    });
    g.bench_function("region check", |b| {
        b.iter(|| {
            i = (i + 1) % KEYS;
            black_box(shared.check(keys[i].to_le_bytes()).unwrap())
        })
    });
    g.finish();
    for (name, t) in [("in-process", &own), ("pool", &pooled)] {
        assert!(
            t.check_n_at(&keys[0], 1, 0).unwrap().decision.allowed,
            "{name}"
        );
    }
    assert!(
        shared
            .check_n_at(keys[0].to_le_bytes(), 1, 0)
            .unwrap()
            .decision
            .allowed
    );
}

fn single(c: &mut Criterion) {
    let spec = Spec::parse(Kind::TokenBucket, "1/minute burst 1048576").unwrap();
    let local = AnyLimiter::with_clock(&spec, ()).unwrap();
    let r = region(1 << 16);
    let shared = r.limiter(&spec).unwrap();
    let mut g = c.benchmark_group("shm_single");
    g.bench_function("in-process check_n_at", |b| {
        b.iter(|| black_box(local.check_n_at(1, 0).unwrap()))
    });
    g.bench_function("region check_n_at", |b| {
        b.iter(|| black_box(shared.check_n_at(1, 0).unwrap()))
    });
    let clocked = AnyLimiter::with_clock(&spec, DefaultClock::default()).unwrap();
    g.bench_function("in-process check", |b| {
        b.iter(|| black_box(clocked.check_n(1).unwrap()))
    });
    g.bench_function("region check", |b| {
        b.iter(|| black_box(shared.check().unwrap()))
    });
    g.finish();
    let mut g = c.benchmark_group("time_base");
    let clock = DefaultClock::default();
    g.bench_function("default clock", |b| b.iter(|| black_box(clock.now())));
    g.bench_function("CLOCK_MONOTONIC", |b| {
        b.iter(|| black_box(sluicegate_shm::now()))
    });
    g.finish();
}

/// The group `criterion_group!` builds is a `pub fn` with no docs; a private
/// module keeps it out of the documented surface.
mod group {
    use super::{keyed, single};
    criterion::criterion_group!(region, keyed, single);
}
criterion_main!(group::region);
