//! # sluicegate
//!
//! Rate limiters whose whole state is one 64-bit word, updated by a single
//! compare-and-swap loop: no mutex, no allocation, no timer thread, no background
//! task. Time is read lazily from a [`Clock`] — or passed in by the caller with the
//! `_at(now)` form of every call — as `u64` nanoseconds.
//!
//! | type | algorithm | admits cost `n` at `t` iff |
//! |---|---|---|
//! | [`TokenBucket`] | GCRA | the bucket (capacity `burst`, refilled at `amount/period`) holds ≥ `n` |
//! | [`LeakyBucket`] | leaky bucket meter | level + `n` ≤ capacity |
//! | [`Shaper`] | leaky bucket shaper | the request's start, spaced `period/amount` apart, is ≤ max delay away (returns the delay) |
//! | [`FixedWindow`] | fixed window | count in the aligned window + `n` ≤ limit |
//! | [`SlidingWindow`] | sliding window counter | `prev·(W−e) + (cur+n)·W ≤ limit·W`: exactly `prev·(W−e)/W + cur + n ≤ limit` |
//! | [`SlidingLog`] | sliding window log (alloc) | fewer than `limit − n + 1` admissions in `(t − W, t]` |
//! | [`Compound`] | several of one kind | every limit allows (all-or-nothing) |
//!
//! ```
//! use sluicegate::{Quota, TokenBucket};
//!
//! // 100 requests per second, bursts of up to 20.
//! let limiter = TokenBucket::new(Quota::per_second(100).burst(20))?;
//! let d = limiter.check();
//! assert!(d.allowed);
//! assert_eq!(d.remaining, 19);
//!
//! // A server that already read the time passes it in and pays for no clock
//! // (`()`: this limiter has no clock of its own, only the `_at` calls).
//! let at = TokenBucket::with_clock(Quota::per_second(100).burst(20), ())?;
//! let now = 5_000_000_000;
//! assert!(at.check_n_at(20, now)?.allowed);
//! assert!(!at.check_at(now).allowed);
//! assert!(at.check_at(now + 10_000_000).allowed); // one token per 10 ms
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! ## Rules every limiter keeps
//! * Cost `n = 0` is a peek; `n` above the burst/limit is an
//!   [`InsufficientCapacity`] error (it can never succeed), not a denial.
//! * Rounding is conservative: never a whole unit more than the exact model.
//! * A timestamp earlier than one already seen is treated as no time passing;
//!   arithmetic saturates; an idle limiter of any age is full. No call panics.
//! * Under any interleaving of threads, the admitted requests are a set the
//!   sequential algorithm admits in some order (checked with loom).
//!
//! ## Features
//! * `std` (default): [`QuantaClock`], [`StdClock`], waiting ([`Wait`]); implies `alloc`.
//! * `alloc`: [`SlidingLog`].
//! * neither: everything else, for `no_std` targets. On targets without 64-bit
//!   atomics, `portable-atomic`'s fallback is used; on targets without any
//!   compare-and-swap (`thumbv6m`, `riscv32imc`), build with
//!   `RUSTFLAGS="--cfg portable_atomic_unsafe_assume_single_core"` (single-core
//!   MCUs) or enable `portable-atomic`'s `critical-section` feature.
#![no_std]
#![forbid(unsafe_code)]
#![warn(missing_docs)]
// Library code never unwraps caller-influenced values (tests may: clippy.toml).
#![warn(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

#[cfg(feature = "alloc")]
extern crate alloc;
#[cfg(feature = "std")]
extern crate std;

#[cfg(feature = "alloc")]
mod any;
mod clock;
pub mod compound;
mod decision;
#[cfg(feature = "alloc")]
mod engine;
mod error;
pub mod fixed_window;
pub mod keyed;
mod kind;
pub mod limiter;
pub mod parse;
mod quota;
#[cfg(feature = "alloc")]
mod receipt;
pub mod shaper;
#[cfg(feature = "alloc")]
pub mod sliding_log;
pub mod sliding_window;
mod spec;
pub mod striped;
mod sync;
pub mod token_bucket;
#[cfg(feature = "std")]
mod wait;
mod word;

#[cfg(feature = "alloc")]
pub use any::{AnyLimiter, Outcome};
pub use clock::{Clock, ManualClock};
#[cfg(feature = "std")]
pub use clock::{DefaultClock, QuantaClock, StdClock};
pub use compound::Compound;
pub use decision::Decision;
pub use error::{ConfigError, InsufficientCapacity};
pub use fixed_window::{Fixed, FixedParams};
#[cfg(feature = "std")]
pub use keyed::AnyKeyed;
pub use kind::{Caps, Kind, UnknownKind};
pub use limiter::{Algorithm, Limiter, Step};
pub use parse::{ParseError, ParseErrorKind, parse_quota, parse_quotas};
pub use quota::Quota;
#[cfg(feature = "alloc")]
pub use receipt::Receipt;
pub use shaper::{Reservation, Shaper, ShaperParams, Shaping};
#[cfg(feature = "alloc")]
pub use sliding_log::SlidingLog;
pub use sliding_window::{Sliding, SlidingParams};
pub use spec::{Spec, SpecError};
pub use striped::Striped;
pub use token_bucket::{Gcra, GcraParams, Leaky};
#[cfg(feature = "std")]
pub use wait::{Wait, WaitError};

/// This crate's README (its crates.io page): its Rust snippets, compiled and run
/// as doctests. The repository README's are compiled by sluicegate-demo.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;

macro_rules! alias {
    ($name:ident, $alg:ty, $what:literal) => {
        #[doc = concat!("The ", $what, " on clock `C` (the default clock under `std`).")]
        ///
        /// ```
        /// # use sluicegate::*;
        #[doc = concat!("let l = ", stringify!($name), "::with_clock(Quota::per_second(3), ()).unwrap();")]
        /// assert!(l.check_at(0).allowed);
        /// ```
        #[cfg(feature = "std")]
        pub type $name<C = DefaultClock> = Limiter<$alg, C>;
        #[doc = concat!("The ", $what, " on clock `C`.")]
        #[cfg(not(feature = "std"))]
        pub type $name<C> = Limiter<$alg, C>;
    };
}
alias!(TokenBucket, Gcra, "token bucket (GCRA)");
alias!(LeakyBucket, Leaky, "leaky bucket meter");
alias!(FixedWindow, Fixed, "fixed-window counter");
alias!(SlidingWindow, Sliding, "sliding-window counter");
