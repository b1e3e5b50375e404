//! What a check answers when Redis cannot: per-limit failure policies.

use sluicegate::keyed::AnyKeyed;
use sluicegate::{Decision, DefaultClock, Quota, Spec, SpecError};

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

/// The local limiter behind [`FailurePolicy::Local`]: a bounded core keyed table
/// of the same kind at the configured share of the quota.
pub(crate) struct Fallback {
    table: AnyKeyed<DefaultClock>,
}

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
    /// The table of `keys` keys (at least 16), allocated now and fallibly: an
    /// allocation failure is an [`Error::Config`] whose
    /// [`ConfigError::spec_error`] is [`SpecError::Alloc`].
    pub(crate) fn new(limit: &Limit, percent: u8, keys: usize) -> Result<Self, Error> {
        let q = share(limit.quota(), percent);
        let spec = Spec::new(limit.kind(), &[q]).and_then(|s| match limit.max_delay_ns() {
            0 => Ok(s),
            ns => s.with_max_delay_ns(ns),
        });
        let spec = spec.map_err(|e| {
            Error::Config(ConfigError::caused_by(
                "share_percent",
                "the local share of this quota is not a valid local limit",
                e,
            ))
        })?;
        let table = AnyKeyed::with_clock(&spec, keys.max(16), DefaultClock::default()).map_err(
            |e| match e {
                SpecError::Alloc { .. } => Error::Config(ConfigError::caused_by(
                    "fallback_keys",
                    "the local fallback table could not be allocated",
                    e,
                )),
                e => Error::Config(ConfigError::caused_by(
                    "share_percent",
                    "the local share of this quota is not a valid local limit",
                    e,
                )),
            },
        )?;
        Ok(Self { table })
    }

    /// The local decision and (shaper) delay; a cost above the local share's
    /// capacity is a denial that never clears (it would always be one).
    pub(crate) fn check(&self, key: &str, n: u64, consume: bool) -> (Decision, u64) {
        let r = if consume {
            self.table.check_n(key, n)
        } else {
            self.table.peek_n(key, n)
        };
        match r {
            Ok(o) => (o.decision, if consume { o.delay_ns } else { 0 }),
            Err(e) => (Decision::never(e.capacity), 0),
        }
    }
}
