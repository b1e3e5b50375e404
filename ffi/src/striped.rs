//! `sluicegate_striped`: one token-bucket quota split over cache-padded stripes,
//! for a single very hot limit checked by many threads.

use sluicegate::{AnyLimiter, Clock, InsufficientCapacity};

use crate::boundary::{guard, guard_void};
use crate::config::sluicegate_config;
use crate::handle::{borrow, free, publish};
use crate::limit::LimitConfig;
use crate::limiter::{answer, clock, sluicegate_decision, Clk};
use crate::status::sluicegate_status::{self, *};

/// The stripe count used when `sluicegate_striped_new` is given 0.
pub const SLUICEGATE_DEFAULT_STRIPES: u32 = 8;

/// An opaque striped token bucket: the quota is split over 1, 2, 4, 8 or 16
/// stripes, each in its own cache line; a thread checks its own stripe and
/// borrows from the others when it runs dry, so the whole quota is exact
/// (admitted ≤ burst + rate × time, as one bucket) while uncontended threads
/// never share a line. Use it for one limit that many threads hit at once (a
/// global API limit); a per-client limit belongs in a `sluicegate_keyed`.
/// Created by `sluicegate_striped_new`, released by `sluicegate_striped_free`.
pub struct sluicegate_striped {
    inner: AnyLimiter<Clk>,
}

impl sluicegate_striped {
    fn new(limit: &LimitConfig, stripes: u32) -> Result<Self, sluicegate_status> {
        if !limit.kind.caps().striped {
            return Err(SLUICEGATE_ERR_UNSUPPORTED);
        }
        // The C ABI's published counts (the core takes any up to Spec::MAX_STRIPES).
        let stripes = match stripes {
            0 => SLUICEGATE_DEFAULT_STRIPES,
            1 | 2 | 4 | 8 | 16 => stripes,
            _ => return Err(SLUICEGATE_ERR_BAD_STRIPES),
        };
        let spec = limit.spec()?;
        Ok(Self {
            inner: AnyLimiter::striped(&spec, stripes as usize, clock())?,
        })
    }

    #[inline(always)]
    fn run(
        &self,
        stripe: Option<usize>,
        n: u64,
        now: Option<u64>,
    ) -> Result<sluicegate_decision, InsufficientCapacity> {
        let l = &self.inner;
        match (stripe, now) {
            (Some(s), Some(t)) => l.check_n_at_stripe(s, n, t),
            (Some(s), None) => l.check_n_at_stripe(s, n, clock().now()),
            (None, Some(t)) => l.check_n_at(n, t),
            (None, None) => l.check_n(n),
        }
        .map(sluicegate_decision::of)
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
        let limit = unsafe { LimitConfig::read(config) }?;
        let s = sluicegate_striped::new(&limit, stripes)?;
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
        let limit = unsafe { LimitConfig::read(config) }?;
        if limit.kind != s.inner.kind() {
            return Err(SLUICEGATE_ERR_CONFIG_IMMUTABLE);
        }
        Ok(s.inner.set_quota(0, &limit.quota)?)
    })
}
