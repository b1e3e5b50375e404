//! The keyed limiter: one state per client key in a table of fixed capacity.

use std::hash::{Hash, Hasher};

use pyo3::exceptions::{PyMemoryError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyInt, PyString, PyTuple};
use sluicegate::keyed::{
    DefaultHashBuilder, FullPolicy, Group, KeyedLimiter, KeyedStats, GROUP_SLOTS,
};
use sluicegate::{
    Algorithm, Decision, Fixed, Gcra, InsufficientCapacity, Kind, Leaky, Quota, Sliding, Spec,
};

use crate::args::{size, Cost};
use crate::clock::{PyClock, PyManualClock};
use crate::decision::PyDecision;
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

enum AnyKeyed {
    TokenBucket(KeyedLimiter<Gcra, PyClock>),
    LeakyBucket(KeyedLimiter<Leaky, PyClock>),
    FixedWindow(KeyedLimiter<Fixed, PyClock>),
    SlidingWindow(KeyedLimiter<Sliding, PyClock>),
}

macro_rules! keyed {
    ($self:expr, $t:ident => $e:expr) => {
        match $self {
            AnyKeyed::TokenBucket($t) => $e,
            AnyKeyed::LeakyBucket($t) => $e,
            AnyKeyed::FixedWindow($t) => $e,
            AnyKeyed::SlidingWindow($t) => $e,
        }
    };
}

impl AnyKeyed {
    #[inline]
    fn check_n(&self, key: &Key<'_>, n: u64) -> Result<Decision, InsufficientCapacity> {
        keyed!(self, t => t.check_n(key, n))
    }
    fn peek_n(&self, key: &Key<'_>, n: u64) -> Result<Decision, InsufficientCapacity> {
        keyed!(self, t => t.peek_n(key, n))
    }
}

/// A table of `capacity` keys for algorithm `A`, its memory reserved fallibly
/// (`MemoryError` when it cannot be, `ValueError` when it could never be
/// addressed), so no capacity aborts the interpreter.
fn table<A: Algorithm>(
    quota: Quota,
    capacity: usize,
    clock: PyClock,
    policy: FullPolicy,
) -> PyResult<KeyedLimiter<A, PyClock>> {
    if capacity == 0 {
        return Err(errors::config(sluicegate::ConfigError::Zero {
            field: "capacity",
        }));
    }
    let groups = capacity.div_ceil(GROUP_SLOTS);
    let bytes = groups
        .checked_mul(std::mem::size_of::<Group>())
        .filter(|&b| b <= isize::MAX as usize)
        .ok_or_else(|| {
            PyValueError::new_err(format!(
                "capacity {capacity} is too large: the table could never be allocated"
            ))
        })?;
    let mut storage: Vec<Group> = Vec::new();
    storage.try_reserve_exact(groups).map_err(|_| {
        PyMemoryError::new_err(format!(
            "cannot allocate a table of {capacity} keys ({bytes} bytes)"
        ))
    })?;
    storage.extend((0..groups).map(|_| Group::new()));
    KeyedLimiter::with_storage(
        quota,
        storage.into_boxed_slice(),
        DefaultHashBuilder::default(),
        clock,
    )
    .map(|t| t.with_policy(policy))
    .map_err(errors::config)
}

/// The keyed table of `spec`'s kind. (The one `match` over kinds left in the
/// bindings: the core's type-erased keyed table, `AnyKeyed`, replaces it.)
fn any_keyed(
    spec: &Spec,
    capacity: usize,
    clock: PyClock,
    policy: FullPolicy,
) -> PyResult<AnyKeyed> {
    let q = spec.quotas()[0];
    Ok(match spec.kind() {
        Kind::TokenBucket => AnyKeyed::TokenBucket(table(q, capacity, clock, policy)?),
        Kind::LeakyBucket => AnyKeyed::LeakyBucket(table(q, capacity, clock, policy)?),
        Kind::FixedWindow => AnyKeyed::FixedWindow(table(q, capacity, clock, policy)?),
        Kind::SlidingWindow => AnyKeyed::SlidingWindow(table(q, capacity, clock, policy)?),
        kind => {
            return Err(PyValueError::new_err(format!(
                "{kind} has no keyed form: use one of {}",
                keyed_names()
            )))
        }
    })
}

/// The kinds with a keyed form, from the core's list.
fn keyed_names() -> String {
    Kind::ALL
        .iter()
        .filter(|k| k.caps().keyed)
        .map(|k| format!("{:?}", k.name()))
        .collect::<Vec<_>>()
        .join(", ")
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
    inner: AnyKeyed,
    spec: Spec,
}

#[pymethods]
impl PyKeyedLimiter {
    #[new]
    #[pyo3(signature = (limit = None, *, capacity = None, algorithm = "token_bucket", policy = "evict_stalest", amount = None, period = None, burst = None, clock = None))]
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
    ) -> PyResult<Self> {
        let kind: Kind = algorithm
            .parse()
            .map_err(|e| PyValueError::new_err(format!("unknown algorithm {algorithm:?}: {e}")))?;
        let spec = spec_of(kind, limit, amount, period, burst)?;
        if spec.quotas().len() != 1 {
            return Err(PyValueError::new_err(format!(
                "KeyedLimiter takes one limit, not {}",
                spec.quotas().len()
            )));
        }
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
        let inner = any_keyed(&spec, capacity, PyClock::from_arg(clock), policy)?;
        Ok(Self { inner, spec })
    }

    /// Takes `n` units for `key`.
    #[pyo3(signature = (key, n = Cost::ONE))]
    #[inline]
    fn check(&self, key: &Bound<'_, PyAny>, n: Cost) -> PyResult<PyDecision> {
        let n = n.0;
        match with_key(key, |k| self.inner.check_n(k, n))? {
            Ok(d) => Ok(d.into()),
            Err(e) => Err(errors::capacity(e)),
        }
    }

    /// What `check(key, n)` would answer, taking nothing (and placing no key).
    #[pyo3(signature = (key, n = Cost::ONE))]
    fn peek(&self, key: &Bound<'_, PyAny>, n: Cost) -> PyResult<PyDecision> {
        let n = n.0;
        with_key(key, |k| self.inner.peek_n(k, n))?
            .map(Into::into)
            .map_err(errors::capacity)
    }

    /// `check(key, n)` as a bool.
    #[pyo3(signature = (key, n = Cost::ONE))]
    fn try_acquire(&self, key: &Bound<'_, PyAny>, n: Cost) -> PyResult<bool> {
        let n = n.0;
        with_key(key, |k| self.inner.check_n(k, n))?
            .map(|d| d.allowed)
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
            wait::blocking(py, timeout, || self.inner.check_n(k, n))
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

    /// Forgets every key.
    fn clear(&self) {
        keyed!(&self.inner, t => t.clear())
    }

    /// Keys holding live state now (a scan of the whole table).
    fn __len__(&self) -> usize {
        keyed!(&self.inner, t => t.len())
    }

    /// The table's event counters.
    #[getter]
    fn stats(&self) -> PyKeyedStats {
        keyed!(&self.inner, t => t.stats()).into()
    }

    /// Keys the table can hold at once (the requested capacity rounded up to 8).
    #[getter]
    fn capacity(&self) -> usize {
        keyed!(&self.inner, t => t.capacity())
    }

    /// The full-table policy.
    #[getter]
    fn policy(&self) -> &'static str {
        policy_name(keyed!(&self.inner, t => t.policy()))
    }

    /// The algorithm every key runs.
    #[getter]
    fn algorithm(&self) -> &'static str {
        self.spec.kind().name()
    }

    /// The most units one request can take.
    #[getter]
    fn limit(&self) -> u64 {
        self.spec.capacity()
    }

    /// The limit, as a one-element tuple.
    #[getter]
    fn quotas<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        quota::to_tuple(py, self.spec.quotas())
    }

    fn __repr__(&self) -> String {
        format!(
            "KeyedLimiter({:?}, capacity={}, algorithm={:?}, policy={:?})",
            describe_all(self.spec.quotas()),
            self.capacity(),
            self.spec.kind().name(),
            self.policy()
        )
    }
}
