//! The one validator: rule-file text ([`crate::raw`]) and values
//! ([`crate::builder`]) both arrive as a [`FileIn`] and leave as a [`PolicyDef`],
//! or as every error found, each located at its line and column (text) or its
//! rule and field (values).

use std::collections::HashMap;
use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};
use std::str::FromStr;
use std::time::Duration;

use sluicegate::{Kind, Quota, Spec, SpecError};

use crate::attrs::AttrName;
use crate::cond::{Cidr, Cond, Value};
use crate::def::{
    Backend, DEFAULT_CAPACITY, DEFAULT_KIND, Mode, OnError, PolicyDef, RedisSettings, RuleDef,
    SharedSettings, StateSettings,
};
use crate::diag::{Code, Diagnostic, Error, Lines, Severity};
use crate::input::{At, FileIn, Loc, RedisIn, RuleIn};
use crate::raw::RawFile;
use crate::rule_builder::Choice;

/// The most keys one rule's table may be asked for (2³²; 16 bytes each).
const MAX_CAPACITY: i64 = 1 << 32;

struct Ctx<'a> {
    file: &'a str,
    /// The text values were read from; `None` for values.
    lines: Option<Lines<'a>>,
    out: Vec<Diagnostic>,
    rule: Option<String>,
}

impl Ctx<'_> {
    /// A finding at `loc`, `pos` bytes into its string when given.
    fn push(
        &mut self,
        severity: Severity,
        code: Code,
        loc: &Loc,
        pos: Option<usize>,
        message: String,
    ) {
        let (line, column) = match (&self.lines, loc.span) {
            (Some(lines), Some((start, content))) => {
                lines.locate(pos.map_or(start, |p| content + p))
            }
            _ => (0, 0),
        };
        self.out.push(Diagnostic {
            severity,
            code,
            file: self.file.to_owned(),
            line,
            column,
            rule: self.rule.clone(),
            field: Some(loc.field.clone().into_owned()),
            message,
        });
    }
    fn err<T>(&mut self, code: Code, v: &At<T>, message: String) {
        self.push(Severity::Error, code, &v.loc, None, message);
    }
    fn warn<T>(&mut self, code: Code, v: &At<T>, message: String) {
        self.push(Severity::Warning, code, &v.loc, None, message);
    }
    /// An error inside a string value, `pos` bytes into its text.
    fn err_in(&mut self, code: Code, v: &At<String>, pos: usize, message: String) {
        self.push(Severity::Error, code, &v.loc, Some(pos), message);
    }
    /// The line a value is on (0 for values).
    fn line(&self, loc: &Loc) -> usize {
        match (&self.lines, loc.span) {
            (Some(lines), Some((start, _))) => lines.locate(start).0,
            _ => 0,
        }
    }
    fn choice<T: FromStr<Err = String> + Copy>(
        &mut self,
        v: Option<&At<Choice<T>>>,
        default: T,
    ) -> T {
        match v.map(|a| (a, &a.v)) {
            None => default,
            Some((_, Choice::Value(t))) => *t,
            Some((a, Choice::Name(s))) => match s.parse() {
                Ok(t) => t,
                Err(e) => {
                    self.err(Code::BadValue, a, e);
                    default
                }
            },
        }
    }
    fn has_errors(&self, since: usize) -> bool {
        self.out[since..]
            .iter()
            .any(|d| d.severity == Severity::Error)
    }
}

/// Reads and validates rule-file text.
pub(crate) fn parse(text: &str, file: &str) -> Result<PolicyDef, Error> {
    let raw: RawFile = match toml::from_str(text) {
        Ok(r) => r,
        Err(e) => {
            let (line, column) = Lines::new(text).locate(e.span().map_or(0, |s| s.start));
            return Err(Error::one(Diagnostic {
                severity: Severity::Error,
                code: Code::Syntax,
                file: file.to_owned(),
                line,
                column,
                rule: None,
                field: None,
                message: e.message().to_owned(),
            }));
        }
    };
    validate(raw.into_input(text), file, Some(Lines::new(text)))
}

/// Validates a policy given as values.
pub(crate) fn values(input: FileIn, file: &str) -> Result<PolicyDef, Error> {
    validate(input, file, None)
}

fn validate(f: FileIn, file: &str, lines: Option<Lines<'_>>) -> Result<PolicyDef, Error> {
    let mut cx = Ctx {
        file,
        lines,
        out: Vec::new(),
        rule: None,
    };
    let d = &f.defaults.settings;
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
    let ipv6_prefix = match &f.defaults.ipv6_prefix {
        Some(p) if (1..=128).contains(&p.v) => p.v as u8,
        Some(p) => {
            cx.err(Code::BadValue, p, "ipv6_prefix must be 1 to 128".into());
            64
        }
        None => 64,
    };
    let redis = f.redis.as_ref().and_then(|r| redis(&mut cx, r));
    let mut state = StateSettings::default();
    if let Some(m) = &f.state_memory {
        // A number of bytes is checked as the file's bytes are.
        let parsed = match &m.v {
            Choice::Name(text) => StateSettings::parse_memory(text),
            Choice::Value(bytes) => StateSettings::parse_memory(&bytes.to_string()),
        };
        match parsed {
            Ok(bytes) => state.memory = bytes,
            Err(e) => cx.err(Code::BadValue, m, e),
        }
    }
    let shared = match &f.shared_path {
        Some(p) if p.v.is_empty() || p.v.contains('\0') => {
            let msg = "a shared region's path or name must be non-empty text".to_owned();
            cx.err(Code::BadValue, p, msg);
            None
        }
        Some(p) => Some(SharedSettings { path: p.v.clone() }),
        None => None,
    };
    let defaults = Defaults {
        kind,
        kind_at: d.algorithm.as_ref().map(|a| a.loc.clone()),
        backend,
        backend_at: d.backend.as_ref().map(|b| b.loc.clone()),
        on_error,
        mode,
        capacity,
        has_redis: f.redis.is_some(),
    };
    let mut rules: Vec<RuleDef> = Vec::with_capacity(f.rules.len());
    let mut names: HashMap<&str, usize> = HashMap::with_capacity(f.rules.len());
    let mut same: HashMap<u64, Vec<usize>> = HashMap::new();
    for r in &f.rules {
        cx.rule = Some(r.name.v.clone());
        let line = cx.line(&r.name.loc);
        match names.get(r.name.v.as_str()) {
            Some(0) => {
                let msg = "a rule with this name is already defined".to_owned();
                cx.err(Code::DuplicateName, &r.name, msg);
            }
            Some(earlier) => {
                let msg = format!("a rule with this name is already defined on line {earlier}");
                cx.err(Code::DuplicateName, &r.name, msg);
            }
            None => {
                names.insert(&r.name.v, line);
            }
        }
        if r.name.v.is_empty() {
            let msg = "a rule needs a non-empty name".to_owned();
            cx.err(Code::BadValue, &r.name, msg);
        }
        if let Some(rule) = rule(&mut cx, r, &defaults, line) {
            shadowed(&mut cx, &rule, &rules, &mut same, &r.name);
            rules.push(rule);
        }
        cx.rule = None;
    }
    if cx.has_errors(0) {
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
        shared,
        ipv6_prefix,
        warnings: cx.out,
        file: file.to_owned(),
    })
}

struct Defaults {
    kind: Kind,
    kind_at: Option<Loc>,
    backend: Backend,
    backend_at: Option<Loc>,
    on_error: OnError,
    mode: Mode,
    capacity: usize,
    has_redis: bool,
}

fn kind(cx: &mut Ctx<'_>, a: &At<Choice<Kind>>) -> Option<Kind> {
    match &a.v {
        Choice::Value(k) => Some(*k),
        Choice::Name(s) => match s.parse::<Kind>() {
            Ok(k) => Some(k),
            Err(e) => {
                cx.err(Code::UnknownAlgorithm, a, format!("{e} (got `{s}`)"));
                None
            }
        },
    }
}

fn capacity(cx: &mut Ctx<'_>, c: &At<i64>) -> usize {
    match usize::try_from(c.v) {
        Ok(n) if n > 0 && c.v <= MAX_CAPACITY => n,
        _ => {
            let msg = format!("capacity must be 1 to {MAX_CAPACITY} keys");
            cx.err(Code::BadValue, c, msg);
            DEFAULT_CAPACITY
        }
    }
}

fn redis(cx: &mut Ctx<'_>, r: &RedisIn) -> Option<RedisSettings> {
    let url = &r.url;
    let ok = ["redis://", "rediss://", "unix://", "redis+unix://"]
        .iter()
        .any(|s| url.v.starts_with(s) && url.v.len() > s.len());
    if !ok {
        let msg = "the Redis URL must start with redis://, rediss:// or unix:// and name a server";
        cx.err(Code::Redis, url, msg.into());
        return None;
    }
    let lease_horizon = r
        .lease_horizon_ms
        .as_ref()
        .and_then(|ms| lease_ms(cx, ms, "lease_horizon_ms"));
    let lease_ttl = r
        .lease_ttl_ms
        .as_ref()
        .and_then(|ms| lease_ms(cx, ms, "lease_ttl_ms"));
    let mut settings = RedisSettings::new(url.v.clone());
    if let Some(p) = &r.prefix {
        settings.prefix.clone_from(&p.v);
    }
    settings.lease_horizon = lease_horizon;
    settings.lease_ttl = lease_ttl;
    Some(settings)
}

/// The longest lease horizon or lifetime a `[redis]` table may set: an hour.
const MAX_LEASE_MS: i64 = 3_600_000;

/// A `[redis]` lease duration: 1 ms to an hour.
fn lease_ms(cx: &mut Ctx<'_>, ms: &At<i64>, field: &str) -> Option<Duration> {
    match u64::try_from(ms.v) {
        Ok(n) if n > 0 && ms.v <= MAX_LEASE_MS => Some(Duration::from_millis(n)),
        _ => {
            let msg = format!("{field} must be 1 to {MAX_LEASE_MS} milliseconds");
            cx.err(Code::BadValue, ms, msg);
            None
        }
    }
}

fn rule(cx: &mut Ctx<'_>, r: &RuleIn, d: &Defaults, line: usize) -> Option<RuleDef> {
    let errors_before = cx.out.len();
    let s = &r.settings;
    let Some(limit) = &r.limit else {
        let at = At::field((), "limit");
        cx.err(Code::Syntax, &at, "missing field `limit`".into());
        return None;
    };
    let (kind, kind_at) = match &s.algorithm {
        Some(a) => (kind(cx, a)?, a.loc.clone()),
        None => (d.kind, d.kind_at.clone().unwrap_or(limit.loc.clone())),
    };
    let backend = cx.choice(s.backend.as_ref(), d.backend);
    let backend_at = s
        .backend
        .as_ref()
        .map(|b| b.loc.clone())
        .or(d.backend_at.clone())
        .unwrap_or(r.name.loc.clone());
    let on_error = cx.choice(s.on_error.as_ref(), d.on_error);
    let mode = cx.choice(s.mode.as_ref(), d.mode);
    let capacity = s.capacity.as_ref().map_or(d.capacity, |c| capacity(cx, c));

    let mut matches: Vec<(AttrName, Cond)> = Vec::with_capacity(r.matches.len());
    for (name, value) in &r.matches {
        match AttrName::parse(&name.v) {
            Ok(attr) if matches.iter().any(|(a, _)| *a == attr) => {
                cx.err(Code::BadValue, name, format!("`{attr}` is matched twice"));
            }
            Ok(attr) => {
                let before = cx.out.len();
                let cond = cond(cx, &attr, value);
                // (Not when its values were rejected: those are errors already.)
                if cond.is_empty() && !cx.has_errors(before) {
                    let msg = format!(
                        "`{attr}` is matched against an empty list, so this rule never matches"
                    );
                    cx.warn(Code::NeverMatches, value, msg);
                }
                matches.push((attr, cond));
            }
            Err(e) => cx.err(Code::BadAttribute, name, e),
        }
    }
    // One order whatever the source (a file's `match` table is ordered by name).
    matches.sort_by(|a, b| a.0.cmp(&b.0));
    let mut key = Vec::with_capacity(r.key.len());
    for name in &r.key {
        match AttrName::parse(&name.v) {
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
    let mut spec = match Spec::parse(kind, &limit.v) {
        Ok(s) => s,
        Err(e) => {
            spec_error(cx, limit, e);
            return None;
        }
    };
    let mut max_delay_ms = None;
    if let Some(ms) = &r.max_delay_ms {
        let ns = u64::try_from(ms.v)
            .ok()
            .and_then(|m| m.checked_mul(1_000_000));
        match ns.map(|ns| spec.with_max_delay_ns(ns)) {
            Some(Ok(s)) => {
                spec = s;
                max_delay_ms = u64::try_from(ms.v).ok();
            }
            Some(Err(e)) => cx.err(Code::Limit, ms, e.to_string()),
            None => cx.err(Code::BadValue, ms, "max_delay_ms must be 0 or more".into()),
        }
    }
    let caps = kind.caps();
    if !key.is_empty() && !caps.keyed {
        let msg = format!(
            "{kind} cannot be keyed (its state is not one word); use it with key = [] or pick a keyed algorithm"
        );
        cx.push(Severity::Error, Code::Limit, &kind_at, None, msg);
    }
    let mut stripes = 1;
    if let Some(s) = &r.stripes {
        let max = Spec::MAX_STRIPES as i64;
        if !(1..=max).contains(&s.v) {
            cx.err(Code::BadValue, s, format!("stripes must be 1 to {max}"));
        } else if !caps.striped {
            cx.err(Code::Limit, s, format!("{kind} cannot be striped"));
        } else if !key.is_empty() {
            let msg = "stripes are for one hot keyless limit: use key = [] or drop stripes";
            cx.err(Code::BadValue, s, msg.into());
        } else if backend != Backend::Local {
            cx.err(Code::BadValue, s, "stripes need backend = \"local\"".into());
        } else {
            stripes = s.v as usize;
        }
    }
    if backend != Backend::Local {
        if !d.has_redis {
            let msg = format!("backend `{backend}` needs a [redis] table with the server's url");
            cx.push(Severity::Error, Code::Redis, &backend_at, None, msg);
        } else if !caps.redis {
            let msg = format!("{kind} has no Redis script; use backend = \"local\"");
            cx.push(Severity::Error, Code::Redis, &backend_at, None, msg);
        }
    }
    never_matches(cx, r);
    near_bound(cx, limit, &spec);
    if cx.has_errors(errors_before) {
        return None;
    }
    Some(RuleDef {
        name: r.name.v.clone(),
        line,
        matches,
        match_values: r
            .matches
            .iter()
            .map(|(n, v)| (n.v.clone(), v.v.iter().map(|s| s.v.clone()).collect()))
            .collect(),
        key,
        limit: limit.v.clone(),
        spec,
        backend,
        on_error,
        mode,
        capacity,
        stripes,
        max_delay_ms,
    })
}

fn cond(cx: &mut Ctx<'_>, attr: &AttrName, v: &At<Vec<At<String>>>) -> Cond {
    if v.v.iter().any(|s| s.v == "*") {
        return Cond::Present;
    }
    let one = |cx: &mut Ctx<'_>, s: &At<String>| -> Option<Value> {
        if attr.is_ip() {
            match Cidr::parse(&s.v) {
                Ok(c) => Some(Value::Cidr(c)),
                Err(e) => {
                    cx.err_in(Code::BadCidr, s, 0, e);
                    None
                }
            }
        } else if attr.is_path() && (s.v.contains('*') || s.v.contains('?')) {
            Some(Value::Glob(s.v.as_str().into()))
        } else {
            Some(Value::Exact(s.v.as_str().into()))
        }
    };
    Cond::Any(v.v.iter().filter_map(|s| one(cx, s)).collect())
}

/// Values no HTTP integration ever fills: a path without a leading `/`, a method
/// in lower case.
fn never_matches(cx: &mut Ctx<'_>, r: &RuleIn) {
    for (name, value) in &r.matches {
        let strings = &value.v;
        let all_bad =
            |bad: &dyn Fn(&str) -> bool| !strings.is_empty() && strings.iter().all(|s| bad(&s.v));
        let msg = match name.v.as_str() {
            "path" if all_bad(&|s| !s.starts_with('/') && !s.starts_with('*')) => {
                "paths start with `/`, so this rule never matches"
            }
            "method" if all_bad(&|s| s != "*" && s.bytes().any(|b| b.is_ascii_lowercase())) => {
                "HTTP methods are upper case (`POST`), so this rule never matches"
            }
            _ => continue,
        };
        cx.warn(Code::NeverMatches, value, msg.into());
    }
}

/// A limit over half of its algorithm's bound: valid, but doubling it (a
/// common next step) would be rejected.
fn near_bound(cx: &mut Ctx<'_>, limit: &At<String>, spec: &Spec) {
    for (i, q) in spec.quotas().iter().enumerate() {
        let doubled = Quota::from_nanos(q.amount().saturating_mul(2), q.period_ns())
            .burst(q.burst_size().saturating_mul(2));
        if let Err(e) = Spec::new(spec.kind(), &[doubled]) {
            let msg = format!(
                "limit {} of `{}` is over half of what {} allows (twice it: {e})",
                i + 1,
                limit.v,
                spec.kind()
            );
            let pos = quota_offset(&limit.v, i);
            cx.push(Severity::Warning, Code::Limit, &limit.loc, Some(pos), msg);
        }
    }
}

/// A rule identical to an earlier one (found by hash: linear in the rules).
fn shadowed(
    cx: &mut Ctx<'_>,
    rule: &RuleDef,
    earlier: &[RuleDef],
    same: &mut HashMap<u64, Vec<usize>>,
    name: &At<String>,
) {
    let mut h = DefaultHasher::new();
    (&rule.matches, &rule.key, &rule.spec, rule.backend).hash(&mut h);
    (rule.capacity, rule.stripes, rule.mode, rule.on_error).hash(&mut h);
    let bucket = same.entry(h.finish()).or_default();
    let is_same = |o: &RuleDef| {
        o.same_limiter(rule)
            && o.mode == rule.mode
            && o.on_error == rule.on_error
            && o.matches == rule.matches
    };
    if let Some(o) = bucket
        .iter()
        .filter_map(|&i| earlier.get(i))
        .find(|o| is_same(o))
    {
        let at = if o.line > 0 {
            format!(" (line {})", o.line)
        } else {
            String::new()
        };
        let msg = format!(
            "identical to rule `{}`{at}: it applies the same limit to the same requests a second time",
            o.name
        );
        cx.warn(Code::Shadowed, name, msg);
    }
    bucket.push(earlier.len());
}

/// A rate-string or spec error, pointed at the character (parse errors) or the
/// quota (bounds) it is about.
fn spec_error(cx: &mut Ctx<'_>, limit: &At<String>, e: SpecError) {
    match e {
        SpecError::Parse(p) => {
            let msg = format!("bad limit `{}`: {}", limit.v, p.kind.message());
            cx.err_in(Code::BadRate, limit, p.position, msg);
        }
        SpecError::Config { index, error } => {
            let pos = quota_offset(&limit.v, index);
            let msg = format!("limit `{}`: {error}", limit.v);
            cx.err_in(Code::Limit, limit, pos, msg);
        }
        e => {
            let msg = format!("limit `{}`: {e}", limit.v);
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
