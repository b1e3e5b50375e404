//! Shared-memory regions (`shared=`): one region per path per process, mapped
//! once (`Region::open_cached`, as the C library does) and kept; errors as
//! Python exceptions.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};

use pyo3::exceptions::{PyMemoryError, PyValueError};
use pyo3::prelude::*;
use sluicegate_shm::{Error, Options, Region};

use crate::{args, errors};

pyo3::import_exception!(sluicegate._errors, SharedMemoryError);

/// The regions this process has asked for, by path, with the options they
/// were asked with (`sluicegate.shared.open`, or the defaults): kept open, so
/// that limiters made and dropped one after another reuse one mapping, and
/// every later `shared=` of the path is opened with those options.
static REGIONS: Mutex<Option<HashMap<PathBuf, (Options, Region)>>> = Mutex::new(None);

/// A region error: `ValueError` for options that describe no region,
/// `MemoryError` when the device has no room, the spec's own errors for a
/// spec, and `SharedMemoryError` (a `SluicegateError`) for the rest — each
/// naming the file and what is wrong.
pub fn error(e: Error) -> PyErr {
    match e {
        Error::Options(_) => PyValueError::new_err(e.to_string()),
        Error::NoSpace { .. } => PyMemoryError::new_err(e.to_string()),
        Error::Spec(s) => errors::spec(s),
        other => SharedMemoryError::new_err(other.to_string()),
    }
}

/// `clock=` with `shared=`: a region owns its time base.
pub fn clock_and_shared() -> PyErr {
    PyValueError::new_err(
        "clock= and shared= together: a shared region's time base is the \
         system's monotonic clock, the same in every process",
    )
}

/// The region `name` (a path, or a bare name for `/dev/shm/sluicegate-<name>`),
/// with the options this process opened it with (the defaults the first
/// time). Opened and checked on every call, mapped once while it is the same
/// file: a region removed and made again under that name (by another process
/// too) is mapped afresh.
pub fn region(name: &Path) -> PyResult<Region> {
    let path = sluicegate_shm::path_of(name);
    let mut open = REGIONS.lock().unwrap_or_else(PoisonError::into_inner);
    let open = open.get_or_insert_with(HashMap::new);
    let options = open.get(&path).map(|(o, _)| o.clone()).unwrap_or_default();
    let r = Region::open_cached(&path, &options).map_err(error)?;
    open.insert(path, (options, r.clone()));
    Ok(r)
}

/// Opens (creating it if absent) region `name` with these options and keeps it
/// for this process: every later `shared=` of that name uses this mapping. A
/// region that exists with another size is an error naming both; one opened
/// already by this process with other options likewise.
#[pyfunction]
#[pyo3(name = "_shared_open", signature = (name, memory, limits, mode, allow_other_owner))]
pub fn open(
    name: PathBuf,
    memory: Option<&Bound<'_, PyAny>>,
    limits: Option<&Bound<'_, PyAny>>,
    mode: &Bound<'_, PyAny>,
    allow_other_owner: bool,
) -> PyResult<String> {
    let memory = memory.map(|m| args::size(m, "memory")).transpose()?;
    let limits = limits.map(|l| args::size(l, "limits")).transpose()?;
    let mode = args::uint(mode, "mode")?;
    if mode > 0o777 {
        return Err(PyValueError::new_err(format!(
            "mode {mode:#o}: permission bits only (0o000 to 0o777)"
        )));
    }
    let mut options = Options::default()
        .mode(mode as u32)
        .allow_other_owner(allow_other_owner);
    if let Some(bytes) = memory {
        options = options.memory(bytes);
    }
    if let Some(limits) = limits {
        options = options.limits(limits);
    }
    let path = sluicegate_shm::path_of(&name);
    let mut open = REGIONS.lock().unwrap_or_else(PoisonError::into_inner);
    let open = open.get_or_insert_with(HashMap::new);
    // Checked again (the file's size and parts against these options), even
    // when this process has it: options that do not match are an error.
    let r = Region::open_cached(&path, &options).map_err(error)?;
    let shown = r.path().display().to_string();
    open.insert(path, (options, r));
    Ok(shown)
}

/// Removes region `name`; limiters of this process that use it keep their
/// mapping, and the next `shared=` of that name makes a new region.
#[pyfunction]
#[pyo3(name = "_shared_unlink")]
pub fn unlink(name: PathBuf) -> PyResult<()> {
    let path = sluicegate_shm::path_of(&name);
    if let Some(open) = REGIONS
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .as_mut()
    {
        open.remove(&path);
    }
    sluicegate_shm::unlink(&path).map_err(error)
}
