//! Errors: a bad configuration, and a request that can never succeed.

use core::fmt;

/// A quota or limiter configuration that cannot be used.
///
/// Every variant names the offending field; bounds carry the largest accepted value,
/// so the message tells the user what to change.
///
/// ```
/// use sluicegate::{ConfigError, Quota, TokenBucket};
/// let err = TokenBucket::with_clock(Quota::per_second(0), ()).unwrap_err();
/// assert_eq!(err, ConfigError::Zero { field: "amount" });
/// assert_eq!(err.to_string(), "amount must be greater than zero");
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ConfigError {
    /// A field that must be positive was zero.
    Zero {
        /// The field: `amount`, `period`, `burst`, `limit` or `window`.
        field: &'static str,
    },
    /// A floating-point rate was NaN or infinite.
    NotFinite {
        /// The field.
        field: &'static str,
    },
    /// A floating-point rate was negative.
    Negative {
        /// The field.
        field: &'static str,
    },
    /// A value does not fit the limiter's 64-bit state word or its arithmetic.
    TooLarge {
        /// The field.
        field: &'static str,
        /// The largest value accepted for this field with the other fields as given.
        max: u64,
    },
    /// The rate is faster than one unit per nanosecond, the clock's resolution.
    TooFast {
        /// The field.
        field: &'static str,
    },
    /// The field cannot change on a live limiter (the state word's layout depends on it).
    Immutable {
        /// The field.
        field: &'static str,
    },
    /// The memory a caller-sized structure needs (a keyed table, a sliding log's
    /// ring) could not be allocated, or its size overflows `usize`
    /// (`bytes = usize::MAX`). Nothing was allocated.
    Alloc {
        /// The size of the allocation that failed.
        bytes: usize,
    },
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Self::Zero { field } => write!(f, "{field} must be greater than zero"),
            Self::NotFinite { field } => write!(f, "{field} must be a finite number"),
            Self::Negative { field } => write!(f, "{field} must not be negative"),
            Self::TooLarge { field, max } => {
                write!(
                    f,
                    "{field} is too large for this limiter: the maximum is {max}"
                )
            }
            Self::TooFast { field } => write!(
                f,
                "{field} is faster than one unit per nanosecond, the clock's resolution"
            ),
            Self::Immutable { field } => write!(
                f,
                "{field} cannot be changed on a live limiter; build a new limiter instead"
            ),
            Self::Alloc { bytes } => write!(f, "could not allocate {bytes} bytes"),
        }
    }
}

#[cfg(feature = "std")]
impl std::error::Error for ConfigError {}

/// A request whose cost exceeds what the limiter can ever admit at once
/// (the burst, capacity or limit). It can never succeed, so it is not a denial.
///
/// ```
/// use sluicegate::{InsufficientCapacity, Quota, TokenBucket};
/// let tb = TokenBucket::with_clock(Quota::per_second(10), ()).unwrap();
/// assert_eq!(
///     tb.check_n_at(11, 0),
///     Err(InsufficientCapacity { requested: 11, capacity: 10 })
/// );
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct InsufficientCapacity {
    /// The cost that was asked for.
    pub requested: u64,
    /// The largest cost this limiter can admit at once.
    pub capacity: u64,
}

impl fmt::Display for InsufficientCapacity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "a request of {} exceeds the limiter's capacity of {} and can never be admitted",
            self.requested, self.capacity
        )
    }
}

#[cfg(feature = "std")]
impl std::error::Error for InsufficientCapacity {}
