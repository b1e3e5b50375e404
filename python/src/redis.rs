//! Redis-backed limiters (`sluicegate-redis`): the same decisions as the local
//! classes, their state shared by every process on the server. The blocking calls
//! release the GIL for the round trip. The `_async` forms are native: the check is
//! the async limiter's future, spawned on the blocking limiter's own runtime (one
//! connection, one driver task, one set of timers for both forms), and handed to
//! asyncio as a future through `pyo3-async-runtimes` (`aio.rs`); no thread waits
//! on it, and the GIL is taken only to hand over the decision.

use std::time::Duration;

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyInt, PyString};
use sluicegate::Quota;
use sluicegate_redis::{
    blocking, Algorithm, Backend, ClientCert, Config, FailurePolicy, Limit, Source, TlsConfig,
};

use crate::decision::PyDecision;
use crate::limiters::cost;
use crate::{aio, errors, quota, wait};

fn error(e: sluicegate_redis::Error) -> PyErr {
    match e {
        sluicegate_redis::Error::Capacity(c) => errors::capacity(c),
        sluicegate_redis::Error::Config(c) => errors::config(c),
        other => PyValueError::new_err(other.to_string()),
    }
}

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
    Err(pyo3::exceptions::PyTypeError::new_err(
        "a key is a str, bytes or int",
    ))
}

/// The shared constructor of both classes.
#[allow(clippy::too_many_arguments)]
fn build(
    limit: Option<&Bound<'_, PyAny>>,
    amount: Option<u64>,
    period: Option<&Bound<'_, PyAny>>,
    burst: Option<u64>,
    url: &str,
    tls: Tls,
    name: &str,
    algorithm: &str,
    prefix: &str,
    timeout: f64,
    failure_policy: &str,
    local_share: u8,
    max_delay: Option<f64>,
    what: &str,
) -> PyResult<(blocking::RedisLimiter, Quota)> {
    let quotas = quota::from_args(limit, amount, period, burst)?;
    let q = quota::one(quotas, what)?;
    let alg = match algorithm {
        "token_bucket" => Algorithm::TokenBucket,
        "leaky_bucket" => Algorithm::LeakyBucket,
        "fixed_window" | "sliding_window" => {
            quota::no_burst(&[q], algorithm)?;
            if algorithm == "fixed_window" {
                Algorithm::FixedWindow
            } else {
                Algorithm::SlidingWindow
            }
        }
        "shaper" => Algorithm::Shaper {
            max_delay: secs(max_delay.unwrap_or(0.0), "max_delay")?,
        },
        other => {
            return Err(PyValueError::new_err(format!(
                "unknown algorithm {other:?}: expected \"token_bucket\", \"leaky_bucket\", \"fixed_window\", \"sliding_window\" or \"shaper\""
            )))
        }
    };
    let policy = match failure_policy {
        "open" => FailurePolicy::Open,
        "closed" => FailurePolicy::Closed,
        "local" => {
            if !(1..=100).contains(&local_share) {
                return Err(PyValueError::new_err(
                    "local_share is a percentage from 1 to 100",
                ));
            }
            FailurePolicy::Local {
                share_percent: local_share,
            }
        }
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
    let cfg = Config {
        prefix: prefix.to_owned(),
        timeout,
        connect_timeout: timeout.max(Duration::from_millis(50)),
        policy,
        ..Config::default()
    };
    let limit = Limit::new(alg, q).map_err(error)?;
    let mut backend = Backend::from_url(url).map_err(error)?;
    if let Some(tls) = tls.config()? {
        backend = backend.with_tls(tls).map_err(error)?;
    }
    let rl = blocking::RedisLimiter::new(backend, name, limit, cfg).map_err(error)?;
    Ok((rl, q))
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

fn secs(s: f64, what: &str) -> PyResult<Duration> {
    Duration::try_from_secs_f64(s).map_err(|_| {
        PyValueError::new_err(format!("{what} must be a finite number of seconds >= 0"))
    })
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

fn run(
    py: Python<'_>,
    rl: &blocking::RedisLimiter,
    key: &str,
    n: u64,
    consume: bool,
) -> PyResult<(PyDecision, &'static str)> {
    let v = py.detach(|| {
        if consume {
            rl.check_n(key, n)
        } else {
            rl.peek_n(key, n)
        }
    });
    v.map(|v| (PyDecision::from(v.decision), source_name(v.source)))
        .map_err(error)
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
        v.map(|v| PyDecision::from(v.decision)).map_err(error)
    })
}

/// One limit per key, its state in Redis: the Redis counterpart of `KeyedLimiter`.
#[pyclass(frozen, name = "RedisKeyedLimiter", module = "sluicegate._sluicegate")]
pub struct PyRedisKeyedLimiter {
    inner: blocking::RedisLimiter,
    quota: Quota,
}

#[pymethods]
impl PyRedisKeyedLimiter {
    #[new]
    #[pyo3(signature = (limit = None, *, url, name, algorithm = "token_bucket", prefix = "sluicegate:", timeout = 0.025, failure_policy = "local", local_share = 10, max_delay = None, amount = None, period = None, burst = None, ssl_ca_certs = None, ssl_certfile = None, ssl_keyfile = None))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        limit: Option<&Bound<'_, PyAny>>,
        url: &str,
        name: &str,
        algorithm: &str,
        prefix: &str,
        timeout: f64,
        failure_policy: &str,
        local_share: u8,
        max_delay: Option<f64>,
        amount: Option<u64>,
        period: Option<&Bound<'_, PyAny>>,
        burst: Option<u64>,
        ssl_ca_certs: Option<std::path::PathBuf>,
        ssl_certfile: Option<std::path::PathBuf>,
        ssl_keyfile: Option<std::path::PathBuf>,
    ) -> PyResult<Self> {
        let tls = Tls {
            ca: ssl_ca_certs,
            cert: ssl_certfile,
            key: ssl_keyfile,
        };
        let (inner, quota) = build(
            limit,
            amount,
            period,
            burst,
            url,
            tls,
            name,
            algorithm,
            prefix,
            timeout,
            failure_policy,
            local_share,
            max_delay,
            "RedisKeyedLimiter",
        )?;
        Ok(Self { inner, quota })
    }

    /// Takes `n` units for `key` (Redis unavailable: the failure policy answers).
    #[pyo3(signature = (key, n = 1))]
    fn check(&self, py: Python<'_>, key: &Bound<'_, PyAny>, n: i64) -> PyResult<PyDecision> {
        run(py, &self.inner, &key_of(key)?, cost(n)?, true).map(|r| r.0)
    }

    /// Whether `n` units would be admitted for `key`, taking nothing.
    #[pyo3(signature = (key, n = 1))]
    fn peek(&self, py: Python<'_>, key: &Bound<'_, PyAny>, n: i64) -> PyResult<PyDecision> {
        run(py, &self.inner, &key_of(key)?, cost(n)?, false).map(|r| r.0)
    }

    /// `check`, and which tier answered: `"redis"`, `"fail_open"`, `"fail_closed"`
    /// or `"local_fallback"`.
    #[pyo3(signature = (key, n = 1))]
    fn check_with_source(
        &self,
        py: Python<'_>,
        key: &Bound<'_, PyAny>,
        n: i64,
    ) -> PyResult<(PyDecision, &'static str)> {
        run(py, &self.inner, &key_of(key)?, cost(n)?, true)
    }

    /// Takes `n` units for `key` if it can; a bool.
    #[pyo3(signature = (key, n = 1))]
    fn try_acquire(&self, py: Python<'_>, key: &Bound<'_, PyAny>, n: i64) -> PyResult<bool> {
        run(py, &self.inner, &key_of(key)?, cost(n)?, true).map(|r| r.0.allowed)
    }

    /// `check` as a coroutine: the async round trip, no worker thread.
    #[pyo3(signature = (key, n = 1))]
    fn check_async<'py>(
        slf: &Bound<'py, Self>,
        key: &Bound<'py, PyAny>,
        n: i64,
    ) -> PyResult<Bound<'py, PyAny>> {
        let n = cost(n)?;
        coroutine(slf.as_any(), key_of(key)?, n, true)
    }

    /// `peek` as a coroutine.
    #[pyo3(signature = (key, n = 1))]
    fn peek_async<'py>(
        slf: &Bound<'py, Self>,
        key: &Bound<'py, PyAny>,
        n: i64,
    ) -> PyResult<Bound<'py, PyAny>> {
        let n = cost(n)?;
        coroutine(slf.as_any(), key_of(key)?, n, false)
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
        start(py, &self.inner, key, n, consume)
    }

    /// The Redis key that holds `key`'s state.
    fn redis_key(&self, key: &Bound<'_, PyAny>) -> PyResult<String> {
        Ok(self.inner.as_async().redis_key(&key_of(key)?))
    }

    /// The quota.
    #[getter]
    fn quota(&self) -> crate::quota::PyQuota {
        crate::quota::PyQuota { inner: self.quota }
    }

    /// The most units admitted at once.
    #[getter]
    fn limit(&self) -> u64 {
        self.inner.limit().capacity()
    }

    fn __repr__(&self) -> String {
        format!("RedisKeyedLimiter({:?})", quota::describe(&self.quota))
    }
}

/// One limit shared through Redis: the Redis counterpart of `TokenBucket` and the
/// other single limiters (one key, named by `name`).
#[pyclass(frozen, name = "RedisLimiter", module = "sluicegate._sluicegate")]
pub struct PyRedisLimiter {
    inner: blocking::RedisLimiter,
    quota: Quota,
}

/// The key a single limiter's state lives under.
const ONE: &str = "global";

#[pymethods]
impl PyRedisLimiter {
    #[new]
    #[pyo3(signature = (limit = None, *, url, name, algorithm = "token_bucket", prefix = "sluicegate:", timeout = 0.025, failure_policy = "local", local_share = 10, max_delay = None, amount = None, period = None, burst = None, ssl_ca_certs = None, ssl_certfile = None, ssl_keyfile = None))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        limit: Option<&Bound<'_, PyAny>>,
        url: &str,
        name: &str,
        algorithm: &str,
        prefix: &str,
        timeout: f64,
        failure_policy: &str,
        local_share: u8,
        max_delay: Option<f64>,
        amount: Option<u64>,
        period: Option<&Bound<'_, PyAny>>,
        burst: Option<u64>,
        ssl_ca_certs: Option<std::path::PathBuf>,
        ssl_certfile: Option<std::path::PathBuf>,
        ssl_keyfile: Option<std::path::PathBuf>,
    ) -> PyResult<Self> {
        let tls = Tls {
            ca: ssl_ca_certs,
            cert: ssl_certfile,
            key: ssl_keyfile,
        };
        let (inner, quota) = build(
            limit,
            amount,
            period,
            burst,
            url,
            tls,
            name,
            algorithm,
            prefix,
            timeout,
            failure_policy,
            local_share,
            max_delay,
            "RedisLimiter",
        )?;
        Ok(Self { inner, quota })
    }

    /// Takes `n` units (Redis unavailable: the failure policy answers).
    #[pyo3(signature = (n = 1))]
    fn check(&self, py: Python<'_>, n: i64) -> PyResult<PyDecision> {
        run(py, &self.inner, ONE, cost(n)?, true).map(|r| r.0)
    }

    /// Whether `n` units would be admitted, taking nothing.
    #[pyo3(signature = (n = 1))]
    fn peek(&self, py: Python<'_>, n: i64) -> PyResult<PyDecision> {
        run(py, &self.inner, ONE, cost(n)?, false).map(|r| r.0)
    }

    /// Takes `n` units if it can; a bool.
    #[pyo3(signature = (n = 1))]
    fn try_acquire(&self, py: Python<'_>, n: i64) -> PyResult<bool> {
        run(py, &self.inner, ONE, cost(n)?, true).map(|r| r.0.allowed)
    }

    /// `check` as a coroutine: the async round trip, no worker thread.
    #[pyo3(signature = (n = 1))]
    fn check_async<'py>(slf: &Bound<'py, Self>, n: i64) -> PyResult<Bound<'py, PyAny>> {
        coroutine(slf.as_any(), ONE.to_owned(), cost(n)?, true)
    }

    /// `peek` as a coroutine.
    #[pyo3(signature = (n = 1))]
    fn peek_async<'py>(slf: &Bound<'py, Self>, n: i64) -> PyResult<Bound<'py, PyAny>> {
        coroutine(slf.as_any(), ONE.to_owned(), cost(n)?, false)
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
        start(py, &self.inner, key, n, consume)
    }

    /// The quota.
    #[getter]
    fn quota(&self) -> crate::quota::PyQuota {
        crate::quota::PyQuota { inner: self.quota }
    }

    /// The most units admitted at once.
    #[getter]
    fn limit(&self) -> u64 {
        self.inner.limit().capacity()
    }

    fn __repr__(&self) -> String {
        format!("RedisLimiter({:?})", quota::describe(&self.quota))
    }
}
