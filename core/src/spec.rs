//! [`Spec`]: an algorithm, its quotas and its parameters, validated once.
//!
//! A spec is what every front end builds a limiter from: the C ABI's configs, the
//! Python constructors, a rule in a policy file. It is checked when it is made, with
//! every bound defined here ([`Spec::MAX_LIMITS`], [`Spec::MAX_STRIPES`],
//! [`Spec::MAX_LOG_CAPACITY`]) and each quota validated by its algorithm's own
//! parameter check, so a spec that exists builds a limiter. It needs no heap: the
//! quotas sit in a fixed array.

use core::fmt;

use crate::error::ConfigError;
use crate::kind::Kind;
use crate::parse::{ParseError, ParseErrorKind, parse_quotas_into};
use crate::quota::Quota;

/// An algorithm, one to [`Spec::MAX_LIMITS`] quotas admitted all-or-nothing, and
/// the algorithm's own parameters (the shaper's max delay, the log's capacity).
///
/// ```
/// use sluicegate::{Kind, Quota, Spec};
/// let spec = Spec::parse(Kind::TokenBucket, "10/second; 1000/hour")?;
/// assert_eq!(spec.quotas(), [Quota::per_second(10), Quota::per_hour(1000)]);
/// assert_eq!(spec.capacity(), 10);
/// let shaper = Spec::new(Kind::Shaper, &[Quota::per_second(10).burst(1)])?
///     .with_max_delay_ns(1_000_000_000)?;
/// assert_eq!(shaper.capacity(), 11);
/// # Ok::<(), sluicegate::SpecError>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Spec {
    kind: Kind,
    len: usize,
    quotas: [Quota; Spec::MAX_LIMITS],
    max_delay_ns: u64,
    /// 0: exactly the limit.
    log_capacity: u64,
    capacity: u64,
}

/// The filler of unused quota slots (never validated, never read).
const UNUSED: Quota = Quota::from_nanos(0, 0);

impl Spec {
    /// The most quotas one spec (a compound limiter) holds.
    pub const MAX_LIMITS: usize = 8;
    /// The most stripes a striped limiter is split into.
    pub const MAX_STRIPES: usize = 64;
    /// The most slots a sliding log may have: 2²⁰ (8 MiB).
    pub const MAX_LOG_CAPACITY: u64 = 1 << 20;

    /// A spec of `kind` with `quotas` (all admitted together), validated now.
    ///
    /// ```
    /// use sluicegate::{ConfigError, Kind, Quota, Spec, SpecError};
    /// assert!(Spec::new(Kind::FixedWindow, &[Quota::per_second(5)]).is_ok());
    /// assert_eq!(Spec::new(Kind::FixedWindow, &[]), Err(SpecError::NoLimits));
    /// assert_eq!(
    ///     Spec::new(Kind::TokenBucket, &[Quota::per_second(1), Quota::per_second(0)]),
    ///     Err(SpecError::Config { index: 1, error: ConfigError::Zero { field: "amount" } })
    /// );
    /// ```
    pub fn new(kind: Kind, quotas: &[Quota]) -> Result<Spec, SpecError> {
        if quotas.is_empty() {
            return Err(SpecError::NoLimits);
        }
        if quotas.len() > Self::MAX_LIMITS {
            return Err(SpecError::TooManyLimits {
                max: Self::MAX_LIMITS,
            });
        }
        let caps = kind.caps();
        if quotas.len() > 1 && !caps.compound {
            return Err(SpecError::Unsupported {
                kind,
                what: "several limits",
            });
        }
        let mut all = [UNUSED; Self::MAX_LIMITS];
        all[..quotas.len()].copy_from_slice(quotas);
        Spec {
            kind,
            len: quotas.len(),
            quotas: all,
            max_delay_ns: 0,
            log_capacity: 0,
            capacity: 0,
        }
        .validated()
    }

    /// A spec of `kind` from a rate string: one limit (`"100/minute"`,
    /// `"100/s burst 200"`) or several separated by `;` (`"10/second; 1000/hour"`).
    ///
    /// ```
    /// use sluicegate::{Kind, Spec, SpecError};
    /// let spec = Spec::parse(Kind::SlidingWindow, "100/minute")?;
    /// assert_eq!(spec.capacity(), 100);
    /// assert!(matches!(Spec::parse(Kind::SlidingWindow, "100/month"), Err(SpecError::Parse(_))));
    /// assert_eq!(
    ///     Spec::parse(Kind::FixedWindow, "1/s; 2/s; 3/s; 4/s; 5/s; 6/s; 7/s; 8/s; 9/s"),
    ///     Err(SpecError::TooManyLimits { max: 8 })
    /// );
    /// # Ok::<(), SpecError>(())
    /// ```
    pub fn parse(kind: Kind, rate: &str) -> Result<Spec, SpecError> {
        let mut quotas = [UNUSED; Self::MAX_LIMITS];
        match parse_quotas_into(rate, &mut quotas) {
            Ok(n) => Self::new(kind, &quotas[..n]),
            Err(e) if e.kind == ParseErrorKind::TooManyLimits => Err(SpecError::TooManyLimits {
                max: Self::MAX_LIMITS,
            }),
            Err(e) => Err(SpecError::Parse(e)),
        }
    }

    /// Sets the shaper's longest granted wait (0: only requests that conform now).
    ///
    /// ```
    /// use sluicegate::{Kind, Quota, Spec, SpecError};
    /// let s = Spec::new(Kind::Shaper, &[Quota::per_second(1)])?.with_max_delay_ns(5)?;
    /// assert_eq!(s.max_delay_ns(), 5);
    /// let tb = Spec::new(Kind::TokenBucket, &[Quota::per_second(1)])?;
    /// assert!(matches!(tb.with_max_delay_ns(5), Err(SpecError::Unsupported { .. })));
    /// # Ok::<(), SpecError>(())
    /// ```
    pub fn with_max_delay_ns(self, ns: u64) -> Result<Spec, SpecError> {
        let supported = self.kind.caps().max_delay;
        self.with_option(supported, ns, "a max delay", |s| s.max_delay_ns = ns)
    }

    /// Sets the sliding log's number of slots, so its limit can later be raised up
    /// to it; 0 means exactly the limit. At most [`Self::MAX_LOG_CAPACITY`].
    ///
    /// ```
    /// use sluicegate::{ConfigError, Kind, Quota, Spec, SpecError};
    /// let s = Spec::new(Kind::SlidingLog, &[Quota::per_second(2)])?;
    /// assert_eq!(s.log_capacity(), 2);
    /// assert_eq!(s.with_log_capacity(10)?.log_capacity(), 10);
    /// assert_eq!(
    ///     s.with_log_capacity(1),
    ///     Err(SpecError::Config { index: 0, error: ConfigError::TooLarge { field: "limit", max: 1 } })
    /// );
    /// # Ok::<(), SpecError>(())
    /// ```
    pub fn with_log_capacity(self, cap: u64) -> Result<Spec, SpecError> {
        let supported = self.kind.caps().log_capacity;
        self.with_option(supported, cap, "a log capacity", |s| s.log_capacity = cap)
    }

    /// The algorithm.
    ///
    /// ```
    /// # use sluicegate::{Kind, Spec};
    /// assert_eq!(Spec::parse(Kind::Shaper, "1/s").unwrap().kind(), Kind::Shaper);
    /// ```
    pub fn kind(&self) -> Kind {
        self.kind
    }

    /// The quotas, in the order given (at least one).
    ///
    /// ```
    /// # use sluicegate::{Kind, Quota, Spec};
    /// let s = Spec::parse(Kind::FixedWindow, "1/s;5/m").unwrap();
    /// assert_eq!(s.quotas(), [Quota::per_second(1), Quota::per_minute(5)]);
    /// ```
    pub fn quotas(&self) -> &[Quota] {
        &self.quotas[..self.len]
    }

    /// The shaper's longest granted wait (0 for other kinds).
    ///
    /// ```
    /// # use sluicegate::{Kind, Spec};
    /// assert_eq!(Spec::parse(Kind::Shaper, "1/s").unwrap().max_delay_ns(), 0);
    /// ```
    pub fn max_delay_ns(&self) -> u64 {
        self.max_delay_ns
    }

    /// The sliding log's slots: the capacity set, or the limit (0 for other kinds).
    ///
    /// ```
    /// # use sluicegate::{Kind, Spec};
    /// assert_eq!(Spec::parse(Kind::SlidingLog, "7/s").unwrap().log_capacity(), 7);
    /// assert_eq!(Spec::parse(Kind::FixedWindow, "7/s").unwrap().log_capacity(), 0);
    /// ```
    pub fn log_capacity(&self) -> u64 {
        match (self.kind.caps().log_capacity, self.log_capacity) {
            (false, _) => 0,
            (true, 0) => self.quotas[0].amount(),
            (true, cap) => cap,
        }
    }

    /// The largest cost ever admissible at once: the smallest over the quotas of
    /// the burst (buckets), the limit (windows, log) or the burst plus what fits in
    /// the max delay (shaper).
    ///
    /// ```
    /// # use sluicegate::{Kind, Spec};
    /// assert_eq!(Spec::parse(Kind::TokenBucket, "10/s burst 20; 15/m").unwrap().capacity(), 15);
    /// ```
    pub fn capacity(&self) -> u64 {
        self.capacity
    }

    /// The log capacity as the caller set it (0: the limit).
    pub(crate) fn log_capacity_set(&self) -> Option<u64> {
        (self.log_capacity != 0).then_some(self.log_capacity)
    }

    /// This spec with other quotas of the same count and their capacity, which
    /// were validated when a spec holding them was made.
    #[cfg(feature = "alloc")]
    pub(crate) fn with_checked_quotas(
        &self,
        quotas: &[Quota; Spec::MAX_LIMITS],
        capacity: u64,
    ) -> Spec {
        let mut all = [UNUSED; Self::MAX_LIMITS];
        all[..self.len].copy_from_slice(&quotas[..self.len]);
        Spec {
            quotas: all,
            capacity,
            ..*self
        }
    }

    /// `self` with an option set by `set`: refused when the kind does not
    /// `support` it, unless `value` is 0 (the option's absence).
    fn with_option(
        mut self,
        supported: bool,
        value: u64,
        what: &'static str,
        set: impl FnOnce(&mut Spec),
    ) -> Result<Spec, SpecError> {
        if !supported && value != 0 {
            return Err(self.unsupported(what));
        }
        set(&mut self);
        self.validated()
    }

    /// Refuses a change from `self` to `new` on a live limiter when it changes
    /// what cannot change there: the kind, the number of limits, the max delay.
    #[cfg(feature = "alloc")]
    pub(crate) fn check_live_change(&self, new: &Spec) -> Result<(), SpecError> {
        let immutable = |field| Err(SpecError::Immutable { field });
        if new.kind() != self.kind() {
            return immutable("kind");
        }
        if new.quotas().len() != self.quotas().len() {
            return immutable("number of limits");
        }
        if new.max_delay_ns() != self.max_delay_ns() {
            return immutable("max delay");
        }
        Ok(())
    }

    /// The error refusing `what`, which this spec's kind does not support.
    pub(crate) fn unsupported(&self, what: &'static str) -> SpecError {
        SpecError::Unsupported {
            kind: self.kind,
            what,
        }
    }

    /// Checks every quota with its algorithm's own validation and records the
    /// capacity.
    fn validated(mut self) -> Result<Spec, SpecError> {
        let caps = self.kind.caps();
        let mut capacity = u64::MAX;
        for (index, q) in self.quotas().iter().enumerate() {
            if !caps.burst && q.burst_size() != q.amount() {
                return Err(self.unsupported("a burst different from the limit"));
            }
            let c = self
                .kind
                .validate(q, self.max_delay_ns, self.log_capacity_set())
                .map_err(|error| SpecError::Config { index, error })?;
            capacity = capacity.min(c);
        }
        self.capacity = capacity;
        Ok(self)
    }
}

/// The sliding log's validation of `quota` for a ring of `capacity` slots
/// (`None`: exactly the limit). Shared by [`crate::SlidingLog`] and [`Spec`].
pub(crate) const fn log_params(quota: &Quota, capacity: Option<u64>) -> Result<u64, ConfigError> {
    let capacity = match capacity {
        Some(c) => c,
        None => {
            if quota.amount() > Spec::MAX_LOG_CAPACITY {
                return Err(ConfigError::TooLarge {
                    field: "limit",
                    max: Spec::MAX_LOG_CAPACITY,
                });
            }
            if quota.amount() == 0 {
                return Err(ConfigError::Zero { field: "limit" });
            }
            quota.amount()
        }
    };
    if capacity > Spec::MAX_LOG_CAPACITY {
        return Err(ConfigError::TooLarge {
            field: "capacity",
            max: Spec::MAX_LOG_CAPACITY,
        });
    }
    if capacity == 0 {
        return Err(ConfigError::Zero { field: "capacity" });
    }
    match log_check(quota, capacity) {
        Ok(()) => Ok(capacity),
        Err(e) => Err(e),
    }
}

/// The checks of a sliding log quota against a ring of `capacity` slots.
pub(crate) const fn log_check(quota: &Quota, capacity: u64) -> Result<(), ConfigError> {
    if quota.amount() == 0 {
        return Err(ConfigError::Zero { field: "limit" });
    }
    if quota.period_ns() == 0 {
        return Err(ConfigError::Zero { field: "window" });
    }
    if quota.amount() > capacity {
        return Err(ConfigError::TooLarge {
            field: "limit",
            max: capacity,
        });
    }
    Ok(())
}

/// Why a [`Spec`] (or a limiter built from one) was rejected. The message names
/// the quota, the field and the bound.
///
/// ```
/// use sluicegate::{ConfigError, Kind, SpecError};
/// let e = SpecError::Config { index: 1, error: ConfigError::Zero { field: "amount" } };
/// assert_eq!(e.to_string(), "quota 1: amount must be greater than zero");
/// assert_eq!(SpecError::TooManyLimits { max: 8 }.to_string(), "too many limits: the maximum is 8");
/// let u = SpecError::Unsupported { kind: Kind::Shaper, what: "several limits" };
/// assert_eq!(u.to_string(), "shaper does not support several limits");
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum SpecError {
    /// Quota `index` (0-based, in the order given) was rejected by its algorithm.
    Config {
        /// Which quota.
        index: usize,
        /// What is wrong with it.
        error: ConfigError,
    },
    /// The rate string could not be parsed.
    Parse(ParseError),
    /// No quota at all.
    NoLimits,
    /// More quotas than [`Spec::MAX_LIMITS`].
    TooManyLimits {
        /// The most accepted.
        max: usize,
    },
    /// The kind does not support what was asked (see [`Kind::caps`]).
    Unsupported {
        /// The kind.
        kind: Kind,
        /// What it does not support.
        what: &'static str,
    },
    /// A stripe count of 0 or above [`Spec::MAX_STRIPES`].
    Stripes {
        /// The most accepted.
        max: usize,
    },
    /// A change a live limiter cannot take (its kind, its number of limits, the
    /// shaper's max delay, the log's capacity).
    Immutable {
        /// What would have changed.
        field: &'static str,
    },
    /// Memory for the limiter could not be allocated.
    Alloc {
        /// The size of the allocation that failed.
        bytes: usize,
    },
    /// A keyed [`crate::keyed::Pool`] already holds as many limits as it can.
    PoolFull {
        /// The most limits a pool holds at once.
        max: usize,
    },
}

impl fmt::Display for SpecError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Config { index, error } => write!(f, "quota {index}: {error}"),
            Self::Parse(e) => write!(f, "{e}"),
            Self::NoLimits => f.write_str("at least one limit is needed"),
            Self::TooManyLimits { max } => write!(f, "too many limits: the maximum is {max}"),
            Self::Unsupported { kind, what } => write!(f, "{kind} does not support {what}"),
            Self::Stripes { max } => write!(f, "stripes must be between 1 and {max}"),
            Self::Immutable { field } => write!(
                f,
                "{field} cannot be changed on a live limiter; build a new limiter instead"
            ),
            Self::Alloc { bytes } => write!(f, "could not allocate {bytes} bytes"),
            Self::PoolFull { max } => write!(
                f,
                "the keyed pool holds {max} limits already: drop some, or use another pool"
            ),
        }
    }
}

#[cfg(feature = "std")]
impl std::error::Error for SpecError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Config { error, .. } => Some(error),
            Self::Parse(e) => Some(e),
            _ => None,
        }
    }
}

impl From<ParseError> for SpecError {
    fn from(e: ParseError) -> Self {
        Self::Parse(e)
    }
}
