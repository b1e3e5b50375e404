//! Sliding window counter: the current aligned window's count plus the previous
//! window's, weighted by how much of it the sliding window still covers. A request
//! of cost `n` at `elapsed = e` into the current window is admitted iff
//!
//! ```text
//! prev·(W − e) + (cur + n)·W ≤ limit·W
//! ```
//!
//! exactly, in integers: the real-valued rule `prev·(W − e)/W + cur + n ≤ limit`,
//! never rounded in the caller's favour. Equivalently, with the estimate
//! `⌈prev·(W − e)/W⌉ + cur` (rounded up), `estimate + n ≤ limit`; `remaining` is
//! `limit − estimate` after the charge, and `retry_after`/`reset_after` are the
//! first instants at which the exact rule admits the request / the estimate is 0.
//!
//! An approximation of the exact log in one word: it assumes the previous window's
//! requests were spread evenly. It never admits more than `limit` in one aligned
//! window, and at most `2·limit` in any span of one window length (the same
//! worst case as the fixed window, but only for adversarial timing). A timestamp
//! from an earlier window than the stored one is decided at the start of the stored
//! window, where the estimate is highest: no time has passed.
//!
//! # The word: whole or wrapped window index
//! The word holds the window index and both counts (`crate::word`). Whenever the
//! limit fits next to the whole index (`now / W` stored in full: e.g. up to 16,383
//! per second, 131,071 per minute, 1,048,575 per hour), that is the layout, and the
//! rules above hold for every `u64` time. A larger limit, up to
//! [`WIDE_MAX_LIMIT`] (1,048,575) per window of any length, takes the *wide*
//! layout: 20 bits per count and the index modulo `M = 2²⁴`. The distance
//! `d = (now's index − stored index) mod M` then reads as
//!
//! | `d` | read as |
//! |---|---|
//! | 0 | the same window |
//! | 1 | the next window (current count becomes the previous one) |
//! | `M − G ≤ d < M` | a window `M − d` ahead: the clock went back, decided at its start |
//! | otherwise | both windows over: empty |
//!
//! with the back band `G = clamp(⌈1 s / W⌉, 2, M/4)` windows: backwards jumps of
//! up to `G` windows (at least one second, and at least two windows) are decided
//! exactly as with a whole index.
//!
//! **A stale word is only ever more restrictive.** Let the clock move forward by
//! `D ≥ 0` windows since the word was written (the true state: the same window if
//! `D = 0`, the next if `D = 1`, empty if `D ≥ 2`), so `d = D mod M`. If `d ≥ 2`
//! and outside the back band, then `D ≥ d ≥ 2`: empty, exactly the truth. If
//! `d = 0` or `1` the word is read as the same or the next window, whose estimate
//! is at least the truth's (the truth is that window only when `D = d`, else
//! empty, estimate 0). If `d` is in the back band it is read as "no time passed"
//! at the start of its window: `prev + cur`, the largest estimate the word can
//! give, again at least the truth's. So every misreading charges *more*, never
//! less, and admits only what the exact rule on the true state admits. Such a
//! misreading lasts until `d` leaves `{0, 1}` or the back band, at most `G + 2`
//! windows, and happens only to a word idle for a gap within those windows of a
//! multiple of `M·W` (at 1 ms: `M·W` ≈ 4.7 hours, `G` = 1,000 windows).
//! A backwards jump of more than `G` windows cannot be told from a long idle and
//! is read as one (possibly as an empty window): the wide layout's one departure
//! from "no time passes", for a clock that jumps back by more than max(1 s, 2
//! windows); the whole index has none. A keyed
//! table recycles a wide word only when it reads as empty (see [`Sliding`]'s
//! `is_fresh`), which drops only the spurious restriction, and folds an evicted
//! key's word into its sketch by reading both words at `now` (`join`).
//!
//! Reconfiguration keeps both counts and applies the new limit, up to the layout's
//! [`SlidingParams::max_limit`] (chosen at construction); the window length is
//! fixed at construction.

use crate::decision::Decision;
use crate::error::ConfigError;
use crate::fixed_window::until;
use crate::limiter::{Algorithm, PARAM_WORDS, Step, constructors};
use crate::quota::Quota;
use crate::word::Layout;

/// The largest limit of the wide layout (20 bits per count), for windows of any
/// length; windows over 2⁴² ns (73 minutes) hold more with the whole index.
///
/// ```
/// use sluicegate::{sliding_window::WIDE_MAX_LIMIT, Quota, SlidingWindow};
/// assert_eq!(WIDE_MAX_LIMIT, 1_048_575);
/// let ms = SlidingWindow::with_clock(Quota::from_nanos(1_000_000, 1_000_000), ()).unwrap();
/// assert!(ms.check_n_at(1_000_000, 0).unwrap().allowed);
/// ```
pub const WIDE_MAX_LIMIT: u64 = (1 << WIDE_COUNT_BITS) - 1;
const WIDE_COUNT_BITS: u32 = 20;
/// `M`: the wide layout stores the window index modulo `2^(64 − 2·20)`.
const WIDE_MODULUS: u64 = 1 << (64 - 2 * WIDE_COUNT_BITS);
/// The back band is at least one second's worth of windows.
const BACK_NS: u64 = 1_000_000_000;

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
    /// `G` in windows for the wide layout; 0 for the whole index.
    back_band: u64,
}

impl SlidingParams {
    /// `quota.amount` per sliding window of `quota.period`. The layout is the whole
    /// index when the limit fits next to it, else the wide one (see the
    /// [module docs](self)).
    ///
    /// ```
    /// # use sluicegate::{ConfigError, Quota, SlidingParams};
    /// assert_eq!(SlidingParams::new(&Quota::per_second(20_000)).unwrap().max_limit(), 1_048_575);
    /// assert_eq!(
    ///     SlidingParams::new(&Quota::per_second(2_000_000)),
    ///     Err(ConfigError::TooLarge { field: "limit", max: 1_048_575 })
    /// );
    /// ```
    pub const fn new(quota: &Quota) -> Result<Self, ConfigError> {
        let (window_ns, limit) = (quota.period_ns(), quota.amount());
        if window_ns == 0 {
            return Err(ConfigError::Zero { field: "window" });
        }
        if limit == 0 {
            return Err(ConfigError::Zero { field: "limit" });
        }
        // The whole index, whenever the limit fits next to it.
        if let Ok(layout) = Layout::new(window_ns, 2) {
            if limit <= layout.max_count() {
                return Ok(Self {
                    window_ns,
                    limit,
                    layout,
                    back_band: 0,
                });
            }
            if layout.max_count() >= WIDE_MAX_LIMIT {
                return Err(ConfigError::TooLarge {
                    field: "limit",
                    max: layout.max_count(),
                });
            }
        }
        if limit > WIDE_MAX_LIMIT {
            return Err(ConfigError::TooLarge {
                field: "limit",
                max: WIDE_MAX_LIMIT,
            });
        }
        let g = BACK_NS.div_ceil(window_ns);
        let back_band = if g < 2 {
            2
        } else if g > WIDE_MODULUS / 4 {
            WIDE_MODULUS / 4
        } else {
            g
        };
        Ok(Self {
            window_ns,
            limit,
            layout: Layout {
                count_bits: WIDE_COUNT_BITS,
                counts: 2,
            },
            back_band,
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

    /// The largest limit of this limiter's layout: what [`Self::limit`] may be
    /// reconfigured to at runtime. The layout is chosen at construction: the whole
    /// index when the limit fits next to it, else the wide one ([`WIDE_MAX_LIMIT`]).
    ///
    /// ```
    /// # use sluicegate::{Quota, SlidingParams};
    /// assert_eq!(SlidingParams::new(&Quota::per_hour(9)).unwrap().max_limit(), 1_048_575);
    /// assert_eq!(SlidingParams::new(&Quota::per_second(9)).unwrap().max_limit(), 16_383);
    /// assert_eq!(SlidingParams::new(&Quota::per_second(16_384)).unwrap().max_limit(), 1_048_575);
    /// ```
    pub const fn max_limit(&self) -> u64 {
        self.layout.max_count()
    }

    /// Whether the window index is stored modulo `2²⁴` (the wide layout).
    ///
    /// ```
    /// # use sluicegate::{Quota, SlidingParams};
    /// assert!(!SlidingParams::new(&Quota::per_second(16_383)).unwrap().wraps());
    /// assert!(SlidingParams::new(&Quota::per_second(16_384)).unwrap().wraps());
    /// ```
    pub const fn wraps(&self) -> bool {
        self.back_band != 0
    }

    pub(crate) const fn words(&self) -> [u64; PARAM_WORDS] {
        [
            self.window_ns,
            self.limit,
            self.layout.count_bits as u64,
            self.back_band,
        ]
    }

    /// The index stored after `index` (modulo `M` in the wide layout).
    #[inline]
    fn next_index(&self, index: u64) -> u64 {
        if self.wraps() {
            index.wrapping_add(1) & (WIDE_MODULUS - 1)
        } else {
            index.saturating_add(1)
        }
    }

    /// How a stored index reads at `now_index` (see the [module docs](self)).
    #[inline]
    fn read(&self, stored: u64, now_index: u64) -> Read {
        if !self.wraps() {
            return match now_index.checked_sub(stored) {
                Some(0) => Read::Same,
                Some(1) => Read::Next,
                Some(_) => Read::Empty,
                None => Read::Ahead(stored),
            };
        }
        match now_index.wrapping_sub(stored) & (WIDE_MODULUS - 1) {
            0 => Read::Same,
            1 => Read::Next,
            d if d >= WIDE_MODULUS - self.back_band => {
                Read::Ahead(now_index.saturating_add(WIDE_MODULUS - d))
            }
            _ => Read::Empty,
        }
    }
}

/// What a stored window index means at the current one.
enum Read {
    Same,
    Next,
    Empty,
    /// The clock went back: the stored window (its whole index) is ahead of now.
    Ahead(u64),
}

/// The window the word is decided in, after rolling it forward to `now`.
struct View {
    /// The whole index of that window.
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
        let into = now - now_index * p.window_ns;
        let (index, prev, cur, elapsed) = if cur == 0 && prev == 0 {
            (now_index, 0, 0, into)
        } else {
            match p.read(stored, now_index) {
                Read::Same => (now_index, prev, cur, into),
                Read::Next => (now_index, cur, 0, into),
                Read::Empty => (now_index, 0, 0, into),
                Read::Ahead(index) => (index, prev, cur, 0),
            }
        };
        Self {
            index,
            prev,
            cur,
            elapsed,
        }
    }

    /// `⌈prev·(W − elapsed)/W⌉ + cur`: admitting `n` is `estimate + n ≤ limit`,
    /// which is exactly `prev·(W − e) + (cur + n)·W ≤ limit·W` (all integers).
    #[inline]
    fn estimate(&self, w: u64) -> u64 {
        let left = w - self.elapsed;
        // 64 bits hold the product unless prev · W ≥ 2⁶⁴ (e.g. a count of 10⁶ in a
        // window over ~5 hours); only then the 128-bit division.
        let weighted = match self.prev.checked_mul(left) {
            Some(p) => p.div_ceil(w),
            None => (self.prev as u128 * left as u128).div_ceil(w as u128) as u64,
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
            Some(w.saturating_sub(k.checked_mul(w)? / count))
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
        // Smallest elapsed e with ⌈count·(W − e)/W⌉ ≤ k, i.e. count·(W − e) ≤ k·W.
        let earliest = |count: u64, k: u64| -> u128 {
            if count == 0 {
                return 0; // an empty window weighs nothing at any elapsed time
            }
            w128.saturating_sub(k as u128 * w128 / count as u128)
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
/// // 250 ms into window 1, 75% of window 0 still counts: 7.5 units
/// assert_eq!(w.peek_n_at(2, 1_250_000_000).unwrap().allowed, true);
/// assert_eq!(w.peek_n_at(3, 1_250_000_000).unwrap().allowed, false); // 10.5 > 10
/// assert_eq!(w.peek_n_at(3, 1_300_000_000).unwrap().allowed, true); // 7 + 3
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
        // The word keeps its layout: any limit up to the layout's maximum.
        match quota.amount() {
            0 => Err(ConfigError::Zero { field: "limit" }),
            limit if limit > old.max_limit() => Err(ConfigError::TooLarge {
                field: "limit",
                max: old.max_limit(),
            }),
            limit => Ok(SlidingParams { limit, ..*old }),
        }
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
            back_band: w[3],
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

    /// Empty counts, or a word that reads as empty at `now`. With the whole index
    /// that is for good. A wide word that reads as empty may read as the same,
    /// the next or a later window again after a multiple of `M` windows, but only
    /// as the spurious, more restrictive misreading the module docs describe:
    /// recycling it drops nothing the exact rule needs.
    fn is_fresh(p: &SlidingParams, word: u64, now: u64) -> bool {
        let (index, cur, prev) = p.layout.unpack(word);
        (cur == 0 && prev == 0) || matches!(p.read(index, now / p.window_ns), Read::Empty)
    }

    /// Both words are read at `now` (`View`, never by raw index: a wide word's
    /// index wraps) and put in the later of their two windows. In one window, the
    /// larger of each count. In two (a word written after the clock went back
    /// reads as a window ahead), the earlier word's both counts become previous
    /// count of the later window: they then weigh fully until the later window
    /// starts and then decay no slower than before. Each unit's weight at a time
    /// only grows with its window, so every future estimate of the join is at
    /// least both words' (counts saturate at the layout's maximum, which denies
    /// everything under any limit). A wide word's wrap-around misreading long
    /// after `now` is spurious (module docs) and not kept, as `is_fresh` does.
    fn join(p: &SlidingParams, a: u64, b: u64, now: u64) -> Option<u64> {
        let (va, vb) = (View::new(p, a, now), View::new(p, b, now));
        let (hi, lo) = if va.index >= vb.index {
            (va, vb)
        } else {
            (vb, va)
        };
        let (prev, cur) = if hi.index == lo.index {
            (hi.prev.max(lo.prev), hi.cur.max(lo.cur))
        } else {
            let lo_all = lo.prev.saturating_add(lo.cur).min(p.max_limit());
            (hi.prev.max(lo_all), hi.cur)
        };
        Some(p.layout.pack(hi.index, cur, prev))
    }

    fn give_back(p: &SlidingParams, word: u64, n: u64, _prev: u64, next: u64, _now: u64) -> u64 {
        let (index, cur, prev) = p.layout.unpack(word);
        let ours = p.layout.unpack(next).0;
        if index == ours {
            p.layout.pack(index, cur.saturating_sub(n), prev)
        } else if index == p.next_index(ours) {
            p.layout.pack(index, cur, prev.saturating_sub(n))
        } else {
            word
        }
    }
}

constructors!(Sliding, SlidingParams::new, "SlidingWindow");
