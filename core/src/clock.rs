//! Time sources. Time is `u64` nanoseconds from an arbitrary epoch.
//!
//! Every check has an `_at(now)` form that takes the time from the caller, so a
//! server that reads its clock once per event-loop turn pays for no clock at all.
//! The clocks here are for the forms without `_at`.

use crate::sync::{AtomicU64, Ordering};

/// A source of monotonic time in nanoseconds from an arbitrary epoch.
///
/// Implement it over a hardware timer on a microcontroller. A clock that goes
/// backwards is tolerated: every limiter treats an earlier timestamp as no time
/// having passed (never as extra capacity).
///
/// ```
/// use sluicegate::Clock;
/// struct Ticks; // e.g. a 1 MHz hardware timer
/// impl Clock for Ticks {
///     fn now(&self) -> u64 { 42 * 1_000 } // ticks × 1000 ns
/// }
/// assert_eq!(Ticks.now(), 42_000);
/// ```
pub trait Clock {
    /// The current time in nanoseconds.
    fn now(&self) -> u64;
}

impl<C: Clock + ?Sized> Clock for &C {
    #[inline]
    fn now(&self) -> u64 {
        (**self).now()
    }
}

/// A clock that only moves when told to: for tests, simulations and replays.
///
/// ```
/// use sluicegate::{Clock, ManualClock};
/// let clock = ManualClock::new(10);
/// clock.advance(5);
/// assert_eq!(clock.now(), 15);
/// clock.set(3); // going backwards is allowed; limiters treat it as no time passing
/// assert_eq!(clock.now(), 3);
/// ```
#[derive(Debug)]
pub struct ManualClock {
    now: AtomicU64,
}

impl ManualClock {
    /// A clock reading `now` nanoseconds.
    ///
    /// ```
    /// # use sluicegate::{Clock, ManualClock};
    /// static CLOCK: ManualClock = ManualClock::new(0);
    /// assert_eq!(CLOCK.now(), 0);
    /// ```
    #[cfg(not(loom))]
    pub const fn new(now: u64) -> Self {
        Self {
            now: AtomicU64::new(now),
        }
    }

    /// A clock reading `now` nanoseconds.
    #[cfg(loom)]
    pub fn new(now: u64) -> Self {
        Self {
            now: AtomicU64::new(now),
        }
    }

    /// Sets the time, forwards or backwards.
    ///
    /// ```
    /// # use sluicegate::{Clock, ManualClock};
    /// let c = ManualClock::new(0);
    /// c.set(u64::MAX);
    /// assert_eq!(c.now(), u64::MAX);
    /// ```
    pub fn set(&self, now: u64) {
        self.now.store(now, Ordering::Relaxed);
    }

    /// Moves the time forwards by `ns`, saturating at `u64::MAX`.
    ///
    /// ```
    /// # use sluicegate::{Clock, ManualClock};
    /// let c = ManualClock::new(u64::MAX - 1);
    /// c.advance(10);
    /// assert_eq!(c.now(), u64::MAX);
    /// ```
    pub fn advance(&self, ns: u64) {
        let _ = self
            .now
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |t| {
                Some(t.saturating_add(ns))
            });
    }
}

impl Default for ManualClock {
    fn default() -> Self {
        Self::new(0)
    }
}

impl Clock for ManualClock {
    #[inline]
    fn now(&self) -> u64 {
        self.now.load(Ordering::Relaxed)
    }
}

/// The std monotonic clock: the CPU's time-stamp counter scaled to nanoseconds,
/// through `quanta`.
///
/// Why quanta: on this project's machines it reads in ~12 ns against ~27 ns for
/// `std::time::Instant::now` (a vDSO `clock_gettime` call), and the clock read is a
/// large share of a ~10 ns check. quanta calibrates the TSC against the OS monotonic
/// clock once per process and falls back to that clock where the TSC is not
/// invariant, so it is never less correct than `Instant`.
///
/// ```
/// use sluicegate::{Clock, QuantaClock};
/// let clock = QuantaClock::default();
/// let a = clock.now();
/// let b = clock.now();
/// assert!(b >= a);
/// ```
#[cfg(feature = "std")]
#[derive(Clone, Debug)]
pub struct QuantaClock {
    inner: quanta::Clock,
}

#[cfg(feature = "std")]
impl Default for QuantaClock {
    fn default() -> Self {
        Self {
            inner: quanta::Clock::new(),
        }
    }
}

#[cfg(feature = "std")]
impl Clock for QuantaClock {
    #[inline]
    fn now(&self) -> u64 {
        // Raw TSC ticks scaled by the calibrated factor: one rdtsc and one multiply.
        self.inner.delta_as_nanos(0, self.inner.raw())
    }
}

/// `std::time::Instant` as a clock: the OS monotonic clock, for platforms or
/// virtual machines where the TSC is not trusted.
///
/// ```
/// use sluicegate::{Clock, StdClock};
/// let clock = StdClock::default();
/// assert!(clock.now() < 1_000_000_000); // nanoseconds since the clock was made
/// ```
#[cfg(feature = "std")]
#[derive(Clone, Copy, Debug)]
pub struct StdClock {
    epoch: std::time::Instant,
}

#[cfg(feature = "std")]
impl Default for StdClock {
    fn default() -> Self {
        Self {
            epoch: std::time::Instant::now(),
        }
    }
}

#[cfg(feature = "std")]
impl Clock for StdClock {
    #[inline]
    fn now(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }
}

/// The clock used by constructors that take none.
#[cfg(feature = "std")]
pub type DefaultClock = QuantaClock;
