//! The panic boundary: no unwind ever crosses into C.
//!
//! Unwinding out of an `extern "C"` function aborts the process (and was
//! undefined behaviour before Rust 1.81), so every export runs its body through
//! one of these functions. The library validates its inputs and does not panic
//! on any of them; a panic here is a bug, reported as `SLUICEGATE_ERR_PANIC`
//! instead of a crash. The default panic hook still prints the message to
//! stderr, which is what a bug report needs.

use std::panic::{catch_unwind, AssertUnwindSafe};

use crate::status::sluicegate_status;

/// Runs `f`, turning `Err(status)` and a panic into a status code.
///
/// `AssertUnwindSafe` is sound here: after a panic the only thing that escapes is
/// the status code; the handle's state is atomics, consistent at every instant.
#[inline(always)]
pub fn guard(f: impl FnOnce() -> Result<(), sluicegate_status>) -> sluicegate_status {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(())) => sluicegate_status::SLUICEGATE_OK,
        Ok(Err(status)) => status,
        Err(_) => sluicegate_status::SLUICEGATE_ERR_PANIC,
    }
}

/// Runs `f` for a function that returns a pointer; a panic returns NULL.
#[inline]
pub fn guard_ptr<T>(f: impl FnOnce() -> *const T) -> *const T {
    catch_unwind(AssertUnwindSafe(f)).unwrap_or(core::ptr::null())
}

/// Runs `f` for a function without a result (`_free`); a panic is swallowed.
#[inline]
pub fn guard_void(f: impl FnOnce()) {
    let _ = catch_unwind(AssertUnwindSafe(f));
}

/// Runs `f` for a function that returns a plain value; a panic returns `fallback`.
#[inline]
pub fn guard_value<T>(fallback: T, f: impl FnOnce() -> T) -> T {
    catch_unwind(AssertUnwindSafe(f)).unwrap_or(fallback)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_panic_becomes_a_status() {
        let prev = std::panic::take_hook();
        std::panic::set_hook(Box::new(|_| {}));
        let s = guard(|| panic!("boom"));
        let p = guard_ptr::<u8>(|| panic!("boom"));
        let v = guard_value(7u64, || panic!("boom"));
        guard_void(|| panic!("boom"));
        std::panic::set_hook(prev);
        assert_eq!(s, sluicegate_status::SLUICEGATE_ERR_PANIC);
        assert!(p.is_null());
        assert_eq!(v, 7);
        assert_eq!(guard(|| Ok(())), sluicegate_status::SLUICEGATE_OK);
        assert_eq!(
            guard(|| Err(sluicegate_status::SLUICEGATE_ERR_NULL)),
            sluicegate_status::SLUICEGATE_ERR_NULL
        );
    }
}
