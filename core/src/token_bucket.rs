//! Token bucket in its GCRA form, and the leaky bucket meter (the same function).
//!
//! The word is the *full instant* `F`: the time at which the bucket will be full
//! again. With emission interval `T = period / amount` (rounded up to whole
//! nanoseconds, so never faster than asked) and capacity `b`, the bucket holds
//! `b − (F − now)⁺ / T` tokens at `now`, and a request of cost `n` conforms iff
//! `(F − now)⁺ + n·T ≤ b·T`; admitting it sets `F = max(F, now) + n·T`. The word `0`
//! is a full bucket at every time.
//!
//! Guarantees: over any interval of length `Δ`, admitted units ≤ `b + Δ/T`
//! (`≤ b + r·Δ/P`). A timestamp earlier than one already seen only finds fewer
//! tokens (never extra). A word that would pass `u64::MAX` nanoseconds (584 years
//! from the clock's epoch) is not stored: that request is denied.
//!
//! Reconfiguration keeps `F`: the time until the bucket is full again is carried
//! over, so a bucket that was full stays full under the new quota, and units spent
//! under the old quota still count under the new one.

use crate::decision::Decision;
use crate::error::ConfigError;
use crate::limiter::{constructors, Algorithm, Step, PARAM_WORDS};
use crate::quota::Quota;

/// Validated token-bucket parameters.
///
/// ```
/// use sluicegate::{Algorithm, Gcra, Quota};
/// let p = Gcra::params(&Quota::per_second(3).burst(6)).unwrap();
/// assert_eq!(p.emission_interval_ns(), 333_333_334); // rounded up
/// assert_eq!(p.burst(), 6);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GcraParams {
    t: u64,
    tau: u64,
    burst: u64,
}

impl GcraParams {
    /// Validates `quota`: amount, period and burst positive, at most one unit per
    /// nanosecond, and `burst × T` within `u64` nanoseconds.
    ///
    /// ```
    /// # use sluicegate::{ConfigError, GcraParams, Quota};
    /// assert!(GcraParams::new(&Quota::per_second(1)).is_ok());
    /// assert_eq!(GcraParams::new(&Quota::per_second(1).burst(0)), Err(ConfigError::Zero { field: "burst" }));
    /// assert_eq!(
    ///     GcraParams::new(&Quota::per_day(1).burst(1_000_000)),
    ///     Err(ConfigError::TooLarge { field: "burst", max: 213_503 })
    /// );
    /// assert_eq!(GcraParams::new(&Quota::from_nanos(2, 1)), Err(ConfigError::TooFast { field: "amount" }));
    /// ```
    pub const fn new(quota: &Quota) -> Result<Self, ConfigError> {
        if let Err(e) = quota.check_rate() {
            return Err(e);
        }
        let (amount, period) = (quota.amount(), quota.period_ns());
        if amount > period {
            return Err(ConfigError::TooFast { field: "amount" });
        }
        let t = period.div_ceil(amount);
        let burst = quota.burst_size();
        if burst == 0 {
            return Err(ConfigError::Zero { field: "burst" });
        }
        let tau = match burst.checked_mul(t) {
            Some(tau) => tau,
            None => {
                return Err(ConfigError::TooLarge {
                    field: "burst",
                    max: u64::MAX / t,
                })
            }
        };
        Ok(Self { t, tau, burst })
    }

    /// Nanoseconds per unit, `T`.
    ///
    /// ```
    /// # use sluicegate::{GcraParams, Quota};
    /// assert_eq!(GcraParams::new(&Quota::per_second(4)).unwrap().emission_interval_ns(), 250_000_000);
    /// ```
    pub const fn emission_interval_ns(&self) -> u64 {
        self.t
    }

    /// The bucket's capacity `b`.
    ///
    /// ```
    /// # use sluicegate::{GcraParams, Quota};
    /// assert_eq!(GcraParams::new(&Quota::per_second(4).burst(1)).unwrap().burst(), 1);
    /// ```
    pub const fn burst(&self) -> u64 {
        self.burst
    }

    /// The burst tolerance `b·T` in nanoseconds: the time a bucket takes to refill.
    ///
    /// ```
    /// # use sluicegate::{GcraParams, Quota};
    /// assert_eq!(GcraParams::new(&Quota::per_second(4)).unwrap().tolerance_ns(), 1_000_000_000);
    /// ```
    pub const fn tolerance_ns(&self) -> u64 {
        self.tau
    }

    pub(crate) const fn words(&self) -> [u64; PARAM_WORDS] {
        [self.t, self.tau, self.burst, 0]
    }

    pub(crate) const fn from_words(w: [u64; PARAM_WORDS]) -> Self {
        Self {
            t: w[0],
            tau: w[1],
            burst: w[2],
        }
    }

    /// The GCRA decision, with `slack_ns` extra tolerance (the shaper's max delay;
    /// 0 for the bucket). Returns the step and the delay before the request conforms.
    #[inline]
    pub(crate) fn decide(&self, f: u64, now: u64, n: u64, slack_ns: u64) -> Step {
        let t = self.t as u128;
        let tau = self.tau as u128;
        let base = if f > now { f } else { now };
        let debt = (base - now) as u128;
        let need = n as u128 * t;
        // The request conforms `delay` from now (0 if it conforms already).
        let delay = (debt + need).saturating_sub(tau);
        let new_f = base as u128 + need;
        if delay <= slack_ns as u128 && new_f <= u64::MAX as u128 {
            let new_debt = debt + need;
            let remaining = room(tau + slack_ns as u128, new_debt, new_f, t);
            Step {
                decision: Decision {
                    allowed: true,
                    remaining,
                    retry_after_ns: 0,
                    reset_after_ns: new_debt as u64,
                    limit: self.burst,
                },
                next: if n == 0 { None } else { Some(new_f as u64) },
                delay_ns: delay as u64,
            }
        } else {
            let remaining = room(tau + slack_ns as u128, debt, base as u128, t);
            // Past the end of time the retry is "never": saturate.
            let retry = if new_f > u64::MAX as u128 {
                u64::MAX as u128
            } else {
                delay - slack_ns as u128
            };
            Step {
                decision: Decision {
                    allowed: false,
                    remaining,
                    retry_after_ns: retry.min(u64::MAX as u128) as u64,
                    reset_after_ns: debt as u64,
                    limit: self.burst,
                },
                next: None,
                delay_ns: 0,
            }
        }
    }

    /// Gives back `n` units: `F − n·T`, less whatever time passed since the
    /// admission's base instant `next − n·T`, because units whose debt has already
    /// drained are not owed. See [`crate::compound`] for the bound.
    pub(crate) fn give_back(&self, word: u64, n: u64, next: u64, now: u64) -> u64 {
        let spent = (n as u128 * self.t as u128).min(u64::MAX as u128) as u64;
        let base = next.saturating_sub(spent);
        let drained = now.saturating_sub(base);
        let credit = spent.saturating_sub(drained);
        word.saturating_sub(credit)
    }
}

/// Units that fit in a bucket of `size` ns holding `debt` ns whose schedule clears
/// at `end`: limited by the bucket, and by the end of time (a unit whose schedule
/// would pass `u64::MAX` is denied, so it is not remaining either).
#[inline]
fn room(size: u128, debt: u128, end: u128, t: u128) -> u64 {
    // ⌊min(a, b) / t⌋ = min(⌊a / t⌋, ⌊b / t⌋): one division on the hot path.
    let ns = size.saturating_sub(debt).min(u64::MAX as u128 - end);
    (ns / t) as u64
}

/// The token bucket (GCRA) algorithm: see the [module docs](self).
///
/// ```
/// use sluicegate::{Quota, TokenBucket};
/// let tb = TokenBucket::with_clock(Quota::per_second(10).burst(2), ()).unwrap();
/// assert!(tb.check_at(0).allowed);
/// assert!(tb.check_at(0).allowed);
/// assert!(!tb.check_at(0).allowed);
/// assert!(tb.check_at(100_000_000).allowed); // one token per 100 ms
/// ```
#[derive(Clone, Copy, Debug)]
pub struct Gcra;

impl Algorithm for Gcra {
    type Params = GcraParams;
    fn params(quota: &Quota) -> Result<GcraParams, ConfigError> {
        GcraParams::new(quota)
    }
    fn to_words(p: &GcraParams) -> [u64; PARAM_WORDS] {
        p.words()
    }
    fn from_words(w: [u64; PARAM_WORDS]) -> GcraParams {
        GcraParams::from_words(w)
    }
    fn capacity(p: &GcraParams) -> u64 {
        p.burst
    }
    #[inline]
    fn decide(p: &GcraParams, word: u64, now: u64, n: u64) -> Step {
        p.decide(word, now, n, 0)
    }
    fn is_fresh(_: &GcraParams, word: u64, now: u64) -> bool {
        word <= now
    }
    /// The later of two instants at which the bucket is full again.
    fn join(_: &GcraParams, a: u64, b: u64, _now: u64) -> Option<u64> {
        Some(a.max(b))
    }
    fn give_back(p: &GcraParams, word: u64, n: u64, _prev: u64, next: u64, now: u64) -> u64 {
        p.give_back(word, n, next, now)
    }
}

/// The leaky bucket as a meter: a bucket of `capacity = quota.burst` units that
/// leaks `quota.amount` per `quota.period`; a request of `n` is admitted iff the
/// level plus `n` fits. It is exactly the token bucket seen from the other side
/// (level = capacity − tokens), offered under its own vocabulary.
///
/// ```
/// use sluicegate::{LeakyBucket, Quota};
/// // holds 5 units, leaks 1 per 200 ms
/// let lb = LeakyBucket::with_clock(Quota::per_second(5), ()).unwrap();
/// lb.check_n_at(4, 0).unwrap();
/// assert_eq!(lb.level_at(0), 4);
/// assert_eq!(lb.level_at(400_000_000), 2);
/// assert!(!lb.check_n_at(4, 400_000_000).unwrap().allowed);
/// ```
#[derive(Clone, Copy, Debug)]
pub struct Leaky;

impl Algorithm for Leaky {
    type Params = GcraParams;
    fn params(quota: &Quota) -> Result<GcraParams, ConfigError> {
        GcraParams::new(quota)
    }
    fn to_words(p: &GcraParams) -> [u64; PARAM_WORDS] {
        p.words()
    }
    fn from_words(w: [u64; PARAM_WORDS]) -> GcraParams {
        GcraParams::from_words(w)
    }
    fn capacity(p: &GcraParams) -> u64 {
        p.burst
    }
    #[inline]
    fn decide(p: &GcraParams, word: u64, now: u64, n: u64) -> Step {
        p.decide(word, now, n, 0)
    }
    fn is_fresh(_: &GcraParams, word: u64, now: u64) -> bool {
        word <= now
    }
    /// The later of two instants at which the bucket is full again.
    fn join(_: &GcraParams, a: u64, b: u64, _now: u64) -> Option<u64> {
        Some(a.max(b))
    }
    fn give_back(p: &GcraParams, word: u64, n: u64, _prev: u64, next: u64, now: u64) -> u64 {
        p.give_back(word, n, next, now)
    }
}

constructors!(Gcra, GcraParams::new, "TokenBucket");
constructors!(Leaky, GcraParams::new, "LeakyBucket");

impl<C> crate::limiter::Limiter<Leaky, C> {
    /// The bucket's level at `now`: units still in it, rounded up.
    ///
    /// ```
    /// # use sluicegate::{LeakyBucket, Quota};
    /// let lb = LeakyBucket::with_clock(Quota::per_second(10), ()).unwrap();
    /// assert_eq!(lb.level_at(0), 0);
    /// lb.check_n_at(3, 0).unwrap();
    /// assert_eq!(lb.level_at(150_000_000), 2); // 1.5 units left, rounded up
    /// ```
    pub fn level_at(&self, now: u64) -> u64 {
        let p = self.params();
        let debt = self.state_word().saturating_sub(now);
        debt.div_ceil(p.t)
    }
}
