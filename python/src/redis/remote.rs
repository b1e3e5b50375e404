//! `Remote`: one Redis limiter (and its hybrid front), what both Python classes
//! hold, with the calls they share.

use std::time::Duration;

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyInt, PyString, PyTuple};
use sluicegate::{Kind, Spec};
use sluicegate_redis::{blocking, Algorithm, HybridConfig, Limit, Source};

use super::options::{secs, PyRedisOptions};
use crate::args::Cost;
use crate::decision::PyDecision;
use crate::limiters::spec_of;
use crate::{aio, errors, wait};

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

/// Spawns one check on `rl`'s runtime (`aio::spawn`) and returns the asyncio
/// future of its decision. Errors map as the blocking call's do (`error`).
/// Cancelling abandons the wait, not the call: the check was handed to Redis
/// already or soon will be, and runs to its end (at most the limiter's timeout),
/// so a cancelled check may still be charged, as a cancelled `asyncio.to_thread`
/// one was.
pub(super) fn start<'py>(
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

/// The Redis limit of `spec`, as a Python error.
fn limit_of(spec: &Spec) -> PyResult<Limit> {
    redis_limit(spec).map_err(|e| match e {
        LimitError::Kind(msg) => PyValueError::new_err(msg),
        LimitError::Redis(e) => errors::backend(e),
    })
}

/// Why a spec has no Redis limit.
pub(crate) enum LimitError {
    /// The kind or the number of limits.
    Kind(String),
    /// The Redis tier refused the quota.
    Redis(sluicegate_redis::Error),
}

/// The Redis limit of `spec`. (The one `match` over kinds left in the bindings:
/// `sluicegate_redis::Limit::from_spec` replaces it.)
pub(crate) fn redis_limit(spec: &Spec) -> Result<Limit, LimitError> {
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
            return Err(LimitError::Kind(format!(
                "{kind} has no Redis form: use one of {}",
                names.join(", ")
            )));
        }
    };
    match spec.quotas() {
        [q] => Limit::new(algorithm, *q).map_err(LimitError::Redis),
        qs => Err(LimitError::Kind(format!(
            "a Redis limiter takes one limit, not {}",
            qs.len()
        ))),
    }
}

/// One Redis limiter, with its hybrid front when asked for: what both Python
/// classes hold.
pub(super) struct Remote {
    pub(super) remote: blocking::RedisLimiter,
    pub(super) hybrid: Option<blocking::HybridLimiter>,
    pub(super) spec: Spec,
}

/// The arguments both constructors share, past the limit itself.
pub(super) struct Build<'a, 'py> {
    pub(super) name: &'a str,
    pub(super) hybrid: bool,
    pub(super) options: Bound<'py, PyRedisOptions>,
}

impl Remote {
    pub(super) fn new(spec: Spec, b: Build<'_, '_>) -> PyResult<Self> {
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

    pub(super) fn spec_from(
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
