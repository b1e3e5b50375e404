//! One Python class per algorithm. The single-word algorithms take one limit or
//! several (checked all-or-nothing by the core's compound limiter); the sliding
//! log, the shaper and the striped bucket take one.

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyTuple;
use sluicegate::{
    Algorithm, Clock, Compound, ConfigError, Decision, Fixed, Gcra, InsufficientCapacity, Leaky,
    Limiter, Quota, Sliding, Striped,
};

use crate::clock::{PyClock, PyManualClock};
use crate::decision::{PyDecision, PyReservation};
use crate::quota::{self, describe_all};
use crate::{errors, wait};

/// A cost from Python: a whole number ≥ 0 (0 is a peek).
#[inline]
pub fn cost(n: i64) -> PyResult<u64> {
    u64::try_from(n).map_err(|_| PyValueError::new_err("cost n must be a whole number >= 0"))
}

/// One limit, or 2 to 8 of them checked together.
pub enum Multi<A: Algorithm> {
    One(Limiter<A, PyClock>),
    N2(Compound<A, 2, PyClock>),
    N3(Compound<A, 3, PyClock>),
    N4(Compound<A, 4, PyClock>),
    N5(Compound<A, 5, PyClock>),
    N6(Compound<A, 6, PyClock>),
    N7(Compound<A, 7, PyClock>),
    N8(Compound<A, 8, PyClock>),
}

macro_rules! compound {
    ($self:expr, $l:ident => $e:expr, $one:ident => $one_e:expr) => {
        match $self {
            Multi::One($one) => $one_e,
            Multi::N2($l) => $e,
            Multi::N3($l) => $e,
            Multi::N4($l) => $e,
            Multi::N5($l) => $e,
            Multi::N6($l) => $e,
            Multi::N7($l) => $e,
            Multi::N8($l) => $e,
        }
    };
}

fn array<const N: usize>(q: &[Quota]) -> [Quota; N] {
    core::array::from_fn(|i| q[i])
}

impl<A: Algorithm> Multi<A> {
    fn new(q: &[Quota], clock: PyClock) -> Result<Self, ConfigError> {
        Ok(match q.len() {
            1 => Self::One(Limiter::from_params(A::params(&q[0])?, clock)),
            2 => Self::N2(Compound::with_clock(array(q), clock)?),
            3 => Self::N3(Compound::with_clock(array(q), clock)?),
            4 => Self::N4(Compound::with_clock(array(q), clock)?),
            5 => Self::N5(Compound::with_clock(array(q), clock)?),
            6 => Self::N6(Compound::with_clock(array(q), clock)?),
            7 => Self::N7(Compound::with_clock(array(q), clock)?),
            8 => Self::N8(Compound::with_clock(array(q), clock)?),
            _ => return Err(ConfigError::Zero { field: "limits" }),
        })
    }

    #[inline]
    fn check_n(&self, n: u64) -> Result<Decision, InsufficientCapacity> {
        compound!(self, c => c.check_n(n), l => l.check_n(n))
    }

    fn peek_n(&self, n: u64) -> Result<Decision, InsufficientCapacity> {
        compound!(self, c => c.peek_n_at(n, c.clock().now()), l => l.peek_n(n))
    }
}

/// The smallest capacity of the limits: the most one request can ever cost.
fn capacity<A: Algorithm>(quotas: &[Quota]) -> Result<u64, ConfigError> {
    let mut cap = u64::MAX;
    for q in quotas {
        cap = cap.min(A::capacity(&A::params(q)?));
    }
    Ok(cap)
}

fn any_burst(_: &[Quota], _: &str) -> PyResult<()> {
    Ok(())
}

macro_rules! single_word {
    ($ty:ident, $name:literal, $alg:ty, $validate:path) => {
        #[pyclass(frozen, name = $name, module = "sluicegate._sluicegate")]
        pub struct $ty {
            inner: Multi<$alg>,
            quotas: Vec<Quota>,
            limit: u64,
        }

        #[pymethods]
        impl $ty {
            #[new]
            #[pyo3(signature = (limit = None, *, amount = None, period = None, burst = None, clock = None))]
            fn new(
                limit: Option<&Bound<'_, PyAny>>,
                amount: Option<u64>,
                period: Option<&Bound<'_, PyAny>>,
                burst: Option<u64>,
                clock: Option<Py<PyManualClock>>,
            ) -> PyResult<Self> {
                let quotas = quota::from_args(limit, amount, period, burst)?;
                $validate(&quotas, $name)?;
                let inner = Multi::new(&quotas, PyClock::from_arg(clock)).map_err(errors::config)?;
                let limit = capacity::<$alg>(&quotas).map_err(errors::config)?;
                Ok(Self { inner, quotas, limit })
            }

            /// Takes `n` units if every limit allows (all-or-nothing); `n=0` only looks.
            #[pyo3(signature = (n = 1))]
            #[inline]
            fn check(&self, n: i64) -> PyResult<PyDecision> {
                match self.inner.check_n(cost(n)?) {
                    Ok(d) => Ok(d.into()),
                    Err(e) => Err(errors::capacity(e)),
                }
            }

            /// What `check(n)` would answer, taking nothing.
            #[pyo3(signature = (n = 1))]
            fn peek(&self, n: i64) -> PyResult<PyDecision> {
                self.inner.peek_n(cost(n)?).map(Into::into).map_err(errors::capacity)
            }

            /// `check(n)` as a bool.
            #[pyo3(signature = (n = 1))]
            fn try_acquire(&self, n: i64) -> PyResult<bool> {
                self.inner.check_n(cost(n)?).map(|d| d.allowed).map_err(errors::capacity)
            }

            /// Blocks (with the GIL released) until `n` units are taken, or raises
            /// `AcquireTimeout` once waiting would pass `timeout` seconds.
            #[pyo3(signature = (n = 1, timeout = None))]
            fn acquire(&self, py: Python<'_>, n: i64, timeout: Option<f64>) -> PyResult<PyDecision> {
                let n = cost(n)?;
                wait::blocking(py, timeout, || self.inner.check_n(n))
            }

            /// `await`s until `n` units are taken, sleeping with `asyncio.sleep`.
            #[pyo3(signature = (n = 1, timeout = None))]
            fn acquire_async<'py>(
                slf: &Bound<'py, Self>,
                n: i64,
                timeout: Option<f64>,
            ) -> PyResult<Bound<'py, PyAny>> {
                cost(n)?;
                wait::deadline(timeout)?;
                wait::coroutine(slf.py(), "acquire", (slf.getattr("check")?, n, timeout))
            }

            /// The most units one request can take (the smallest burst or limit).
            #[getter]
            fn limit(&self) -> u64 {
                self.limit
            }

            /// The limits, in the order given.
            #[getter]
            fn quotas<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
                quota::to_tuple(py, &self.quotas)
            }

            fn __repr__(&self) -> String {
                format!(concat!($name, "({:?})"), describe_all(&self.quotas))
            }
        }
    };
}

single_word!(PyTokenBucket, "TokenBucket", Gcra, any_burst);
single_word!(PyLeakyBucket, "LeakyBucket", Leaky, any_burst);
single_word!(PyFixedWindow, "FixedWindow", Fixed, quota::no_burst);
single_word!(PySlidingWindow, "SlidingWindow", Sliding, quota::no_burst);

/// The exact sliding-window log: 8 bytes of memory per unit of the limit.
#[pyclass(frozen, name = "SlidingLog", module = "sluicegate._sluicegate")]
pub struct PySlidingLog {
    inner: sluicegate::SlidingLog<PyClock>,
    quota: Quota,
}

#[pymethods]
impl PySlidingLog {
    #[new]
    #[pyo3(signature = (limit = None, *, amount = None, period = None, clock = None))]
    fn new(
        limit: Option<&Bound<'_, PyAny>>,
        amount: Option<u64>,
        period: Option<&Bound<'_, PyAny>>,
        clock: Option<Py<PyManualClock>>,
    ) -> PyResult<Self> {
        let quotas = quota::from_args(limit, amount, period, None)?;
        quota::no_burst(&quotas, "SlidingLog")?;
        let quota = quota::one(quotas, "SlidingLog")?;
        let inner = sluicegate::SlidingLog::with_clock(quota, PyClock::from_arg(clock))
            .map_err(errors::config)?;
        Ok(Self { inner, quota })
    }

    /// Takes `n` units if fewer than `limit − n + 1` were taken in the last window.
    #[pyo3(signature = (n = 1))]
    fn check(&self, n: i64) -> PyResult<PyDecision> {
        self.inner
            .check_n(cost(n)?)
            .map(Into::into)
            .map_err(errors::capacity)
    }

    /// What `check(n)` would answer, taking nothing.
    #[pyo3(signature = (n = 1))]
    fn peek(&self, n: i64) -> PyResult<PyDecision> {
        self.inner
            .peek_n(cost(n)?)
            .map(Into::into)
            .map_err(errors::capacity)
    }

    /// `check(n)` as a bool.
    #[pyo3(signature = (n = 1))]
    fn try_acquire(&self, n: i64) -> PyResult<bool> {
        self.inner
            .check_n(cost(n)?)
            .map(|d| d.allowed)
            .map_err(errors::capacity)
    }

    /// Blocks (GIL released) until `n` units are taken; see `TokenBucket.acquire`.
    #[pyo3(signature = (n = 1, timeout = None))]
    fn acquire(&self, py: Python<'_>, n: i64, timeout: Option<f64>) -> PyResult<PyDecision> {
        let n = cost(n)?;
        wait::blocking(py, timeout, || self.inner.check_n(n))
    }

    /// `await`s until `n` units are taken; see `TokenBucket.acquire_async`.
    #[pyo3(signature = (n = 1, timeout = None))]
    fn acquire_async<'py>(
        slf: &Bound<'py, Self>,
        n: i64,
        timeout: Option<f64>,
    ) -> PyResult<Bound<'py, PyAny>> {
        cost(n)?;
        wait::deadline(timeout)?;
        wait::coroutine(slf.py(), "acquire", (slf.getattr("check")?, n, timeout))
    }

    /// The limit per window.
    #[getter]
    fn limit(&self) -> u64 {
        self.quota.amount()
    }

    /// The limit, as a one-element tuple.
    #[getter]
    fn quotas<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        quota::to_tuple(py, &[self.quota])
    }

    fn __repr__(&self) -> String {
        format!("SlidingLog({:?})", describe_all(&[self.quota]))
    }
}

/// The leaky bucket as a shaper: requests are spaced out by delaying them.
#[pyclass(frozen, name = "Shaper", module = "sluicegate._sluicegate")]
pub struct PyShaper {
    inner: sluicegate::Shaper<PyClock>,
    quota: Quota,
}

#[pymethods]
impl PyShaper {
    #[new]
    #[pyo3(signature = (limit = None, *, max_delay = 1.0, amount = None, period = None, burst = None, clock = None))]
    fn new(
        limit: Option<&Bound<'_, PyAny>>,
        max_delay: f64,
        amount: Option<u64>,
        period: Option<&Bound<'_, PyAny>>,
        burst: Option<u64>,
        clock: Option<Py<PyManualClock>>,
    ) -> PyResult<Self> {
        let quota = quota::one(quota::from_args(limit, amount, period, burst)?, "Shaper")?;
        if !(max_delay.is_finite() && max_delay >= 0.0) {
            return Err(PyValueError::new_err(
                "max_delay must be a finite number of seconds >= 0",
            ));
        }
        let max_delay_ns = (max_delay * 1e9).round().min(u64::MAX as f64) as u64;
        let inner = sluicegate::Shaper::with_clock(quota, max_delay_ns, PyClock::from_arg(clock))
            .map_err(errors::config)?;
        Ok(Self { inner, quota })
    }

    /// Schedules `n` units: a granted reservation says how long to wait first.
    #[pyo3(signature = (n = 1))]
    fn reserve(&self, n: i64) -> PyResult<PyReservation> {
        self.inner
            .reserve_n(cost(n)?)
            .map(PyReservation::new)
            .map_err(errors::capacity)
    }

    /// Gives a granted reservation back, if it is still the latest one (see the
    /// core's shaper docs: a later reservation was promised a slot after it).
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
    #[pyo3(signature = (n = 1))]
    fn peek(&self, n: i64) -> PyResult<PyDecision> {
        self.inner
            .peek_n_at(cost(n)?, self.inner.clock().now())
            .map(Into::into)
            .map_err(errors::capacity)
    }

    /// Reserves `n` units and sleeps (GIL released) until their turn; waits for
    /// room first when the queue is full, up to `timeout` seconds in all.
    #[pyo3(signature = (n = 1, timeout = None))]
    fn acquire(&self, py: Python<'_>, n: i64, timeout: Option<f64>) -> PyResult<PyDecision> {
        let n = cost(n)?;
        let mut delay = 0;
        let d = wait::blocking(py, timeout, || {
            let r = self.inner.reserve_n(n)?;
            delay = r.delay_ns();
            Ok(*r.decision())
        })?;
        wait::sleep(py, std::time::Duration::from_nanos(delay))?;
        Ok(d)
    }

    /// `await`s a reservation of `n` units and then its delay, with `asyncio.sleep`.
    #[pyo3(signature = (n = 1, timeout = None))]
    fn acquire_async<'py>(
        slf: &Bound<'py, Self>,
        n: i64,
        timeout: Option<f64>,
    ) -> PyResult<Bound<'py, PyAny>> {
        cost(n)?;
        wait::deadline(timeout)?;
        wait::coroutine(slf.py(), "reserve", (slf, n, timeout))
    }

    /// The longest delay granted, in seconds.
    #[getter]
    fn max_delay(&self) -> f64 {
        self.inner.params().max_delay_ns() as f64 / 1e9
    }

    /// The most units one request can take (burst plus what fits in the delay).
    #[getter]
    fn limit(&self) -> u64 {
        self.inner.params().capacity()
    }

    /// The limit, as a one-element tuple.
    #[getter]
    fn quotas<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        quota::to_tuple(py, &[self.quota])
    }

    fn __repr__(&self) -> String {
        format!(
            "Shaper({:?}, max_delay={:?})",
            describe_all(&[self.quota]),
            self.inner.params().max_delay_ns() as f64 / 1e9
        )
    }
}

/// A token bucket split over cache-padded stripes, for one very hot limit shared
/// by many threads (boxed: 64 padded stripes are 8 KiB).
pub enum AnyStriped {
    S1(Box<Striped<1, PyClock>>),
    S2(Box<Striped<2, PyClock>>),
    S4(Box<Striped<4, PyClock>>),
    S8(Box<Striped<8, PyClock>>),
    S16(Box<Striped<16, PyClock>>),
    S32(Box<Striped<32, PyClock>>),
    S64(Box<Striped<64, PyClock>>),
}

macro_rules! striped {
    ($self:expr, $s:ident => $e:expr) => {
        match $self {
            AnyStriped::S1($s) => $e,
            AnyStriped::S2($s) => $e,
            AnyStriped::S4($s) => $e,
            AnyStriped::S8($s) => $e,
            AnyStriped::S16($s) => $e,
            AnyStriped::S32($s) => $e,
            AnyStriped::S64($s) => $e,
        }
    };
}

/// A token bucket split into `stripes` buckets (a power of two up to 64, at most
/// the burst; by default as many as fit, up to 8) that borrow from each other, so
/// the whole burst stays usable from any thread.
#[pyclass(frozen, name = "StripedTokenBucket", module = "sluicegate._sluicegate")]
pub struct PyStriped {
    inner: AnyStriped,
    quota: Quota,
    stripes: usize,
}

#[pymethods]
impl PyStriped {
    #[new]
    #[pyo3(signature = (limit = None, *, stripes = None, amount = None, period = None, burst = None, clock = None))]
    fn new(
        limit: Option<&Bound<'_, PyAny>>,
        stripes: Option<usize>,
        amount: Option<u64>,
        period: Option<&Bound<'_, PyAny>>,
        burst: Option<u64>,
        clock: Option<Py<PyManualClock>>,
    ) -> PyResult<Self> {
        let quota = quota::one(
            quota::from_args(limit, amount, period, burst)?,
            "StripedTokenBucket",
        )?;
        // By default as many stripes as the burst allows, up to 8.
        let stripes = stripes.unwrap_or_else(|| {
            let fit = quota.burst_size().clamp(1, 8) as usize;
            1 << fit.ilog2()
        });
        let c = PyClock::from_arg(clock);
        let inner = match stripes {
            1 => Striped::with_clock(quota, c).map(|s| AnyStriped::S1(Box::new(s))),
            2 => Striped::with_clock(quota, c).map(|s| AnyStriped::S2(Box::new(s))),
            4 => Striped::with_clock(quota, c).map(|s| AnyStriped::S4(Box::new(s))),
            8 => Striped::with_clock(quota, c).map(|s| AnyStriped::S8(Box::new(s))),
            16 => Striped::with_clock(quota, c).map(|s| AnyStriped::S16(Box::new(s))),
            32 => Striped::with_clock(quota, c).map(|s| AnyStriped::S32(Box::new(s))),
            64 => Striped::with_clock(quota, c).map(|s| AnyStriped::S64(Box::new(s))),
            _ => {
                return Err(PyValueError::new_err(
                    "stripes must be a power of two from 1 to 64",
                ))
            }
        }
        .map_err(errors::config)?;
        Ok(Self {
            inner,
            quota,
            stripes,
        })
    }

    /// Takes `n` units, from this thread's stripe first.
    #[pyo3(signature = (n = 1))]
    fn check(&self, n: i64) -> PyResult<PyDecision> {
        let n = cost(n)?;
        striped!(&self.inner, s => s.check_n(n))
            .map(Into::into)
            .map_err(errors::capacity)
    }

    /// `check(n)` as a bool.
    #[pyo3(signature = (n = 1))]
    fn try_acquire(&self, n: i64) -> PyResult<bool> {
        let n = cost(n)?;
        striped!(&self.inner, s => s.check_n(n))
            .map(|d| d.allowed)
            .map_err(errors::capacity)
    }

    /// Blocks (GIL released) until `n` units are taken; see `TokenBucket.acquire`.
    #[pyo3(signature = (n = 1, timeout = None))]
    fn acquire(&self, py: Python<'_>, n: i64, timeout: Option<f64>) -> PyResult<PyDecision> {
        let n = cost(n)?;
        wait::blocking(py, timeout, || striped!(&self.inner, s => s.check_n(n)))
    }

    /// `await`s until `n` units are taken; see `TokenBucket.acquire_async`.
    #[pyo3(signature = (n = 1, timeout = None))]
    fn acquire_async<'py>(
        slf: &Bound<'py, Self>,
        n: i64,
        timeout: Option<f64>,
    ) -> PyResult<Bound<'py, PyAny>> {
        cost(n)?;
        wait::deadline(timeout)?;
        wait::coroutine(slf.py(), "acquire", (slf.getattr("check")?, n, timeout))
    }

    /// The number of stripes.
    #[getter]
    fn stripes(&self) -> usize {
        self.stripes
    }

    /// The burst of the whole bucket.
    #[getter]
    fn limit(&self) -> u64 {
        self.quota.burst_size()
    }

    /// The limit, as a one-element tuple.
    #[getter]
    fn quotas<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        quota::to_tuple(py, &[self.quota])
    }

    fn __repr__(&self) -> String {
        format!(
            "StripedTokenBucket({:?}, stripes={})",
            describe_all(&[self.quota]),
            self.stripes
        )
    }
}
