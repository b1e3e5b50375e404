//! The striped limiter on one hot key (groups `striped_1t` and `striped_2t`): one
//! thread, then two threads, on one shared `Striped<N, _>` of the `WIDE` quota.
//! The two-thread samples are timed like `contended_2t` (wall time per call with
//! both cores working), so `1 thread / 2 threads` is the throughput gained by the
//! second thread: 2× would be perfect scaling. The single `TokenBucket` and
//! governor's direct limiter shared by two threads, the rows these compare with,
//! are `direct` and `contended_2t`'s `sluicegate check_at`, `sluicegate check` and
//! `governor check` in the same run.
//!
//! * `stripedN check_at_stripe`: thread `t` (0 or 1; 0 alone) checks stripe `t`
//!   with the time passed in, advancing `N` ns a call: a stripe refills one unit
//!   every `N·T = N` ns, so each thread takes exactly its stripe's refill and never
//!   needs to borrow from the other.
//! * `stripedN check`: the default clock and the thread-local stripe. Each sample's
//!   two threads are new, so they get consecutive thread indices: distinct
//!   stripes for `N` = 2 and 4.
//!
//! `preflight` checks that every row admits every call, 1 and 2 threads.

use std::hint::black_box;
use std::sync::atomic::{AtomicU64, Ordering};

use criterion::measurement::WallTime;
use criterion::{BenchmarkGroup, Criterion};
use sluicegate::{Decision, DefaultClock, Striped};

use crate::contenders::{self as c, two_threads_by, START_NS, WIDE_STEP_NS};

/// One striped contender: a call from a stripe (or thread) index.
pub(crate) trait StripeCheck: Sync {
    /// `Some(step)`: time passed in, `step` ns a call; `None`: the default clock.
    const STEP_NS: Option<u64>;
    fn call(&self, stripe: usize, now: u64) -> Decision;
}

/// `check_at_stripe(thread, now)`.
pub(crate) struct At<const N: usize>(Striped<N, ()>);
impl<const N: usize> StripeCheck for At<N> {
    const STEP_NS: Option<u64> = Some(N as u64 * WIDE_STEP_NS);
    #[inline]
    fn call(&self, stripe: usize, now: u64) -> Decision {
        self.0.check_at_stripe(stripe, now)
    }
}

/// `check()`: default clock, thread-local stripe.
pub(crate) struct OnClock<const N: usize>(Striped<N, DefaultClock>);
impl<const N: usize> StripeCheck for OnClock<N> {
    const STEP_NS: Option<u64> = None;
    #[inline]
    fn call(&self, _: usize, _: u64) -> Decision {
        self.0.check()
    }
}

pub(crate) fn at<const N: usize>() -> At<N> {
    At(Striped::with_clock(c::wide(), ()).unwrap())
}

pub(crate) fn on_clock<const N: usize>() -> OnClock<N> {
    OnClock(Striped::with_clock(c::wide(), DefaultClock::default()).unwrap())
}

fn time_1t<K: StripeCheck>(g: &mut BenchmarkGroup<'_, WallTime>, id: &str, k: &K) {
    let step = K::STEP_NS.unwrap_or(0);
    let mut now = START_NS;
    g.bench_function(id, |b| {
        // Returns (): see `direct::time`.
        b.iter(|| {
            now += step;
            black_box(k.call(0, black_box(now)));
        })
    });
}

fn time_2t<K: StripeCheck>(g: &mut BenchmarkGroup<'_, WallTime>, id: &str, k: &K) {
    let mut base = START_NS;
    g.bench_function(id, |b| {
        b.iter_custom(|iters| {
            two_threads_by(
                iters,
                &mut base,
                K::STEP_NS,
                &|t, now| k.call(t, now),
                |a| {
                    black_box(a);
                },
            )
        })
    });
}

pub(crate) fn bench(cr: &mut Criterion) {
    let mut g = cr.benchmark_group("striped_1t");
    time_1t(&mut g, "striped2 check_at_stripe", &at::<2>());
    time_1t(&mut g, "striped2 check", &on_clock::<2>());
    time_1t(&mut g, "striped4 check_at_stripe", &at::<4>());
    time_1t(&mut g, "striped4 check", &on_clock::<4>());
    g.finish();
    let mut g = cr.benchmark_group("striped_2t");
    time_2t(&mut g, "striped2 check_at_stripe", &at::<2>());
    time_2t(&mut g, "striped2 check", &on_clock::<2>());
    time_2t(&mut g, "striped4 check_at_stripe", &at::<4>());
    time_2t(&mut g, "striped4 check", &on_clock::<4>());
    g.finish();
}

/// Each thread count on a fresh limiter, as the timed rows get.
fn verify<K: StripeCheck>(name: &str, make: fn() -> K) {
    let k = &make();
    const CALLS: u64 = 300_000;
    let step = K::STEP_NS.unwrap_or(0);
    let mut now = START_NS;
    let mut denied = 0u64;
    for _ in 0..CALLS {
        now += step;
        denied += u64::from(!k.call(0, now).allowed);
    }
    assert_eq!(denied, 0, "{name}: {denied} of {CALLS} calls denied");
    let k = &make();
    let denied = AtomicU64::new(0);
    let mut base = START_NS;
    for _ in 0..3 {
        two_threads_by(
            400_000,
            &mut base,
            K::STEP_NS,
            &|t, now| k.call(t, now),
            |d| {
                if !d.allowed {
                    denied.fetch_add(1, Ordering::Relaxed);
                }
            },
        );
    }
    let denied = denied.into_inner();
    assert_eq!(denied, 0, "{name} (2 threads): {denied} calls denied");
}

/// The striped rows' part of the preflight (1 and 2 threads).
pub(crate) fn preflight() {
    verify("striped2 check_at_stripe", at::<2>);
    verify("striped2 check", on_clock::<2>);
    verify("striped4 check_at_stripe", at::<4>);
    verify("striped4 check", on_clock::<4>);
}
