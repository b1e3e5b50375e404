//! Quotas: how many units per period, and how many at once.

use core::time::Duration;

use crate::error::ConfigError;

const NANOS_PER_SEC: u64 = 1_000_000_000;

/// `amount` units per `period`, with up to `burst` units at once.
///
/// A quota is plain data; limiters validate it when they are built (see
/// [`ConfigError`]). The same quota means, per algorithm:
///
/// | algorithm | meaning |
/// |---|---|
/// | token bucket | refills `amount` tokens per `period`, holds at most `burst` |
/// | leaky bucket | leaks `amount` units per `period`, holds at most `burst` |
/// | shaper | spaces requests `period / amount` apart, `burst` may go back-to-back |
/// | fixed / sliding window, log | at most `amount` per window of length `period` (`burst` unused) |
///
/// ```
/// use core::time::Duration;
/// use sluicegate::Quota;
/// let q = Quota::per_minute(100).burst(20);
/// assert_eq!(q.amount(), 100);
/// assert_eq!(q.period(), Duration::from_secs(60));
/// assert_eq!(q.burst_size(), 20);
/// assert_eq!(Quota::per_second(5).burst_size(), 5); // burst defaults to amount
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Quota {
    amount: u64,
    period_ns: u64,
    burst: u64,
}

impl Quota {
    /// `amount` units per `period`; burst defaults to `amount`.
    ///
    /// A period longer than `u64::MAX` nanoseconds (584 years) is clamped to it.
    ///
    /// ```
    /// # use core::time::Duration; use sluicegate::Quota;
    /// let q = Quota::new(10, Duration::from_millis(250));
    /// assert_eq!(q.period_ns(), 250_000_000);
    /// ```
    pub const fn new(amount: u64, period: Duration) -> Self {
        let ns = period.as_nanos();
        let period_ns = if ns > u64::MAX as u128 {
            u64::MAX
        } else {
            ns as u64
        };
        Self {
            amount,
            period_ns,
            burst: amount,
        }
    }

    /// `amount` units per `period_ns` nanoseconds.
    ///
    /// ```
    /// # use sluicegate::Quota;
    /// assert_eq!(Quota::from_nanos(3, 1_000), Quota::new(3, core::time::Duration::from_micros(1)));
    /// ```
    pub const fn from_nanos(amount: u64, period_ns: u64) -> Self {
        Self {
            amount,
            period_ns,
            burst: amount,
        }
    }

    /// `amount` per second.
    ///
    /// ```
    /// # use sluicegate::Quota;
    /// assert_eq!(Quota::per_second(100).period_ns(), 1_000_000_000);
    /// ```
    pub const fn per_second(amount: u64) -> Self {
        Self::from_nanos(amount, NANOS_PER_SEC)
    }

    /// `amount` per minute.
    ///
    /// ```
    /// # use sluicegate::Quota;
    /// assert_eq!(Quota::per_minute(1).period_ns(), 60_000_000_000);
    /// ```
    pub const fn per_minute(amount: u64) -> Self {
        Self::from_nanos(amount, 60 * NANOS_PER_SEC)
    }

    /// `amount` per hour.
    ///
    /// ```
    /// # use sluicegate::Quota;
    /// assert_eq!(Quota::per_hour(1).period_ns(), 3_600_000_000_000);
    /// ```
    pub const fn per_hour(amount: u64) -> Self {
        Self::from_nanos(amount, 3_600 * NANOS_PER_SEC)
    }

    /// `amount` per day.
    ///
    /// ```
    /// # use sluicegate::Quota;
    /// assert_eq!(Quota::per_day(1).period_ns(), 86_400_000_000_000);
    /// ```
    pub const fn per_day(amount: u64) -> Self {
        Self::from_nanos(amount, 86_400 * NANOS_PER_SEC)
    }

    /// One unit every `period`, like governor's `Quota::with_period`.
    ///
    /// ```
    /// # use core::time::Duration; use sluicegate::Quota;
    /// assert_eq!(Quota::with_period(Duration::from_millis(10)), Quota::per_second(100).burst(1).normalized());
    /// ```
    pub const fn with_period(period: Duration) -> Self {
        Self::new(1, period)
    }

    /// A fractional rate: `rate` units per `per` (e.g. 0.5 per second).
    ///
    /// The rate is stored as one unit per `per / rate`, rounded *up* to whole
    /// nanoseconds (never faster than asked); the burst is `floor(rate)`, at least 1.
    ///
    /// ```
    /// # use core::time::Duration; use sluicegate::{ConfigError, Quota};
    /// let q = Quota::from_rate(0.5, Duration::from_secs(1)).unwrap();
    /// assert_eq!((q.amount(), q.period_ns(), q.burst_size()), (1, 2_000_000_000, 1));
    /// assert_eq!(Quota::from_rate(f64::NAN, Duration::from_secs(1)), Err(ConfigError::NotFinite { field: "rate" }));
    /// assert_eq!(Quota::from_rate(-1.0, Duration::from_secs(1)), Err(ConfigError::Negative { field: "rate" }));
    /// assert_eq!(Quota::from_rate(0.0, Duration::from_secs(1)), Err(ConfigError::Zero { field: "rate" }));
    /// ```
    pub fn from_rate(rate: f64, per: Duration) -> Result<Self, ConfigError> {
        if !rate.is_finite() {
            return Err(ConfigError::NotFinite { field: "rate" });
        }
        if rate < 0.0 {
            return Err(ConfigError::Negative { field: "rate" });
        }
        if rate == 0.0 {
            return Err(ConfigError::Zero { field: "rate" });
        }
        let per_ns = per.as_nanos() as f64;
        if per_ns == 0.0 {
            return Err(ConfigError::Zero { field: "period" });
        }
        let exact = per_ns / rate;
        if exact >= u64::MAX as f64 {
            return Err(ConfigError::TooLarge {
                field: "period",
                max: u64::MAX,
            });
        }
        let interval = ceil_u64(exact);
        if interval < 1 {
            return Err(ConfigError::TooFast { field: "rate" });
        }
        // A float-to-int cast truncates, which is `floor` for a positive rate, and
        // saturates.
        let burst = (rate as u64).max(1);
        Ok(Self {
            amount: 1,
            period_ns: interval,
            burst,
        })
    }

    /// Sets the burst: how many units may be taken at once from a full limiter.
    ///
    /// ```
    /// # use sluicegate::Quota;
    /// assert_eq!(Quota::per_second(10).burst(1).burst_size(), 1);
    /// ```
    #[must_use]
    pub const fn burst(mut self, burst: u64) -> Self {
        self.burst = burst;
        self
    }

    /// Units per period.
    ///
    /// ```
    /// # use sluicegate::Quota;
    /// assert_eq!(Quota::per_hour(7).amount(), 7);
    /// ```
    pub const fn amount(&self) -> u64 {
        self.amount
    }

    /// The period.
    ///
    /// ```
    /// # use sluicegate::Quota;
    /// assert_eq!(Quota::per_second(1).period().as_secs(), 1);
    /// ```
    pub const fn period(&self) -> Duration {
        Duration::from_nanos(self.period_ns)
    }

    /// The period in nanoseconds.
    ///
    /// ```
    /// # use sluicegate::Quota;
    /// assert_eq!(Quota::per_second(1).period_ns(), 1_000_000_000);
    /// ```
    pub const fn period_ns(&self) -> u64 {
        self.period_ns
    }

    /// The burst.
    ///
    /// ```
    /// # use sluicegate::Quota;
    /// assert_eq!(Quota::per_second(3).burst(9).burst_size(), 9);
    /// ```
    pub const fn burst_size(&self) -> u64 {
        self.burst
    }

    /// The same rate written as one unit per `period / amount` (exact division
    /// only; otherwise unchanged). Useful to compare quotas.
    ///
    /// ```
    /// # use sluicegate::Quota;
    /// assert_eq!(Quota::per_second(4).normalized(), Quota::from_nanos(1, 250_000_000).burst(4));
    /// assert_eq!(Quota::per_second(3).normalized(), Quota::per_second(3));
    /// ```
    pub const fn normalized(self) -> Self {
        if self.amount > 0 && self.period_ns % self.amount == 0 {
            Self {
                amount: 1,
                period_ns: self.period_ns / self.amount,
                burst: self.burst,
            }
        } else {
            self
        }
    }

    /// Validates the fields every algorithm needs: amount and period positive.
    pub(crate) const fn check_rate(&self) -> Result<(), ConfigError> {
        if self.amount == 0 {
            return Err(ConfigError::Zero { field: "amount" });
        }
        if self.period_ns == 0 {
            return Err(ConfigError::Zero { field: "period" });
        }
        Ok(())
    }
}

/// `x.ceil()` for `0 ≤ x < 2⁶⁴`. `f64::ceil` lives in std (it needs libm), and this
/// crate builds without it.
fn ceil_u64(x: f64) -> u64 {
    // Exact: below 2⁵³ the truncated value is representable, above it `x` is
    // already an integer.
    let t = x as u64;
    if (t as f64) < x {
        t.saturating_add(1)
    } else {
        t
    }
}
