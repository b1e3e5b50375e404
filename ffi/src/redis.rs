//! `sluicegate_redis`: one limit shared by every process and host that names it,
//! its state in Redis, Valkey or Redis Cluster (the `sluicegate-redis` crate,
//! driven through its blocking API). Built with the `redis` feature, on by default.
//!
//! # Unlike the local handles, these calls block
//! A check is a network round trip (one `EVALSHA` of the limit's Lua script),
//! bounded by the configured timeouts: at most `connect_timeout_ns` to
//! (re)connect, when there is no live connection, plus `timeout_ns` for the call
//! (25 ms and 50 ms by default). It allocates and makes system calls. Past a
//! timeout, on an error or while the circuit breaker is open, the configured
//! failure policy answers instead (`SLUICEGATE_OK`, and `*source` says who
//! decided); with the breaker open no network is touched at all. So:
//! * call it from worker threads, or accept a bounded stall of an event loop;
//! * not from a thread that is running a Tokio runtime (a Rust host's async
//!   task): that is a caught panic, `SLUICEGATE_ERR_PANIC`;
//! * create handles after `fork()` (in each worker of a pre-forking server):
//!   each owns one I/O thread, which a forked child does not inherit, so a
//!   handle made before the fork must not be used in the child.
//!
//! Any number of threads may check one handle at once: their calls share one
//! multiplexed connection and are pipelined on it. Make one handle per limit and
//! share it; do not make one per request.
//!
//! # Keys are text
//! A key is `key_len` bytes, not NUL-terminated, and must be valid UTF-8
//! (`SLUICEGATE_ERR_NOT_UTF8` otherwise): the Redis key is
//! `{prefix}{name}:{algorithm}:{<key>}`, the same one the Rust and Python clients of the same
//! limit use, so they all share its state. Encode a binary key (an IPv4 address
//! as 4 bytes) as text first, the same way in every client (dotted quad, hex).

use core::ffi::{c_char, CStr};
use core::time::Duration;

use ::sluicegate_redis::blocking::RedisLimiter;
use ::sluicegate_redis::{Backend, Config, Error, FailurePolicy, Limit, Source};

use crate::boundary::{guard, guard_void};
use crate::config::sluicegate_config;
use crate::handle::{borrow, bytes, free, publish, read_versioned, write};
use crate::keyed::SLUICEGATE_KEYED_MAX_CAPACITY;
use crate::limit::LimitConfig;
use crate::limiter::{answer, sluicegate_decision};
use crate::status::sluicegate_status::{self, *};

/// `timeout_ns` when 0: the longest one call to Redis may take (25 ms).
pub const SLUICEGATE_REDIS_DEFAULT_TIMEOUT_NS: u64 = 25_000_000;
/// `connect_timeout_ns` when 0: the longest (re)connecting may take (50 ms).
pub const SLUICEGATE_REDIS_DEFAULT_CONNECT_TIMEOUT_NS: u64 = 50_000_000;
/// `breaker_failure_threshold` when 0: consecutive failures that open the
/// circuit (3).
pub const SLUICEGATE_REDIS_DEFAULT_FAILURE_THRESHOLD: u32 = 3;
/// `breaker_cooldown_ns` when 0: how long an open circuit stays open (500 ms).
pub const SLUICEGATE_REDIS_DEFAULT_COOLDOWN_NS: u64 = 500_000_000;
/// `local_share_percent` when 0 under `SLUICEGATE_FAIL_LOCAL` (10%).
pub const SLUICEGATE_REDIS_DEFAULT_LOCAL_SHARE_PERCENT: u32 = 10;
/// `fallback_keys` when 0 under `SLUICEGATE_FAIL_LOCAL` (10000 keys).
pub const SLUICEGATE_REDIS_DEFAULT_FALLBACK_KEYS: u64 = 10_000;

/// What a check answers while Redis is unavailable (an error, a timeout, or an
/// open circuit breaker). Passed as a `uint32_t`
/// (`sluicegate_redis_config.failure_policy`) and checked: any other value is
/// `SLUICEGATE_ERR_BAD_FAILURE_POLICY`.
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum sluicegate_failure_policy {
    /// A local limiter per key (a bounded keyed table of `fallback_keys` keys, the
    /// same algorithm) holding `local_share_percent`% of the quota, rate and
    /// burst: with N processes at 100/N% the fleet admits about the global quota.
    /// The default (0).
    SLUICEGATE_FAIL_LOCAL = 0,
    /// Admit everything (availability over the limit); `remaining` reads 0.
    SLUICEGATE_FAIL_OPEN = 1,
    /// Deny everything (the limit over availability); `retry_after_ns` is the
    /// breaker's cooldown.
    SLUICEGATE_FAIL_CLOSED = 2,
}

/// Who decided a Redis check, written as a `uint32_t` to the `source` argument
/// of `sluicegate_redis_check` and `sluicegate_redis_peek`. New values may be
/// added; treat an unknown one like a failure policy's answer.
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum sluicegate_source {
    /// The limit's script on Redis: the shared, authoritative decision.
    SLUICEGATE_SOURCE_REDIS = 0,
    /// Redis unavailable, `SLUICEGATE_FAIL_OPEN`: admitted.
    SLUICEGATE_SOURCE_FAIL_OPEN = 1,
    /// Redis unavailable, `SLUICEGATE_FAIL_CLOSED`: denied.
    SLUICEGATE_SOURCE_FAIL_CLOSED = 2,
    /// Redis unavailable, `SLUICEGATE_FAIL_LOCAL`: this process's share decided.
    SLUICEGATE_SOURCE_LOCAL_FALLBACK = 3,
    /// Reserved for the hybrid mode (units spent from a local lease of Redis
    /// units); a `sluicegate_redis` never reports it.
    SLUICEGATE_SOURCE_LEASE = 4,
    /// Reserved for the hybrid mode (denied locally after a Redis denial); a
    /// `sluicegate_redis` never reports it.
    SLUICEGATE_SOURCE_LOCAL_DENIAL = 5,
}

impl From<Source> for sluicegate_source {
    fn from(s: Source) -> Self {
        use sluicegate_source::*;
        match s {
            Source::Redis => SLUICEGATE_SOURCE_REDIS,
            Source::FailOpen => SLUICEGATE_SOURCE_FAIL_OPEN,
            Source::FailClosed => SLUICEGATE_SOURCE_FAIL_CLOSED,
            Source::LocalFallback => SLUICEGATE_SOURCE_LOCAL_FALLBACK,
            Source::Lease => SLUICEGATE_SOURCE_LEASE,
            Source::LocalDenial => SLUICEGATE_SOURCE_LOCAL_DENIAL,
        }
    }
}

/// How a `sluicegate_redis` talks to Redis and what it answers without it. Pass
/// NULL for every default, or zero the struct, set `struct_size =
/// sizeof(sluicegate_redis_config)`, and set what you need; **0 means the
/// default** in every field (the `SLUICEGATE_REDIS_DEFAULT_*` values):
///
/// ```c
/// sluicegate_redis_config rc = { .struct_size = sizeof rc,
///                                .failure_policy = SLUICEGATE_FAIL_CLOSED,
///                                .timeout_ns = 10000000 };  // 10 ms
/// ```
///
/// Versioned like `sluicegate_config` (see the crate docs).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct sluicegate_redis_config {
    /// `sizeof(sluicegate_redis_config)` as the caller was compiled.
    pub struct_size: u32,
    /// A `sluicegate_failure_policy` value (0: `SLUICEGATE_FAIL_LOCAL`).
    pub failure_policy: u32,
    /// A NUL-terminated UTF-8 string put before every Redis key; NULL:
    /// `"sluicegate:"` (an empty string is a valid prefix: none). It must not
    /// contain `{` (the key's hash tag follows it): `SLUICEGATE_ERR_CONFIG_INVALID`.
    /// Read during `sluicegate_redis_new` only.
    pub prefix: *const c_char,
    /// The longest one call to Redis may take, in ns; past it the call counts as
    /// failed, is never replayed, and the failure policy answers. 0: 25 ms.
    pub timeout_ns: u64,
    /// The longest (re)connecting may take, in ns. 0: 50 ms.
    pub connect_timeout_ns: u64,
    /// `SLUICEGATE_FAIL_LOCAL` only: this process's share of the quota in percent,
    /// 1 to 100 (more is `SLUICEGATE_ERR_CONFIG_TOO_LARGE`); 0: 10. Must be 0
    /// under the other policies (`SLUICEGATE_ERR_CONFIG_INVALID`).
    pub local_share_percent: u32,
    /// Consecutive failed calls that open the circuit breaker (Redis then is not
    /// asked for `breaker_cooldown_ns`). 0: 3. `UINT32_MAX`: it never opens.
    pub breaker_failure_threshold: u32,
    /// How long an open circuit stays open before one probe call is let through,
    /// in ns; also `retry_after_ns` of a `SLUICEGATE_FAIL_CLOSED` denial. 0: 500 ms.
    pub breaker_cooldown_ns: u64,
    /// `SLUICEGATE_FAIL_LOCAL` only: keys the local fallback table holds (16 bytes
    /// each, allocated by `sluicegate_redis_new`; at least 16, at most
    /// `SLUICEGATE_KEYED_MAX_CAPACITY`); 0: 10000. Must be 0 under the other
    /// policies (`SLUICEGATE_ERR_CONFIG_INVALID`).
    pub fallback_keys: u64,
}

impl Default for sluicegate_redis_config {
    /// Every default, with `struct_size` set.
    fn default() -> Self {
        Self {
            struct_size: core::mem::size_of::<Self>() as u32,
            failure_policy: sluicegate_failure_policy::SLUICEGATE_FAIL_LOCAL as u32,
            prefix: core::ptr::null(),
            timeout_ns: 0,
            connect_timeout_ns: 0,
            local_share_percent: 0,
            breaker_failure_threshold: 0,
            breaker_cooldown_ns: 0,
            fallback_keys: 0,
        }
    }
}

/// An opaque Redis-backed limiter: one limit (`name`) applied per key, its state
/// in Redis, shared by every client of the same server, prefix and name.
/// Thread-safe; its calls **block** for a bounded network round trip (see
/// `sluicegate_redis_check`). Created by `sluicegate_redis_new`, owned by the
/// caller, released by `sluicegate_redis_free`.
pub struct sluicegate_redis {
    inner: RedisLimiter,
}

/// A NUL-terminated UTF-8 string of the caller's.
///
/// # Safety
/// `p` is non-NULL and points to a NUL-terminated string.
unsafe fn text<'a>(p: *const c_char) -> Result<&'a str, sluicegate_status> {
    // SAFETY: the caller's contract.
    unsafe { CStr::from_ptr(p) }
        .to_str()
        .map_err(|_| SLUICEGATE_ERR_NOT_UTF8)
}

/// The status of a `sluicegate-redis` error: a bad URL; the core's error about
/// the limit itself (its own status) or an allocation that failed; any other
/// configuration error (valid locally, not on Redis: a resolution or bound of the
/// scripts, a local fallback share that is no valid limit); a per-key data error.
fn status(e: Error) -> sluicegate_status {
    use sluicegate::SpecError;
    match e {
        Error::Config(c) if c.field() == "url" => SLUICEGATE_ERR_BAD_URL,
        Error::Config(c) => match c.spec_error() {
            Some(s @ SpecError::Alloc { .. }) => (*s).into(),
            Some(s) if c.field() == "spec" => (*s).into(),
            _ => SLUICEGATE_ERR_CONFIG_RESOLUTION,
        },
        Error::Capacity(_) => SLUICEGATE_ERR_INSUFFICIENT_CAPACITY,
        Error::Data(_) | Error::Reply(_) => SLUICEGATE_ERR_REDIS_DATA,
        // Redis being unavailable is the failure policy's to answer; the checks
        // never return it. Anything else has no more specific code.
        _ => SLUICEGATE_ERR_SYSTEM,
    }
}

/// A zero field is the default.
fn or_default<T: PartialEq + Default>(v: T, default: T) -> T {
    if v == T::default() {
        default
    } else {
        v
    }
}

/// The `sluicegate-redis` settings of a caller's (size-checked) struct.
///
/// # Safety
/// `c.prefix` is NULL or a NUL-terminated string.
unsafe fn settings(c: &sluicegate_redis_config) -> Result<Config, sluicegate_status> {
    use sluicegate_failure_policy::*;
    let mut cfg = Config::default();
    let policy = match c.failure_policy {
        p if p == SLUICEGATE_FAIL_LOCAL as u32 => SLUICEGATE_FAIL_LOCAL,
        p if p == SLUICEGATE_FAIL_OPEN as u32 => SLUICEGATE_FAIL_OPEN,
        p if p == SLUICEGATE_FAIL_CLOSED as u32 => SLUICEGATE_FAIL_CLOSED,
        _ => return Err(SLUICEGATE_ERR_BAD_FAILURE_POLICY),
    };
    cfg.policy = match policy {
        SLUICEGATE_FAIL_LOCAL => {
            let share = or_default(
                c.local_share_percent,
                SLUICEGATE_REDIS_DEFAULT_LOCAL_SHARE_PERCENT,
            );
            let keys = or_default(c.fallback_keys, SLUICEGATE_REDIS_DEFAULT_FALLBACK_KEYS);
            if share > 100 || keys > SLUICEGATE_KEYED_MAX_CAPACITY {
                return Err(SLUICEGATE_ERR_CONFIG_TOO_LARGE);
            }
            cfg.fallback_keys =
                usize::try_from(keys).map_err(|_| SLUICEGATE_ERR_CONFIG_TOO_LARGE)?;
            FailurePolicy::Local {
                share_percent: share as u8,
            }
        }
        _ if c.local_share_percent != 0 || c.fallback_keys != 0 => {
            return Err(SLUICEGATE_ERR_CONFIG_INVALID)
        }
        SLUICEGATE_FAIL_OPEN => FailurePolicy::Open,
        SLUICEGATE_FAIL_CLOSED => FailurePolicy::Closed,
    };
    let ns = |v: u64, default: u64| Duration::from_nanos(or_default(v, default));
    cfg.timeout = ns(c.timeout_ns, SLUICEGATE_REDIS_DEFAULT_TIMEOUT_NS);
    cfg.connect_timeout = ns(
        c.connect_timeout_ns,
        SLUICEGATE_REDIS_DEFAULT_CONNECT_TIMEOUT_NS,
    );
    cfg.breaker.failure_threshold = or_default(
        c.breaker_failure_threshold,
        SLUICEGATE_REDIS_DEFAULT_FAILURE_THRESHOLD,
    );
    cfg.breaker.cooldown = ns(c.breaker_cooldown_ns, SLUICEGATE_REDIS_DEFAULT_COOLDOWN_NS);
    if !c.prefix.is_null() {
        // SAFETY: non-NULL, NUL-terminated by the caller's contract.
        let prefix = unsafe { text(c.prefix) }?;
        if prefix.contains('{') {
            return Err(SLUICEGATE_ERR_CONFIG_INVALID);
        }
        prefix.clone_into(&mut cfg.prefix);
    }
    Ok(cfg)
}

/// The Redis limit of a validated config; a kind without a Redis script (the
/// sliding log: see `Caps::redis`) is unsupported.
fn redis_limit(spec: &LimitConfig) -> Result<Limit, sluicegate_status> {
    if !spec.kind.caps().redis {
        return Err(SLUICEGATE_ERR_UNSUPPORTED);
    }
    Limit::from_parts(spec.kind, spec.quota, spec.max_delay_ns).map_err(status)
}

/// The backend of a URL, every node's URL parsed as the connection will parse
/// it (sluicegate-redis checks only the scheme, and connects on the first check).
fn backend(url: &str) -> Result<Backend, sluicegate_status> {
    use ::redis::IntoConnectionInfo as _;
    let backend = Backend::from_url(url).map_err(|_| SLUICEGATE_ERR_BAD_URL)?;
    let nodes = match &backend {
        Backend::Standalone(u) => core::slice::from_ref(u),
        Backend::Cluster(nodes) => nodes.as_slice(),
        _ => &[],
    };
    for node in nodes {
        if node.starts_with("rediss://") && !cfg!(feature = "redis-tls") {
            return Err(SLUICEGATE_ERR_UNSUPPORTED);
        }
        node.as_str()
            .into_connection_info()
            .map_err(|_| SLUICEGATE_ERR_BAD_URL)?;
    }
    Ok(backend)
}

/// Creates a Redis-backed limiter and stores the new handle in `*out`.
///
/// * `url`: `redis://[user:pass@]host[:port][/db]`, `unix:///path/to/socket`,
///   `redis+cluster://host:port[,host:port…]` (seed nodes of a Redis Cluster),
///   or with the `redis-tls` build feature `rediss://…` / `rediss+cluster://…`
///   (`SLUICEGATE_ERR_UNSUPPORTED` without it). Malformed:
///   `SLUICEGATE_ERR_BAD_URL`. The server is not contacted here: it connects on
///   the first check, so an unreachable server is no error (the failure policy
///   answers the checks until it is back).
/// * `name`: the limit's name, part of every Redis key
///   (`{prefix}{name}:{algorithm}:{key}`);
///   every client (C, Rust, Python) of the same server, prefix and name shares
///   one state per key. UTF-8, without `{` (`SLUICEGATE_ERR_CONFIG_INVALID`).
/// * `limit`: a `sluicegate_config` as for `sluicegate_limiter_new`: any
///   algorithm but `SLUICEGATE_SLIDING_LOG` (Redis has no sliding log:
///   `SLUICEGATE_ERR_UNSUPPORTED`). Times on Redis are whole microseconds (its
///   `TIME`): a bucket's emission interval is rounded up to one, a shaper's max
///   delay down, a window must be a whole number of them
///   (`SLUICEGATE_ERR_CONFIG_RESOLUTION`, also for values past 2^52 µs).
/// * `cfg`: timeouts, circuit breaker and failure policy; NULL for the defaults.
///
/// Allocates the handle, its I/O thread and, under `SLUICEGATE_FAIL_LOCAL`, the
/// local fallback table. On error `*out` is left unchanged.
///
/// # Safety
/// `url` and `name` are NUL-terminated strings; `limit` a config with
/// `struct_size` set; `cfg` NULL or a `sluicegate_redis_config` with
/// `struct_size` set whose `prefix` is NULL or a NUL-terminated string; `out` is
/// valid for a write.
#[no_mangle]
pub unsafe extern "C" fn sluicegate_redis_new(
    url: *const c_char,
    name: *const c_char,
    limit: *const sluicegate_config,
    cfg: *const sluicegate_redis_config,
    out: *mut *mut sluicegate_redis,
) -> sluicegate_status {
    guard(|| {
        if url.is_null() || name.is_null() || out.is_null() {
            return Err(SLUICEGATE_ERR_NULL);
        }
        // SAFETY: the export's contract.
        let spec = unsafe { LimitConfig::read(limit) }?;
        let settings = if cfg.is_null() {
            Config::default()
        } else {
            // SAFETY: the export's contract; the struct is integers and a pointer.
            let c = unsafe { read_versioned(cfg) }?;
            // SAFETY: `c.prefix` is NULL or NUL-terminated (the export's contract).
            unsafe { settings(&c) }?
        };
        // SAFETY: non-NULL, NUL-terminated by the export's contract.
        let url = unsafe { text(url) }?;
        // SAFETY: as above.
        let name = unsafe { text(name) }?;
        if name.contains('{') {
            return Err(SLUICEGATE_ERR_CONFIG_INVALID);
        }
        let backend = backend(url)?;
        let limit = redis_limit(&spec)?;
        let inner = RedisLimiter::new(backend, name, limit, settings).map_err(status)?;
        // SAFETY: `out` is non-NULL and valid for a write.
        unsafe { publish(out, sluicegate_redis { inner }) }
    })
}

/// Releases a Redis limiter: closes its connection and stops and joins its I/O
/// thread. NULL does nothing. The state in Redis stays (each key expires on its
/// own once it would decide like an absent one).
///
/// # Safety
/// `redis` is NULL or a handle from `sluicegate_redis_new` that has not been
/// freed, and no other thread is using it.
#[no_mangle]
pub unsafe extern "C" fn sluicegate_redis_free(redis: *mut sluicegate_redis) {
    // SAFETY: the export's contract.
    guard_void(|| unsafe { free(redis) })
}

/// The body of the check and peek exports.
///
/// # Safety
/// As `sluicegate_redis_check`.
unsafe fn decide<const CONSUME: bool>(
    redis: *const sluicegate_redis,
    key: *const u8,
    key_len: usize,
    n: u64,
    out: *mut sluicegate_decision,
    source: *mut u32,
) -> sluicegate_status {
    guard(move || {
        // SAFETY: the export's contract: NULL or a live handle.
        let r = unsafe { borrow(redis) }?;
        // SAFETY: the export's contract: `key` is valid for `key_len` bytes.
        let key = unsafe { bytes(key, key_len) }?;
        if out.is_null() {
            return Err(SLUICEGATE_ERR_NULL);
        }
        if key.is_empty() {
            return Err(SLUICEGATE_ERR_EMPTY_KEY);
        }
        let key = core::str::from_utf8(key).map_err(|_| SLUICEGATE_ERR_NOT_UTF8)?;
        let verdict = if CONSUME {
            r.inner.check_n(key, n)
        } else {
            r.inner.peek_n(key, n)
        };
        match verdict {
            Ok(v) => {
                let d = sluicegate_decision::new(v.decision, v.delay_ns);
                // SAFETY: `out` is non-NULL and valid by the export's contract.
                unsafe { answer(out, Ok(d)) }?;
                if !source.is_null() {
                    // SAFETY: non-NULL and valid for a write by the contract.
                    unsafe { write(source, sluicegate_source::from(v.source) as u32) }?;
                }
                Ok(())
            }
            // SAFETY: `out` is non-NULL and valid by the export's contract.
            Err(Error::Capacity(e)) => unsafe { answer(out, Err(e)) },
            Err(e) => Err(status(e)),
        }
    })
}

/// Checks and, if admitted, charges `n` units for the key (`key_len` bytes at
/// `key`, valid UTF-8, not NUL-terminated) on Redis, all-or-nothing; `n = 0` is
/// a peek. Writes the decision to `*out` — the same fields as a local check,
/// `delay_ns` the shaper's wait — and, when `source` is not NULL, who decided
/// (a `sluicegate_source` value) to `*source`.
///
/// **Blocks** for one round trip to Redis: at most `timeout_ns`, plus
/// `connect_timeout_ns` when it must (re)connect. Time is Redis' `TIME`, so there
/// is no `_at` form. Redis unavailable (an error, a timeout, the breaker open)
/// is not an error: the failure policy decides, the call returns `SLUICEGATE_OK`
/// and `*source` is not `SLUICEGATE_SOURCE_REDIS`. A timed-out call is never
/// replayed (it may have been charged on the server).
///
/// Errors: `SLUICEGATE_ERR_NULL` (`redis`, `key` or `out`),
/// `SLUICEGATE_ERR_EMPTY_KEY`, `SLUICEGATE_ERR_NOT_UTF8`,
/// `SLUICEGATE_ERR_INSUFFICIENT_CAPACITY` for an `n` above the limit's capacity
/// (never sent; a denial whose `limit` is the capacity is written to `*out`),
/// and `SLUICEGATE_ERR_REDIS_DATA` when Redis refused this key's call because of
/// the value stored at it (this key only; no failure policy answers it).
/// `*source` is written only with `SLUICEGATE_OK`.
///
/// # Safety
/// `redis` is a live handle; `key` points to `key_len` readable bytes; `out` is
/// valid for a write; `source` is NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn sluicegate_redis_check(
    redis: *const sluicegate_redis,
    key: *const u8,
    key_len: usize,
    n: u64,
    out: *mut sluicegate_decision,
    source: *mut u32,
) -> sluicegate_status {
    // SAFETY: the export's contract.
    unsafe { decide::<true>(redis, key, key_len, n, out, source) }
}

/// What `sluicegate_redis_check` would answer now for `n` units, charging
/// nothing (the script writes nothing). Blocks as a check does; Redis
/// unavailable, the failure policy answers (a local fallback peeks its table).
///
/// # Safety
/// As `sluicegate_redis_check`.
#[no_mangle]
pub unsafe extern "C" fn sluicegate_redis_peek(
    redis: *const sluicegate_redis,
    key: *const u8,
    key_len: usize,
    n: u64,
    out: *mut sluicegate_decision,
    source: *mut u32,
) -> sluicegate_status {
    // SAFETY: the export's contract.
    unsafe { decide::<false>(redis, key, key_len, n, out, source) }
}

/// Writes to `*open` whether a circuit breaker is open now — the server's, or on
/// a cluster any master's — so checks of (some) keys are answered by the failure
/// policy without asking Redis. For health checks and metrics; never blocks.
///
/// # Safety
/// `redis` is a live handle; `open` is valid for a write.
#[no_mangle]
pub unsafe extern "C" fn sluicegate_redis_circuit_open(
    redis: *const sluicegate_redis,
    open: *mut bool,
) -> sluicegate_status {
    guard(|| {
        // SAFETY: the export's contract.
        let r = unsafe { borrow(redis) }?;
        // SAFETY: the export's contract.
        unsafe { write(open, r.inner.as_async().circuit_open()) }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_header_defaults_are_the_crate_defaults() {
        let c = Config::default();
        assert_eq!(
            c.timeout,
            Duration::from_nanos(SLUICEGATE_REDIS_DEFAULT_TIMEOUT_NS)
        );
        assert_eq!(
            c.connect_timeout,
            Duration::from_nanos(SLUICEGATE_REDIS_DEFAULT_CONNECT_TIMEOUT_NS)
        );
        assert_eq!(
            c.breaker.failure_threshold,
            SLUICEGATE_REDIS_DEFAULT_FAILURE_THRESHOLD
        );
        assert_eq!(
            c.breaker.cooldown,
            Duration::from_nanos(SLUICEGATE_REDIS_DEFAULT_COOLDOWN_NS)
        );
        assert_eq!(
            c.policy,
            FailurePolicy::Local {
                share_percent: SLUICEGATE_REDIS_DEFAULT_LOCAL_SHARE_PERCENT as u8
            }
        );
        assert_eq!(
            c.fallback_keys as u64,
            SLUICEGATE_REDIS_DEFAULT_FALLBACK_KEYS
        );
        // A zeroed struct (with its size) is exactly the defaults.
        // SAFETY: no prefix.
        let zeroed = unsafe { settings(&sluicegate_redis_config::default()) };
        assert_eq!(zeroed, Ok(c));
    }

    #[test]
    fn settings_map_every_field() {
        use sluicegate_failure_policy::*;
        let c = sluicegate_redis_config {
            failure_policy: SLUICEGATE_FAIL_CLOSED as u32,
            prefix: c"rl:".as_ptr(),
            timeout_ns: 7,
            connect_timeout_ns: 8,
            breaker_failure_threshold: 9,
            breaker_cooldown_ns: 10,
            ..Default::default()
        };
        // SAFETY: a static prefix.
        let s = unsafe { settings(&c) }.unwrap();
        assert_eq!(s.policy, FailurePolicy::Closed);
        assert_eq!(s.prefix, "rl:");
        assert_eq!(s.timeout, Duration::from_nanos(7));
        assert_eq!(s.connect_timeout, Duration::from_nanos(8));
        assert_eq!(s.breaker.failure_threshold, 9);
        assert_eq!(s.breaker.cooldown, Duration::from_nanos(10));
        let local = sluicegate_redis_config {
            local_share_percent: 100,
            fallback_keys: 64,
            ..Default::default()
        };
        // SAFETY: no prefix.
        let s = unsafe { settings(&local) }.unwrap();
        assert_eq!(s.policy, FailurePolicy::Local { share_percent: 100 });
        assert_eq!(s.fallback_keys, 64);
    }

    /// Run in a child process (`SLUICEGATE_ALLOC_CHILD` set) under an
    /// address-space limit of 1.5 GB: the documented maximum `fallback_keys`
    /// (2^28 keys, 4 GiB) cannot be allocated there.
    #[test]
    fn a_fallback_table_past_the_address_space_is_an_alloc_status_not_an_abort() {
        use crate::config::sluicegate_algorithm;
        if std::env::var_os("SLUICEGATE_ALLOC_CHILD").is_some() {
            let limit = sluicegate_config {
                struct_size: core::mem::size_of::<sluicegate_config>() as u32,
                algorithm: sluicegate_algorithm::SLUICEGATE_TOKEN_BUCKET as u32,
                amount: 10,
                period_ns: 1_000_000_000,
                burst: 10,
                ..Default::default()
            };
            let cfg = sluicegate_redis_config {
                fallback_keys: SLUICEGATE_KEYED_MAX_CAPACITY,
                ..Default::default()
            };
            let mut out: *mut sluicegate_redis = core::ptr::null_mut();
            // SAFETY: static strings, valid structs, `out` valid for a write.
            let status = unsafe {
                sluicegate_redis_new(
                    c"redis://127.0.0.1:1".as_ptr(),
                    c"alloc".as_ptr(),
                    &limit,
                    &cfg,
                    &mut out,
                )
            };
            assert_eq!(status, SLUICEGATE_ERR_ALLOC);
            assert!(out.is_null());
            println!("child: SLUICEGATE_ERR_ALLOC");
            return;
        }
        let exe = std::env::current_exe().unwrap();
        let out = std::process::Command::new("prlimit")
            .arg("--as=1500000000")
            .arg(exe)
            .args([
                "--exact",
                "redis::tests::a_fallback_table_past_the_address_space_is_an_alloc_status_not_an_abort",
                "--nocapture",
                "--test-threads=1",
            ])
            .env("SLUICEGATE_ALLOC_CHILD", "1")
            .output()
            .expect("prlimit (util-linux) runs the child");
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success() && text.contains("child: SLUICEGATE_ERR_ALLOC"),
            "child: {:?}\n{text}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }

    #[test]
    fn every_source_has_its_number() {
        let all = [
            (Source::Redis, 0),
            (Source::FailOpen, 1),
            (Source::FailClosed, 2),
            (Source::LocalFallback, 3),
            (Source::Lease, 4),
            (Source::LocalDenial, 5),
        ];
        for (s, n) in all {
            assert_eq!(sluicegate_source::from(s) as u32, n, "{s:?}");
        }
    }
}
