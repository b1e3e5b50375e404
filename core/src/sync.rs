//! The only place that names atomic types.
//!
//! Under `--cfg loom` the model checker's atomics replace the real ones, so every
//! compare-and-swap path in the crate is visible to the loom models in `loom-tests/`.
//! Elsewhere `portable-atomic` supplies them: native instructions where the target
//! has 64-bit atomics, its lock-free fallback on 32-bit MCUs such as `thumbv7m`.

#[cfg(loom)]
pub(crate) use loom::sync::atomic::{fence, AtomicU64, Ordering};
#[cfg(not(loom))]
pub(crate) use portable_atomic::{fence, AtomicU64, Ordering};

/// Memory orderings, chosen here once.
///
/// A limiter's state word is its whole state, but runtime reconfiguration publishes
/// new parameters through [`crate::limiter`]'s config cell. A check reads the word
/// with `Acquire` *before* it reads the parameters, and writes it with `Release`, so a
/// check that sees a word written under new parameters also sees those parameters
/// (see `limiter.rs`). On x86-64 these cost exactly what `Relaxed` costs (every
/// locked instruction is a full barrier); on Arm they are the cheapest orderings
/// that keep that guarantee.
pub(crate) mod order {
    use super::Ordering;
    /// Loading a state word.
    pub(crate) const LOAD: Ordering = Ordering::Acquire;
    /// A successful compare-and-swap of a state word.
    pub(crate) const CAS_OK: Ordering = Ordering::AcqRel;
    /// A failed compare-and-swap of a state word (it acts as a load).
    pub(crate) const CAS_ERR: Ordering = Ordering::Acquire;
}

/// Yields inside a spin loop: to loom's scheduler under the model checker (a spin
/// it cannot see would never terminate there), to the CPU otherwise.
#[inline]
pub(crate) fn spin_loop() {
    #[cfg(loom)]
    loom::thread::yield_now();
    #[cfg(not(loom))]
    core::hint::spin_loop();
}
