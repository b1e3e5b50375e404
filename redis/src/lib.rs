//! # sluicegate-redis
//!
//! Rate limits shared by many processes and hosts, their state in Redis, Valkey or
//! Redis Cluster, with the same algorithms and the same [`Decision`] fields as the
//! local `sluicegate` limiters.
//!
//! * **One Lua script per algorithm over one key** (`KEYS[1]`, used directly):
//!   GCRA (token bucket, leaky bucket meter, shaper reservation, lease of up to `n`
//!   units), fixed window, sliding window counter ([`script`]). Time comes from
//!   Redis `TIME` inside the script, in integer microseconds (no client clock);
//!   the state is integers (every value below 2^53, checked by [`Limit::from_spec`]);
//!   the key's `PX` expiry is the instant it would decide like an absent key;
//!   **nothing is written on a denial**; `n = 0` is a peek.
//! * **`EVALSHA`, and `EVAL` only on `NOSCRIPT`** (a flushed or restarted server);
//!   a call that timed out is never replayed.
//! * **Cluster-safe keys**: `{prefix}{name}:{kind}:{key}` with the caller's key as
//!   the hash tag, so all limits of one key share a slot, and limits of different
//!   algorithms under one name never read each other's values.
//! * **Errors classified**: connection loss and timeouts feed the circuit
//!   breaker and the failure policy; a per-key data error (`WRONGTYPE`) fails
//!   that check alone ([`Error::Data`]).
//! * **Failure policy per limit** ([`FailurePolicy`]): open, closed, or a local
//!   limiter at a share of the quota; short timeouts (25 ms by default) and a
//!   circuit breaker ([`BreakerConfig`]) per server, and per master on a cluster,
//!   so a dead Redis costs no latency per request, a dead master costs only its
//!   own slots, and recovery when it returns.
//! * **Hybrid mode** ([`HybridLimiter`]): a lock-free local limiter in front, units
//!   leased from Redis in batches and spent locally, a negative cache after a
//!   denial; the global quota is never exceeded (bound in [`hybrid`]).
//! * **Batching**: concurrent checks share one multiplexed connection and are
//!   pipelined on it; [`RedisLimiter::check_many`] sends a batch at once; the hybrid
//!   mode coalesces concurrent leases of one key into one call.
//! * Async (tokio) and [`blocking`] APIs. A blocking call is written and read
//!   by the calling thread on a connection of the limiter's own pool (no
//!   other thread woken: one round trip, as a raw socket); past the pool's
//!   bound, on a cluster, and for batches and hybrid leases, it goes through
//!   the multiplexed connection (see [`blocking`]: who drives what).
//!
//! ## Resolution
//! Redis time is in microseconds, the local limiters' in nanoseconds; see
//! [`Limit`] for the rounding (conservative: never faster than asked) and for the
//! one field that may differ from the local decision at the same instant.
//!
//! ```no_run
//! # async fn demo() -> Result<(), sluicegate_redis::Error> {
//! use sluicegate_redis::{Backend, Config, FailurePolicy, Kind, Limit, RedisLimiter, Source, Spec};
//!
//! let limit = Limit::from_spec(&Spec::parse(Kind::SlidingWindow, "100/minute").unwrap())?;
//! let cfg = Config { policy: FailurePolicy::Local { share_percent: 25 }, ..Config::default() };
//! let rl = RedisLimiter::new(Backend::from_url("redis://127.0.0.1:6379")?, "api", limit, cfg)?;
//! let v = rl.check("tenant-7").await?;
//! // With Redis up, the script decided; 99 of the 100 are left this minute.
//! assert_eq!(v.source, Source::Redis);
//! assert_eq!(v.decision.remaining, 99);
//! # Ok(()) }
//! ```
#![forbid(unsafe_code)]
#![warn(missing_docs)]
#![warn(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

pub mod blocking;
mod breaker;
mod coalesce;
mod conn;
mod direct;
mod error;
pub mod hybrid;
mod limit;
mod limiter;
mod link;
mod nodes;
mod pipeline;
mod policy;
mod resp;
pub mod script;
mod verdict;

pub use breaker::BreakerConfig;
pub use conn::{Backend, ClientCert, TlsConfig};
pub use error::{ConfigError, Error};
pub use hybrid::{HybridConfig, HybridLimiter, HybridStats};
#[allow(deprecated)]
pub use limit::Algorithm;
pub use limit::{Limit, Reply};
pub use limiter::{Config, RedisLimiter};
pub use policy::FailurePolicy;
pub use sluicegate::{Decision, Kind, Quota, Spec};
pub use verdict::{RedisStats, Source, Verdict};

/// The README's Rust snippet, compiled as a doctest.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
