//! What a check answers.

use core::time::Duration;

/// The outcome of a check, with everything a caller needs for response headers
/// (`Retry-After`, `RateLimit`, `RateLimit-Policy`).
///
/// ```
/// use sluicegate::{Quota, TokenBucket};
/// let tb = TokenBucket::with_clock(Quota::per_second(2), ()).unwrap();
/// let d = tb.check_at(0);
/// assert!(d.allowed);
/// assert_eq!((d.remaining, d.limit), (1, 2));
/// assert_eq!(d.reset_after().as_millis(), 500);
/// tb.check_at(0);
/// let denied = tb.check_at(0);
/// assert!(!denied.allowed);
/// assert_eq!(denied.retry_after().as_millis(), 500);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Decision {
    /// Whether the request was admitted (and, for a consuming call, charged).
    pub allowed: bool,
    /// Units that could be taken right now, after this decision.
    pub remaining: u64,
    /// Nanoseconds until a request of the same cost would be admitted; 0 when allowed.
    pub retry_after_ns: u64,
    /// Nanoseconds until the limiter is back to its fresh, full state.
    pub reset_after_ns: u64,
    /// The burst or limit: the most units the limiter admits at once.
    pub limit: u64,
}

impl Decision {
    /// The answer to a cost that can never be admitted (it exceeds `limit`, the
    /// most the limiter admits at once): denied, nothing remaining, never retry.
    ///
    /// ```
    /// # use sluicegate::Decision;
    /// let d = Decision::never(10);
    /// assert!(!d.allowed);
    /// assert_eq!((d.remaining, d.retry_after_ns, d.limit), (0, u64::MAX, 10));
    /// ```
    #[inline]
    pub const fn never(limit: u64) -> Decision {
        Decision {
            allowed: false,
            remaining: 0,
            retry_after_ns: u64::MAX,
            reset_after_ns: 0,
            limit,
        }
    }

    /// [`Self::retry_after_ns`] as a [`Duration`].
    ///
    /// ```
    /// # use sluicegate::Decision;
    /// let d = Decision { allowed: false, remaining: 0, retry_after_ns: 1_500, reset_after_ns: 9, limit: 1 };
    /// assert_eq!(d.retry_after().as_nanos(), 1_500);
    /// ```
    #[inline]
    pub const fn retry_after(&self) -> Duration {
        Duration::from_nanos(self.retry_after_ns)
    }

    /// [`Self::reset_after_ns`] as a [`Duration`].
    ///
    /// ```
    /// # use sluicegate::Decision;
    /// let d = Decision { allowed: true, remaining: 0, retry_after_ns: 0, reset_after_ns: 2_000, limit: 1 };
    /// assert_eq!(d.reset_after().as_micros(), 2);
    /// ```
    #[inline]
    pub const fn reset_after(&self) -> Duration {
        Duration::from_nanos(self.reset_after_ns)
    }

    /// Whole seconds to put in a `Retry-After` header: rounded up, so a client that
    /// obeys it is never early.
    ///
    /// ```
    /// # use sluicegate::Decision;
    /// let d = Decision { allowed: false, remaining: 0, retry_after_ns: 1_000_000_001, reset_after_ns: 0, limit: 1 };
    /// assert_eq!(d.retry_after_secs_ceil(), 2);
    /// ```
    #[inline]
    pub const fn retry_after_secs_ceil(&self) -> u64 {
        self.retry_after_ns.div_ceil(1_000_000_000)
    }
}

/// `check_at`'s mapping of a `check_n_at` answer: a cost that can never fit is a
/// denial ([`Decision::never`]).
#[inline(always)]
pub(crate) fn or_never(r: Result<Decision, crate::error::InsufficientCapacity>) -> Decision {
    r.unwrap_or_else(|e| Decision::never(e.capacity))
}
