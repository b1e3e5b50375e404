//! Opaque handles and pointer arguments: the only place raw pointers become
//! references.
//!
//! A handle is a `Box` turned into a raw pointer by `_new` and back into a `Box`
//! by `_free`: the caller owns it in between, and every other call borrows it
//! shared (`&T`: every handle is `Sync`, its state is atomics).

use crate::status::sluicegate_status::{self, SLUICEGATE_ERR_NULL};

/// Borrows `*p` shared, or `SLUICEGATE_ERR_NULL`.
///
/// # Safety
/// `p` is NULL or points to a live, properly aligned `T` that is not mutated
/// through another pointer while the returned reference is used.
#[inline(always)]
pub unsafe fn borrow<'a, T>(p: *const T) -> Result<&'a T, sluicegate_status> {
    // SAFETY: the caller guarantees `p` is NULL or valid; `as_ref` checks NULL.
    unsafe { p.as_ref() }.ok_or(SLUICEGATE_ERR_NULL)
}

/// Writes `v` to `*p`, or `SLUICEGATE_ERR_NULL`.
///
/// # Safety
/// `p` is NULL or valid for a write of a properly aligned `T`; `T` has no drop
/// glue to run on the old value (plain `#[repr(C)]` data).
#[inline(always)]
pub unsafe fn write<T: Copy>(p: *mut T, v: T) -> Result<(), sluicegate_status> {
    if p.is_null() {
        return Err(SLUICEGATE_ERR_NULL);
    }
    // SAFETY: non-NULL, and valid and aligned by the caller's contract.
    unsafe { p.write(v) };
    Ok(())
}

/// Moves `v` to the heap and returns the owning pointer for `*out`.
///
/// # Safety
/// `out` is NULL (checked first: then nothing is allocated) or valid for a write.
pub unsafe fn publish<T>(out: *mut *mut T, v: T) -> Result<(), sluicegate_status> {
    if out.is_null() {
        return Err(SLUICEGATE_ERR_NULL);
    }
    let raw = Box::into_raw(Box::new(v));
    // SAFETY: `out` is non-NULL and valid for a write by the caller's contract.
    unsafe { out.write(raw) };
    Ok(())
}

/// Frees a handle made by [`publish`]; NULL does nothing.
///
/// # Safety
/// `p` is NULL or a pointer from [`publish`] for the same `T`, not yet freed, and
/// no other call is using it.
pub unsafe fn free<T>(p: *mut T) {
    if !p.is_null() {
        // SAFETY: `p` came from `Box::into_raw` for a `T` and is freed only once.
        drop(unsafe { Box::from_raw(p) });
    }
}

/// The bytes of a caller's buffer, or `SLUICEGATE_ERR_NULL` (even for length 0:
/// a NULL pointer is a bug worth reporting).
///
/// # Safety
/// `p` is NULL or valid for reads of `len` bytes for the returned lifetime.
#[inline(always)]
pub unsafe fn bytes<'a>(p: *const u8, len: usize) -> Result<&'a [u8], sluicegate_status> {
    if p.is_null() {
        return Err(SLUICEGATE_ERR_NULL);
    }
    // SAFETY: non-NULL and valid for `len` bytes by the caller's contract; u8 has
    // no alignment requirement and every bit pattern is valid.
    Ok(unsafe { core::slice::from_raw_parts(p, len) })
}
