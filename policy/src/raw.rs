//! The rule file as TOML gives it: every value with its byte span.

use std::collections::BTreeMap;
use std::fmt;

use serde::Deserialize;
use serde::de::{self, Deserializer, SeqAccess, Visitor};
use toml::Spanned;

pub(crate) type S<T> = Spanned<T>;

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawFile {
    #[serde(default)]
    pub defaults: RawDefaults,
    pub redis: Option<S<RawRedis>>,
    pub state: Option<S<RawState>>,
    #[serde(default)]
    pub rule: Vec<S<RawRule>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawState {
    pub memory: S<String>,
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

/// Where the text of a string value starts: after its opening quote(s).
pub(crate) fn content_start<T>(v: &S<T>, text: &str) -> usize {
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
