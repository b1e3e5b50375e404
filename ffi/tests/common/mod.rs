//! What the Rust tests of the C ABI share.

use std::mem::size_of;

use sluicegate::Kind;
use sluicegate_ffi::config::{sluicegate_algorithm, sluicegate_config};

/// Every C algorithm value, in the order of `Kind::ALL`.
pub fn algorithms() -> impl Iterator<Item = sluicegate_algorithm> {
    Kind::ALL.into_iter().map(sluicegate_algorithm::from)
}

/// One second in nanoseconds.
pub const SEC: u64 = 1_000_000_000;

/// A limit's config: `amount` per `period_ns` with `burst`, every other field zero.
pub fn cfg(
    alg: sluicegate_algorithm,
    amount: u64,
    period_ns: u64,
    burst: u64,
) -> sluicegate_config {
    sluicegate_config {
        struct_size: size_of::<sluicegate_config>() as u32,
        algorithm: alg as u32,
        amount,
        period_ns,
        burst,
        ..Default::default()
    }
}
