//! The one error type.

use core::fmt;

use sluicegate::{ConfigError, InsufficientCapacity};

/// Why a call failed.
///
/// The checks of a [`crate::RedisLimiter`] apply the limit's
/// [`crate::FailurePolicy`] to [`Error::Redis`], [`Error::Timeout`] and
/// [`Error::CircuitOpen`] and so never return them; the `try_` calls do.
///
/// ```
/// use sluicegate_redis::Error;
/// assert!(Error::Timeout.is_unavailable());
/// assert!(!Error::Reply("x".into()).is_unavailable());
/// ```
#[derive(Debug)]
#[non_exhaustive]
pub enum Error {
    /// The quota is invalid for the local algorithm.
    Config(ConfigError),
    /// The quota is valid locally but outside what the scripts compute exactly.
    Resolution {
        /// The offending field.
        field: &'static str,
        /// The bound.
        reason: &'static str,
    },
    /// The cost is above the limit's capacity: it can never be admitted.
    Capacity(InsufficientCapacity),
    /// Redis answered with an error, or the connection failed.
    Redis(redis::RedisError),
    /// No answer within the limit's timeout. The call is never replayed: it may or
    /// may not have run on the server.
    Timeout,
    /// The circuit breaker is open: Redis was not asked.
    CircuitOpen,
    /// The script's reply was not what it returns.
    Reply(String),
    /// The URL could not be used.
    Url(String),
}

impl Error {
    /// Whether this is Redis being unavailable (the cases a failure policy covers).
    ///
    /// ```
    /// # use sluicegate_redis::Error;
    /// assert!(Error::CircuitOpen.is_unavailable());
    /// ```
    pub fn is_unavailable(&self) -> bool {
        matches!(self, Self::Redis(_) | Self::Timeout | Self::CircuitOpen)
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Config(e) => write!(f, "invalid quota: {e}"),
            Self::Resolution { field, reason } => write!(f, "{field}: {reason}"),
            Self::Capacity(e) => write!(f, "{e}"),
            Self::Redis(e) => write!(f, "redis: {e}"),
            Self::Timeout => f.write_str("redis did not answer within the timeout"),
            Self::CircuitOpen => f.write_str("circuit breaker open: redis not asked"),
            Self::Reply(s) => write!(f, "unexpected script reply: {s}"),
            Self::Url(s) => write!(f, "bad redis url: {s}"),
        }
    }
}

impl std::error::Error for Error {}

impl From<redis::RedisError> for Error {
    fn from(e: redis::RedisError) -> Self {
        Self::Redis(e)
    }
}

impl From<InsufficientCapacity> for Error {
    fn from(e: InsufficientCapacity) -> Self {
        Self::Capacity(e)
    }
}
