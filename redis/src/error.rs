//! The one error type, and the classification that decides what a failure
//! touches: the breaker (Redis unavailable) or only the check that hit it (a
//! per-key data error).

use core::fmt;
use std::sync::Arc;

use redis::{ErrorKind, RedisError, ServerErrorKind};
use sluicegate::{InsufficientCapacity, SpecError};

/// Why a call failed.
///
/// The checks of a [`crate::RedisLimiter`] apply the limit's
/// [`crate::FailurePolicy`] to the errors for which [`Error::is_unavailable`] is
/// true ([`Error::Redis`], [`Error::Timeout`], [`Error::CircuitOpen`]) and so
/// never return them; the `try_` calls do. A per-key data error
/// ([`Error::Data`], [`Error::Reply`]) fails that one check, is returned as an
/// error, and never counts against the circuit breaker.
///
/// ```
/// use std::error::Error as _;
/// use sluicegate_redis::Error;
/// assert!(Error::Timeout.is_unavailable());
/// assert!(!Error::Reply("x".into()).is_unavailable());
/// // A configuration error keeps its cause.
/// let e = sluicegate_redis::Limit::parse("token_bucket", "0/s").unwrap_err();
/// assert!(matches!(e, Error::Config(_)) && e.source().is_some());
/// ```
#[derive(Clone, Debug)]
#[non_exhaustive]
pub enum Error {
    /// The limit, the URL or a setting cannot be used: found at construction,
    /// never sent to Redis.
    Config(ConfigError),
    /// The cost is above the limit's capacity: it can never be admitted.
    Capacity(InsufficientCapacity),
    /// Redis is unavailable: the connection failed or broke, or the server
    /// answered with an error about itself (loading, cluster down, read-only,
    /// authentication). Counts against the circuit breaker.
    Redis(RedisError),
    /// Redis answered this key's call with an error of the key's own (a value of
    /// another type at the key, such as `WRONGTYPE`, or a script error over its
    /// value): this check fails, the others go on. Not a breaker failure.
    Data(RedisError),
    /// No answer within the limit's timeout. The call is never replayed: it may or
    /// may not have run on the server.
    Timeout,
    /// The circuit breaker is open: Redis was not asked.
    CircuitOpen,
    /// The script's reply was not what it returns (a per-key data error).
    Reply(String),
}

/// What is wrong with a configuration: the field, the reason, and the error
/// underneath when there is one ([`std::error::Error::source`]).
///
/// ```
/// use sluicegate_redis::{Backend, Error};
/// let Err(Error::Config(c)) = Backend::from_url("redis://127.0.0.1:99999") else { panic!() };
/// assert_eq!(c.field(), "url");
/// assert!(c.to_string().contains("port"));
/// ```
#[derive(Clone, Debug)]
pub struct ConfigError {
    field: &'static str,
    reason: String,
    source: Option<Arc<dyn std::error::Error + Send + Sync>>,
}

impl ConfigError {
    pub(crate) fn new(field: &'static str, reason: impl Into<String>) -> Self {
        Self {
            field,
            reason: reason.into(),
            source: None,
        }
    }

    pub(crate) fn caused_by(
        field: &'static str,
        reason: impl Into<String>,
        source: impl std::error::Error + Send + Sync + 'static,
    ) -> Self {
        Self {
            field,
            reason: reason.into(),
            source: Some(Arc::new(source)),
        }
    }

    /// The setting at fault (`"spec"`, `"url"`, `"prefix"`, `"burst"`, …).
    ///
    /// ```
    /// # use sluicegate_redis::{Error, Limit};
    /// let Err(Error::Config(c)) = Limit::parse("token_bucket", "") else { panic!() };
    /// assert_eq!(c.field(), "spec");
    /// ```
    pub fn field(&self) -> &'static str {
        self.field
    }

    /// Why it cannot be used.
    ///
    /// ```
    /// # use sluicegate_redis::{Error, Limit};
    /// let Err(Error::Config(c)) = Limit::parse("sliding_log", "5/s") else { panic!() };
    /// assert!(c.reason().contains("Redis"));
    /// ```
    pub fn reason(&self) -> &str {
        &self.reason
    }
}

impl ConfigError {
    /// The core's spec error underneath, when the spec or its quota was invalid
    /// (bindings map it to their own codes).
    ///
    /// ```
    /// # use sluicegate_redis::{Error, Limit};
    /// let Err(Error::Config(c)) = Limit::parse("token_bucket", "0/s") else { panic!() };
    /// assert!(c.spec_error().is_some());
    /// ```
    pub fn spec_error(&self) -> Option<&SpecError> {
        self.source
            .as_deref()
            .and_then(|e| e.downcast_ref::<SpecError>())
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.field, self.reason)?;
        if let Some(s) = &self.source {
            write!(f, ": {s}")?;
        }
        Ok(())
    }
}

impl std::error::Error for ConfigError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.source
            .as_deref()
            .map(|e| e as &(dyn std::error::Error + 'static))
    }
}

impl Error {
    /// Whether this is Redis being unavailable (the cases a failure policy covers
    /// and the circuit breaker counts).
    ///
    /// ```
    /// # use sluicegate_redis::Error;
    /// assert!(Error::CircuitOpen.is_unavailable());
    /// ```
    pub fn is_unavailable(&self) -> bool {
        matches!(self, Self::Redis(_) | Self::Timeout | Self::CircuitOpen)
    }

    /// A Redis error, classified: about this key's data, or about the server.
    pub(crate) fn from_redis(e: RedisError) -> Self {
        if e.is_timeout() {
            Self::Timeout
        } else if is_data_error(&e) {
            Self::Data(e)
        } else {
            Self::Redis(e)
        }
    }

    pub(crate) fn spec(e: SpecError) -> Self {
        Self::Config(ConfigError::caused_by("spec", "invalid limit", e))
    }
}

/// Server error codes that are about the server, not about the key (an `ERR` or
/// an unknown code from a script run is the key's).
const SERVER_WIDE: &[&str] = &[
    "NOAUTH",
    "WRONGPASS",
    "NOPERM",
    "OOM",
    "MISCONF",
    "BUSY",
    "LOADING",
    "READONLY",
    "MASTERDOWN",
    "CLUSTERDOWN",
    "TRYAGAIN",
];

/// Whether Redis answered with an error about the key's value or the script's
/// run over it (`WRONGTYPE`, `ERR … user_script …`): the connection and the
/// server are fine.
fn is_data_error(e: &RedisError) -> bool {
    let server_wide = e.code().is_some_and(|c| SERVER_WIDE.contains(&c));
    // Anything else (I/O, a reply that does not parse: not a Redis server on
    // the port, or a broken stream) is about the connection.
    matches!(
        e.kind(),
        ErrorKind::Server(ServerErrorKind::ResponseError) | ErrorKind::Extension
    ) && !server_wide
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Config(e) => write!(f, "configuration: {e}"),
            Self::Capacity(e) => write!(f, "{e}"),
            Self::Redis(_) => f.write_str("redis unavailable"),
            Self::Data(_) => f.write_str("redis refused this key's call"),
            Self::Timeout => f.write_str("redis did not answer within the timeout"),
            Self::CircuitOpen => f.write_str("circuit breaker open: redis not asked"),
            Self::Reply(s) => write!(f, "unexpected script reply: {s}"),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Config(e) => Some(e),
            Self::Capacity(e) => Some(e),
            Self::Redis(e) | Self::Data(e) => Some(e),
            Self::Timeout | Self::CircuitOpen | Self::Reply(_) => None,
        }
    }
}

impl From<InsufficientCapacity> for Error {
    fn from(e: InsufficientCapacity) -> Self {
        Self::Capacity(e)
    }
}

impl From<ConfigError> for Error {
    fn from(e: ConfigError) -> Self {
        Self::Config(e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn server(msg: &str) -> Error {
        let v = redis::parse_redis_value(format!("-{msg}\r\n").as_bytes()).unwrap();
        Error::from_redis(v.extract_error().unwrap_err())
    }

    #[test]
    fn key_errors_are_data_server_errors_are_unavailability() {
        for data in [
            "WRONGTYPE Operation against a key holding the wrong kind of value",
            "ERR user_script:12: attempt to perform arithmetic on local 'f' (a string value)",
        ] {
            assert!(matches!(server(data), Error::Data(_)), "{data}");
        }
        for down in [
            "NOAUTH Authentication required.",
            "LOADING Redis is loading the dataset in memory",
            "CLUSTERDOWN The cluster is down",
            "READONLY You can't write against a read only replica.",
            "OOM command not allowed when used memory > 'maxmemory'.",
        ] {
            let e = server(down);
            assert!(e.is_unavailable(), "{down}: {e:?}");
        }
    }
}
