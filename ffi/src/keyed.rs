//! `sluicegate_keyed`: one limiter state per client key, in a table of fixed
//! capacity allocated once.

use sluicegate::keyed::{FullPolicy, Group, Keyed};
use sluicegate::{
    Algorithm, Clock, Decision, Fixed, Gcra, InsufficientCapacity, Kind, Leaky, Shaping, Sliding,
};

use crate::boundary::{guard, guard_void};
use crate::config::{sluicegate_config, LimitConfig};
use crate::handle::{borrow, bytes, free, publish, write};
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
    /// Replace the live entry closest to fresh; that key starts over (the default: 0).
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
    /// Live entries replaced under `SLUICEGATE_EVICT_STALEST`.
    pub evicted: u64,
    /// New keys denied under `SLUICEGATE_REJECT`.
    pub rejected: u64,
    /// New keys admitted untracked under `SLUICEGATE_ALLOW_UNLIMITED`.
    pub unlimited: u64,
}

type Hasher = foldhash::fast::SeedableRandomState;
type Table<A> = Keyed<A, Clk, Box<[Group]>, Hasher>;

enum Inner {
    TokenBucket(Table<Gcra>),
    LeakyBucket(Table<Leaky>),
    Shaper(Table<Shaping>),
    FixedWindow(Table<Fixed>),
    SlidingWindow(Table<Sliding>),
}

/// An opaque keyed limiter: one state per key (an IP address, a user id, an API
/// token: any bytes), all under one quota. The table stores a 63-bit keyed-hash
/// fingerprint per key (random seed per table), never the key. Thread-safe;
/// checks take no lock and never allocate. Created by `sluicegate_keyed_new`,
/// owned by the caller, released by `sluicegate_keyed_free`.
pub struct sluicegate_keyed {
    inner: Inner,
    kind: Kind,
}

/// A fresh per-table seed from the OS (through std's SipHash keys), as the core does.
fn hasher() -> Hasher {
    use std::hash::BuildHasher;
    let seed = std::hash::RandomState::new().hash_one(0x5eed_u64);
    foldhash::fast::SeedableRandomState::with_seed(seed, foldhash::SharedSeed::global_random())
}

fn table<A: Algorithm>(
    spec: &LimitConfig,
    capacity: u64,
    policy: FullPolicy,
) -> Result<Table<A>, sluicegate_status> {
    if capacity == 0 {
        return Err(SLUICEGATE_ERR_CONFIG_ZERO);
    }
    if capacity > SLUICEGATE_KEYED_MAX_CAPACITY {
        return Err(SLUICEGATE_ERR_CONFIG_TOO_LARGE);
    }
    // Validate before allocating: a bad quota costs no memory.
    A::params(&spec.quota)?;
    let groups = usize::try_from(capacity.div_ceil(sluicegate::keyed::GROUP_SLOTS as u64))
        .map_err(|_| SLUICEGATE_ERR_CONFIG_TOO_LARGE)?;
    let mut storage: Vec<Group> = Vec::new();
    storage
        .try_reserve_exact(groups)
        .map_err(|_| SLUICEGATE_ERR_ALLOC)?;
    storage.extend((0..groups).map(|_| Group::new()));
    Ok(
        Keyed::with_storage(spec.quota, storage.into_boxed_slice(), hasher(), clock())?
            .with_policy(policy),
    )
}

impl sluicegate_keyed {
    fn new(
        spec: &LimitConfig,
        capacity: u64,
        policy: FullPolicy,
    ) -> Result<Self, sluicegate_status> {
        let inner = match spec.kind {
            Kind::TokenBucket => Inner::TokenBucket(table(spec, capacity, policy)?),
            Kind::LeakyBucket => Inner::LeakyBucket(table(spec, capacity, policy)?),
            Kind::Shaper => Inner::Shaper(
                table::<Shaping>(spec, capacity, policy)?.with_max_delay(spec.max_delay_ns),
            ),
            Kind::FixedWindow => Inner::FixedWindow(table(spec, capacity, policy)?),
            Kind::SlidingWindow => Inner::SlidingWindow(table(spec, capacity, policy)?),
            Kind::SlidingLog => return Err(SLUICEGATE_ERR_UNSUPPORTED),
        };
        Ok(Self {
            inner,
            kind: spec.kind,
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
        let at = now.unwrap_or_else(|| clock().now());
        let plain = |d: Decision| sluicegate_decision::new(d, 0);
        match &self.inner {
            Inner::TokenBucket(t) if consume => t.check_n_at(key, n, at).map(plain),
            Inner::TokenBucket(t) => t.peek_n_at(key, n, at).map(plain),
            Inner::LeakyBucket(t) if consume => t.check_n_at(key, n, at).map(plain),
            Inner::LeakyBucket(t) => t.peek_n_at(key, n, at).map(plain),
            Inner::FixedWindow(t) if consume => t.check_n_at(key, n, at).map(plain),
            Inner::FixedWindow(t) => t.peek_n_at(key, n, at).map(plain),
            Inner::SlidingWindow(t) if consume => t.check_n_at(key, n, at).map(plain),
            Inner::SlidingWindow(t) => t.peek_n_at(key, n, at).map(plain),
            Inner::Shaper(t) if consume => t
                .reserve_n_at(key, n, at)
                .map(|r| sluicegate_decision::new(*r.decision(), r.delay_ns())),
            Inner::Shaper(t) => t.peek_n_at(key, n, at).map(plain),
        }
    }
}

macro_rules! each {
    ($inner:expr, $t:ident => $body:expr) => {
        match $inner {
            Inner::TokenBucket($t) => $body,
            Inner::LeakyBucket($t) => $body,
            Inner::Shaper($t) => $body,
            Inner::FixedWindow($t) => $body,
            Inner::SlidingWindow($t) => $body,
        }
    };
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
        let spec = unsafe { LimitConfig::read(config) }?;
        if spec.kind != k.kind {
            return Err(SLUICEGATE_ERR_CONFIG_IMMUTABLE);
        }
        if let Inner::Shaper(t) = &k.inner {
            if t.params().max_delay_ns() != spec.max_delay_ns {
                return Err(SLUICEGATE_ERR_CONFIG_IMMUTABLE);
            }
        }
        Ok(each!(&k.inner, t => t.set_quota(&spec.quota))?)
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
        each!(&k.inner, t => t.clear());
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
        let (capacity, s) = each!(&k.inner, t => (t.capacity(), t.stats()));
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
        let n = each!(&k.inner, t => t.len_at(now_ns));
        // SAFETY: the export's contract.
        unsafe { write(out, n as u64) }
    })
}
