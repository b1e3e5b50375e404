//! A limit as the Redis scripts see it: a core [`Spec`] and its script's
//! parameters in whole microseconds, validated so that every value a script
//! computes stays below 2^53 (Lua numbers are doubles: integers below 2^53 are
//! exact).

use core::time::Duration;

use redis::Value;
use sluicegate::{Decision, Kind, Quota, Spec, SpecError};

use crate::error::{ConfigError, Error};
use crate::resp::Args;
use crate::script::{self, Params, Script};

/// Which algorithm a limit runs: the old hand-written list, kept so that code
/// written against it still builds. Use [`Limit::from_spec`] with a
/// [`sluicegate::Spec`] (its [`Kind`] names the algorithm).
///
/// ```
/// #![allow(deprecated)]
/// use sluicegate_redis::{Algorithm, Limit};
/// use sluicegate::{Kind, Quota};
/// let l = Limit::new(Algorithm::SlidingWindow, Quota::per_minute(100)).unwrap();
/// assert_eq!(l.kind(), Kind::SlidingWindow);
/// ```
#[deprecated(
    since = "0.2.0",
    note = "build a sluicegate::Spec (its Kind names the algorithm) and use Limit::from_spec"
)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Algorithm {
    /// [`Kind::TokenBucket`].
    TokenBucket,
    /// [`Kind::LeakyBucket`].
    LeakyBucket,
    /// [`Kind::Shaper`] with its max delay.
    Shaper {
        /// The longest a granted request may be told to wait.
        max_delay: Duration,
    },
    /// [`Kind::FixedWindow`].
    FixedWindow,
    /// [`Kind::SlidingWindow`].
    SlidingWindow,
}

#[allow(deprecated)]
impl Algorithm {
    /// Its kind and max delay in ns.
    fn kind(self) -> (Kind, u64) {
        match self {
            Self::TokenBucket => (Kind::TokenBucket, 0),
            Self::LeakyBucket => (Kind::LeakyBucket, 0),
            Self::Shaper { max_delay } => (
                Kind::Shaper,
                u64::try_from(max_delay.as_nanos()).unwrap_or(u64::MAX),
            ),
            Self::FixedWindow => (Kind::FixedWindow, 0),
            Self::SlidingWindow => (Kind::SlidingWindow, 0),
        }
    }
}

/// A validated limit: one quota of a [`Kind`] with a Redis script, with the
/// script's microsecond parameters, and the core [`Spec`] it was built from.
///
/// A limit past a local layout bound (a sliding window over more than its local
/// word holds: Redis stores plain integers, so only the script's exact-arithmetic
/// bounds apply) runs on Redis alone: it has no local [`Limit::spec`], and a
/// failure policy or hybrid front that needs a local limiter is refused for it.
///
/// # Resolution
/// Redis `TIME` has microsecond resolution, the local limiters nanoseconds. A
/// token bucket's emission interval `T = ⌈period / amount⌉` is rounded *up* to a
/// whole microsecond (never faster than asked: a quota whose `T` is not a whole
/// number of microseconds admits very slightly less on Redis than locally); a
/// shaper's max delay is rounded *down*; a window must be a whole number of
/// microseconds (anything else is an [`Error::Config`]). With those
/// parameters and the same `now`, every decision equals the local limiter's,
/// except the sliding window's `retry_after`/`reset_after`, which are rounded up
/// to the next microsecond (under 1 µs later than the local value).
///
/// ```
/// use sluicegate_redis::Limit;
/// use sluicegate::{Kind, Quota, Spec};
/// let l = Limit::from_spec(&Spec::new(Kind::TokenBucket, &[Quota::per_second(3).burst(6)]).unwrap()).unwrap();
/// assert_eq!(l.emission_interval_us(), 333_334); // 333 333 334 ns, rounded up
/// assert_eq!(l.capacity(), 6);
/// assert!(Limit::from_quota(Kind::FixedWindow, Quota::from_nanos(5, 1_500)).is_err());
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limit {
    kind: Kind,
    quota: Quota,
    max_delay_ns: u64,
    spec: Option<Spec>,
    pub(crate) script: &'static Script,
    pub(crate) params: Params,
}

impl Limit {
    /// The limit of `spec`: one quota (Redis runs no compound limit), of a kind
    /// with a Redis script ([`sluicegate::Caps::redis`]), within the script's own
    /// bounds (see the type docs). Everything else is an [`Error::Config`].
    ///
    /// ```
    /// use sluicegate_redis::{Error, Limit};
    /// use sluicegate::{Kind, Quota, Spec};
    /// let s = Spec::new(Kind::SlidingLog, &[Quota::per_second(5)]).unwrap();
    /// assert!(matches!(Limit::from_spec(&s), Err(Error::Config(_))));
    /// let two = Spec::parse(Kind::TokenBucket, "10/s; 100/min").unwrap();
    /// assert!(Limit::from_spec(&two).is_err());
    /// ```
    pub fn from_spec(spec: &Spec) -> Result<Self, Error> {
        let script = script_of(spec.kind())?;
        let [quota] = spec.quotas() else {
            return Err(Error::Config(ConfigError::new(
                "spec",
                "a limit on Redis has one quota (compound limits run locally)",
            )));
        };
        Ok(Self {
            kind: spec.kind(),
            quota: *quota,
            max_delay_ns: spec.max_delay_ns(),
            spec: Some(*spec),
            script,
            params: (script.params)(quota, spec.max_delay_ns())?,
        })
    }

    /// One quota of `kind` with the shaper's max delay (0 for the other kinds):
    /// through a local [`Spec`] when the local algorithm can hold it, else on the
    /// script's own bounds alone when only a local layout bound was in the way
    /// (see the type docs). For bindings that hold the parts of a limit.
    ///
    /// ```
    /// use sluicegate_redis::Limit;
    /// use sluicegate::{Kind, Quota};
    /// let l = Limit::from_parts(Kind::Shaper, Quota::per_second(10).burst(1), 300_000_000).unwrap();
    /// assert_eq!(l.capacity(), 1 + 3); // the burst plus what the delay allows
    /// assert!(Limit::from_parts(Kind::TokenBucket, Quota::per_second(10), 1).is_err());
    /// ```
    pub fn from_parts(kind: Kind, quota: Quota, max_delay_ns: u64) -> Result<Self, Error> {
        let spec = Spec::new(kind, &[quota]).and_then(|s| match max_delay_ns {
            0 => Ok(s),
            ns => s.with_max_delay_ns(ns),
        });
        match spec {
            Ok(s) => Self::from_spec(&s),
            Err(SpecError::Config {
                error: sluicegate::ConfigError::TooLarge { .. },
                ..
            }) => {
                let script = script_of(kind)?;
                // The script's own error says why it cannot either; else the
                // local bound was the only obstacle.
                let params = (script.params)(&quota, max_delay_ns)?;
                Ok(Self {
                    kind,
                    quota,
                    max_delay_ns,
                    spec: None,
                    script,
                    params,
                })
            }
            Err(e) => Err(Error::spec(e)),
        }
    }

    /// A limit of `kind` over one `quota` (no kind parameters).
    ///
    /// ```
    /// use sluicegate_redis::Limit;
    /// use sluicegate::{Kind, Quota};
    /// let l = Limit::from_quota(Kind::FixedWindow, Quota::per_second(5)).unwrap();
    /// assert_eq!(l.capacity(), 5);
    /// // No word on Redis, so no layout bound on the sliding window's limit:
    /// let big = Limit::from_quota(Kind::SlidingWindow, Quota::per_day(1_000_000_000)).unwrap();
    /// assert_eq!(big.capacity(), 1_000_000_000);
    /// assert!(big.spec().is_none()); // no local limiter holds it
    /// assert!(Limit::from_quota(Kind::SlidingWindow, Quota::per_day(1 << 51)).is_err());
    /// ```
    pub fn from_quota(kind: Kind, quota: Quota) -> Result<Self, Error> {
        Self::from_parts(kind, quota, 0)
    }

    /// A limit from a kind's name and a rate (`"token_bucket"`, `"10/second"`),
    /// the way rule files and the bindings spell them.
    ///
    /// ```
    /// use sluicegate_redis::Limit;
    /// let l = Limit::parse("fixed_window", "60/minute").unwrap();
    /// assert_eq!(l.capacity(), 60);
    /// assert!(Limit::parse("gcra", "1/s").is_err());
    /// assert_eq!(Limit::parse("sliding_window", "5000000/s").unwrap().capacity(), 5_000_000);
    /// ```
    pub fn parse(kind: &str, rate: &str) -> Result<Self, Error> {
        let kind: Kind = kind
            .parse()
            .map_err(|e| ConfigError::caused_by("kind", "unknown algorithm", e))?;
        match Spec::parse(kind, rate) {
            Ok(s) => Self::from_spec(&s),
            // One quota past a local layout bound: Redis may still hold it.
            Err(
                e @ SpecError::Config {
                    error: sluicegate::ConfigError::TooLarge { .. },
                    ..
                },
            ) => match rate.trim().parse::<Quota>() {
                Ok(q) => Self::from_parts(kind, q, 0),
                Err(_) => Err(Error::spec(e)),
            },
            Err(e) => Err(Error::spec(e)),
        }
    }

    /// The deprecated way: see [`Algorithm`].
    ///
    /// ```
    /// #![allow(deprecated)]
    /// use sluicegate_redis::{Algorithm, Limit};
    /// use sluicegate::Quota;
    /// assert!(Limit::new(Algorithm::TokenBucket, Quota::per_second(0)).is_err());
    /// let big = Limit::new(Algorithm::SlidingWindow, Quota::per_day(1_000_000_000)).unwrap();
    /// assert_eq!(big.capacity(), 1_000_000_000);
    /// ```
    #[deprecated(since = "0.2.0", note = "use Limit::from_spec or Limit::from_quota")]
    #[allow(deprecated)]
    pub fn new(algorithm: Algorithm, quota: Quota) -> Result<Self, Error> {
        let (kind, max_delay_ns) = algorithm.kind();
        Self::from_parts(kind, quota, max_delay_ns)
    }

    /// The deprecated name of [`Self::kind`] (with the shaper's max delay).
    ///
    /// ```
    /// #![allow(deprecated)]
    /// use sluicegate_redis::{Algorithm, Limit};
    /// use sluicegate::Quota;
    /// let l = Limit::new(Algorithm::FixedWindow, Quota::per_second(5)).unwrap();
    /// assert_eq!(l.algorithm(), Algorithm::FixedWindow);
    /// ```
    #[deprecated(since = "0.2.0", note = "use Limit::kind and Limit::spec")]
    #[allow(deprecated)]
    pub fn algorithm(&self) -> Algorithm {
        let max_delay = Duration::from_nanos(self.max_delay_ns);
        match self.kind {
            Kind::LeakyBucket => Algorithm::LeakyBucket,
            Kind::Shaper => Algorithm::Shaper { max_delay },
            Kind::FixedWindow => Algorithm::FixedWindow,
            Kind::SlidingWindow => Algorithm::SlidingWindow,
            _ => Algorithm::TokenBucket,
        }
    }

    /// The local spec of the limit: what a local limiter of the same quota runs,
    /// `None` when the limit is past every local layout (see the type docs).
    ///
    /// ```
    /// # use sluicegate_redis::Limit;
    /// use sluicegate::Kind;
    /// assert_eq!(Limit::parse("shaper", "5/s").unwrap().spec().unwrap().kind(), Kind::Shaper);
    /// ```
    pub fn spec(&self) -> Option<Spec> {
        self.spec
    }

    /// The shaper's max delay in nanoseconds (0 for the other kinds).
    ///
    /// ```
    /// # use sluicegate_redis::Limit;
    /// use sluicegate::{Kind, Quota, Spec};
    /// let s = Spec::new(Kind::Shaper, &[Quota::per_second(5)]).unwrap().with_max_delay_ns(2_000_000).unwrap();
    /// assert_eq!(Limit::from_spec(&s).unwrap().max_delay_ns(), 2_000_000);
    /// ```
    pub fn max_delay_ns(&self) -> u64 {
        self.max_delay_ns
    }

    /// The algorithm.
    ///
    /// ```
    /// # use sluicegate_redis::Limit;
    /// use sluicegate::Kind;
    /// assert_eq!(Limit::parse("fixed_window", "5/s").unwrap().kind(), Kind::FixedWindow);
    /// ```
    pub fn kind(&self) -> Kind {
        self.kind
    }

    /// The quota the limit was built from.
    ///
    /// ```
    /// # use sluicegate_redis::Limit;
    /// assert_eq!(Limit::parse("fixed_window", "5/s").unwrap().quota().amount(), 5);
    /// ```
    pub fn quota(&self) -> Quota {
        self.quota
    }

    /// The largest cost that can ever be admitted at once; a larger one is an
    /// [`Error::Capacity`], never sent to Redis.
    ///
    /// ```
    /// # use sluicegate_redis::Limit;
    /// # use sluicegate::{Kind, Quota};
    /// let l = Limit::from_quota(Kind::TokenBucket, Quota::per_second(5).burst(2)).unwrap();
    /// assert_eq!(l.capacity(), 2);
    /// ```
    pub fn capacity(&self) -> u64 {
        self.params.capacity
    }

    /// The GCRA emission interval in microseconds (window length for the windows).
    ///
    /// ```
    /// # use sluicegate_redis::Limit;
    /// assert_eq!(Limit::parse("token_bucket", "4/s").unwrap().emission_interval_us(), 250_000);
    /// ```
    pub fn emission_interval_us(&self) -> u64 {
        self.params.unit_us
    }

    /// Whether its grants can be leased and spent later (hybrid mode): not a
    /// shaper's with a max delay, whose grants come with delays.
    pub(crate) fn leasable(&self) -> bool {
        self.params.slack_us.unwrap_or(0) == 0
    }

    /// Appends the script arguments after the key.
    pub(crate) fn push_args(&self, out: &mut impl Args, n: u64, mode: Mode) {
        let mode = match mode {
            Mode::Consume => b"c",
            Mode::Peek => b"p",
            Mode::Lease => b"l",
        };
        let p = &self.params;
        out.int(p.unit_us);
        out.int(p.size);
        out.int(n);
        if let Some(slack) = p.slack_us {
            out.int(slack);
        }
        out.text(mode);
    }

    /// The multi-cost script's arguments (see [`crate::script::multi_source`]):
    /// the number of single-call arguments, those (cost 0, consume), the costs.
    pub(crate) fn push_multi_args(&self, cmd: &mut redis::Cmd, costs: &[u64]) {
        cmd.arg(4 + u64::from(self.params.slack_us.is_some()));
        self.push_args(cmd, 0, Mode::Consume);
        for &n in costs {
            cmd.arg(n);
        }
    }
}

/// The script of `kind`, or why it has none.
fn script_of(kind: Kind) -> Result<&'static Script, Error> {
    script::for_kind(kind).ok_or_else(|| {
        Error::Config(ConfigError::new(
            "spec",
            format!(
                "{kind} has no Redis script (kinds with one: {})",
                script::kinds()
            ),
        ))
    })
}

/// What a script call does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Mode {
    Consume,
    Peek,
    Lease,
}

/// A script's answer: the decision, Redis' clock, and (shaper) the delay and
/// (lease) the units granted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Reply {
    /// The decision, in the local limiter's units (nanoseconds = microseconds × 1000).
    pub decision: Decision,
    /// Redis `TIME` at the decision, in microseconds since the Unix epoch.
    pub now_us: u64,
    /// For the shaper: how long the granted request must wait, in nanoseconds.
    pub delay_ns: u64,
    /// Units charged: `n` for an admitted consume, up to `n` for a lease, 0 otherwise.
    pub granted: u64,
}

impl Reply {
    pub(crate) fn parse(v: &Value) -> Result<Self, Error> {
        let items = match v {
            Value::Array(items) => items,
            other => return Err(Error::Reply(format!("expected an array, got {other:?}"))),
        };
        let mut n = [0u64; 8];
        if items.len() != n.len() {
            return Err(Error::Reply(format!(
                "expected 8 integers, got {}",
                items.len()
            )));
        }
        for (slot, item) in n.iter_mut().zip(items) {
            *slot = match item {
                Value::Int(i) if *i >= 0 => *i as u64,
                other => return Err(Error::Reply(format!("expected an integer, got {other:?}"))),
            };
        }
        let ns = |us: u64| us.saturating_mul(1000);
        Ok(Self {
            decision: Decision {
                allowed: n[0] == 1,
                remaining: n[1],
                retry_after_ns: ns(n[2]),
                reset_after_ns: ns(n[3]),
                limit: n[4],
            },
            now_us: n[5],
            delay_ns: ns(n[6]),
            granted: n[7],
        })
    }
}
