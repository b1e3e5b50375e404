//! Rust errors to Python exceptions: `ValueError` for configuration, `MemoryError`
//! when a table cannot be allocated, and the `SluicegateError` hierarchy (defined
//! in `sluicegate/_errors.py`, so each class carries its attributes and docs in
//! plain Python) for everything else.

use pyo3::exceptions::{PyMemoryError, PyValueError};
use pyo3::prelude::*;
use sluicegate::{ConfigError, Decision, InsufficientCapacity, SpecError};

use crate::decision::PyDecision;

pyo3::import_exception!(sluicegate._errors, CapacityError);
pyo3::import_exception!(sluicegate._errors, AcquireTimeout);
pyo3::import_exception!(sluicegate._errors, BackendError);
pyo3::import_exception!(sluicegate._errors, BackendTimeout);
pyo3::import_exception!(sluicegate._errors, CircuitOpen);
pyo3::import_exception!(sluicegate._errors, BackendDataError);
pyo3::import_exception!(sluicegate._errors, StoreUnavailable);

/// A bad quota or option: always a `ValueError`, with the core's message (it names
/// the field and, for bounds, the largest accepted value).
pub fn config(e: ConfigError) -> PyErr {
    PyValueError::new_err(e.to_string())
}

/// A spec the core refused: `ValueError` naming the field and bound, or
/// `MemoryError` when the limiter's memory could not be allocated.
pub fn spec(e: SpecError) -> PyErr {
    match e {
        SpecError::Alloc { .. } => PyMemoryError::new_err(e.to_string()),
        other => PyValueError::new_err(other.to_string()),
    }
}

/// A cost above what the limiter can ever admit at once.
pub fn capacity(e: InsufficientCapacity) -> PyErr {
    CapacityError::new_err((e.to_string(), e.requested, e.capacity))
}

/// A Redis-tier error: configuration is a `ValueError` (`MemoryError` when a
/// table could not be allocated), a cost above the limit a `CapacityError`, a
/// per-key data error (`WRONGTYPE`, a script error over the key's value) a
/// `BackendDataError`, and Redis itself failing (timeouts, the circuit breaker,
/// the connection) a `BackendError`. The message includes the cause underneath.
pub fn backend(e: sluicegate_redis::Error) -> PyErr {
    use sluicegate_redis::Error as E;
    let msg = with_causes(&e);
    match e {
        E::Capacity(c) => capacity(c),
        E::Config(c) => match c.spec_error() {
            Some(s @ SpecError::Alloc { .. }) => PyMemoryError::new_err(s.to_string()),
            _ => PyValueError::new_err(msg),
        },
        E::Timeout => BackendTimeout::new_err(msg),
        E::CircuitOpen => CircuitOpen::new_err(msg),
        E::Data(_) | E::Reply(_) => BackendDataError::new_err(msg),
        _ => BackendError::new_err(msg),
    }
}

/// A rule store's error (`Policy.from_store`): what the caller can fix (a bad
/// URL, a store kind not built in, an unknown domain, invalid rules) is a
/// `ValueError`; a store that cannot be reached or read, and no snapshot to
/// stand in, is `StoreUnavailable`.
pub fn store(e: sluicegate_policy::store::StoreError) -> PyErr {
    use sluicegate_policy::store::StoreError as E;
    let msg = with_causes(&e);
    match e {
        E::Url(_) | E::UrlParam { .. } | E::Unsupported { .. } | E::NotFound(_) | E::Invalid(_) => {
            PyValueError::new_err(msg)
        }
        _ => StoreUnavailable::new_err(msg),
    }
}

/// An error's message followed by its sources' (`a: b: c`), each once.
fn with_causes(e: &(dyn std::error::Error + 'static)) -> String {
    let mut msg = e.to_string();
    let mut next = e.source();
    while let Some(s) = next {
        let text = s.to_string();
        if !msg.contains(&text) {
            msg.push_str(": ");
            msg.push_str(&text);
        }
        next = s.source();
    }
    msg
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
