//! `sluicegate_striped`: one token-bucket quota split over cache-padded stripes,
//! for a single very hot limit checked by many threads.

use std::sync::atomic::{AtomicUsize, Ordering};

use sluicegate::{Clock, Decision, InsufficientCapacity, Quota, Striped};

use crate::boundary::{guard, guard_void};
use crate::config::{sluicegate_algorithm, sluicegate_config, Spec};
use crate::handle::{borrow, free, publish};
use crate::limiter::{answer, clock, sluicegate_decision, Clk};
use crate::status::sluicegate_status::{self, *};

/// The stripe count used when `sluicegate_striped_new` is given 0.
pub const SLUICEGATE_DEFAULT_STRIPES: u32 = 8;

// The handle is one heap allocation of the largest variant (16 stripes: ~2.5 KiB);
// boxing each variant instead would add a pointer chase to every check.
#[allow(clippy::large_enum_variant)]
enum Inner {
    S1(Striped<1, Clk>),
    S2(Striped<2, Clk>),
    S4(Striped<4, Clk>),
    S8(Striped<8, Clk>),
    S16(Striped<16, Clk>),
}

macro_rules! each {
    ($inner:expr, $s:ident => $body:expr) => {
        match $inner {
            Inner::S1($s) => $body,
            Inner::S2($s) => $body,
            Inner::S4($s) => $body,
            Inner::S8($s) => $body,
            Inner::S16($s) => $body,
        }
    };
}

/// An opaque striped token bucket: the quota is split over 1, 2, 4, 8 or 16
/// stripes, each in its own cache line; a thread checks its own stripe and
/// borrows from the others when it runs dry, so the whole quota is exact
/// (admitted ≤ burst + rate × time, as one bucket) while uncontended threads
/// never share a line. Use it for one limit that many threads hit at once (a
/// global API limit); a per-client limit belongs in a `sluicegate_keyed`.
/// Created by `sluicegate_striped_new`, released by `sluicegate_striped_free`.
pub struct sluicegate_striped {
    inner: Inner,
}

/// This thread's stripe: a small number handed out once per thread.
fn thread_stripe() -> usize {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    std::thread_local! {
        static INDEX: usize = NEXT.fetch_add(1, Ordering::Relaxed);
    }
    INDEX.with(|i| *i)
}

impl sluicegate_striped {
    fn new(quota: Quota, stripes: u32) -> Result<Self, sluicegate_status> {
        let c = clock();
        let inner = match stripes {
            1 => Inner::S1(Striped::with_clock(quota, c)?),
            2 => Inner::S2(Striped::with_clock(quota, c)?),
            4 => Inner::S4(Striped::with_clock(quota, c)?),
            0 | 8 => Inner::S8(Striped::with_clock(quota, c)?),
            16 => Inner::S16(Striped::with_clock(quota, c)?),
            _ => return Err(SLUICEGATE_ERR_BAD_STRIPES),
        };
        Ok(Self { inner })
    }

    #[inline(always)]
    fn run(
        &self,
        stripe: usize,
        n: u64,
        now: Option<u64>,
    ) -> Result<sluicegate_decision, InsufficientCapacity> {
        let at = now.unwrap_or_else(|| clock().now());
        let plain = |d: Decision| sluicegate_decision::new(d, 0);
        each!(&self.inner, s => s.check_n_at_stripe(stripe, n, at).map(plain))
    }
}

/// Creates a striped token bucket (`config->algorithm` must be
/// `SLUICEGATE_TOKEN_BUCKET`, else `SLUICEGATE_ERR_UNSUPPORTED`) over `stripes`
/// stripes: 1, 2, 4, 8 or 16, or 0 for `SLUICEGATE_DEFAULT_STRIPES` (8). The
/// burst must be at least the stripe count (`SLUICEGATE_ERR_CONFIG_TOO_LARGE`).
///
/// # Safety
/// `config` is a config with `struct_size` set; `out` is valid for a write.
#[no_mangle]
pub unsafe extern "C" fn sluicegate_striped_new(
    config: *const sluicegate_config,
    stripes: u32,
    out: *mut *mut sluicegate_striped,
) -> sluicegate_status {
    guard(|| {
        if out.is_null() {
            return Err(SLUICEGATE_ERR_NULL);
        }
        // SAFETY: the export's contract.
        let spec = unsafe { Spec::read(config) }?;
        if spec.alg != sluicegate_algorithm::SLUICEGATE_TOKEN_BUCKET {
            return Err(SLUICEGATE_ERR_UNSUPPORTED);
        }
        let s = sluicegate_striped::new(spec.quota, stripes)?;
        // SAFETY: `out` is non-NULL and valid for a write.
        unsafe { publish(out, s) }
    })
}

/// Releases a striped limiter. NULL does nothing.
///
/// # Safety
/// `striped` is NULL or a handle from `sluicegate_striped_new` that has not been
/// freed, and no other thread is using it.
#[no_mangle]
pub unsafe extern "C" fn sluicegate_striped_free(striped: *mut sluicegate_striped) {
    // SAFETY: the export's contract.
    guard_void(|| unsafe { free(striped) })
}

/// The body of every check export; `EXPORT` gives each export its own inlined
/// copy (see `limiter.rs`).
#[inline(always)]
unsafe fn decide<const EXPORT: u8>(
    striped: *const sluicegate_striped,
    stripe: Option<usize>,
    n: u64,
    now: Option<u64>,
    out: *mut sluicegate_decision,
) -> sluicegate_status {
    guard(move || {
        // SAFETY: the export's contract: NULL or a live handle.
        let s = unsafe { borrow(striped) }?;
        if out.is_null() {
            return Err(SLUICEGATE_ERR_NULL);
        }
        let stripe = stripe.unwrap_or_else(thread_stripe);
        // SAFETY: `out` is non-NULL and valid by the export's contract.
        unsafe { answer(out, s.run(stripe, n, now)) }
    })
}

/// Admits one unit now, starting from the calling thread's stripe. `remaining`
/// on an admission counts the stripe that served it (a lower bound).
///
/// # Safety
/// `striped` is a live handle; `out` is valid for a write.
#[no_mangle]
pub unsafe extern "C" fn sluicegate_striped_check(
    striped: *const sluicegate_striped,
    out: *mut sluicegate_decision,
) -> sluicegate_status {
    // SAFETY: the export's contract.
    unsafe { decide::<1>(striped, None, 1, None, out) }
}

/// Admits `n` units now, all-or-nothing (gathered from several stripes if needed).
///
/// # Safety
/// `striped` is a live handle; `out` is valid for a write.
#[no_mangle]
pub unsafe extern "C" fn sluicegate_striped_check_n(
    striped: *const sluicegate_striped,
    n: u64,
    out: *mut sluicegate_decision,
) -> sluicegate_status {
    // SAFETY: the export's contract.
    unsafe { decide::<2>(striped, None, n, None, out) }
}

/// `sluicegate_striped_check` at the caller's time `now_ns`.
///
/// # Safety
/// `striped` is a live handle; `out` is valid for a write.
#[no_mangle]
pub unsafe extern "C" fn sluicegate_striped_check_at(
    striped: *const sluicegate_striped,
    now_ns: u64,
    out: *mut sluicegate_decision,
) -> sluicegate_status {
    // SAFETY: the export's contract.
    unsafe { decide::<3>(striped, None, 1, Some(now_ns), out) }
}

/// `sluicegate_striped_check_n` at the caller's time `now_ns`.
///
/// # Safety
/// `striped` is a live handle; `out` is valid for a write.
#[no_mangle]
pub unsafe extern "C" fn sluicegate_striped_check_n_at(
    striped: *const sluicegate_striped,
    n: u64,
    now_ns: u64,
    out: *mut sluicegate_decision,
) -> sluicegate_status {
    // SAFETY: the export's contract.
    unsafe { decide::<4>(striped, None, n, Some(now_ns), out) }
}

/// `sluicegate_striped_check_n_at` starting from stripe `stripe` (any number,
/// taken modulo the stripe count), for callers that number their own workers
/// (e.g. one event loop per core).
///
/// # Safety
/// `striped` is a live handle; `out` is valid for a write.
#[no_mangle]
pub unsafe extern "C" fn sluicegate_striped_check_n_at_stripe(
    striped: *const sluicegate_striped,
    stripe: usize,
    n: u64,
    now_ns: u64,
    out: *mut sluicegate_decision,
) -> sluicegate_status {
    // SAFETY: the export's contract.
    unsafe { decide::<5>(striped, Some(stripe), n, Some(now_ns), out) }
}

/// Changes the quota (still a token bucket); every stripe's state carries over.
///
/// # Safety
/// `striped` is a live handle; `config` a config with `struct_size` set.
#[no_mangle]
pub unsafe extern "C" fn sluicegate_striped_set_config(
    striped: *const sluicegate_striped,
    config: *const sluicegate_config,
) -> sluicegate_status {
    guard(|| {
        // SAFETY: the export's contract.
        let s = unsafe { borrow(striped) }?;
        // SAFETY: the export's contract.
        let spec = unsafe { Spec::read(config) }?;
        if spec.alg != sluicegate_algorithm::SLUICEGATE_TOKEN_BUCKET {
            return Err(SLUICEGATE_ERR_CONFIG_IMMUTABLE);
        }
        Ok(each!(&s.inner, st => st.set_quota(&spec.quota))?)
    })
}
