//! Waiting for capacity: blocking with the GIL released while asleep, and the
//! hand-off to the asyncio helper (`sluicegate/_aio.py`) for `acquire_async`.

use std::time::{Duration, Instant};

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use sluicegate::{Decision, InsufficientCapacity};

use crate::decision::PyDecision;
use crate::errors;

/// The longest one sleep lasts before the loop looks at signals (Ctrl-C) again.
const SLICE: Duration = Duration::from_millis(50);

/// The deadline of a `timeout` in seconds (`None`: wait as long as it takes).
pub fn deadline(timeout: Option<f64>) -> PyResult<Option<Instant>> {
    match timeout {
        None => Ok(None),
        Some(t) if t.is_nan() || t < 0.0 => Err(PyValueError::new_err(
            "timeout must be a number >= 0, or None to wait indefinitely",
        )),
        Some(t) if t.is_infinite() => Ok(None),
        Some(t) => Ok(Instant::now().checked_add(Duration::from_secs_f64(t.min(1e12)))),
    }
}

/// Sleeps `pause` with the GIL released, in slices, checking for signals between
/// them so a `KeyboardInterrupt` is not held up by a long wait.
pub fn sleep(py: Python<'_>, pause: Duration) -> PyResult<()> {
    let end = Instant::now() + pause;
    loop {
        let left = end.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Ok(());
        }
        py.detach(|| std::thread::sleep(left.min(SLICE)));
        py.check_signals()?;
    }
}

/// Retries `attempt` until it admits, sleeping each denial's `retry_after`; gives
/// up with `AcquireTimeout` as soon as the next sleep would pass the deadline
/// (without sleeping for nothing), like the core's `Wait::wait_n`.
pub fn blocking(
    py: Python<'_>,
    timeout: Option<f64>,
    mut attempt: impl FnMut() -> Result<Decision, InsufficientCapacity>,
) -> PyResult<PyDecision> {
    let deadline = deadline(timeout)?;
    loop {
        let d = attempt().map_err(errors::capacity)?;
        if d.allowed {
            return Ok(d.into());
        }
        // Never spin: a lost race (0 ns retry) still waits a microsecond.
        let pause = Duration::from_nanos(d.retry_after_ns).max(Duration::from_micros(1));
        if let Some(deadline) = deadline {
            if Instant::now()
                .checked_add(pause)
                .is_none_or(|t| t > deadline)
            {
                return Err(errors::timeout(d));
            }
        }
        sleep(py, pause)?;
    }
}

/// Calls `sluicegate._aio.<name>(*args)`: the coroutine that waits with
/// `asyncio.sleep`, so the event loop is never blocked.
pub fn coroutine<'py>(
    py: Python<'py>,
    name: &'static str,
    args: impl pyo3::call::PyCallArgs<'py>,
) -> PyResult<Bound<'py, PyAny>> {
    static MODULE: PyOnceLock<Py<PyModule>> = PyOnceLock::new();
    let module = MODULE.get_or_try_init(py, || py.import("sluicegate._aio").map(Bound::unbind))?;
    module.bind(py).getattr(name)?.call1(args)
}
