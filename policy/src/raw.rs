//! The rule file as TOML gives it: every value with its byte span.

use std::collections::BTreeMap;
use std::fmt;

use std::borrow::Cow;

use serde::Deserialize;
use serde::de::{self, Deserializer, SeqAccess, Visitor};
use toml::Spanned;

use crate::input::{At, DefaultsIn, FileIn, Loc, RedisIn, RuleIn, SettingsIn};
use crate::rule_builder::Choice;

type S<T> = Spanned<T>;

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawFile {
    #[serde(default)]
    pub defaults: RawDefaults,
    pub redis: Option<S<RawRedis>>,
    pub state: Option<S<RawState>>,
    pub shared: Option<S<RawShared>>,
    #[serde(default)]
    pub rule: Vec<S<RawRule>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawState {
    pub memory: S<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawShared {
    pub path: S<String>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawDefaults {
    pub algorithm: Option<S<String>>,
    pub backend: Option<S<String>>,
    pub on_error: Option<S<String>>,
    pub mode: Option<S<String>>,
    pub capacity: Option<S<i64>>,
    pub ipv6_prefix: Option<S<i64>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawRedis {
    pub url: S<String>,
    pub prefix: Option<S<String>>,
    pub lease_horizon_ms: Option<S<i64>>,
    pub lease_ttl_ms: Option<S<i64>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawRule {
    pub name: S<String>,
    #[serde(rename = "match")]
    pub matches: Option<S<BTreeMap<S<String>, S<RawValue>>>>,
    pub key: Option<S<Vec<S<String>>>>,
    pub limit: S<String>,
    pub algorithm: Option<S<String>>,
    pub backend: Option<S<String>>,
    pub on_error: Option<S<String>>,
    pub mode: Option<S<String>>,
    pub capacity: Option<S<i64>>,
    pub stripes: Option<S<i64>>,
    pub max_delay_ms: Option<S<i64>>,
}

/// A `match` value: one string, or a list of them (any of).
pub(crate) enum RawValue {
    One(String),
    Many(Vec<S<String>>),
}

impl<'de> Deserialize<'de> for RawValue {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = RawValue;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string or a list of strings")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<RawValue, E> {
                Ok(RawValue::One(v.to_owned()))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<RawValue, A::Error> {
                let mut all = Vec::new();
                while let Some(v) = seq.next_element::<S<String>>()? {
                    all.push(v);
                }
                Ok(RawValue::Many(all))
            }
        }
        d.deserialize_any(V)
    }
}

impl RawFile {
    /// The file as the validator takes it: every value located in `text`.
    pub(crate) fn into_input(self, text: &str) -> FileIn {
        let t = Text(text);
        let d = self.defaults;
        FileIn {
            defaults: DefaultsIn {
                settings: t.settings(
                    "defaults.",
                    [d.algorithm, d.backend, d.on_error, d.mode],
                    d.capacity,
                ),
                ipv6_prefix: d.ipv6_prefix.map(|v| t.at(v, "defaults.ipv6_prefix")),
            },
            redis: self.redis.map(|r| {
                let r = r.into_inner();
                RedisIn {
                    url: t.at(r.url, "redis.url"),
                    prefix: r.prefix.map(|v| t.at(v, "redis.prefix")),
                    lease_horizon_ms: r
                        .lease_horizon_ms
                        .map(|v| t.at(v, "redis.lease_horizon_ms")),
                    lease_ttl_ms: r.lease_ttl_ms.map(|v| t.at(v, "redis.lease_ttl_ms")),
                }
            }),
            state_memory: self
                .state
                .map(|s| t.choice(s.into_inner().memory, "state.memory".into())),
            shared_path: self
                .shared
                .map(|s| t.at(s.into_inner().path, "shared.path")),
            rules: self
                .rule
                .into_iter()
                .map(|r| t.rule(r.into_inner()))
                .collect(),
        }
    }
}

/// Locates values in the text they were read from.
#[derive(Clone, Copy)]
struct Text<'a>(&'a str);

impl Text<'_> {
    fn at<T>(self, v: S<T>, field: impl Into<Cow<'static, str>>) -> At<T> {
        let span = Some((v.span().start, content_start(&v, self.0)));
        At {
            v: v.into_inner(),
            loc: Loc {
                field: field.into(),
                span,
            },
        }
    }

    /// `algorithm`, `backend`, `on_error`, `mode` (in that order) and `capacity`,
    /// their fields named after `prefix`.
    fn settings(
        self,
        prefix: &str,
        [algorithm, backend, on_error, mode]: [Option<S<String>>; 4],
        capacity: Option<S<i64>>,
    ) -> SettingsIn {
        let field = |name: &str| format!("{prefix}{name}");
        SettingsIn {
            algorithm: algorithm.map(|v| self.choice(v, field("algorithm"))),
            backend: backend.map(|v| self.choice(v, field("backend"))),
            on_error: on_error.map(|v| self.choice(v, field("on_error"))),
            mode: mode.map(|v| self.choice(v, field("mode"))),
            capacity: capacity.map(|v| self.at(v, field("capacity"))),
        }
    }

    fn choice<T>(self, v: S<String>, field: String) -> At<Choice<T>> {
        let At { v, loc } = self.at(v, field);
        At {
            v: Choice::Name(v),
            loc,
        }
    }

    fn rule(self, r: RawRule) -> RuleIn {
        let matches = r.matches.map_or_else(Vec::new, |m| {
            m.into_inner()
                .into_iter()
                .map(|(name, value)| {
                    let field = format!("match.{}", name.get_ref());
                    let name = self.at(name, "match");
                    let value = match self.at(value, field.clone()) {
                        At {
                            v: RawValue::One(s),
                            loc,
                        } => At {
                            v: vec![At {
                                v: s,
                                loc: loc.clone(),
                            }],
                            loc,
                        },
                        At {
                            v: RawValue::Many(all),
                            loc,
                        } => At {
                            v: all.into_iter().map(|s| self.at(s, field.clone())).collect(),
                            loc,
                        },
                    };
                    (name, value)
                })
                .collect()
        });
        RuleIn {
            name: self.at(r.name, "name"),
            matches,
            key: r.key.map_or_else(Vec::new, |k| {
                k.into_inner()
                    .into_iter()
                    .map(|k| self.at(k, "key"))
                    .collect()
            }),
            limit: Some(self.at(r.limit, "limit")),
            settings: self.settings("", [r.algorithm, r.backend, r.on_error, r.mode], r.capacity),
            stripes: r.stripes.map(|v| self.at(v, "stripes")),
            max_delay_ms: r.max_delay_ms.map(|v| self.at(v, "max_delay_ms")),
        }
    }
}

/// Where the text of a string value starts: after its opening quote(s).
fn content_start<T>(v: &S<T>, text: &str) -> usize {
    let s = v.span().start;
    let rest = text.get(s..).unwrap_or("");
    if rest.starts_with("\"\"\"") || rest.starts_with("'''") {
        s + 3
    } else if rest.starts_with('"') || rest.starts_with('\'') {
        s + 1
    } else {
        s
    }
}
