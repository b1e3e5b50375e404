//! What a check answers when Redis cannot: per-limit failure policies.

use sluicegate::keyed::{DefaultHashBuilder, Group, Keyed};
use sluicegate::{Clock, Decision, DefaultClock, Fixed, Gcra, Kind, Quota, Shaping, Sliding};

use crate::error::{ConfigError, Error};
use crate::limit::Limit;

/// What a check answers while Redis is unavailable (an error, a timeout, or an
/// open circuit breaker).
///
/// ```
/// use sluicegate_redis::FailurePolicy;
/// let p = FailurePolicy::Local { share_percent: 25 };
/// assert_ne!(p, FailurePolicy::Open);
/// assert_eq!(FailurePolicy::default(), FailurePolicy::Local { share_percent: 10 });
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FailurePolicy {
    /// Admit everything (availability over the limit). `remaining` reads 0.
    Open,
    /// Deny everything (the limit over availability); `retry_after` is the
    /// breaker's cooldown.
    Closed,
    /// Decide with a local limiter per key holding `share_percent`% of the quota
    /// (rate and burst, at least 1). With `N` processes and a share of `100/N`%,
    /// the whole fleet still admits at most about the global quota.
    Local {
        /// The share of the global quota each process may admit on its own (1–100).
        share_percent: u8,
    },
}

impl Default for FailurePolicy {
    fn default() -> Self {
        Self::Local { share_percent: 10 }
    }
}

/// A rule file's `on_error`: `"open"`, `"closed"`, `"local"` (the default share,
/// 10%) or `"local:N"` (N% of the quota, 1–100).
///
/// ```
/// use sluicegate_redis::FailurePolicy;
/// assert_eq!("open".parse::<FailurePolicy>().unwrap(), FailurePolicy::Open);
/// assert_eq!("local:25".parse::<FailurePolicy>().unwrap(), FailurePolicy::Local { share_percent: 25 });
/// assert!("local:0".parse::<FailurePolicy>().is_err());
/// assert!("sometimes".parse::<FailurePolicy>().is_err());
/// ```
impl core::str::FromStr for FailurePolicy {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self, Error> {
        let bad = || {
            Error::Config(ConfigError::new(
                "on_error",
                format!("{s:?}: expected open, closed, local or local:N (N from 1 to 100)"),
            ))
        };
        match s {
            "open" => Ok(Self::Open),
            "closed" => Ok(Self::Closed),
            "local" => Ok(Self::default()),
            _ => match s.strip_prefix("local:").map(str::parse::<u8>) {
                Some(Ok(p @ 1..=100)) => Ok(Self::Local { share_percent: p }),
                _ => Err(bad()),
            },
        }
    }
}

/// The local limiters behind [`FailurePolicy::Local`]: a bounded keyed table of the
/// same algorithm at the configured share.
pub(crate) enum Fallback {
    Gcra(Table<Gcra>),
    Shaper(Table<Shaping>),
    Fixed(Table<Fixed>),
    Sliding(Table<Sliding>),
}

type Table<A> = Keyed<A, DefaultClock, Box<[Group]>, DefaultHashBuilder>;

impl core::fmt::Debug for Fallback {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str("Fallback")
    }
}

/// `quota` scaled to `share`% (rate and burst, each at least 1).
pub(crate) fn share(quota: Quota, percent: u8) -> Quota {
    let p = u64::from(percent.clamp(1, 100));
    let scale = |v: u64| (v.saturating_mul(p) / 100).max(1);
    Quota::from_nanos(scale(quota.amount()), quota.period_ns()).burst(scale(quota.burst_size()))
}

impl Fallback {
    pub(crate) fn new(limit: &Limit, percent: u8, keys: usize) -> Result<Self, Error> {
        let q = share(limit.quota(), percent);
        let keys = keys.max(16);
        let invalid = |e| {
            Error::Config(ConfigError::caused_by(
                "share_percent",
                "the local share of this quota is not a valid local limit",
                e,
            ))
        };
        Ok(match limit.kind() {
            Kind::Shaper => Self::Shaper(
                Keyed::new(q, keys)
                    .map_err(invalid)?
                    .with_max_delay(limit.max_delay_ns()),
            ),
            Kind::FixedWindow => Self::Fixed(Keyed::new(q, keys).map_err(invalid)?),
            Kind::SlidingWindow => Self::Sliding(Keyed::new(q, keys).map_err(invalid)?),
            _ => Self::Gcra(Keyed::new(q, keys).map_err(invalid)?),
        })
    }

    /// The local decision and (shaper) delay; a cost above the local share's
    /// capacity is a denial that never clears (it would always be one).
    pub(crate) fn check(&self, key: &str, n: u64, consume: bool) -> (Decision, u64) {
        let never = |capacity: u64| Decision {
            allowed: false,
            remaining: 0,
            retry_after_ns: u64::MAX,
            reset_after_ns: 0,
            limit: capacity,
        };
        macro_rules! run {
            ($k:expr) => {{
                let r = if consume {
                    $k.check_n(key, n)
                } else {
                    $k.peek_n(key, n)
                };
                (r.unwrap_or_else(|e| never(e.capacity)), 0)
            }};
        }
        match self {
            Self::Gcra(k) => run!(k),
            Self::Fixed(k) => run!(k),
            Self::Sliding(k) => run!(k),
            Self::Shaper(k) => {
                if !consume {
                    return run!(k);
                }
                match k.reserve_n_at(key, n, k.clock().now()) {
                    Ok(r) => (*r.decision(), r.delay_ns()),
                    Err(e) => (never(e.capacity), 0),
                }
            }
        }
    }
}
