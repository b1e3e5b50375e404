//! Policies from values: [`PolicyDefBuilder`] takes rules ([`crate::RuleBuilder`])
//! in order, the `[defaults]`, `[redis]` and `[state]` settings, and validates
//! them with the rule file's validator ([`crate::validate`]).

use std::time::Duration;

use sluicegate::Kind;

use crate::def::{Backend, Mode, OnError, PolicyDef, RedisSettings, RuleDef};
use crate::diag::Error;
use crate::input::{At, DefaultsIn, FileIn, RedisIn};
use crate::rule_builder::{Choice, RuleBuilder, Settings, int};

/// A whole policy from values: its rules in order, `[defaults]` and `[redis]`,
/// validated by [`Self::build`] exactly as a rule file is.
///
/// ```
/// use sluicegate_policy::{Backend, Policy, PolicyDef, RedisSettings, RuleDef};
/// let def = PolicyDef::builder()
///     .default_capacity(10_000)
///     .rule(RuleDef::builder("per-ip").key(["ip"]).limit("2/s"))
///     .rule(RuleDef::builder("global").limit("1000/s"))
///     .build()?;
/// let policy = Policy::from_def(def)?;
/// let req = [("ip", "192.0.2.1")];
/// assert!(policy.check_n_at(&req, 2, 0).allowed());
/// assert!(!policy.check_n_at(&req, 1, 0).allowed());
/// # Ok::<(), sluicegate_policy::Error>(())
/// ```
#[derive(Clone, Debug, Default)]
pub struct PolicyDefBuilder {
    source: Option<String>,
    rules: Vec<RuleBuilder>,
    defaults: Defaults,
    redis: Option<RedisSettings>,
    state_memory: Option<Choice<usize>>,
    shared_path: Option<String>,
}

#[derive(Clone, Debug, Default)]
struct Defaults {
    settings: Settings,
    ipv6_prefix: Option<u8>,
}

impl PolicyDef {
    /// A policy built from values; see [`PolicyDefBuilder`].
    ///
    /// ```
    /// let def = sluicegate_policy::PolicyDef::builder().build()?;
    /// assert!(def.rules().is_empty());
    /// # Ok::<(), sluicegate_policy::Error>(())
    /// ```
    pub fn builder() -> PolicyDefBuilder {
        PolicyDefBuilder::default()
    }

    /// A builder holding this policy: its rules (every field resolved), its
    /// `ipv6_prefix`, `[redis]` and source name.
    ///
    /// ```
    /// let def = sluicegate_policy::PolicyDef::parse("[[rule]]\nname = \"a\"\nlimit = \"1/s\"\n", Some("r.toml"))?;
    /// let again = def.to_builder().rule(sluicegate_policy::RuleDef::builder("b").limit("2/s")).build()?;
    /// assert_eq!((again.rules().len(), again.source()), (2, "r.toml"));
    /// # Ok::<(), sluicegate_policy::Error>(())
    /// ```
    pub fn to_builder(&self) -> PolicyDefBuilder {
        PolicyDefBuilder {
            source: Some(self.file.clone()),
            rules: self.rules.iter().map(RuleDef::to_builder).collect(),
            defaults: Defaults {
                ipv6_prefix: Some(self.ipv6_prefix),
                ..Defaults::default()
            },
            redis: self.redis.clone(),
            state_memory: Some(Choice::Value(self.state.memory)),
            shared_path: self.shared.as_ref().map(|s| s.path.clone()),
        }
    }
}

impl PolicyDefBuilder {
    /// The name diagnostics give as their file (none by default: they name the
    /// rule and field).
    ///
    /// ```
    /// # use sluicegate_policy::{PolicyDef, RuleDef};
    /// let err = PolicyDef::builder().source("tenants").rule(RuleDef::builder("t1")).build().unwrap_err();
    /// assert_eq!(err.to_string(), "tenants: error: rule `t1`, field `limit`: missing field `limit`");
    /// ```
    pub fn source(mut self, name: impl Into<String>) -> Self {
        self.source = Some(name.into());
        self
    }

    /// Adds a rule after those added before (order matters as in a file).
    ///
    /// ```
    /// # use sluicegate_policy::{PolicyDef, RuleDef};
    /// let def = PolicyDef::builder().rule(RuleDef::builder("a").limit("1/s")).build()?;
    /// assert_eq!(def.rules()[0].name(), "a");
    /// # Ok::<(), sluicegate_policy::Error>(())
    /// ```
    pub fn rule(mut self, rule: RuleBuilder) -> Self {
        self.rules.push(rule);
        self
    }

    /// Adds rules in order.
    ///
    /// ```
    /// # use sluicegate_policy::{Code, PolicyDef, RuleDef};
    /// let rules = (0..3).map(|i| RuleDef::builder(format!("t{i}")).matching("tenant", format!("t{i}")).limit("5/s"));
    /// let def = PolicyDef::builder().rules(rules).build()?;
    /// assert_eq!(def.rules().len(), 3);
    /// let twice = PolicyDef::builder().rules([RuleDef::builder("a").limit("1/s"), RuleDef::builder("a").limit("2/s")]);
    /// assert_eq!(twice.build().unwrap_err().diagnostics()[0].code, Code::DuplicateName);
    /// # Ok::<(), sluicegate_policy::Error>(())
    /// ```
    pub fn rules(mut self, rules: impl IntoIterator<Item = RuleBuilder>) -> Self {
        self.rules.extend(rules);
        self
    }

    /// `[defaults] algorithm`.
    ///
    /// ```
    /// # use sluicegate::Kind;
    /// # use sluicegate_policy::{PolicyDef, RuleDef};
    /// let def = PolicyDef::builder().default_algorithm(Kind::FixedWindow).rule(RuleDef::builder("a").limit("1/s")).build()?;
    /// assert_eq!(def.rules()[0].spec().kind(), Kind::FixedWindow);
    /// # Ok::<(), sluicegate_policy::Error>(())
    /// ```
    pub fn default_algorithm(mut self, kind: impl Into<Choice<Kind>>) -> Self {
        self.defaults.settings.algorithm = Some(kind.into());
        self
    }

    /// `[defaults] backend`.
    ///
    /// ```
    /// # use sluicegate_policy::{Backend, PolicyDef, RedisSettings, RuleDef};
    /// let def = PolicyDef::builder().redis(RedisSettings::new("redis://h")).default_backend(Backend::Hybrid)
    ///     .rule(RuleDef::builder("a").limit("1/s")).build()?;
    /// assert_eq!(def.rules()[0].backend(), Backend::Hybrid);
    /// # Ok::<(), sluicegate_policy::Error>(())
    /// ```
    pub fn default_backend(mut self, backend: impl Into<Choice<Backend>>) -> Self {
        self.defaults.settings.backend = Some(backend.into());
        self
    }

    /// `[defaults] on_error`.
    ///
    /// ```
    /// # use sluicegate_policy::{OnError, PolicyDef, RuleDef};
    /// let def = PolicyDef::builder().default_on_error("open").rule(RuleDef::builder("a").limit("1/s")).build()?;
    /// assert_eq!(def.rules()[0].on_error(), OnError::Open);
    /// # Ok::<(), sluicegate_policy::Error>(())
    /// ```
    pub fn default_on_error(mut self, on_error: impl Into<Choice<OnError>>) -> Self {
        self.defaults.settings.on_error = Some(on_error.into());
        self
    }

    /// `[defaults] mode`.
    ///
    /// ```
    /// # use sluicegate_policy::{Mode, PolicyDef, RuleDef};
    /// let def = PolicyDef::builder().default_mode(Mode::Shadow).rule(RuleDef::builder("a").limit("1/s")).build()?;
    /// assert_eq!(def.rules()[0].mode(), Mode::Shadow);
    /// # Ok::<(), sluicegate_policy::Error>(())
    /// ```
    pub fn default_mode(mut self, mode: impl Into<Choice<Mode>>) -> Self {
        self.defaults.settings.mode = Some(mode.into());
        self
    }

    /// `[defaults] capacity`.
    ///
    /// ```
    /// # use sluicegate_policy::{PolicyDef, RuleDef};
    /// let err = PolicyDef::builder().default_capacity(0).build().unwrap_err();
    /// assert_eq!(err.diagnostics()[0].field.as_deref(), Some("defaults.capacity"));
    /// ```
    pub fn default_capacity(mut self, keys: u64) -> Self {
        self.defaults.settings.capacity = Some(keys);
        self
    }

    /// `[defaults] ipv6_prefix`.
    ///
    /// ```
    /// let def = sluicegate_policy::PolicyDef::builder().ipv6_prefix(48).build()?;
    /// assert_eq!(def.ipv6_prefix(), 48);
    /// # Ok::<(), sluicegate_policy::Error>(())
    /// ```
    pub fn ipv6_prefix(mut self, bits: u8) -> Self {
        self.defaults.ipv6_prefix = Some(bits);
        self
    }

    /// The `[redis]` table (lease durations in whole milliseconds).
    ///
    /// ```
    /// # use sluicegate_policy::{Code, PolicyDef, RedisSettings};
    /// let err = PolicyDef::builder().redis(RedisSettings::new("http://h")).build().unwrap_err();
    /// assert_eq!(err.diagnostics()[0].code, Code::Redis);
    /// ```
    pub fn redis(mut self, settings: RedisSettings) -> Self {
        self.redis = Some(settings);
        self
    }

    /// `[state] memory`: bytes, or a size as the file writes it (`"64 MiB"`);
    /// 64 KiB to 1 TiB.
    ///
    /// ```
    /// # use sluicegate_policy::PolicyDef;
    /// assert_eq!(PolicyDef::builder().state_memory("8 MiB").build()?.state().memory, 8 << 20);
    /// assert_eq!(PolicyDef::builder().state_memory(1usize << 20).build()?.state().memory, 1 << 20);
    /// let err = PolicyDef::builder().state_memory(1024usize).build().unwrap_err();
    /// assert_eq!(err.diagnostics()[0].field.as_deref(), Some("state.memory"));
    /// # Ok::<(), sluicegate_policy::Error>(())
    /// ```
    pub fn state_memory(mut self, memory: impl Into<Choice<usize>>) -> Self {
        self.state_memory = Some(memory.into());
        self
    }

    /// `[shared] path`: the shared-memory region the keyed rules keep their
    /// keys in (see [`crate::SharedSettings`]).
    ///
    /// ```
    /// # use sluicegate_policy::PolicyDef;
    /// assert_eq!(PolicyDef::builder().shared_path("api").build()?.shared().unwrap().path, "api");
    /// # Ok::<(), sluicegate_policy::Error>(())
    /// ```
    pub fn shared_path(mut self, path: impl Into<String>) -> Self {
        self.shared_path = Some(path.into());
        self
    }

    /// Validates the policy: every error found, each naming its rule and field,
    /// or the definition with its warnings.
    ///
    /// ```
    /// # use sluicegate_policy::{Code, PolicyDef, RuleDef};
    /// let err = PolicyDef::builder()
    ///     .rule(RuleDef::builder("a").limit("1/s").key(["IP"]))
    ///     .rule(RuleDef::builder("b").limit("1/s").matching("ip", "10.0.0.300"))
    ///     .build()
    ///     .unwrap_err();
    /// let codes: Vec<_> = err.diagnostics().iter().map(|d| (d.code, d.rule.as_deref().unwrap())).collect();
    /// assert_eq!(codes, [(Code::BadAttribute, "a"), (Code::BadCidr, "b")]);
    /// ```
    pub fn build(self) -> Result<PolicyDef, Error> {
        let ms = |d: Duration| int(u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
        let d = self.defaults;
        let input = FileIn {
            defaults: DefaultsIn {
                settings: d.settings.input("defaults."),
                ipv6_prefix: d
                    .ipv6_prefix
                    .map(|n| At::field(i64::from(n), "defaults.ipv6_prefix")),
            },
            redis: self.redis.map(|r| RedisIn {
                url: At::field(r.url, "redis.url"),
                prefix: Some(At::field(r.prefix, "redis.prefix")),
                lease_horizon_ms: r
                    .lease_horizon
                    .map(|t| At::field(ms(t), "redis.lease_horizon_ms")),
                lease_ttl_ms: r.lease_ttl.map(|t| At::field(ms(t), "redis.lease_ttl_ms")),
            }),
            state_memory: self.state_memory.map(|m| At::field(m, "state.memory")),
            shared_path: self.shared_path.map(|p| At::field(p, "shared.path")),
            rules: self.rules.into_iter().map(RuleBuilder::input).collect(),
        };
        crate::validate::values(input, self.source.as_deref().unwrap_or(""))
    }
}

impl RedisSettings {
    /// Settings for the server at `url`, with the default prefix (`sluicegate:`)
    /// and the factory's lease settings.
    ///
    /// ```
    /// let r = sluicegate_policy::RedisSettings::new("redis://127.0.0.1:6379");
    /// assert_eq!((r.prefix.as_str(), r.lease_ttl), ("sluicegate:", None));
    /// ```
    pub fn new(url: impl Into<String>) -> RedisSettings {
        RedisSettings {
            url: url.into(),
            prefix: "sluicegate:".to_owned(),
            lease_horizon: None,
            lease_ttl: None,
        }
    }
}
