//! `Decision` and the shaper's `Reservation`, as frozen Python objects.

use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
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
///
/// Frozen to Python. The fields are atomics only so that [`DecisionCache`] can
/// rewrite an object that nothing but the cache holds (see there); every read is a
/// relaxed load, as cheap as a plain one.
#[pyclass(frozen, name = "Decision", module = "sluicegate._sluicegate")]
pub struct PyDecision {
    allowed: AtomicBool,
    remaining: AtomicU64,
    retry_after_ns: AtomicU64,
    reset_after_ns: AtomicU64,
    limit: AtomicU64,
}

impl PyDecision {
    /// The decision this object holds.
    #[inline]
    pub fn value(&self) -> Decision {
        Decision {
            allowed: self.allowed.load(Relaxed),
            remaining: self.remaining.load(Relaxed),
            retry_after_ns: self.retry_after_ns.load(Relaxed),
            reset_after_ns: self.reset_after_ns.load(Relaxed),
            limit: self.limit.load(Relaxed),
        }
    }

    /// Rewrites the object in place. Only [`DecisionCache`] calls it, on an
    /// object no one else holds.
    #[inline]
    #[cfg_attr(Py_GIL_DISABLED, allow(dead_code))]
    fn rewrite(&self, d: Decision) {
        self.allowed.store(d.allowed, Relaxed);
        self.remaining.store(d.remaining, Relaxed);
        self.retry_after_ns.store(d.retry_after_ns, Relaxed);
        self.reset_after_ns.store(d.reset_after_ns, Relaxed);
        self.limit.store(d.limit, Relaxed);
    }
}

/// The `Decision` objects a limiter's `check()` hands out again, so that most
/// calls build none (a fresh object was about half of a `check()`: 85–88 ns
/// against `try_acquire`'s 45 ns, `python -m timeit`). Two cells:
///
/// - **at rest**: a limiter far from its limit is full at every call and answers
///   the same decision call after call (`n` units taken, `limit − n` remaining,
///   the same reset time). That answer is one shared object while it repeats; the
///   object is frozen, so sharing shows only to `is`.
/// - **scratch**: any other answer (part-spent, a denial) changes from call to
///   call. When the caller has dropped the previous one, as `if lim.check():` does,
///   the cache holds the only reference, so no Python code can see the object
///   any more and it is rewritten in place and handed out again: the trick
///   CPython's `zip` and `enumerate` play with their result tuples. A `Decision`
///   takes no weak references, and every other way to reach an object (the
///   garbage collector's lists, frames, containers) holds a counted reference,
///   so the count is the whole story. An answer still held elsewhere is left
///   alone and a fresh object takes its cell. Only with the GIL: a free-threaded
///   build never recycles.
///
/// Never blocks: if another thread holds the cells, the call builds its own
/// object.
#[derive(Default)]
pub struct DecisionCache(Mutex<Cells>);

#[derive(Default)]
struct Cells {
    at_rest: Option<Py<PyDecision>>,
    scratch: Option<Py<PyDecision>>,
}

impl DecisionCache {
    /// The decision `d` for a cost of `n` as a Python object.
    #[inline]
    pub fn object(&self, py: Python<'_>, d: Decision, n: u64) -> PyResult<Py<PyDecision>> {
        let Ok(mut cells) = self.0.try_lock() else {
            return Py::new(py, PyDecision::from(d));
        };
        let at_rest = d.allowed && d.remaining.checked_add(n) == Some(d.limit);
        let cell = if at_rest {
            if let Some(c) = &cells.at_rest {
                if c.get().value() == d {
                    return Ok(c.clone_ref(py));
                }
            }
            &mut cells.at_rest
        } else {
            // Without the GIL (a free-threaded build) another thread could take
            // a reference between the count and the rewrite: no recycling there.
            #[cfg(not(Py_GIL_DISABLED))]
            if let Some(c) = &cells.scratch {
                // SAFETY: `c` is a live object (the cell owns a reference) and
                // `py` proves the GIL is held, so no other thread can change the
                // count or take a reference until we return.
                if unsafe { pyo3::ffi::Py_REFCNT(c.as_ptr()) } == 1 {
                    c.get().rewrite(d);
                    return Ok(c.clone_ref(py));
                }
            }
            &mut cells.scratch
        };
        let fresh = Py::new(py, PyDecision::from(d))?;
        *cell = Some(fresh.clone_ref(py));
        Ok(fresh)
    }
}

impl From<Decision> for PyDecision {
    #[inline]
    fn from(d: Decision) -> Self {
        Self {
            allowed: AtomicBool::new(d.allowed),
            remaining: AtomicU64::new(d.remaining),
            retry_after_ns: AtomicU64::new(d.retry_after_ns),
            reset_after_ns: AtomicU64::new(d.reset_after_ns),
            limit: AtomicU64::new(d.limit),
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
        Decision {
            allowed,
            remaining,
            retry_after_ns,
            reset_after_ns,
            limit,
        }
        .into()
    }

    /// Whether the request was admitted.
    #[getter]
    pub fn allowed(&self) -> bool {
        self.allowed.load(Relaxed)
    }

    /// Units that could be taken right now.
    #[getter]
    fn remaining(&self) -> u64 {
        self.remaining.load(Relaxed)
    }

    /// Nanoseconds until a request of the same cost would be admitted.
    #[getter]
    fn retry_after_ns(&self) -> u64 {
        self.retry_after_ns.load(Relaxed)
    }

    /// Nanoseconds until the limiter is full again.
    #[getter]
    fn reset_after_ns(&self) -> u64 {
        self.reset_after_ns.load(Relaxed)
    }

    /// The burst or limit.
    #[getter]
    fn limit(&self) -> u64 {
        self.limit.load(Relaxed)
    }

    /// Seconds until a request of the same cost would be admitted.
    #[getter]
    fn retry_after(&self) -> f64 {
        secs(self.retry_after_ns())
    }

    /// Seconds until the limiter is full again.
    #[getter]
    fn reset_after(&self) -> f64 {
        secs(self.reset_after_ns())
    }

    fn __bool__(&self) -> bool {
        self.allowed()
    }

    /// Equal when every field is; another type compares `NotImplemented`.
    fn __eq__(&self, other: &Self) -> bool {
        self.value() == other.value()
    }

    /// The negation of `__eq__`; another type compares `NotImplemented`.
    fn __ne__(&self, other: &Self) -> bool {
        self.value() != other.value()
    }

    fn __hash__(&self) -> u64 {
        let mut h = DefaultHasher::new();
        self.value().hash(&mut h);
        h.finish()
    }

    fn __repr__(&self) -> String {
        let d = self.value();
        format!(
            "Decision(allowed={}, remaining={}, retry_after={:?}, reset_after={:?}, limit={})",
            if d.allowed { "True" } else { "False" },
            d.remaining,
            secs(d.retry_after_ns),
            secs(d.reset_after_ns),
            d.limit
        )
    }
}

/// A shaper's reservation: truthy when granted; the caller must then wait `delay`
/// seconds before proceeding. `Shaper.cancel` gives it back (once).
#[pyclass(frozen, name = "Reservation", module = "sluicegate._sluicegate")]
pub struct PyReservation {
    pub decision: Decision,
    pub delay_ns: u64,
    /// What a cancel gives back, spent by a successful cancel.
    pub inner: std::sync::Mutex<Option<Held>>,
}

/// What a reservation holds for its cancel.
pub enum Held {
    /// A shaper of this process: the core reservation.
    Local(sluicegate::Reservation),
    /// A shaper in a shared region: the receipt of its admission.
    Shared(sluicegate::Receipt),
}

impl PyReservation {
    pub fn new(r: sluicegate::Reservation) -> Self {
        Self::held(*r.decision(), r.delay_ns(), Held::Local(r))
    }

    pub fn held(decision: Decision, delay_ns: u64, held: Held) -> Self {
        Self {
            decision,
            delay_ns,
            inner: std::sync::Mutex::new(Some(held)),
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
        self.decision.into()
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
