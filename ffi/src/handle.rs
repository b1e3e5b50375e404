//! Opaque handles and pointer arguments: the only place raw pointers become
//! references.
//!
//! A handle is a `Box` turned into a raw pointer by `_new` and back into a `Box`
//! by `_free`: the caller owns it in between, and every other call borrows it
//! shared (`&T`: every handle is `Sync`, its state is atomics).

use crate::status::sluicegate_status::{self, SLUICEGATE_ERR_NULL, SLUICEGATE_ERR_STRUCT_SIZE};

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

/// A `struct_size` above this is garbage (e.g. an uninitialised field), refused
/// before any byte past our layout is read.
const MAX_STRUCT_SIZE: usize = 4096;

/// Reads a caller's versioned input struct, whose first field is its
/// `uint32_t struct_size`: a size below this library's layout (the first
/// published one) or above 4096 is `SLUICEGATE_ERR_STRUCT_SIZE`, and so is a larger
/// one (a newer caller's) whose bytes past our layout are not all zero.
///
/// # Safety
/// `p` is NULL or points to at least 4 readable bytes, and to `struct_size`
/// readable bytes when that value is in range; `T` is `#[repr(C)]`, starts with a
/// `u32`, and every bit pattern is a valid `T` (integers and raw pointers).
pub unsafe fn read_versioned<T: Copy>(p: *const T) -> Result<T, sluicegate_status> {
    if p.is_null() {
        return Err(SLUICEGATE_ERR_NULL);
    }
    // SAFETY: `struct_size` is the first field, a `u32` at offset 0 of an
    // aligned struct; every caller's layout has it.
    let size = unsafe { p.cast::<u32>().read() } as usize;
    if !(core::mem::size_of::<T>()..=MAX_STRUCT_SIZE).contains(&size) {
        return Err(SLUICEGATE_ERR_STRUCT_SIZE);
    }
    let base = p.cast::<u8>();
    for i in core::mem::size_of::<T>()..size {
        // SAFETY: `i < struct_size`, and the caller's struct is that long.
        if unsafe { base.add(i).read() } != 0 {
            return Err(SLUICEGATE_ERR_STRUCT_SIZE);
        }
    }
    // SAFETY: `size >= size_of::<T>()` bytes are readable, the pointer is
    // aligned, and every bit pattern is a valid `T` (the caller's contract).
    Ok(unsafe { p.read() })
}

/// Copies `text` into a caller's buffer, `snprintf`-style: as many bytes as fit
/// with a NUL after them, and the full length (without the NUL) into `*len`.
///
/// # Safety
/// `buf` is NULL or valid for writes of `cap` bytes; `len` is NULL or valid for
/// a write.
#[cfg(any(feature = "policy", feature = "shared"))]
pub(crate) unsafe fn put_text(
    text: &str,
    buf: *mut core::ffi::c_char,
    cap: usize,
    len: *mut usize,
) -> Result<(), sluicegate_status> {
    if buf.is_null() && cap != 0 {
        return Err(SLUICEGATE_ERR_NULL);
    }
    if cap != 0 {
        let n = text.len().min(cap - 1);
        // SAFETY: `buf` is non-NULL and valid for `cap > n` bytes (the contract);
        // the source is a live `&str`, which cannot overlap the caller's buffer.
        unsafe {
            core::ptr::copy_nonoverlapping(text.as_ptr(), buf.cast::<u8>(), n);
            buf.add(n).write(0);
        }
    }
    // SAFETY: NULL or valid for a write (the contract); NULL is not written.
    let _ = unsafe { write(len, text.len()) };
    Ok(())
}

/// Clears the caller's message buffer, so it reads "" unless a call writes it.
///
/// # Safety
/// `err` is NULL or valid for writes of `err_cap` bytes.
#[cfg(any(feature = "policy", feature = "shared"))]
pub(crate) unsafe fn clear_message(err: *mut core::ffi::c_char, err_cap: usize) {
    if !err.is_null() && err_cap != 0 {
        // SAFETY: non-NULL, at least one byte (the contract).
        unsafe { err.write(0) };
    }
}
