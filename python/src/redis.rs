//! Redis-backed limiters (`sluicegate-redis`): the same decisions as the local
//! classes, their state shared by every process on the server. Where Redis is and
//! how to fail is one `RedisOptions` object (shared by any number of limiters);
//! `hybrid=True` puts the local lease front of `sluicegate_redis::HybridLimiter`
//! before Redis. Both classes are thin over one `Remote` (the key is the only
//! difference: a single limiter's is `"global"`). The blocking calls release the
//! GIL for the round trip. The `_async` forms are native: the check is the async
//! limiter's future, spawned on the blocking limiter's own runtime and handed to
//! asyncio through `pyo3-async-runtimes` (`aio.rs`).

use std::time::Duration;

use pyo3::exceptions::{PyDeprecationWarning, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyInt, PyString, PyTuple};
use sluicegate::{Kind, Spec};
use sluicegate_redis::{
    blocking, Algorithm, Backend, ClientCert, Config, FailurePolicy, HybridConfig, Limit, Source,
    TlsConfig,
};

use crate::args::Cost;
use crate::decision::PyDecision;
use crate::limiters::spec_of;
use crate::quota::{self, PyQuota};
use crate::{aio, errors, wait};

/// A key from Python: `str` as it is, `int` in decimal, `bytes` as UTF-8 (or hex).
fn key_of(key: &Bound<'_, PyAny>) -> PyResult<String> {
    if let Ok(s) = key.cast::<PyString>() {
        return Ok(s.to_str()?.to_owned());
    }
    if let Ok(b) = key.cast::<PyBytes>() {
        let b = b.as_bytes();
        return Ok(match std::str::from_utf8(b) {
            Ok(s) => s.to_owned(),
            Err(_) => b.iter().map(|x| format!("{x:02x}")).collect(),
        });
    }
    if key.cast::<PyInt>().is_ok() {
        return Ok(key.str()?.to_str()?.to_owned());
    }
    Err(PyTypeError::new_err("a key is a str, bytes or int"))
}

fn secs(s: f64, what: &str) -> PyResult<Duration> {
    Duration::try_from_secs_f64(s).map_err(|_| {
        PyValueError::new_err(format!("{what} must be a finite number of seconds >= 0"))
    })
}

/// Where Redis is and what a limiter does when it fails: one object, shared by
/// any number of limiters (each still opens its own connection).
///
/// >>> opts = RedisOptions("redis://127.0.0.1:6379", timeout=0.05, failure_policy="closed")
/// >>> opts.failure_policy
/// 'closed'
#[pyclass(frozen, name = "RedisOptions", module = "sluicegate._sluicegate")]
pub struct PyRedisOptions {
    url: String,
    backend: Backend,
    cfg: Config,
}

#[pymethods]
impl PyRedisOptions {
    #[new]
    #[pyo3(signature = (url, *, prefix = "sluicegate:", timeout = 0.025, connect_timeout = None, failure_policy = "local", local_share = 10, ssl_ca_certs = None, ssl_certfile = None, ssl_keyfile = None))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        url: &str,
        prefix: &str,
        timeout: f64,
        connect_timeout: Option<f64>,
        failure_policy: &str,
        local_share: i64,
        ssl_ca_certs: Option<std::path::PathBuf>,
        ssl_certfile: Option<std::path::PathBuf>,
        ssl_keyfile: Option<std::path::PathBuf>,
    ) -> PyResult<Self> {
        let policy = match failure_policy {
            "open" => FailurePolicy::Open,
            "closed" => FailurePolicy::Closed,
            "local" => match local_share {
                share @ 1..=100 => FailurePolicy::Local {
                    share_percent: share as u8,
                },
                _ => {
                    return Err(PyValueError::new_err(
                        "local_share is a percentage from 1 to 100",
                    ))
                }
            },
            other => {
                return Err(PyValueError::new_err(format!(
                    "unknown failure_policy {other:?}: expected \"open\", \"closed\" or \"local\""
                )))
            }
        };
        let timeout = secs(timeout, "timeout")?;
        if timeout.is_zero() {
            return Err(PyValueError::new_err("timeout must be positive"));
        }
        let connect_timeout = match connect_timeout {
            Some(t) => secs(t, "connect_timeout")?,
            None => timeout.max(Duration::from_millis(50)),
        };
        let cfg = Config {
            prefix: prefix.to_owned(),
            timeout,
            connect_timeout,
            policy,
            ..Config::default()
        };
        let tls = Tls {
            ca: ssl_ca_certs,
            cert: ssl_certfile,
            key: ssl_keyfile,
        };
        let mut backend = Backend::from_url(url).map_err(errors::backend)?;
        if let Some(tls) = tls.config()? {
            backend = backend.with_tls(tls).map_err(errors::backend)?;
        }
        Ok(Self {
            url: url.to_owned(),
            backend,
            cfg,
        })
    }

    /// The server's URL.
    #[getter]
    fn url(&self) -> &str {
        &self.url
    }

    /// The key prefix.
    #[getter]
    fn prefix(&self) -> &str {
        &self.cfg.prefix
    }

    /// The longest one call may take, in seconds.
    #[getter]
    fn timeout(&self) -> f64 {
        self.cfg.timeout.as_secs_f64()
    }

    /// `"open"`, `"closed"` or `"local"`.
    #[getter]
    fn failure_policy(&self) -> &'static str {
        match self.cfg.policy {
            FailurePolicy::Open => "open",
            FailurePolicy::Closed => "closed",
            FailurePolicy::Local { .. } => "local",
        }
    }

    fn __repr__(&self) -> String {
        format!(
            "RedisOptions({:?}, timeout={:?}, failure_policy={:?})",
            self.url,
            self.cfg.timeout.as_secs_f64(),
            self.failure_policy()
        )
    }
}

/// The `ssl_*` arguments: PEM file paths, as redis-py names them.
struct Tls {
    ca: Option<std::path::PathBuf>,
    cert: Option<std::path::PathBuf>,
    key: Option<std::path::PathBuf>,
}

impl Tls {
    /// `None` without any; the files read now (an unreadable one is an `OSError`
    /// naming it, from the constructor, not from the first check).
    fn config(self) -> PyResult<Option<TlsConfig>> {
        let read = |p: &std::path::Path| {
            std::fs::read(p)
                .map_err(|e| pyo3::exceptions::PyOSError::new_err(format!("{}: {e}", p.display())))
        };
        let client =
            match (self.cert, self.key) {
                (Some(c), Some(k)) => Some(ClientCert {
                    cert_pem: read(&c)?,
                    key_pem: read(&k)?,
                }),
                (None, None) => None,
                _ => return Err(PyValueError::new_err(
                    "ssl_certfile and ssl_keyfile go together (a client certificate and its key)",
                )),
            };
        let root_ca_pem = self.ca.as_deref().map(read).transpose()?;
        if root_ca_pem.is_none() && client.is_none() {
            return Ok(None);
        }
        Ok(Some(TlsConfig {
            root_ca_pem,
            client,
        }))
    }
}

fn source_name(s: Source) -> &'static str {
    match s {
        Source::Redis => "redis",
        Source::FailOpen => "fail_open",
        Source::FailClosed => "fail_closed",
        Source::LocalFallback => "local_fallback",
        Source::Lease => "lease",
        Source::LocalDenial => "local_denial",
    }
}

/// `check` / `peek` as a coroutine (`sluicegate._aio.native`): the arguments are
/// checked now, by the caller's line, like the blocking call's; the round trip
/// starts when the coroutine is first awaited, and `CapacityError` comes from it,
/// as from the blocking call. The coroutine holds `slf`: the limiter, and so its
/// runtime, outlives every check in flight.
fn coroutine<'py>(
    slf: &Bound<'py, PyAny>,
    key: String,
    n: u64,
    consume: bool,
) -> PyResult<Bound<'py, PyAny>> {
    let py = slf.py();
    let start = slf.getattr(pyo3::intern!(py, "_start"))?;
    wait::coroutine(py, "native", (start, key, n, consume))
}

/// Spawns one check on `rl`'s runtime (`aio::spawn`) and returns the asyncio
/// future of its decision. Errors map as the blocking call's do (`error`).
/// Cancelling abandons the wait, not the call: the check was handed to Redis
/// already or soon will be, and runs to its end (at most the limiter's timeout),
/// so a cancelled check may still be charged, as a cancelled `asyncio.to_thread`
/// one was.
fn start<'py>(
    py: Python<'py>,
    rl: &blocking::RedisLimiter,
    key: String,
    n: u64,
    consume: bool,
) -> PyResult<Bound<'py, PyAny>> {
    let limiter = rl.as_async().clone();
    aio::spawn(py, rl.handle(), async move {
        let v = if consume {
            limiter.check_n(&key, n).await
        } else {
            limiter.peek_n(&key, n).await
        };
        v.map(|v| PyDecision::from(v.decision))
            .map_err(errors::backend)
    })
}

/// The options of a limiter: `redis=`, or (deprecated) the keyword arguments the
/// constructors took before `RedisOptions`, passed to it as they are.
fn options<'py>(
    py: Python<'py>,
    redis: Option<Bound<'py, PyRedisOptions>>,
    legacy: Option<&Bound<'py, PyDict>>,
) -> PyResult<Bound<'py, PyRedisOptions>> {
    let legacy = legacy.filter(|d| !d.is_empty());
    match (redis, legacy) {
        (Some(o), None) => Ok(o),
        (Some(_), Some(_)) => Err(PyTypeError::new_err(
            "give the connection settings either as redis=RedisOptions(...) or as keyword arguments, not both",
        )),
        (None, Some(kw)) => {
            PyErr::warn(
                py,
                &py.get_type::<PyDeprecationWarning>(),
                c"url=, prefix=, timeout=, failure_policy=, local_share= and ssl_*= are deprecated: pass redis=RedisOptions(url, ...)",
                2,
            )?;
            Ok(py
                .get_type::<PyRedisOptions>()
                .call((), Some(kw))?
                .cast_into::<PyRedisOptions>()?)
        }
        (None, None) => Err(PyTypeError::new_err(
            "missing redis=RedisOptions(url, ...): where the shared state lives",
        )),
    }
}

/// The Redis limit of `spec`. (The one `match` over kinds left in this module:
/// `sluicegate_redis::Limit::from_spec` replaces it.)
fn limit_of(spec: &Spec) -> PyResult<Limit> {
    let algorithm = match spec.kind() {
        Kind::TokenBucket => Algorithm::TokenBucket,
        Kind::LeakyBucket => Algorithm::LeakyBucket,
        Kind::FixedWindow => Algorithm::FixedWindow,
        Kind::SlidingWindow => Algorithm::SlidingWindow,
        Kind::Shaper => Algorithm::Shaper {
            max_delay: Duration::from_nanos(spec.max_delay_ns()),
        },
        kind => {
            let names: Vec<_> = Kind::ALL
                .iter()
                .filter(|k| k.caps().redis)
                .map(|k| format!("{:?}", k.name()))
                .collect();
            return Err(PyValueError::new_err(format!(
                "{kind} has no Redis form: use one of {}",
                names.join(", ")
            )));
        }
    };
    match spec.quotas() {
        [q] => Limit::new(algorithm, *q).map_err(errors::backend),
        qs => Err(PyValueError::new_err(format!(
            "a Redis limiter takes one limit, not {}",
            qs.len()
        ))),
    }
}

/// One Redis limiter, with its hybrid front when asked for: what both Python
/// classes hold.
struct Remote {
    remote: blocking::RedisLimiter,
    hybrid: Option<blocking::HybridLimiter>,
    spec: Spec,
}

/// The arguments both constructors share, past the limit itself.
struct Build<'a, 'py> {
    name: &'a str,
    hybrid: bool,
    options: Bound<'py, PyRedisOptions>,
}

impl Remote {
    fn new(spec: Spec, b: Build<'_, '_>) -> PyResult<Self> {
        let opts = b.options.get();
        let remote = blocking::RedisLimiter::new(
            opts.backend.clone(),
            b.name,
            limit_of(&spec)?,
            opts.cfg.clone(),
        )
        .map_err(errors::backend)?;
        let hybrid = if b.hybrid {
            Some(
                blocking::HybridLimiter::new(remote.clone(), HybridConfig::default())
                    .map_err(errors::backend)?,
            )
        } else {
            None
        };
        Ok(Self {
            remote,
            hybrid,
            spec,
        })
    }

    fn spec_from(
        limit: Option<&Bound<'_, PyAny>>,
        amount: Option<&Bound<'_, PyAny>>,
        period: Option<&Bound<'_, PyAny>>,
        burst: Option<&Bound<'_, PyAny>>,
        algorithm: &str,
        max_delay: Option<f64>,
    ) -> PyResult<Spec> {
        let kind: Kind = algorithm
            .parse()
            .map_err(|e| PyValueError::new_err(format!("unknown algorithm {algorithm:?}: {e}")))?;
        let spec = spec_of(kind, limit, amount, period, burst)?;
        match max_delay {
            Some(d) => spec
                .with_max_delay_ns(secs(d, "max_delay")?.as_nanos().min(u64::MAX as u128) as u64)
                .map_err(errors::spec),
            None => Ok(spec),
        }
    }

    /// One check (or peek) with the GIL released, and which tier answered.
    fn run(
        &self,
        py: Python<'_>,
        key: &str,
        n: Cost,
        consume: bool,
    ) -> PyResult<(PyDecision, &'static str)> {
        let v = py.detach(|| match (&self.hybrid, consume) {
            (Some(h), true) => h.check_n(key, n.0),
            (_, true) => self.remote.check_n(key, n.0),
            (_, false) => self.remote.peek_n(key, n.0),
        });
        v.map(|v| (PyDecision::from(v.decision), source_name(v.source)))
            .map_err(errors::backend)
    }

    /// One check straight to Redis, the failure policy bypassed: Redis failing
    /// raises `BackendError` (`BackendTimeout`, `CircuitOpen`).
    fn try_run(&self, py: Python<'_>, key: &str, n: Cost) -> PyResult<PyDecision> {
        py.detach(|| self.remote.try_check_n(key, n.0))
            .map(|r| PyDecision::from(r.decision))
            .map_err(errors::backend)
    }

    /// Several checks in one pipeline (hybrid: each through the lease front).
    fn run_many(
        &self,
        py: Python<'_>,
        items: &Bound<'_, PyAny>,
    ) -> PyResult<Vec<(PyDecision, &'static str)>> {
        let mut owned: Vec<(String, u64)> = Vec::new();
        for item in items.try_iter()? {
            let item = item?;
            owned.push(match item.cast::<PyTuple>() {
                Ok(t) if t.len() == 2 => (
                    key_of(&t.get_item(0)?)?,
                    t.get_item(1)?.extract::<Cost>()?.0,
                ),
                Ok(_) => return Err(PyTypeError::new_err("an item is a key or a (key, n) pair")),
                Err(_) => (key_of(&item)?, 1),
            });
        }
        let capacity = self.remote.limit().capacity();
        if let Some(&(_, n)) = owned.iter().find(|(_, n)| *n > capacity) {
            // Before anything is sent: a batch is charged whole or not at all for this.
            return Err(errors::capacity(sluicegate::InsufficientCapacity {
                requested: n,
                capacity,
            }));
        }
        let results = py.detach(|| match &self.hybrid {
            Some(h) => owned.iter().map(|(k, n)| h.check_n(k, *n)).collect(),
            None => {
                let refs: Vec<(&str, u64)> = owned.iter().map(|(k, n)| (k.as_str(), *n)).collect();
                self.remote.check_many(&refs)
            }
        });
        results
            .into_iter()
            .map(|r| {
                r.map(|v| (PyDecision::from(v.decision), source_name(v.source)))
                    .map_err(errors::backend)
            })
            .collect()
    }

    fn hybrid_stats<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyDict>>> {
        let Some(h) = &self.hybrid else {
            return Ok(None);
        };
        let s = h.stats();
        let d = PyDict::new(py);
        d.set_item("local", s.local)?;
        d.set_item("round_trips", s.round_trips)?;
        Ok(Some(d))
    }
}

/// What both Redis classes share: the limiter, the getters, the async hand-off.
#[pyclass(
    subclass,
    frozen,
    name = "_RedisLimiter",
    module = "sluicegate._sluicegate"
)]
pub struct PyRedisBase {
    inner: Remote,
}

/// The key a single limiter's state lives under.
const ONE: &str = "global";

/// The constructor both classes share: the limit, then `name`, `redis=` (or the
/// deprecated keyword arguments in `legacy`), `algorithm`, `max_delay`, `hybrid`.
#[allow(clippy::too_many_arguments)]
fn base<'py>(
    py: Python<'py>,
    limit: Option<&Bound<'py, PyAny>>,
    name: &str,
    redis: Option<Bound<'py, PyRedisOptions>>,
    algorithm: &str,
    max_delay: Option<f64>,
    hybrid: bool,
    amount: Option<&Bound<'py, PyAny>>,
    period: Option<&Bound<'py, PyAny>>,
    burst: Option<&Bound<'py, PyAny>>,
    legacy: Option<&Bound<'py, PyDict>>,
) -> PyResult<PyClassInitializer<PyRedisBase>> {
    let spec = Remote::spec_from(limit, amount, period, burst, algorithm, max_delay)?;
    let options = options(py, redis, legacy)?;
    let inner = Remote::new(
        spec,
        Build {
            name,
            hybrid,
            options,
        },
    )?;
    Ok(PyClassInitializer::from(PyRedisBase { inner }))
}

/// The shared limiter of a subclass instance.
fn remote<'a, T: pyo3::PyClass<BaseType = PyRedisBase>>(slf: &'a Bound<'_, T>) -> &'a Remote {
    &slf.as_super().get().inner
}

#[pymethods]
impl PyRedisBase {
    /// The quota.
    #[getter]
    fn quota(&self) -> PyQuota {
        PyQuota {
            inner: self.inner.spec.quotas()[0],
        }
    }

    /// The most units admitted at once.
    #[getter]
    fn limit(&self) -> u64 {
        self.inner.remote.limit().capacity()
    }

    /// The algorithm's canonical name.
    #[getter]
    fn algorithm(&self) -> &'static str {
        self.inner.spec.kind().name()
    }

    /// `{"local": ..., "round_trips": ...}` in hybrid mode, else `None`.
    #[getter]
    fn hybrid_stats<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyDict>>> {
        self.inner.hybrid_stats(py)
    }

    /// The `_async` forms' first step (`coroutine`), with checked arguments.
    #[pyo3(name = "_start")]
    fn start_<'py>(
        &self,
        py: Python<'py>,
        key: String,
        n: u64,
        consume: bool,
    ) -> PyResult<Bound<'py, PyAny>> {
        start(py, &self.inner.remote, key, n, consume)
    }

    fn __repr__(slf: &Bound<'_, Self>) -> PyResult<String> {
        let r = &slf.get().inner;
        Ok(format!(
            "{}({:?}, algorithm={:?}{})",
            slf.get_type().name()?,
            quota::describe(&r.spec.quotas()[0]),
            r.spec.kind().name(),
            if r.hybrid.is_some() {
                ", hybrid=True"
            } else {
                ""
            }
        ))
    }
}

/// One limit per key, its state in Redis: the Redis counterpart of `KeyedLimiter`.
#[pyclass(frozen, extends = PyRedisBase, name = "RedisKeyedLimiter", module = "sluicegate._sluicegate")]
pub struct PyRedisKeyedLimiter;

#[pymethods]
impl PyRedisKeyedLimiter {
    #[new]
    #[pyo3(signature = (limit = None, *, name, redis = None, algorithm = "token_bucket", max_delay = None, hybrid = false, amount = None, period = None, burst = None, **legacy))]
    #[allow(clippy::too_many_arguments)]
    fn new<'py>(
        py: Python<'py>,
        limit: Option<&Bound<'py, PyAny>>,
        name: &str,
        redis: Option<Bound<'py, PyRedisOptions>>,
        algorithm: &str,
        max_delay: Option<f64>,
        hybrid: bool,
        amount: Option<&Bound<'py, PyAny>>,
        period: Option<&Bound<'py, PyAny>>,
        burst: Option<&Bound<'py, PyAny>>,
        legacy: Option<&Bound<'py, PyDict>>,
    ) -> PyResult<PyClassInitializer<Self>> {
        let b = base(
            py, limit, name, redis, algorithm, max_delay, hybrid, amount, period, burst, legacy,
        )?;
        Ok(b.add_subclass(Self))
    }

    /// Takes `n` units for `key` (Redis unavailable: the failure policy answers).
    #[pyo3(signature = (key, n = Cost::ONE))]
    fn check(slf: &Bound<'_, Self>, key: &Bound<'_, PyAny>, n: Cost) -> PyResult<PyDecision> {
        Ok(remote(slf).run(slf.py(), &key_of(key)?, n, true)?.0)
    }

    /// Whether `n` units would be admitted for `key`, taking nothing.
    #[pyo3(signature = (key, n = Cost::ONE))]
    fn peek(slf: &Bound<'_, Self>, key: &Bound<'_, PyAny>, n: Cost) -> PyResult<PyDecision> {
        Ok(remote(slf).run(slf.py(), &key_of(key)?, n, false)?.0)
    }

    /// `check`, and which tier answered: `"redis"`, `"fail_open"`, `"fail_closed"`,
    /// `"local_fallback"`, or in hybrid mode `"lease"` / `"local_denial"`.
    #[pyo3(signature = (key, n = Cost::ONE))]
    fn check_with_source(
        slf: &Bound<'_, Self>,
        key: &Bound<'_, PyAny>,
        n: Cost,
    ) -> PyResult<(PyDecision, &'static str)> {
        remote(slf).run(slf.py(), &key_of(key)?, n, true)
    }

    /// `check` straight to Redis with the failure policy bypassed: Redis failing
    /// raises `BackendError` (`BackendTimeout`, `CircuitOpen`).
    #[pyo3(signature = (key, n = Cost::ONE))]
    fn try_check(slf: &Bound<'_, Self>, key: &Bound<'_, PyAny>, n: Cost) -> PyResult<PyDecision> {
        remote(slf).try_run(slf.py(), &key_of(key)?, n)
    }

    /// Checks many keys in one pipeline: `items` are keys (cost 1) or `(key, n)`
    /// pairs; the decisions come back in order. A cost above `limit` raises
    /// `CapacityError` before anything is sent.
    fn check_many(slf: &Bound<'_, Self>, items: &Bound<'_, PyAny>) -> PyResult<Vec<PyDecision>> {
        Ok(remote(slf)
            .run_many(slf.py(), items)?
            .into_iter()
            .map(|r| r.0)
            .collect())
    }

    /// `check_many`, each decision with its source.
    fn check_many_with_source(
        slf: &Bound<'_, Self>,
        items: &Bound<'_, PyAny>,
    ) -> PyResult<Vec<(PyDecision, &'static str)>> {
        remote(slf).run_many(slf.py(), items)
    }

    /// Takes `n` units for `key` if it can; a bool.
    #[pyo3(signature = (key, n = Cost::ONE))]
    fn try_acquire(slf: &Bound<'_, Self>, key: &Bound<'_, PyAny>, n: Cost) -> PyResult<bool> {
        Ok(remote(slf).run(slf.py(), &key_of(key)?, n, true)?.0.allowed)
    }

    /// `check` as a coroutine: the async round trip, no worker thread (in hybrid
    /// mode too: the async form always asks Redis).
    #[pyo3(signature = (key, n = Cost::ONE))]
    fn check_async<'py>(
        slf: &Bound<'py, Self>,
        key: &Bound<'py, PyAny>,
        n: Cost,
    ) -> PyResult<Bound<'py, PyAny>> {
        coroutine(slf.as_any(), key_of(key)?, n.0, true)
    }

    /// `peek` as a coroutine.
    #[pyo3(signature = (key, n = Cost::ONE))]
    fn peek_async<'py>(
        slf: &Bound<'py, Self>,
        key: &Bound<'py, PyAny>,
        n: Cost,
    ) -> PyResult<Bound<'py, PyAny>> {
        coroutine(slf.as_any(), key_of(key)?, n.0, false)
    }

    /// The Redis key that holds `key`'s state.
    fn redis_key(slf: &Bound<'_, Self>, key: &Bound<'_, PyAny>) -> PyResult<String> {
        Ok(remote(slf).remote.as_async().redis_key(&key_of(key)?))
    }
}

/// One limit shared through Redis: the Redis counterpart of `TokenBucket` and the
/// other single limiters (one key, named by `name`).
#[pyclass(frozen, extends = PyRedisBase, name = "RedisLimiter", module = "sluicegate._sluicegate")]
pub struct PyRedisLimiter;

#[pymethods]
impl PyRedisLimiter {
    #[new]
    #[pyo3(signature = (limit = None, *, name, redis = None, algorithm = "token_bucket", max_delay = None, hybrid = false, amount = None, period = None, burst = None, **legacy))]
    #[allow(clippy::too_many_arguments)]
    fn new<'py>(
        py: Python<'py>,
        limit: Option<&Bound<'py, PyAny>>,
        name: &str,
        redis: Option<Bound<'py, PyRedisOptions>>,
        algorithm: &str,
        max_delay: Option<f64>,
        hybrid: bool,
        amount: Option<&Bound<'py, PyAny>>,
        period: Option<&Bound<'py, PyAny>>,
        burst: Option<&Bound<'py, PyAny>>,
        legacy: Option<&Bound<'py, PyDict>>,
    ) -> PyResult<PyClassInitializer<Self>> {
        let b = base(
            py, limit, name, redis, algorithm, max_delay, hybrid, amount, period, burst, legacy,
        )?;
        Ok(b.add_subclass(Self))
    }

    /// Takes `n` units (Redis unavailable: the failure policy answers).
    #[pyo3(signature = (n = Cost::ONE))]
    fn check(slf: &Bound<'_, Self>, n: Cost) -> PyResult<PyDecision> {
        Ok(remote(slf).run(slf.py(), ONE, n, true)?.0)
    }

    /// Whether `n` units would be admitted, taking nothing.
    #[pyo3(signature = (n = Cost::ONE))]
    fn peek(slf: &Bound<'_, Self>, n: Cost) -> PyResult<PyDecision> {
        Ok(remote(slf).run(slf.py(), ONE, n, false)?.0)
    }

    /// `check`, and which tier answered (see `RedisKeyedLimiter.check_with_source`).
    #[pyo3(signature = (n = Cost::ONE))]
    fn check_with_source(slf: &Bound<'_, Self>, n: Cost) -> PyResult<(PyDecision, &'static str)> {
        remote(slf).run(slf.py(), ONE, n, true)
    }

    /// `check` straight to Redis with the failure policy bypassed.
    #[pyo3(signature = (n = Cost::ONE))]
    fn try_check(slf: &Bound<'_, Self>, n: Cost) -> PyResult<PyDecision> {
        remote(slf).try_run(slf.py(), ONE, n)
    }

    /// Takes `n` units if it can; a bool.
    #[pyo3(signature = (n = Cost::ONE))]
    fn try_acquire(slf: &Bound<'_, Self>, n: Cost) -> PyResult<bool> {
        Ok(remote(slf).run(slf.py(), ONE, n, true)?.0.allowed)
    }

    /// `check` as a coroutine: the async round trip, no worker thread.
    #[pyo3(signature = (n = Cost::ONE))]
    fn check_async<'py>(slf: &Bound<'py, Self>, n: Cost) -> PyResult<Bound<'py, PyAny>> {
        coroutine(slf.as_any(), ONE.to_owned(), n.0, true)
    }

    /// `peek` as a coroutine.
    #[pyo3(signature = (n = Cost::ONE))]
    fn peek_async<'py>(slf: &Bound<'py, Self>, n: Cost) -> PyResult<Bound<'py, PyAny>> {
        coroutine(slf.as_any(), ONE.to_owned(), n.0, false)
    }
}
