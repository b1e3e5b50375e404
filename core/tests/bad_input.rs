//! Bad input: every invalid configuration is a typed error naming the field and
//! the bound; every hostile call (cost above capacity, time at the end of `u64`,
//! huge jumps either way) is an error or a conservative decision — never a panic,
//! never an extra admission.

mod model;

use core::time::Duration;

use model::{LOG_MAX_CAPACITY, NEVER, WIDE_MAX_LIMIT, sliding_max_limit, window_max_count};
use proptest::prelude::*;
use sluicegate::{
    Compound, ConfigError, Decision, Fixed, FixedWindow, Gcra, InsufficientCapacity, LeakyBucket,
    Quota, Shaper, SlidingLog, SlidingWindow, TokenBucket,
};

const SEC: Duration = Duration::from_secs(1);

#[test]
fn fractional_rates_reject_nan_infinite_negative_and_zero() {
    for rate in [f64::NAN, -f64::NAN, f64::INFINITY, f64::NEG_INFINITY] {
        assert_eq!(
            Quota::from_rate(rate, SEC),
            Err(ConfigError::NotFinite { field: "rate" }),
            "{rate}"
        );
    }
    for rate in [-1.0, -1e-300, -f64::MAX, -f64::MIN_POSITIVE] {
        assert_eq!(
            Quota::from_rate(rate, SEC),
            Err(ConfigError::Negative { field: "rate" }),
            "{rate}"
        );
    }
    for rate in [0.0, -0.0] {
        assert_eq!(Quota::from_rate(rate, SEC), Err(zero("rate")));
    }
    assert_eq!(Quota::from_rate(1.0, Duration::ZERO), Err(zero("period")));
    // So slow that one unit takes longer than u64 nanoseconds.
    for (rate, per) in [
        (1e-300, SEC),
        (f64::MIN_POSITIVE, SEC),
        (0.5, Duration::MAX),
    ] {
        assert_eq!(
            Quota::from_rate(rate, per),
            Err(too_large("period", u64::MAX)),
            "{rate} per {per:?}"
        );
    }
}

proptest! {
    #![proptest_config(model::config(512))]

    /// A valid fractional rate is never faster than asked: one unit per
    /// ⌈per / rate⌉ ns, and a burst of ⌊rate⌋ (at least one).
    #[test]
    fn fractional_rates_round_towards_slower(rate in 1e-9f64..1e12, per_ms in 1u64..100_000_000) {
        let per = Duration::from_millis(per_ms);
        let exact = per.as_nanos() as f64 / rate;
        match Quota::from_rate(rate, per) {
            Ok(q) => {
                prop_assert_eq!(q.amount(), 1);
                prop_assert!(q.period_ns() as f64 >= exact && q.period_ns() >= 1, "{:?} for {}", q, exact);
                prop_assert!((q.period_ns() as f64) < exact + 1.0 || exact < 1.0);
                prop_assert_eq!(q.burst_size(), (rate.floor() as u64).max(1));
            }
            Err(e) => prop_assert!(exact >= u64::MAX as f64, "{:?} for {}", e, exact),
        }
    }
}

fn zero(field: &'static str) -> ConfigError {
    ConfigError::Zero { field }
}

fn too_large(field: &'static str, max: u64) -> ConfigError {
    ConfigError::TooLarge { field, max }
}

/// Asserts that every case of `what` (what building or reconfiguring answered,
/// the limiter dropped) is exactly the error beside it.
fn assert_rejected<const N: usize>(what: &str, cases: [(Result<(), ConfigError>, ConfigError); N]) {
    for (i, (got, want)) in cases.into_iter().enumerate() {
        assert_eq!(got, Err(want), "{what}: case {i}");
    }
}

#[test]
fn zero_amount_period_and_burst_are_named() {
    let zero_amount = Quota::per_second(0);
    let zero_period = Quota::from_nanos(1, 0);
    let zero_burst = Quota::per_second(5).burst(0);
    let bucket = |q| TokenBucket::with_clock(q, ()).map(drop);
    let meter = |q| LeakyBucket::with_clock(q, ()).map(drop);
    let shaper = |q| Shaper::with_clock(q, 10, ()).map(drop);
    assert_rejected(
        "buckets",
        [
            (bucket(zero_amount), zero("amount")),
            (meter(zero_period), zero("period")),
            (bucket(zero_burst), zero("burst")),
            (shaper(zero_burst), zero("burst")),
            (bucket(Quota::with_period(Duration::ZERO)), zero("period")),
            (
                bucket(Quota::from_nanos(2, 1)),
                ConfigError::TooFast { field: "amount" },
            ),
        ],
    );
    // Windows and the log call the amount a limit and the period a window.
    let windows: [fn(Quota) -> Result<(), ConfigError>; 3] = [
        |q| FixedWindow::with_clock(q, ()).map(drop),
        |q| SlidingWindow::with_clock(q, ()).map(drop),
        |q| SlidingLog::with_clock(q, ()).map(drop),
    ];
    for (i, window) in windows.into_iter().enumerate() {
        assert_rejected(
            &format!("window {i}"),
            [
                (window(zero_amount), zero("limit")),
                (window(zero_period), zero("window")),
            ],
        );
    }
    assert_rejected(
        "log and compounds",
        [
            (
                SlidingLog::with_capacity(Quota::per_second(1), 0, ()).map(drop),
                zero("capacity"),
            ),
            (
                Compound::<Gcra, 0, ()>::with_clock([], ()).map(drop),
                zero("limits"),
            ),
            (
                Compound::<Gcra, 2, ()>::with_clock([Quota::per_second(1), zero_burst], ())
                    .map(drop),
                zero("burst"),
            ),
        ],
    );
}

#[test]
fn bursts_too_large_for_the_word_give_the_exact_maximum() {
    for period in [1u64, 3, 1_000_000_000, 86_400_000_000_000, u64::MAX] {
        for amount in [1u64, 3, 7] {
            if amount > period {
                continue;
            }
            let t = period.div_ceil(amount);
            let max = u64::MAX / t;
            let q = Quota::from_nanos(amount, period);
            if max < u64::MAX {
                assert_eq!(
                    TokenBucket::with_clock(q.burst(max + 1), ()).map(drop),
                    Err(too_large("burst", max)),
                    "period {period} amount {amount}"
                );
                assert_eq!(
                    Shaper::with_clock(q.burst(u64::MAX), 0, ()).map(drop),
                    Err(too_large("burst", max))
                );
            }
            // The maximum itself works, and a full bucket admits all of it at once.
            let tb = TokenBucket::with_clock(q.burst(max), ()).unwrap();
            let d = tb.check_n_at(max, 0).unwrap();
            assert!(d.allowed && d.remaining == 0, "{d:?}");
            assert!(!tb.check_at(0).allowed);
        }
    }
}

#[test]
fn limits_too_large_for_the_layout_give_the_exact_maximum() {
    // The documented figures.
    assert_eq!(window_max_count(1_000_000_000, 1), 536_870_911);
    assert_eq!(window_max_count(1_000_000_000, 2), 16_383);
    assert_eq!(window_max_count(60_000_000_000, 2), 131_071);
    assert_eq!(window_max_count(3_600_000_000_000, 2), 1_048_575);
    for window in [
        1u64,
        2,
        3,
        4,
        1_000,
        1_000_000_000,
        60_000_000_000,
        1 << 40,
        u64::MAX / 2,
        u64::MAX,
    ] {
        for (counts, name) in [(1, "fixed"), (2, "sliding")] {
            // The sliding window takes the wide layout past the whole index.
            let max = if counts == 1 {
                window_max_count(window, 1)
            } else {
                sliding_max_limit(window)
            };
            let build = |limit: u64| {
                let q = Quota::from_nanos(limit, window);
                if counts == 1 {
                    FixedWindow::with_clock(q, ()).map(|w| w.capacity())
                } else {
                    SlidingWindow::with_clock(q, ()).map(|w| w.capacity())
                }
            };
            if max == 0 {
                assert_eq!(build(1), Err(too_large("limit", 0)), "{name} {window}");
                continue;
            }
            assert_eq!(build(max), Ok(max), "{name} {window}");
            assert_eq!(
                build(max + 1),
                Err(too_large("limit", max)),
                "{name} {window}"
            );
            assert_eq!(build(u64::MAX), Err(too_large("limit", max)));
        }
    }
}

#[test]
fn full_counts_at_the_last_window_of_time_stay_in_their_field() {
    for window in [3u64, 1_000_000_000, u64::MAX / 3, u64::MAX] {
        let max = window_max_count(window, 1);
        let w = FixedWindow::with_clock(Quota::from_nanos(max, window), ()).unwrap();
        assert!(w.check_n_at(max, u64::MAX).unwrap().allowed);
        let d = w.check_at(u64::MAX);
        assert!(!d.allowed && d.remaining == 0, "{window}: {d:?}");
        assert!(!w.check_at(0).allowed, "{window}: the clock went back to 0");

        let max = window_max_count(window, 2);
        if max == 0 {
            continue;
        }
        let w = SlidingWindow::with_clock(Quota::from_nanos(max, window), ()).unwrap();
        let last = (u64::MAX / window) * window; // the last window's start
        assert!(w.check_n_at(max, last.saturating_sub(1)).unwrap().allowed || last == 0);
        assert!(w.check_n_at(max, u64::MAX).unwrap().remaining <= max);
        assert!(!w.check_at(0).allowed || last == 0 && window == u64::MAX);

        // The wide layout (index modulo 2²⁴) at the end of time.
        if max < WIDE_MAX_LIMIT {
            let w =
                SlidingWindow::with_clock(Quota::from_nanos(WIDE_MAX_LIMIT, window), ()).unwrap();
            assert!(w.params().wraps());
            assert!(w.check_n_at(WIDE_MAX_LIMIT, u64::MAX).unwrap().allowed);
            let d = w.check_at(u64::MAX);
            assert!(!d.allowed && d.remaining == 0, "{window}: {d:?}");
        }
    }
}

#[test]
fn logs_too_large_give_the_exact_maximum() {
    let big = Quota::per_second(LOG_MAX_CAPACITY + 1);
    let log = SlidingLog::with_capacity(Quota::per_second(2), 4, ()).unwrap();
    let sized = |limit, capacity| {
        SlidingLog::with_capacity(Quota::per_second(limit), capacity, ()).map(drop)
    };
    assert_rejected(
        "log",
        [
            (
                SlidingLog::with_clock(big, ()).map(drop),
                too_large("limit", LOG_MAX_CAPACITY),
            ),
            (
                sized(1, LOG_MAX_CAPACITY + 1),
                too_large("capacity", LOG_MAX_CAPACITY),
            ),
            (sized(9, 8), too_large("limit", 8)),
            (log.set_quota(&Quota::per_second(5)), too_large("limit", 4)),
            (log.set_quota(&Quota::from_nanos(1, 0)), zero("window")),
        ],
    );
    assert!(log.check_n_at(2, 0).unwrap().allowed);
    assert!(
        !log.check_at(0).allowed,
        "a rejected set_quota changed nothing"
    );
}

#[test]
fn rejected_reconfiguration_changes_nothing() {
    let tb = TokenBucket::with_clock(Quota::per_second(2), ()).unwrap();
    assert!(tb.check_at(0).allowed);
    for bad in [
        Quota::per_second(0),
        Quota::from_nanos(1, 0),
        Quota::per_second(2).burst(0),
        Quota::from_nanos(2, 1),
    ] {
        assert!(tb.set_quota(&bad).is_err(), "{bad:?}");
    }
    assert_eq!(tb.check_at(0).remaining, 0);
    assert!(!tb.check_at(0).allowed);

    let w = FixedWindow::with_clock(Quota::per_second(2), ()).unwrap();
    let s = SlidingWindow::with_clock(Quota::per_second(2), ()).unwrap();
    let c = Compound::<Fixed, 2, ()>::with_clock([Quota::per_second(2), Quota::per_minute(5)], ())
        .unwrap();
    let immutable_window = ConfigError::Immutable { field: "window" };
    assert_rejected(
        "reconfiguration",
        [
            (w.set_quota(&Quota::per_minute(2)), immutable_window),
            (
                w.set_quota(&Quota::per_second(1 << 40)),
                too_large("limit", 536_870_911),
            ),
            (s.set_quota(&Quota::per_minute(2)), immutable_window),
            (s.set_quota(&Quota::per_second(0)), zero("limit")),
            (c.set_quota(2, &Quota::per_second(2)), too_large("index", 1)),
            (
                c.set_quota(usize::MAX, &Quota::per_second(2)),
                too_large("index", 1),
            ),
        ],
    );
    for _ in 0..2 {
        assert!(w.check_at(0).allowed && s.check_at(0).allowed && c.check_at(0).allowed);
    }
    assert!(!w.check_at(0).allowed && !s.check_at(0).allowed && !c.check_at(0).allowed);
}

fn over(requested: u64, capacity: u64) -> Result<Decision, InsufficientCapacity> {
    Err(InsufficientCapacity {
        requested,
        capacity,
    })
}

#[test]
fn costs_above_capacity_are_errors_not_denials() {
    let q = Quota::per_second(10).burst(4);
    let tb = TokenBucket::with_clock(q, ()).unwrap();
    let lb = LeakyBucket::with_clock(q, ()).unwrap();
    let fw = FixedWindow::with_clock(q, ()).unwrap();
    let sw = SlidingWindow::with_clock(q, ()).unwrap();
    let log = SlidingLog::with_clock(q, ()).unwrap();
    let sh = Shaper::with_clock(q, 300_000_000, ()).unwrap(); // 4 + 3 within 300 ms
    let c = Compound::<Gcra, 2, ()>::with_clock([q, Quota::per_minute(100)], ()).unwrap();
    for n in [5, 6, 1_000, u64::MAX] {
        for t in [0, 1, u64::MAX] {
            assert_eq!(tb.check_n_at(n, t), over(n, 4));
            assert_eq!(tb.peek_n_at(n, t), over(n, 4));
            assert_eq!(lb.check_n_at(n, t), over(n, 4));
            assert_eq!(c.check_n_at(n, t), over(n, 4));
            assert_eq!(c.peek_n_at(n, t), over(n, 4));
            let m = n.saturating_add(3);
            assert_eq!(sh.peek_n_at(m, t), over(m, 7));
            assert!(sh.reserve_n_at(m, t).is_err());
        }
    }
    for n in [11, u64::MAX] {
        for t in [0, u64::MAX] {
            assert_eq!(fw.check_n_at(n, t), over(n, 10));
            assert_eq!(sw.check_n_at(n, t), over(n, 10));
            assert_eq!(log.check_n_at(n, t), over(n, 10));
            assert_eq!(log.peek_n_at(n, t), over(n, 10));
        }
    }
    // The errors charged nothing: everything is still full.
    assert!(tb.check_n_at(4, 0).unwrap().allowed);
    assert!(fw.check_n_at(10, 0).unwrap().allowed);
    assert!(sw.check_n_at(10, 0).unwrap().allowed);
    assert!(log.check_n_at(10, 0).unwrap().allowed);
    assert!(c.check_n_at(4, 0).unwrap().allowed);
    assert!(sh.reserve_n_at(7, 0).unwrap().granted());
}

#[test]
fn the_end_of_time_keeps_a_fresh_bucket_full_and_windows_working() {
    // Issue 11 item 4: a fresh bucket is full at every instant, the last ones too
    // (was: denied at u64::MAX − 1, one admitted at u64::MAX − 10 ms). Time stops
    // one refill before the end (the horizon); nothing refills after it.
    let q = Quota::per_second(100).burst(20);
    for now in [
        u64::MAX,
        u64::MAX - 1,
        u64::MAX - 10_000_000,
        u64::MAX - 200_000_000,
    ] {
        let tb = TokenBucket::with_clock(q, ()).unwrap();
        let lb = LeakyBucket::with_clock(q, ()).unwrap();
        let sh = Shaper::with_clock(q, 0, ()).unwrap();
        let delayed = Shaper::with_clock(q, 100_000_000, ()).unwrap();
        let keyed = sluicegate::keyed::KeyedLimiter::<Gcra, ()>::with_clock(q, 16, ()).unwrap();
        for i in 0..20 {
            for d in [
                tb.check_at(now),
                lb.check_at(now),
                *sh.reserve_at(now).decision(),
                *delayed.reserve_at(now).decision(),
                keyed.check_at(&"k", now),
            ] {
                assert!(d.allowed && d.remaining <= d.limit, "{now} unit {i}: {d:?}");
            }
        }
        for d in [
            tb.check_at(now),
            lb.check_at(now),
            keyed.check_at(&"k", now),
        ] {
            // Time has stopped: never again, and never full again.
            assert_eq!(
                (d.allowed, d.remaining, d.retry_after_ns),
                (false, 0, NEVER),
                "{d:?}"
            );
        }
        // The shaper's 100 ms of delay: ten more, 10 ms apart, then never.
        for i in 1..=10 {
            let r = delayed.reserve_at(now);
            assert!(
                r.granted() && r.delay_ns() == i * 10_000_000,
                "{now}: {r:?}"
            );
        }
        assert!(!delayed.reserve_at(now).granted());
    }
    // Before the horizon, time still moves: 200 ms later the bucket is full again.
    let tb = TokenBucket::with_clock(q, ()).unwrap();
    let t = u64::MAX - 400_000_000;
    assert!(tb.check_n_at(20, t).unwrap().allowed);
    let d = tb.check_at(t);
    assert_eq!(
        (d.allowed, d.retry_after_ns, d.reset_after_ns),
        (false, 10_000_000, 200_000_000)
    );
    assert!(tb.check_n_at(20, t + 200_000_000).unwrap().allowed);
    // A refill longer than 2⁶³ ns keeps its horizon at 2⁶³: what does not fit
    // before the end of time is denied, as before.
    let slow = TokenBucket::with_clock(Quota::per_day(1).burst(213_503), ()).unwrap();
    assert!(slow.check_n_at(1, u64::MAX).unwrap().allowed);
    assert!(!slow.check_n_at(213_503, u64::MAX).unwrap().allowed);

    let fw = FixedWindow::with_clock(Quota::per_second(3), ()).unwrap();
    let sw = SlidingWindow::with_clock(Quota::per_second(3), ()).unwrap();
    let log = SlidingLog::with_clock(Quota::per_second(3), ()).unwrap();
    for _ in 0..3 {
        assert!(
            fw.check_at(u64::MAX).allowed
                && sw.check_at(u64::MAX).allowed
                && log.check_at(u64::MAX).allowed
        );
    }
    for d in [
        fw.check_at(u64::MAX),
        sw.check_at(u64::MAX),
        log.check_at(u64::MAX),
    ] {
        assert!(!d.allowed && d.remaining == 0, "{d:?}");
        assert!(d.retry_after_ns > 0);
    }
}

/// Fills `check` at `t` until it denies; returns how many it admitted.
fn fill(check: impl Fn(u64) -> Decision, t: u64) -> u64 {
    let mut admitted = 0;
    while check(t).allowed {
        admitted += 1;
        assert!(admitted <= 1_000, "runaway admission");
    }
    admitted
}

proptest! {
    #![proptest_config(model::config(256))]

    /// After a limiter is full at `t`, no earlier timestamp — one nanosecond back or
    /// all the way to 0 — admits anything: going back is no time passing (or, for
    /// the bucket, fewer tokens), never extra room.
    #[test]
    fn the_clock_going_back_never_admits_more(t in any::<u64>(), back in any::<u64>(), per in 1u64..5) {
        let earlier = t.saturating_sub(back % t.max(1)).min(t);
        let q = Quota::per_second(4).burst(per);
        let tb = TokenBucket::with_clock(q, ()).unwrap();
        let lb = LeakyBucket::with_clock(q, ()).unwrap();
        let fw = FixedWindow::with_clock(q, ()).unwrap();
        let sw = SlidingWindow::with_clock(q, ()).unwrap();
        let log = SlidingLog::with_clock(q, ()).unwrap();
        let sh = Shaper::with_clock(q, 500_000_000, ()).unwrap();
        let c = Compound::<Fixed, 2, ()>::with_clock([q, Quota::per_minute(3)], ()).unwrap();
        fill(|t| tb.check_at(t), t);
        fill(|t| lb.check_at(t), t);
        fill(|t| fw.check_at(t), t);
        fill(|t| sw.check_at(t), t);
        fill(|t| log.check_at(t), t);
        fill(|t| sh.reserve_at(t).decision().to_owned(), t);
        fill(|t| c.check_at(t), t);
        for at in [earlier, t.saturating_sub(1), 0] {
            prop_assert!(!tb.check_at(at).allowed, "bucket at {}", at);
            prop_assert!(!lb.check_at(at).allowed, "meter at {}", at);
            prop_assert!(!fw.check_at(at).allowed, "fixed at {}", at);
            prop_assert!(!sw.check_at(at).allowed, "sliding at {}", at);
            prop_assert!(!log.check_at(at).allowed, "log at {}", at);
            prop_assert!(!sh.reserve_at(at).granted(), "shaper at {}", at);
            prop_assert!(!c.check_at(at).allowed, "compound at {}", at);
        }
    }

    /// Any quota and any request — costs, times and jumps anywhere in `u64` — gives
    /// an error or a decision, never a panic (debug builds check every overflow).
    #[test]
    fn any_input_never_panics(
        amount in any::<u64>(),
        period in any::<u64>(),
        burst in any::<u64>(),
        slack in any::<u64>(),
        calls in prop::collection::vec((any::<u64>(), prop_oneof![Just(0u64), Just(1), any::<u64>()]), 1..16),
    ) {
        let small = |x: u64| if amount % 2 == 0 { x % 64 } else { x };
        let q = Quota::from_nanos(small(amount), small(period)).burst(small(burst));
        let tb = TokenBucket::with_clock(q, ()).ok();
        let lb = LeakyBucket::with_clock(q, ()).ok();
        let fw = FixedWindow::with_clock(q, ()).ok();
        let sw = SlidingWindow::with_clock(q, ()).ok();
        let sh = Shaper::with_clock(q, slack, ()).ok();
        let log = SlidingLog::with_clock(Quota::from_nanos(small(amount) % 64, period), ()).ok();
        let c = Compound::<Gcra, 2, ()>::with_clock([q, Quota::per_second(3)], ()).ok();
        for &(t, n) in &calls {
            if let Some(l) = &tb {
                let _ = (l.check_n_at(n, t), l.peek_n_at(n, t), l.check_at(t));
                prop_assert_eq!(l.check_n_at(n, t).is_err(), n > l.capacity());
            }
            if let Some(l) = &lb {
                let _ = (l.check_n_at(n, t), l.level_at(t));
            }
            if let Some(l) = &fw {
                let _ = (l.check_n_at(n, t), l.peek_at(t));
                prop_assert_eq!(l.check_n_at(n, t).is_err(), n > l.capacity());
            }
            if let Some(l) = &sw {
                let _ = (l.check_n_at(n, t), l.peek_at(t));
                prop_assert_eq!(l.check_n_at(n, t).is_err(), n > l.capacity());
            }
            if let Some(l) = &sh {
                if let Ok(mut r) = l.reserve_n_at(n, t) {
                    let _ = l.cancel_at(&mut r, t);
                }
                let _ = (l.peek_n_at(n, t), l.reserve_at(t));
            }
            if let Some(l) = &log {
                let _ = (l.check_n_at(n, t), l.peek_n_at(n, t), l.check_at(t));
            }
            if let Some(l) = &c {
                let _ = (l.check_n_at(n, t), l.peek_n_at(n, t), l.check_at(t));
            }
        }
    }
}
