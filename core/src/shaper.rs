//! The leaky bucket as a delaying shaper: requests are spaced `T = period / amount`
//! apart (with `burst` of them allowed back-to-back) by telling each caller how long
//! to wait before it proceeds; a request whose wait would exceed `max_delay` is
//! rejected instead of queued.
//!
//! Same word as the token bucket: the instant `F` at which the schedule is clear.
//! A request of cost `n` at `now` is scheduled `delay = ((F − now)⁺ + n·T − b·T)⁺`
//! from now; it is granted iff `delay ≤ max_delay`, and then `F = max(F, now) + n·T`.
//! The largest cost ever granted is `b + ⌊max_delay / T⌋`.
//!
//! # Decision fields
//! `limit` is that largest cost, `b + ⌊max_delay / T⌋`: the most units granted at
//! once, a request above it is an [`InsufficientCapacity`] error. `remaining` is how
//! many units a reservation could be granted right now (some of them delayed), so
//! `remaining ≤ limit` always; with a max delay of 0 both are the bucket's. E.g.
//! 10/s with burst 1 and a max delay of 0.5 s: `limit` 6, and a fresh shaper's first
//! reservation leaves `remaining` 5.
//!
//! ```
//! use sluicegate::{Quota, Shaper};
//! let s = Shaper::with_clock(Quota::per_second(10).burst(1), 500_000_000, ()).unwrap();
//! let d = *s.reserve_at(0).decision();
//! assert_eq!((d.remaining, d.limit), (5, 6));
//! ```
//!
//! # Cancelling
//! [`Shaper::cancel_at`] gives a reservation back exactly, as if it had never been
//! made, but only while it is still the latest one. Once a later reservation exists
//! it was promised a start time that assumed this one, and the freed slot would let
//! a new request squeeze in between: the rate would be exceeded. So a cancel that
//! is too late refunds nothing and returns `false`.
//!
//! A reservation is refunded at most once, which is why [`Reservation`] is neither
//! `Copy` nor `Clone` and a successful cancel spends it (`&mut`): the schedule word
//! alone cannot tell two reservations with the same start apart. After a refund a
//! new request may be given exactly the freed slot, and a second refund through a
//! copy of the first reservation would free that new request's slot as well.

use core::time::Duration;

use crate::clock::Clock;
use crate::decision::Decision;
use crate::error::{ConfigError, InsufficientCapacity};
use crate::limiter::{Algorithm, Core, PARAM_WORDS, Step};
use crate::quota::Quota;
use crate::sync::{Ordering, order};
use crate::token_bucket::GcraParams;

/// Validated shaper parameters: the bucket's plus the longest wait granted.
///
/// ```
/// use core::time::Duration;
/// use sluicegate::{Quota, ShaperParams};
/// let p = ShaperParams::new(&Quota::per_second(10).burst(1), 1_000_000_000).unwrap();
/// assert_eq!(p.capacity(), 11); // one now, ten more within the second of delay
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ShaperParams {
    gcra: GcraParams,
    max_delay_ns: u64,
}

impl ShaperParams {
    /// Validates the quota as the token bucket does; `max_delay_ns` may be 0 (then
    /// the shaper grants only requests that conform now, like the bucket).
    ///
    /// ```
    /// # use sluicegate::{ConfigError, Quota, ShaperParams};
    /// assert_eq!(ShaperParams::new(&Quota::per_second(0), 5).unwrap_err(), ConfigError::Zero { field: "amount" });
    /// ```
    pub const fn new(quota: &Quota, max_delay_ns: u64) -> Result<Self, ConfigError> {
        match GcraParams::new(quota) {
            Ok(gcra) => Ok(Self { gcra, max_delay_ns }),
            Err(e) => Err(e),
        }
    }

    /// The largest cost that can ever be granted at once.
    ///
    /// ```
    /// # use sluicegate::{Quota, ShaperParams};
    /// assert_eq!(ShaperParams::new(&Quota::per_second(1), 0).unwrap().capacity(), 1);
    /// ```
    pub const fn capacity(&self) -> u64 {
        self.gcra
            .burst()
            .saturating_add(self.max_delay_ns / self.gcra.emission_interval_ns())
    }

    /// The longest wait granted.
    ///
    /// ```
    /// # use sluicegate::{Quota, ShaperParams};
    /// assert_eq!(ShaperParams::new(&Quota::per_second(1), 7).unwrap().max_delay_ns(), 7);
    /// ```
    pub const fn max_delay_ns(&self) -> u64 {
        self.max_delay_ns
    }

    /// The token-bucket part.
    ///
    /// ```
    /// # use sluicegate::{Quota, ShaperParams};
    /// assert_eq!(ShaperParams::new(&Quota::per_second(2), 0).unwrap().gcra().burst(), 2);
    /// ```
    pub const fn gcra(&self) -> &GcraParams {
        &self.gcra
    }

    pub(crate) const fn words(&self) -> [u64; PARAM_WORDS] {
        let mut w = self.gcra.words();
        w[3] = self.max_delay_ns;
        w
    }
}

/// The shaping algorithm (see the [module docs](self)).
#[derive(Clone, Copy, Debug)]
pub struct Shaping;

impl Algorithm for Shaping {
    type Params = ShaperParams;
    fn params(quota: &Quota) -> Result<ShaperParams, ConfigError> {
        ShaperParams::new(quota, 0)
    }
    fn reparams(old: &ShaperParams, quota: &Quota) -> Result<ShaperParams, ConfigError> {
        ShaperParams::new(quota, old.max_delay_ns)
    }
    fn to_words(p: &ShaperParams) -> [u64; PARAM_WORDS] {
        p.words()
    }
    fn from_words(w: [u64; PARAM_WORDS]) -> ShaperParams {
        ShaperParams {
            gcra: GcraParams::from_words(w),
            max_delay_ns: w[3],
        }
    }
    fn capacity(p: &ShaperParams) -> u64 {
        p.capacity()
    }
    #[inline]
    fn decide(p: &ShaperParams, word: u64, now: u64, n: u64) -> Step {
        p.gcra.decide(word, now, n, p.max_delay_ns)
    }
    fn is_fresh(p: &ShaperParams, word: u64, now: u64) -> bool {
        p.gcra.is_full(word, now, p.max_delay_ns)
    }
    /// The later of two instants at which the bucket is full again.
    fn join(_: &ShaperParams, a: u64, b: u64, _now: u64) -> Option<u64> {
        Some(a.max(b))
    }
    fn give_back(p: &ShaperParams, word: u64, n: u64, _prev: u64, next: u64, now: u64) -> u64 {
        p.gcra.give_back(word, n, next, now, p.max_delay_ns)
    }
}

/// A granted or refused reservation. Not `Clone`: it can be cancelled once (see
/// the [module docs](self)).
///
/// ```
/// use sluicegate::{Quota, Shaper};
/// let s = Shaper::with_clock(Quota::per_second(10).burst(1), 1_000_000_000, ()).unwrap();
/// let first = s.reserve_at(0);
/// assert!(first.granted());
/// assert_eq!(first.delay_ns(), 0);
/// let second = s.reserve_at(0);
/// assert_eq!(second.delay().as_millis(), 100);
/// ```
#[derive(Debug, PartialEq, Eq)]
pub struct Reservation {
    decision: Decision,
    delay_ns: u64,
    n: u64,
    base: u64,
    end: u64,
}

impl Reservation {
    /// The reservation a shaping step made; `t` is the emission interval.
    pub(crate) fn from_step(step: &crate::limiter::Step, n: u64, t: u64) -> Self {
        let end = step.next.unwrap_or(0);
        Self {
            decision: step.decision,
            delay_ns: step.delay_ns,
            n,
            base: end.saturating_sub(n.saturating_mul(t)),
            end,
        }
    }

    /// Whether the request was scheduled (it must then wait [`Self::delay`]).
    ///
    /// ```
    /// # use sluicegate::{Quota, Shaper};
    /// let s = Shaper::with_clock(Quota::per_second(1), 0, ()).unwrap();
    /// assert!(s.reserve_at(0).granted());
    /// assert!(!s.reserve_at(0).granted());
    /// ```
    pub const fn granted(&self) -> bool {
        self.decision.allowed
    }

    /// How long to wait before proceeding; 0 if refused.
    ///
    /// ```
    /// # use sluicegate::{Quota, Shaper};
    /// let s = Shaper::with_clock(Quota::per_second(2).burst(1), 10_000_000_000, ()).unwrap();
    /// s.reserve_at(0);
    /// assert_eq!(s.reserve_at(0).delay_ns(), 500_000_000);
    /// ```
    pub const fn delay_ns(&self) -> u64 {
        self.delay_ns
    }

    /// [`Self::delay_ns`] as a [`Duration`].
    ///
    /// ```
    /// # use sluicegate::{Quota, Shaper};
    /// let s = Shaper::with_clock(Quota::per_second(2).burst(1), 10_000_000_000, ()).unwrap();
    /// s.reserve_at(0);
    /// assert_eq!(s.reserve_at(0).delay().as_millis(), 500);
    /// ```
    pub const fn delay(&self) -> Duration {
        Duration::from_nanos(self.delay_ns)
    }

    /// The decision: when refused, `retry_after` is the time until a reservation of
    /// the same cost would be granted within the max delay.
    ///
    /// ```
    /// # use sluicegate::{Quota, Shaper};
    /// let s = Shaper::with_clock(Quota::per_second(1), 0, ()).unwrap();
    /// s.reserve_at(0);
    /// assert_eq!(s.reserve_at(0).decision().retry_after_ns, 1_000_000_000);
    /// ```
    pub const fn decision(&self) -> &Decision {
        &self.decision
    }
}

/// The delaying shaper (see the [module docs](self)).
///
/// ```
/// use sluicegate::{Quota, Shaper};
/// // 100 per second, one at a time, queue at most 50 ms of work
/// let s = Shaper::with_clock(Quota::per_second(100).burst(1), 50_000_000, ()).unwrap();
/// let delays: Vec<u64> = (0..7).map(|_| s.reserve_at(0)).filter(|r| r.granted()).map(|r| r.delay_ns()).collect();
/// assert_eq!(delays, [0, 10_000_000, 20_000_000, 30_000_000, 40_000_000, 50_000_000]);
/// ```
#[derive(Debug)]
pub struct Shaper<C> {
    core: Core<Shaping>,
    clock: C,
}

impl<C> Shaper<C> {
    /// A shaper for `quota` granting waits up to `max_delay_ns`, on `clock`.
    ///
    /// ```
    /// # use sluicegate::{ManualClock, Quota, Shaper};
    /// let s = Shaper::with_clock(Quota::per_second(5), 0, ManualClock::new(0)).unwrap();
    /// assert!(s.reserve().granted());
    /// ```
    pub fn with_clock(quota: Quota, max_delay_ns: u64, clock: C) -> Result<Self, ConfigError> {
        ShaperParams::new(&quota, max_delay_ns).map(|p| Self {
            core: Core::from_words(p.words()),
            clock,
        })
    }

    /// Reserves one unit at `now`.
    ///
    /// ```
    /// # use sluicegate::{Quota, Shaper};
    /// let s = Shaper::with_clock(Quota::per_second(1), 0, ()).unwrap();
    /// assert!(s.reserve_at(5).granted());
    /// ```
    pub fn reserve_at(&self, now: u64) -> Reservation {
        match self.reserve_n_at(1, now) {
            Ok(r) => r,
            Err(e) => Reservation {
                decision: Decision {
                    allowed: false,
                    remaining: 0,
                    retry_after_ns: u64::MAX,
                    reset_after_ns: 0,
                    limit: e.capacity,
                },
                delay_ns: 0,
                n: 1,
                base: 0,
                end: 0,
            },
        }
    }

    /// Reserves `n` units at `now`, all-or-nothing.
    ///
    /// ```
    /// # use sluicegate::{Quota, Shaper};
    /// let s = Shaper::with_clock(Quota::per_second(10), 0, ()).unwrap();
    /// assert!(s.reserve_n_at(10, 0).unwrap().granted());
    /// assert!(s.reserve_n_at(11, 0).is_err()); // more than can ever be granted
    /// ```
    pub fn reserve_n_at(&self, n: u64, now: u64) -> Result<Reservation, InsufficientCapacity> {
        let (step, prev) = self.core.run(now, n, true)?;
        // The slot starts where `decide` put it, at max(F, now) for the word F the
        // compare-and-swap replaced (`now` capped at the horizon, where time stops:
        // see the token bucket's docs). Not `end − n·T` with `T` read again: a
        // `set_quota` racing this call may have changed `T` since the decision, and
        // a cancel would then give back a different amount than was taken. The
        // horizon is read again, but only matters within one refill of the end of
        // time; capped at `end`, a cancel never leaves more than it found.
        let (base, end) = match step.next {
            Some(end) => {
                let p = self.core.params();
                let now = now.min(p.gcra.horizon(p.max_delay_ns));
                (prev.max(now).min(end), end)
            }
            None => (0, 0),
        };
        Ok(Reservation {
            decision: step.decision,
            delay_ns: step.delay_ns,
            n,
            base,
            end,
        })
    }

    /// What [`Self::reserve_n_at`] would answer, reserving nothing.
    ///
    /// ```
    /// # use sluicegate::{Quota, Shaper};
    /// let s = Shaper::with_clock(Quota::per_second(1), 0, ()).unwrap();
    /// assert!(s.peek_n_at(1, 0).unwrap().allowed);
    /// assert!(s.reserve_at(0).granted()); // the peek took nothing
    /// ```
    pub fn peek_n_at(&self, n: u64, now: u64) -> Result<Decision, InsufficientCapacity> {
        self.core.run(now, n, false).map(|(s, _)| s.decision)
    }

    /// Cancels a granted reservation at `now`. Returns whether it was refunded: only
    /// the latest reservation can be (see the [module docs](self)); a refused or
    /// already cancelled one returns `false`. A refund spends the reservation.
    ///
    /// ```
    /// # use sluicegate::{Quota, Shaper};
    /// let s = Shaper::with_clock(Quota::per_second(1), 10_000_000_000, ()).unwrap();
    /// let mut a = s.reserve_at(0);
    /// let mut b = s.reserve_at(0);
    /// assert!(!s.cancel_at(&mut a, 0)); // b was promised a time that assumed a
    /// assert!(s.cancel_at(&mut b, 0));
    /// let c = s.reserve_at(0);
    /// assert_eq!(c.delay_ns(), 1_000_000_000); // b's slot was free again
    /// assert!(!s.cancel_at(&mut b, 0)); // only once: c keeps that slot
    /// ```
    pub fn cancel_at(&self, reservation: &mut Reservation, now: u64) -> bool {
        let _ = now; // the refund is exact; time matters only through `base`
        if !reservation.granted() || reservation.n == 0 {
            return false;
        }
        let refunded = self
            .core
            .word
            .compare_exchange(
                reservation.end,
                reservation.base,
                order::CAS_OK,
                order::CAS_ERR,
            )
            .is_ok();
        if refunded {
            reservation.n = 0;
        }
        refunded
    }

    /// Changes the rate and burst (the max delay is kept); the schedule carries
    /// over, so granted reservations keep their start times.
    ///
    /// ```
    /// # use sluicegate::{Quota, Shaper};
    /// let s = Shaper::with_clock(Quota::per_second(1), 0, ()).unwrap();
    /// s.set_quota(&Quota::per_second(2)).unwrap();
    /// assert_eq!(s.params().capacity(), 2);
    /// ```
    pub fn set_quota(&self, quota: &Quota) -> Result<(), ConfigError> {
        self.core.set_quota(quota)
    }

    /// The current parameters.
    ///
    /// ```
    /// # use sluicegate::{Quota, Shaper};
    /// assert_eq!(Shaper::with_clock(Quota::per_second(1), 9, ()).unwrap().params().max_delay_ns(), 9);
    /// ```
    pub fn params(&self) -> ShaperParams {
        self.core.params()
    }

    /// Clears the schedule.
    ///
    /// ```
    /// # use sluicegate::{Quota, Shaper};
    /// let s = Shaper::with_clock(Quota::per_second(1), 0, ()).unwrap();
    /// s.reserve_at(0);
    /// s.reset();
    /// assert!(s.reserve_at(0).granted());
    /// ```
    pub fn reset(&self) {
        self.core.word.store(0, Ordering::Release);
    }

    /// The clock.
    ///
    /// ```
    /// # use sluicegate::{Clock, ManualClock, Quota, Shaper};
    /// let s = Shaper::with_clock(Quota::per_second(1), 0, ManualClock::new(3)).unwrap();
    /// assert_eq!(s.clock().now(), 3);
    /// ```
    pub fn clock(&self) -> &C {
        &self.clock
    }
}

#[cfg(not(loom))]
impl<C: Copy> Shaper<C> {
    /// [`Self::with_clock`] as a `const fn`, for a `static` shaper (the clock must be `Copy`).
    ///
    /// ```
    /// # use sluicegate::{Quota, Shaper};
    /// static S: Shaper<()> = match Shaper::with_clock_const(Quota::per_second(5), 0, ()) {
    ///     Ok(s) => s,
    ///     Err(_) => panic!("bad quota"),
    /// };
    /// assert!(S.reserve_at(0).granted());
    /// ```
    pub const fn with_clock_const(
        quota: Quota,
        max_delay_ns: u64,
        clock: C,
    ) -> Result<Self, ConfigError> {
        match ShaperParams::new(&quota, max_delay_ns) {
            Ok(p) => Ok(Self {
                core: Core::from_words(p.words()),
                clock,
            }),
            Err(e) => Err(e),
        }
    }
}

impl<C: Clock> Shaper<C> {
    /// Reserves one unit now.
    ///
    /// ```
    /// # use sluicegate::{ManualClock, Quota, Shaper};
    /// let s = Shaper::with_clock(Quota::per_second(1), 0, ManualClock::new(0)).unwrap();
    /// assert!(s.reserve().granted());
    /// ```
    pub fn reserve(&self) -> Reservation {
        self.reserve_at(self.clock.now())
    }

    /// Reserves `n` units now.
    ///
    /// ```
    /// # use sluicegate::{ManualClock, Quota, Shaper};
    /// let s = Shaper::with_clock(Quota::per_second(4), 0, ManualClock::new(0)).unwrap();
    /// assert!(s.reserve_n(4).unwrap().granted());
    /// ```
    pub fn reserve_n(&self, n: u64) -> Result<Reservation, InsufficientCapacity> {
        self.reserve_n_at(n, self.clock.now())
    }

    /// Cancels a reservation now (see [`Self::cancel_at`]).
    ///
    /// ```
    /// # use sluicegate::{ManualClock, Quota, Shaper};
    /// let s = Shaper::with_clock(Quota::per_second(1), 0, ManualClock::new(0)).unwrap();
    /// let mut r = s.reserve();
    /// assert!(s.cancel(&mut r));
    /// assert!(!s.cancel(&mut r));
    /// ```
    pub fn cancel(&self, reservation: &mut Reservation) -> bool {
        self.cancel_at(reservation, self.clock.now())
    }
}

#[cfg(feature = "std")]
impl Shaper<crate::clock::DefaultClock> {
    /// A shaper on the default clock.
    ///
    /// ```
    /// # use sluicegate::{Quota, Shaper};
    /// let s = Shaper::new(Quota::per_second(10), std::time::Duration::from_millis(100)).unwrap();
    /// assert!(s.reserve().granted());
    /// ```
    pub fn new(quota: Quota, max_delay: Duration) -> Result<Self, ConfigError> {
        let ns = u64::try_from(max_delay.as_nanos()).unwrap_or(u64::MAX);
        Self::with_clock(quota, ns, Default::default())
    }
}
