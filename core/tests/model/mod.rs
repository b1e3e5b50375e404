//! Exact reference models of every algorithm, and the traffic the property tests
//! drive through them.
//!
//! The models are written from the module docs, not from the implementation: each
//! one keeps its state in the most literal form (a fluid bucket level, a window
//! count, a list of timestamps) with 128-bit arithmetic, answers only "would a
//! request of `n` be admitted at `t`?" and "is it back to full at `t`?", and derives
//! every other field of a [`Decision`] from those two questions by search:
//! `remaining` is the largest cost that would be admitted right after the decision,
//! `retry_after` the first instant the same request would be admitted, `reset_after`
//! the first instant the limiter is full again (binary search over time, valid
//! because every model only gets better as time passes without admissions).
//!
//! Shared by the test files through `mod model;`; not every file uses every item.
#![allow(dead_code)]

use std::collections::VecDeque;

use proptest::prelude::*;
use sluicegate::{
    Algorithm, ConfigError, Decision, InsufficientCapacity, Limiter, Quota, SlidingLog,
};

/// A wait that ends after the last representable instant.
pub const NEVER: u64 = u64::MAX;

const MAX: u128 = u64::MAX as u128;

/// Proptest settings: `cases` normally, a handful under miri (which also cannot
/// touch the file system, so failures are not persisted there).
pub fn config(cases: u32) -> ProptestConfig {
    ProptestConfig {
        cases: if cfg!(miri) { 2 } else { cases },
        failure_persistence: None,
        max_shrink_iters: if cfg!(miri) { 0 } else { 4096 },
        ..ProptestConfig::default()
    }
}

/// The longest traces: short under miri.
pub fn trace_len() -> core::ops::Range<usize> {
    if cfg!(miri) { 1..10 } else { 1..64 }
}

// ---------------------------------------------------------------------------------
// Searches
// ---------------------------------------------------------------------------------

/// The first instant in `[from, u64::MAX]` where `pred` holds, for a `pred` that,
/// once true, stays true; `None` if it never does.
pub fn first_time(from: u64, pred: impl Fn(u64) -> bool) -> Option<u64> {
    first_time_in(from, u64::MAX, pred)
}

/// [`first_time`] over `[from, to]`.
pub fn first_time_in(from: u64, to: u64, pred: impl Fn(u64) -> bool) -> Option<u64> {
    if pred(from) {
        return Some(from);
    }
    if to <= from || !pred(to) {
        return None;
    }
    let (mut lo, mut hi) = (from, to); // pred(lo) false, pred(hi) true
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        if pred(mid) {
            hi = mid;
        } else {
            lo = mid;
        }
    }
    Some(hi)
}

/// The largest `k` in `[0, cap]` where `pred` holds, for a `pred` that, once false,
/// stays false; 0 if it never holds.
pub fn largest(cap: u64, pred: impl Fn(u64) -> bool) -> u64 {
    if !pred(0) {
        return 0;
    }
    if pred(cap) {
        return cap;
    }
    let (mut lo, mut hi) = (0, cap); // pred(lo) true, pred(hi) false
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        if pred(mid) {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    lo
}

/// Nanoseconds from `from` to `at`, or [`NEVER`].
pub fn wait(from: u64, at: Option<u64>) -> u64 {
    at.map_or(NEVER, |t| t - from)
}

/// Every wait that would end past the last instant means the same thing: never.
pub fn normalize(now: u64, mut d: Decision) -> Decision {
    for w in [&mut d.retry_after_ns, &mut d.reset_after_ns] {
        if now as u128 + *w as u128 > MAX {
            *w = NEVER;
        }
    }
    d
}

/// Normalizes an answer for comparison.
pub fn norm(
    now: u64,
    r: Result<Decision, InsufficientCapacity>,
) -> Result<Decision, InsufficientCapacity> {
    r.map(|d| normalize(now, d))
}

// ---------------------------------------------------------------------------------
// The model interface
// ---------------------------------------------------------------------------------

/// A reference model: two questions, from which [`Model::decide`] derives a decision.
pub trait Model: Clone + core::fmt::Debug {
    /// The largest cost ever admitted at once.
    fn capacity(&self) -> u64;
    /// What `Decision::limit` reports.
    fn limit(&self) -> u64;
    /// Whether a request of `n` at `t` would be admitted.
    fn admits(&self, t: u64, n: u64) -> bool;
    /// Charges an admitted request of `n > 0` at `t`.
    fn commit(&mut self, t: u64, n: u64);
    /// Whether the limiter is back to its fresh, full state at `t`.
    fn is_full(&self, t: u64) -> bool;
    /// The last instant up to which the searches below look: every model only
    /// gets better as time passes without admissions, up to this instant.
    fn horizon(&self, t: u64) -> u64 {
        let _ = t;
        u64::MAX
    }
    /// The first instant `≥ t` at which a request of `n` would be admitted.
    fn earliest(&self, t: u64, n: u64) -> Option<u64> {
        first_time_in(t, self.horizon(t), |x| self.admits(x, n))
    }

    /// The decision for a request of `n` at `t`, charging it when `consume`.
    fn decide(&mut self, t: u64, n: u64, consume: bool) -> Result<Decision, InsufficientCapacity> {
        let capacity = self.capacity();
        if n > capacity {
            return Err(InsufficientCapacity {
                requested: n,
                capacity,
            });
        }
        let allowed = self.admits(t, n);
        let mut after = self.clone();
        if allowed && n > 0 {
            after.commit(t, n);
        }
        let remaining = largest(capacity, |k| after.admits(t, k));
        let retry_after_ns = if allowed {
            0
        } else {
            wait(t, self.earliest(t, n))
        };
        let reset_after_ns = wait(t, first_time_in(t, after.horizon(t), |x| after.is_full(x)));
        let limit = self.limit();
        if consume {
            *self = after;
        }
        Ok(Decision {
            allowed,
            remaining,
            retry_after_ns,
            reset_after_ns,
            limit,
        })
    }
}

// ---------------------------------------------------------------------------------
// Token bucket, leaky meter, shaper: one fluid bucket
// ---------------------------------------------------------------------------------

/// The bucket as a fluid, measured in nanoseconds of draining: a unit pours in
/// `T` ns of fluid, the bucket drains 1 ns per ns, and holds `b·T` (tokens scaled by
/// `T`, so refill is exact in integers). `T = ⌈period / amount⌉`, the effective
/// quota the implementation runs (it rounds the emission interval up).
///
/// The level is remembered as of the last admission, `(s, level)`. At `t ≥ s` it has
/// drained by `t − s` (not below empty); at `t < s` — a timestamp from before the
/// last admission — the draining between `t` and `s` has not happened yet, so the
/// level is `level + (s − t)`: the documented rule that an earlier timestamp only
/// finds fewer tokens, never more. Reconfiguration keeps the level in nanoseconds
/// (the documented "time until full is carried over").
///
/// With `slack` (the shaper's max delay) a request is granted when its scheduled
/// start — the first instant the bucket has room for it — is at most `slack` away.
/// Time stops at the horizon `u64::MAX − min(b·T + slack, 2⁶³)`: a later `t` is
/// decided at the horizon (documented), so a fresh bucket is full at every instant;
/// a bucket whose full instant would still pass `u64::MAX` denies.
#[derive(Clone, Debug)]
pub struct Bucket {
    /// Emission interval `T` in ns.
    pub t: u64,
    /// Capacity `b` in units.
    pub burst: u64,
    /// Longest granted delay (0 for the bucket and meter).
    pub slack: u64,
    last: Option<(u64, u128)>,
}

impl Bucket {
    /// Validates a quota by the documented rules.
    pub fn new(q: &Quota) -> Result<Self, ConfigError> {
        Self::shaper(q, 0)
    }

    /// A shaper model granting delays up to `slack` ns.
    pub fn shaper(q: &Quota, slack: u64) -> Result<Self, ConfigError> {
        let (t, burst) = Self::validate(q)?;
        Ok(Self {
            t,
            burst,
            slack,
            last: None,
        })
    }

    fn validate(q: &Quota) -> Result<(u64, u64), ConfigError> {
        let (amount, period, burst) = (q.amount() as u128, q.period_ns() as u128, q.burst_size());
        if amount == 0 {
            return Err(ConfigError::Zero { field: "amount" });
        }
        if period == 0 {
            return Err(ConfigError::Zero { field: "period" });
        }
        if amount > period {
            return Err(ConfigError::TooFast { field: "amount" });
        }
        let t = period.div_ceil(amount) as u64;
        if burst == 0 {
            return Err(ConfigError::Zero { field: "burst" });
        }
        // The largest burst whose refill time b·T fits in u64 nanoseconds.
        let max = (MAX / t as u128) as u64;
        if burst > max {
            return Err(ConfigError::TooLarge {
                field: "burst",
                max,
            });
        }
        Ok((t, burst))
    }

    /// Applies a new quota, keeping the level (the time until full).
    pub fn reconfigure(&mut self, q: &Quota) -> Result<(), ConfigError> {
        let (t, burst) = Self::validate(q)?;
        self.t = t;
        self.burst = burst;
        Ok(())
    }

    /// The documented horizon: time stops at `u64::MAX − min(b·T + slack, 2⁶³)`,
    /// so every full instant fits in a word.
    pub fn horizon(&self) -> u64 {
        let k = (self.size() + self.slack as u128).min(1 << 63);
        (MAX - k) as u64
    }

    /// The time the bucket decides at: `t`, or the horizon past it.
    pub fn at(&self, t: u64) -> u64 {
        t.min(self.horizon())
    }

    /// The fluid level at `t`, in ns.
    pub fn level(&self, t: u64) -> u128 {
        let t = self.at(t);
        match self.last {
            None => 0,
            Some((s, level)) if t >= s => level.saturating_sub((t - s) as u128),
            Some((s, level)) => level + (s - t) as u128,
        }
    }

    fn size(&self) -> u128 {
        self.burst as u128 * self.t as u128
    }

    fn has_room(&self, t: u64, n: u64) -> bool {
        self.level(t) + n as u128 * self.t as u128 <= self.size()
    }

    /// The scheduled start of a request of `n` at `t`: its fluid is poured in at
    /// `t` (queued behind everything before it), and it may begin once the bucket,
    /// itself included, has drained back to its capacity.
    pub fn start(&self, t: u64, n: u64) -> Option<u64> {
        let t = self.at(t);
        if self.slack == 0 {
            // Only "now" matters; skip the search.
            return self.has_room(t, n).then_some(t);
        }
        let poured = self.level(t) + n as u128 * self.t as u128;
        first_time(t, |x| poured.saturating_sub((x - t) as u128) <= self.size())
    }

    /// Whether the bucket, with this request poured in at `t`, is back within its
    /// capacity after at most `slack` ns of draining.
    fn within_slack(&self, t: u64, n: u64) -> bool {
        let poured = self.level(t) + n as u128 * self.t as u128;
        poured.saturating_sub(self.slack as u128) <= self.size()
    }

    /// The instant the bucket is empty again after admitting `n` at `t` fits in u64.
    fn fits_in_time(&self, t: u64, n: u64) -> bool {
        self.at(t) as u128 + self.level(t) + n as u128 * self.t as u128 <= MAX
    }

    /// A leaky meter's level in units, rounded up.
    pub fn level_units(&self, t: u64) -> u64 {
        let level = self.level(t);
        // The smallest u with u·T ≥ level.
        let t_ns = self.t as u128;
        let mut u = level / t_ns;
        if u * t_ns < level {
            u += 1;
        }
        u as u64
    }

    /// The delay a granted reservation must wait.
    pub fn delay(&self, t: u64, n: u64) -> u64 {
        self.start(t, n).map_or(0, |s| s - self.at(t))
    }

    /// The instant the bucket is (or was) full again: the canonical form of the
    /// state (two states with the same full instant decide alike at every time).
    pub fn full_instant(&self) -> u128 {
        self.last.map_or(0, |(s, level)| s as u128 + level)
    }

    /// The state, to restore after a cancelled reservation.
    pub fn snapshot(&self) -> Option<(u64, u128)> {
        self.last
    }

    /// Restores [`Self::snapshot`].
    pub fn restore(&mut self, s: Option<(u64, u128)>) {
        self.last = s;
    }
}

impl Model for Bucket {
    fn capacity(&self) -> u64 {
        self.burst.saturating_add(self.slack / self.t)
    }
    /// The largest cost granted at once (the shaper's `b + ⌊slack / T⌋`), so that
    /// `remaining ≤ limit`.
    fn limit(&self) -> u64 {
        self.capacity()
    }
    fn admits(&self, t: u64, n: u64) -> bool {
        self.within_slack(t, n) && self.fits_in_time(t, n)
    }
    fn commit(&mut self, t: u64, n: u64) {
        let level = self.level(t) + n as u128 * self.t as u128;
        self.last = Some((self.at(t), level));
    }
    fn is_full(&self, t: u64) -> bool {
        self.level(t) == 0
    }
    fn earliest(&self, t: u64, n: u64) -> Option<u64> {
        // Room only grows with time, but the "fits before the end of time" check
        // only shrinks: the first instant with room is the only candidate.
        first_time(t, |x| self.within_slack(x, n)).filter(|&x| self.fits_in_time(x, n))
    }
}

/// The exact rational bucket (no rounding of `period / amount`): fluid measured in
/// `ns·amount`, a unit pours in `period`, the bucket drains `amount` per ns and
/// holds `burst·period`. Used only to check that what the implementation admitted
/// conforms to the exact quota.
#[derive(Clone, Debug)]
pub struct RationalBucket {
    amount: u128,
    period: u128,
    burst: u128,
    last: Option<(u64, u128)>,
}

impl RationalBucket {
    /// The exact bucket of `q` (assumed valid).
    pub fn new(q: &Quota) -> Self {
        Self {
            amount: q.amount() as u128,
            period: q.period_ns() as u128,
            burst: q.burst_size() as u128,
            last: None,
        }
    }

    /// Admits `n` at `t` (monotone time) if it conforms; returns whether it did.
    pub fn admit(&mut self, t: u64, n: u64) -> bool {
        let level = match self.last {
            None => 0,
            Some((s, level)) => level.saturating_sub((t - s) as u128 * self.amount),
        };
        let after = level + n as u128 * self.period;
        if after > self.burst * self.period {
            return false;
        }
        self.last = Some((t, after));
        true
    }
}

// ---------------------------------------------------------------------------------
// Windows
// ---------------------------------------------------------------------------------

/// The largest count a window word holds for `window` with `counts` counters: the
/// window index `t / window` is stored whole (enough bits for `u64::MAX / window`),
/// the rest of the 64 bits is split evenly between the counts.
pub fn window_max_count(window: u64, counts: u32) -> u64 {
    let largest_index = u64::MAX / window;
    let mut index_bits = 0u32;
    while index_bits < 64 && (largest_index >> index_bits) != 0 {
        index_bits += 1;
    }
    let count_bits = (64 - index_bits) / counts;
    ((1u128 << count_bits) - 1) as u64
}

fn validate_window(q: &Quota, counts: u32) -> Result<(u64, u64), ConfigError> {
    let (limit, window) = (q.amount(), q.period_ns());
    if window == 0 {
        return Err(ConfigError::Zero { field: "window" });
    }
    let max = window_max_count(window, counts);
    if max == 0 {
        return Err(ConfigError::TooLarge {
            field: "limit",
            max,
        });
    }
    if limit == 0 {
        return Err(ConfigError::Zero { field: "limit" });
    }
    if limit > max {
        return Err(ConfigError::TooLarge {
            field: "limit",
            max,
        });
    }
    Ok((window, limit))
}

/// Fixed window: a count per aligned window `[k·W, (k+1)·W)`. The count lives with
/// the window of the last charge; a timestamp from an earlier window than that one
/// (the clock went back) is decided in that window — no time has passed.
#[derive(Clone, Debug)]
pub struct FixedModel {
    /// Window length.
    pub window: u64,
    /// Limit per window.
    pub limit: u64,
    charged: Option<(u64, u64)>,
}

impl FixedModel {
    /// Validates a quota by the documented rules.
    pub fn new(q: &Quota) -> Result<Self, ConfigError> {
        let (window, limit) = validate_window(q, 1)?;
        Ok(Self {
            window,
            limit,
            charged: None,
        })
    }

    /// Reconfiguration: same window only; the count carries over.
    pub fn reconfigure(&mut self, q: &Quota) -> Result<(), ConfigError> {
        if q.period_ns() != self.window {
            return Err(ConfigError::Immutable { field: "window" });
        }
        self.limit = validate_window(q, 1)?.1;
        Ok(())
    }

    /// (window index, count) that decides at `t`.
    pub fn current(&self, t: u64) -> (u64, u64) {
        let k = t / self.window;
        match self.charged {
            Some((stored, count)) if count > 0 && stored >= k => (stored, count),
            _ => (k, 0),
        }
    }
}

impl Model for FixedModel {
    fn capacity(&self) -> u64 {
        self.limit
    }
    fn limit(&self) -> u64 {
        self.limit
    }
    fn admits(&self, t: u64, n: u64) -> bool {
        self.current(t).1 as u128 + n as u128 <= self.limit as u128
    }
    fn commit(&mut self, t: u64, n: u64) {
        let (k, count) = self.current(t);
        self.charged = Some((k, count + n));
    }
    fn is_full(&self, t: u64) -> bool {
        self.current(t).1 == 0
    }
}

/// The sliding window's wide layout: 20 bits per count, the index modulo 2²⁴.
pub const WIDE_MAX_LIMIT: u64 = (1 << 20) - 1;
/// The wide layout's index modulus `M`.
pub const WIDE_MODULUS: u64 = 1 << 24;

/// The documented sliding-window layout for `limit` per `window`: the whole index
/// when the limit fits next to it ([`window_max_count`] with two counts), else the
/// wide layout (limit ≤ 2²⁰ − 1, index modulo `M`, back band
/// `G = clamp(⌈1 s / W⌉, 2, M/4)`). Returns (largest limit, `G` or 0 for whole).
pub fn sliding_layout(window: u64, limit: u64) -> Result<(u64, u64), ConfigError> {
    if window == 0 {
        return Err(ConfigError::Zero { field: "window" });
    }
    if limit == 0 {
        return Err(ConfigError::Zero { field: "limit" });
    }
    let whole = window_max_count(window, 2);
    if limit <= whole {
        return Ok((whole, 0));
    }
    let max = whole.max(WIDE_MAX_LIMIT);
    if whole >= WIDE_MAX_LIMIT || limit > WIDE_MAX_LIMIT {
        return Err(ConfigError::TooLarge {
            field: "limit",
            max,
        });
    }
    let g = 1_000_000_000u64.div_ceil(window).clamp(2, WIDE_MODULUS / 4);
    Ok((WIDE_MAX_LIMIT, g))
}

/// The largest limit a sliding window of `window` accepts at construction.
pub fn sliding_max_limit(window: u64) -> u64 {
    window_max_count(window, 2).max(WIDE_MAX_LIMIT)
}

/// Sliding window counter: counts of the current and previous aligned windows; a
/// request of `n` at `e` into the current window is admitted iff the exact
/// real-valued rule holds, `prev·(W − e)/W + cur + n ≤ limit` (compared as
/// `prev·(W − e) + (cur + n)·W ≤ limit·W` in 128-bit integers). A timestamp from an
/// earlier window than the stored one is decided at the start of the stored one.
///
/// The model keeps the whole window index. With the wide layout it reads it the
/// way the documentation says a word stored modulo `M` reads: by `d = (now's index
/// − stored) mod M` (0 same, 1 next, in the back band `[M − G, M)` a window ahead,
/// else empty). [`SlidingModel::exact`] never wraps: the exact rule on the true
/// state, the reference the wide layout must never admit more than.
#[derive(Clone, Debug)]
pub struct SlidingModel {
    /// Window length.
    pub window: u64,
    /// Limit per window.
    pub limit: u64,
    /// The layout's largest limit (reconfiguration bound).
    pub max: u64,
    /// The back band `G` (0: whole index).
    pub band: u64,
    /// (window index, previous count, current count).
    state: (u64, u64, u64),
}

impl SlidingModel {
    /// Validates a quota by the documented rules.
    pub fn new(q: &Quota) -> Result<Self, ConfigError> {
        let (max, band) = sliding_layout(q.period_ns(), q.amount())?;
        Ok(Self {
            window: q.period_ns(),
            limit: q.amount(),
            max,
            band,
            state: (0, 0, 0),
        })
    }

    /// The exact rule with a whole index for any valid window and limit.
    pub fn exact(window: u64, limit: u64) -> Self {
        Self {
            window,
            limit,
            max: u64::MAX,
            band: 0,
            state: (0, 0, 0),
        }
    }

    /// Reconfiguration: same window only; both counts carry over; the layout
    /// chosen at construction stays.
    pub fn reconfigure(&mut self, q: &Quota) -> Result<(), ConfigError> {
        if q.period_ns() != self.window {
            return Err(ConfigError::Immutable { field: "window" });
        }
        if q.amount() == 0 {
            return Err(ConfigError::Zero { field: "limit" });
        }
        if q.amount() > self.max {
            return Err(ConfigError::TooLarge {
                field: "limit",
                max: self.max,
            });
        }
        self.limit = q.amount();
        Ok(())
    }

    /// (index, prev, cur, elapsed) as seen at `t`.
    fn view(&self, t: u64) -> (u64, u64, u64, u64) {
        let (stored, prev, cur) = self.state;
        let k = t / self.window;
        let into = t - k * self.window;
        if prev == 0 && cur == 0 {
            return (k, 0, 0, into);
        }
        // How far the stored window is behind now's (negative: ahead), as read.
        let behind: i128 = if self.band == 0 {
            k as i128 - stored as i128
        } else {
            let m = WIDE_MODULUS as i128;
            let d = (k as i128 - stored as i128).rem_euclid(m);
            if d >= m - self.band as i128 { d - m } else { d }
        };
        match behind {
            0 => (k, prev, cur, into),
            1 => (k, cur, 0, into), // the current window became the previous one
            b if b > 1 => (k, 0, 0, into), // both windows have passed
            // The clock went back: decided at the start of the stored window.
            b => ((k as i128 - b).min(MAX as i128) as u64, prev, cur, 0),
        }
    }

    /// Whether `n` more fits at `t` by the exact rule.
    fn fits(&self, t: u64, n: u64) -> bool {
        let (_, prev, cur, elapsed) = self.view(t);
        let w = self.window as u128;
        prev as u128 * (w - elapsed as u128) + (cur as u128 + n as u128) * w
            <= self.limit as u128 * w
    }

    /// The weighted estimate at `t`, as a real number times `W`.
    pub fn estimate_scaled(&self, t: u64) -> u128 {
        let (_, prev, cur, elapsed) = self.view(t);
        let w = self.window as u128;
        prev as u128 * (w - elapsed as u128) + cur as u128 * w
    }
}

impl Model for SlidingModel {
    fn capacity(&self) -> u64 {
        self.limit
    }
    fn limit(&self) -> u64 {
        self.limit
    }
    fn admits(&self, t: u64, n: u64) -> bool {
        self.fits(t, n)
    }
    fn commit(&mut self, t: u64, n: u64) {
        let (k, prev, cur, _) = self.view(t);
        self.state = (k, prev, cur + n);
    }
    fn is_full(&self, t: u64) -> bool {
        self.estimate_scaled(t) == 0
    }
    fn horizon(&self, t: u64) -> u64 {
        // Both windows are over by the start of the window after next; a wide
        // word may read as live again only `M` windows later.
        let index = self.view(t).0 as u128;
        ((index + 2) * self.window as u128).min(MAX) as u64
    }
}

/// Sliding window log: the admitted units' timestamps (the newest `capacity` of
/// them). A timestamp earlier than the newest entry is decided (and stored) at that
/// entry's time.
#[derive(Clone, Debug)]
pub struct LogModel {
    /// Window length.
    pub window: u64,
    /// Limit per window.
    pub limit: u64,
    /// Slots: the largest limit a reconfiguration may set.
    pub capacity: u64,
    /// (timestamp, units), oldest first.
    entries: VecDeque<(u64, u64)>,
}

/// The documented largest log.
pub const LOG_MAX_CAPACITY: u64 = 1 << 20;

impl LogModel {
    /// A log with `capacity` slots, validated by the documented rules.
    pub fn with_capacity(q: &Quota, capacity: u64) -> Result<Self, ConfigError> {
        if capacity > LOG_MAX_CAPACITY {
            return Err(ConfigError::TooLarge {
                field: "capacity",
                max: LOG_MAX_CAPACITY,
            });
        }
        if capacity == 0 {
            return Err(ConfigError::Zero { field: "capacity" });
        }
        Self::validate(q, capacity)?;
        Ok(Self {
            window: q.period_ns(),
            limit: q.amount(),
            capacity,
            entries: VecDeque::new(),
        })
    }

    /// A log with exactly `limit` slots.
    pub fn new(q: &Quota) -> Result<Self, ConfigError> {
        if q.amount() > LOG_MAX_CAPACITY {
            return Err(ConfigError::TooLarge {
                field: "limit",
                max: LOG_MAX_CAPACITY,
            });
        }
        if q.amount() == 0 {
            return Err(ConfigError::Zero { field: "limit" });
        }
        Self::with_capacity(q, q.amount())
    }

    fn validate(q: &Quota, capacity: u64) -> Result<(), ConfigError> {
        if q.amount() == 0 {
            return Err(ConfigError::Zero { field: "limit" });
        }
        if q.period_ns() == 0 {
            return Err(ConfigError::Zero { field: "window" });
        }
        if q.amount() > capacity {
            return Err(ConfigError::TooLarge {
                field: "limit",
                max: capacity,
            });
        }
        Ok(())
    }

    /// New limit and window; the log carries over.
    pub fn reconfigure(&mut self, q: &Quota) -> Result<(), ConfigError> {
        Self::validate(q, self.capacity)?;
        self.limit = q.amount();
        self.window = q.period_ns();
        Ok(())
    }

    fn effective(&self, t: u64) -> u64 {
        self.entries.back().map_or(t, |&(newest, _)| t.max(newest))
    }

    /// Units admitted in `(t − W, t]`, at the effective time.
    pub fn in_window(&self, t: u64) -> u128 {
        let t = self.effective(t) as u128;
        self.entries
            .iter()
            .filter(|&&(ts, _)| ts as u128 + self.window as u128 > t)
            .map(|&(_, units)| units as u128)
            .sum()
    }
}

impl Model for LogModel {
    // The largest cost is the limit; the ring's size is `self.capacity`.
    #[allow(clippy::misnamed_getters)]
    fn capacity(&self) -> u64 {
        self.limit
    }
    fn limit(&self) -> u64 {
        self.limit
    }
    fn admits(&self, t: u64, n: u64) -> bool {
        self.in_window(t) + n as u128 <= self.limit as u128
    }
    fn commit(&mut self, t: u64, n: u64) {
        let at = self.effective(t);
        self.entries.push_back((at, n));
        // The documented memory: a ring of `capacity` slots remembers the newest
        // `capacity` units. Without reconfiguration at most `limit ≤ capacity` are
        // ever in a window, so this forgets nothing that matters; after a window is
        // widened, a count beyond the ring is unknowable (and only a cost-0 peek can
        // tell: every cost ≥ 1 is denied either way).
        let mut total: u64 = self.entries.iter().map(|e| e.1).sum();
        while total > self.capacity {
            let front = &mut self.entries[0];
            let drop = front.1.min(total - self.capacity);
            front.1 -= drop;
            total -= drop;
            if front.1 == 0 {
                self.entries.pop_front();
            }
        }
    }
    fn is_full(&self, t: u64) -> bool {
        self.in_window(t) == 0
    }
}

// ---------------------------------------------------------------------------------
// Compound
// ---------------------------------------------------------------------------------

/// Several limits, admitted all-or-nothing. The decision reports, from the binding
/// limit (among the denying ones when any deny: an allowing limit's `remaining`
/// assumes a charge that a denial does not make), the fewest `remaining`; the
/// longest `retry_after` and `reset_after` over all limits.
#[derive(Clone, Debug)]
pub struct CompoundModel<M> {
    /// The limits, in order.
    pub parts: Vec<M>,
}

/// A compound model's decision, with every `limit` the binding limit may report
/// (equal `remaining` leaves the choice open).
#[derive(Clone, Debug)]
pub struct CompoundAnswer {
    /// The decision (its `limit` is one of `limits`).
    pub decision: Decision,
    /// The acceptable `limit` values.
    pub limits: Vec<u64>,
}

impl<M: Model> CompoundModel<M> {
    /// The decision for `n` at `t`.
    pub fn decide(
        &mut self,
        t: u64,
        n: u64,
        consume: bool,
    ) -> Result<CompoundAnswer, InsufficientCapacity> {
        for p in &self.parts {
            if n > p.capacity() {
                return Err(InsufficientCapacity {
                    requested: n,
                    capacity: p.capacity(),
                });
            }
        }
        let mut ds = Vec::new();
        for p in &self.parts {
            ds.push(p.clone().decide(t, n, false)?);
        }
        let allowed = ds.iter().all(|d| d.allowed);
        if allowed && consume && n > 0 {
            for p in &mut self.parts {
                p.decide(t, n, true)?;
            }
        }
        let binding: Vec<&Decision> = if allowed {
            ds.iter().collect()
        } else {
            ds.iter().filter(|d| !d.allowed).collect()
        };
        let remaining = binding
            .iter()
            .map(|d| d.remaining)
            .min()
            .unwrap_or(u64::MAX);
        let limits = binding
            .iter()
            .filter(|d| d.remaining == remaining)
            .map(|d| d.limit)
            .collect::<Vec<_>>();
        Ok(CompoundAnswer {
            decision: Decision {
                allowed,
                remaining,
                retry_after_ns: ds.iter().map(|d| d.retry_after_ns).max().unwrap_or(0),
                reset_after_ns: ds.iter().map(|d| d.reset_after_ns).max().unwrap_or(0),
                limit: limits[0],
            },
            limits,
        })
    }
}

// ---------------------------------------------------------------------------------
// Traffic
// ---------------------------------------------------------------------------------

/// How the clock moves before a request. `unit` is the algorithm's natural
/// length (emission interval or window).
#[derive(Clone, Debug)]
pub enum TimeOp {
    /// No time passes.
    Stay,
    /// Forward by `permille / 1000` units.
    Forward(u64),
    /// To the `k`-th next multiple of the unit, or 1 ns before it.
    Edge { k: u64, before: bool },
    /// To the last decision's `retry_after`, ±1 ns.
    Retry(i8),
    /// To the last decision's `reset_after`, ±1 ns.
    Reset(i8),
    /// Back by `permille / 1000` units (the clock went backwards).
    Back(u64),
    /// Back to a much earlier time.
    BackFar,
    /// Idle for years.
    Years(u64),
    /// To `u64::MAX` minus `permille / 1000` units.
    NearMax(u64),
    /// Forward by `laps·2²⁴ + units` units (`units` may be negative): the wide
    /// sliding window's index wraps every 2²⁴ windows.
    Laps { laps: u64, units: i64 },
}

/// Time moves, weighted towards the interesting ones.
pub fn time_op() -> impl Strategy<Value = TimeOp> {
    prop_oneof![
        3 => Just(TimeOp::Stay),
        6 => (0u64..3_000).prop_map(TimeOp::Forward),
        4 => (0u64..3, any::<bool>()).prop_map(|(k, before)| TimeOp::Edge { k, before }),
        3 => (-1i8..=1).prop_map(TimeOp::Retry),
        2 => (-1i8..=1).prop_map(TimeOp::Reset),
        2 => (1u64..3_000).prop_map(TimeOp::Back),
        1 => Just(TimeOp::BackFar),
        1 => (1u64..700).prop_map(TimeOp::Years),
        1 => (0u64..3_000).prop_map(TimeOp::NearMax),
        1 => (0u64..3, -3i64..=3).prop_map(|(laps, units)| TimeOp::Laps { laps, units }),
    ]
}

fn scaled(unit: u64, permille: u64) -> u128 {
    unit as u128 * permille as u128 / 1000
}

fn offset(t: u64, by: u64, delta: i8) -> u64 {
    let x = t as i128 + by as i128 + delta as i128;
    x.clamp(0, MAX as i128) as u64
}

/// The next time.
pub fn advance(t: u64, op: &TimeOp, unit: u64, last: Option<&Decision>) -> u64 {
    let sat = |x: u128| x.min(MAX) as u64;
    match *op {
        TimeOp::Stay => t,
        TimeOp::Forward(p) => sat(t as u128 + scaled(unit, p)),
        TimeOp::Edge { k, before } => {
            let edge = (t as u128 / unit as u128 + 1 + k as u128) * unit as u128;
            sat(edge - before as u128)
        }
        TimeOp::Retry(d) => match last {
            Some(l) if l.retry_after_ns != NEVER => offset(t, l.retry_after_ns, d),
            _ => t,
        },
        TimeOp::Reset(d) => match last {
            Some(l) if l.reset_after_ns != NEVER => offset(t, l.reset_after_ns, d),
            _ => t,
        },
        TimeOp::Back(p) => (t as u128).saturating_sub(scaled(unit, p)) as u64,
        TimeOp::BackFar => t / 3,
        TimeOp::Years(y) => sat(t as u128 + y as u128 * 365 * 86_400 * 1_000_000_000),
        TimeOp::NearMax(p) => (MAX.saturating_sub(scaled(unit, p))) as u64,
        TimeOp::Laps { laps, units } => {
            let by = (laps as i128 * WIDE_MODULUS as i128 + units as i128) * unit as i128;
            (t as i128 + by).clamp(0, MAX as i128) as u64
        }
    }
}

/// A request's cost, relative to the limiter's capacity at the time.
#[derive(Clone, Debug)]
pub enum Cost {
    /// A peek.
    Zero,
    /// One unit.
    One,
    /// A few units.
    Few(u64),
    /// Exactly the capacity.
    Capacity,
    /// One more than the capacity: can never succeed.
    OverCapacity,
    /// `u64::MAX`.
    Max,
    /// `permille / 1000` of the capacity.
    Share(u64),
}

/// Costs, weighted towards small ones.
pub fn cost() -> impl Strategy<Value = Cost> {
    prop_oneof![
        2 => Just(Cost::Zero),
        8 => Just(Cost::One),
        4 => (2u64..5).prop_map(Cost::Few),
        2 => Just(Cost::Capacity),
        1 => Just(Cost::OverCapacity),
        1 => Just(Cost::Max),
        3 => (0u64..1_100).prop_map(Cost::Share),
    ]
}

/// The cost against `capacity`.
pub fn resolve(c: &Cost, capacity: u64) -> u64 {
    match *c {
        Cost::Zero => 0,
        Cost::One => 1,
        Cost::Few(n) => n,
        Cost::Capacity => capacity,
        Cost::OverCapacity => capacity.saturating_add(1),
        Cost::Max => u64::MAX,
        Cost::Share(p) => (capacity as u128 * p as u128 / 1000) as u64,
    }
}

/// What a step does.
#[derive(Clone, Debug)]
pub enum Action<Q> {
    /// `check_n_at`.
    Check(Cost),
    /// `check_at` (cost 1).
    CheckOne,
    /// `peek_n_at`.
    Peek(Cost),
    /// `peek_at` (cost 1).
    PeekOne,
    /// `set_quota`.
    Reconfigure(Q),
}

/// Actions; `reconfig` is 0 to leave reconfiguration out.
pub fn action<Q: core::fmt::Debug + Clone + 'static>(
    quota: impl Strategy<Value = Q> + 'static,
    reconfig: u32,
) -> impl Strategy<Value = Action<Q>> {
    prop_oneof![
        10 => cost().prop_map(Action::Check),
        4 => Just(Action::CheckOne),
        3 => cost().prop_map(Action::Peek),
        2 => Just(Action::PeekOne),
        reconfig => quota.prop_map(Action::Reconfigure),
    ]
}

/// A starting time: the epoch, a little after, anywhere, or near the end of time.
pub fn start_time() -> impl Strategy<Value = u64> {
    prop_oneof![
        3 => Just(0u64),
        3 => 0u64..10_000_000_000,
        2 => any::<u64>(),
        1 => (0u64..1_000_000).prop_map(|x| u64::MAX - x),
    ]
}

/// Window and period lengths: tiny, round, odd and huge.
pub fn length() -> impl Strategy<Value = u64> {
    prop_oneof![
        3 => 1u64..100,
        2 => 100u64..100_000,
        2 => Just(1_000_000_000u64),
        1 => Just(60_000_000_000u64),
        1 => Just(3_600_000_000_000u64),
        1 => 1_000_000u64..10_000_000_000_000,
        1 => (u64::MAX / 4)..=u64::MAX,
    ]
}

/// Admissions `(t, n)` with times sorted; the total over every interval
/// `[t_i, t_j]` between two admissions is passed to `check(Δ, units)`.
pub fn for_every_interval(admitted: &[(u64, u64)], mut check: impl FnMut(u64, u128)) {
    let mut sorted = admitted.to_vec();
    sorted.sort_unstable();
    for i in 0..sorted.len() {
        let mut units = 0u128;
        for j in i..sorted.len() {
            units += sorted[j].1 as u128;
            // Include every admission at the same instant as the interval's end.
            if j + 1 < sorted.len() && sorted[j + 1].0 == sorted[j].0 {
                continue;
            }
            check(sorted[j].0 - sorted[i].0, units);
        }
    }
}

// ---------------------------------------------------------------------------------
// Driving a limiter and its model side by side
// ---------------------------------------------------------------------------------

/// A model whose quota can change at runtime.
pub trait Reconfigure {
    /// The documented `set_quota` rule.
    fn reconfigure(&mut self, q: &Quota) -> Result<(), ConfigError>;
}

impl Reconfigure for Bucket {
    fn reconfigure(&mut self, q: &Quota) -> Result<(), ConfigError> {
        Bucket::reconfigure(self, q)
    }
}
impl Reconfigure for FixedModel {
    fn reconfigure(&mut self, q: &Quota) -> Result<(), ConfigError> {
        FixedModel::reconfigure(self, q)
    }
}
impl Reconfigure for SlidingModel {
    fn reconfigure(&mut self, q: &Quota) -> Result<(), ConfigError> {
        SlidingModel::reconfigure(self, q)
    }
}
impl Reconfigure for LogModel {
    fn reconfigure(&mut self, q: &Quota) -> Result<(), ConfigError> {
        LogModel::reconfigure(self, q)
    }
}

/// One step of a trace.
pub type Steps = Vec<(TimeOp, Action<Quota>)>;

/// A trace: up to [`trace_len`] steps, each a move of the clock and an `action`.
pub fn trace<S: Strategy>(action: S) -> impl Strategy<Value = Vec<(TimeOp, S::Value)>> {
    prop::collection::vec((time_op(), action), trace_len())
}

/// The calls a trace makes on the real limiter: a [`Limiter`], or the sliding log
/// (a ring of timestamps, not one word, so not a `Limiter`).
pub trait UnderTest {
    /// The largest cost ever admitted at once, where the limiter reports it.
    fn max_cost(&self) -> Option<u64>;
    fn check_n_at(&self, n: u64, t: u64) -> Result<Decision, InsufficientCapacity>;
    fn check_at(&self, t: u64) -> Decision;
    fn peek_n_at(&self, n: u64, t: u64) -> Result<Decision, InsufficientCapacity>;
    /// A peek at one unit, by the limiter's own one-unit call where it has one.
    fn peek_one(&self, t: u64) -> Result<Decision, InsufficientCapacity>;
    fn set_quota(&self, q: &Quota) -> Result<(), ConfigError>;
}

impl<A: Algorithm> UnderTest for Limiter<A, ()> {
    fn max_cost(&self) -> Option<u64> {
        Some(self.capacity())
    }
    fn check_n_at(&self, n: u64, t: u64) -> Result<Decision, InsufficientCapacity> {
        Limiter::check_n_at(self, n, t)
    }
    fn check_at(&self, t: u64) -> Decision {
        Limiter::check_at(self, t)
    }
    fn peek_n_at(&self, n: u64, t: u64) -> Result<Decision, InsufficientCapacity> {
        Limiter::peek_n_at(self, n, t)
    }
    fn peek_one(&self, t: u64) -> Result<Decision, InsufficientCapacity> {
        Ok(self.peek_at(t))
    }
    fn set_quota(&self, q: &Quota) -> Result<(), ConfigError> {
        Limiter::set_quota(self, q)
    }
}

impl UnderTest for SlidingLog<()> {
    /// Its `capacity()` is the ring's size; the largest cost is the limit, which
    /// the model checks.
    fn max_cost(&self) -> Option<u64> {
        None
    }
    fn check_n_at(&self, n: u64, t: u64) -> Result<Decision, InsufficientCapacity> {
        SlidingLog::check_n_at(self, n, t)
    }
    fn check_at(&self, t: u64) -> Decision {
        SlidingLog::check_at(self, t)
    }
    fn peek_n_at(&self, n: u64, t: u64) -> Result<Decision, InsufficientCapacity> {
        SlidingLog::peek_n_at(self, n, t)
    }
    fn peek_one(&self, t: u64) -> Result<Decision, InsufficientCapacity> {
        SlidingLog::peek_n_at(self, 1, t)
    }
    fn set_quota(&self, q: &Quota) -> Result<(), ConfigError> {
        SlidingLog::set_quota(self, q)
    }
}

/// Runs `steps` against a limiter and its model, comparing every answer (and
/// calling `extra` after each step for algorithm-specific views). With `monotone`
/// the clock never goes back. Returns the admissions `(t, n)`.
pub fn drive<L: UnderTest, M: Model + Reconfigure>(
    lim: &L,
    model: &mut M,
    start: u64,
    steps: &[(TimeOp, Action<Quota>)],
    unit: impl Fn(&M) -> u64,
    monotone: bool,
    mut extra: impl FnMut(u64, &L, &M) -> Result<(), TestCaseError>,
) -> Result<Vec<(u64, u64)>, TestCaseError> {
    let mut t = start;
    let mut last: Option<Decision> = None;
    let mut admitted = Vec::new();
    for (i, (op, action)) in steps.iter().enumerate() {
        let next = advance(t, op, unit(model), last.as_ref());
        t = if monotone { next.max(t) } else { next };
        let capacity = model.capacity();
        if let Some(max_cost) = lim.max_cost() {
            prop_assert_eq!(max_cost, capacity, "capacity at step {}", i);
        }
        let (n, consume, got) = match action {
            Action::Check(c) => {
                let n = resolve(c, capacity);
                (n, true, lim.check_n_at(n, t))
            }
            Action::CheckOne => (1, true, Ok(lim.check_at(t))),
            Action::Peek(c) => {
                let n = resolve(c, capacity);
                (n, false, lim.peek_n_at(n, t))
            }
            Action::PeekOne => (1, false, lim.peek_one(t)),
            Action::Reconfigure(q) => {
                let got = lim.set_quota(q);
                let want = model.reconfigure(q);
                prop_assert_eq!(got, want, "set_quota({:?}) at step {}", q, i);
                continue;
            }
        };
        let want = model.decide(t, n, consume);
        prop_assert_eq!(
            norm(t, got),
            norm(t, want),
            "step {}: {:?} n={} at t={}",
            i,
            action,
            n,
            t
        );
        if let Ok(d) = got {
            prop_assert!(d.remaining <= d.limit, "step {}: {:?}", i, d);
            if consume && d.allowed && n > 0 {
                admitted.push((t, n));
            }
            last = Some(d);
        }
        extra(t, lim, model)?;
    }
    Ok(admitted)
}
