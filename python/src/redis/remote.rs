//! `Remote`: one Redis limiter (and its hybrid front), what both Python classes
//! hold, with the calls they share.

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyInt, PyString, PyTuple};
use sluicegate::{Kind, Spec};
use sluicegate_redis::{blocking, HybridConfig, Limit, Source};

use super::options::{secs, PyRedisOptions};
use crate::args::Cost;
use crate::decision::PyDecision;
use crate::{aio, errors, quota, wait};

/// A key from Python: `str` as it is, `int` in decimal, `bytes` as UTF-8 (or hex).
pub(super) fn key_of(key: &Bound<'_, PyAny>) -> PyResult<String> {
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
pub(super) fn coroutine<'py>(
    slf: &Bound<'py, PyAny>,
    key: String,
    n: u64,
    consume: bool,
) -> PyResult<Bound<'py, PyAny>> {
    let py = slf.py();
    let start = slf.getattr(pyo3::intern!(py, "_start"))?;
    wait::coroutine(py, "native", (start, key, n, consume))
}

/// Spawns one check on the limiter's runtime (`aio::spawn`) and returns the
/// asyncio future of its decision. Errors map as the blocking call's do
/// (`error`). In hybrid mode a check goes through the lease front: a lease hit
/// (or a cached denial) is answered by a future already done, no round trip.
/// Cancelling abandons the wait, not the call: the check was handed to Redis
/// already or soon will be, and runs to its end (at most the limiter's timeout),
/// so a cancelled check may still be charged, as a cancelled `asyncio.to_thread`
/// one was.
pub(super) fn start<'py>(
    py: Python<'py>,
    r: &Remote,
    key: String,
    n: u64,
    consume: bool,
) -> PyResult<Bound<'py, PyAny>> {
    let limiter = r.remote.as_async().clone();
    let hybrid = r
        .hybrid
        .as_ref()
        .filter(|_| consume)
        .map(|h| h.as_async().clone());
    if let Some(h) = &hybrid {
        // Decided here when the process can: no hop to the runtime and back.
        if let Some(v) = h.check_local(&key, n).map_err(errors::backend)? {
            let decision = PyDecision::from(v.decision);
            return aio::spawn(py, r.remote.handle(), async move { Ok(decision) });
        }
    }
    aio::spawn(py, r.remote.handle(), async move {
        let v = match (consume, hybrid) {
            (true, Some(h)) => h.check_n(&key, n).await,
            (true, None) => limiter.check_n(&key, n).await,
            (false, _) => limiter.peek_n(&key, n).await,
        };
        v.map(|v| PyDecision::from(v.decision))
            .map_err(errors::backend)
    })
}

/// One Redis limiter, with its hybrid front when asked for: what both Python
/// classes hold.
pub(super) struct Remote {
    pub(super) remote: blocking::RedisLimiter,
    pub(super) hybrid: Option<blocking::HybridLimiter>,
}

/// The arguments both constructors share, past the limit itself.
pub(super) struct Build<'a, 'py> {
    pub(super) name: &'a str,
    /// Hybrid mode's settings, in hybrid mode.
    pub(super) hybrid: Option<HybridConfig>,
    pub(super) options: Bound<'py, PyRedisOptions>,
}

impl Remote {
    pub(super) fn new(limit: Limit, b: Build<'_, '_>) -> PyResult<Self> {
        let opts = b.options.get();
        let remote =
            blocking::RedisLimiter::new(opts.backend.clone(), b.name, limit, opts.cfg.clone())
                .map_err(errors::backend)?;
        let hybrid = match b.hybrid {
            Some(hc) => {
                Some(blocking::HybridLimiter::new(remote.clone(), hc).map_err(errors::backend)?)
            }
            None => None,
        };
        Ok(Self { remote, hybrid })
    }

    /// The Redis limit of the constructor's arguments: one quota of a kind with a
    /// Redis script (`sluicegate_redis::Limit` decides, and says why not: a
    /// `ValueError`). A sliding window past the local word's layout is fine here:
    /// Redis stores plain integers.
    pub(super) fn limit_from(
        limit: Option<&Bound<'_, PyAny>>,
        amount: Option<&Bound<'_, PyAny>>,
        period: Option<&Bound<'_, PyAny>>,
        burst: Option<&Bound<'_, PyAny>>,
        algorithm: &str,
        max_delay: Option<f64>,
    ) -> PyResult<Limit> {
        let kind: Kind = algorithm
            .parse()
            .map_err(|e| PyValueError::new_err(format!("unknown algorithm {algorithm:?}: {e}")))?;
        let max_delay_ns = match max_delay {
            Some(d) => u64::try_from(secs(d, "max_delay")?.as_nanos()).unwrap_or(u64::MAX),
            None => 0,
        };
        let quotas = quota::from_args(limit, amount, period, burst)?;
        match quotas.as_slice() {
            [q] => Limit::from_parts(kind, *q, max_delay_ns).map_err(errors::backend),
            several => {
                let spec = Spec::new(kind, several).map_err(errors::spec)?;
                Limit::from_spec(&spec).map_err(errors::backend)
            }
        }
    }

    /// Connects now (and checks the server answers), so a misconfiguration
    /// (a wrong password, a missing database, nothing listening) raises here.
    pub(super) fn connect(&self, py: Python<'_>) -> PyResult<()> {
        py.detach(|| self.remote.connect()).map_err(errors::backend)
    }

    /// The counters of who answered, as a dict.
    pub(super) fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let s = self.remote.stats();
        let d = PyDict::new(py);
        d.set_item("redis", s.redis)?;
        d.set_item("fail_open", s.fail_open)?;
        d.set_item("fail_closed", s.fail_closed)?;
        d.set_item("local_fallback", s.local_fallback)?;
        d.set_item("data_errors", s.data_errors)?;
        d.set_item("circuit_opened", s.circuit_opened)?;
        d.set_item("policy_answers", s.policy_answers())?;
        d.set_item("direct_calls", s.direct_calls)?;
        Ok(d)
    }

    /// The last backend error, as the exception a `try_check` would raise.
    pub(super) fn last_error(&self, py: Python<'_>) -> Option<Py<PyAny>> {
        self.remote
            .last_error()
            .map(|e| errors::backend(e).into_value(py).into_any())
    }

    /// One check (or peek) with the GIL released, and which tier answered.
    pub(super) fn run(
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
    pub(super) fn try_run(&self, py: Python<'_>, key: &str, n: Cost) -> PyResult<PyDecision> {
        py.detach(|| self.remote.try_check_n(key, n.0))
            .map(|r| PyDecision::from(r.decision))
            .map_err(errors::backend)
    }

    /// Several checks in one pipeline (hybrid: each through the lease front).
    pub(super) fn run_many(
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

    pub(super) fn hybrid_stats<'py>(
        &self,
        py: Python<'py>,
    ) -> PyResult<Option<Bound<'py, PyDict>>> {
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
