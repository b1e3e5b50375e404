//! The counters a check bumps (lock-free) and a reload updates; read out by
//! [`crate::metrics`].

use std::sync::atomic::{AtomicU64, Ordering};

/// One rule's counters. They live as long as a rule of that name does: a reload
/// that keeps the name keeps the counts.
#[derive(Debug, Default)]
pub(crate) struct RuleMetrics {
    pub allowed: AtomicU64,
    pub denied: AtomicU64,
    pub shadow_denied: AtomicU64,
    pub backend_errors: AtomicU64,
}

// Relaxed everywhere: each counter is a statistic on its own, read for display;
// no other memory is published through it.
pub(crate) fn bump(c: &AtomicU64) {
    c.fetch_add(1, Ordering::Relaxed);
}

/// The policy's reload history.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub(crate) struct ReloadStats {
    pub reloads: u64,
    pub failures: u64,
    pub last_error: Option<String>,
    /// A policy following a store: whether its last poll reached it (`None`:
    /// not following one).
    pub store_up: Option<bool>,
    /// Polls that could not reach the store.
    pub store_errors: u64,
}
