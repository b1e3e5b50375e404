//! The only place that names atomic types.
//!
//! Under `--cfg loom` the model checker's atomics replace the real ones, so every
//! compare-and-swap path in the crate is visible to the loom models in `loom-tests/`.
//! Elsewhere `portable-atomic` supplies them: native instructions where the target
//! has 64-bit atomics, its lock-free fallback on 32-bit MCUs such as `thumbv7m`.

#[cfg(loom)]
pub(crate) use loom::sync::atomic::{AtomicU64, Ordering, fence};
/// Keyed-table slots swap a fingerprint and a state word together. Native
/// `cmpxchg16b` on x86-64 (detected at run time), `casp`/`ldxp` on AArch64,
/// portable-atomic's fallback elsewhere.
#[cfg(not(loom))]
pub(crate) use portable_atomic::AtomicU128;
#[cfg(not(loom))]
pub(crate) use portable_atomic::{AtomicU64, Ordering, fence};

/// Loom has no 128-bit atomic. Under the model a mutex-protected cell stands in:
/// every operation is one atomic step of the model, which is exactly the
/// atomicity the real instruction gives (orderings are modelled as sequentially
/// consistent, i.e. the model checks the algorithm, not the fences, of this cell).
#[cfg(loom)]
#[derive(Debug)]
pub(crate) struct AtomicU128(loom::sync::Mutex<u128>);

#[cfg(loom)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
impl AtomicU128 {
    pub(crate) fn new(v: u128) -> Self {
        Self(loom::sync::Mutex::new(v))
    }
    pub(crate) fn load(&self, _: Ordering) -> u128 {
        *self.0.lock().unwrap()
    }
    pub(crate) fn compare_exchange(
        &self,
        current: u128,
        new: u128,
        _: Ordering,
        _: Ordering,
    ) -> Result<u128, u128> {
        let mut g = self.0.lock().unwrap();
        if *g == current {
            *g = new;
            Ok(current)
        } else {
            Err(*g)
        }
    }
    pub(crate) fn compare_exchange_weak(
        &self,
        current: u128,
        new: u128,
        success: Ordering,
        failure: Ordering,
    ) -> Result<u128, u128> {
        self.compare_exchange(current, new, success, failure)
    }
}

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
    /// Event counters: statistics, ordered with nothing.
    pub(crate) const STAT: Ordering = Ordering::Relaxed;
    /// Storing a word outright (a pool's registry entry published).
    #[cfg(feature = "std")]
    pub(crate) const STORE: Ordering = Ordering::Release;
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

/// A small per-thread number (0, 1, 2, … in order of first use), so threads can
/// pick a stripe without touching shared state after the first call.
#[cfg(all(feature = "std", not(loom)))]
pub(crate) fn thread_index() -> usize {
    use std::sync::atomic::{AtomicUsize, Ordering};
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    std::thread_local! {
        static INDEX: usize = NEXT.fetch_add(1, Ordering::Relaxed);
    }
    INDEX.with(|i| *i)
}
