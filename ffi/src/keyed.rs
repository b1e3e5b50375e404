//! `sluicegate_keyed`: one limiter state per client key, in a table of fixed
//! capacity allocated once.

use sluicegate::keyed::{AnyKeyed, FullPolicy};
use sluicegate::InsufficientCapacity;

use crate::boundary::{guard, guard_void};
use crate::config::sluicegate_config;
use crate::handle::{borrow, bytes, free, publish, write};
use crate::limit::LimitConfig;
use crate::limiter::{answer, clock, sluicegate_decision, Clk};
use crate::status::sluicegate_status::{self, *};

/// The most keys one table may be built for: 2^28 (16 bytes each: 4 GiB).
pub const SLUICEGATE_KEYED_MAX_CAPACITY: u64 = 1 << 28;

/// What a full table does with a new key, passed as a `uint32_t` and checked
/// (`SLUICEGATE_ERR_BAD_POLICY`). A table is full for a key when all 16 slots the
/// key may live in hold live state; slots whose state is back to fresh are
/// reused at any time without changing any decision.
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum sluicegate_full_policy {
    /// Replace the live entry closest to fresh (the default: 0). The evicted
    /// key's state is first folded into the table's eviction sketch (a small
    /// fixed array allocated with the table, at most a quarter byte per slot),
    /// so the key does **not** start over: when it comes back it resumes at least
    /// as limited as it left, and a flood of new keys cannot reset anyone's
    /// limit. The price: a new key whose sketch cells were all written by
    /// recent, still-live evictions starts limited early (rare while the table
    /// has room; see the stats' `evicted`). An algorithm whose states cannot be
    /// merged into the sketch turns the new key away instead, as
    /// `SLUICEGATE_REJECT` does (counted in `rejected`).
    SLUICEGATE_EVICT_STALEST = 0,
    /// Deny the new key until a slot frees up; tracked keys keep their limits exactly.
    SLUICEGATE_REJECT = 1,
    /// Admit the new key without tracking it (availability first).
    SLUICEGATE_ALLOW_UNLIMITED = 2,
}

impl sluicegate_full_policy {
    fn from_u32(v: u32) -> Option<FullPolicy> {
        Some(match v {
            0 => FullPolicy::EvictStalest,
            1 => FullPolicy::Reject,
            2 => FullPolicy::AllowUnlimited,
            _ => return None,
        })
    }
}

/// A keyed table's event counters (monotonic since creation) and size.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct sluicegate_keyed_stats {
    /// Slots: the most keys tracked at once.
    pub capacity: u64,
    /// New keys placed in an empty slot.
    pub inserted: u64,
    /// New keys placed in a slot whose previous key had gone fresh (lossless).
    pub reused: u64,
    /// Live entries replaced under `SLUICEGATE_EVICT_STALEST` (their state kept
    /// in the eviction sketch).
    pub evicted: u64,
    /// New keys denied under `SLUICEGATE_REJECT` (or under
    /// `SLUICEGATE_EVICT_STALEST` when the algorithm's state cannot be kept in
    /// the sketch).
    pub rejected: u64,
    /// New keys admitted untracked under `SLUICEGATE_ALLOW_UNLIMITED`.
    pub unlimited: u64,
}

/// An opaque keyed limiter: one state per key (an IP address, a user id, an API
/// token: any bytes), all under one quota. The table stores a 63-bit keyed-hash
/// fingerprint per key (random seed per table; a shared region's seed for a
/// shared one), never the key. Thread-safe; checks take no lock and never
/// allocate. Created by `sluicegate_keyed_new` or
/// `sluicegate_keyed_open_shared`, owned by the caller, released by
/// `sluicegate_keyed_free`.
pub struct sluicegate_keyed {
    inner: Keyed,
}

/// Where a keyed limiter's states live.
enum Keyed {
    /// A table of this process's, on the library clock.
    Local(AnyKeyed<Clk>),
    /// A shared region, on the region's time base.
    #[cfg(feature = "shared")]
    Shared(sluicegate_shm::SharedKeyed),
}

/// A table's bound on keys, checked: positive, at most
/// `SLUICEGATE_KEYED_MAX_CAPACITY`.
fn keys(capacity: u64) -> Result<usize, sluicegate_status> {
    if capacity == 0 {
        return Err(SLUICEGATE_ERR_CONFIG_ZERO);
    }
    if capacity > SLUICEGATE_KEYED_MAX_CAPACITY {
        return Err(SLUICEGATE_ERR_CONFIG_TOO_LARGE);
    }
    usize::try_from(capacity).map_err(|_| SLUICEGATE_ERR_CONFIG_TOO_LARGE)
}

impl sluicegate_keyed {
    fn new(
        limit: &LimitConfig,
        capacity: u64,
        policy: FullPolicy,
    ) -> Result<Self, sluicegate_status> {
        let capacity = keys(capacity)?;
        // Validated before anything is allocated: a bad quota costs no memory.
        let spec = limit.spec()?;
        Ok(Self {
            inner: Keyed::Local(
                AnyKeyed::with_clock(&spec, capacity, clock())?.with_policy(policy),
            ),
        })
    }

    /// The local table, or `SLUICEGATE_ERR_SHARED_FIXED` for a shared one
    /// (whose parameters are fixed in its region).
    fn local(&self) -> Result<&AnyKeyed<Clk>, sluicegate_status> {
        match &self.inner {
            Keyed::Local(t) => Ok(t),
            #[cfg(feature = "shared")]
            Keyed::Shared(_) => Err(SLUICEGATE_ERR_SHARED_FIXED),
        }
    }

    #[inline(always)]
    fn run(
        &self,
        key: &[u8],
        n: u64,
        now: Option<u64>,
        consume: bool,
    ) -> Result<sluicegate_decision, InsufficientCapacity> {
        match &self.inner {
            Keyed::Local(t) => match (now, consume) {
                (Some(at), true) => t.check_n_at(key, n, at),
                (Some(at), false) => t.peek_n_at(key, n, at),
                (None, true) => t.check_n(key, n),
                (None, false) => t.peek_n(key, n),
            },
            #[cfg(feature = "shared")]
            Keyed::Shared(t) => {
                let at = now.unwrap_or_else(sluicegate_shm::now);
                if consume {
                    t.check_n_at(key, n, at)
                } else {
                    t.peek_n_at(key, n, at)
                }
            }
        }
        .map(sluicegate_decision::of)
    }
}

/// Creates a keyed limiter for at least `capacity` keys (rounded up to a multiple
/// of 8; at most `SLUICEGATE_KEYED_MAX_CAPACITY`), all under `config` (any
/// algorithm except the sliding log), allocated now, once: 16 bytes per key.
/// `full_policy` is a `sluicegate_full_policy` value. On error `*out` is left
/// unchanged; memory that cannot be had is `SLUICEGATE_ERR_ALLOC`.
///
/// # Safety
/// `config` is a config with `struct_size` set; `out` is valid for a write.
#[no_mangle]
pub unsafe extern "C" fn sluicegate_keyed_new(
    config: *const sluicegate_config,
    capacity: u64,
    full_policy: u32,
    out: *mut *mut sluicegate_keyed,
) -> sluicegate_status {
    guard(|| {
        if out.is_null() {
            return Err(SLUICEGATE_ERR_NULL);
        }
        // SAFETY: the export's contract.
        let spec = unsafe { LimitConfig::read(config) }?;
        let policy =
            sluicegate_full_policy::from_u32(full_policy).ok_or(SLUICEGATE_ERR_BAD_POLICY)?;
        let keyed = sluicegate_keyed::new(&spec, capacity, policy)?;
        // SAFETY: `out` is non-NULL and valid for a write.
        unsafe { publish(out, keyed) }
    })
}

/// Opens a keyed limiter in the shared-memory region `name`: one state per key
/// for **every process** that opens the same `config` and `max_keys` in the same
/// region (a pre-fork server's workers), and stores the new handle in `*out`.
/// A key is hashed by the region's documented hash (XXH3-64 of its bytes with the
/// region's seed), so it lands on one state from every process and language.
///
/// * `name`, `options`, `err`: as in `sluicegate_limiter_open_shared`.
/// * `config`: any algorithm except the sliding log (`SLUICEGATE_ERR_UNSUPPORTED`).
/// * `max_keys`: the most live keys this limiter holds in the region (1 to
///   `SLUICEGATE_KEYED_MAX_CAPACITY`); part of the limit's identity. Its slots
///   are the region's, shared with its other limits.
/// * `full_policy`: a `sluicegate_full_policy` value, this process's choice for
///   a new key that finds no room.
///
/// The handle works with every `sluicegate_keyed_*` check and peek (the `_at`
/// calls take nanoseconds of `sluicegate_shared_now_ns`); `get_stats`, `len_at`
/// and `clear` report and act on the region, every process's keys.
/// `sluicegate_keyed_set_config` is `SLUICEGATE_ERR_SHARED_FIXED`. The errors are
/// those of `sluicegate_limiter_open_shared`; on error `*out` is unchanged.
///
/// # Safety
/// `name` points to `name_len` readable bytes; `options` is NULL or a
/// `sluicegate_shared_options` with `struct_size` set; `config` a config with
/// `struct_size` set; `err` is NULL or valid for writes of `err_cap` bytes;
/// `out` is valid for a write.
#[cfg(feature = "shared")]
#[no_mangle]
pub unsafe extern "C" fn sluicegate_keyed_open_shared(
    name: *const core::ffi::c_char,
    name_len: usize,
    options: *const crate::shared::sluicegate_shared_options,
    config: *const sluicegate_config,
    max_keys: u64,
    full_policy: u32,
    err: *mut core::ffi::c_char,
    err_cap: usize,
    out: *mut *mut sluicegate_keyed,
) -> sluicegate_status {
    // SAFETY: the export's contract.
    unsafe {
        crate::shared::with_message(err, err_cap, || {
            if out.is_null() {
                return Err(SLUICEGATE_ERR_NULL.into());
            }
            // Everything the caller gave is checked before a file is made.
            let limit = LimitConfig::read(config)?;
            let policy =
                sluicegate_full_policy::from_u32(full_policy).ok_or(SLUICEGATE_ERR_BAD_POLICY)?;
            let max_keys = keys(max_keys)?;
            let spec = limit.spec()?;
            let region = crate::shared::open(name, name_len, options)?;
            let table = region.keyed(&spec, max_keys)?.with_policy(policy);
            Ok(publish(
                out,
                sluicegate_keyed {
                    inner: Keyed::Shared(table),
                },
            )?)
        })
    }
}

/// Releases a keyed limiter. NULL does nothing.
///
/// # Safety
/// `keyed` is NULL or a handle from `sluicegate_keyed_new` that has not been
/// freed, and no other thread is using it.
#[no_mangle]
pub unsafe extern "C" fn sluicegate_keyed_free(keyed: *mut sluicegate_keyed) {
    // SAFETY: the export's contract.
    guard_void(|| unsafe { free(keyed) })
}

/// The body of every check and peek export; `EXPORT` gives each export its own
/// inlined copy (see `limiter.rs`).
#[inline(always)]
unsafe fn decide<const CONSUME: bool, const EXPORT: u8>(
    keyed: *const sluicegate_keyed,
    key: *const u8,
    key_len: usize,
    n: u64,
    now: Option<u64>,
    out: *mut sluicegate_decision,
) -> sluicegate_status {
    guard(move || {
        // SAFETY: the export's contract: NULL or a live handle.
        let k = unsafe { borrow(keyed) }?;
        // SAFETY: the export's contract: `key` is valid for `key_len` bytes.
        let key = unsafe { bytes(key, key_len) }?;
        if out.is_null() {
            return Err(SLUICEGATE_ERR_NULL);
        }
        if key.is_empty() {
            return Err(SLUICEGATE_ERR_EMPTY_KEY);
        }
        // SAFETY: `out` is non-NULL and valid by the export's contract.
        unsafe { answer(out, k.run(key, n, now, CONSUME)) }
    })
}

/// Admits one unit for the key (`key_len` bytes at `key`, not NUL-terminated;
/// length 0 is `SLUICEGATE_ERR_EMPTY_KEY`) now, and charges it.
///
/// # Safety
/// `keyed` is a live handle; `key` points to `key_len` readable bytes; `out` is
/// valid for a write.
#[no_mangle]
pub unsafe extern "C" fn sluicegate_keyed_check(
    keyed: *const sluicegate_keyed,
    key: *const u8,
    key_len: usize,
    out: *mut sluicegate_decision,
) -> sluicegate_status {
    // SAFETY: the export's contract.
    unsafe { decide::<true, 1>(keyed, key, key_len, 1, None, out) }
}

/// Admits `n` units for the key now, all-or-nothing (see `sluicegate_limiter_check_n`).
///
/// # Safety
/// As `sluicegate_keyed_check`.
#[no_mangle]
pub unsafe extern "C" fn sluicegate_keyed_check_n(
    keyed: *const sluicegate_keyed,
    key: *const u8,
    key_len: usize,
    n: u64,
    out: *mut sluicegate_decision,
) -> sluicegate_status {
    // SAFETY: the export's contract.
    unsafe { decide::<true, 2>(keyed, key, key_len, n, None, out) }
}

/// `sluicegate_keyed_check` at the caller's time `now_ns`.
///
/// # Safety
/// As `sluicegate_keyed_check`.
#[no_mangle]
pub unsafe extern "C" fn sluicegate_keyed_check_at(
    keyed: *const sluicegate_keyed,
    key: *const u8,
    key_len: usize,
    now_ns: u64,
    out: *mut sluicegate_decision,
) -> sluicegate_status {
    // SAFETY: the export's contract.
    unsafe { decide::<true, 3>(keyed, key, key_len, 1, Some(now_ns), out) }
}

/// `sluicegate_keyed_check_n` at the caller's time `now_ns`.
///
/// # Safety
/// As `sluicegate_keyed_check`.
#[no_mangle]
pub unsafe extern "C" fn sluicegate_keyed_check_n_at(
    keyed: *const sluicegate_keyed,
    key: *const u8,
    key_len: usize,
    n: u64,
    now_ns: u64,
    out: *mut sluicegate_decision,
) -> sluicegate_status {
    // SAFETY: the export's contract.
    unsafe { decide::<true, 4>(keyed, key, key_len, n, Some(now_ns), out) }
}

/// What `sluicegate_keyed_check` would answer now, charging nothing and placing
/// no new key.
///
/// # Safety
/// As `sluicegate_keyed_check`.
#[no_mangle]
pub unsafe extern "C" fn sluicegate_keyed_peek(
    keyed: *const sluicegate_keyed,
    key: *const u8,
    key_len: usize,
    out: *mut sluicegate_decision,
) -> sluicegate_status {
    // SAFETY: the export's contract.
    unsafe { decide::<false, 5>(keyed, key, key_len, 1, None, out) }
}

/// What `sluicegate_keyed_check_n` would answer now, charging nothing.
///
/// # Safety
/// As `sluicegate_keyed_check`.
#[no_mangle]
pub unsafe extern "C" fn sluicegate_keyed_peek_n(
    keyed: *const sluicegate_keyed,
    key: *const u8,
    key_len: usize,
    n: u64,
    out: *mut sluicegate_decision,
) -> sluicegate_status {
    // SAFETY: the export's contract.
    unsafe { decide::<false, 6>(keyed, key, key_len, n, None, out) }
}

/// `sluicegate_keyed_peek` at the caller's time `now_ns`.
///
/// # Safety
/// As `sluicegate_keyed_check`.
#[no_mangle]
pub unsafe extern "C" fn sluicegate_keyed_peek_at(
    keyed: *const sluicegate_keyed,
    key: *const u8,
    key_len: usize,
    now_ns: u64,
    out: *mut sluicegate_decision,
) -> sluicegate_status {
    // SAFETY: the export's contract.
    unsafe { decide::<false, 7>(keyed, key, key_len, 1, Some(now_ns), out) }
}

/// `sluicegate_keyed_peek_n` at the caller's time `now_ns`.
///
/// # Safety
/// As `sluicegate_keyed_check`.
#[no_mangle]
pub unsafe extern "C" fn sluicegate_keyed_peek_n_at(
    keyed: *const sluicegate_keyed,
    key: *const u8,
    key_len: usize,
    n: u64,
    now_ns: u64,
    out: *mut sluicegate_decision,
) -> sluicegate_status {
    // SAFETY: the export's contract.
    unsafe { decide::<false, 8>(keyed, key, key_len, n, Some(now_ns), out) }
}

/// Changes the quota of every key at once; states carry over. The algorithm,
/// a window's length and the shaper's `max_delay_ns` cannot change
/// (`SLUICEGATE_ERR_CONFIG_IMMUTABLE`); a rejected config changes nothing. A
/// shared table's parameters are fixed in its region:
/// `SLUICEGATE_ERR_SHARED_FIXED` (open one of the new spec).
///
/// # Safety
/// `keyed` is a live handle; `config` a config with `struct_size` set.
#[no_mangle]
pub unsafe extern "C" fn sluicegate_keyed_set_config(
    keyed: *const sluicegate_keyed,
    config: *const sluicegate_config,
) -> sluicegate_status {
    guard(|| {
        // SAFETY: the export's contract.
        let k = unsafe { borrow(keyed) }?.local()?;
        // SAFETY: the export's contract.
        let limit = unsafe { LimitConfig::read(config) }?;
        let current = k.spec();
        if limit.kind != current.kind() || limit.max_delay_ns != current.max_delay_ns() {
            return Err(SLUICEGATE_ERR_CONFIG_IMMUTABLE);
        }
        Ok(k.set_spec(&limit.spec()?)?)
    })
}

/// Forgets every key (of every process, for a shared table). Not atomic with
/// concurrent checks (each slot is cleared on its own).
///
/// # Safety
/// `keyed` is a live handle.
#[no_mangle]
pub unsafe extern "C" fn sluicegate_keyed_clear(
    keyed: *const sluicegate_keyed,
) -> sluicegate_status {
    guard(|| {
        // SAFETY: the export's contract.
        match &unsafe { borrow(keyed) }?.inner {
            Keyed::Local(k) => k.clear(),
            #[cfg(feature = "shared")]
            Keyed::Shared(k) => k.clear(),
        }
        Ok(())
    })
}

/// Writes the table's capacity and event counters to `*out` (for a shared
/// table, the region's: every process's events, and the most live keys it
/// holds).
///
/// # Safety
/// `keyed` is a live handle; `out` is valid for a write.
#[no_mangle]
pub unsafe extern "C" fn sluicegate_keyed_get_stats(
    keyed: *const sluicegate_keyed,
    out: *mut sluicegate_keyed_stats,
) -> sluicegate_status {
    guard(|| {
        // SAFETY: the export's contract.
        let k = unsafe { borrow(keyed) }?;
        let (capacity, s) = match &k.inner {
            Keyed::Local(t) => (t.capacity(), t.stats()),
            #[cfg(feature = "shared")]
            Keyed::Shared(t) => (t.capacity(), t.stats()),
        };
        let stats = sluicegate_keyed_stats {
            capacity: capacity as u64,
            inserted: s.inserted,
            reused: s.reused,
            evicted: s.evicted,
            rejected: s.rejected,
            unlimited: s.unlimited,
        };
        // SAFETY: the export's contract.
        unsafe { write(out, stats) }
    })
}

/// Writes to `*out` how many keys hold live (non-fresh) state at `now_ns`: a scan
/// of the whole table, O(capacity); for monitoring, not for the request path.
/// For a shared table: every process's keys, at `now_ns` of
/// `sluicegate_shared_now_ns`.
///
/// # Safety
/// `keyed` is a live handle; `out` is valid for a write.
#[no_mangle]
pub unsafe extern "C" fn sluicegate_keyed_len_at(
    keyed: *const sluicegate_keyed,
    now_ns: u64,
    out: *mut u64,
) -> sluicegate_status {
    guard(|| {
        // SAFETY: the export's contract.
        let k = unsafe { borrow(keyed) }?;
        if out.is_null() {
            return Err(SLUICEGATE_ERR_NULL);
        }
        let n = match &k.inner {
            Keyed::Local(t) => t.len_at(now_ns),
            #[cfg(feature = "shared")]
            Keyed::Shared(t) => t.len_at(now_ns),
        };
        // SAFETY: the export's contract.
        unsafe { write(out, n as u64) }
    })
}
