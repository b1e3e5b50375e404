//! Redis-backed limiters (`sluicegate-redis`): the same decisions as the local
//! classes, their state shared by every process on the server. Where Redis is and
//! how to fail is one `RedisOptions` object (shared by any number of limiters);
//! `hybrid=True` puts the local lease front of `sluicegate_redis::HybridLimiter`
//! before Redis. Both classes are thin over one `Remote` (the key is the only
//! difference: a single limiter's is `"global"`). The blocking calls release the
//! GIL for the round trip. The `_async` forms are native: the check is the async
//! limiter's future, spawned on the blocking limiter's own runtime and handed to
//! asyncio through `pyo3-async-runtimes` (`aio.rs`).

mod options;
mod remote;

use pyo3::prelude::*;
use pyo3::types::PyDict;

use options::options;
pub use options::PyRedisOptions;
use remote::{coroutine, key_of, start, Build, Remote};
use sluicegate_redis::HybridConfig;

use crate::args::Cost;
use crate::decision::PyDecision;
use crate::quota::{self, PyQuota};

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
/// deprecated keyword arguments in `legacy`), `algorithm`, `max_delay`,
/// `hybrid` with its lease settings.
#[allow(clippy::too_many_arguments)]
fn base<'py>(
    py: Python<'py>,
    limit: Option<&Bound<'py, PyAny>>,
    name: &str,
    redis: Option<Bound<'py, PyRedisOptions>>,
    algorithm: &str,
    max_delay: Option<f64>,
    (hybrid, lease_horizon, lease_ttl): (bool, Option<f64>, Option<f64>),
    (amount, period, burst): QuotaArgs<'_, 'py>,
    legacy: Option<&Bound<'py, PyDict>>,
) -> PyResult<PyClassInitializer<PyRedisBase>> {
    let limit = Remote::limit_from(limit, amount, period, burst, algorithm, max_delay)?;
    let hybrid = if hybrid {
        Some(hybrid_config(lease_horizon, lease_ttl)?)
    } else if lease_horizon.is_some() || lease_ttl.is_some() {
        return Err(pyo3::exceptions::PyValueError::new_err(
            "lease_horizon and lease_ttl are hybrid mode's: pass hybrid=True",
        ));
    } else {
        None
    };
    let options = options(py, redis, legacy)?;
    let inner = Remote::new(
        limit,
        Build {
            name,
            hybrid,
            options,
        },
    )?;
    Ok(PyClassInitializer::from(PyRedisBase { inner }))
}

/// The deprecated `amount`, `period` and `burst` arguments.
type QuotaArgs<'a, 'py> = (
    Option<&'a Bound<'py, PyAny>>,
    Option<&'a Bound<'py, PyAny>>,
    Option<&'a Bound<'py, PyAny>>,
);

/// The longest lease setting: an hour, as a rule file's `[redis]` table allows.
const MAX_LEASE_SECS: f64 = 3600.0;

/// Hybrid mode's settings: `lease_horizon` and `lease_ttl` in seconds (the
/// rule file's `lease_horizon_ms` and `lease_ttl_ms`), each more than 0 and at
/// most an hour; `None` keeps the default.
fn hybrid_config(lease_horizon: Option<f64>, lease_ttl: Option<f64>) -> PyResult<HybridConfig> {
    let secs = |v: Option<f64>, what: &str, default: std::time::Duration| match v {
        None => Ok(default),
        Some(s) if s > 0.0 && s <= MAX_LEASE_SECS => Ok(std::time::Duration::from_secs_f64(s)),
        Some(s) => Err(pyo3::exceptions::PyValueError::new_err(format!(
            "{what} must be a number of seconds > 0 and at most {MAX_LEASE_SECS}, not {s}"
        ))),
    };
    let d = HybridConfig::default();
    Ok(HybridConfig {
        horizon: secs(lease_horizon, "lease_horizon", d.horizon)?,
        lease_ttl: secs(lease_ttl, "lease_ttl", d.lease_ttl)?,
        ..d
    })
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
            inner: self.inner.remote.limit().quota(),
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
        self.inner.remote.limit().kind().name()
    }

    /// Connects to Redis now and checks that it answers (`PING`): a wrong
    /// password, a missing database or nothing listening raises here
    /// (`BackendError`; `BackendTimeout` past the connect timeout) instead of
    /// being answered by the failure policy at every check.
    fn connect(&self, py: Python<'_>) -> PyResult<()> {
        self.inner.connect(py)
    }

    /// Counters of who answered: `{"redis", "fail_open", "fail_closed",
    /// "local_fallback", "data_errors", "circuit_opened", "policy_answers",
    /// "direct_calls"}` (the last: calls written and read by the calling
    /// thread on a connection of the limiter's own, no other thread woken).
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        self.inner.stats(py)
    }

    /// The last error Redis gave (the exception `try_check` would have raised
    /// for it), or `None`: why the failure policy is answering.
    #[getter]
    fn last_error(&self, py: Python<'_>) -> Option<Py<PyAny>> {
        self.inner.last_error(py)
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
        start(py, &self.inner, key, n, consume)
    }

    fn __repr__(slf: &Bound<'_, Self>) -> PyResult<String> {
        let r = &slf.get().inner;
        Ok(format!(
            "{}({:?}, algorithm={:?}{})",
            slf.get_type().name()?,
            quota::describe(&r.remote.limit().quota()),
            r.remote.limit().kind().name(),
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
    #[pyo3(signature = (limit = None, *, name, redis = None, algorithm = "token_bucket", max_delay = None, hybrid = false, lease_horizon = None, lease_ttl = None, amount = None, period = None, burst = None, **legacy))]
    #[allow(clippy::too_many_arguments)]
    fn new<'py>(
        py: Python<'py>,
        limit: Option<&Bound<'py, PyAny>>,
        name: &str,
        redis: Option<Bound<'py, PyRedisOptions>>,
        algorithm: &str,
        max_delay: Option<f64>,
        hybrid: bool,
        lease_horizon: Option<f64>,
        lease_ttl: Option<f64>,
        amount: Option<&Bound<'py, PyAny>>,
        period: Option<&Bound<'py, PyAny>>,
        burst: Option<&Bound<'py, PyAny>>,
        legacy: Option<&Bound<'py, PyDict>>,
    ) -> PyResult<PyClassInitializer<Self>> {
        let b = base(
            py,
            limit,
            name,
            redis,
            algorithm,
            max_delay,
            (hybrid, lease_horizon, lease_ttl),
            (amount, period, burst),
            legacy,
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
        Ok(remote(slf)
            .run(slf.py(), &key_of(key)?, n, true)?
            .0
            .allowed())
    }

    /// `check` as a coroutine: the async round trip, no worker thread (in hybrid
    /// mode a lease hit is answered without one).
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
    #[pyo3(signature = (limit = None, *, name, redis = None, algorithm = "token_bucket", max_delay = None, hybrid = false, lease_horizon = None, lease_ttl = None, amount = None, period = None, burst = None, **legacy))]
    #[allow(clippy::too_many_arguments)]
    fn new<'py>(
        py: Python<'py>,
        limit: Option<&Bound<'py, PyAny>>,
        name: &str,
        redis: Option<Bound<'py, PyRedisOptions>>,
        algorithm: &str,
        max_delay: Option<f64>,
        hybrid: bool,
        lease_horizon: Option<f64>,
        lease_ttl: Option<f64>,
        amount: Option<&Bound<'py, PyAny>>,
        period: Option<&Bound<'py, PyAny>>,
        burst: Option<&Bound<'py, PyAny>>,
        legacy: Option<&Bound<'py, PyDict>>,
    ) -> PyResult<PyClassInitializer<Self>> {
        let b = base(
            py,
            limit,
            name,
            redis,
            algorithm,
            max_delay,
            (hybrid, lease_horizon, lease_ttl),
            (amount, period, burst),
            legacy,
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
        Ok(remote(slf).run(slf.py(), ONE, n, true)?.0.allowed())
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
