//! `sluicegate_limiter`: one limiter of any algorithm, or a compound of up to
//! [`SLUICEGATE_MAX_LIMITS`] limits of one algorithm checked all-or-nothing,
//! over the core's [`AnyLimiter`].

use std::sync::OnceLock;

use sluicegate::{AnyLimiter, Clock, Decision, InsufficientCapacity, Outcome, QuantaClock};

use crate::boundary::{guard, guard_value, guard_void};
use crate::config::{sluicegate_config, SLUICEGATE_MAX_LIMITS};
use crate::handle::{borrow, free, publish};
use crate::limit::{spec_of, LimitConfig};
use crate::status::sluicegate_status::{self, *};

/// The clock every handle reads (and `sluicegate_now_ns` returns): one
/// TSC-backed monotonic clock for the whole process, so a caller that reads it
/// once per event-loop turn and passes the value to `_at` calls shares the
/// handles' time base.
pub(crate) type Clk = &'static QuantaClock;

pub(crate) fn clock() -> Clk {
    static CLOCK: OnceLock<QuantaClock> = OnceLock::new();
    CLOCK.get_or_init(QuantaClock::default)
}

/// The library clock's current time in nanoseconds (monotonic, arbitrary epoch):
/// the time base of every call without `_at`. Read it once per event-loop turn
/// and pass it to the `_at` calls to pay for no clock read per check.
///
/// # Safety
/// None; callable from any thread.
#[no_mangle]
pub extern "C" fn sluicegate_now_ns() -> u64 {
    guard_value(0, || clock().now())
}

/// What a check answered: everything a server needs for `Retry-After`,
/// `RateLimit` and `RateLimit-Policy`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct sluicegate_decision {
    /// Whether the request was admitted (and, for a check, charged).
    pub allowed: bool,
    /// Units that could be taken right now, after this decision.
    pub remaining: u64,
    /// Nanoseconds until a request of the same cost would be admitted; 0 when
    /// allowed; `UINT64_MAX` when it never can be.
    pub retry_after_ns: u64,
    /// Nanoseconds until the limiter is back to its full state.
    pub reset_after_ns: u64,
    /// The burst or limit: the most units admitted at once (for a compound, the
    /// binding limit's).
    pub limit: u64,
    /// The shaper: nanoseconds the admitted request must wait before it runs;
    /// 0 for every other algorithm.
    pub delay_ns: u64,
}

impl sluicegate_decision {
    pub(crate) fn new(d: Decision, delay_ns: u64) -> Self {
        Self {
            allowed: d.allowed,
            remaining: d.remaining,
            retry_after_ns: d.retry_after_ns,
            // Copied on its own: merged with `retry_after_ns` (the two sit side
            // by side here and in `Decision`), LLVM loaded both with one 16-byte
            // load from the engine's answer, which the engine had written with two
            // 8-byte stores; store forwarding failed, and that one load held 75 %
            // of `sluicegate_limiter_check_at`'s samples. `check_at/c_abi`
            // 11.3 -> 9.1 ns (`cargo bench -p sluicegate-ffi --bench abi`). A
            // performance guard only: `black_box` is the identity, and if a later
            // compiler lays the fields out otherwise it may stop mattering.
            reset_after_ns: core::hint::black_box(d.reset_after_ns),
            limit: d.limit,
            delay_ns,
        }
    }

    /// The decision and the shaper's wait of a core outcome.
    #[inline(always)]
    pub(crate) fn of(o: Outcome) -> Self {
        Self::new(o.decision, o.delay_ns)
    }

    /// The decision written for a cost that can never be admitted.
    #[cold]
    pub(crate) fn over_capacity(e: InsufficientCapacity) -> Self {
        Self::new(Decision::never(e.capacity), 0)
    }
}

/// Writes the outcome of a check to `out` and turns it into a status.
///
/// # Safety
/// `out` is non-NULL and valid for a write (checked by the caller).
#[inline(always)]
pub(crate) unsafe fn answer(
    out: *mut sluicegate_decision,
    r: Result<sluicegate_decision, InsufficientCapacity>,
) -> Result<(), sluicegate_status> {
    let (d, status) = match r {
        Ok(d) => (d, Ok(())),
        Err(e) => (
            sluicegate_decision::over_capacity(e),
            Err(SLUICEGATE_ERR_INSUFFICIENT_CAPACITY),
        ),
    };
    // SAFETY: the caller checked `out` non-NULL; valid by the export's contract.
    unsafe { out.write(d) };
    status
}

/// An opaque limiter handle: one limit, or up to `SLUICEGATE_MAX_LIMITS` limits of
/// one algorithm admitted all-or-nothing, in this process or in a shared-memory
/// region. Thread-safe: any number of threads may check it at once. Created by
/// `sluicegate_limiter_new` or `sluicegate_limiter_open_shared`, owned by the
/// caller, released by `sluicegate_limiter_free`.
pub struct sluicegate_limiter {
    inner: Limiter,
}

/// Where a limiter's state lives.
enum Limiter {
    /// This process's memory, on the library clock.
    Local(AnyLimiter<Clk>),
    /// A shared region, on the region's time base.
    #[cfg(feature = "shared")]
    Shared(sluicegate_shm::SharedLimiter),
}

impl sluicegate_limiter {
    #[inline(always)]
    fn run(
        &self,
        n: u64,
        now: Option<u64>,
        consume: bool,
    ) -> Result<sluicegate_decision, InsufficientCapacity> {
        match &self.inner {
            Limiter::Local(l) => match (now, consume) {
                (Some(t), true) => l.check_n_at(n, t),
                (Some(t), false) => l.peek_n_at(n, t),
                (None, true) => l.check_n(n),
                (None, false) => l.peek_n(n),
            },
            #[cfg(feature = "shared")]
            Limiter::Shared(l) => {
                let t = now.unwrap_or_else(sluicegate_shm::now);
                if consume {
                    l.check_n_at(n, t)
                } else {
                    l.peek_n_at(n, t)
                }
            }
        }
        .map(sluicegate_decision::of)
    }

    /// The local limiter, or `SLUICEGATE_ERR_SHARED_FIXED` for a shared one
    /// (whose parameters are fixed in its region).
    fn local(&self) -> Result<&AnyLimiter<Clk>, sluicegate_status> {
        match &self.inner {
            Limiter::Local(l) => Ok(l),
            #[cfg(feature = "shared")]
            Limiter::Shared(_) => Err(SLUICEGATE_ERR_SHARED_FIXED),
        }
    }

    /// Replaces limit `index` with `limit`; the algorithm, the shaper's max delay
    /// and the log's capacity (when given) must stay as they are.
    fn set_config(&self, index: usize, limit: &LimitConfig) -> Result<(), sluicegate_status> {
        let local = self.local()?;
        let current = local.spec();
        if limit.kind != current.kind() {
            return Err(SLUICEGATE_ERR_CONFIG_IMMUTABLE);
        }
        if index >= current.quotas().len() {
            return Err(SLUICEGATE_ERR_INDEX);
        }
        if limit.max_delay_ns != current.max_delay_ns()
            || (limit.log_capacity != 0 && limit.log_capacity != current.log_capacity())
        {
            return Err(SLUICEGATE_ERR_CONFIG_IMMUTABLE);
        }
        Ok(local.set_quota(index, &limit.quota)?)
    }
}

/// The spec of a caller's `count` configs (see `sluicegate_limiter_new`).
///
/// # Safety
/// As `sluicegate_limiter_new`'s `configs`.
unsafe fn read_spec(
    configs: *const sluicegate_config,
    count: usize,
) -> Result<sluicegate::Spec, crate::limit::Rejected> {
    use crate::limit::Rejected::Status;
    if configs.is_null() {
        return Err(Status(SLUICEGATE_ERR_NULL));
    }
    if count == 0 || count > SLUICEGATE_MAX_LIMITS {
        return Err(Status(SLUICEGATE_ERR_LIMIT_COUNT));
    }
    // SAFETY: `configs` is a non-NULL array of at least one config.
    let first = unsafe { crate::config::read_config(configs) }.map_err(Status)?;
    let stride = first.struct_size as usize;
    let mut limits = [LimitConfig::new(&first).map_err(Status)?; SLUICEGATE_MAX_LIMITS];
    for (i, limit) in limits.iter_mut().enumerate().take(count).skip(1) {
        // SAFETY: element `i < count` of an array of `stride`-byte elements.
        let p = unsafe { configs.cast::<u8>().add(i * stride) }.cast::<sluicegate_config>();
        // SAFETY: as above.
        let c = unsafe { crate::config::read_config(p) }.map_err(Status)?;
        if c.struct_size as usize != stride {
            return Err(Status(SLUICEGATE_ERR_STRUCT_SIZE));
        }
        *limit = LimitConfig::new(&c).map_err(Status)?;
    }
    spec_of(&limits[..count])
}

/// Creates a limiter from `count` configs (1 to `SLUICEGATE_MAX_LIMITS`) and
/// stores the new handle in `*out`.
///
/// * One config: a limiter of any algorithm.
/// * Two to `SLUICEGATE_MAX_LIMITS` configs: a **compound** limiter, e.g. 10 per
///   second *and* 1000 per hour. Every config must name the same algorithm
///   (token bucket, leaky bucket, fixed or sliding window; not the shaper or the
///   log: `SLUICEGATE_ERR_UNSUPPORTED`). A request is admitted only if every limit
///   admits it, and then charged to all; a denial charges none. The decision
///   reports the binding limit.
///
/// On error `*out` is left unchanged and nothing is allocated.
///
/// # Safety
/// `configs` points to `count` configs with `struct_size` set (each element
/// `sizeof(sluicegate_config)` bytes apart as compiled by the caller: the first
/// element's `struct_size` is the stride); `out` is valid for a write.
#[no_mangle]
pub unsafe extern "C" fn sluicegate_limiter_new(
    configs: *const sluicegate_config,
    count: usize,
    out: *mut *mut sluicegate_limiter,
) -> sluicegate_status {
    guard(|| {
        if out.is_null() {
            return Err(SLUICEGATE_ERR_NULL);
        }
        // SAFETY: the export's contract.
        let spec = unsafe { read_spec(configs, count) }?;
        let limiter = sluicegate_limiter {
            inner: Limiter::Local(AnyLimiter::with_clock(&spec, clock())?),
        };
        // SAFETY: `out` is non-NULL and valid for a write.
        unsafe { publish(out, limiter) }
    })
}

/// Opens a limiter of `count` configs (as `sluicegate_limiter_new`: one limit,
/// or a compound of one algorithm) in the shared-memory region `name`, and
/// stores the new handle in `*out`. Every process that opens the same spec in
/// the same region checks **one** state: a pre-fork server's workers admit the
/// limit once between them, not once each.
///
/// * `name`: `name_len` bytes of UTF-8, not NUL-terminated: a path, or a bare
///   name without `/` for `/dev/shm/sluicegate-<name>`. The region is created
///   (exclusively, with `options`) if it does not exist.
/// * `options`: NULL for the defaults, or a `sluicegate_shared_options` with
///   `struct_size` set.
/// * `err`: NULL, or a buffer of `err_cap` bytes that gets `""` on success and
///   the error's full text on failure (the file and what is wrong).
///
/// The handle works with every `sluicegate_limiter_*` check and peek. The calls
/// without `_at` read the region's clock; the `_at` calls take nanoseconds of
/// `sluicegate_shared_now_ns` (not `sluicegate_now_ns`).
/// `sluicegate_limiter_set_config` and `sluicegate_limiter_reset` are
/// `SLUICEGATE_ERR_SHARED_FIXED` (a limit's parameters are fixed in the region).
/// The sliding log has no shared form (`SLUICEGATE_ERR_UNSUPPORTED`).
///
/// Handles of one region in one process share one mapping of its file (this
/// call and `sluicegate_keyed_open_shared` alike; the last handle unmaps it).
/// Every open still checks the file, its owner, its header and the options
/// with the statuses below, as a first open does. The file is known by its
/// device and inode: a region removed and made again under the same name is
/// mapped afresh, never served from this process's mapping of the old one.
///
/// Errors: the configs' own statuses; `SLUICEGATE_ERR_BAD_NAME` /
/// `SLUICEGATE_ERR_NOT_UTF8` for the name; a 22x status for each way the region
/// cannot be opened (a symbolic link, another owner, not a region, another
/// layout version, a truncated file, another size, no room, bad options, no
/// lock-free 16-byte CAS, permission denied, a full registry). On error `*out`
/// is unchanged.
///
/// # Safety
/// `name` points to `name_len` readable bytes; `options` is NULL or a
/// `sluicegate_shared_options` with `struct_size` set; `configs` as in
/// `sluicegate_limiter_new`; `err` is NULL or valid for writes of `err_cap`
/// bytes; `out` is valid for a write.
#[cfg(feature = "shared")]
#[no_mangle]
pub unsafe extern "C" fn sluicegate_limiter_open_shared(
    name: *const core::ffi::c_char,
    name_len: usize,
    options: *const crate::shared::sluicegate_shared_options,
    configs: *const sluicegate_config,
    count: usize,
    err: *mut core::ffi::c_char,
    err_cap: usize,
    out: *mut *mut sluicegate_limiter,
) -> sluicegate_status {
    // SAFETY: the export's contract.
    unsafe {
        crate::shared::with_message(err, err_cap, || {
            if out.is_null() {
                return Err(SLUICEGATE_ERR_NULL.into());
            }
            // The spec first: a bad config creates no file.
            let spec = read_spec(configs, count)?;
            let region = crate::shared::open(name, name_len, options)?;
            let limiter = sluicegate_limiter {
                inner: Limiter::Shared(region.limiter(&spec)?),
            };
            Ok(publish(out, limiter)?)
        })
    }
}

/// Releases a limiter. NULL does nothing.
///
/// # Safety
/// `limiter` is NULL or a handle from `sluicegate_limiter_new` that has not been
/// freed, and no other thread is using it.
#[no_mangle]
pub unsafe extern "C" fn sluicegate_limiter_free(limiter: *mut sluicegate_limiter) {
    // SAFETY: the export's contract.
    guard_void(|| unsafe { free(limiter) })
}

/// The body of every check and peek export.
///
/// `EXPORT` is a distinct number per export: it gives each its own copy of the
/// panic boundary's closure, which LLVM then inlines into the export with that
/// export's constants (the cost, the time source, check or peek). Shared, the one
/// closure took ~1.4 ns more per call than specialised. What the boundary costs
/// (`cargo bench -p sluicegate-ffi --bench abi`, Zen 4 VM): `c_abi` 9.1 ns
/// against the handle's own type called from Rust (`rust_any`) 6.6 ns and a
/// concrete `TokenBucket` (`rust`) 3.8 ns. The bench once put the whole gap at
/// ~2 ns because criterion's `black_box` charged the Rust side for copying its
/// 40-byte answer.
#[inline(always)]
unsafe fn decide<const CONSUME: bool, const EXPORT: u8>(
    limiter: *const sluicegate_limiter,
    n: u64,
    now: Option<u64>,
    out: *mut sluicegate_decision,
) -> sluicegate_status {
    guard(move || {
        // SAFETY: the export's contract: NULL or a live handle.
        let l = unsafe { borrow(limiter) }?;
        if out.is_null() {
            return Err(SLUICEGATE_ERR_NULL);
        }
        // SAFETY: `out` is non-NULL and valid by the export's contract.
        unsafe { answer(out, l.run(n, now, CONSUME)) }
    })
}

/// Admits one unit now if the limit allows, and charges it; writes the decision
/// to `*out`. A denial is `SLUICEGATE_OK` with `out->allowed == false`.
///
/// # Safety
/// `limiter` is a live handle; `out` is valid for a write.
#[no_mangle]
pub unsafe extern "C" fn sluicegate_limiter_check(
    limiter: *const sluicegate_limiter,
    out: *mut sluicegate_decision,
) -> sluicegate_status {
    // SAFETY: the export's contract.
    unsafe { decide::<true, 1>(limiter, 1, None, out) }
}

/// Admits `n` units now, all-or-nothing; `n = 0` is a peek. An `n` above the
/// limiter's capacity is `SLUICEGATE_ERR_INSUFFICIENT_CAPACITY` (it could never
/// succeed), with a denial written to `*out` whose `limit` is that capacity.
///
/// # Safety
/// `limiter` is a live handle; `out` is valid for a write.
#[no_mangle]
pub unsafe extern "C" fn sluicegate_limiter_check_n(
    limiter: *const sluicegate_limiter,
    n: u64,
    out: *mut sluicegate_decision,
) -> sluicegate_status {
    // SAFETY: the export's contract.
    unsafe { decide::<true, 2>(limiter, n, None, out) }
}

/// `sluicegate_limiter_check` at the caller's time `now_ns` (nanoseconds on the
/// caller's monotonic clock, or from `sluicegate_now_ns`). A time earlier than
/// one already seen counts as no time passing.
///
/// # Safety
/// `limiter` is a live handle; `out` is valid for a write.
#[no_mangle]
pub unsafe extern "C" fn sluicegate_limiter_check_at(
    limiter: *const sluicegate_limiter,
    now_ns: u64,
    out: *mut sluicegate_decision,
) -> sluicegate_status {
    // SAFETY: the export's contract.
    unsafe { decide::<true, 3>(limiter, 1, Some(now_ns), out) }
}

/// `sluicegate_limiter_check_n` at the caller's time `now_ns`.
///
/// # Safety
/// `limiter` is a live handle; `out` is valid for a write.
#[no_mangle]
pub unsafe extern "C" fn sluicegate_limiter_check_n_at(
    limiter: *const sluicegate_limiter,
    n: u64,
    now_ns: u64,
    out: *mut sluicegate_decision,
) -> sluicegate_status {
    // SAFETY: the export's contract.
    unsafe { decide::<true, 4>(limiter, n, Some(now_ns), out) }
}

/// What `sluicegate_limiter_check` would answer now, charging nothing.
///
/// # Safety
/// `limiter` is a live handle; `out` is valid for a write.
#[no_mangle]
pub unsafe extern "C" fn sluicegate_limiter_peek(
    limiter: *const sluicegate_limiter,
    out: *mut sluicegate_decision,
) -> sluicegate_status {
    // SAFETY: the export's contract.
    unsafe { decide::<false, 5>(limiter, 1, None, out) }
}

/// What `sluicegate_limiter_check_n` would answer now, charging nothing.
///
/// # Safety
/// `limiter` is a live handle; `out` is valid for a write.
#[no_mangle]
pub unsafe extern "C" fn sluicegate_limiter_peek_n(
    limiter: *const sluicegate_limiter,
    n: u64,
    out: *mut sluicegate_decision,
) -> sluicegate_status {
    // SAFETY: the export's contract.
    unsafe { decide::<false, 6>(limiter, n, None, out) }
}

/// `sluicegate_limiter_peek` at the caller's time `now_ns`.
///
/// # Safety
/// `limiter` is a live handle; `out` is valid for a write.
#[no_mangle]
pub unsafe extern "C" fn sluicegate_limiter_peek_at(
    limiter: *const sluicegate_limiter,
    now_ns: u64,
    out: *mut sluicegate_decision,
) -> sluicegate_status {
    // SAFETY: the export's contract.
    unsafe { decide::<false, 7>(limiter, 1, Some(now_ns), out) }
}

/// `sluicegate_limiter_peek_n` at the caller's time `now_ns`.
///
/// # Safety
/// `limiter` is a live handle; `out` is valid for a write.
#[no_mangle]
pub unsafe extern "C" fn sluicegate_limiter_peek_n_at(
    limiter: *const sluicegate_limiter,
    n: u64,
    now_ns: u64,
    out: *mut sluicegate_decision,
) -> sluicegate_status {
    // SAFETY: the export's contract.
    unsafe { decide::<false, 8>(limiter, n, Some(now_ns), out) }
}

/// Changes limit `index` (0 for a single limiter) of a live limiter; its state
/// carries over and concurrent checks see the old or the new quota, never a mix.
/// The algorithm, a window's length, the shaper's `max_delay_ns` and the log's
/// capacity cannot change (`SLUICEGATE_ERR_CONFIG_IMMUTABLE`); a config the
/// limiter rejects leaves it unchanged. A shared limiter's parameters are fixed
/// in its region: `SLUICEGATE_ERR_SHARED_FIXED` (open one of the new spec).
///
/// # Safety
/// `limiter` is a live handle; `config` a config with `struct_size` set.
#[no_mangle]
pub unsafe extern "C" fn sluicegate_limiter_set_config(
    limiter: *const sluicegate_limiter,
    index: usize,
    config: *const sluicegate_config,
) -> sluicegate_status {
    guard(|| {
        // SAFETY: the export's contract.
        let l = unsafe { borrow(limiter) }?;
        // SAFETY: the export's contract.
        let limit = unsafe { LimitConfig::read(config) }?;
        l.set_config(index, &limit)
    })
}

/// Forgets all consumption: the limiter is full again. Not available for the
/// sliding log and compound limiters (`SLUICEGATE_ERR_UNSUPPORTED`), nor for a
/// shared limiter (`SLUICEGATE_ERR_SHARED_FIXED`).
///
/// # Safety
/// `limiter` is a live handle.
#[no_mangle]
pub unsafe extern "C" fn sluicegate_limiter_reset(
    limiter: *const sluicegate_limiter,
) -> sluicegate_status {
    guard(|| {
        // SAFETY: the export's contract.
        let l = unsafe { borrow(limiter) }?;
        Ok(l.local()?.reset()?)
    })
}
