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
/// fingerprint per key (random seed per table), never the key. Thread-safe;
/// checks take no lock and never allocate. Created by `sluicegate_keyed_new`,
/// owned by the caller, released by `sluicegate_keyed_free`.
pub struct sluicegate_keyed {
    inner: AnyKeyed<Clk>,
}

impl sluicegate_keyed {
    fn new(
        limit: &LimitConfig,
        capacity: u64,
        policy: FullPolicy,
    ) -> Result<Self, sluicegate_status> {
        if capacity == 0 {
            return Err(SLUICEGATE_ERR_CONFIG_ZERO);
        }
        if capacity > SLUICEGATE_KEYED_MAX_CAPACITY {
            return Err(SLUICEGATE_ERR_CONFIG_TOO_LARGE);
        }
        let capacity = usize::try_from(capacity).map_err(|_| SLUICEGATE_ERR_CONFIG_TOO_LARGE)?;
        // Validated before anything is allocated: a bad quota costs no memory.
        let spec = limit.spec()?;
        Ok(Self {
            inner: AnyKeyed::with_clock(&spec, capacity, clock())?.with_policy(policy),
        })
    }

    #[inline(always)]
    fn run(
        &self,
        key: &[u8],
        n: u64,
        now: Option<u64>,
        consume: bool,
    ) -> Result<sluicegate_decision, InsufficientCapacity> {
        let t = &self.inner;
        match (now, consume) {
            (Some(at), true) => t.check_n_at(key, n, at),
            (Some(at), false) => t.peek_n_at(key, n, at),
            (None, true) => t.check_n(key, n),
            (None, false) => t.peek_n(key, n),
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
/// (`SLUICEGATE_ERR_CONFIG_IMMUTABLE`); a rejected config changes nothing.
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
        let k = unsafe { borrow(keyed) }?;
        // SAFETY: the export's contract.
        let limit = unsafe { LimitConfig::read(config) }?;
        let current = k.inner.spec();
        if limit.kind != current.kind() || limit.max_delay_ns != current.max_delay_ns() {
            return Err(SLUICEGATE_ERR_CONFIG_IMMUTABLE);
        }
        Ok(k.inner.set_spec(&limit.spec()?)?)
    })
}

/// Forgets every key. Not atomic with concurrent checks (each slot is cleared
/// on its own).
///
/// # Safety
/// `keyed` is a live handle.
#[no_mangle]
pub unsafe extern "C" fn sluicegate_keyed_clear(
    keyed: *const sluicegate_keyed,
) -> sluicegate_status {
    guard(|| {
        // SAFETY: the export's contract.
        let k = unsafe { borrow(keyed) }?;
        k.inner.clear();
        Ok(())
    })
}

/// Writes the table's capacity and event counters to `*out`.
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
        let (capacity, s) = (k.inner.capacity(), k.inner.stats());
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
        let n = k.inner.len_at(now_ns);
        // SAFETY: the export's contract.
        unsafe { write(out, n as u64) }
    })
}
