//! [`Kind`]: the one list of algorithms, with their canonical names and what each
//! supports, as data.
//!
//! Every front end derives from this list: the C ABI's algorithm numbers, the
//! Python classes, rule files, the CLI and the Redis scripts all name an algorithm
//! by [`Kind::name`], and ask [`Kind::caps`] what it accepts instead of keeping a
//! list of their own. Adding an algorithm means adding it here (and its module);
//! see ARCHITECTURE.md for the whole list of files.

use core::fmt;
use core::str::FromStr;

use crate::error::ConfigError;
use crate::fixed_window::FixedParams;
use crate::quota::Quota;
use crate::shaper::ShaperParams;
use crate::sliding_window::SlidingParams;
use crate::spec::log_params;
use crate::token_bucket::GcraParams;

/// An algorithm.
///
/// ```
/// use sluicegate::Kind;
/// assert_eq!(Kind::TokenBucket.name(), "token_bucket");
/// assert_eq!("sliding_log".parse::<Kind>(), Ok(Kind::SlidingLog));
/// assert!(Kind::Shaper.caps().max_delay);
/// assert!(!Kind::SlidingLog.caps().compound);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Kind {
    /// Token bucket (GCRA): refills `amount` per `period`, holds `burst`.
    TokenBucket,
    /// Leaky bucket meter: leaks `amount` per `period`, holds `burst` (the token
    /// bucket's function under its own vocabulary).
    LeakyBucket,
    /// Leaky bucket shaper: spaces requests `period / amount` apart and tells each
    /// how long to wait, up to a max delay.
    Shaper,
    /// Fixed window counter: `amount` per aligned window of `period`.
    FixedWindow,
    /// Sliding window counter: `amount` per sliding window of `period` (estimate).
    SlidingWindow,
    /// Sliding window log: exactly `amount` per any `period` (8 bytes per unit).
    SlidingLog,
}

/// What a [`Kind`] supports. Front ends read these instead of matching on kinds.
///
/// ```
/// use sluicegate::Kind;
/// let striped: Vec<Kind> = Kind::ALL.into_iter().filter(|k| k.caps().striped).collect();
/// assert_eq!(striped, [Kind::TokenBucket]);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Caps {
    /// A burst different from the amount (buckets); windows count `amount` only.
    pub burst: bool,
    /// One limiter per key in a keyed table (the state is one word).
    pub keyed: bool,
    /// Several limits checked all-or-nothing.
    pub compound: bool,
    /// Split over cache-padded stripes for one very hot limit.
    pub striped: bool,
    /// A max queueing delay (the shaper's `max_delay_ns`).
    pub max_delay: bool,
    /// A Redis script deciding exactly like the local limiter.
    pub redis: bool,
    /// A log capacity above the limit, so the limit can later be raised.
    pub log_capacity: bool,
}

/// What every single-word bucket supports.
const BUCKET: Caps = Caps {
    burst: true,
    keyed: true,
    compound: true,
    striped: false,
    max_delay: false,
    redis: true,
    log_capacity: false,
};

/// What every single-word window supports.
const WINDOW: Caps = Caps {
    burst: false,
    ..BUCKET
};

impl Kind {
    /// Every kind, in the order of the C ABI's numbers (`SLUICEGATE_TOKEN_BUCKET = 0`, ...).
    ///
    /// ```
    /// use sluicegate::Kind;
    /// assert_eq!(Kind::ALL.len(), 6);
    /// assert_eq!(Kind::ALL[0], Kind::TokenBucket);
    /// ```
    pub const ALL: [Kind; 6] = [
        Kind::TokenBucket,
        Kind::LeakyBucket,
        Kind::Shaper,
        Kind::FixedWindow,
        Kind::SlidingWindow,
        Kind::SlidingLog,
    ];

    /// The canonical snake_case name, the same in every language and in Redis.
    ///
    /// ```
    /// use sluicegate::Kind;
    /// assert_eq!(Kind::SlidingWindow.name(), "sliding_window");
    /// assert_eq!(Kind::LeakyBucket.to_string(), "leaky_bucket");
    /// ```
    pub const fn name(self) -> &'static str {
        match self {
            Kind::TokenBucket => "token_bucket",
            Kind::LeakyBucket => "leaky_bucket",
            Kind::Shaper => "shaper",
            Kind::FixedWindow => "fixed_window",
            Kind::SlidingWindow => "sliding_window",
            Kind::SlidingLog => "sliding_log",
        }
    }

    /// What this kind supports.
    ///
    /// ```
    /// use sluicegate::Kind;
    /// assert!(Kind::TokenBucket.caps().burst);
    /// assert!(!Kind::FixedWindow.caps().burst);
    /// assert!(Kind::SlidingLog.caps().log_capacity);
    /// ```
    pub const fn caps(self) -> Caps {
        match self {
            Kind::TokenBucket => Caps {
                striped: true,
                ..BUCKET
            },
            Kind::LeakyBucket => BUCKET,
            Kind::Shaper => Caps {
                compound: false,
                max_delay: true,
                ..BUCKET
            },
            Kind::FixedWindow | Kind::SlidingWindow => WINDOW,
            Kind::SlidingLog => Caps {
                keyed: false,
                compound: false,
                redis: false,
                log_capacity: true,
                ..WINDOW
            },
        }
    }

    /// The kind named `s` (exactly a [`Kind::name`]), if any.
    ///
    /// ```
    /// use sluicegate::Kind;
    /// assert_eq!(Kind::from_name("shaper"), Some(Kind::Shaper));
    /// assert_eq!(Kind::from_name("Shaper"), None);
    /// ```
    pub fn from_name(s: &str) -> Option<Kind> {
        Kind::ALL.into_iter().find(|k| k.name() == s)
    }

    /// The limiter a validated `spec` of this kind describes.
    #[cfg(feature = "alloc")]
    pub(crate) fn engine(
        self,
        spec: &crate::spec::Spec,
    ) -> Result<alloc::boxed::Box<dyn crate::engine::Engine>, crate::spec::SpecError> {
        use crate::engine::{log, shaper, words};
        match self {
            Kind::TokenBucket => words::<crate::token_bucket::Gcra>(spec),
            Kind::LeakyBucket => words::<crate::token_bucket::Leaky>(spec),
            Kind::Shaper => shaper(spec),
            Kind::FixedWindow => words::<crate::fixed_window::Fixed>(spec),
            Kind::SlidingWindow => words::<crate::sliding_window::Sliding>(spec),
            Kind::SlidingLog => log(spec),
        }
    }

    /// Validates one quota with this algorithm's own parameter check (the same one
    /// its constructor runs) and returns the largest cost it admits at once.
    pub(crate) const fn validate(
        self,
        quota: &Quota,
        max_delay_ns: u64,
        log_capacity: Option<u64>,
    ) -> Result<u64, ConfigError> {
        match self {
            Kind::TokenBucket | Kind::LeakyBucket => match GcraParams::new(quota) {
                Ok(p) => Ok(p.burst()),
                Err(e) => Err(e),
            },
            Kind::Shaper => match ShaperParams::new(quota, max_delay_ns) {
                Ok(p) => Ok(p.capacity()),
                Err(e) => Err(e),
            },
            Kind::FixedWindow => match FixedParams::new(quota) {
                Ok(p) => Ok(p.limit()),
                Err(e) => Err(e),
            },
            Kind::SlidingWindow => match SlidingParams::new(quota) {
                Ok(p) => Ok(p.limit()),
                Err(e) => Err(e),
            },
            Kind::SlidingLog => match log_params(quota, log_capacity) {
                Ok(_) => Ok(quota.amount()),
                Err(e) => Err(e),
            },
        }
    }
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A name that is not a [`Kind`]; its message lists the valid names.
///
/// ```
/// use sluicegate::{Kind, UnknownKind};
/// let err = "gcra".parse::<Kind>().unwrap_err();
/// assert_eq!(
///     err.to_string(),
///     "unknown algorithm; expected one of token_bucket, leaky_bucket, shaper, \
///      fixed_window, sliding_window, sliding_log"
/// );
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UnknownKind;

impl fmt::Display for UnknownKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("unknown algorithm; expected one of ")?;
        for (i, k) in Kind::ALL.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            f.write_str(k.name())?;
        }
        Ok(())
    }
}

#[cfg(feature = "std")]
impl std::error::Error for UnknownKind {}

impl FromStr for Kind {
    type Err = UnknownKind;

    fn from_str(s: &str) -> Result<Kind, UnknownKind> {
        Kind::from_name(s).ok_or(UnknownKind)
    }
}
