//! Sliding window counter: the current aligned window's count plus the previous
//! window's, weighted by how much of it the sliding window still covers:
//! `estimate = ⌊prev · (W − elapsed) / W⌋ + cur`; a request of cost `n` is admitted
//! iff `estimate + n ≤ limit`.
//!
//! An approximation of the exact log in one word: it assumes the previous window's
//! requests were spread evenly. It never admits more than `limit` in one aligned
//! window, and at most `2·limit` in any span of one window length (the same
//! worst case as the fixed window, but only for adversarial timing). The word holds
//! the window index and both counts ([`crate::word`]). A timestamp from an earlier
//! window than the stored one is decided at the start of the stored window, where
//! the estimate is highest: no time has passed.
//!
//! Reconfiguration keeps both counts and applies the new limit; the window length
//! is fixed at construction.

use crate::decision::Decision;
use crate::error::ConfigError;
use crate::fixed_window::until;
use crate::limiter::{constructors, Algorithm, Step, PARAM_WORDS};
use crate::quota::Quota;
use crate::word::{check_limit, Layout};

/// Validated sliding-window parameters.
///
/// ```
/// use sluicegate::{Quota, SlidingParams};
/// let p = SlidingParams::new(&Quota::per_minute(100)).unwrap();
/// assert_eq!((p.limit(), p.max_limit()), (100, 131_071));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SlidingParams {
    window_ns: u64,
    limit: u64,
    layout: Layout,
}

impl SlidingParams {
    /// `quota.amount` per sliding window of `quota.period`.
    ///
    /// ```
    /// # use sluicegate::{ConfigError, Quota, SlidingParams};
    /// assert_eq!(
    ///     SlidingParams::new(&Quota::per_second(20_000)),
    ///     Err(ConfigError::TooLarge { field: "limit", max: 16_383 })
    /// );
    /// ```
    pub const fn new(quota: &Quota) -> Result<Self, ConfigError> {
        let layout = match Layout::new(quota.period_ns(), 2) {
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
    /// # use sluicegate::{Quota, SlidingParams};
    /// assert_eq!(SlidingParams::new(&Quota::per_second(9)).unwrap().limit(), 9);
    /// ```
    pub const fn limit(&self) -> u64 {
        self.limit
    }

    /// The window length in nanoseconds.
    ///
    /// ```
    /// # use sluicegate::{Quota, SlidingParams};
    /// assert_eq!(SlidingParams::new(&Quota::per_second(9)).unwrap().window_ns(), 1_000_000_000);
    /// ```
    pub const fn window_ns(&self) -> u64 {
        self.window_ns
    }

    /// The largest limit this window length supports (also at runtime).
    ///
    /// ```
    /// # use sluicegate::{Quota, SlidingParams};
    /// assert_eq!(SlidingParams::new(&Quota::per_hour(9)).unwrap().max_limit(), 1_048_575);
    /// ```
    pub const fn max_limit(&self) -> u64 {
        self.layout.max_count()
    }

    pub(crate) const fn words(&self) -> [u64; PARAM_WORDS] {
        [self.window_ns, self.limit, self.layout.count_bits as u64, 0]
    }
}

/// The window the word is decided in, after rolling it forward to `now`.
struct View {
    index: u64,
    prev: u64,
    cur: u64,
    /// Nanoseconds into the window (0 when the clock went back).
    elapsed: u64,
}

impl View {
    #[inline]
    fn new(p: &SlidingParams, word: u64, now: u64) -> Self {
        let (stored, cur, prev) = p.layout.unpack(word);
        let now_index = now / p.window_ns;
        let (index, prev, cur) = if (cur == 0 && prev == 0) || now_index > stored.saturating_add(1)
        {
            (now_index, 0, 0)
        } else if now_index == stored + 1 {
            (now_index, cur, 0)
        } else {
            (stored, prev, cur)
        };
        let elapsed = if index == now_index {
            now - index * p.window_ns
        } else {
            0
        };
        Self {
            index,
            prev,
            cur,
            elapsed,
        }
    }

    #[inline]
    fn estimate(&self, w: u64) -> u64 {
        let left = w - self.elapsed;
        // 64 bits hold the product unless prev · W ≥ 2⁶⁴ (e.g. a count of 10⁶ in a
        // window over ~5 hours); only then the 128-bit division.
        let weighted = match self.prev.checked_mul(left) {
            Some(p) => p / w,
            None => ((self.prev as u128 * left as u128) / w as u128) as u64,
        };
        weighted + self.cur
    }

    /// Nanoseconds from `now` until the estimate is at most `x`.
    #[inline]
    fn until_at_most(&self, w: u64, x: u64, now: u64) -> u64 {
        match self.until_at_most_u64(w, x, now) {
            Some(t) => t,
            None => self.until_at_most_wide(w, x, now),
        }
    }

    /// [`Self::until_at_most`] in 64-bit arithmetic; `None` where a product or a
    /// sum would overflow (the same formula as the 128-bit form, term by term).
    #[inline]
    fn until_at_most_u64(&self, w: u64, x: u64, now: u64) -> Option<u64> {
        let start = self.index.checked_mul(w)?;
        let earliest = |count: u64, k: u64| -> Option<u64> {
            if count == 0 {
                return Some(0);
            }
            // (k + 1)·W ≥ W ≥ 1: the subtraction cannot underflow.
            let bound = (k.checked_add(1)?.checked_mul(w)? - 1) / count;
            Some(w.saturating_sub(bound))
        };
        let at = if self.cur > x {
            start.checked_add(w)?.checked_add(earliest(self.cur, x)?)?
        } else {
            let e = earliest(self.prev, x - self.cur)?.max(self.elapsed);
            start.checked_add(e)?
        };
        Some(at.saturating_sub(now))
    }

    /// [`Self::until_at_most`] in 128-bit arithmetic (never overflows).
    #[cold]
    fn until_at_most_wide(&self, w: u64, x: u64, now: u64) -> u64 {
        let (w128, start) = (w as u128, self.index as u128 * w as u128);
        // Smallest elapsed e with ⌊count·(W − e)/W⌋ ≤ k, i.e. count·(W − e) < (k + 1)·W.
        let earliest = |count: u64, k: u64| -> u128 {
            if count == 0 {
                return 0; // an empty window weighs nothing at any elapsed time
            }
            let bound = ((k as u128 + 1) * w128 - 1) / count as u128;
            w128.saturating_sub(bound)
        };
        if self.cur > x {
            // Only once this window's count has become the previous one.
            until(start + w128 + earliest(self.cur, x), now)
        } else {
            let k = x - self.cur;
            let e = earliest(self.prev, k).max(self.elapsed as u128);
            until(start + e, now)
        }
    }
}

/// The sliding-window-counter algorithm (see the [module docs](self)).
///
/// ```
/// use sluicegate::{Quota, SlidingWindow};
/// let w = SlidingWindow::with_clock(Quota::per_second(10), ()).unwrap();
/// w.check_n_at(10, 500_000_000).unwrap();      // 10 in window 0
/// // 250 ms into window 1, 75% of window 0 still counts: 7 units
/// assert_eq!(w.peek_n_at(3, 1_250_000_000).unwrap().allowed, true);
/// assert_eq!(w.peek_n_at(4, 1_250_000_000).unwrap().allowed, false);
/// ```
#[derive(Clone, Copy, Debug)]
pub struct Sliding;

impl Algorithm for Sliding {
    type Params = SlidingParams;
    fn params(quota: &Quota) -> Result<SlidingParams, ConfigError> {
        SlidingParams::new(quota)
    }
    fn reparams(old: &SlidingParams, quota: &Quota) -> Result<SlidingParams, ConfigError> {
        if quota.period_ns() != old.window_ns {
            return Err(ConfigError::Immutable { field: "window" });
        }
        SlidingParams::new(quota)
    }
    fn to_words(p: &SlidingParams) -> [u64; PARAM_WORDS] {
        p.words()
    }
    fn from_words(w: [u64; PARAM_WORDS]) -> SlidingParams {
        SlidingParams {
            window_ns: w[0],
            limit: w[1],
            layout: Layout {
                count_bits: w[2] as u32,
                counts: 2,
            },
        }
    }
    fn capacity(p: &SlidingParams) -> u64 {
        p.limit
    }

    #[inline]
    fn decide(p: &SlidingParams, word: u64, now: u64, n: u64) -> Step {
        let w = p.window_ns;
        let mut v = View::new(p, word, now);
        let estimate = v.estimate(w);
        if estimate + n <= p.limit {
            v.cur += n;
            Step {
                decision: Decision {
                    allowed: true,
                    remaining: p.limit - (estimate + n),
                    retry_after_ns: 0,
                    reset_after_ns: v.until_at_most(w, 0, now),
                    limit: p.limit,
                },
                next: if n == 0 {
                    None
                } else {
                    Some(p.layout.pack(v.index, v.cur, v.prev))
                },
                delay_ns: 0,
            }
        } else {
            Step {
                decision: Decision {
                    allowed: false,
                    remaining: p.limit.saturating_sub(estimate),
                    retry_after_ns: v.until_at_most(w, p.limit - n, now),
                    reset_after_ns: v.until_at_most(w, 0, now),
                    limit: p.limit,
                },
                next: None,
                delay_ns: 0,
            }
        }
    }

    fn is_fresh(p: &SlidingParams, word: u64, now: u64) -> bool {
        let (index, cur, prev) = p.layout.unpack(word);
        (cur == 0 && prev == 0) || now / p.window_ns > index.saturating_add(1)
    }

    fn give_back(p: &SlidingParams, word: u64, n: u64, _prev: u64, next: u64, _now: u64) -> u64 {
        let (index, cur, prev) = p.layout.unpack(word);
        let ours = p.layout.unpack(next).0;
        if index == ours {
            p.layout.pack(index, cur.saturating_sub(n), prev)
        } else if index == ours.saturating_add(1) {
            p.layout.pack(index, cur, prev.saturating_sub(n))
        } else {
            word
        }
    }
}

constructors!(Sliding, SlidingParams::new, "SlidingWindow");
