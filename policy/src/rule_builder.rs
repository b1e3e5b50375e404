//! Rules from values: [`RuleBuilder`], one setter per field of a `[[rule]]`
//! table, and [`Choice`], a setting by value or by its rule-file name. A policy
//! of them is built and validated by [`crate::PolicyDefBuilder`]
//! (policy_def_builder.rs) with the same code as the file ([`crate::validate`]),
//! so a value is accepted or rejected the same way, with the same message; a
//! finding names the rule and field instead of a line.

use sluicegate::Kind;

use crate::def::{Backend, Mode, OnError, RuleDef};
use crate::input::{At, RuleIn, SettingsIn};

/// A setting given as a value or by its rule-file name. A name is checked when the
/// policy is built, with the rule file's message (what a binding that receives
/// strings, such as Python's, passes on).
///
/// ```
/// use sluicegate_policy::{Backend, Choice};
/// assert_eq!(Choice::from(Backend::Redis), Choice::Value(Backend::Redis));
/// assert_eq!(Choice::<Backend>::from("redis"), Choice::Name("redis".into()));
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Choice<T> {
    /// The value itself.
    Value(T),
    /// Its name in rule files (`"sliding_window"`, `"shadow"`).
    Name(String),
}

impl<T> From<&str> for Choice<T> {
    fn from(s: &str) -> Self {
        Choice::Name(s.to_owned())
    }
}

impl<T> From<String> for Choice<T> {
    fn from(s: String) -> Self {
        Choice::Name(s)
    }
}

impl From<Kind> for Choice<Kind> {
    fn from(k: Kind) -> Self {
        Choice::Value(k)
    }
}

/// A size in bytes (`[state] memory`), beside its text (`"64 MiB"`).
impl From<usize> for Choice<usize> {
    fn from(bytes: usize) -> Self {
        Choice::Value(bytes)
    }
}

/// A number of a builder as the validator takes it (a rule file's integers are
/// `i64`): one past the range saturates, so it is rejected with the file's message.
pub(crate) fn int(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// One rule, field by field as in a `[[rule]]` table; validated when its policy is
/// built ([`crate::PolicyDefBuilder::build`]). Unset fields take `[defaults]` or the
/// file format's default.
///
/// ```
/// use sluicegate_policy::{Mode, PolicyDef, RuleDef};
/// let rule = RuleDef::builder("login")
///     .matching("path", "/login")
///     .matching_any("method", ["POST", "PUT"])
///     .key(["ip"])
///     .limit("5/minute")
///     .mode(Mode::Shadow);
/// let def = PolicyDef::builder().rule(rule).build()?;
/// let r = &def.rules()[0];
/// assert_eq!((r.name(), r.mode(), r.line()), ("login", Mode::Shadow, 0));
/// assert!(r.matches(&[("path", "/login"), ("method", "PUT")]));
/// # Ok::<(), sluicegate_policy::Error>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RuleBuilder {
    name: String,
    matches: Vec<(String, Vec<String>)>,
    key: Vec<String>,
    limit: Option<String>,
    settings: Settings,
    stripes: Option<u64>,
    max_delay_ms: Option<u64>,
}

/// What a rule and `[defaults]` both set.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Settings {
    pub(crate) algorithm: Option<Choice<Kind>>,
    pub(crate) backend: Option<Choice<Backend>>,
    pub(crate) on_error: Option<Choice<OnError>>,
    pub(crate) mode: Option<Choice<Mode>>,
    pub(crate) capacity: Option<u64>,
}

impl Settings {
    /// The validator's input, each field named after `prefix`.
    pub(crate) fn input(self, prefix: &str) -> SettingsIn {
        let field = |name: &str| format!("{prefix}{name}");
        SettingsIn {
            algorithm: self.algorithm.map(|v| At::field(v, field("algorithm"))),
            backend: self.backend.map(|v| At::field(v, field("backend"))),
            on_error: self.on_error.map(|v| At::field(v, field("on_error"))),
            mode: self.mode.map(|v| At::field(v, field("mode"))),
            capacity: self.capacity.map(|n| At::field(int(n), field("capacity"))),
        }
    }
}

impl RuleDef {
    /// A rule named `name` (unique in its policy), to be given its fields.
    ///
    /// ```
    /// use sluicegate_policy::{PolicyDef, RuleDef};
    /// let def = PolicyDef::builder().rule(RuleDef::builder("all").limit("100/s")).build()?;
    /// assert_eq!(def.rules()[0].limit(), "100/s");
    /// # Ok::<(), sluicegate_policy::Error>(())
    /// ```
    pub fn builder(name: impl Into<String>) -> RuleBuilder {
        RuleBuilder {
            name: name.into(),
            matches: Vec::new(),
            key: Vec::new(),
            limit: None,
            settings: Settings::default(),
            stripes: None,
            max_delay_ms: None,
        }
    }

    /// A builder holding this rule's every field, resolved (defaults applied):
    /// change one and build again.
    ///
    /// ```
    /// use sluicegate_policy::{Backend, PolicyDef};
    /// let text = "[redis]\nurl = \"redis://h\"\n[[rule]]\nname = \"a\"\nlimit = \"1/s\"\nbackend = \"redis\"\n";
    /// let def = PolicyDef::parse(text, None)?;
    /// let local = PolicyDef::builder()
    ///     .rules(def.rules().iter().map(|r| r.to_builder().backend(Backend::Local)))
    ///     .build()?;
    /// assert_eq!(local.rules()[0].backend(), Backend::Local);
    /// assert_eq!(local.rules()[0].spec(), def.rules()[0].spec());
    /// # Ok::<(), sluicegate_policy::Error>(())
    /// ```
    pub fn to_builder(&self) -> RuleBuilder {
        RuleBuilder {
            name: self.name.clone(),
            matches: self.match_values.clone(),
            key: self.key.iter().map(|k| k.as_str().to_owned()).collect(),
            limit: Some(self.limit.clone()),
            settings: Settings {
                algorithm: Some(Choice::Value(self.spec.kind())),
                backend: Some(Choice::Value(self.backend)),
                on_error: Some(Choice::Value(self.on_error)),
                mode: Some(Choice::Value(self.mode)),
                capacity: Some(self.capacity as u64),
            },
            stripes: (self.stripes > 1).then_some(self.stripes as u64),
            max_delay_ms: self.max_delay_ms,
        }
    }
}

impl RuleBuilder {
    /// `match = { attr = "value" }`: the request's `attr` must be `value` (a glob
    /// for `path`, a CIDR block for `ip`, `*` for any value). Each call adds one
    /// attribute; all must match.
    ///
    /// ```
    /// # use sluicegate_policy::{PolicyDef, RuleDef};
    /// let r = RuleDef::builder("a").limit("1/s").matching("path", "/api/*").matching("ip", "10.0.0.0/8");
    /// let def = PolicyDef::builder().rule(r).build()?;
    /// assert!(def.rules()[0].matches(&[("path", "/api/x"), ("ip", "10.1.2.3")]));
    /// assert!(!def.rules()[0].matches(&[("path", "/api/x"), ("ip", "192.0.2.1")]));
    /// # Ok::<(), sluicegate_policy::Error>(())
    /// ```
    pub fn matching(mut self, attr: impl Into<String>, value: impl Into<String>) -> Self {
        self.matches.push((attr.into(), vec![value.into()]));
        self
    }

    /// `match = { attr = ["a", "b"] }`: the request's `attr` must be any of `values`.
    ///
    /// ```
    /// # use sluicegate_policy::{PolicyDef, RuleDef};
    /// let r = RuleDef::builder("a").limit("1/s").matching_any("method", ["GET", "HEAD"]);
    /// let def = PolicyDef::builder().rule(r).build()?;
    /// assert!(def.rules()[0].matches(&[("method", "HEAD")]));
    /// # Ok::<(), sluicegate_policy::Error>(())
    /// ```
    pub fn matching_any<V: Into<String>>(
        mut self,
        attr: impl Into<String>,
        values: impl IntoIterator<Item = V>,
    ) -> Self {
        let values = values.into_iter().map(Into::into).collect();
        self.matches.push((attr.into(), values));
        self
    }

    /// `key = [...]`: the attributes that select the limiter (replaces any set before).
    ///
    /// ```
    /// # use sluicegate_policy::{PolicyDef, RuleDef};
    /// let def = PolicyDef::builder().rule(RuleDef::builder("a").limit("1/s").key(["ip", "tenant"])).build()?;
    /// assert_eq!(def.rules()[0].key()[1].as_str(), "tenant");
    /// # Ok::<(), sluicegate_policy::Error>(())
    /// ```
    pub fn key<K: Into<String>>(mut self, attrs: impl IntoIterator<Item = K>) -> Self {
        self.key = attrs.into_iter().map(Into::into).collect();
        self
    }

    /// `limit = "..."`: the rate string (required).
    ///
    /// ```
    /// # use sluicegate_policy::{Code, PolicyDef, RuleDef};
    /// let err = PolicyDef::builder().rule(RuleDef::builder("a").limit("5/fortnight")).build().unwrap_err();
    /// let d = &err.diagnostics()[0];
    /// assert_eq!((d.code, d.rule.as_deref(), d.field.as_deref()), (Code::BadRate, Some("a"), Some("limit")));
    /// assert!(err.to_string().starts_with("error: rule `a`, field `limit`: bad limit `5/fortnight`"));
    /// ```
    pub fn limit(mut self, limit: impl Into<String>) -> Self {
        self.limit = Some(limit.into());
        self
    }

    /// `algorithm = "..."`: a [`Kind`] or its name.
    ///
    /// ```
    /// # use sluicegate::Kind;
    /// # use sluicegate_policy::{PolicyDef, RuleDef};
    /// let r = RuleDef::builder("a").limit("10/minute").algorithm(Kind::SlidingWindow);
    /// let def = PolicyDef::builder().rule(r).build()?;
    /// assert_eq!(def.rules()[0].spec().kind(), Kind::SlidingWindow);
    /// # Ok::<(), sluicegate_policy::Error>(())
    /// ```
    pub fn algorithm(mut self, kind: impl Into<Choice<Kind>>) -> Self {
        self.settings.algorithm = Some(kind.into());
        self
    }

    /// `backend = "..."`: where the state lives.
    ///
    /// ```
    /// # use sluicegate_policy::{Code, PolicyDef, RuleDef};
    /// let err = PolicyDef::builder().rule(RuleDef::builder("a").limit("1/s").backend("redis")).build().unwrap_err();
    /// assert_eq!(err.diagnostics()[0].code, Code::Redis); // no [redis] settings
    /// ```
    pub fn backend(mut self, backend: impl Into<Choice<Backend>>) -> Self {
        self.settings.backend = Some(backend.into());
        self
    }

    /// `on_error = "..."`: what a Redis-backed rule answers while Redis fails.
    ///
    /// ```
    /// # use sluicegate_policy::{OnError, PolicyDef, RuleDef};
    /// let def = PolicyDef::builder().rule(RuleDef::builder("a").limit("1/s").on_error(OnError::Closed)).build()?;
    /// assert_eq!(def.rules()[0].on_error(), OnError::Closed);
    /// # Ok::<(), sluicegate_policy::Error>(())
    /// ```
    pub fn on_error(mut self, on_error: impl Into<Choice<OnError>>) -> Self {
        self.settings.on_error = Some(on_error.into());
        self
    }

    /// `mode = "..."`: enforce or shadow.
    ///
    /// ```
    /// # use sluicegate_policy::{Code, PolicyDef, RuleDef};
    /// let err = PolicyDef::builder().rule(RuleDef::builder("a").limit("1/s").mode("dry-run")).build().unwrap_err();
    /// assert!(err.to_string().contains("unknown mode `dry-run`"));
    /// ```
    pub fn mode(mut self, mode: impl Into<Choice<Mode>>) -> Self {
        self.settings.mode = Some(mode.into());
        self
    }

    /// `capacity = n`: the most live keys the rule holds at once in the policy's pool.
    ///
    /// ```
    /// # use sluicegate_policy::{PolicyDef, RuleDef};
    /// let def = PolicyDef::builder().rule(RuleDef::builder("a").limit("1/s").key(["ip"]).capacity(1024)).build()?;
    /// assert_eq!(def.rules()[0].capacity(), 1024);
    /// # Ok::<(), sluicegate_policy::Error>(())
    /// ```
    pub fn capacity(mut self, keys: u64) -> Self {
        self.settings.capacity = Some(keys);
        self
    }

    /// `stripes = n`: stripes of a keyless hot rule.
    ///
    /// ```
    /// # use sluicegate_policy::{PolicyDef, RuleDef};
    /// let def = PolicyDef::builder().rule(RuleDef::builder("a").limit("1000/s").stripes(4)).build()?;
    /// assert_eq!(def.rules()[0].stripes(), 4);
    /// # Ok::<(), sluicegate_policy::Error>(())
    /// ```
    pub fn stripes(mut self, stripes: u64) -> Self {
        self.stripes = Some(stripes);
        self
    }

    /// `max_delay_ms = n`: a shaper's longest wait.
    ///
    /// ```
    /// # use sluicegate_policy::{PolicyDef, RuleDef};
    /// let r = RuleDef::builder("a").limit("10/s").algorithm("shaper").max_delay_ms(250);
    /// let def = PolicyDef::builder().rule(r).build()?;
    /// assert_eq!(def.rules()[0].spec().max_delay_ns(), 250_000_000);
    /// # Ok::<(), sluicegate_policy::Error>(())
    /// ```
    pub fn max_delay_ms(mut self, ms: u64) -> Self {
        self.max_delay_ms = Some(ms);
        self
    }

    pub(crate) fn input(self) -> RuleIn {
        RuleIn {
            name: At::field(self.name, "name"),
            matches: self
                .matches
                .into_iter()
                .map(|(attr, values)| {
                    let f = format!("match.{attr}");
                    let values = values
                        .into_iter()
                        .map(|v| At::field(v, f.clone()))
                        .collect();
                    (At::field(attr, "match"), At::field(values, f))
                })
                .collect(),
            key: self.key.into_iter().map(|k| At::field(k, "key")).collect(),
            limit: self.limit.map(|l| At::field(l, "limit")),
            settings: self.settings.input(""),
            stripes: self.stripes.map(|n| At::field(int(n), "stripes")),
            max_delay_ms: self.max_delay_ms.map(|n| At::field(int(n), "max_delay_ms")),
        }
    }
}
