//! What the Rust tests of the C ABI share.

use std::mem::size_of;

use sluicegate_ffi::config::{sluicegate_algorithm, sluicegate_config};

/// Every C algorithm value.
pub const ALGORITHMS: [sluicegate_algorithm; 6] = {
    use sluicegate_algorithm::*;
    [
        SLUICEGATE_TOKEN_BUCKET,
        SLUICEGATE_LEAKY_BUCKET,
        SLUICEGATE_SHAPER,
        SLUICEGATE_FIXED_WINDOW,
        SLUICEGATE_SLIDING_WINDOW,
        SLUICEGATE_SLIDING_LOG,
    ]
};

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
