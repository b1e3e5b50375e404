//! From TOML text to a [`PolicyDef`]: every check, each finding located.

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::str::FromStr;
use std::time::Duration;

use sluicegate::{Kind, Spec, SpecError};

use crate::attrs::AttrName;
use crate::cond::{Cidr, Cond, Value};
use crate::def::{
    Backend, DEFAULT_CAPACITY, DEFAULT_KIND, Mode, OnError, PolicyDef, RedisSettings, RuleDef,
    StateSettings,
};
use crate::diag::{Code, Diagnostic, Error, Lines, Severity};
use crate::raw::{RawFile, RawRule, RawValue, S, content_start};

/// The most keys one rule's table may be asked for (2³²; 16 bytes each).
const MAX_CAPACITY: i64 = 1 << 32;

struct Ctx<'a> {
    file: &'a str,
    lines: Lines<'a>,
    text: &'a str,
    out: Vec<Diagnostic>,
    rule: Option<String>,
}

impl Ctx<'_> {
    fn at(&mut self, severity: Severity, code: Code, offset: usize, message: String) {
        let (line, column) = self.lines.locate(offset);
        self.out.push(Diagnostic {
            severity,
            code,
            file: self.file.to_owned(),
            line,
            column,
            rule: self.rule.clone(),
            message,
        });
    }
    fn err<T>(&mut self, code: Code, v: &S<T>, message: String) {
        self.at(Severity::Error, code, v.span().start, message);
    }
    /// An error inside a string value, `pos` bytes into its text.
    fn err_in(&mut self, code: Code, v: &S<String>, pos: usize, message: String) {
        let start = content_start(v, self.text);
        self.at(Severity::Error, code, start + pos, message);
    }
    fn choice<T: FromStr<Err = String>>(&mut self, v: Option<&S<String>>, default: T) -> T {
        match v {
            None => default,
            Some(s) => match s.get_ref().parse() {
                Ok(t) => t,
                Err(e) => {
                    self.err(Code::BadValue, s, e);
                    default
                }
            },
        }
    }
}

pub(crate) fn parse(text: &str, file: &str) -> Result<PolicyDef, Error> {
    let mut cx = Ctx {
        file,
        lines: Lines::new(text),
        text,
        out: Vec::new(),
        rule: None,
    };
    let raw: RawFile = match toml::from_str(text) {
        Ok(r) => r,
        Err(e) => {
            let offset = e.span().map_or(0, |s| s.start);
            cx.at(
                Severity::Error,
                Code::Syntax,
                offset,
                e.message().to_owned(),
            );
            return Err(Error {
                diagnostics: cx.out,
            });
        }
    };
    let d = &raw.defaults;
    let kind = match &d.algorithm {
        Some(a) => kind(&mut cx, a).unwrap_or(DEFAULT_KIND),
        None => DEFAULT_KIND,
    };
    let backend = cx.choice(d.backend.as_ref(), Backend::Local);
    let on_error = cx.choice(d.on_error.as_ref(), OnError::Local);
    let mode = cx.choice(d.mode.as_ref(), Mode::Enforce);
    let capacity = match &d.capacity {
        Some(c) => capacity(&mut cx, c),
        None => DEFAULT_CAPACITY,
    };
    let ipv6_prefix = match &d.ipv6_prefix {
        Some(p) if (1..=128).contains(p.get_ref()) => *p.get_ref() as u8,
        Some(p) => {
            cx.err(Code::BadValue, p, "ipv6_prefix must be 1 to 128".into());
            64
        }
        None => 64,
    };
    let redis = raw.redis.as_ref().and_then(|r| redis(&mut cx, r));
    let mut state = StateSettings::default();
    if let Some(m) = raw.state.as_ref().map(|s| &s.get_ref().memory) {
        match StateSettings::parse_memory(m.get_ref()) {
            Ok(bytes) => state.memory = bytes,
            Err(e) => cx.err(Code::BadValue, m, e),
        }
    }
    let defaults = Defaults {
        kind,
        kind_at: d.algorithm.as_ref().map(|a| a.span().start),
        backend,
        backend_at: d.backend.as_ref().map(|b| b.span().start),
        on_error,
        mode,
        capacity,
        has_redis: raw.redis.is_some(),
    };
    let mut rules: Vec<RuleDef> = Vec::with_capacity(raw.rule.len());
    let mut names: HashMap<String, usize> = HashMap::new();
    let mut seen = Seen::new();
    for r in &raw.rule {
        let r = r.get_ref();
        cx.rule = Some(r.name.get_ref().clone());
        if let Some(line) = names.get(r.name.get_ref()) {
            let msg = format!("a rule with this name is already defined on line {line}");
            cx.err(Code::DuplicateName, &r.name, msg);
        }
        if r.name.get_ref().is_empty() {
            cx.err(
                Code::BadValue,
                &r.name,
                "a rule needs a non-empty name".into(),
            );
        }
        let line = cx.lines.locate(r.name.span().start).0;
        names.entry(r.name.get_ref().clone()).or_insert(line);
        if let Some(rule) = rule(&mut cx, r, &defaults, line) {
            shadowed(&mut cx, &rule, &rules, &mut seen, r);
            rules.push(rule);
        }
        cx.rule = None;
    }
    if cx.out.iter().any(|d| d.severity == Severity::Error) {
        cx.out
            .sort_by_key(|d| (d.severity == Severity::Warning, d.line, d.column));
        return Err(Error {
            diagnostics: cx.out,
        });
    }
    cx.out.sort_by_key(|d| (d.line, d.column));
    Ok(PolicyDef {
        rules,
        redis,
        state,
        ipv6_prefix,
        warnings: cx.out,
    })
}

struct Defaults {
    kind: Kind,
    kind_at: Option<usize>,
    backend: Backend,
    backend_at: Option<usize>,
    on_error: OnError,
    mode: Mode,
    capacity: usize,
    has_redis: bool,
}

fn kind(cx: &mut Ctx<'_>, a: &S<String>) -> Option<Kind> {
    match a.get_ref().parse::<Kind>() {
        Ok(k) => Some(k),
        Err(e) => {
            cx.err(
                Code::UnknownAlgorithm,
                a,
                format!("{e} (got `{}`)", a.get_ref()),
            );
            None
        }
    }
}

fn capacity(cx: &mut Ctx<'_>, c: &S<i64>) -> usize {
    match usize::try_from(*c.get_ref()) {
        Ok(n) if n > 0 && *c.get_ref() <= MAX_CAPACITY => n,
        _ => {
            let msg = format!("capacity must be 1 to {MAX_CAPACITY} keys");
            cx.err(Code::BadValue, c, msg);
            DEFAULT_CAPACITY
        }
    }
}

fn redis(cx: &mut Ctx<'_>, r: &S<crate::raw::RawRedis>) -> Option<RedisSettings> {
    let url = &r.get_ref().url;
    let ok = ["redis://", "rediss://", "unix://", "redis+unix://"]
        .iter()
        .any(|s| url.get_ref().starts_with(s) && url.get_ref().len() > s.len());
    if !ok {
        let msg = "the Redis URL must start with redis://, rediss:// or unix:// and name a server";
        cx.err(Code::Redis, url, msg.into());
        return None;
    }
    let r = r.get_ref();
    let lease_horizon = r
        .lease_horizon_ms
        .as_ref()
        .and_then(|ms| lease_ms(cx, ms, "lease_horizon_ms"));
    let lease_ttl = r
        .lease_ttl_ms
        .as_ref()
        .and_then(|ms| lease_ms(cx, ms, "lease_ttl_ms"));
    Some(RedisSettings {
        url: url.get_ref().clone(),
        prefix: r
            .prefix
            .as_ref()
            .map_or_else(|| "sluicegate:".to_owned(), |p| p.get_ref().clone()),
        lease_horizon,
        lease_ttl,
    })
}

/// The longest lease horizon or lifetime a `[redis]` table may set: an hour.
const MAX_LEASE_MS: i64 = 3_600_000;

/// A `[redis]` lease duration: 1 ms to an hour.
fn lease_ms(cx: &mut Ctx<'_>, ms: &S<i64>, field: &str) -> Option<Duration> {
    match u64::try_from(*ms.get_ref()) {
        Ok(n) if n > 0 && *ms.get_ref() <= MAX_LEASE_MS => Some(Duration::from_millis(n)),
        _ => {
            let msg = format!("{field} must be 1 to {MAX_LEASE_MS} milliseconds");
            cx.err(Code::BadValue, ms, msg);
            None
        }
    }
}

fn rule(cx: &mut Ctx<'_>, r: &RawRule, d: &Defaults, line: usize) -> Option<RuleDef> {
    let errors_before = cx.out.len();
    let (kind, kind_at) = match &r.algorithm {
        Some(a) => (kind(cx, a)?, a.span().start),
        None => (d.kind, d.kind_at.unwrap_or(r.limit.span().start)),
    };
    let backend = r
        .backend
        .as_ref()
        .map_or(d.backend, |b| cx.choice(Some(b), d.backend));
    let backend_at = r
        .backend
        .as_ref()
        .map(|b| b.span().start)
        .or(d.backend_at)
        .unwrap_or(r.name.span().start);
    let on_error = cx.choice(r.on_error.as_ref(), d.on_error);
    let mode = cx.choice(r.mode.as_ref(), d.mode);
    let capacity = r.capacity.as_ref().map_or(d.capacity, |c| capacity(cx, c));

    let mut matches = Vec::new();
    if let Some(m) = &r.matches {
        for (name, value) in m.get_ref() {
            match AttrName::parse(name.get_ref()) {
                Ok(attr) => {
                    let cond = cond(cx, &attr, value);
                    if cond.is_empty() {
                        let msg = format!(
                            "`{attr}` is matched against an empty list, so this rule never matches"
                        );
                        cx.at(
                            Severity::Warning,
                            Code::NeverMatches,
                            value.span().start,
                            msg,
                        );
                    }
                    matches.push((attr, cond));
                }
                Err(e) => cx.err(Code::BadAttribute, name, e),
            }
        }
    }
    let mut key = Vec::new();
    if let Some(k) = &r.key {
        for name in k.get_ref() {
            match AttrName::parse(name.get_ref()) {
                Ok(a) if key.contains(&a) => {
                    cx.err(
                        Code::BadValue,
                        name,
                        format!("`{a}` is listed twice in key"),
                    );
                }
                Ok(a) => key.push(a),
                Err(e) => cx.err(Code::BadAttribute, name, e),
            }
        }
    }
    let mut spec = match Spec::parse(kind, r.limit.get_ref()) {
        Ok(s) => s,
        Err(e) => {
            spec_error(cx, &r.limit, e);
            return None;
        }
    };
    if let Some(ms) = &r.max_delay_ms {
        let ns = u64::try_from(*ms.get_ref())
            .ok()
            .and_then(|m| m.checked_mul(1_000_000));
        match ns.map(|ns| spec.with_max_delay_ns(ns)) {
            Some(Ok(s)) => spec = s,
            Some(Err(e)) => cx.err(Code::Limit, ms, e.to_string()),
            None => cx.err(Code::BadValue, ms, "max_delay_ms must be 0 or more".into()),
        }
    }
    let caps = kind.caps();
    if !key.is_empty() && !caps.keyed {
        let msg = format!(
            "{kind} cannot be keyed (its state is not one word); use it with key = [] or pick a keyed algorithm"
        );
        cx.at(Severity::Error, Code::Limit, kind_at, msg);
    }
    let mut stripes = 1;
    if let Some(s) = &r.stripes {
        let max = Spec::MAX_STRIPES as i64;
        if !(1..=max).contains(s.get_ref()) {
            cx.err(Code::BadValue, s, format!("stripes must be 1 to {max}"));
        } else if !caps.striped {
            cx.err(Code::Limit, s, format!("{kind} cannot be striped"));
        } else if !key.is_empty() {
            let msg = "stripes are for one hot keyless limit: use key = [] or drop stripes";
            cx.err(Code::BadValue, s, msg.into());
        } else if backend != Backend::Local {
            cx.err(Code::BadValue, s, "stripes need backend = \"local\"".into());
        } else {
            stripes = *s.get_ref() as usize;
        }
    }
    if backend != Backend::Local {
        if !d.has_redis {
            let msg = format!("backend `{backend}` needs a [redis] table with the server's url");
            cx.at(Severity::Error, Code::Redis, backend_at, msg);
        } else if !caps.redis {
            let msg = format!("{kind} has no Redis script; use backend = \"local\"");
            cx.at(Severity::Error, Code::Redis, backend_at, msg);
        }
    }
    never_matches(cx, r);
    if cx.out[errors_before..]
        .iter()
        .any(|d| d.severity == Severity::Error)
    {
        return None;
    }
    Some(RuleDef {
        name: r.name.get_ref().clone(),
        line,
        matches,
        key,
        limit: r.limit.get_ref().clone(),
        spec,
        backend,
        on_error,
        mode,
        capacity,
        stripes,
    })
}

fn cond(cx: &mut Ctx<'_>, attr: &AttrName, v: &S<RawValue>) -> Cond {
    let one = |cx: &mut Ctx<'_>, s: &str, at: usize| -> Option<Value> {
        if attr.is_ip() {
            match Cidr::parse(s) {
                Ok(c) => Some(Value::Cidr(c)),
                Err(e) => {
                    cx.at(Severity::Error, Code::BadCidr, at, e);
                    None
                }
            }
        } else if attr.is_path() && (s.contains('*') || s.contains('?')) {
            Some(Value::Glob(s.into()))
        } else {
            Some(Value::Exact(s.into()))
        }
    };
    match v.get_ref() {
        RawValue::One(s) if s == "*" => Cond::Present,
        RawValue::One(s) => {
            let at = content_start(v, cx.text);
            Cond::Any(one(cx, s, at).into_iter().collect())
        }
        RawValue::Many(all) if all.iter().any(|s| s.get_ref() == "*") => Cond::Present,
        RawValue::Many(all) => Cond::Any(
            all.iter()
                .filter_map(|s| {
                    let at = content_start(s, cx.text);
                    one(cx, s.get_ref(), at)
                })
                .collect(),
        ),
    }
}

/// Values no HTTP integration ever fills: a path without a leading `/`, a method
/// in lower case.
fn never_matches(cx: &mut Ctx<'_>, r: &RawRule) {
    let Some(m) = &r.matches else { return };
    for (name, value) in m.get_ref() {
        let strings: Vec<&str> = match value.get_ref() {
            RawValue::One(s) => vec![s],
            RawValue::Many(v) => v.iter().map(|s| s.get_ref().as_str()).collect(),
        };
        let all_bad =
            |bad: &dyn Fn(&str) -> bool| !strings.is_empty() && strings.iter().all(|s| bad(s));
        let msg = match name.get_ref().as_str() {
            "path" if all_bad(&|s| !s.starts_with('/') && !s.starts_with('*')) => {
                "paths start with `/`, so this rule never matches"
            }
            "method" if all_bad(&|s| s != "*" && s.bytes().any(|b| b.is_ascii_lowercase())) => {
                "HTTP methods are upper case (`POST`), so this rule never matches"
            }
            _ => continue,
        };
        cx.at(
            Severity::Warning,
            Code::NeverMatches,
            value.span().start,
            msg.into(),
        );
    }
}

/// Earlier rules by a hash of what [`shadowed`] compares: a rule is compared
/// only with those of its bucket, not with every earlier rule.
type Seen = HashMap<u64, Vec<usize>>;

fn shadowed(cx: &mut Ctx<'_>, rule: &RuleDef, earlier: &[RuleDef], seen: &mut Seen, r: &RawRule) {
    let same = |o: &&RuleDef| {
        o.same_limiter(rule)
            && o.mode == rule.mode
            && o.on_error == rule.on_error
            && o.matches == rule.matches
    };
    // Everything `same` compares (`same_limiter` compares a subset of these).
    let mut h = std::hash::DefaultHasher::new();
    (
        &rule.key,
        &rule.spec,
        rule.backend,
        rule.capacity,
        rule.stripes,
    )
        .hash(&mut h);
    (rule.mode, rule.on_error, &rule.matches).hash(&mut h);
    let bucket = seen.entry(h.finish()).or_default();
    if let Some(o) = bucket.iter().filter_map(|&i| earlier.get(i)).find(same) {
        let msg = format!(
            "identical to rule `{}` (line {}): it applies the same limit to the same requests a second time",
            o.name, o.line
        );
        cx.at(Severity::Warning, Code::Shadowed, r.name.span().start, msg);
    }
    bucket.push(earlier.len());
}

/// A rate-string or spec error, pointed at the character (parse errors) or the
/// quota (bounds) it is about.
fn spec_error(cx: &mut Ctx<'_>, limit: &S<String>, e: SpecError) {
    match e {
        SpecError::Parse(p) => {
            let msg = format!("bad limit `{}`: {}", limit.get_ref(), p.kind.message());
            cx.err_in(Code::BadRate, limit, p.position, msg);
        }
        SpecError::Config { index, error } => {
            let pos = quota_offset(limit.get_ref(), index);
            let msg = format!("limit `{}`: {error}", limit.get_ref());
            cx.err_in(Code::Limit, limit, pos, msg);
        }
        e => {
            let msg = format!("limit `{}`: {e}", limit.get_ref());
            cx.err_in(Code::Limit, limit, 0, msg);
        }
    }
}

/// Byte offset of the `index`-th `;`-separated quota, after its leading blanks.
fn quota_offset(s: &str, index: usize) -> usize {
    let mut off = 0;
    for (i, part) in s.split(';').enumerate() {
        if i == index {
            return off + (part.len() - part.trim_start().len());
        }
        off += part.len() + 1;
    }
    0
}
