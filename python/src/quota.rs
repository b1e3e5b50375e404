//! `Quota`, and turning the Python ways of saying a limit (a string, a `Quota`, a
//! list of them, or keyword arguments) into core quotas. Strings go through the
//! core's one parser (`sluicegate::parse`), the same one the C ABI uses.

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyList, PyString, PyTuple};
use sluicegate::Quota;

use crate::args::{opt_uint, uint};

/// `amount` units per `period` seconds, with up to `burst` at once (default:
/// `amount`). For the window algorithms `amount` is the limit per window of
/// `period` and `burst` does not apply.
///
/// >>> Quota(100, 60)
/// Quota(amount=100, period=60.0, burst=100)
/// >>> Quota.parse("100/s burst 200").burst
/// 200
#[pyclass(frozen, eq, hash, name = "Quota", module = "sluicegate._sluicegate")]
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct PyQuota {
    pub inner: Quota,
}

/// Nanoseconds from a period in seconds (`int`/`float`) or a `datetime.timedelta`.
pub fn period_ns(obj: &Bound<'_, PyAny>) -> PyResult<u64> {
    if let Ok(days) = obj.getattr("days") {
        // datetime.timedelta: exact integer arithmetic, no float rounding.
        let days: i128 = days.extract()?;
        let seconds: i128 = obj.getattr("seconds")?.extract()?;
        let micros: i128 = obj.getattr("microseconds")?.extract()?;
        let ns = ((days * 86_400 + seconds) * 1_000_000 + micros) * 1_000;
        return positive_ns(ns);
    }
    let secs: f64 = obj.extract().map_err(|_| {
        PyTypeError::new_err("period must be seconds (int or float) or a timedelta")
    })?;
    if !secs.is_finite() {
        return Err(PyValueError::new_err("period must be a finite number"));
    }
    let ns = (secs * 1e9).round();
    if ns >= u64::MAX as f64 {
        return Err(PyValueError::new_err(
            "period is too long: the maximum is about 584 years",
        ));
    }
    positive_ns(ns as i128)
}

fn positive_ns(ns: i128) -> PyResult<u64> {
    if ns <= 0 {
        return Err(PyValueError::new_err(
            "period must be greater than zero (at least 1 ns)",
        ));
    }
    u64::try_from(ns)
        .map_err(|_| PyValueError::new_err("period is too long: the maximum is about 584 years"))
}

/// Parses a rate string (one limit or a `;`-separated list).
pub fn parse(s: &str) -> PyResult<Vec<Quota>> {
    let quotas: Result<Vec<Quota>, _> = sluicegate::parse_quotas(s).collect();
    quotas.map_err(|e| PyValueError::new_err(format!("{e} (in {s:?})")))
}

fn push_item(item: &Bound<'_, PyAny>, out: &mut Vec<Quota>) -> PyResult<()> {
    if let Ok(s) = item.cast::<PyString>() {
        out.extend(parse(s.to_str()?)?);
    } else if let Ok(q) = item.cast::<PyQuota>() {
        out.push(q.get().inner);
    } else {
        return Err(PyTypeError::new_err(format!(
            "a limit is a rate string such as \"100/minute\" or a Quota, not {}",
            item.get_type().name()?
        )));
    }
    Ok(())
}

/// The limits a constructor was given: `limit` (a string, a `Quota` or a list of
/// them) or the keyword arguments, not both.
pub fn from_args(
    limit: Option<&Bound<'_, PyAny>>,
    amount: Option<&Bound<'_, PyAny>>,
    period: Option<&Bound<'_, PyAny>>,
    burst: Option<&Bound<'_, PyAny>>,
) -> PyResult<Vec<Quota>> {
    let (amount, burst) = (opt_uint(amount, "amount")?, opt_uint(burst, "burst")?);
    let mut out = Vec::new();
    match (limit, amount) {
        (Some(_), Some(_)) => {
            return Err(PyTypeError::new_err(
                "give the limit either as the first argument or as amount=/period=, not both",
            ))
        }
        (Some(limit), None) => {
            if period.is_some() {
                return Err(PyTypeError::new_err(
                    "period= goes with amount=, not with a limit argument",
                ));
            }
            if limit.is_instance_of::<PyList>() || limit.is_instance_of::<PyTuple>() {
                for item in limit.try_iter()? {
                    push_item(&item?, &mut out)?;
                }
            } else {
                push_item(limit, &mut out)?;
            }
        }
        (None, Some(amount)) => {
            let ns = match period {
                Some(p) => period_ns(p)?,
                None => 1_000_000_000,
            };
            out.push(Quota::from_nanos(amount, ns));
        }
        (None, None) => {
            return Err(PyTypeError::new_err(
                "missing the limit: pass a rate string such as \"100/minute\", a Quota, or amount=",
            ))
        }
    }
    if out.is_empty() {
        return Err(PyValueError::new_err("at least one limit is needed"));
    }
    if let Some(b) = burst {
        match out.as_mut_slice() {
            [only] => *only = only.burst(b),
            _ => return Err(PyValueError::new_err(
                "burst= applies to a single limit; write \"... burst N\" in each part of a list",
            )),
        }
    }
    Ok(out)
}

pub fn to_tuple<'py>(py: Python<'py>, quotas: &[Quota]) -> PyResult<Bound<'py, PyTuple>> {
    PyTuple::new(py, quotas.iter().map(|q| PyQuota { inner: *q }))
}

/// `"100/minute"`-like text for reprs, in the parser's own syntax.
pub fn describe(q: &Quota) -> String {
    const UNITS: [(u64, &str, &str); 7] = [
        (86_400_000_000_000, "day", "days"),
        (3_600_000_000_000, "hour", "hours"),
        (60_000_000_000, "minute", "minutes"),
        (1_000_000_000, "second", "seconds"),
        (1_000_000, "ms", "ms"),
        (1_000, "us", "us"),
        (1, "ns", "ns"),
    ];
    let ns = q.period_ns();
    let (per, one, many) = UNITS
        .iter()
        .find(|(u, _, _)| ns % u == 0)
        .map(|(u, one, many)| (ns / u, *one, *many))
        .unwrap_or((ns, "ns", "ns"));
    let mut s = if per == 1 {
        format!("{}/{one}", q.amount())
    } else {
        format!("{} per {per} {many}", q.amount())
    };
    if q.burst_size() != q.amount() {
        s.push_str(&format!(" burst {}", q.burst_size()));
    }
    s
}

pub fn describe_all(quotas: &[Quota]) -> String {
    quotas.iter().map(describe).collect::<Vec<_>>().join("; ")
}

#[pymethods]
impl PyQuota {
    #[new]
    #[pyo3(signature = (amount, period = None, burst = None))]
    fn new(
        amount: &Bound<'_, PyAny>,
        period: Option<&Bound<'_, PyAny>>,
        burst: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Self> {
        let amount = uint(amount, "amount")?;
        let burst = opt_uint(burst, "burst")?;
        let ns = match period {
            Some(p) => period_ns(p)?,
            None => 1_000_000_000,
        };
        let mut q = Quota::from_nanos(amount, ns);
        if let Some(b) = burst {
            q = q.burst(b);
        }
        if amount == 0 {
            return Err(PyValueError::new_err("amount must be greater than zero"));
        }
        if q.burst_size() == 0 {
            return Err(PyValueError::new_err("burst must be greater than zero"));
        }
        Ok(Self { inner: q })
    }

    /// Parses one rate string: `"100/minute"`, `"10 per 2 hours"`, `"100/s burst 200"`.
    #[staticmethod]
    fn parse(s: &str) -> PyResult<Self> {
        sluicegate::parse_quota(s)
            .map(|inner| Self { inner })
            .map_err(|e| PyValueError::new_err(format!("{e} (in {s:?})")))
    }

    /// Parses a `;`-separated list of limits: `"1/second; 100/hour"`.
    #[staticmethod]
    fn parse_many<'py>(py: Python<'py>, s: &str) -> PyResult<Bound<'py, PyTuple>> {
        to_tuple(py, &parse(s)?)
    }

    /// Units per period (the limit per window for window algorithms).
    #[getter]
    fn amount(&self) -> u64 {
        self.inner.amount()
    }

    /// The period in seconds.
    #[getter]
    fn period(&self) -> f64 {
        self.inner.period_ns() as f64 / 1e9
    }

    /// The period in nanoseconds.
    #[getter]
    fn period_ns(&self) -> u64 {
        self.inner.period_ns()
    }

    /// Units that may be taken at once.
    #[getter]
    fn burst(&self) -> u64 {
        self.inner.burst_size()
    }

    fn __repr__(&self) -> String {
        format!(
            "Quota(amount={}, period={:?}, burst={})",
            self.inner.amount(),
            self.inner.period_ns() as f64 / 1e9,
            self.inner.burst_size()
        )
    }

    fn __str__(&self) -> String {
        describe(&self.inner)
    }
}
