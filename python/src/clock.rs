//! The clock a Python limiter reads: the core's TSC clock, or a `ManualClock` that
//! tests and simulations move by hand.

use pyo3::prelude::*;
use sluicegate::{Clock, ManualClock, QuantaClock};

use crate::args::{opt_uint, uint};

/// A clock that only moves when told to, for tests and simulations.
///
/// >>> clock = ManualClock()
/// >>> tb = TokenBucket("1/second", clock=clock)
/// >>> tb.try_acquire(), tb.try_acquire()
/// (True, False)
/// >>> clock.advance(1.0)
/// >>> tb.try_acquire()
/// True
#[pyclass(frozen, name = "ManualClock", module = "sluicegate._sluicegate")]
pub struct PyManualClock {
    inner: ManualClock,
}

#[pymethods]
impl PyManualClock {
    #[new]
    #[pyo3(signature = (now_ns = None))]
    fn new(now_ns: Option<&Bound<'_, PyAny>>) -> PyResult<Self> {
        Ok(Self {
            inner: ManualClock::new(opt_uint(now_ns, "now_ns")?.unwrap_or(0)),
        })
    }

    /// The time in nanoseconds.
    fn now_ns(&self) -> u64 {
        self.inner.now()
    }

    /// Sets the time in nanoseconds (backwards too: limiters treat that as no time passing).
    fn set_ns(&self, now_ns: &Bound<'_, PyAny>) -> PyResult<()> {
        self.inner.set(uint(now_ns, "now_ns")?);
        Ok(())
    }

    /// Moves the time forwards by `ns` nanoseconds.
    fn advance_ns(&self, ns: &Bound<'_, PyAny>) -> PyResult<()> {
        self.inner.advance(uint(ns, "ns")?);
        Ok(())
    }

    /// Moves the time forwards by `seconds` (rounded to the nearest nanosecond).
    fn advance(&self, seconds: f64) -> PyResult<()> {
        if !(seconds.is_finite() && seconds >= 0.0) {
            return Err(pyo3::exceptions::PyValueError::new_err(
                "seconds must be a finite number >= 0",
            ));
        }
        self.inner.advance((seconds * 1e9).round() as u64);
        Ok(())
    }

    fn __repr__(&self) -> String {
        format!("ManualClock(now_ns={})", self.inner.now())
    }
}

/// The time source of one Python limiter.
pub enum PyClock {
    /// The default: the core's TSC clock.
    Quanta(QuantaClock),
    /// A `ManualClock` shared with the Python caller.
    Manual(Py<PyManualClock>),
}

impl PyClock {
    /// The default clock, or the caller's manual one.
    pub fn from_arg(clock: Option<Py<PyManualClock>>) -> Self {
        match clock {
            Some(c) => Self::Manual(c),
            None => Self::Quanta(QuantaClock::default()),
        }
    }
}

impl Clock for PyClock {
    #[inline]
    fn now(&self) -> u64 {
        match self {
            Self::Quanta(c) => c.now(),
            Self::Manual(c) => c.get().inner.now(),
        }
    }
}
