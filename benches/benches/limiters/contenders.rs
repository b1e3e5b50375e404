//! Every contender behind one small trait, built in one place, so the timed loops
//! (`direct`, `contended`) and the preflight check run exactly the same calls on
//! identically configured limiters.
//!
//! # Quotas: every call is admitted
//! * `WIDE` — 10⁹ units per second (one per nanosecond) with a burst of 2³⁰: every
//!   token-bucket contender (ours, governor, ratelimit, the mutex bucket). A call
//!   takes ≥ 5 ns of real time and consumes 1 ns of refill, so a bucket on a real
//!   clock never empties; ours with the time passed in advances its time by 1 ns a
//!   call, exactly the refill it consumes.
//! * `WINDOW` — 16,383 per second (the largest limit a one-second sliding-window
//!   word holds), passed-in time advancing 100 µs a call: 10,000 calls per
//!   simulated second, 61 % of the quota, crossing a window boundary every 10,000
//!   calls. Every sluicegate algorithm runs on it, the token bucket included, so the
//!   window/bucket ratios compare algorithms and nothing else.

use std::hint::black_box;
use std::num::NonZeroU32;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Barrier;
use std::time::{Duration, Instant};

use governor::DefaultDirectRateLimiter;
use ratelimit::Ratelimiter;
use sluicegate::{
    Algorithm, Clock, Compound, Decision, FixedWindow, Gcra, InsufficientCapacity, LeakyBucket,
    Limiter, QuantaClock, Quota, Reservation, Shaper, SlidingLog, SlidingWindow, TokenBucket,
};

use crate::mutex_bucket::MutexBucket;

/// Units per second of the token-bucket contenders.
pub(crate) const WIDE_RATE: u32 = 1_000_000_000;
/// Their burst: 2³⁰ units (1.07 s of refill), within governor's `u32`.
pub(crate) const WIDE_BURST: u32 = 1 << 30;
/// Passed-in time per call on the `WIDE` quota: exactly the refill a call consumes.
pub(crate) const WIDE_STEP_NS: u64 = 1;

/// The algorithms' quota: see the module docs.
pub(crate) const WINDOW_LIMIT: u64 = 16_383;
/// Passed-in time per call on the `WINDOW` quota (100 µs: 10,000 calls a second).
pub(crate) const WINDOW_STEP_NS: u64 = 100_000;

/// The cost of the `_n` rows.
pub(crate) const N: u32 = 4;

/// Passed-in time starts here (not at 0, so no limiter sees its fresh word's epoch).
pub(crate) const START_NS: u64 = 1_000_000_000;

pub(crate) fn wide() -> Quota {
    Quota::per_second(u64::from(WIDE_RATE)).burst(u64::from(WIDE_BURST))
}

fn window() -> Quota {
    Quota::per_second(WINDOW_LIMIT)
}

/// One contender: a call and whether its answer admitted.
pub(crate) trait Check: Sync {
    /// What the call returns; the timed loops `black_box` all of it, so each
    /// contender pays for the whole answer its API promises.
    type Answer;
    /// `Some(step)`: the caller passes the time, advanced by `step` ns per call.
    /// `None`: the contender reads its own clock and ignores `now`.
    const STEP_NS: Option<u64>;
    /// One call at `now`.
    fn call(&self, now: u64) -> Self::Answer;
    /// Whether `answer` admitted the request.
    fn admitted(answer: &Self::Answer) -> bool;
}

/// Ours, time passed in. Deny path: the same load and decision, no CAS.
pub(crate) struct OursAt(TokenBucket<()>);
impl Check for OursAt {
    type Answer = Decision;
    const STEP_NS: Option<u64> = Some(WIDE_STEP_NS);
    #[inline]
    fn call(&self, now: u64) -> Decision {
        self.0.check_at(now)
    }
    fn admitted(d: &Decision) -> bool {
        d.allowed
    }
}

/// Ours on the default clock (quanta). Deny path: clock read, load, decision, no CAS.
pub(crate) struct OursClock(TokenBucket);
impl Check for OursClock {
    type Answer = Decision;
    const STEP_NS: Option<u64> = None;
    #[inline]
    fn call(&self, _: u64) -> Decision {
        self.0.check()
    }
    fn admitted(d: &Decision) -> bool {
        d.allowed
    }
}

/// Ours, cost `N`, default clock.
pub(crate) struct OursN(TokenBucket);
impl Check for OursN {
    type Answer = Result<Decision, InsufficientCapacity>;
    const STEP_NS: Option<u64> = None;
    #[inline]
    fn call(&self, _: u64) -> Self::Answer {
        self.0.check_n(u64::from(N))
    }
    fn admitted(a: &Self::Answer) -> bool {
        matches!(a, Ok(d) if d.allowed)
    }
}

/// governor's direct limiter on its default (quanta) clock. Deny path: clock read,
/// load, a `NotUntil` built from the state, no CAS.
pub(crate) struct Governor(DefaultDirectRateLimiter);
impl Check for Governor {
    type Answer = Result<(), governor::NotUntil<governor::clock::QuantaInstant>>;
    const STEP_NS: Option<u64> = None;
    #[inline]
    fn call(&self, _: u64) -> Self::Answer {
        self.0.check()
    }
    fn admitted(a: &Self::Answer) -> bool {
        a.is_ok()
    }
}

/// governor, cost `N`.
pub(crate) struct GovernorN(DefaultDirectRateLimiter, NonZeroU32);
impl Check for GovernorN {
    type Answer = Result<
        Result<(), governor::NotUntil<governor::clock::QuantaInstant>>,
        governor::InsufficientCapacity,
    >;
    const STEP_NS: Option<u64> = None;
    #[inline]
    fn call(&self, _: u64) -> Self::Answer {
        self.0.check_n(self.1)
    }
    fn admitted(a: &Self::Answer) -> bool {
        matches!(a, Ok(Ok(())))
    }
}

/// The `ratelimit` crate on its `Instant` clock. Deny path: the same refill (a
/// clock read, and a CAS on the refill time once per µs), then a load of the
/// tokens and a 128-bit division for the wait, no CAS on the tokens.
pub(crate) struct RateLimit(Ratelimiter);
impl Check for RateLimit {
    type Answer = Result<(), ratelimit::TryWaitError>;
    const STEP_NS: Option<u64> = None;
    #[inline]
    fn call(&self, _: u64) -> Self::Answer {
        self.0.try_wait()
    }
    fn admitted(a: &Self::Answer) -> bool {
        a.is_ok()
    }
}

/// The Go-style mutex bucket on `Instant`. Deny path: the same lock, refill
/// arithmetic and unlock, no store.
pub(crate) struct Mutex(MutexBucket);
impl Check for Mutex {
    type Answer = bool;
    const STEP_NS: Option<u64> = None;
    #[inline]
    fn call(&self, _: u64) -> bool {
        self.0.allow()
    }
    fn admitted(a: &bool) -> bool {
        *a
    }
}

/// Any single-word sluicegate algorithm on the `WINDOW` quota, time passed in.
/// Deny path: the same load and decision, no CAS.
pub(crate) struct Algo<A>(Limiter<A, ()>);
impl<A: Algorithm> Check for Algo<A> {
    type Answer = Decision;
    const STEP_NS: Option<u64> = Some(WINDOW_STEP_NS);
    #[inline]
    fn call(&self, now: u64) -> Decision {
        self.0.check_at(now)
    }
    fn admitted(d: &Decision) -> bool {
        d.allowed
    }
}

/// The sliding log on the `WINDOW` quota. Deny path: the same lock and binary
/// search, no slot written.
pub(crate) struct Log(SlidingLog<()>);
impl Check for Log {
    type Answer = Decision;
    const STEP_NS: Option<u64> = Some(WINDOW_STEP_NS);
    #[inline]
    fn call(&self, now: u64) -> Decision {
        self.0.check_at(now)
    }
    fn admitted(d: &Decision) -> bool {
        d.allowed
    }
}

/// The shaper on the `WINDOW` quota (10 ms max delay; at 61 % load every
/// reservation starts at once). Deny path (past the max delay): no CAS.
pub(crate) struct Shape(Shaper<()>);
impl Check for Shape {
    type Answer = Reservation;
    const STEP_NS: Option<u64> = Some(WINDOW_STEP_NS);
    #[inline]
    fn call(&self, now: u64) -> Reservation {
        self.0.reserve_at(now)
    }
    fn admitted(r: &Reservation) -> bool {
        r.granted()
    }
}

/// Two GCRA limits (16,383/s and 16,383·60/min), all-or-nothing. Deny path: the
/// peeks only, nothing charged.
pub(crate) struct Compound2(Compound<Gcra, 2, ()>);
impl Check for Compound2 {
    type Answer = Decision;
    const STEP_NS: Option<u64> = Some(WINDOW_STEP_NS);
    #[inline]
    fn call(&self, now: u64) -> Decision {
        self.0.check_at(now)
    }
    fn admitted(d: &Decision) -> bool {
        d.allowed
    }
}

/// Reference, not a contender: one uncontended `AtomicU64` compare-and-swap, the
/// floor under any lock-free limiter's admit path on this machine.
pub(crate) struct FloorCas(AtomicU64);
impl Check for FloorCas {
    type Answer = Result<u64, u64>;
    const STEP_NS: Option<u64> = None;
    #[inline]
    fn call(&self, _: u64) -> Self::Answer {
        let v = self.0.load(Ordering::Acquire);
        self.0
            .compare_exchange_weak(v, v.wrapping_add(1), Ordering::AcqRel, Ordering::Acquire)
    }
    fn admitted(_: &Self::Answer) -> bool {
        true
    }
}

/// Reference: one read of the default clock (quanta's TSC clock, as governor uses).
pub(crate) struct FloorClock(QuantaClock);
impl Check for FloorClock {
    type Answer = u64;
    const STEP_NS: Option<u64> = None;
    #[inline]
    fn call(&self, _: u64) -> u64 {
        self.0.now()
    }
    fn admitted(_: &u64) -> bool {
        true
    }
}

pub(crate) fn floor_cas() -> FloorCas {
    FloorCas(AtomicU64::new(0))
}

pub(crate) fn floor_clock() -> FloorClock {
    FloorClock(QuantaClock::default())
}

pub(crate) fn ours_at() -> OursAt {
    OursAt(TokenBucket::with_clock(wide(), ()).unwrap())
}

pub(crate) fn ours_clock() -> OursClock {
    OursClock(TokenBucket::new(wide()).unwrap())
}

pub(crate) fn ours_n() -> OursN {
    OursN(TokenBucket::new(wide()).unwrap())
}

pub(crate) fn governor_quota() -> governor::Quota {
    let rate = NonZeroU32::new(WIDE_RATE).unwrap();
    let burst = NonZeroU32::new(WIDE_BURST).unwrap();
    governor::Quota::per_second(rate).allow_burst(burst)
}

pub(crate) fn governor() -> Governor {
    Governor(governor::RateLimiter::direct(governor_quota()))
}

pub(crate) fn governor_n() -> GovernorN {
    GovernorN(
        governor::RateLimiter::direct(governor_quota()),
        NonZeroU32::new(N).unwrap(),
    )
}

pub(crate) fn ratelimit() -> RateLimit {
    // Starts full, like every other contender (its default is empty).
    let burst = u64::from(WIDE_BURST);
    RateLimit(
        Ratelimiter::builder(u64::from(WIDE_RATE))
            .max_tokens(burst)
            .initial_available(burst)
            .build()
            .unwrap(),
    )
}

pub(crate) fn mutex() -> Mutex {
    Mutex(MutexBucket::new(
        f64::from(WIDE_RATE),
        f64::from(WIDE_BURST),
    ))
}

pub(crate) fn token_bucket() -> Algo<Gcra> {
    Algo(TokenBucket::with_clock(window(), ()).unwrap())
}

pub(crate) fn leaky_bucket() -> Algo<sluicegate::Leaky> {
    Algo(LeakyBucket::with_clock(window(), ()).unwrap())
}

pub(crate) fn fixed_window() -> Algo<sluicegate::Fixed> {
    Algo(FixedWindow::with_clock(window(), ()).unwrap())
}

pub(crate) fn sliding_window() -> Algo<sluicegate::Sliding> {
    Algo(SlidingWindow::with_clock(window(), ()).unwrap())
}

pub(crate) fn sliding_log() -> Log {
    Log(SlidingLog::with_clock(window(), ()).unwrap())
}

pub(crate) fn shaper() -> Shape {
    Shape(Shaper::with_clock(window(), 10_000_000, ()).unwrap())
}

pub(crate) fn compound2() -> Compound2 {
    let quotas = [window(), Quota::per_minute(WINDOW_LIMIT * 60)];
    Compound2(Compound::with_clock(quotas, ()).unwrap())
}

/// Runs `iters` calls split over two threads on one shared `k` and returns the wall
/// time from the first thread's start to the last thread's end; the threads are
/// started (and meet at a barrier) before either clock starts. With passed-in
/// time, both threads start at `*base` and `*base` moves past both afterwards, so
/// the two timelines never drift further apart than one sample.
pub(crate) fn two_threads<K: Check>(
    k: &K,
    iters: u64,
    base: &mut u64,
    sink: impl FnMut(K::Answer) + Copy + Send,
) -> Duration {
    two_threads_by(iters, base, K::STEP_NS, &|_, now| k.call(now), sink)
}

/// [`two_threads`] for any call: `call(thread, now)`, with `thread` 0 or 1 (so a
/// contender can pick per-thread state, such as a stripe) and `now` advanced by
/// `step` ns per call (0 when `step` is `None`).
pub(crate) fn two_threads_by<A>(
    iters: u64,
    base: &mut u64,
    step: Option<u64>,
    call: &(impl Fn(usize, u64) -> A + Sync),
    mut sink: impl FnMut(A) + Copy + Send,
) -> Duration {
    let split = [iters - iters / 2, iters / 2];
    let start = *base;
    let step = step.unwrap_or(0);
    let barrier = Barrier::new(2);
    let spans = std::thread::scope(|s| {
        let mut thread = 0;
        let handles = split.map(|calls| {
            let barrier = &barrier;
            let me = thread;
            thread += 1;
            s.spawn(move || {
                barrier.wait();
                let t0 = Instant::now();
                let mut now = start;
                for _ in 0..calls {
                    now += step;
                    sink(call(me, black_box(now)));
                }
                (t0, Instant::now())
            })
        });
        handles.map(|h| h.join().unwrap())
    });
    *base = start + split[0] * step;
    let first = spans[0].0.min(spans[1].0);
    let last = spans[0].1.max(spans[1].1);
    last - first
}

fn verify<K: Check>(name: &str, k: &K) {
    const CALLS: u64 = 300_000;
    let mut denied = 0u64;
    let mut now = START_NS;
    for _ in 0..CALLS {
        now += K::STEP_NS.unwrap_or(0);
        if !K::admitted(&k.call(now)) {
            denied += 1;
        }
    }
    assert_eq!(denied, 0, "{name}: {denied} of {CALLS} calls denied");
}

fn verify_2t<K: Check>(name: &str, k: &K) {
    let denied = AtomicU64::new(0);
    let mut base = START_NS;
    for _ in 0..3 {
        two_threads(k, 400_000, &mut base, |a| {
            if !K::admitted(&a) {
                denied.fetch_add(1, Ordering::Relaxed);
            }
        });
    }
    let denied = denied.into_inner();
    assert_eq!(denied, 0, "{name} (2 threads): {denied} calls denied");
}

/// Not a benchmark: proves, before anything is timed, that every contender admits
/// every call of the loops that are timed (a denial would measure a different path).
pub(crate) fn preflight(_: &mut criterion::Criterion) {
    verify("sluicegate check_at", &ours_at());
    verify("sluicegate check", &ours_clock());
    verify("sluicegate check_n", &ours_n());
    verify("governor check", &governor());
    verify("governor check_n", &governor_n());
    verify("ratelimit try_wait", &ratelimit());
    verify("mutex_bucket allow", &mutex());
    verify("token_bucket", &token_bucket());
    verify("leaky_bucket", &leaky_bucket());
    verify("fixed_window", &fixed_window());
    verify("sliding_window", &sliding_window());
    verify("sliding_log", &sliding_log());
    verify("shaper", &shaper());
    verify("compound2", &compound2());
    verify_2t("sluicegate check_at", &ours_at());
    verify_2t("sluicegate check", &ours_clock());
    verify_2t("governor check", &governor());
    verify_2t("ratelimit try_wait", &ratelimit());
    verify_2t("mutex_bucket allow", &mutex());
    crate::striped::preflight();
    println!("preflight: every contender admitted every call (1 and 2 threads)");
    println!("(the keyed groups check the very tables they time, before and after timing)");
}
