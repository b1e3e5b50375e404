//! A policy before validation, from either source: rule-file text
//! ([`crate::raw`]) or values ([`crate::builder`]). Every value carries where it
//! came from, so that the one validator ([`crate::validate`]) can say where a
//! finding is: a line and column, or a rule and field.

use std::borrow::Cow;

use sluicegate::Kind;

use crate::def::{Backend, Mode, OnError};
use crate::rule_builder::Choice;

/// Where a value came from.
#[derive(Clone, Debug)]
pub(crate) struct Loc {
    /// The field as the rule file names it: `limit`, `match.path`,
    /// `defaults.capacity`, `redis.url`.
    pub field: Cow<'static, str>,
    /// In rule-file text: the byte offset of the value, and of its string
    /// content (after the opening quotes). `None` for values.
    pub span: Option<(usize, usize)>,
}

/// A value and where it came from.
#[derive(Clone, Debug)]
pub(crate) struct At<T> {
    pub v: T,
    pub loc: Loc,
}

impl<T> At<T> {
    /// A value given by a builder, for `field`.
    pub(crate) fn field(v: T, field: impl Into<Cow<'static, str>>) -> At<T> {
        At {
            v,
            loc: Loc {
                field: field.into(),
                span: None,
            },
        }
    }
}

/// A whole policy.
#[derive(Default)]
pub(crate) struct FileIn {
    pub defaults: DefaultsIn,
    pub redis: Option<RedisIn>,
    /// `[state] memory`: a size's text, or bytes.
    pub state_memory: Option<At<Choice<usize>>>,
    /// `[shared] path`: the shared-memory region the keyed state lives in.
    pub shared_path: Option<At<String>>,
    pub rules: Vec<RuleIn>,
}

/// What a rule and `[defaults]` both set (a rule's own value wins).
#[derive(Default)]
pub(crate) struct SettingsIn {
    pub algorithm: Option<At<Choice<Kind>>>,
    pub backend: Option<At<Choice<Backend>>>,
    pub on_error: Option<At<Choice<OnError>>>,
    pub mode: Option<At<Choice<Mode>>>,
    pub capacity: Option<At<i64>>,
}

/// `[defaults]`.
#[derive(Default)]
pub(crate) struct DefaultsIn {
    pub settings: SettingsIn,
    pub ipv6_prefix: Option<At<i64>>,
}

/// `[redis]`.
pub(crate) struct RedisIn {
    pub url: At<String>,
    pub prefix: Option<At<String>>,
    pub lease_horizon_ms: Option<At<i64>>,
    pub lease_ttl_ms: Option<At<i64>>,
}

/// One `match` entry: the attribute, and its values (any of).
pub(crate) type MatchIn = (At<String>, At<Vec<At<String>>>);

/// One `[[rule]]`.
pub(crate) struct RuleIn {
    pub name: At<String>,
    /// `match`, in the order given (a file's is ordered by attribute).
    pub matches: Vec<MatchIn>,
    pub key: Vec<At<String>>,
    /// Always there in text (a missing one is a syntax error); a builder may
    /// lack it.
    pub limit: Option<At<String>>,
    pub settings: SettingsIn,
    pub stripes: Option<At<i64>>,
    pub max_delay_ms: Option<At<i64>>,
}
