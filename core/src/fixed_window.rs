//! Fixed window: at most `limit` units per window, windows aligned to multiples of
//! the window length (`[k·W, (k+1)·W)`), so every process agrees where they start.
//!
//! The word is the window index and its count (layout in `crate::word`). A
//! request of cost `n` is admitted iff `count + n ≤ limit` in the current window.
//! A timestamp from an earlier window than the stored one (the clock went back) is
//! decided in the stored window: no time has passed. Guarantee: per aligned window,
//! admitted ≤ limit. (Two adjacent windows can together admit `2·limit` in a span
//! of one window; use the sliding window or log if that matters.)
//!
//! Reconfiguration keeps the count of the current window and applies the new
//! limit to it; the window length is fixed at construction.

use crate::decision::Decision;
use crate::error::ConfigError;
use crate::limiter::{Algorithm, PARAM_WORDS, Step, constructors};
use crate::quota::Quota;
use crate::word::{Layout, check_limit};

/// Validated fixed-window parameters.
///
/// ```
/// use sluicegate::{FixedParams, Quota};
/// let p = FixedParams::new(&Quota::per_minute(100)).unwrap();
/// assert_eq!((p.limit(), p.window_ns()), (100, 60_000_000_000));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FixedParams {
    window_ns: u64,
    limit: u64,
    layout: Layout,
}

impl FixedParams {
    /// `quota.amount` per window of `quota.period`; the burst is not used.
    ///
    /// ```
    /// # use sluicegate::{ConfigError, FixedParams, Quota};
    /// assert_eq!(FixedParams::new(&Quota::per_second(0)), Err(ConfigError::Zero { field: "limit" }));
    /// assert_eq!(
    ///     FixedParams::new(&Quota::per_second(1 << 30)),
    ///     Err(ConfigError::TooLarge { field: "limit", max: 536_870_911 })
    /// );
    /// ```
    pub const fn new(quota: &Quota) -> Result<Self, ConfigError> {
        let layout = match Layout::new(quota.period_ns(), 1) {
            Ok(l) => l,
            Err(e) => return Err(e),
        };
        if let Err(e) = check_limit(quota.amount(), &layout) {
            return Err(e);
        }
        Ok(Self {
            window_ns: quota.period_ns(),
            limit: quota.amount(),
            layout,
        })
    }

    /// The limit per window.
    ///
    /// ```
    /// # use sluicegate::{FixedParams, Quota};
    /// assert_eq!(FixedParams::new(&Quota::per_second(9)).unwrap().limit(), 9);
    /// ```
    pub const fn limit(&self) -> u64 {
        self.limit
    }

    /// The window length in nanoseconds.
    ///
    /// ```
    /// # use sluicegate::{FixedParams, Quota};
    /// assert_eq!(FixedParams::new(&Quota::per_second(9)).unwrap().window_ns(), 1_000_000_000);
    /// ```
    pub const fn window_ns(&self) -> u64 {
        self.window_ns
    }

    /// The largest limit this window length supports (also at runtime).
    ///
    /// ```
    /// # use sluicegate::{FixedParams, Quota};
    /// assert_eq!(FixedParams::new(&Quota::per_second(9)).unwrap().max_limit(), 536_870_911);
    /// ```
    pub const fn max_limit(&self) -> u64 {
        self.layout.max_count()
    }

    pub(crate) const fn words(&self) -> [u64; PARAM_WORDS] {
        [self.window_ns, self.limit, self.layout.count_bits as u64, 0]
    }
}

/// Nanoseconds from `now` to `at`, saturating into `u64`.
#[inline]
pub(crate) fn until(at: u128, now: u64) -> u64 {
    at.saturating_sub(now as u128).min(u64::MAX as u128) as u64
}

/// The fixed-window algorithm (see the [module docs](self)).
///
/// ```
/// use sluicegate::{FixedWindow, Quota};
/// let w = FixedWindow::with_clock(Quota::per_second(2), ()).unwrap();
/// assert!(w.check_at(999_999_999).allowed);
/// assert!(w.check_at(999_999_999).allowed);
/// assert!(!w.check_at(999_999_999).allowed);
/// assert!(w.check_at(1_000_000_000).allowed); // a new window
/// ```
#[derive(Clone, Copy, Debug)]
pub struct Fixed;

impl Algorithm for Fixed {
    type Params = FixedParams;
    fn params(quota: &Quota) -> Result<FixedParams, ConfigError> {
        FixedParams::new(quota)
    }
    fn reparams(old: &FixedParams, quota: &Quota) -> Result<FixedParams, ConfigError> {
        if quota.period_ns() != old.window_ns {
            return Err(ConfigError::Immutable { field: "window" });
        }
        FixedParams::new(quota)
    }
    fn to_words(p: &FixedParams) -> [u64; PARAM_WORDS] {
        p.words()
    }
    fn from_words(w: [u64; PARAM_WORDS]) -> FixedParams {
        FixedParams {
            window_ns: w[0],
            limit: w[1],
            layout: Layout {
                count_bits: w[2] as u32,
                counts: 1,
            },
        }
    }
    fn capacity(p: &FixedParams) -> u64 {
        p.limit
    }

    #[inline]
    fn decide(p: &FixedParams, word: u64, now: u64, n: u64) -> Step {
        let (stored, count, _) = p.layout.unpack(word);
        let now_index = now / p.window_ns;
        let (index, count) = if count == 0 || now_index > stored {
            (now_index, 0)
        } else {
            (stored, count)
        };
        let to_end = until((index as u128 + 1) * p.window_ns as u128, now);
        if count + n <= p.limit {
            let after = count + n;
            Step {
                decision: Decision {
                    allowed: true,
                    remaining: p.limit - after,
                    retry_after_ns: 0,
                    reset_after_ns: if after > 0 { to_end } else { 0 },
                    limit: p.limit,
                },
                next: if n == 0 {
                    None
                } else {
                    Some(p.layout.pack(index, after, 0))
                },
                delay_ns: 0,
            }
        } else {
            Step {
                decision: Decision {
                    allowed: false,
                    remaining: p.limit.saturating_sub(count),
                    retry_after_ns: to_end,
                    reset_after_ns: to_end,
                    limit: p.limit,
                },
                next: None,
                delay_ns: 0,
            }
        }
    }

    fn is_fresh(p: &FixedParams, word: u64, now: u64) -> bool {
        let (index, count, _) = p.layout.unpack(word);
        count == 0 || now / p.window_ns > index
    }

    /// The later window with the larger count: in the earlier window it counts at
    /// least as much (a word of a later window is read as the current one), in the
    /// later one too, and both are fresh after it.
    fn join(p: &FixedParams, a: u64, b: u64, now: u64) -> Option<u64> {
        if Self::is_fresh(p, a, now) {
            return Some(b);
        }
        if Self::is_fresh(p, b, now) {
            return Some(a);
        }
        let ((ia, ca, _), (ib, cb, _)) = (p.layout.unpack(a), p.layout.unpack(b));
        Some(p.layout.pack(ia.max(ib), ca.max(cb), 0))
    }

    fn give_back(p: &FixedParams, word: u64, n: u64, _prev: u64, next: u64, _now: u64) -> u64 {
        let (index, count, _) = p.layout.unpack(word);
        if index == p.layout.unpack(next).0 {
            p.layout.pack(index, count.saturating_sub(n), 0)
        } else {
            word // that window is over: the admission no longer counts anyway
        }
    }
}

constructors!(Fixed, FixedParams::new, "FixedWindow");
