//! The local limiters. Every class but the shaper is a subclass of one base,
//! `_Limiter`, holding the core's type-erased [`AnyLimiter`] built from a validated
//! [`Spec`]: the methods (`check`, `peek`, `try_acquire`, `acquire`,
//! `acquire_async`, `limit`, `quotas`) are written once here, and a class only
//! says which [`Kind`] it builds. Several limits (`"1/s; 100/h"`) are checked
//! all-or-nothing; the bounds (how many limits, how many stripes) are the core's.

use pyo3::prelude::*;
use pyo3::types::PyTuple;
use std::path::PathBuf;

use sluicegate::{AnyLimiter, InsufficientCapacity, Kind, Outcome, Spec};
use sluicegate_shm::SharedLimiter;

use crate::args::{size, Cost};
use crate::clock::{PyClock, PyManualClock};
use crate::decision::{DecisionCache, PyDecision};
use crate::quota::{self, describe_all};
use crate::{errors, wait};

/// The spec a constructor's arguments describe, validated by the core.
pub fn spec_of(
    kind: Kind,
    limit: Option<&Bound<'_, PyAny>>,
    amount: Option<&Bound<'_, PyAny>>,
    period: Option<&Bound<'_, PyAny>>,
    burst: Option<&Bound<'_, PyAny>>,
) -> PyResult<Spec> {
    let quotas = quota::from_args(limit, amount, period, burst)?;
    Spec::new(kind, &quotas).map_err(errors::spec)
}

/// What every local limiter but the shaper does, over one [`AnyLimiter`].
#[pyclass(subclass, frozen, name = "_Limiter", module = "sluicegate._sluicegate")]
pub struct PyLimiter {
    inner: One,
    last: DecisionCache,
}

/// Where a limiter's state lives: this process, or a shared-memory region
/// every worker process maps (`shared=`).
// The local limiter inline: boxing it would add a pointer chase to every check
// of the common case to save bytes of a handful of objects.
#[allow(clippy::large_enum_variant)]
enum One {
    Local(AnyLimiter<PyClock>),
    Shared(SharedLimiter),
}

impl One {
    #[inline]
    fn check_n(&self, n: u64) -> Result<Outcome, InsufficientCapacity> {
        match self {
            One::Local(l) => l.check_n(n),
            One::Shared(l) => l.check_n_at(n, sluicegate_shm::now()),
        }
    }

    fn peek_n(&self, n: u64) -> Result<Outcome, InsufficientCapacity> {
        match self {
            One::Local(l) => l.peek_n(n),
            One::Shared(l) => l.peek_n_at(n, sluicegate_shm::now()),
        }
    }

    fn spec(&self) -> Spec {
        match self {
            One::Local(l) => l.spec(),
            One::Shared(l) => l.spec(),
        }
    }
}

impl PyLimiter {
    fn new(
        spec: &Spec,
        clock: Option<Py<PyManualClock>>,
        shared: Option<PathBuf>,
    ) -> PyResult<Self> {
        let inner = match shared {
            None => One::Local(
                AnyLimiter::with_clock(spec, PyClock::from_arg(clock)).map_err(errors::spec)?,
            ),
            Some(_) if clock.is_some() => return Err(crate::shared::clock_and_shared()),
            Some(name) => One::Shared(
                crate::shared::region(&name)?
                    .limiter(spec)
                    .map_err(crate::shared::error)?,
            ),
        };
        Ok(Self {
            inner,
            last: DecisionCache::default(),
        })
    }

    fn of(inner: AnyLimiter<PyClock>) -> Self {
        Self {
            inner: One::Local(inner),
            last: DecisionCache::default(),
        }
    }

    #[inline]
    fn run(&self, n: Cost) -> PyResult<Outcome> {
        self.inner.check_n(n.0).map_err(errors::capacity)
    }
}

#[pymethods]
impl PyLimiter {
    /// Takes `n` units if every limit allows (all-or-nothing); `n=0` only looks.
    #[pyo3(signature = (n = Cost::ONE))]
    #[inline]
    fn check(&self, py: Python<'_>, n: Cost) -> PyResult<Py<PyDecision>> {
        self.last.object(py, self.run(n)?.decision, n.0)
    }

    /// What `check(n)` would answer, taking nothing.
    #[pyo3(signature = (n = Cost::ONE))]
    fn peek(&self, n: Cost) -> PyResult<PyDecision> {
        self.inner
            .peek_n(n.0)
            .map(|o| o.decision.into())
            .map_err(errors::capacity)
    }

    /// `check(n)` as a bool.
    #[pyo3(signature = (n = Cost::ONE))]
    fn try_acquire(&self, n: Cost) -> PyResult<bool> {
        self.run(n).map(|o| o.decision.allowed)
    }

    /// Blocks (with the GIL released) until `n` units are taken, or raises
    /// `AcquireTimeout` once waiting would pass `timeout` seconds.
    #[pyo3(signature = (n = Cost::ONE, timeout = None))]
    fn acquire(&self, py: Python<'_>, n: Cost, timeout: Option<f64>) -> PyResult<PyDecision> {
        wait::blocking(py, timeout, || self.inner.check_n(n.0).map(|o| o.decision))
    }

    /// `await`s until `n` units are taken, sleeping with `asyncio.sleep`.
    #[pyo3(signature = (n = Cost::ONE, timeout = None))]
    fn acquire_async<'py>(
        slf: &Bound<'py, Self>,
        n: Cost,
        timeout: Option<f64>,
    ) -> PyResult<Bound<'py, PyAny>> {
        wait::deadline(timeout)?;
        wait::coroutine(slf.py(), "acquire", (slf.getattr("check")?, n.0, timeout))
    }

    /// The most units one request can take (the smallest burst or limit); a
    /// larger cost raises `CapacityError`, in every class.
    #[getter]
    fn limit(&self) -> u64 {
        self.inner.spec().capacity()
    }

    /// The limits, in the order given.
    #[getter]
    fn quotas<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        quota::to_tuple(py, self.inner.spec().quotas())
    }

    /// The algorithm's canonical name (`sluicegate` uses the same in every language).
    #[getter]
    fn algorithm(&self) -> &'static str {
        self.inner.spec().kind().name()
    }

    fn __repr__(slf: &Bound<'_, Self>) -> PyResult<String> {
        Ok(format!(
            "{}({:?})",
            slf.get_type().name()?,
            describe_all(slf.get().inner.spec().quotas())
        ))
    }
}

/// The classes that differ only by their algorithm: each is its [`Kind`] and a
/// constructor; everything else is `_Limiter`'s.
macro_rules! local_class {
    ($ty:ident, $name:literal, $kind:expr, $doc:literal) => {
        #[doc = $doc]
        #[pyclass(frozen, extends = PyLimiter, name = $name, module = "sluicegate._sluicegate")]
        pub struct $ty;

        #[pymethods]
        impl $ty {
            #[new]
            #[pyo3(signature = (limit = None, *, amount = None, period = None, burst = None, clock = None, shared = None))]
            fn new(
                limit: Option<&Bound<'_, PyAny>>,
                amount: Option<&Bound<'_, PyAny>>,
                period: Option<&Bound<'_, PyAny>>,
                burst: Option<&Bound<'_, PyAny>>,
                clock: Option<Py<PyManualClock>>,
                shared: Option<PathBuf>,
            ) -> PyResult<PyClassInitializer<Self>> {
                let spec = spec_of($kind, limit, amount, period, burst)?;
                let base = PyLimiter::new(&spec, clock, shared)?;
                Ok(PyClassInitializer::from(base).add_subclass($ty))
            }
        }
    };
}

local_class!(
    PyTokenBucket,
    "TokenBucket",
    Kind::TokenBucket,
    "GCRA token bucket."
);
local_class!(
    PyLeakyBucket,
    "LeakyBucket",
    Kind::LeakyBucket,
    "Leaky bucket (meter)."
);
local_class!(
    PyFixedWindow,
    "FixedWindow",
    Kind::FixedWindow,
    "Fixed window counter."
);
local_class!(
    PySlidingWindow,
    "SlidingWindow",
    Kind::SlidingWindow,
    "Sliding window counter."
);
local_class!(
    PySlidingLog,
    "SlidingLog",
    Kind::SlidingLog,
    "The exact sliding-window log: 8 bytes of memory per unit of the limit."
);

/// A token bucket split into `stripes` cache-padded buckets (1 to
/// `Spec::MAX_STRIPES`, at most the burst; by default as many as fit, up to 8)
/// that borrow from each other, so the whole burst stays usable from any thread.
#[pyclass(frozen, extends = PyLimiter, name = "StripedTokenBucket", module = "sluicegate._sluicegate")]
pub struct PyStriped {
    stripes: usize,
}

#[pymethods]
impl PyStriped {
    #[new]
    #[pyo3(signature = (limit = None, *, stripes = None, amount = None, period = None, burst = None, clock = None, shared = None))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        limit: Option<&Bound<'_, PyAny>>,
        stripes: Option<&Bound<'_, PyAny>>,
        amount: Option<&Bound<'_, PyAny>>,
        period: Option<&Bound<'_, PyAny>>,
        burst: Option<&Bound<'_, PyAny>>,
        clock: Option<Py<PyManualClock>>,
        shared: Option<PathBuf>,
    ) -> PyResult<PyClassInitializer<Self>> {
        let spec = spec_of(Kind::TokenBucket, limit, amount, period, burst)?;
        let stripes = match stripes {
            Some(s) => size(s, "stripes")?,
            // By default the largest power of two the burst allows, up to 8.
            None => 1 << spec.capacity().clamp(1, 8).ilog2(),
        };
        if shared.is_some() {
            // Stripes are one process's threads' own; in a region the bucket is
            // one word every process checks (the stripe count is still checked).
            AnyLimiter::striped(&spec, stripes, ()).map_err(errors::spec)?;
            let base = PyLimiter::new(&spec, clock, shared)?;
            return Ok(PyClassInitializer::from(base).add_subclass(Self { stripes: 1 }));
        }
        let inner =
            AnyLimiter::striped(&spec, stripes, PyClock::from_arg(clock)).map_err(errors::spec)?;
        Ok(PyClassInitializer::from(PyLimiter::of(inner)).add_subclass(Self { stripes }))
    }

    /// The number of stripes.
    #[getter]
    fn stripes(&self) -> usize {
        self.stripes
    }

    fn __repr__(slf: &Bound<'_, Self>) -> String {
        let base = slf.as_super().get();
        format!(
            "StripedTokenBucket({:?}, stripes={})",
            describe_all(base.inner.spec().quotas()),
            slf.get().stripes
        )
    }
}
