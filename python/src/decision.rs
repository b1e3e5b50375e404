//! `Decision` and the shaper's `Reservation`, as frozen Python objects.

use std::sync::Mutex;

use pyo3::prelude::*;
use sluicegate::Decision;

const NS: f64 = 1e9;

/// Nanoseconds as float seconds; "never" (`u64::MAX`) is infinity.
pub fn secs(ns: u64) -> f64 {
    if ns == u64::MAX {
        f64::INFINITY
    } else {
        ns as f64 / NS
    }
}

/// The outcome of a check: truthy when the request was admitted.
///
/// `remaining`: units that could be taken right now; `retry_after`: seconds until a
/// request of the same cost would be admitted (0.0 when allowed, `inf` when never);
/// `reset_after`: seconds until the limiter is back to full; `limit`: the most
/// units admitted at once. The `_ns` forms are exact integers.
#[pyclass(frozen, eq, hash, name = "Decision", module = "sluicegate._sluicegate")]
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct PyDecision {
    /// Whether the request was admitted.
    #[pyo3(get)]
    pub allowed: bool,
    /// Units that could be taken right now.
    #[pyo3(get)]
    pub remaining: u64,
    /// Nanoseconds until a request of the same cost would be admitted.
    #[pyo3(get)]
    pub retry_after_ns: u64,
    /// Nanoseconds until the limiter is full again.
    #[pyo3(get)]
    pub reset_after_ns: u64,
    /// The burst or limit.
    #[pyo3(get)]
    pub limit: u64,
}

/// The `Decision` object of a limiter at rest, handed out again while the answer
/// repeats. A limiter far from its limit is full at every call, so it answers
/// the same decision call after call (`n` units taken, `limit − n` remaining, the
/// same reset time), and building a fresh object was about half of a `check()`
/// (88 ns against `try_acquire`'s 45 ns, `python -m timeit` on a full bucket).
/// Only that answer is cached: any other (a bucket part-spent, a denial) changes
/// from call to call, so it is built fresh without touching the cache, and costs
/// what it did. The object is frozen, so sharing it shows only to `is`. Never
/// blocks: if another thread holds the cell, the call builds its own object.
#[derive(Default)]
pub struct DecisionCache(Mutex<Option<Py<PyDecision>>>);

impl DecisionCache {
    /// The decision `d` for a cost of `n` as a Python object.
    #[inline]
    pub fn object(&self, py: Python<'_>, d: Decision, n: u64) -> PyResult<Py<PyDecision>> {
        let d = PyDecision::from(d);
        let at_rest = d.allowed && d.remaining.checked_add(n) == Some(d.limit);
        if !at_rest {
            return Py::new(py, d);
        }
        let Ok(mut cached) = self.0.try_lock() else {
            return Py::new(py, d);
        };
        if let Some(c) = cached.as_ref() {
            if *c.get() == d {
                return Ok(c.clone_ref(py));
            }
        }
        let fresh = Py::new(py, d)?;
        *cached = Some(fresh.clone_ref(py));
        Ok(fresh)
    }
}

impl From<Decision> for PyDecision {
    #[inline]
    fn from(d: Decision) -> Self {
        Self {
            allowed: d.allowed,
            remaining: d.remaining,
            retry_after_ns: d.retry_after_ns,
            reset_after_ns: d.reset_after_ns,
            limit: d.limit,
        }
    }
}

#[pymethods]
impl PyDecision {
    #[new]
    #[pyo3(signature = (*, allowed, remaining, retry_after_ns, reset_after_ns, limit))]
    fn new(
        allowed: bool,
        remaining: u64,
        retry_after_ns: u64,
        reset_after_ns: u64,
        limit: u64,
    ) -> Self {
        Self {
            allowed,
            remaining,
            retry_after_ns,
            reset_after_ns,
            limit,
        }
    }

    /// Seconds until a request of the same cost would be admitted.
    #[getter]
    fn retry_after(&self) -> f64 {
        secs(self.retry_after_ns)
    }

    /// Seconds until the limiter is full again.
    #[getter]
    fn reset_after(&self) -> f64 {
        secs(self.reset_after_ns)
    }

    fn __bool__(&self) -> bool {
        self.allowed
    }

    fn __repr__(&self) -> String {
        format!(
            "Decision(allowed={}, remaining={}, retry_after={:?}, reset_after={:?}, limit={})",
            if self.allowed { "True" } else { "False" },
            self.remaining,
            secs(self.retry_after_ns),
            secs(self.reset_after_ns),
            self.limit
        )
    }
}

/// A shaper's reservation: truthy when granted; the caller must then wait `delay`
/// seconds before proceeding. `Shaper.cancel` gives it back (once).
#[pyclass(frozen, name = "Reservation", module = "sluicegate._sluicegate")]
pub struct PyReservation {
    pub decision: PyDecision,
    pub delay_ns: u64,
    /// The core reservation, spent by a successful cancel.
    pub inner: std::sync::Mutex<Option<sluicegate::Reservation>>,
}

impl PyReservation {
    pub fn new(r: sluicegate::Reservation) -> Self {
        Self {
            decision: (*r.decision()).into(),
            delay_ns: r.delay_ns(),
            inner: std::sync::Mutex::new(Some(r)),
        }
    }
}

#[pymethods]
impl PyReservation {
    /// Whether the request was scheduled.
    #[getter]
    fn granted(&self) -> bool {
        self.decision.allowed
    }

    /// Seconds to wait before proceeding (0.0 when refused).
    #[getter]
    fn delay(&self) -> f64 {
        secs(self.delay_ns)
    }

    /// The delay in nanoseconds.
    #[getter]
    fn delay_ns(&self) -> u64 {
        self.delay_ns
    }

    /// The decision (for a refusal: `retry_after` is when a new reservation fits).
    #[getter]
    fn decision(&self) -> PyDecision {
        self.decision
    }

    fn __bool__(&self) -> bool {
        self.decision.allowed
    }

    fn __repr__(&self) -> String {
        format!(
            "Reservation(granted={}, delay={:?})",
            if self.decision.allowed {
                "True"
            } else {
                "False"
            },
            secs(self.delay_ns)
        )
    }
}
