//! Sliding window log: exact. A request of cost `n` at `t` is admitted iff fewer
//! than `limit − n + 1` units were admitted in `(t − W, t]`; over *any* interval of
//! length `W`, admitted ≤ `limit`.
//!
//! # Memory and concurrency
//! The log keeps one `u64` timestamp per admitted unit in a ring of `capacity`
//! slots (`capacity ≥ limit`, at most [`SlidingLog::MAX_CAPACITY`]): **8 bytes per
//! unit of the limit**, plus 8 for the head and 8 for a search hint. It is the one
//! algorithm whose state is more than one word. A decision reads two or three
//! slots when time moves steadily (the search starts where the last one ended),
//! at most about `log₂(capacity) + 3`, and writes `n`,
//! so it runs under a short writer lock taken with one compare-and-swap on the head
//! word (a lock bit next to the admission count): linearizable by construction and
//! checked with loom, but — unlike every other limiter here — not lock-free: a
//! thread preempted inside the lock makes the others spin until it resumes. The
//! lock is never held across a clock read, an allocation or a system call.
//!
//! Timestamps are stored non-decreasing: a timestamp earlier than the newest
//! entry is decided at that entry's time (no time has passed).
//!
//! Needs the `alloc` feature.

use alloc::boxed::Box;
use alloc::vec::Vec;

use crate::clock::Clock;
use crate::decision::Decision;
use crate::error::{ConfigError, InsufficientCapacity};
use crate::fixed_window::until;
use crate::quota::Quota;
use crate::spec::{Spec, SpecError, log_check, log_params};
use crate::sync::{AtomicU64, Ordering, spin_loop};

/// The exact sliding window log (see the [module docs](self)).
///
/// ```
/// use sluicegate::{Quota, SlidingLog};
/// let log = SlidingLog::with_clock(Quota::per_second(2), ()).unwrap();
/// assert!(log.check_at(0).allowed);
/// assert!(log.check_at(600_000_000).allowed);
/// assert!(!log.check_at(999_999_999).allowed);
/// let d = log.check_at(1_000_000_000); // the entry at 0 has left (t − W, t]
/// assert!(d.allowed);
/// assert!(!log.check_at(1_500_000_000).allowed); // 600 ms and 1 s are inside
/// ```
#[derive(Debug)]
pub struct SlidingLog<C> {
    /// `(admitted units << 1) | locked`.
    head: AtomicU64,
    /// Written only under the lock; read under it.
    limit: AtomicU64,
    window_ns: AtomicU64,
    /// Where the last decision found the oldest entry inside the window (a
    /// sequence number); the next search starts there. Only used under the lock.
    cursor: AtomicU64,
    ring: Box<[AtomicU64]>,
    clock: C,
}

impl<C> SlidingLog<C> {
    /// The most slots a log may have: 2²⁰ (8 MiB).
    pub const MAX_CAPACITY: u64 = Spec::MAX_LOG_CAPACITY;

    /// A log for `quota.amount` units per `quota.period`, with exactly that many slots.
    ///
    /// ```
    /// # use sluicegate::{ConfigError, Quota, SlidingLog};
    /// assert_eq!(SlidingLog::with_clock(Quota::per_second(0), ()).unwrap_err(), ConfigError::Zero { field: "limit" });
    /// assert_eq!(
    ///     SlidingLog::with_clock(Quota::per_second(2_000_000), ()).unwrap_err(),
    ///     ConfigError::TooLarge { field: "limit", max: 1 << 20 }
    /// );
    /// ```
    pub fn with_clock(quota: Quota, clock: C) -> Result<Self, ConfigError> {
        let capacity = log_params(&quota, None)?;
        Self::build(quota, capacity, clock)
    }

    /// A log with `capacity` slots, so its limit can later be raised up to it.
    ///
    /// ```
    /// # use sluicegate::{Quota, SlidingLog};
    /// let log = SlidingLog::with_capacity(Quota::per_second(2), 10, ()).unwrap();
    /// log.set_quota(&Quota::per_second(10)).unwrap();
    /// assert!(log.set_quota(&Quota::per_second(11)).is_err());
    /// ```
    pub fn with_capacity(quota: Quota, capacity: u64, clock: C) -> Result<Self, ConfigError> {
        let capacity = log_params(&quota, Some(capacity))?;
        Self::build(quota, capacity, clock)
    }

    /// Allocates the ring for a validated quota and capacity.
    fn build(quota: Quota, capacity: u64, clock: C) -> Result<Self, ConfigError> {
        let ring = alloc_ring(capacity).map_err(|bytes| ConfigError::Alloc { bytes })?;
        Ok(Self::from_ring(quota, ring, clock))
    }

    /// The log of a validated sliding-log spec; the ring is allocated fallibly.
    pub(crate) fn from_spec(spec: &Spec, clock: C) -> Result<Self, SpecError> {
        let ring = alloc_ring(spec.log_capacity()).map_err(|bytes| SpecError::Alloc { bytes })?;
        Ok(Self::from_ring(spec.quotas()[0], ring, clock))
    }

    fn from_ring(quota: Quota, ring: Vec<AtomicU64>, clock: C) -> Self {
        Self {
            head: AtomicU64::new(0),
            limit: AtomicU64::new(quota.amount()),
            window_ns: AtomicU64::new(quota.period_ns()),
            cursor: AtomicU64::new(0),
            ring: ring.into_boxed_slice(),
            clock,
        }
    }

    /// Number of slots (the memory is `8 × capacity` bytes).
    ///
    /// ```
    /// # use sluicegate::{Quota, SlidingLog};
    /// assert_eq!(SlidingLog::with_clock(Quota::per_minute(60), ()).unwrap().capacity(), 60);
    /// ```
    pub fn capacity(&self) -> u64 {
        self.ring.len() as u64
    }

    /// Admits one unit at `now`.
    ///
    /// ```
    /// # use sluicegate::{Quota, SlidingLog};
    /// let log = SlidingLog::with_clock(Quota::per_second(1), ()).unwrap();
    /// assert!(log.check_at(0).allowed);
    /// ```
    pub fn check_at(&self, now: u64) -> Decision {
        self.locked(|s| s.decide(now, 1, true))
    }

    /// Admits `n` units at `now`, all-or-nothing; `n = 0` is a peek.
    ///
    /// ```
    /// # use sluicegate::{Quota, SlidingLog};
    /// let log = SlidingLog::with_clock(Quota::per_second(3), ()).unwrap();
    /// assert!(log.check_n_at(3, 0).unwrap().allowed);
    /// assert!(log.check_n_at(4, 0).is_err());
    /// ```
    pub fn check_n_at(&self, n: u64, now: u64) -> Result<Decision, InsufficientCapacity> {
        self.locked(|s| {
            s.fits(n)?;
            Ok(s.decide(now, n, true))
        })
    }

    /// What [`Self::check_n_at`] would answer, charging nothing.
    ///
    /// ```
    /// # use sluicegate::{Quota, SlidingLog};
    /// let log = SlidingLog::with_clock(Quota::per_second(3), ()).unwrap();
    /// assert_eq!(log.peek_n_at(2, 0).unwrap().remaining, 1);
    /// assert_eq!(log.peek_n_at(2, 0).unwrap().remaining, 1);
    /// ```
    pub fn peek_n_at(&self, n: u64, now: u64) -> Result<Decision, InsufficientCapacity> {
        self.locked(|s| {
            s.fits(n)?;
            Ok(s.decide(now, n, false))
        })
    }

    /// Changes limit (up to [`Self::capacity`]) and window; the log carries over
    /// unchanged, so the new window applies to past admissions too.
    ///
    /// ```
    /// # use sluicegate::{Quota, SlidingLog};
    /// let log = SlidingLog::with_clock(Quota::per_second(2), ()).unwrap();
    /// log.check_n_at(2, 0).unwrap();
    /// log.set_quota(&Quota::per_minute(2)).unwrap();
    /// assert!(!log.check_at(5_000_000_000).allowed); // both still within the minute
    /// ```
    pub fn set_quota(&self, quota: &Quota) -> Result<(), ConfigError> {
        log_check(quota, self.capacity())?;
        self.locked(|s| {
            s.limit.store(quota.amount(), Ordering::Relaxed);
            s.window_ns.store(quota.period_ns(), Ordering::Relaxed);
        });
        Ok(())
    }

    /// The clock.
    ///
    /// ```
    /// # use sluicegate::{Clock, ManualClock, Quota, SlidingLog};
    /// let log = SlidingLog::with_clock(Quota::per_second(1), ManualClock::new(4)).unwrap();
    /// assert_eq!(log.clock().now(), 4);
    /// ```
    pub fn clock(&self) -> &C {
        &self.clock
    }

    fn fits(&self, n: u64) -> Result<(), InsufficientCapacity> {
        let capacity = self.limit.load(Ordering::Relaxed);
        if n > capacity {
            return Err(InsufficientCapacity {
                requested: n,
                capacity,
            });
        }
        Ok(())
    }

    /// Runs `f` under the writer lock.
    fn locked<R>(&self, f: impl FnOnce(&Self) -> R) -> R {
        loop {
            let h = self.head.load(Ordering::Relaxed);
            if h & 1 == 0
                && self
                    .head
                    .compare_exchange_weak(h, h | 1, Ordering::Acquire, Ordering::Relaxed)
                    .is_ok()
            {
                break;
            }
            spin_loop();
        }
        let result = f(self);
        // `decide` may have moved the count forward (keeping the lock bit set).
        let count = self.head.load(Ordering::Relaxed) >> 1;
        self.head.store(count << 1, Ordering::Release);
        result
    }

    /// The ring position of the entry `back` places before the one at `head`
    /// (`back = 1`: the newest), for `1 ≤ back ≤ capacity`: a conditional wrap,
    /// not a division.
    #[inline]
    fn before(&self, head: usize, back: u64) -> &AtomicU64 {
        // `back ≤ capacity ≤ MAX_CAPACITY` fits any `usize` of 32 bits or more.
        let back = back as usize;
        let pos = if back <= head {
            head - back
        } else {
            head + self.ring.len() - back
        };
        &self.ring[pos]
    }

    /// The decision; only called under the lock.
    fn decide(&self, now: u64, n: u64, consume: bool) -> Decision {
        let limit = self.limit.load(Ordering::Relaxed);
        let window = self.window_ns.load(Ordering::Relaxed) as u128;
        let seq = self.head.load(Ordering::Relaxed) >> 1;
        let stored = seq.min(self.capacity());
        // Where entry `seq` (the next one) goes: the one division of the decision;
        // every other position is found from it by a conditional wrap.
        let head = (seq % self.capacity()) as usize;
        let newest = if seq > 0 {
            self.before(head, 1).load(Ordering::Relaxed)
        } else {
            0
        };
        let t = now.max(newest);
        // Entries are non-decreasing in sequence order, so "inside (t − W, t]" (ts +
        // W > t) is monotone in the sequence number: the oldest inside entry is
        // found from the hint below, or by binary search, a fixed number of
        // halvings whose only data-dependent step is a select (no branch to
        // mispredict): the oldest inside entry stays within [base, base + size].
        let inside = |s: u64| {
            self.before(head, seq - s).load(Ordering::Relaxed) as u128 + window > t as u128
        };
        // The first inside entry in [from, to), or `to` if none.
        let first_inside = |from: u64, to: u64| {
            let (mut base, mut size) = (from, to - from);
            if size == 0 {
                return base;
            }
            while size > 1 {
                let half = size / 2;
                let mid = base + half;
                base = if inside(mid) { base } else { mid };
                size -= half;
            }
            base + u64::from(!inside(base))
        };
        // The search starts from where the last one ended: as time moves on, the
        // oldest inside entry moves forward by about as many entries as were
        // added, so one or two probes usually find it. The hint is only a hint:
        // each branch checks the boundary it relies on.
        let oldest = seq - stored;
        let hint = self.cursor.load(Ordering::Relaxed).clamp(oldest, seq);
        let lo = if hint < seq && !inside(hint) {
            if hint + 1 == seq || inside(hint + 1) {
                hint + 1
            } else {
                first_inside(hint + 2, seq)
            }
        } else if hint == oldest || !inside(hint - 1) {
            hint
        } else {
            first_inside(oldest, hint - 1)
        };
        self.cursor.store(lo, Ordering::Relaxed);
        let in_window = seq - lo;
        if in_window + n <= limit {
            if consume && n > 0 {
                let mut pos = head;
                for _ in 0..n {
                    self.ring[pos].store(t, Ordering::Relaxed);
                    pos += 1;
                    if pos == self.ring.len() {
                        pos = 0;
                    }
                }
                self.head.store(((seq + n) << 1) | 1, Ordering::Relaxed);
            }
            let count = in_window + n;
            let newest = if n > 0 { t } else { newest };
            Decision {
                allowed: true,
                remaining: limit - count,
                retry_after_ns: 0,
                reset_after_ns: if count > 0 {
                    until(newest as u128 + window, now)
                } else {
                    0
                },
                limit,
            }
        } else {
            // The (limit − n + 1)-th newest entry must leave the window first.
            let blocking = self.before(head, limit - n + 1).load(Ordering::Relaxed);
            Decision {
                allowed: false,
                remaining: limit.saturating_sub(in_window),
                retry_after_ns: until(blocking as u128 + window, now),
                reset_after_ns: until(newest as u128 + window, now),
                limit,
            }
        }
    }
}

/// A zeroed ring of `capacity` slots, allocated fallibly (`Err`: the bytes it
/// would have taken).
fn alloc_ring(capacity: u64) -> Result<Vec<AtomicU64>, usize> {
    // `capacity ≤ MAX_CAPACITY` (validated) fits any `usize` of 32 bits or more.
    let capacity = capacity as usize;
    let mut ring = Vec::new();
    ring.try_reserve_exact(capacity)
        .map_err(|_| capacity.saturating_mul(core::mem::size_of::<AtomicU64>()))?;
    ring.extend((0..capacity).map(|_| AtomicU64::new(0)));
    Ok(ring)
}

impl<C: Clock> SlidingLog<C> {
    /// Admits one unit now.
    ///
    /// ```
    /// # use sluicegate::{ManualClock, Quota, SlidingLog};
    /// let log = SlidingLog::with_clock(Quota::per_second(1), ManualClock::new(0)).unwrap();
    /// assert!(log.check().allowed);
    /// assert!(!log.check().allowed);
    /// ```
    pub fn check(&self) -> Decision {
        self.check_at(self.clock.now())
    }

    /// Admits `n` units now.
    ///
    /// ```
    /// # use sluicegate::{ManualClock, Quota, SlidingLog};
    /// let log = SlidingLog::with_clock(Quota::per_second(5), ManualClock::new(0)).unwrap();
    /// assert_eq!(log.check_n(5).unwrap().remaining, 0);
    /// ```
    pub fn check_n(&self, n: u64) -> Result<Decision, InsufficientCapacity> {
        self.check_n_at(n, self.clock.now())
    }

    /// Peeks `n` units now.
    ///
    /// ```
    /// # use sluicegate::{ManualClock, Quota, SlidingLog};
    /// let log = SlidingLog::with_clock(Quota::per_second(5), ManualClock::new(0)).unwrap();
    /// assert!(log.peek_n(5).unwrap().allowed);
    /// ```
    pub fn peek_n(&self, n: u64) -> Result<Decision, InsufficientCapacity> {
        self.peek_n_at(n, self.clock.now())
    }
}

#[cfg(feature = "std")]
impl SlidingLog<crate::clock::DefaultClock> {
    /// A log on the default clock.
    ///
    /// ```
    /// # use sluicegate::{Quota, SlidingLog};
    /// let log = SlidingLog::new(Quota::per_second(5)).unwrap();
    /// assert!(log.check().allowed);
    /// ```
    pub fn new(quota: Quota) -> Result<Self, ConfigError> {
        Self::with_clock(quota, Default::default())
    }
}
