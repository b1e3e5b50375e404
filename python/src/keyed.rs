//! The keyed limiter: one state per client key in a table of fixed capacity.

use std::hash::{Hash, Hasher};

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyInt, PyString, PyTuple};
use std::path::PathBuf;

use sluicegate::keyed::{AnyKeyed, FullPolicy, KeyedStats};
use sluicegate::{Clock, InsufficientCapacity, Kind, Outcome, Spec, SpecError};
use sluicegate_shm::SharedKeyed;

use crate::args::{size, Cost};
use crate::clock::{PyClock, PyManualClock};
use crate::decision::{DecisionCache, PyDecision};
use crate::limiters::spec_of;
use crate::quota::{self, describe_all};

/// Keys a table holds by default.
const DEFAULT_CAPACITY: usize = 100_000;
use crate::{errors, wait};

/// A key as the table hashes it. The variant tag is hashed too, so `"1"`, `b"1"`
/// and `1` are three keys, as they are three keys of a `dict`.
enum Key<'a> {
    Str(&'a str),
    Bytes(&'a [u8]),
    Int(i64),
    /// An int outside 64 bits, by its decimal text.
    BigInt(String),
}

impl Hash for Key<'_> {
    fn hash<H: Hasher>(&self, h: &mut H) {
        match self {
            Self::Str(s) => {
                h.write_u8(0);
                s.hash(h);
            }
            Self::Bytes(b) => {
                h.write_u8(1);
                b.hash(h);
            }
            Self::Int(i) => {
                h.write_u8(2);
                h.write_i64(*i);
            }
            Self::BigInt(s) => {
                h.write_u8(3);
                s.hash(h);
            }
        }
    }
}

#[inline]
fn with_key<R>(key: &Bound<'_, PyAny>, f: impl FnOnce(&Key<'_>) -> R) -> PyResult<R> {
    if let Ok(s) = key.cast::<PyString>() {
        return Ok(f(&Key::Str(s.to_str()?)));
    }
    if let Ok(b) = key.cast::<PyBytes>() {
        return Ok(f(&Key::Bytes(b.as_bytes())));
    }
    if key.is_instance_of::<PyInt>() {
        return Ok(match key.extract::<i64>() {
            Ok(i) => f(&Key::Int(i)),
            Err(_) => f(&Key::BigInt(key.str()?.to_str()?.to_owned())),
        });
    }
    Err(PyTypeError::new_err(format!(
        "a key is a str, bytes or int, not {}",
        key.get_type().name()?
    )))
}

/// A table the core could not build: `MemoryError` when the memory is not there,
/// `ValueError` when the size could never be allocated (it overflows the address
/// space) or the spec is invalid.
fn table_error(e: SpecError, capacity: usize) -> PyErr {
    match e {
        SpecError::Alloc { bytes: usize::MAX } => PyValueError::new_err(format!(
            "capacity {capacity} is too large: the table could never be allocated"
        )),
        SpecError::Alloc { bytes } => pyo3::exceptions::PyMemoryError::new_err(format!(
            "cannot allocate a table of {capacity} keys ({bytes} bytes)"
        )),
        other => errors::spec(other),
    }
}

fn policy_name(p: FullPolicy) -> &'static str {
    match p {
        FullPolicy::Reject => "reject",
        FullPolicy::AllowUnlimited => "allow_unlimited",
        _ => "evict_stalest",
    }
}

/// Counters of a keyed limiter's table, monotonic since it was built.
#[pyclass(frozen, eq, name = "KeyedStats", module = "sluicegate._sluicegate")]
#[derive(PartialEq, Eq)]
pub struct PyKeyedStats {
    /// New keys placed in an empty slot.
    #[pyo3(get)]
    inserted: u64,
    /// New keys placed in a slot whose key had gone back to full (lossless reuse).
    #[pyo3(get)]
    reused: u64,
    /// Live entries replaced under the "evict_stalest" policy.
    #[pyo3(get)]
    evicted: u64,
    /// New keys denied under the "reject" policy.
    #[pyo3(get)]
    rejected: u64,
    /// New keys admitted untracked under the "allow_unlimited" policy.
    #[pyo3(get)]
    unlimited: u64,
}

impl From<KeyedStats> for PyKeyedStats {
    fn from(s: KeyedStats) -> Self {
        Self {
            inserted: s.inserted,
            reused: s.reused,
            evicted: s.evicted,
            rejected: s.rejected,
            unlimited: s.unlimited,
        }
    }
}

#[pymethods]
impl PyKeyedStats {
    fn __repr__(&self) -> String {
        format!(
            "KeyedStats(inserted={}, reused={}, evicted={}, rejected={}, unlimited={})",
            self.inserted, self.reused, self.evicted, self.rejected, self.unlimited
        )
    }
}

/// One limiter per key (`str`, `bytes` or `int`), all with the same limit, in a
/// table of `capacity` keys allocated once. A key whose state is back to full
/// takes no room; when every candidate slot holds live state, `policy` decides:
/// `"evict_stalest"` (default), `"reject"` or `"allow_unlimited"`.
#[pyclass(frozen, name = "KeyedLimiter", module = "sluicegate._sluicegate")]
pub struct PyKeyedLimiter {
    inner: Table,
    policy: FullPolicy,
    last: DecisionCache,
    /// The region's file, for a limiter in shared memory.
    shared: Option<PathBuf>,
}

/// Where a keyed limiter's keys live: this process's table, or a region every
/// worker process maps (`shared=`).
enum Table {
    Local(AnyKeyed<PyClock>),
    Shared(SharedKeyed),
}

/// A key as a region hashes it: its bytes (a `str` as UTF-8, an `int` as its
/// decimal text), the same encoding C and Rust use for that region.
fn key_bytes<R>(k: &Key<'_>, f: impl FnOnce(&[u8]) -> R) -> R {
    match k {
        Key::Str(s) => f(s.as_bytes()),
        Key::Bytes(b) => f(b),
        Key::Int(i) => f(i.to_string().as_bytes()),
        Key::BigInt(s) => f(s.as_bytes()),
    }
}

impl Table {
    #[inline]
    fn check_n(&self, k: &Key<'_>, n: u64) -> Result<Outcome, InsufficientCapacity> {
        match self {
            Table::Local(t) => t.check_n(k, n),
            Table::Shared(t) => key_bytes(k, |b| t.check_n_at(b, n, sluicegate_shm::now())),
        }
    }

    fn peek_n(&self, k: &Key<'_>, n: u64) -> Result<Outcome, InsufficientCapacity> {
        match self {
            Table::Local(t) => t.peek_n(k, n),
            Table::Shared(t) => key_bytes(k, |b| t.peek_n_at(b, n, sluicegate_shm::now())),
        }
    }

    fn spec(&self) -> Spec {
        match self {
            Table::Local(t) => t.spec(),
            Table::Shared(t) => t.spec(),
        }
    }
}

#[pymethods]
impl PyKeyedLimiter {
    #[new]
    #[pyo3(signature = (limit = None, *, capacity = None, algorithm = "token_bucket", policy = "evict_stalest", amount = None, period = None, burst = None, clock = None, shared = None))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        limit: Option<&Bound<'_, PyAny>>,
        capacity: Option<&Bound<'_, PyAny>>,
        algorithm: &str,
        policy: &str,
        amount: Option<&Bound<'_, PyAny>>,
        period: Option<&Bound<'_, PyAny>>,
        burst: Option<&Bound<'_, PyAny>>,
        clock: Option<Py<PyManualClock>>,
        shared: Option<PathBuf>,
    ) -> PyResult<Self> {
        let kind: Kind = algorithm
            .parse()
            .map_err(|e| PyValueError::new_err(format!("unknown algorithm {algorithm:?}: {e}")))?;
        let spec = spec_of(kind, limit, amount, period, burst)?;
        let policy = match policy {
            "evict_stalest" => FullPolicy::EvictStalest,
            "reject" => FullPolicy::Reject,
            "allow_unlimited" => FullPolicy::AllowUnlimited,
            other => {
                return Err(PyValueError::new_err(format!(
                    "unknown policy {other:?}: expected \"evict_stalest\", \"reject\" or \"allow_unlimited\""
                )))
            }
        };
        let capacity = match capacity {
            Some(c) => size(c, "capacity")?,
            None => DEFAULT_CAPACITY,
        };
        let inner = match &shared {
            None => Table::Local(
                AnyKeyed::with_clock(&spec, capacity, PyClock::from_arg(clock))
                    .map_err(|e| table_error(e, capacity))?
                    .with_policy(policy),
            ),
            Some(_) if clock.is_some() => return Err(crate::shared::clock_and_shared()),
            Some(name) => Table::Shared(
                crate::shared::region(name)?
                    .keyed(&spec, capacity)
                    .map_err(crate::shared::error)?
                    .with_policy(policy),
            ),
        };
        Ok(Self {
            inner,
            policy,
            last: DecisionCache::default(),
            shared: shared.map(sluicegate_shm::path_of),
        })
    }

    /// Takes `n` units for `key`.
    #[pyo3(signature = (key, n = Cost::ONE))]
    #[inline]
    fn check(&self, key: &Bound<'_, PyAny>, n: Cost) -> PyResult<Py<PyDecision>> {
        let n = n.0;
        match with_key(key, |k| self.inner.check_n(k, n))? {
            Ok(o) => self.last.object(key.py(), o.decision, n),
            Err(e) => Err(errors::capacity(e)),
        }
    }

    /// What `check(key, n)` would answer, taking nothing (and placing no key).
    #[pyo3(signature = (key, n = Cost::ONE))]
    fn peek(&self, key: &Bound<'_, PyAny>, n: Cost) -> PyResult<PyDecision> {
        let n = n.0;
        with_key(key, |k| self.inner.peek_n(k, n))?
            .map(|o| o.decision.into())
            .map_err(errors::capacity)
    }

    /// `check(key, n)` as a bool.
    #[pyo3(signature = (key, n = Cost::ONE))]
    fn try_acquire(&self, key: &Bound<'_, PyAny>, n: Cost) -> PyResult<bool> {
        let n = n.0;
        with_key(key, |k| self.inner.check_n(k, n))?
            .map(|o| o.decision.allowed)
            .map_err(errors::capacity)
    }

    /// Blocks (GIL released) until `n` units are taken for `key`.
    #[pyo3(signature = (key, n = Cost::ONE, timeout = None))]
    fn acquire(
        &self,
        py: Python<'_>,
        key: &Bound<'_, PyAny>,
        n: Cost,
        timeout: Option<f64>,
    ) -> PyResult<PyDecision> {
        let n = n.0;
        with_key(key, |k| {
            wait::blocking(py, timeout, || {
                self.inner.check_n(k, n).map(|o: Outcome| o.decision)
            })
        })?
    }

    /// `await`s until `n` units are taken for `key`, with `asyncio.sleep`.
    #[pyo3(signature = (key, n = Cost::ONE, timeout = None))]
    fn acquire_async<'py>(
        slf: &Bound<'py, Self>,
        key: &Bound<'py, PyAny>,
        n: Cost,
        timeout: Option<f64>,
    ) -> PyResult<Bound<'py, PyAny>> {
        wait::deadline(timeout)?;
        with_key(key, |_| ())?;
        wait::coroutine(
            slf.py(),
            "acquire_keyed",
            (slf.getattr("check")?, key, n.0, timeout),
        )
    }

    /// Forgets every key (in every process, for a shared limiter).
    fn clear(&self) {
        match &self.inner {
            Table::Local(t) => t.clear(),
            Table::Shared(t) => t.clear(),
        }
    }

    /// Keys holding live state now (a scan of the whole table, or of the
    /// region for a shared limiter: every process's keys).
    fn __len__(&self) -> usize {
        match &self.inner {
            Table::Local(t) => t.len_at(t.clock().now()),
            Table::Shared(t) => t.len_at(sluicegate_shm::now()),
        }
    }

    /// The table's event counters (every process's, for a shared limiter).
    #[getter]
    fn stats(&self) -> PyKeyedStats {
        match &self.inner {
            Table::Local(t) => t.stats().into(),
            Table::Shared(t) => t.stats().into(),
        }
    }

    /// Keys the table can hold at once (the requested capacity rounded up to
    /// 8; for a shared limiter, the most live keys it holds in the region).
    #[getter]
    fn capacity(&self) -> usize {
        match &self.inner {
            Table::Local(t) => t.capacity(),
            Table::Shared(t) => t.capacity(),
        }
    }

    /// The shared region's file, or `None` for a limiter in this process.
    #[getter]
    fn shared(&self) -> Option<String> {
        self.shared
            .as_ref()
            .map(|p| p.to_string_lossy().into_owned())
    }

    /// The full-table policy.
    #[getter]
    fn policy(&self) -> &'static str {
        policy_name(self.policy)
    }

    /// The algorithm every key runs.
    #[getter]
    fn algorithm(&self) -> &'static str {
        self.inner.spec().kind().name()
    }

    /// The most units one request can take.
    #[getter]
    fn limit(&self) -> u64 {
        self.inner.spec().capacity()
    }

    /// The limit, as a one-element tuple.
    #[getter]
    fn quotas<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        quota::to_tuple(py, self.inner.spec().quotas())
    }

    fn __repr__(&self) -> String {
        format!(
            "KeyedLimiter({:?}, capacity={}, algorithm={:?}, policy={:?})",
            describe_all(self.inner.spec().quotas()),
            self.capacity(),
            self.inner.spec().kind().name(),
            self.policy()
        )
    }
}
