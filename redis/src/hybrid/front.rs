//! The front limiter: charged only with admitted units, it denies what this
//! process alone has used up, without a round trip. For the buckets it runs on
//! the local clock; for the windows on this process's estimate of Redis time.

use sluicegate::keyed::AnyKeyed;
use sluicegate::{Clock, Decision, DefaultClock, InsufficientCapacity};

use crate::error::{ConfigError, Error};
use crate::limit::Limit;

/// The front limiter: a core keyed table of the limit's own spec, on the local
/// clock (buckets) or on Redis time as this process estimates it (windows:
/// their state is aligned to Redis' window boundaries; see the module docs).
pub(crate) struct Front {
    table: AnyKeyed<DefaultClock>,
    /// Whether the limit's state is on Redis time (a window script's).
    redis_time: bool,
}

impl core::fmt::Debug for Front {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Front")
            .field("redis_time", &self.redis_time)
            .finish_non_exhaustive()
    }
}

impl Front {
    /// The front of `limit`, holding `slots` keys (allocated now, fallibly).
    pub(crate) fn new(limit: &Limit, slots: usize) -> Result<Self, Error> {
        let Some(spec) = limit.spec() else {
            return Err(Error::Config(ConfigError::new(
                "spec",
                "hybrid mode needs a local limiter of the same quota, and this one is past the local layout",
            )));
        };
        let table = AnyKeyed::with_clock(&spec, slots, DefaultClock::default()).map_err(|e| {
            Error::Config(ConfigError::caused_by(
                "max_keys",
                "no local front limiter for it",
                e,
            ))
        })?;
        Ok(Self {
            table,
            redis_time: limit.params.window_ns != 0,
        })
    }

    /// The instant the front decides at: `at` (Redis time) for the windows, the
    /// local clock for the buckets.
    fn now(&self, at: u64) -> u64 {
        if self.redis_time {
            at
        } else {
            self.table.clock().now()
        }
    }

    /// The front's decision on `n` more units, at Redis time `at` (windows).
    pub(crate) fn peek(
        &self,
        key: &str,
        n: u64,
        at: u64,
    ) -> Result<Decision, InsufficientCapacity> {
        Ok(self.table.peek_n_at(key, n, self.now(at))?.decision)
    }

    /// Records `n` admitted units, at Redis time `at` (windows).
    pub(crate) fn charge(&self, key: &str, n: u64, at: u64) {
        let _ = self.table.check_n_at(key, n, self.now(at));
    }
}
