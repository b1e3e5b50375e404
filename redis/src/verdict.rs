//! What a check answers: the decision, who decided, and the counters of who
//! decided.

use core::sync::atomic::{AtomicU64, Ordering};

use sluicegate::Decision;

/// Who answered a check.
///
/// ```
/// use sluicegate_redis::Source;
/// assert_ne!(Source::Redis, Source::FailOpen);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Source {
    /// The Redis script.
    Redis,
    /// Redis unavailable, [`crate::FailurePolicy::Open`].
    FailOpen,
    /// Redis unavailable, [`crate::FailurePolicy::Closed`].
    FailClosed,
    /// Redis unavailable, [`crate::FailurePolicy::Local`].
    LocalFallback,
    /// Hybrid mode: spent from a local lease, no round trip.
    Lease,
    /// Hybrid mode: denied locally (the local front limiter, or the negative cache
    /// after a Redis denial), no round trip.
    LocalDenial,
}

/// A decision and where it came from.
///
/// ```
/// use sluicegate_redis::{Source, Verdict};
/// use sluicegate::Decision;
/// let d = Decision { allowed: true, remaining: 1, retry_after_ns: 0, reset_after_ns: 5, limit: 2 };
/// let v = Verdict { decision: d, source: Source::Redis, delay_ns: 0 };
/// assert!(v.decision.allowed && v.is_authoritative());
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Verdict {
    /// The decision, with the same fields and meaning as the local limiters'.
    pub decision: Decision,
    /// Who decided.
    pub source: Source,
    /// For a shaper: how long the granted request must wait, in nanoseconds.
    pub delay_ns: u64,
}

impl Verdict {
    /// Whether Redis (or a lease it granted) decided, as opposed to a failure policy.
    ///
    /// ```
    /// # use sluicegate_redis::{Source, Verdict};
    /// # use sluicegate::Decision;
    /// # let d = Decision { allowed: true, remaining: 1, retry_after_ns: 0, reset_after_ns: 5, limit: 2 };
    /// assert!(!Verdict { decision: d, source: Source::FailOpen, delay_ns: 0 }.is_authoritative());
    /// ```
    pub fn is_authoritative(&self) -> bool {
        matches!(
            self.source,
            Source::Redis | Source::Lease | Source::LocalDenial
        )
    }
}

/// Counters of a [`crate::RedisLimiter`]: its answers by source, the per-key
/// errors, and how often a circuit opened. Read with
/// [`crate::RedisLimiter::stats`].
///
/// ```
/// use sluicegate_redis::RedisStats;
/// let s = RedisStats { redis: 9, fail_open: 1, ..RedisStats::default() };
/// assert_eq!(s.policy_answers(), 1);
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RedisStats {
    /// Decisions made by the script.
    pub redis: u64,
    /// Answers of [`crate::FailurePolicy::Open`].
    pub fail_open: u64,
    /// Answers of [`crate::FailurePolicy::Closed`].
    pub fail_closed: u64,
    /// Answers of [`crate::FailurePolicy::Local`].
    pub local_fallback: u64,
    /// Checks failed by a per-key data error ([`crate::Error::Data`],
    /// [`crate::Error::Reply`]).
    pub data_errors: u64,
    /// Times a circuit breaker opened (the server's, or any cluster master's).
    pub circuit_opened: u64,
    /// Script calls the blocking API made on a connection of its own pool,
    /// written and read by the calling thread with no runtime thread involved
    /// (see [`crate::blocking`]); the other calls went through the multiplexed
    /// connection.
    pub direct_calls: u64,
}

impl RedisStats {
    /// Answers given by the failure policy, whichever it is.
    ///
    /// ```
    /// # use sluicegate_redis::RedisStats;
    /// assert_eq!(RedisStats::default().policy_answers(), 0);
    /// ```
    pub fn policy_answers(&self) -> u64 {
        self.fail_open + self.fail_closed + self.local_fallback
    }
}

/// The live counters behind [`RedisStats`].
#[derive(Debug, Default)]
pub(crate) struct Counters {
    redis: AtomicU64,
    fail_open: AtomicU64,
    fail_closed: AtomicU64,
    local_fallback: AtomicU64,
    data_errors: AtomicU64,
}

impl Counters {
    pub(crate) fn answered(&self, source: Source) {
        let c = match source {
            Source::Redis => &self.redis,
            Source::FailOpen => &self.fail_open,
            Source::FailClosed => &self.fail_closed,
            Source::LocalFallback => &self.local_fallback,
            Source::Lease | Source::LocalDenial => return,
        };
        c.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn data_error(&self) {
        self.data_errors.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn snapshot(&self, circuit_opened: u64, direct_calls: u64) -> RedisStats {
        let r = |c: &AtomicU64| c.load(Ordering::Relaxed);
        RedisStats {
            redis: r(&self.redis),
            fail_open: r(&self.fail_open),
            fail_closed: r(&self.fail_closed),
            local_fallback: r(&self.local_fallback),
            data_errors: r(&self.data_errors),
            circuit_opened,
            direct_calls,
        }
    }
}
