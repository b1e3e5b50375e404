//! The C ABI's call overhead: the same token-bucket check from Rust directly and
//! through the exported `extern "C"` functions (called through a function pointer
//! the optimiser cannot see through, as a C program calling into the library
//! would). Target: ≤ 2 ns extra per check.
//!
//! Both sides use the caller's time (`_at`), so no clock read is measured, and a
//! quota so large that every check is admitted and takes the same path.
//!
//! Each timed closure returns `()`: criterion 0.5's own `black_box` of a returned
//! value is a byte-by-byte `read_volatile` in the timed loop, which would charge
//! the Rust side for its 40-byte `Decision` and the C side for two bytes.
//!
//! `cargo bench -p sluicegate-ffi --bench abi`

use std::hint::black_box;
use std::ptr;

use criterion::{criterion_main, Criterion};
use sluicegate::{AnyKeyed, AnyLimiter, Kind, Quota, Spec, TokenBucket};
use sluicegate_ffi::config::sluicegate_algorithm;
use sluicegate_ffi::keyed::{
    sluicegate_keyed_check_at, sluicegate_keyed_free, sluicegate_keyed_new,
};
use sluicegate_ffi::limiter::{
    sluicegate_limiter_check_at, sluicegate_limiter_free, sluicegate_limiter_new,
};
use sluicegate_ffi::{
    sluicegate_config, sluicegate_decision, sluicegate_keyed, sluicegate_limiter, sluicegate_status,
};

type CheckAt = unsafe extern "C" fn(
    *const sluicegate_limiter,
    u64,
    *mut sluicegate_decision,
) -> sluicegate_status;
type KeyedCheckAt = unsafe extern "C" fn(
    *const sluicegate_keyed,
    *const u8,
    usize,
    u64,
    *mut sluicegate_decision,
) -> sluicegate_status;

const AMOUNT: u64 = 1_000_000_000; // one per nanosecond
const BURST: u64 = 1 << 40; // never empties within a benchmark run

fn config() -> sluicegate_config {
    sluicegate_config {
        struct_size: size_of::<sluicegate_config>() as u32,
        algorithm: sluicegate_algorithm::SLUICEGATE_TOKEN_BUCKET as u32,
        amount: AMOUNT,
        period_ns: 1_000_000_000,
        burst: BURST,
        ..Default::default()
    }
}

/// [`config`] as a spec, for the type-erased handles the C ABI wraps.
fn spec() -> Spec {
    Spec::new(Kind::TokenBucket, &[Quota::per_second(AMOUNT).burst(BURST)]).unwrap()
}

fn single(c: &mut Criterion) {
    let mut g = c.benchmark_group("check_at");
    let rust = TokenBucket::with_clock(Quota::per_second(AMOUNT).burst(BURST), ()).unwrap();
    let mut now = 0u64;
    g.bench_function("rust", |b| {
        b.iter(|| {
            now += 1;
            black_box(rust.check_at(black_box(now)));
        })
    });

    // The type behind the C handle, called from Rust: `c_abi − rust_any` is the
    // boundary itself, `rust_any − rust` the type erasure.
    let any = AnyLimiter::with_clock(&spec(), ()).unwrap();
    let mut now = 0u64;
    g.bench_function("rust_any", |b| {
        b.iter(|| {
            now += 1;
            let _ = black_box(any.check_n_at(1, black_box(now)));
        })
    });

    let cfg = config();
    let mut lim: *mut sluicegate_limiter = ptr::null_mut();
    // SAFETY: a valid config array of one and a valid out pointer.
    let s = unsafe { sluicegate_limiter_new(&cfg, 1, &mut lim) };
    assert_eq!(s, sluicegate_status::SLUICEGATE_OK);
    let f: CheckAt = black_box(sluicegate_limiter_check_at as CheckAt);
    let mut d = sluicegate_decision::default();
    let mut now = 0u64;
    g.bench_function("c_abi", |b| {
        b.iter(|| {
            now += 1;
            // SAFETY: a live handle and a valid decision.
            let s = unsafe { f(black_box(lim), black_box(now), &mut d) };
            black_box((s, d.allowed));
        })
    });
    g.finish();
    // SAFETY: the handle from `_new`, freed once.
    unsafe { sluicegate_limiter_free(lim) };
}

fn keyed(c: &mut Criterion) {
    use sluicegate::keyed::KeyedLimiter;
    use sluicegate::Gcra;
    let mut g = c.benchmark_group("keyed_check_at");
    let rust =
        KeyedLimiter::<Gcra, ()>::with_clock(Quota::per_second(AMOUNT).burst(BURST), 1024, ())
            .unwrap();
    let key = *b"203.0.113.7";
    let mut now = 0u64;
    g.bench_function("rust", |b| {
        b.iter(|| {
            now += 1;
            black_box(rust.check_at(black_box(&key[..]), black_box(now)));
        })
    });

    let any = AnyKeyed::with_clock(&spec(), 1024, ()).unwrap();
    let mut now = 0u64;
    g.bench_function("rust_any", |b| {
        b.iter(|| {
            now += 1;
            let _ = black_box(any.check_n_at(black_box(&key[..]), 1, black_box(now)));
        })
    });

    let cfg = config();
    let mut k: *mut sluicegate_keyed = ptr::null_mut();
    // SAFETY: a valid config and out pointer.
    let s = unsafe { sluicegate_keyed_new(&cfg, 1024, 0, &mut k) };
    assert_eq!(s, sluicegate_status::SLUICEGATE_OK);
    let f: KeyedCheckAt = black_box(sluicegate_keyed_check_at as KeyedCheckAt);
    let mut d = sluicegate_decision::default();
    let mut now = 0u64;
    g.bench_function("c_abi", |b| {
        b.iter(|| {
            now += 1;
            // SAFETY: a live handle, a valid key and decision.
            let s = unsafe {
                f(
                    black_box(k),
                    key.as_ptr(),
                    key.len(),
                    black_box(now),
                    &mut d,
                )
            };
            black_box((s, d.allowed));
        })
    });
    g.finish();
    // SAFETY: the handle from `_new`, freed once.
    unsafe { sluicegate_keyed_free(k) };
}

// criterion_group! defines an undocumented pub fn.
#[allow(missing_docs)]
mod group {
    criterion::criterion_group!(benches, super::single, super::keyed);
}
criterion_main!(group::benches);
