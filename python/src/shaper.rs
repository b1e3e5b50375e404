//! The shaper: the leaky bucket that delays instead of denying. In this
//! process it keeps the core's concrete `Shaper` rather than an `AnyLimiter`: a
//! granted reservation can be given back (`cancel`), which the concrete shaper
//! offers. In a shared region (`shared=`) it is the region's single limiter of
//! the same spec, and a cancel is the exact undo of the reservation's receipt:
//! the same rule (only the latest reservation, of any process, comes back). Its
//! spec is built and validated by the core (`Spec` with `Kind::Shaper`).

use std::path::PathBuf;

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyTuple;
use sluicegate::{Clock, Decision, InsufficientCapacity, Kind, Receipt, Spec};
use sluicegate_shm::SharedLimiter;

use crate::args::Cost;
use crate::clock::{PyClock, PyManualClock};
use crate::decision::{Held, PyDecision, PyReservation};
use crate::limiters::spec_of;
use crate::quota::{self, describe_all};
use crate::{errors, wait};

/// The leaky bucket as a shaper: requests are spaced out by delaying them.
///
/// `limit` is the burst plus what fits in `max_delay`: a cost up to it can be
/// scheduled (with a delay), a larger one never can and raises `CapacityError` —
/// the rule of every class (`limit` is the largest admissible cost), which is why
/// `Shaper("10/s").reserve(11)` is granted (10 now, the 11th 0.1 s later within the
/// default `max_delay=1.0`) while `TokenBucket("10/s").check(11)` raises.
#[pyclass(frozen, name = "Shaper", module = "sluicegate._sluicegate")]
pub struct PyShaper {
    inner: Schedule,
    spec: Spec,
    /// The region's file, for a shaper in shared memory.
    shared: Option<PathBuf>,
}

/// Where the schedule is: this process, or a shared region every worker maps.
enum Schedule {
    Local(sluicegate::Shaper<PyClock>),
    /// Boxed: the region's handle is several times the local shaper's size.
    Shared(Box<SharedLimiter>),
}

impl Schedule {
    /// Reserves `n` units now.
    fn reserve(&self, n: u64) -> Result<PyReservation, InsufficientCapacity> {
        match self {
            Schedule::Local(s) => s.reserve_n(n).map(PyReservation::new),
            Schedule::Shared(l) => {
                let mut receipt = Receipt::empty();
                let o = l.check_n_at_receipt(n, sluicegate_shm::now(), &mut receipt)?;
                Ok(PyReservation::held(
                    o.decision,
                    o.delay_ns,
                    Held::Shared(receipt),
                ))
            }
        }
    }

    /// What reserving `n` units now would answer.
    fn peek(&self, n: u64) -> Result<Decision, InsufficientCapacity> {
        match self {
            Schedule::Local(s) => s.peek_n_at(n, s.clock().now()),
            Schedule::Shared(l) => l.peek_n_at(n, sluicegate_shm::now()).map(|o| o.decision),
        }
    }

    /// Gives `held` back if it is still the latest reservation.
    fn cancel(&self, held: &mut Held) -> bool {
        match (self, held) {
            (Schedule::Local(s), Held::Local(r)) => s.cancel(r),
            (Schedule::Shared(l), Held::Shared(r)) => l.undo(r),
            // Another shaper's reservation: nothing of ours to give back.
            _ => false,
        }
    }
}

/// `max_delay` in seconds as nanoseconds.
fn delay_ns(max_delay: f64) -> PyResult<u64> {
    if !(max_delay.is_finite() && max_delay >= 0.0) {
        return Err(PyValueError::new_err(
            "max_delay must be a finite number of seconds >= 0",
        ));
    }
    Ok((max_delay * 1e9).round().min(u64::MAX as f64) as u64)
}

#[pymethods]
impl PyShaper {
    #[new]
    #[pyo3(signature = (limit = None, *, max_delay = 1.0, amount = None, period = None, burst = None, clock = None, shared = None))]
    #[allow(clippy::too_many_arguments, reason = "the Python signature")]
    fn new(
        limit: Option<&Bound<'_, PyAny>>,
        max_delay: f64,
        amount: Option<&Bound<'_, PyAny>>,
        period: Option<&Bound<'_, PyAny>>,
        burst: Option<&Bound<'_, PyAny>>,
        clock: Option<Py<PyManualClock>>,
        shared: Option<PathBuf>,
    ) -> PyResult<Self> {
        let spec = spec_of(Kind::Shaper, limit, amount, period, burst)?
            .with_max_delay_ns(delay_ns(max_delay)?)
            .map_err(errors::spec)?;
        let inner = match &shared {
            None => Schedule::Local(
                sluicegate::Shaper::with_clock(
                    spec.quotas()[0],
                    spec.max_delay_ns(),
                    PyClock::from_arg(clock),
                )
                .map_err(errors::config)?,
            ),
            Some(_) if clock.is_some() => return Err(crate::shared::clock_and_shared()),
            Some(name) => Schedule::Shared(Box::new(
                crate::shared::region(name)?
                    .limiter(&spec)
                    .map_err(crate::shared::error)?,
            )),
        };
        Ok(Self {
            inner,
            spec,
            shared: shared.map(sluicegate_shm::path_of),
        })
    }

    /// Schedules `n` units: a granted reservation says how long to wait first.
    #[pyo3(signature = (n = Cost::ONE))]
    fn reserve(&self, n: Cost) -> PyResult<PyReservation> {
        self.inner.reserve(n.0).map_err(errors::capacity)
    }

    /// Gives a granted reservation back, if it is still the latest one (see the
    /// core's shaper docs: a later reservation was promised a slot after it);
    /// with `shared=`, the latest of every process's.
    fn cancel(&self, reservation: &PyReservation) -> bool {
        let mut guard = match reservation.inner.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        };
        let cancelled = guard.as_mut().is_some_and(|r| self.inner.cancel(r));
        if cancelled {
            *guard = None;
        }
        cancelled
    }

    /// Whether `n` units could be scheduled now, scheduling nothing.
    #[pyo3(signature = (n = Cost::ONE))]
    fn peek(&self, n: Cost) -> PyResult<PyDecision> {
        self.inner
            .peek(n.0)
            .map(Into::into)
            .map_err(errors::capacity)
    }

    /// Reserves `n` units and sleeps (GIL released) until their turn; waits for
    /// room first when the queue is full, up to `timeout` seconds in all.
    #[pyo3(signature = (n = Cost::ONE, timeout = None))]
    fn acquire(&self, py: Python<'_>, n: Cost, timeout: Option<f64>) -> PyResult<PyDecision> {
        let mut delay = 0;
        let d = wait::blocking(py, timeout, || {
            let r = self.inner.reserve(n.0)?;
            delay = r.delay_ns;
            Ok(r.decision)
        })?;
        wait::sleep(py, std::time::Duration::from_nanos(delay))?;
        Ok(d)
    }

    /// `await`s a reservation of `n` units and then its delay, with `asyncio.sleep`.
    #[pyo3(signature = (n = Cost::ONE, timeout = None))]
    fn acquire_async<'py>(
        slf: &Bound<'py, Self>,
        n: Cost,
        timeout: Option<f64>,
    ) -> PyResult<Bound<'py, PyAny>> {
        wait::deadline(timeout)?;
        wait::coroutine(slf.py(), "reserve", (slf, n.0, timeout))
    }

    /// The longest delay granted, in seconds.
    #[getter]
    fn max_delay(&self) -> f64 {
        self.spec.max_delay_ns() as f64 / 1e9
    }

    /// The most units one request can take (burst plus what fits in the delay).
    #[getter]
    fn limit(&self) -> u64 {
        self.spec.capacity()
    }

    /// The limit, as a one-element tuple.
    #[getter]
    fn quotas<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        quota::to_tuple(py, self.spec.quotas())
    }

    /// `"shaper"`.
    #[getter]
    fn algorithm(&self) -> &'static str {
        Kind::Shaper.name()
    }

    /// The shared region's path (`shared=`), or `None` for state in this process.
    #[getter]
    fn shared(&self) -> Option<String> {
        self.shared
            .as_ref()
            .map(|p| p.to_string_lossy().into_owned())
    }

    fn __repr__(&self) -> String {
        format!(
            "Shaper({:?}, max_delay={:?})",
            describe_all(self.spec.quotas()),
            self.spec.max_delay_ns() as f64 / 1e9
        )
    }
}
