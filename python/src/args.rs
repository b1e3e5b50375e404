//! Whole numbers from Python: the package's own `ValueError` naming the field for
//! a negative one (pyo3's conversion would raise a bare `OverflowError`), and
//! costs that saturate, so a cost beyond 64 bits is a `CapacityError` like any
//! other cost above the limit.

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyInt;

/// `obj` as a `u64`, or a `ValueError` naming `field` (negative, too large, or not an int).
pub fn uint(obj: &Bound<'_, PyAny>, field: &str) -> PyResult<u64> {
    if let Ok(v) = obj.extract::<u64>() {
        return Ok(v);
    }
    let msg = match obj.cast::<PyInt>() {
        Ok(i) if i.lt(0)? => format!("{field} must be a whole number >= 0, not {i}"),
        Ok(_) => format!("{field} is too large: the maximum is {}", u64::MAX),
        Err(_) => {
            return Err(pyo3::exceptions::PyTypeError::new_err(format!(
                "{field} must be an int, not {}",
                obj.get_type().name()?
            )))
        }
    };
    Err(PyValueError::new_err(msg))
}

/// An optional whole number (`None` stays `None`).
pub fn opt_uint(obj: Option<&Bound<'_, PyAny>>, field: &str) -> PyResult<Option<u64>> {
    obj.filter(|o| !o.is_none())
        .map(|o| uint(o, field))
        .transpose()
}

/// A `usize` field (a capacity, a count): out of range is a `ValueError`.
pub fn size(obj: &Bound<'_, PyAny>, field: &str) -> PyResult<usize> {
    usize::try_from(uint(obj, field)?)
        .map_err(|_| PyValueError::new_err(format!("{field} is too large for this platform")))
}

/// The cost of a check: a whole number >= 0 (0 only looks). Above `u64::MAX` it
/// saturates: no limiter admits that much, so the check raises `CapacityError`.
#[derive(Clone, Copy)]
pub struct Cost(pub u64);

impl Cost {
    /// The default cost of a check.
    pub const ONE: Cost = Cost(1);
}

impl<'a, 'py> FromPyObject<'a, 'py> for Cost {
    type Error = PyErr;

    #[inline]
    fn extract(obj: Borrowed<'a, 'py, PyAny>) -> PyResult<Self> {
        let obj: &Bound<'py, PyAny> = &obj;
        if let Ok(v) = obj.extract::<u64>() {
            return Ok(Cost(v));
        }
        match obj.cast::<PyInt>() {
            Ok(i) if i.lt(0)? => Err(PyValueError::new_err(format!(
                "cost n must be a whole number >= 0, not {i}"
            ))),
            Ok(_) => Ok(Cost(u64::MAX)),
            Err(_) => Err(pyo3::exceptions::PyTypeError::new_err(format!(
                "cost n must be an int, not {}",
                obj.get_type().name()?
            ))),
        }
    }
}
