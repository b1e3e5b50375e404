//! Rust errors to Python exceptions: `ValueError` for configuration, the
//! `SluicegateError` hierarchy (defined in `sluicegate/_errors.py`, so each class
//! carries its attributes and docs in plain Python) for everything else.

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use sluicegate::{ConfigError, Decision, InsufficientCapacity};

use crate::decision::PyDecision;

pyo3::import_exception!(sluicegate._errors, CapacityError);
pyo3::import_exception!(sluicegate._errors, AcquireTimeout);

/// A bad quota or option: always a `ValueError`, with the core's message (it names
/// the field and, for bounds, the largest accepted value).
pub fn config(e: ConfigError) -> PyErr {
    PyValueError::new_err(e.to_string())
}

/// A cost above what the limiter can ever admit at once.
pub fn capacity(e: InsufficientCapacity) -> PyErr {
    CapacityError::new_err((e.to_string(), e.requested, e.capacity))
}

/// A blocking or async wait that gave up; carries the last decision.
pub fn timeout(d: Decision) -> PyErr {
    let msg = if d.retry_after_ns == u64::MAX {
        "timed out waiting for rate-limit capacity".to_owned()
    } else {
        format!(
            "timed out waiting for rate-limit capacity (next chance in {:.3} s)",
            d.retry_after_ns as f64 / 1e9
        )
    };
    AcquireTimeout::new_err((msg, PyDecision::from(d)))
}
