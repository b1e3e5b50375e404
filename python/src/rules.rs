//! `Rule` and `Policy.from_rules`: a policy from values, every field of a rule
//! file's `[[rule]]`, `[defaults]`, `[redis]` and `[state]` tables as a keyword or
//! dict key.
//! The values go to `sluicegate-policy`'s builders and through the rule file's own
//! validator, so they are accepted or rejected as in a file, with the same
//! `ValueError` message naming the rule and field instead of a line.

use std::time::Duration;

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyInt, PyString};
use sluicegate_policy::{PolicyDef, PolicyDefBuilder, RedisSettings, RuleBuilder, RuleDef};

/// A whole number for the validator: a negative or too large one saturates, so
/// that it is rejected with the rule file's message for that field.
fn whole(obj: &Bound<'_, PyAny>, field: &str) -> PyResult<u64> {
    if let Ok(v) = obj.extract::<u64>() {
        return Ok(v);
    }
    if obj.cast::<PyInt>().is_ok() {
        return Ok(u64::MAX);
    }
    Err(PyTypeError::new_err(format!(
        "{field} must be an int, not {}",
        obj.get_type().name()?
    )))
}

/// A `str` field.
fn text(obj: &Bound<'_, PyAny>, field: &str) -> PyResult<String> {
    obj.cast::<PyString>()
        .map(|s| s.to_string())
        .map_err(|_| PyTypeError::new_err(format!("{field} must be a str")))
}

/// A `match` value: a str, or a list of them (any of).
fn values(obj: &Bound<'_, PyAny>, field: &str) -> PyResult<Vec<String>> {
    if let Ok(s) = obj.cast::<PyString>() {
        return Ok(vec![s.to_string()]);
    }
    let mut out = Vec::new();
    for v in obj
        .try_iter()
        .map_err(|_| PyTypeError::new_err(format!("{field} must be a str or a list of str")))?
    {
        out.push(text(&v?, field)?);
    }
    Ok(out)
}

/// One rule of a policy, with the fields of a rule file's `[[rule]]`: checked when
/// the policy is built (`Policy.from_rules`), as the file's are.
///
/// >>> r = Rule("login", match={"path": "/login", "method": ["POST"]}, key=["ip"], limit="5/minute")
/// >>> r
/// Rule(name='login', limit='5/minute')
#[pyclass(frozen, name = "Rule", module = "sluicegate._sluicegate")]
pub struct PyRule {
    builder: RuleBuilder,
    name: String,
    limit: String,
}

#[pymethods]
impl PyRule {
    #[new]
    #[pyo3(signature = (name, *, limit, r#match = None, key = None, algorithm = None, backend = None, on_error = None, mode = None, capacity = None, stripes = None, max_delay_ms = None))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        name: String,
        limit: String,
        r#match: Option<&Bound<'_, PyDict>>,
        key: Option<&Bound<'_, PyAny>>,
        algorithm: Option<String>,
        backend: Option<String>,
        on_error: Option<String>,
        mode: Option<String>,
        capacity: Option<&Bound<'_, PyAny>>,
        stripes: Option<&Bound<'_, PyAny>>,
        max_delay_ms: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Self> {
        let mut b = RuleDef::builder(name.as_str()).limit(limit.as_str());
        if let Some(m) = r#match {
            for (attr, value) in m.iter() {
                let attr = text(&attr, "match keys")?;
                let field = format!("match[{attr:?}]");
                b = b.matching_any(attr, values(&value, &field)?);
            }
        }
        if let Some(k) = key {
            if k.cast::<PyString>().is_ok() {
                return Err(PyTypeError::new_err("key must be a list of str, not a str"));
            }
            let key: Vec<String> = k
                .try_iter()?
                .map(|a| text(&a?, "key"))
                .collect::<PyResult<_>>()?;
            b = b.key(key);
        }
        if let Some(a) = algorithm {
            b = b.algorithm(a);
        }
        if let Some(v) = backend {
            b = b.backend(v);
        }
        if let Some(v) = on_error {
            b = b.on_error(v);
        }
        if let Some(v) = mode {
            b = b.mode(v);
        }
        if let Some(n) = capacity {
            b = b.capacity(whole(n, "capacity")?);
        }
        if let Some(n) = stripes {
            b = b.stripes(whole(n, "stripes")?);
        }
        if let Some(n) = max_delay_ms {
            b = b.max_delay_ms(whole(n, "max_delay_ms")?);
        }
        Ok(Self {
            builder: b,
            name,
            limit,
        })
    }

    /// The rule's name.
    #[getter]
    fn name(&self) -> &str {
        &self.name
    }

    /// The rate string.
    #[getter]
    fn limit(&self) -> &str {
        &self.limit
    }

    fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
        let name = PyString::new(py, &self.name).repr()?;
        let limit = PyString::new(py, &self.limit).repr()?;
        Ok(format!("Rule(name={name}, limit={limit})"))
    }
}

/// The keys of `dict` in `table`, each checked against `known` (the table's fields).
fn fields<'py>(
    dict: &Bound<'py, PyDict>,
    table: &str,
    known: &[&str],
) -> PyResult<Vec<(String, Bound<'py, PyAny>)>> {
    let mut out = Vec::new();
    for (k, v) in dict.iter() {
        let k = text(&k, &format!("{table} keys"))?;
        if !known.contains(&k.as_str()) {
            let all: Vec<String> = known.iter().map(|f| format!("`{f}`")).collect();
            return Err(PyValueError::new_err(format!(
                "{table}: unknown field `{k}`, expected one of {}",
                all.join(", ")
            )));
        }
        out.push((k, v));
    }
    Ok(out)
}

/// `[defaults]` from a dict.
fn defaults(mut b: PolicyDefBuilder, d: &Bound<'_, PyDict>) -> PyResult<PolicyDefBuilder> {
    let known = [
        "algorithm",
        "backend",
        "on_error",
        "mode",
        "capacity",
        "ipv6_prefix",
    ];
    for (k, v) in fields(d, "defaults", &known)? {
        let field = format!("defaults[{k:?}]");
        b = match k.as_str() {
            "algorithm" => b.default_algorithm(text(&v, &field)?),
            "backend" => b.default_backend(text(&v, &field)?),
            "on_error" => b.default_on_error(text(&v, &field)?),
            "mode" => b.default_mode(text(&v, &field)?),
            "capacity" => b.default_capacity(whole(&v, &field)?),
            // Out of 1..=128 either way: 0 gets the file's message.
            _ => b.ipv6_prefix(u8::try_from(whole(&v, &field)?).unwrap_or(0)),
        };
    }
    Ok(b)
}

/// `[redis]` from a dict.
fn redis(d: &Bound<'_, PyDict>) -> PyResult<RedisSettings> {
    let known = ["url", "prefix", "lease_horizon_ms", "lease_ttl_ms"];
    let given = fields(d, "redis", &known)?;
    let url = match given.iter().find(|(k, _)| k == "url") {
        Some((_, v)) => text(v, "redis[\"url\"]")?,
        None => return Err(PyValueError::new_err("redis: missing field `url`")),
    };
    let mut r = RedisSettings::new(url);
    for (k, v) in given {
        let field = format!("redis[{k:?}]");
        match k.as_str() {
            "prefix" => r.prefix = text(&v, &field)?,
            "lease_horizon_ms" => {
                r.lease_horizon = Some(Duration::from_millis(whole(&v, &field)?));
            }
            "lease_ttl_ms" => r.lease_ttl = Some(Duration::from_millis(whole(&v, &field)?)),
            _ => {}
        }
    }
    Ok(r)
}

/// The policy `Policy.from_rules` describes, validated (a `ValueError` naming
/// each rule and field at fault).
pub(crate) fn policy_def(
    rules: &Bound<'_, PyAny>,
    defaults_: Option<&Bound<'_, PyDict>>,
    redis_: Option<&Bound<'_, PyDict>>,
    state: Option<&Bound<'_, PyDict>>,
) -> PyResult<PolicyDef> {
    let mut b = PolicyDef::builder();
    if let Some(s) = state {
        for (_, memory) in fields(s, "state", &["memory"])? {
            b = match memory.cast::<PyString>() {
                Ok(text) => b.state_memory(text.to_string()),
                Err(_) => b.state_memory(
                    usize::try_from(whole(&memory, "state[\"memory\"]")?).unwrap_or(usize::MAX),
                ),
            };
        }
    }
    for r in rules.try_iter()? {
        let r = r?;
        let rule = r
            .cast::<PyRule>()
            .map_err(|_| PyTypeError::new_err("rules must be sluicegate.Rule objects"))?;
        b = b.rule(rule.get().builder.clone());
    }
    if let Some(d) = defaults_ {
        b = defaults(b, d)?;
    }
    if let Some(r) = redis_ {
        b = b.redis(redis(r)?);
    }
    b.build().map_err(|e| PyValueError::new_err(e.to_string()))
}
