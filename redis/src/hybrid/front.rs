//! The front limiter: charged only with admitted units, it denies what this
//! process alone has used up, without a round trip. For the buckets it runs on
//! the local clock; for the windows on this process's estimate of Redis time.

use sluicegate::keyed::{DefaultHashBuilder, Group, Keyed};
use sluicegate::{Decision, DefaultClock, Fixed, Gcra, InsufficientCapacity, Kind, Sliding};

use crate::error::{ConfigError, Error};
use crate::limit::Limit;

type Table<A, C> = Keyed<A, C, Box<[Group]>, DefaultHashBuilder>;

/// The front limiter: the bucket on the local clock, the windows on Redis time
/// as this process estimates it (see the module docs).
pub(crate) enum Front {
    Bucket(Table<Gcra, DefaultClock>),
    Fixed(Table<Fixed, ()>),
    Sliding(Table<Sliding, ()>),
}

fn invalid(e: sluicegate::ConfigError) -> Error {
    Error::Config(ConfigError::caused_by(
        "spec",
        "no local front limiter for it",
        e,
    ))
}

impl Front {
    /// The front of `limit`, holding `slots` keys.
    pub(crate) fn new(limit: &Limit, slots: usize) -> Result<Self, Error> {
        let quota = limit.quota();
        Ok(match limit.kind() {
            Kind::FixedWindow => Self::Fixed(Keyed::with_clock(quota, slots, ()).map_err(invalid)?),
            Kind::SlidingWindow => {
                Self::Sliding(Keyed::with_clock(quota, slots, ()).map_err(invalid)?)
            }
            _ => Self::Bucket(Keyed::new(quota, slots).map_err(invalid)?),
        })
    }

    /// The front's decision on `n` more units, at Redis time `at` (windows).
    pub(crate) fn peek(
        &self,
        key: &str,
        n: u64,
        at: u64,
    ) -> Result<Decision, InsufficientCapacity> {
        match self {
            Self::Bucket(t) => t.peek_n(key, n),
            Self::Fixed(t) => t.peek_n_at(key, n, at),
            Self::Sliding(t) => t.peek_n_at(key, n, at),
        }
    }

    /// Records `n` admitted units, at Redis time `at` (windows).
    pub(crate) fn charge(&self, key: &str, n: u64, at: u64) {
        let _ = match self {
            Self::Bucket(t) => t.check_n(key, n),
            Self::Fixed(t) => t.check_n_at(key, n, at),
            Self::Sliding(t) => t.check_n_at(key, n, at),
        };
    }
}
