//! The library's version.

use core::ffi::c_char;

/// The version of this library, e.g. `"0.1.0"`: a static NUL-terminated string
/// that must not be freed.
///
/// # Safety
/// None; the result is valid for the life of the process.
#[no_mangle]
pub extern "C" fn sluicegate_version() -> *const c_char {
    crate::boundary::guard_ptr(|| concat!(env!("CARGO_PKG_VERSION"), "\0").as_ptr().cast())
}

#[cfg(test)]
mod tests {
    #[test]
    fn version_is_the_crate_version() {
        // SAFETY: a static NUL-terminated string.
        let v = unsafe { core::ffi::CStr::from_ptr(super::sluicegate_version()) };
        assert_eq!(v.to_str().unwrap(), env!("CARGO_PKG_VERSION"));
    }
}
