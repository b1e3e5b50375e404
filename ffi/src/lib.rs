//! The C ABI of sluicegate: `libsluicegate.so` / `libsluicegate.a` with the
//! generated header `include/sluicegate.h` (and the C++17 wrapper
//! `include/sluicegate.hpp`).
//!
//! # Rules every export keeps
//! * **Status codes.** Every fallible function returns a [`sluicegate_status`];
//!   `SLUICEGATE_OK` is 0, every other value is an error with a static message
//!   from `sluicegate_status_str`. Numbers are grouped (1xx arguments, 2xx
//!   configuration, 3xx requests, 9xx internal) and never reused.
//! * **Never unwinds.** Every body runs inside a panic boundary
//!   ([`boundary::guard`]); a panic (a bug) becomes `SLUICEGATE_ERR_PANIC`.
//! * **Validates everything.** Pointers are checked for NULL, enums arrive as
//!   `uint32_t` and are checked against the known values, input structs carry
//!   their own `struct_size`.
//! * **Opaque handles, one owner.** `sluicegate_*_new` creates a handle that the
//!   caller owns and releases with the matching `_free` (NULL is accepted and does
//!   nothing). Every other call borrows it and may run on any thread at once;
//!   `_free` must not race with other calls on the same handle, and a handle must
//!   not be used after `_free`.
//! * **No allocation on the hot path** — for the local handles
//!   (`sluicegate_limiter`, `sluicegate_keyed`, `sluicegate_striped`): their
//!   checks, peeks and reconfiguration never allocate, never block and never make
//!   a system call. The Redis handle (`sluicegate_redis`, the `redis` feature) is
//!   the exception: its checks are network round trips that **block**, bounded by
//!   its timeouts, allocate, and make system calls (see the `redis` module).
//! * **Time.** Calls without `_at` read the library's clock, which
//!   `sluicegate_now_ns` also reads; `_at(now_ns)` calls take the caller's
//!   nanoseconds instead. Use one time base per handle. (The Redis handle's time
//!   is the server's `TIME`: it has no `_at` calls.)
//!
//! # Cargo features
//! * `redis` (default): the `sluicegate_redis` handle over `sluicegate-redis`
//!   (redis-rs and tokio). Without it (`--no-default-features`) the library holds
//!   the local limiters only, about a sixth of the size (stripped .so: 0.8 MB
//!   against 5.3 MB for the default features), and starts no thread. The header declares the Redis
//!   functions either way: a program that calls them fails to link against a
//!   library built without them.
//! * `redis-tls` (off): `rediss://` URLs for the Redis handle (rustls and ring).
//! * `policy` (default): the `sluicegate_policy` handle over `sluicegate-policy`
//!   (rule files in TOML; see the `policy` module). The header declares its
//!   functions either way.
//! * `shared` (default): limiters and keyed limiters in a shared-memory region
//!   every worker process of a host maps (`sluicegate_*_open_shared`, a
//!   policy's `[shared]` table), over `sluicegate-shm`; see the `shared`
//!   module. Unix only. The header declares its functions either way.
//!
//! # Versioned input structs, fixed output structs
//! `sluicegate_config` starts with `struct_size`, set by the caller to
//! `sizeof(sluicegate_config)` as it was compiled (and so does
//! `sluicegate_redis_config`). A smaller size than the first
//! published layout is `SLUICEGATE_ERR_STRUCT_SIZE`; a larger one (a caller built
//! against a newer header) is accepted when every byte this library does not know
//! is zero. Output structs (`sluicegate_decision`, `sluicegate_keyed_stats`,
//! `sluicegate_parse_error`) are fixed for this ABI version: new data will come
//! through new functions.
#![deny(unsafe_op_in_unsafe_fn)]
#![warn(missing_docs)]
#![warn(clippy::undocumented_unsafe_blocks)]
// The exported names are C names (`sluicegate_config`, `SLUICEGATE_OK`).
#![allow(non_camel_case_types)]

pub mod boundary;
pub mod config;
pub mod handle;
pub mod keyed;
mod limit;
pub mod limiter;
#[cfg(feature = "policy")]
pub mod policy;
#[cfg(feature = "policy")]
pub mod policy_check;
#[cfg(feature = "redis")]
pub mod redis;
pub mod shared;
pub mod status;
pub mod striped;
pub mod version;

pub use config::{
    sluicegate_algorithm, sluicegate_config, sluicegate_parse_error, SLUICEGATE_MAX_LIMITS,
};
pub use keyed::{
    sluicegate_full_policy, sluicegate_keyed, sluicegate_keyed_stats, SLUICEGATE_KEYED_MAX_CAPACITY,
};
pub use limiter::{sluicegate_decision, sluicegate_limiter};
#[cfg(feature = "policy")]
pub use policy::sluicegate_policy;
#[cfg(feature = "policy")]
pub use policy_check::{
    sluicegate_attr, sluicegate_policy_decision, sluicegate_policy_result, sluicegate_policy_rule,
    SLUICEGATE_POLICY_MAX_ATTRS, SLUICEGATE_POLICY_NO_RULE,
};
#[cfg(feature = "redis")]
pub use redis::{
    sluicegate_failure_policy, sluicegate_redis, sluicegate_redis_config, sluicegate_source,
};
pub use shared::{sluicegate_shared_options, SLUICEGATE_SHARED_MAX_NAME};
pub use status::sluicegate_status;
pub use striped::{sluicegate_striped, SLUICEGATE_DEFAULT_STRIPES};

// Every handle is used from many threads at once through a shared pointer.
const _: () = {
    const fn thread_safe<T: Send + Sync>() {}
    thread_safe::<sluicegate_limiter>();
    thread_safe::<sluicegate_keyed>();
    thread_safe::<sluicegate_striped>();
    #[cfg(feature = "redis")]
    thread_safe::<sluicegate_redis>();
    #[cfg(feature = "policy")]
    thread_safe::<sluicegate_policy>();
    // A decision buffer is used by one thread at a time, but may move between them.
    #[cfg(feature = "policy")]
    {
        const fn sendable<T: Send>() {}
        sendable::<sluicegate_policy_decision>();
    }
};
