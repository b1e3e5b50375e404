//! `sluicegate._sluicegate`: the extension module behind the `sluicegate` Python
//! package. Every class is frozen: its state is the core's atomic words, so one
//! limiter is shared by any number of threads without a lock, and the GIL is
//! released only where a call sleeps (`acquire`).

mod aio;
mod args;
mod clock;
mod decision;
mod errors;
mod keyed;
mod limiters;
mod policy;
mod quota;
mod redis;
mod rules;
mod shaper;
mod shared;
mod wait;

use pyo3::prelude::*;

#[pymodule]
fn _sluicegate(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add_class::<clock::PyManualClock>()?;
    m.add_class::<decision::PyDecision>()?;
    m.add_class::<decision::PyReservation>()?;
    m.add_class::<quota::PyQuota>()?;
    m.add_class::<limiters::PyLimiter>()?;
    m.add_class::<limiters::PyTokenBucket>()?;
    m.add_class::<limiters::PyLeakyBucket>()?;
    m.add_class::<limiters::PyFixedWindow>()?;
    m.add_class::<limiters::PySlidingWindow>()?;
    m.add_class::<limiters::PySlidingLog>()?;
    m.add_class::<shaper::PyShaper>()?;
    m.add_class::<limiters::PyStriped>()?;
    m.add_class::<keyed::PyKeyedLimiter>()?;
    m.add_class::<keyed::PyKeyedStats>()?;
    m.add_class::<policy::PyPolicy>()?;
    m.add_class::<policy::PyPendingCheck>()?;
    m.add_class::<rules::PyRule>()?;
    m.add_class::<policy::PyPolicyDecision>()?;
    m.add_class::<policy::PyRuleDecision>()?;
    m.add_class::<redis::PyRedisOptions>()?;
    m.add_class::<redis::PyRedisBase>()?;
    m.add_class::<redis::PyRedisLimiter>()?;
    m.add_class::<redis::PyRedisKeyedLimiter>()?;
    m.add_function(wrap_pyfunction!(shared::unlink, m)?)?;
    m.add_function(wrap_pyfunction!(shared::open, m)?)?;
    Ok(())
}
