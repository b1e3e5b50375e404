//! A limit as the Redis scripts see it: the algorithm and its parameters in whole
//! microseconds, validated so that every value a script computes stays below 2^53
//! (Lua numbers are doubles: integers below 2^53 are exact).

use core::time::Duration;

use redis::Value;
use sluicegate::{ConfigError, Decision, FixedParams, GcraParams, Quota};

use crate::error::Error;

/// Largest value the scripts may compute (2^52, leaving room for `now`, ~1.8·10^15 µs).
const LUA_MAX: u64 = 1 << 52;

/// The sliding window's bound on its window (µs) and limit: its sums (`now` plus
/// two windows, three times the limit) stay below 2^53 until the year 2112.
const SUM_MAX: u64 = 1 << 50;

/// A window in whole microseconds, or why not.
fn whole_us(window_ns: u64) -> Result<u64, Error> {
    if window_ns % 1000 != 0 {
        return Err(Error::Resolution {
            field: "window",
            reason: "a window on Redis must be a whole number of microseconds",
        });
    }
    Ok(window_ns / 1000)
}

/// Which algorithm a limit runs; the same names and semantics as the local limiters.
///
/// ```
/// use sluicegate_redis::{Algorithm, Limit};
/// use sluicegate::Quota;
/// let l = Limit::new(Algorithm::SlidingWindow, Quota::per_minute(100)).unwrap();
/// assert_eq!(l.capacity(), 100);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Algorithm {
    /// GCRA token bucket (`sluicegate::TokenBucket`).
    TokenBucket,
    /// Leaky bucket meter (`sluicegate::LeakyBucket`): the same function as the bucket.
    LeakyBucket,
    /// Leaky bucket shaper (`sluicegate::Shaper`): a reservation is granted when its
    /// start is at most `max_delay` away, and the decision says how long to wait.
    Shaper {
        /// The longest a granted request may be told to wait.
        max_delay: Duration,
    },
    /// Fixed window (`sluicegate::FixedWindow`), windows aligned on Redis `TIME`.
    FixedWindow,
    /// Sliding window counter (`sluicegate::SlidingWindow`).
    SlidingWindow,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ScriptKind {
    Gcra,
    Fixed,
    Sliding,
}

/// A validated limit: an [`Algorithm`] and a [`Quota`], converted to the scripts'
/// microsecond parameters.
///
/// # Resolution
/// Redis `TIME` has microsecond resolution, the local limiters nanoseconds. A
/// token bucket's emission interval `T = ⌈period / amount⌉` is rounded *up* to a
/// whole microsecond (never faster than asked: a quota whose `T` is not a whole
/// number of microseconds admits very slightly less on Redis than locally); a
/// shaper's max delay is rounded *down*; a window must be a whole number of
/// microseconds (anything else is a [`Error::Resolution`]). With those
/// parameters and the same `now`, every decision equals the local limiter's,
/// except the sliding window's `retry_after`/`reset_after`, which are rounded up
/// to the next microsecond (under 1 µs later than the local value).
///
/// ```
/// use sluicegate_redis::{Algorithm, Limit};
/// use sluicegate::Quota;
/// let l = Limit::new(Algorithm::TokenBucket, Quota::per_second(3).burst(6)).unwrap();
/// assert_eq!(l.emission_interval_us(), 333_334); // 333 333 334 ns, rounded up
/// assert_eq!(l.capacity(), 6);
/// assert!(Limit::new(Algorithm::FixedWindow, Quota::from_nanos(5, 1_500)).is_err());
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limit {
    algorithm: Algorithm,
    quota: Quota,
    pub(crate) script: ScriptKind,
    /// `T` (GCRA) or `W` (windows), microseconds.
    pub(crate) unit_us: u64,
    /// The burst or the window limit.
    pub(crate) size: u64,
    /// The shaper's max delay, microseconds (0 otherwise).
    pub(crate) slack_us: u64,
    capacity: u64,
}

impl Limit {
    /// Validates `quota` for `algorithm`: the local limiter's checks, then the
    /// scripts' own bounds (see the type docs).
    ///
    /// ```
    /// use sluicegate_redis::{Algorithm, Error, Limit};
    /// use sluicegate::Quota;
    /// assert!(Limit::new(Algorithm::TokenBucket, Quota::per_second(0)).is_err());
    /// let e = Limit::new(Algorithm::SlidingWindow, Quota::from_nanos(5, 1_500)).unwrap_err();
    /// assert!(matches!(e, Error::Resolution { .. }));
    /// // No word on Redis, so no layout bound on the sliding window's limit:
    /// let big = Limit::new(Algorithm::SlidingWindow, Quota::per_day(1_000_000_000)).unwrap();
    /// assert_eq!(big.capacity(), 1_000_000_000);
    /// ```
    pub fn new(algorithm: Algorithm, quota: Quota) -> Result<Self, Error> {
        match algorithm {
            Algorithm::TokenBucket | Algorithm::LeakyBucket | Algorithm::Shaper { .. } => {
                let p = GcraParams::new(&quota).map_err(Error::Config)?;
                let t_us = p.emission_interval_ns().div_ceil(1000);
                let slack_us = match algorithm {
                    Algorithm::Shaper { max_delay } => {
                        u64::try_from(max_delay.as_micros()).unwrap_or(u64::MAX)
                    }
                    _ => 0,
                };
                let size = p
                    .burst()
                    .checked_mul(t_us)
                    .and_then(|tau| tau.checked_add(slack_us));
                if size.is_none_or(|s| s > LUA_MAX) {
                    return Err(Error::Resolution {
                        field: "burst",
                        reason: "burst × emission interval + max delay must be under 2^52 µs (142 years)",
                    });
                }
                Ok(Self {
                    algorithm,
                    quota,
                    script: ScriptKind::Gcra,
                    unit_us: t_us,
                    size: p.burst(),
                    slack_us,
                    capacity: p.burst().saturating_add(slack_us / t_us),
                })
            }
            Algorithm::FixedWindow => {
                let p = FixedParams::new(&quota).map_err(Error::Config)?;
                let (window_ns, limit) = (p.window_ns(), p.limit());
                let w_us = whole_us(window_ns)?;
                let products = (limit as u128 + 1) * w_us as u128;
                if products > LUA_MAX as u128 {
                    return Err(Error::Resolution {
                        field: "limit",
                        reason:
                            "(limit + 1) × window must be under 2^52 µs for exact Lua arithmetic",
                    });
                }
                Ok(Self::window(
                    algorithm,
                    quota,
                    ScriptKind::Fixed,
                    w_us,
                    limit,
                ))
            }
            // No word layout on Redis, so no layout bound: the script compares its
            // products exactly (never as doubles), and only its sums must stay
            // below 2^53.
            Algorithm::SlidingWindow => {
                let (window_ns, limit) = (quota.period_ns(), quota.amount());
                if window_ns == 0 {
                    return Err(Error::Config(ConfigError::Zero { field: "window" }));
                }
                if limit == 0 {
                    return Err(Error::Config(ConfigError::Zero { field: "limit" }));
                }
                let w_us = whole_us(window_ns)?;
                if w_us > SUM_MAX {
                    return Err(Error::Resolution {
                        field: "window",
                        reason: "a sliding window on Redis must be under 2^50 µs (35 years)",
                    });
                }
                if limit > SUM_MAX {
                    return Err(Error::Resolution {
                        field: "limit",
                        reason: "a sliding window's limit on Redis must be under 2^50",
                    });
                }
                Ok(Self::window(
                    algorithm,
                    quota,
                    ScriptKind::Sliding,
                    w_us,
                    limit,
                ))
            }
        }
    }

    fn window(
        algorithm: Algorithm,
        quota: Quota,
        script: ScriptKind,
        w_us: u64,
        limit: u64,
    ) -> Self {
        Self {
            algorithm,
            quota,
            script,
            unit_us: w_us,
            size: limit,
            slack_us: 0,
            capacity: limit,
        }
    }

    /// The algorithm.
    ///
    /// ```
    /// # use sluicegate_redis::{Algorithm, Limit};
    /// # use sluicegate::Quota;
    /// let l = Limit::new(Algorithm::FixedWindow, Quota::per_second(5)).unwrap();
    /// assert_eq!(l.algorithm(), Algorithm::FixedWindow);
    /// ```
    pub fn algorithm(&self) -> Algorithm {
        self.algorithm
    }

    /// The quota the limit was built from.
    ///
    /// ```
    /// # use sluicegate_redis::{Algorithm, Limit};
    /// # use sluicegate::Quota;
    /// let l = Limit::new(Algorithm::FixedWindow, Quota::per_second(5)).unwrap();
    /// assert_eq!(l.quota().amount(), 5);
    /// ```
    pub fn quota(&self) -> Quota {
        self.quota
    }

    /// The largest cost that can ever be admitted at once; a larger one is an
    /// [`Error::Capacity`], never sent to Redis.
    ///
    /// ```
    /// # use sluicegate_redis::{Algorithm, Limit};
    /// # use sluicegate::Quota;
    /// let l = Limit::new(Algorithm::TokenBucket, Quota::per_second(5).burst(2)).unwrap();
    /// assert_eq!(l.capacity(), 2);
    /// ```
    pub fn capacity(&self) -> u64 {
        self.capacity
    }

    /// The GCRA emission interval in microseconds (window length for the windows).
    ///
    /// ```
    /// # use sluicegate_redis::{Algorithm, Limit};
    /// # use sluicegate::Quota;
    /// let l = Limit::new(Algorithm::TokenBucket, Quota::per_second(4)).unwrap();
    /// assert_eq!(l.emission_interval_us(), 250_000);
    /// ```
    pub fn emission_interval_us(&self) -> u64 {
        self.unit_us
    }

    /// Appends the script arguments after the key.
    pub(crate) fn push_args(&self, cmd: &mut redis::Cmd, n: u64, mode: Mode) {
        let mode = match mode {
            Mode::Consume => "c",
            Mode::Peek => "p",
            Mode::Lease => "l",
        };
        cmd.arg(self.unit_us).arg(self.size).arg(n);
        if self.script == ScriptKind::Gcra {
            cmd.arg(self.slack_us);
        }
        cmd.arg(mode);
    }

    /// The multi-cost script's arguments (see [`crate::script::multi_source`]):
    /// the number of single-call arguments, those (cost 0, consume), the costs.
    pub(crate) fn push_multi_args(&self, cmd: &mut redis::Cmd, costs: &[u64]) {
        let m = if self.script == ScriptKind::Gcra {
            5
        } else {
            4
        };
        cmd.arg(m);
        self.push_args(cmd, 0, Mode::Consume);
        for &n in costs {
            cmd.arg(n);
        }
    }
}

/// What a script call does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Mode {
    Consume,
    Peek,
    Lease,
}

/// A script's answer: the decision, Redis' clock, and (shaper) the delay and
/// (lease) the units granted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Reply {
    /// The decision, in the local limiter's units (nanoseconds = microseconds × 1000).
    pub decision: Decision,
    /// Redis `TIME` at the decision, in microseconds since the Unix epoch.
    pub now_us: u64,
    /// For the shaper: how long the granted request must wait, in nanoseconds.
    pub delay_ns: u64,
    /// Units charged: `n` for an admitted consume, up to `n` for a lease, 0 otherwise.
    pub granted: u64,
}

impl Reply {
    pub(crate) fn parse(v: &Value) -> Result<Self, Error> {
        let items = match v {
            Value::Array(items) => items,
            other => return Err(Error::Reply(format!("expected an array, got {other:?}"))),
        };
        let mut n = [0u64; 8];
        if items.len() != n.len() {
            return Err(Error::Reply(format!(
                "expected 8 integers, got {}",
                items.len()
            )));
        }
        for (slot, item) in n.iter_mut().zip(items) {
            *slot = match item {
                Value::Int(i) if *i >= 0 => *i as u64,
                other => return Err(Error::Reply(format!("expected an integer, got {other:?}"))),
            };
        }
        let ns = |us: u64| us.saturating_mul(1000);
        Ok(Self {
            decision: Decision {
                allowed: n[0] == 1,
                remaining: n[1],
                retry_after_ns: ns(n[2]),
                reset_after_ns: ns(n[3]),
                limit: n[4],
            },
            now_us: n[5],
            delay_ns: ns(n[6]),
            granted: n[7],
        })
    }
}
