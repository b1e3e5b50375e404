//! `Policy`: the rules of a whole service in one TOML file (`sluicegate-policy`),
//! checked all-or-nothing across rules, with shadow rules, hot reload and
//! Prometheus metrics. A check borrows the caller's strings: nothing is copied but
//! header names that are not lower case already.

use std::borrow::Cow;
use std::cell::Cell;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use pyo3::exceptions::{PyOSError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyMapping, PyString, PyTuple};
use sluicegate_policy::redis::RedisFactory;
use sluicegate_policy::store::FollowOptions;
use sluicegate_policy::{Attrs, Decision, Policy, PolicyBuilder, PolicyDef, RuleDecision, Watcher};

use crate::args::Cost;
use crate::decision::secs;

/// A rejected rule file: `ValueError` whose message names file, line, column and rule.
fn invalid(e: sluicegate_policy::Error) -> PyErr {
    PyValueError::new_err(e.to_string())
}

/// The attributes of one check, borrowed from the call's arguments.
struct CallAttrs<'a> {
    ip: Option<&'a str>,
    path: Option<&'a str>,
    method: Option<&'a str>,
    host: Option<&'a str>,
    /// Header names in lower case (without `header:`), and values.
    headers: Vec<(Cow<'a, str>, &'a str)>,
    /// The application's own attributes (`tenant=...`).
    extra: Vec<(&'a str, &'a str)>,
}

impl Attrs for CallAttrs<'_> {
    #[inline]
    fn get(&self, name: &str) -> Option<&str> {
        match name {
            "ip" => self.ip,
            "path" => self.path,
            "method" => self.method,
            "host" => self.host,
            _ => match name.strip_prefix("header:") {
                Some(h) => self.headers.iter().find(|(n, _)| n == h).map(|(_, v)| *v),
                None => self.extra.iter().find(|(n, _)| *n == name).map(|(_, v)| *v),
            },
        }
    }
}

/// `(name, value)` pairs of a mapping or an iterable of pairs, kept alive for borrowing.
fn pairs<'py>(
    obj: &Bound<'py, PyAny>,
    what: &str,
) -> PyResult<Vec<(Bound<'py, PyString>, Bound<'py, PyString>)>> {
    let items = match obj.cast::<PyMapping>() {
        Ok(m) => m.items()?.into_any(),
        Err(_) => obj.clone(),
    };
    let mut out = Vec::new();
    for item in items.try_iter()? {
        let item = item?;
        let t = item.cast::<PyTuple>().map_err(|_| {
            PyTypeError::new_err(format!("{what}: a mapping or (name, value) pairs of str"))
        })?;
        let (k, v) = (t.get_item(0)?, t.get_item(1)?);
        let str_of = |o: Bound<'py, PyAny>| {
            o.cast_into::<PyString>()
                .map_err(|_| PyTypeError::new_err(format!("{what}: names and values are str")))
        };
        out.push((str_of(k)?, str_of(v)?));
    }
    Ok(out)
}

/// The `headers` and `**attrs` arguments of a check as `(name, value)` pairs.
type AttrObjs<'py> = Vec<(Bound<'py, PyString>, Bound<'py, PyString>)>;

fn attr_objs<'py>(
    headers: Option<&Bound<'py, PyAny>>,
    attrs: Option<&Bound<'py, PyDict>>,
) -> PyResult<(AttrObjs<'py>, AttrObjs<'py>)> {
    let header_objs = match headers {
        Some(h) if !h.is_none() => pairs(h, "headers")?,
        _ => Vec::new(),
    };
    let extra_objs = match attrs {
        Some(d) => pairs(d.as_any(), "attributes")?,
        None => Vec::new(),
    };
    Ok((header_objs, extra_objs))
}

/// A check's attributes, borrowed from its arguments (header names lower-cased
/// only when they are not already).
fn call_attrs<'a>(
    (ip, path, method, host): (
        Option<&'a str>,
        Option<&'a str>,
        Option<&'a str>,
        Option<&'a str>,
    ),
    header_objs: &'a AttrObjs<'_>,
    extra_objs: &'a AttrObjs<'_>,
) -> PyResult<CallAttrs<'a>> {
    let mut call = CallAttrs {
        ip,
        path,
        method,
        host,
        headers: Vec::with_capacity(header_objs.len()),
        extra: Vec::with_capacity(extra_objs.len()),
    };
    for (k, v) in header_objs {
        let k = k.to_str()?;
        let k = if k.bytes().any(|b| b.is_ascii_uppercase()) {
            Cow::Owned(k.to_ascii_lowercase())
        } else {
            Cow::Borrowed(k)
        };
        call.headers.push((k, v.to_str()?));
    }
    for (k, v) in extra_objs {
        call.extra.push((k.to_str()?, v.to_str()?));
    }
    Ok(call)
}

/// A check's attributes copied out of Python, for an async check that outlives
/// its call.
struct OwnedAttrs {
    ip: Option<String>,
    path: Option<String>,
    method: Option<String>,
    host: Option<String>,
    headers: Vec<(String, String)>,
    extra: Vec<(String, String)>,
}

impl From<&CallAttrs<'_>> for OwnedAttrs {
    fn from(c: &CallAttrs<'_>) -> Self {
        let owned = |s: Option<&str>| s.map(str::to_owned);
        Self {
            ip: owned(c.ip),
            path: owned(c.path),
            method: owned(c.method),
            host: owned(c.host),
            headers: c
                .headers
                .iter()
                .map(|(k, v)| (k.as_ref().to_owned(), (*v).to_owned()))
                .collect(),
            extra: c
                .extra
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
        }
    }
}

impl Attrs for OwnedAttrs {
    #[inline]
    fn get(&self, name: &str) -> Option<&str> {
        match name {
            "ip" => self.ip.as_deref(),
            "path" => self.path.as_deref(),
            "method" => self.method.as_deref(),
            "host" => self.host.as_deref(),
            _ => match name.strip_prefix("header:") {
                Some(h) => self
                    .headers
                    .iter()
                    .find(|(n, _)| n == h)
                    .map(|(_, v)| v.as_str()),
                None => self
                    .extra
                    .iter()
                    .find(|(n, _)| n == name)
                    .map(|(_, v)| v.as_str()),
            },
        }
    }
}

/// Rate-limit rules from a TOML file or string (see the README's Policies section).
///
/// >>> p = Policy.from_str('[[rule]]\nname = "login"\nmatch = { path = "/login" }\nkey = ["ip"]\nlimit = "2/minute"\n')
/// >>> [bool(p.check(ip="192.0.2.1", path="/login")) for _ in range(3)]
/// [True, True, False]
#[pyclass(frozen, name = "Policy", module = "sluicegate._sluicegate")]
pub struct PyPolicy {
    inner: Arc<Policy>,
    path: Option<String>,
    /// `(url, domain)` of a policy following a rule store.
    store: Option<(String, String)>,
    watcher: Mutex<Option<Watcher>>,
    /// Whether a rule lives in Redis (as built: a reload that adds one keeps the
    /// GIL during its round trips).
    remote: bool,
}

/// Whether any rule of `policy` makes Redis round trips.
fn has_remote(policy: &Policy) -> bool {
    policy
        .definition()
        .rules()
        .iter()
        .any(|r| r.backend() != sluicegate_policy::Backend::Local)
}

/// `builder` keeping the keyed rules' keys in the shared-memory region
/// `shared` (every worker process that names it counts together), if given;
/// it takes the place of the rule file's own `[shared]` table.
fn with_shared(builder: PolicyBuilder, shared: Option<PathBuf>) -> PyResult<PolicyBuilder> {
    Ok(match shared {
        Some(name) => builder.pool(crate::shared::region(&name)?.pool().clone()),
        None => builder,
    })
}

impl PyPolicy {
    /// The policy `def` describes, unwatched (Redis-backed rules by the Redis
    /// factory; the GIL released while they connect).
    fn from_def(py: Python<'_>, def: PolicyDef, shared: Option<PathBuf>) -> PyResult<Self> {
        let builder = with_shared(Policy::builder().remote(RedisFactory::default()), shared)?;
        let inner = py.detach(|| builder.from_def(def)).map_err(invalid)?;
        Ok(Self {
            remote: has_remote(&inner),
            inner: Arc::new(inner),
            path: None,
            store: None,
            watcher: Mutex::new(None),
        })
    }
}

#[pymethods]
impl PyPolicy {
    /// Reads and validates the rule file at `path`; `watch=True` reloads it when it
    /// changes (polled every `interval` seconds; an invalid new file keeps the old
    /// rules and is reported by `last_error`).
    #[staticmethod]
    #[pyo3(signature = (path, *, watch = false, interval = 1.0, shared = None))]
    fn from_file(
        py: Python<'_>,
        path: PathBuf,
        watch: bool,
        interval: f64,
        shared: Option<PathBuf>,
    ) -> PyResult<Self> {
        let interval = Duration::try_from_secs_f64(interval)
            .ok()
            .filter(|d| !d.is_zero())
            .ok_or_else(|| PyValueError::new_err("interval must be a number of seconds > 0"))?;
        if !path.exists() {
            return Err(PyOSError::new_err(format!(
                "{}: no such file",
                path.display()
            )));
        }
        let builder = with_shared(Policy::builder().remote(RedisFactory::default()), shared)?;
        let policy = py.detach(|| builder.from_path(&path)).map_err(invalid)?;
        let inner = Arc::new(policy);
        let watcher = if watch {
            Some(
                Watcher::spawn(inner.clone(), &path, interval)
                    .map_err(|e| PyOSError::new_err(format!("cannot start the watcher: {e}")))?,
            )
        } else {
            None
        };
        Ok(Self {
            remote: has_remote(&inner),
            inner,
            path: Some(path.display().to_string()),
            store: None,
            watcher: Mutex::new(watcher),
        })
    }

    /// The rules of `domain` in the rule store at `url` (`sqlite:PATH` or
    /// `postgres://USER@HOST/DATABASE?sslmode=...`), followed: a change is in
    /// force within about `interval` seconds (0.2 by default; PostgreSQL
    /// notifies readers at once), unchanged rules keep their state, and a change that does not
    /// validate is never applied. While the store cannot be reached the rules in
    /// force stay (`last_error`, `store_reachable`). `snapshot`: a file written
    /// after every good load and read at start when the store is down.
    /// `ValueError` for a bad URL, an unknown domain or invalid rules;
    /// `StoreUnavailable` when the store cannot be read (and no snapshot can).
    #[staticmethod]
    #[pyo3(signature = (url, *, domain, snapshot = None, interval = 0.2))]
    fn from_store(
        py: Python<'_>,
        url: String,
        domain: String,
        snapshot: Option<std::path::PathBuf>,
        interval: f64,
    ) -> PyResult<Self> {
        let interval = Duration::try_from_secs_f64(interval)
            .ok()
            .filter(|d| !d.is_zero())
            .ok_or_else(|| PyValueError::new_err("interval must be a number of seconds > 0"))?;
        let mut options = FollowOptions::new().poll_interval(interval);
        if let Some(path) = snapshot {
            options = options.snapshot(path);
        }
        let policy = py
            .detach(|| {
                Policy::builder()
                    .remote(RedisFactory::default())
                    .from_store(&url, &domain, options)
            })
            .map_err(crate::errors::store)?;
        Ok(Self {
            remote: has_remote(&policy),
            inner: Arc::new(policy),
            path: None,
            store: Some((url, domain)),
            watcher: Mutex::new(None),
        })
    }

    /// Validates and builds the rules in `text`.
    #[staticmethod]
    #[pyo3(signature = (text, *, shared = None))]
    fn from_str(py: Python<'_>, text: &str, shared: Option<PathBuf>) -> PyResult<Self> {
        let def = PolicyDef::parse(text, None).map_err(invalid)?;
        Self::from_def(py, def, shared)
    }

    /// A policy from `Rule` objects (in order), with `defaults`, `redis` and
    /// `state` as dicts of the rule file's `[defaults]`, `[redis]` and `[state]`
    /// fields; validated as a file is (a `ValueError` naming the rule and field).
    #[staticmethod]
    #[pyo3(signature = (rules, *, defaults = None, redis = None, state = None, shared = None))]
    fn from_rules(
        py: Python<'_>,
        rules: &Bound<'_, PyAny>,
        defaults: Option<&Bound<'_, PyDict>>,
        redis: Option<&Bound<'_, PyDict>>,
        state: Option<&Bound<'_, PyDict>>,
        shared: Option<PathBuf>,
    ) -> PyResult<Self> {
        let def = crate::rules::policy_def(rules, defaults, redis, state)?;
        Self::from_def(py, def, shared)
    }

    /// One request, described by its attributes: `ip`, `path`, `method`, `host`,
    /// `headers` (a mapping or pairs; matched as `header:<lower-case name>`) and
    /// any of the application's own (`tenant="acme"`). `cost` units are taken from
    /// every matching rule, or from none.
    #[pyo3(signature = (*, ip = None, path = None, method = None, host = None, headers = None, cost = Cost::ONE, **attrs))]
    #[allow(clippy::too_many_arguments)]
    fn check(
        &self,
        py: Python<'_>,
        ip: Option<&str>,
        path: Option<&str>,
        method: Option<&str>,
        host: Option<&str>,
        headers: Option<&Bound<'_, PyAny>>,
        cost: Cost,
        attrs: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<PyPolicyDecision> {
        let (header_objs, extra_objs) = attr_objs(headers, attrs)?;
        let call = call_attrs((ip, path, method, host), &header_objs, &extra_objs)?;
        // The buffer of a decision this thread dropped earlier: no allocation once
        // warm.
        let mut inner = SPARE.with(Cell::take).unwrap_or_default();
        // A rule on Redis makes a round trip: without the GIL, as the Redis classes.
        if self.remote {
            py.detach(|| self.inner.check_n_into(&call, cost.0, &mut inner));
        } else {
            self.inner.check_n_into(&call, cost.0, &mut inner);
        }
        Ok(PyPolicyDecision { inner })
    }

    /// `check` as a coroutine: a rule on Redis (`redis`, `hybrid`) is awaited,
    /// never blocking the event loop (concurrent checks pipeline on the rule's
    /// connection); what the process can decide alone (local rules, a hybrid
    /// rule's lease) is decided when the coroutine is first awaited, on the
    /// calling thread. The arguments are checked at the call, as `check`'s.
    /// Cancelled while it waits for Redis, the check gives back what its local
    /// rules had charged (a call already sent to Redis may still be charged
    /// there: early to limit, never late).
    #[pyo3(signature = (*, ip = None, path = None, method = None, host = None, headers = None, cost = Cost::ONE, **attrs))]
    #[allow(clippy::too_many_arguments)]
    fn check_async<'py>(
        &self,
        py: Python<'py>,
        ip: Option<&str>,
        path: Option<&str>,
        method: Option<&str>,
        host: Option<&str>,
        headers: Option<&Bound<'py, PyAny>>,
        cost: Cost,
        attrs: Option<&Bound<'py, PyDict>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let (header_objs, extra_objs) = attr_objs(headers, attrs)?;
        let call = call_attrs((ip, path, method, host), &header_objs, &extra_objs)?;
        let pending = PyPendingCheck {
            start: Mutex::new(Some((
                Arc::clone(&self.inner),
                OwnedAttrs::from(&call),
                cost.0,
            ))),
        };
        crate::wait::coroutine(py, "policy_check", (pending,))
    }

    /// Whether a rule in force lives on Redis (`redis` or `hybrid`): its checks
    /// may wait for a round trip, so an event loop awaits `check_async`.
    #[getter]
    fn has_remote_rules(&self) -> bool {
        self.inner.has_remote_rules()
    }

    /// Re-reads the file (or `text`): validated first; on error the old rules stay
    /// and `ValueError` names the line. Unchanged rules keep their state.
    #[pyo3(signature = (text = None))]
    fn reload(&self, py: Python<'_>, text: Option<&str>) -> PyResult<()> {
        match (text, &self.path) {
            (Some(t), _) => self.inner.reload_from_toml(t).map(drop).map_err(invalid),
            (None, Some(p)) => py
                .detach(|| self.inner.reload_from_path(p))
                .map(drop)
                .map_err(invalid),
            (None, None) => Err(PyValueError::new_err(
                "this policy was not read from a file: pass the new text",
            )),
        }
    }

    /// The per-rule counters and reload history, in Prometheus text format.
    fn metrics_text(&self) -> String {
        self.inner.metrics_text()
    }

    /// The last failed reload's message (file, line, column), or None.
    #[getter]
    fn last_error(&self) -> Option<String> {
        self.inner.last_error()
    }

    /// For a policy from `from_store`: whether its last poll reached the store
    /// (None for any other policy).
    #[getter]
    fn store_reachable(&self) -> Option<bool> {
        self.inner.store_reachable()
    }

    /// `(succeeded, failed)` reloads.
    #[getter]
    fn reload_count(&self) -> (u64, u64) {
        self.inner.reload_count()
    }

    /// The rule names, in file order.
    #[getter]
    fn rules<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        let def = self.inner.definition();
        PyTuple::new(py, def.rules().iter().map(|r| r.name().to_owned()))
    }

    /// Stops watching the file, or following the store (also when the policy
    /// is garbage-collected); the rules in force stay.
    fn close(&self) {
        self.inner.stop_following();
        let w = self
            .watcher
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Some(w) = w {
            w.stop();
        }
    }

    fn __repr__(&self) -> String {
        let n = self.inner.definition().rules().len();
        match (&self.path, &self.store) {
            (Some(p), _) => format!("Policy.from_file({p:?}) ({n} rules)"),
            (None, Some((url, domain))) => {
                let url = sluicegate_policy::store::redact(url);
                format!("Policy.from_store({url:?}, domain={domain:?}) ({n} rules)")
            }
            (None, None) => format!("Policy.from_str(...) ({n} rules)"),
        }
    }
}

/// An awaited `Policy.check_async` before it starts: what `_aio.policy_check`
/// runs when the coroutine is first awaited (a coroutine never awaited charges
/// nothing).
#[pyclass(frozen, name = "_PendingCheck", module = "sluicegate._sluicegate")]
pub struct PyPendingCheck {
    start: Mutex<Option<(Arc<Policy>, OwnedAttrs, u64)>>,
}

#[pymethods]
impl PyPendingCheck {
    /// Runs the check as far as this process can take it: its decision, or,
    /// when it waits for Redis, an asyncio future of it (cancelling the future
    /// drops the check, which gives back its local charges). Once only.
    fn start<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let taken = self
            .start
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        let Some((policy, attrs, n)) = taken else {
            return Err(pyo3::exceptions::PyRuntimeError::new_err(
                "this check has started already",
            ));
        };
        let mut inner = SPARE.with(Cell::take).unwrap_or_default();
        if !policy.has_remote_rules() {
            policy.check_n_into(&attrs, n, &mut inner);
            return Ok(Bound::new(py, PyPolicyDecision { inner })?.into_any());
        }
        let mut check: std::pin::Pin<
            Box<dyn std::future::Future<Output = PyResult<PyPolicyDecision>> + Send>,
        > = Box::pin(async move {
            policy.check_n_into_async(&attrs, n, &mut inner).await;
            Ok(PyPolicyDecision { inner })
        });
        // The first poll here: local rules and lease hits decide at once, with
        // no hand-over to another thread; a round trip has been handed to its
        // rule's runtime when it returns pending.
        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
        if let std::task::Poll::Ready(d) = check.as_mut().poll(&mut cx) {
            return Ok(Bound::new(py, d?)?.into_any());
        }
        crate::aio::drive(py, check)
    }
}

/// One matching rule's answer.
#[pyclass(frozen, name = "RuleDecision", module = "sluicegate._sluicegate")]
pub struct PyRuleDecision {
    /// The rule's name.
    #[pyo3(get)]
    name: String,
    /// `"enforce"` or `"shadow"`.
    #[pyo3(get)]
    mode: &'static str,
    /// Whether this rule admitted the request (a shadow rule's False denied nothing).
    #[pyo3(get)]
    allowed: bool,
    /// Units this rule could still admit now, for this request's key.
    #[pyo3(get)]
    remaining: u64,
    /// The most units the rule admits at once.
    #[pyo3(get)]
    limit: u64,
    window_ns: u64,
    retry_after_ns: u64,
    reset_after_ns: u64,
    delay_ns: u64,
    /// The shared backend failed and the rule's `on_error` answered.
    #[pyo3(get)]
    backend_error: bool,
}

impl From<RuleDecision<'_>> for PyRuleDecision {
    fn from(r: RuleDecision<'_>) -> Self {
        Self {
            name: r.name.to_owned(),
            mode: r.mode.name(),
            allowed: r.allowed,
            remaining: r.remaining,
            limit: r.limit,
            window_ns: r.window_ns,
            retry_after_ns: r.retry_after_ns,
            reset_after_ns: r.reset_after_ns,
            delay_ns: r.delay_ns,
            backend_error: r.backend_error,
        }
    }
}

#[pymethods]
impl PyRuleDecision {
    /// The window of the binding limit, in seconds.
    #[getter]
    fn window(&self) -> f64 {
        secs(self.window_ns)
    }

    /// Seconds until a request of the same cost would pass this rule.
    #[getter]
    fn retry_after(&self) -> f64 {
        secs(self.retry_after_ns)
    }

    /// Seconds until this rule's limiter is full again.
    #[getter]
    fn reset_after(&self) -> f64 {
        secs(self.reset_after_ns)
    }

    /// The shaper's wait before the request may run, in seconds.
    #[getter]
    fn delay(&self) -> f64 {
        secs(self.delay_ns)
    }

    fn __bool__(&self) -> bool {
        self.allowed
    }

    fn __repr__(&self) -> String {
        format!(
            "RuleDecision(name={:?}, mode={:?}, allowed={}, remaining={}, limit={})",
            self.name,
            self.mode,
            if self.allowed { "True" } else { "False" },
            self.remaining,
            self.limit
        )
    }
}

thread_local! {
    /// One decision buffer per thread, handed back when a `PolicyDecision` is
    /// dropped and reused by the next check on that thread.
    static SPARE: Cell<Option<Decision>> = const { Cell::new(None) };
}

/// What `Policy.check` answers: truthy when every enforcing rule that matched
/// admitted the request; `rules` has each matching rule's answer.
#[pyclass(frozen, name = "PolicyDecision", module = "sluicegate._sluicegate")]
pub struct PyPolicyDecision {
    inner: Decision,
}

impl Drop for PyPolicyDecision {
    fn drop(&mut self) {
        let mut d = std::mem::take(&mut self.inner);
        // Keep the buffer, not the rules it refers to (a replaced policy's
        // tables must not outlive it in a spare).
        d.clear();
        // During thread teardown the slot may be gone: then the buffer is freed.
        let _ = SPARE.try_with(|s| s.set(Some(d)));
    }
}

#[pymethods]
impl PyPolicyDecision {
    /// Whether the request was admitted.
    #[getter]
    fn allowed(&self) -> bool {
        self.inner.allowed()
    }

    /// Each matching rule's answer, in file order.
    #[getter]
    fn rules<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        rule_tuple(py, self.inner.rules())
    }

    /// The enforcing rules that denied.
    #[getter]
    fn denying<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        rule_tuple(py, self.inner.denying())
    }

    /// Seconds until the request could pass (0.0 when admitted).
    #[getter]
    fn retry_after(&self) -> f64 {
        secs(self.inner.retry_after_ns())
    }

    /// The shaper's wait before an admitted request may run, in seconds.
    #[getter]
    fn delay(&self) -> f64 {
        secs(self.inner.delay_ns())
    }

    /// The response header fields: `RateLimit-Policy` and `RateLimit` (one item
    /// per enforcing rule), and `Retry-After` (whole seconds) when denied.
    fn headers(&self) -> Vec<(&'static str, String)> {
        let mut out = Vec::with_capacity(3);
        let policy = self.inner.ratelimit_policy_header();
        if !policy.is_empty() {
            out.push(("RateLimit-Policy", policy));
            out.push(("RateLimit", self.inner.ratelimit_header()));
        }
        if !self.inner.allowed() {
            out.push(("Retry-After", self.inner.retry_after_secs().to_string()));
        }
        out
    }

    fn __bool__(&self) -> bool {
        self.inner.allowed()
    }

    fn __repr__(&self) -> String {
        let names: Vec<String> = self
            .inner
            .rules()
            .map(|r| format!("{:?}", r.name))
            .collect();
        format!(
            "PolicyDecision(allowed={}, rules=[{}])",
            if self.inner.allowed() {
                "True"
            } else {
                "False"
            },
            names.join(", ")
        )
    }
}

/// Rule answers as a tuple of `RuleDecision`s.
fn rule_tuple<'py, 'd>(
    py: Python<'py>,
    rules: impl Iterator<Item = RuleDecision<'d>>,
) -> PyResult<Bound<'py, PyTuple>> {
    PyTuple::new(py, rules.map(PyRuleDecision::from).collect::<Vec<_>>())
}
