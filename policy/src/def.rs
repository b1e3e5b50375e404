//! The validated rule file: what each rule matches, keys on and limits.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use sluicegate::{Kind, Spec};

use crate::attrs::{AttrName, Attrs};
use crate::cond::Cond;
use crate::diag::{Diagnostic, Error};

macro_rules! names {
    ($(#[$m:meta])* $ty:ident { $($(#[$vm:meta])* $v:ident = $s:literal),+ $(,)? } $what:literal) => {
        $(#[$m])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub enum $ty { $($(#[$vm])* $v),+ }
        impl $ty {
            /// Every value, in the order the file format lists them.
            pub const ALL: &'static [$ty] = &[$($ty::$v),+];
            /// The name used in rule files.
            pub const fn name(self) -> &'static str {
                match self { $($ty::$v => $s),+ }
            }
        }
        impl fmt::Display for $ty {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result { f.write_str(self.name()) }
        }
        impl From<$ty> for crate::rule_builder::Choice<$ty> {
            fn from(v: $ty) -> Self { crate::rule_builder::Choice::Value(v) }
        }
        impl FromStr for $ty {
            type Err = String;
            fn from_str(s: &str) -> Result<Self, String> {
                $ty::ALL.iter().copied().find(|v| v.name() == s).ok_or_else(|| {
                    let all: Vec<&str> = $ty::ALL.iter().map(|v| v.name()).collect();
                    format!("unknown {} `{s}`; expected one of {}", $what, all.join(", "))
                })
            }
        }
    };
}

names! {
    /// Where a rule's state lives (`backend = ...`).
    ///
    /// ```
    /// use sluicegate_policy::Backend;
    /// assert_eq!("hybrid".parse::<Backend>(), Ok(Backend::Hybrid));
    /// assert!("memcached".parse::<Backend>().unwrap_err().contains("local, redis, hybrid"));
    /// ```
    Backend {
        /// In this process: a keyed table, one limiter, or a striped one.
        Local = "local",
        /// In Redis, shared by every process (needs `[redis]`).
        Redis = "redis",
        /// A local limiter in front, leases from Redis (needs `[redis]`).
        Hybrid = "hybrid",
    } "backend"
}

names! {
    /// What a Redis-backed rule answers while Redis fails (`on_error = ...`).
    ///
    /// ```
    /// use sluicegate_policy::OnError;
    /// assert_eq!(OnError::Local.to_string(), "local");
    /// assert_eq!("closed".parse::<OnError>(), Ok(OnError::Closed));
    /// ```
    OnError {
        /// Admit (availability over the limit).
        Open = "open",
        /// Deny (the limit over availability).
        Closed = "closed",
        /// Decide with the rule's limit in this process alone.
        Local = "local",
    } "on_error"
}

names! {
    /// Whether a rule may deny (`mode = ...`).
    ///
    /// ```
    /// use sluicegate_policy::Mode;
    /// assert_eq!("shadow".parse::<Mode>(), Ok(Mode::Shadow));
    /// assert_eq!(Mode::ALL.len(), 2);
    /// ```
    Mode {
        /// Denials deny the request.
        Enforce = "enforce",
        /// Evaluated and counted, never denies, never blocks the others.
        Shadow = "shadow",
    } "mode"
}

/// The `[redis]` table.
///
/// ```
/// use std::time::Duration;
/// use sluicegate_policy::PolicyDef;
/// let text = "[redis]\nurl = \"redis://127.0.0.1:6379\"\nlease_horizon_ms = 1000\n";
/// let def = PolicyDef::parse(text, None)?;
/// let redis = def.redis().unwrap();
/// assert_eq!(redis.url, "redis://127.0.0.1:6379");
/// assert_eq!(redis.lease_horizon, Some(Duration::from_secs(1)));
/// assert_eq!(redis.lease_ttl, None); // the factory's default
/// # Ok::<(), sluicegate_policy::Error>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RedisSettings {
    /// `redis://`, `rediss://` or `unix://` URL.
    pub url: String,
    /// Prefix of every Redis key of this policy (default `sluicegate:`).
    pub prefix: String,
    /// `hybrid` rules: how far back a key's own rate is averaged, the rate
    /// that sizes its leases (`lease_horizon_ms`; `None`: the factory's, 1 s by
    /// default). See `sluicegate_redis::HybridConfig::horizon`.
    pub lease_horizon: Option<Duration>,
    /// `hybrid` rules on token and leaky buckets: leased units not spent within
    /// this long are dropped (`lease_ttl_ms`; `None`: the factory's, 500 ms by
    /// default), and a lease is sized for the key's demand over it, so a key at
    /// a steady rate makes at most one round trip per TTL. It is the `L` of the
    /// over-admission bound, which holds **for the whole fleet** (every process
    /// sharing the Redis key, together): at most `b + r·(Δ + L)` admitted over
    /// any interval `Δ` (burst `b`, rate `r`), and at most `b + r·Δ + N·b` with
    /// `N` processes. Window rules ignore it: a window's lease is sized for the
    /// key's expected demand in the window and ends with it, and a fleet never
    /// admits more than the window's limit (see `sluicegate_redis::hybrid`).
    pub lease_ttl: Option<Duration>,
}

/// The `[state]` table: how much memory the policy's local keyed state may use.
///
/// Every keyed rule of a policy keeps its keys in one pool of slots (16 bytes a
/// key and limit, see [`sluicegate::keyed::Pool`]) instead of a table of its
/// own sized for its worst case: a rule costs the keys it holds. `memory`
/// bounds the pool (`memory = "64 MiB"` by default); the pool is sized to what
/// the rules can hold (each keyed rule's `capacity` of live keys, with a
/// quarter more for placement), up to that bound. Rules of a full pool evict
/// each other's stalest keys into their own sketch cells: early to limit, never
/// late. A reload keeps the pool (and every unchanged rule's keys) unless the
/// rules need twice the memory it has or `memory` changes; then every keyed rule
/// starts anew in a new pool.
///
/// ```
/// use sluicegate_policy::{PolicyDef, StateSettings};
/// let def = PolicyDef::parse("[state]\nmemory = \"8 MiB\"\n", None)?;
/// assert_eq!(def.state().memory, 8 << 20);
/// assert_eq!(StateSettings::default().memory, 64 << 20);
/// assert_eq!(StateSettings::parse_memory("1.5 GiB"), Ok(3 << 29));
/// assert!(StateSettings::parse_memory("64 parsecs").unwrap_err().contains("MiB"));
/// # Ok::<(), sluicegate_policy::Error>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StateSettings {
    /// Bytes the policy's local keyed state may use.
    pub memory: usize,
}

impl Default for StateSettings {
    fn default() -> Self {
        StateSettings {
            memory: DEFAULT_MEMORY,
        }
    }
}

/// The `[shared]` table: the keyed rules keep their keys in a shared-memory
/// region every worker process of the host maps (`sluicegate-shm`), so that
/// the processes running one policy count together. `path` is a file, or a
/// bare name for `/dev/shm/sluicegate-<name>`. The region has its own size
/// (`[state] memory` does not apply); two policies on one region share the
/// rules that are identical (same algorithm, quotas and capacity) and never mix
/// the others. Needs the crate's `shared` feature.
///
/// ```
/// use sluicegate_policy::PolicyDef;
/// let def = PolicyDef::parse("[shared]\npath = \"/dev/shm/api-limits\"\n", None)?;
/// assert_eq!(def.shared().unwrap().path, "/dev/shm/api-limits");
/// assert!(PolicyDef::parse("[shared]\npath = \"\"\n", None).is_err());
/// # Ok::<(), sluicegate_policy::Error>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SharedSettings {
    /// The region: a path, or a bare name under `/dev/shm`.
    pub path: String,
}

/// The default `[state] memory`: 64 MiB.
const DEFAULT_MEMORY: usize = 64 << 20;
/// The least `[state] memory`: 64 KiB.
const MIN_MEMORY: usize = 64 << 10;
/// The most `[state] memory`: 1 TiB.
const MAX_MEMORY: u64 = 1 << 40;

impl StateSettings {
    /// A memory size: a number of bytes, or a number with a unit (`B`, `KiB`,
    /// `MiB`, `GiB`, `TiB`, or the decimal `KB`, `MB`, `GB`, `TB`), 64 KiB to
    /// 1 TiB. The error says what is accepted.
    ///
    /// ```
    /// use sluicegate_policy::StateSettings;
    /// assert_eq!(StateSettings::parse_memory("256MiB"), Ok(256 << 20));
    /// assert_eq!(StateSettings::parse_memory("100 MB"), Ok(100_000_000));
    /// assert_eq!(StateSettings::parse_memory("1048576"), Ok(1 << 20));
    /// assert!(StateSettings::parse_memory("1 KiB").is_err()); // below 64 KiB
    /// ```
    pub fn parse_memory(text: &str) -> Result<usize, String> {
        let t = text.trim();
        let split = t
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(t.len());
        let (number, unit) = t.split_at(split);
        let unit_bytes: u64 = match unit.trim() {
            "" | "B" => 1,
            "KiB" => 1 << 10,
            "MiB" => 1 << 20,
            "GiB" => 1 << 30,
            "TiB" => 1 << 40,
            "KB" | "kB" => 1_000,
            "MB" => 1_000_000,
            "GB" => 1_000_000_000,
            "TB" => 1_000_000_000_000,
            _ => u64::MAX,
        };
        let value: Option<f64> = number.parse().ok().filter(|v: &f64| v.is_finite());
        let bytes = match value {
            Some(v) if unit_bytes != u64::MAX => v * unit_bytes as f64,
            _ => {
                return Err(format!(
                    "`{text}` is not a memory size: write bytes or a number with KiB, MiB, GiB (or KB, MB, GB), e.g. \"64 MiB\""
                ));
            }
        };
        if !(MIN_MEMORY as f64..=MAX_MEMORY as f64).contains(&bytes) {
            return Err(format!("`{text}`: the memory must be 64 KiB to 1 TiB"));
        }
        usize::try_from(bytes as u64)
            .map_err(|_| format!("`{text}` does not fit this machine's address space"))
    }
}

/// One validated rule.
///
/// ```
/// use sluicegate_policy::{Mode, PolicyDef};
/// let def = PolicyDef::parse("[[rule]]\nname = \"login\"\nlimit = \"5/minute\"\nkey = [\"ip\"]\nmode = \"shadow\"\n", None)?;
/// let r = &def.rules()[0];
/// assert_eq!((r.name(), r.mode(), r.line()), ("login", Mode::Shadow, 2));
/// assert_eq!(r.key()[0].as_str(), "ip");
/// assert_eq!(r.spec().capacity(), 5);
/// # Ok::<(), sluicegate_policy::Error>(())
/// ```
#[derive(Clone, Debug)]
pub struct RuleDef {
    pub(crate) name: String,
    pub(crate) line: usize,
    pub(crate) matches: Vec<(AttrName, Cond)>,
    /// `match` as given (attribute, values), for [`RuleDef::to_builder`].
    pub(crate) match_values: Vec<(String, Vec<String>)>,
    pub(crate) key: Vec<AttrName>,
    pub(crate) limit: String,
    pub(crate) spec: Spec,
    pub(crate) backend: Backend,
    pub(crate) on_error: OnError,
    pub(crate) mode: Mode,
    pub(crate) capacity: usize,
    pub(crate) stripes: usize,
    pub(crate) max_delay_ms: Option<u64>,
}

impl RuleDef {
    /// The rule's name (unique in its file).
    ///
    /// ```
    /// # let def = sluicegate_policy::PolicyDef::parse("[[rule]]\nname = \"g\"\nlimit = \"1/s\"\n", None).unwrap();
    /// assert_eq!(def.rules()[0].name(), "g");
    /// ```
    pub fn name(&self) -> &str {
        &self.name
    }
    /// The line of the rule's `name` (0 for a rule built from values).
    ///
    /// ```
    /// # let def = sluicegate_policy::PolicyDef::parse("\n[[rule]]\nname = \"g\"\nlimit = \"1/s\"\n", None).unwrap();
    /// assert_eq!(def.rules()[0].line(), 3);
    /// ```
    pub fn line(&self) -> usize {
        self.line
    }
    /// The `key` attributes (empty: one limiter for every matching request).
    ///
    /// ```
    /// # let def = sluicegate_policy::PolicyDef::parse("[[rule]]\nname = \"g\"\nlimit = \"1/s\"\n", None).unwrap();
    /// assert!(def.rules()[0].key().is_empty());
    /// ```
    pub fn key(&self) -> &[AttrName] {
        &self.key
    }
    /// The `limit` string as written.
    ///
    /// ```
    /// # let def = sluicegate_policy::PolicyDef::parse("[[rule]]\nname = \"g\"\nlimit = \"1/s\"\n", None).unwrap();
    /// assert_eq!(def.rules()[0].limit(), "1/s");
    /// ```
    pub fn limit(&self) -> &str {
        &self.limit
    }
    /// The validated algorithm and quotas.
    ///
    /// ```
    /// # use sluicegate::Kind;
    /// # let def = sluicegate_policy::PolicyDef::parse("[[rule]]\nname = \"g\"\nlimit = \"1/s\"\n", None).unwrap();
    /// assert_eq!(def.rules()[0].spec().kind(), Kind::TokenBucket);
    /// ```
    pub fn spec(&self) -> &Spec {
        &self.spec
    }
    /// Where the state lives.
    ///
    /// ```
    /// # use sluicegate_policy::Backend;
    /// # let def = sluicegate_policy::PolicyDef::parse("[[rule]]\nname = \"g\"\nlimit = \"1/s\"\n", None).unwrap();
    /// assert_eq!(def.rules()[0].backend(), Backend::Local);
    /// ```
    pub fn backend(&self) -> Backend {
        self.backend
    }
    /// What a Redis-backed rule does when Redis fails.
    ///
    /// ```
    /// # use sluicegate_policy::OnError;
    /// # let def = sluicegate_policy::PolicyDef::parse("[[rule]]\nname = \"g\"\nlimit = \"1/s\"\n", None).unwrap();
    /// assert_eq!(def.rules()[0].on_error(), OnError::Local);
    /// ```
    pub fn on_error(&self) -> OnError {
        self.on_error
    }
    /// Enforce or shadow.
    ///
    /// ```
    /// # use sluicegate_policy::Mode;
    /// # let def = sluicegate_policy::PolicyDef::parse("[[rule]]\nname = \"g\"\nlimit = \"1/s\"\n", None).unwrap();
    /// assert_eq!(def.rules()[0].mode(), Mode::Enforce);
    /// ```
    pub fn mode(&self) -> Mode {
        self.mode
    }
    /// The most live keys the rule holds at once in the policy's pool (keyed rules).
    ///
    /// ```
    /// # let def = sluicegate_policy::PolicyDef::parse("[[rule]]\nname = \"g\"\nlimit = \"1/s\"\n", None).unwrap();
    /// assert_eq!(def.rules()[0].capacity(), 100_000);
    /// ```
    pub fn capacity(&self) -> usize {
        self.capacity
    }
    /// Stripes of a keyless hot rule (1: not striped).
    ///
    /// ```
    /// # let def = sluicegate_policy::PolicyDef::parse("[[rule]]\nname = \"g\"\nlimit = \"1000/s\"\nstripes = 4\n", None).unwrap();
    /// assert_eq!(def.rules()[0].stripes(), 4);
    /// ```
    pub fn stripes(&self) -> usize {
        self.stripes
    }
    /// Whether a request with these attributes matches the rule.
    ///
    /// ```
    /// let text = "[[rule]]\nname = \"api\"\nlimit = \"1/s\"\nmatch = { path = \"/api/*\", method = [\"GET\", \"POST\"] }\n";
    /// let def = sluicegate_policy::PolicyDef::parse(text, None)?;
    /// let r = &def.rules()[0];
    /// assert!(r.matches(&[("path", "/api/users"), ("method", "GET")]));
    /// assert!(!r.matches(&[("path", "/api/users"), ("method", "PUT")]));
    /// assert!(!r.matches(&[("path", "/login"), ("method", "GET")]));
    /// # Ok::<(), sluicegate_policy::Error>(())
    /// ```
    pub fn matches<A: Attrs + ?Sized>(&self, attrs: &A) -> bool {
        self.matches
            .iter()
            .all(|(name, cond)| cond.matches(attrs.get(name.as_str())))
    }

    /// The text of the key this rule limits a request with `attrs` by, into `out`
    /// (cleared first); `ipv6_prefix` is the policy's ([`PolicyDef::ipv6_prefix`]).
    /// The same text as [`crate::RuleDecision::key_text`].
    ///
    /// ```
    /// let text = "[[rule]]\nname = \"a\"\nkey = [\"ip\", \"tenant\"]\nlimit = \"1/s\"\n";
    /// let def = sluicegate_policy::PolicyDef::parse(text, None)?;
    /// let mut key = String::new();
    /// def.rules()[0].write_key_text(&[("ip", "::ffff:192.0.2.1")], def.ipv6_prefix(), &mut key);
    /// assert_eq!(key, "192.0.2.1|\\0");
    /// # Ok::<(), sluicegate_policy::Error>(())
    /// ```
    pub fn write_key_text<A: Attrs + ?Sized>(&self, attrs: &A, ipv6_prefix: u8, out: &mut String) {
        crate::key::key_text_into(attrs, &self.key, ipv6_prefix, out);
    }

    /// Same state-defining settings: a reload keeps such a rule's limiter as it is.
    pub(crate) fn same_limiter(&self, o: &RuleDef) -> bool {
        self.key == o.key
            && self.spec == o.spec
            && self.backend == o.backend
            && self.capacity == o.capacity
            && self.stripes == o.stripes
            && (self.backend == Backend::Local || self.on_error == o.on_error)
    }
}

/// A whole rule file, validated: its rules in file order, `[redis]`, and the
/// warnings found.
///
/// ```
/// use sluicegate_policy::{Code, PolicyDef};
/// let text = r#"
/// [[rule]]
/// name = "a"
/// limit = "5/s"
/// [[rule]]
/// name = "b"
/// limit = "5/s"
/// "#;
/// let def = PolicyDef::parse(text, Some("rules.toml"))?;
/// assert_eq!(def.rules().len(), 2);
/// let w = &def.warnings()[0];
/// assert_eq!((w.code, w.line, w.file.as_str()), (Code::Shadowed, 6, "rules.toml"));
/// # Ok::<(), sluicegate_policy::Error>(())
/// ```
#[derive(Clone, Debug)]
pub struct PolicyDef {
    pub(crate) rules: Vec<RuleDef>,
    pub(crate) redis: Option<RedisSettings>,
    pub(crate) state: StateSettings,
    pub(crate) shared: Option<SharedSettings>,
    pub(crate) ipv6_prefix: u8,
    pub(crate) warnings: Vec<Diagnostic>,
    /// The source name diagnostics give (`<policy>` for text without one).
    pub(crate) file: String,
}

impl PolicyDef {
    /// Reads and validates rule-file text; `file` names it in diagnostics.
    /// Every error is reported, each with its line, column and rule.
    ///
    /// ```
    /// use sluicegate_policy::{Code, PolicyDef};
    /// let err = PolicyDef::parse("[[rule]]\nname = \"a\"\nlimit = \"5/s\"\nkey = [\"IP\"]\n", None).unwrap_err();
    /// let d = &err.diagnostics()[0];
    /// assert_eq!((d.code, d.line, d.column), (Code::BadAttribute, 4, 8));
    /// ```
    pub fn parse(text: &str, file: Option<&str>) -> Result<PolicyDef, Error> {
        crate::validate::parse(text, file.unwrap_or("<policy>"))
    }

    /// The rules, in file order.
    ///
    /// ```
    /// # let def = sluicegate_policy::PolicyDef::parse("", None).unwrap();
    /// assert!(def.rules().is_empty());
    /// ```
    pub fn rules(&self) -> &[RuleDef] {
        &self.rules
    }

    /// The `[redis]` table, if any.
    ///
    /// ```
    /// # let def = sluicegate_policy::PolicyDef::parse("", None).unwrap();
    /// assert!(def.redis().is_none());
    /// ```
    pub fn redis(&self) -> Option<&RedisSettings> {
        self.redis.as_ref()
    }

    /// The `[state]` table (its defaults if absent).
    ///
    /// ```
    /// # let def = sluicegate_policy::PolicyDef::parse("", None).unwrap();
    /// assert_eq!(def.state().memory, 64 << 20);
    /// ```
    pub fn state(&self) -> StateSettings {
        self.state
    }

    /// The `[shared]` table, if any: the shared-memory region the keyed rules
    /// keep their keys in.
    ///
    /// ```
    /// # let def = sluicegate_policy::PolicyDef::parse("[shared]\npath = \"api\"\n", None).unwrap();
    /// assert_eq!(def.shared().unwrap().path, "api");
    /// ```
    pub fn shared(&self) -> Option<&SharedSettings> {
        self.shared.as_ref()
    }

    /// The prefix length IPv6 addresses are grouped by in keys (`[defaults]
    /// ipv6_prefix`, 64 unless set): one client usually holds a whole /64.
    ///
    /// ```
    /// # let def = sluicegate_policy::PolicyDef::parse("[defaults]\nipv6_prefix = 56\n", None).unwrap();
    /// assert_eq!(def.ipv6_prefix(), 56);
    /// ```
    pub fn ipv6_prefix(&self) -> u8 {
        self.ipv6_prefix
    }

    /// The source name its diagnostics give: the file, `<policy>` for text
    /// without one, or what [`crate::PolicyDefBuilder::source`] set.
    ///
    /// ```
    /// # let def = sluicegate_policy::PolicyDef::parse("", Some("rules.toml")).unwrap();
    /// assert_eq!(def.source(), "rules.toml");
    /// ```
    pub fn source(&self) -> &str {
        &self.file
    }

    /// Warnings: rules that never match, rules identical to an earlier one, limits
    /// over half of their algorithm's bound.
    ///
    /// ```
    /// # let def = sluicegate_policy::PolicyDef::parse("[[rule]]\nname = \"a\"\nlimit = \"1/s\"\nmatch = { method = [] }\n", None).unwrap();
    /// assert_eq!(def.warnings()[0].code, sluicegate_policy::Code::NeverMatches);
    /// ```
    pub fn warnings(&self) -> &[Diagnostic] {
        &self.warnings
    }
}

/// The default algorithm when neither the rule nor `[defaults]` names one.
pub(crate) const DEFAULT_KIND: Kind = Kind::TokenBucket;
/// Keys per rule in the local keyed table unless set.
pub(crate) const DEFAULT_CAPACITY: usize = 100_000;
