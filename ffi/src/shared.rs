//! Shared-memory regions from C: one limit across the worker processes of a
//! host (a pre-fork server's workers, php-fpm children, ...), over the
//! `sluicegate-shm` crate (feature `shared`, on by default).
//!
//! * A **region** is a file every process maps: a bare name without `/` is
//!   `/dev/shm/sluicegate-<name>`, anything else a path. It is created on first
//!   open (exclusively, mode `0600` unless the options say otherwise, its pages
//!   reserved so a full tmpfs is an error at open, not a crash later) and opened
//!   by the others, never through a symbolic link.
//! * `sluicegate_limiter_open_shared` and `sluicegate_keyed_open_shared` return
//!   the ordinary `sluicegate_limiter` / `sluicegate_keyed` handles: every check,
//!   peek, stats, length and clear call works on them, acting on the region (so
//!   on every process's state). Two processes asking for the same spec (and, for
//!   a keyed limiter, the same `max_keys`) share one limit; different specs are
//!   different limits and never mix.
//! * **Time base.** A region's time is `CLOCK_MONOTONIC`, the same clock in every
//!   process (`sluicegate_shared_now_ns`). The calls without `_at` read it; the
//!   `_at(now_ns)` calls of a shared handle must be given nanoseconds of
//!   `sluicegate_shared_now_ns`, not of `sluicegate_now_ns` (the library clock of
//!   local handles, calibrated per process). A handle has no clock to choose.
//! * **Fixed parameters.** `sluicegate_limiter_set_config`,
//!   `sluicegate_keyed_set_config` and `sluicegate_limiter_reset` on a shared
//!   handle are `SLUICEGATE_ERR_SHARED_FIXED`: a limit's parameters are part of
//!   its identity in the region. Open a handle of the new spec instead.
//! * **Errors.** Every way opening can fail has its status (22x) and the
//!   caller's message buffer gets the full text, naming the file and what is
//!   wrong (both sizes for a region of another size).
//! * **Lifecycle.** A region that outlives a reboot (a file not on tmpfs) is
//!   reset at its next open, never read against the new boot's clock: that is
//!   not an error. `sluicegate_shared_unlink` removes a region; processes that
//!   have it mapped keep their mapping, the next open makes a new one.
//! * **One mapping per region per process.** Handles of one region in one
//!   process share one mapping of its file (`Region::open_cached`): a worker
//!   that opens fifty limiters in a region maps it once. Every open still
//!   checks everything with the same statuses as a first open (the file never
//!   through a symbolic link, its owner, its header, and the size asked for:
//!   `SLUICEGATE_ERR_SHARED_MISMATCH` for another `memory` or `limits`). The
//!   file is known by its device and inode, so a region removed (by
//!   `sluicegate_shared_unlink` or another process) and made again under the
//!   same name is opened and mapped afresh, never served from the old mapping;
//!   handles opened before keep the old one. The last handle of a region
//!   unmaps it. A child of `fork()` inherits its parent's mappings and handles,
//!   and its own opens share them too.
//!
//! The calls from Rust, as a C program makes them (two handles standing for two
//! worker processes):
//!
//! ```
//! use sluicegate_ffi::keyed::*;
//! use sluicegate_ffi::limiter::sluicegate_decision;
//! use sluicegate_ffi::shared::*;
//! use sluicegate_ffi::{sluicegate_algorithm, sluicegate_config, sluicegate_status};
//! let path = std::env::temp_dir().join(format!("sg-ffi-doc-{}", std::process::id()));
//! let name = path.to_str().unwrap();
//! let cfg = sluicegate_config {
//!     struct_size: size_of::<sluicegate_config>() as u32,
//!     algorithm: sluicegate_algorithm::SLUICEGATE_TOKEN_BUCKET as u32,
//!     amount: 1,
//!     period_ns: 3_600_000_000_000, // 1 per hour
//!     ..Default::default()
//! };
//! let open = || {
//!     let mut k = std::ptr::null_mut();
//!     // SAFETY: a live name, config and out-pointer; no options, no message buffer.
//!     let s = unsafe {
//!         sluicegate_keyed_open_shared(name.as_ptr().cast(), name.len(), std::ptr::null(),
//!                                      &cfg, 1000, 0, std::ptr::null_mut(), 0, &mut k)
//!     };
//!     assert_eq!(s, sluicegate_status::SLUICEGATE_OK);
//!     k
//! };
//! let (a, b) = (open(), open());
//! let mut d = sluicegate_decision::default();
//! // SAFETY: live handles, a live key and decision.
//! unsafe {
//!     sluicegate_keyed_check(a, b"10.0.0.1".as_ptr(), 8, &mut d);
//!     assert!(d.allowed);
//!     sluicegate_keyed_check(b, b"10.0.0.1".as_ptr(), 8, &mut d);
//!     assert!(!d.allowed); // one state for both handles
//!     sluicegate_keyed_free(a);
//!     sluicegate_keyed_free(b);
//!     sluicegate_shared_unlink(name.as_ptr().cast(), name.len(), std::ptr::null_mut(), 0);
//! }
//! ```

use crate::boundary::guard_value;
#[cfg(feature = "shared")]
use crate::{
    boundary::guard,
    handle::{bytes, clear_message, put_text, read_versioned},
    status::sluicegate_status::{self, *},
};
#[cfg(feature = "shared")]
use core::ffi::c_char;

/// The longest region name or path accepted, in bytes (Linux's `PATH_MAX`
/// less its NUL).
pub const SLUICEGATE_SHARED_MAX_NAME: usize = 4095;

/// How to create a region that does not exist yet, and what to accept when
/// opening one. A versioned input struct: set `struct_size` to
/// `sizeof(sluicegate_shared_options)` and zero what you do not use (every zero
/// is the default). NULL options are all the defaults.
///
/// ```c
/// sluicegate_shared_options o = { .struct_size = sizeof o, .memory = 64u << 20, .mode = 0660 };
/// ```
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct sluicegate_shared_options {
    /// `sizeof(sluicegate_shared_options)` as the caller was compiled.
    pub struct_size: u32,
    /// The file's permission bits when this call creates it; 0: `0600` (this
    /// user only). `0660` lets a group of worker users share it. Above `0777`
    /// is `SLUICEGATE_ERR_SHARED_OPTIONS`.
    pub mode: u32,
    /// Bytes for keys (16 each) and their eviction sketch; 0: 16 MiB (about
    /// 120,000 keys; Docker's default `/dev/shm` is 64 MB). A region that
    /// exists with another size is `SLUICEGATE_ERR_SHARED_MISMATCH`.
    pub memory: u64,
    /// How many limits the region can register (each quota of each keyed or
    /// single limiter is one), at most 65,535; 0: 1,024.
    pub limits: u32,
    /// 1: accept a region another user owns (a master running as root that
    /// made it for workers running as another user, with `mode` letting them
    /// in). 0 (the default): refuse it, `SLUICEGATE_ERR_SHARED_OTHER_OWNER`.
    /// Any other value is `SLUICEGATE_ERR_SHARED_OPTIONS`.
    pub allow_other_owner: u32,
}

/// The region's time base: nanoseconds of `CLOCK_MONOTONIC`, the same clock in
/// every process of one boot. Pass it to the `_at` calls of shared handles
/// (read once per event-loop turn, as `sluicegate_now_ns` for local ones).
///
/// Without the library's `shared` feature it still answers (the clock is the
/// system's); there are no shared handles to give it to.
///
/// # Safety
/// None; callable from any thread.
#[no_mangle]
pub extern "C" fn sluicegate_shared_now_ns() -> u64 {
    guard_value(0, || {
        #[cfg(feature = "shared")]
        {
            sluicegate_shm::now()
        }
        #[cfg(not(feature = "shared"))]
        {
            let t = std::time::Instant::now();
            // No region to share a time base with: any monotonic clock will do.
            static EPOCH: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
            let e = *EPOCH.get_or_init(|| t);
            u64::try_from(t.duration_since(e).as_nanos()).unwrap_or(u64::MAX)
        }
    })
}

/// Why a shared call failed: a status alone, or a region error whose text
/// (naming the file and what is wrong) goes to the caller's message buffer.
#[cfg(feature = "shared")]
pub(crate) enum Failure {
    Status(sluicegate_status),
    Region(sluicegate_shm::Error),
}

#[cfg(feature = "shared")]
impl From<sluicegate_status> for Failure {
    fn from(s: sluicegate_status) -> Self {
        Failure::Status(s)
    }
}

#[cfg(feature = "shared")]
impl From<sluicegate_shm::Error> for Failure {
    fn from(e: sluicegate_shm::Error) -> Self {
        Failure::Region(e)
    }
}

#[cfg(feature = "shared")]
impl From<crate::limit::Rejected> for Failure {
    fn from(e: crate::limit::Rejected) -> Self {
        match e {
            // The core's error names the field and the bound: keep its text.
            crate::limit::Rejected::Spec(s) => Failure::Region(s.into()),
            crate::limit::Rejected::Status(s) => Failure::Status(s),
        }
    }
}

/// The status of a region error: one per way opening can fail.
#[cfg(feature = "shared")]
pub(crate) fn status_of(e: &sluicegate_shm::Error) -> sluicegate_status {
    use sluicegate_shm::Error;
    use std::io::ErrorKind;
    match e {
        Error::Io { source, .. } => match source.kind() {
            ErrorKind::PermissionDenied | ErrorKind::ReadOnlyFilesystem => {
                SLUICEGATE_ERR_SHARED_ACCESS
            }
            ErrorKind::IsADirectory => SLUICEGATE_ERR_SHARED_NOT_A_FILE,
            _ => SLUICEGATE_ERR_SHARED_IO,
        },
        Error::NotAFile { .. } => SLUICEGATE_ERR_SHARED_NOT_A_FILE,
        Error::OtherOwner { .. } => SLUICEGATE_ERR_SHARED_OTHER_OWNER,
        Error::NotARegion { .. } => SLUICEGATE_ERR_SHARED_NOT_A_REGION,
        Error::Version { .. } => SLUICEGATE_ERR_SHARED_VERSION,
        Error::Corrupt { .. } => SLUICEGATE_ERR_SHARED_CORRUPT,
        Error::Size { .. } => SLUICEGATE_ERR_SHARED_MISMATCH,
        Error::NoSpace { .. } => SLUICEGATE_ERR_SHARED_NO_SPACE,
        Error::Options(_) => SLUICEGATE_ERR_SHARED_OPTIONS,
        Error::NotLockFree => SLUICEGATE_ERR_SHARED_NOT_LOCK_FREE,
        Error::Spec(s) => (*s).into(),
        // A kind of failure added to sluicegate-shm after this library: a
        // system-level failure as far as C can tell.
        _ => SLUICEGATE_ERR_SHARED_IO,
    }
}

/// Runs a shared call's body with the caller's message buffer: cleared first,
/// and on failure given the error's full text (a region error's, naming the
/// file) or its status's message.
///
/// # Safety
/// `err` is NULL or valid for writes of `err_cap` bytes.
#[cfg(feature = "shared")]
pub(crate) unsafe fn with_message(
    err: *mut c_char,
    err_cap: usize,
    f: impl FnOnce() -> Result<(), Failure>,
) -> sluicegate_status {
    guard(|| {
        // SAFETY: the export's contract.
        unsafe { clear_message(err, err_cap) };
        let (status, text) = match f() {
            Ok(()) => return Ok(()),
            Err(Failure::Status(s)) => (s, s.message().to_string_lossy().into_owned()),
            Err(Failure::Region(e)) => (status_of(&e), e.to_string()),
        };
        if !err.is_null() {
            // SAFETY: non-NULL and valid for `err_cap` bytes (the contract).
            unsafe { put_text(&text, err, err_cap, core::ptr::null_mut()) }?;
        }
        Err(status)
    })
}

/// A caller's region name: `len` bytes of UTF-8 (not NUL-terminated), 1 to
/// [`SLUICEGATE_SHARED_MAX_NAME`] of them, without a NUL byte.
///
/// # Safety
/// `p` is NULL or valid for reads of `len` bytes.
#[cfg(feature = "shared")]
pub(crate) unsafe fn name<'a>(p: *const c_char, len: usize) -> Result<&'a str, sluicegate_status> {
    if p.is_null() {
        return Err(SLUICEGATE_ERR_NULL);
    }
    // Checked before a slice is made of it: a length past the limit (or past
    // `isize::MAX`) is refused without being read.
    if len == 0 || len > SLUICEGATE_SHARED_MAX_NAME {
        return Err(SLUICEGATE_ERR_BAD_NAME);
    }
    // SAFETY: non-NULL and valid for `len` bytes (the contract).
    let b = unsafe { bytes(p.cast(), len) }?;
    if b.contains(&0) {
        return Err(SLUICEGATE_ERR_BAD_NAME);
    }
    core::str::from_utf8(b).map_err(|_| SLUICEGATE_ERR_NOT_UTF8)
}

/// The region options a caller's struct asks for (NULL: the defaults).
///
/// # Safety
/// `p` is NULL or points to a `sluicegate_shared_options` with `struct_size`
/// set.
#[cfg(feature = "shared")]
pub(crate) unsafe fn options(
    p: *const sluicegate_shared_options,
) -> Result<sluicegate_shm::Options, sluicegate_status> {
    let mut o = sluicegate_shm::Options::default();
    if p.is_null() {
        return Ok(o);
    }
    // SAFETY: the contract; integers only, every bit pattern valid.
    let c = unsafe { read_versioned(p) }?;
    if c.mode > 0o777 || c.allow_other_owner > 1 {
        return Err(SLUICEGATE_ERR_SHARED_OPTIONS);
    }
    if c.mode != 0 {
        o = o.mode(c.mode);
    }
    if c.memory != 0 {
        let bytes = usize::try_from(c.memory).map_err(|_| SLUICEGATE_ERR_SHARED_OPTIONS)?;
        o = o.memory(bytes);
    }
    if c.limits != 0 {
        o = o.limits(c.limits as usize);
    }
    Ok(o.allow_other_owner(c.allow_other_owner == 1))
}

/// Opens (creating it if needed) the region a caller names, with its options.
///
/// # Safety
/// As [`name`] and [`options`].
#[cfg(feature = "shared")]
pub(crate) unsafe fn open(
    name_ptr: *const c_char,
    name_len: usize,
    opts: *const sluicegate_shared_options,
) -> Result<sluicegate_shm::Region, Failure> {
    // SAFETY: forwarded contract.
    let name = unsafe { name(name_ptr, name_len) }?;
    // SAFETY: forwarded contract.
    let options = unsafe { options(opts) }?;
    Ok(sluicegate_shm::Region::open_cached(name, &options)?)
}

/// Removes region `name` (`name_len` bytes of UTF-8, not NUL-terminated: a
/// path, or a bare name for `/dev/shm/sluicegate-<name>`). Handles that have
/// it mapped, in any process, keep using their mapping; the next open makes a
/// new region, in this process too (never served from its mapping of the
/// removed one). A region that does not exist is not an error. On failure
/// `err` (NULL, or `err_cap` bytes) gets the file and the reason:
/// `SLUICEGATE_ERR_SHARED_ACCESS` for a directory this user cannot write,
/// `SLUICEGATE_ERR_SHARED_IO` otherwise.
///
/// Bad names: NULL is `SLUICEGATE_ERR_NULL`; empty, longer than
/// `SLUICEGATE_SHARED_MAX_NAME` or holding a NUL is `SLUICEGATE_ERR_BAD_NAME`;
/// not UTF-8 is `SLUICEGATE_ERR_NOT_UTF8`.
///
/// # Safety
/// `name` points to `name_len` readable bytes; `err` is NULL or valid for
/// writes of `err_cap` bytes.
#[cfg(feature = "shared")]
#[no_mangle]
pub unsafe extern "C" fn sluicegate_shared_unlink(
    name: *const c_char,
    name_len: usize,
    err: *mut c_char,
    err_cap: usize,
) -> sluicegate_status {
    // SAFETY: the export's contract.
    unsafe {
        with_message(err, err_cap, || {
            let n = self::name(name, name_len)?;
            Ok(sluicegate_shm::unlink(n)?)
        })
    }
}

#[cfg(all(test, feature = "shared"))]
mod tests {
    use super::*;

    #[test]
    fn every_region_error_has_its_own_status() {
        use sluicegate_shm::Error;
        use std::io;
        let p = || std::path::PathBuf::from("/x");
        let io = |kind| Error::Io {
            path: p(),
            op: "open",
            source: io::Error::from(kind),
        };
        let cases = [
            (
                io(io::ErrorKind::PermissionDenied),
                SLUICEGATE_ERR_SHARED_ACCESS,
            ),
            (
                io(io::ErrorKind::ReadOnlyFilesystem),
                SLUICEGATE_ERR_SHARED_ACCESS,
            ),
            (io(io::ErrorKind::NotFound), SLUICEGATE_ERR_SHARED_IO),
            (
                io(io::ErrorKind::IsADirectory),
                SLUICEGATE_ERR_SHARED_NOT_A_FILE,
            ),
            (
                Error::NotAFile { path: p() },
                SLUICEGATE_ERR_SHARED_NOT_A_FILE,
            ),
            (
                Error::OtherOwner {
                    path: p(),
                    owner: 1,
                    us: 2,
                },
                SLUICEGATE_ERR_SHARED_OTHER_OWNER,
            ),
            (
                Error::NotARegion { path: p() },
                SLUICEGATE_ERR_SHARED_NOT_A_REGION,
            ),
            (
                Error::Version {
                    path: p(),
                    found: 2,
                    supported: 1,
                },
                SLUICEGATE_ERR_SHARED_VERSION,
            ),
            (
                Error::Corrupt {
                    path: p(),
                    what: "x".into(),
                },
                SLUICEGATE_ERR_SHARED_CORRUPT,
            ),
            (
                Error::Size {
                    path: p(),
                    asked: 1,
                    found: 2,
                },
                SLUICEGATE_ERR_SHARED_MISMATCH,
            ),
            (
                Error::NoSpace {
                    path: p(),
                    bytes: 1,
                },
                SLUICEGATE_ERR_SHARED_NO_SPACE,
            ),
            (Error::Options("x".into()), SLUICEGATE_ERR_SHARED_OPTIONS),
            (Error::NotLockFree, SLUICEGATE_ERR_SHARED_NOT_LOCK_FREE),
            (
                Error::Spec(sluicegate::SpecError::PoolFull { max: 3 }),
                SLUICEGATE_ERR_SHARED_FULL,
            ),
        ];
        for (e, want) in cases {
            assert_eq!(status_of(&e), want, "{e}");
        }
    }

    #[test]
    fn names_are_checked_before_they_are_read() {
        // SAFETY: NULL, and lengths refused before any byte is read.
        unsafe {
            assert_eq!(name(core::ptr::null(), 3), Err(SLUICEGATE_ERR_NULL));
            let p = c"x".as_ptr();
            assert_eq!(name(p, 0), Err(SLUICEGATE_ERR_BAD_NAME));
            assert_eq!(name(p, usize::MAX), Err(SLUICEGATE_ERR_BAD_NAME));
            assert_eq!(
                name(p, SLUICEGATE_SHARED_MAX_NAME + 1),
                Err(SLUICEGATE_ERR_BAD_NAME)
            );
            assert_eq!(name(c"a\xff".as_ptr(), 2), Err(SLUICEGATE_ERR_NOT_UTF8));
            assert_eq!(
                name(b"a\0b".as_ptr().cast(), 3),
                Err(SLUICEGATE_ERR_BAD_NAME)
            );
            assert_eq!(name(c"api".as_ptr(), 3), Ok("api"));
        }
    }
}
