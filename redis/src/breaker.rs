//! A circuit breaker: after `failure_threshold` consecutive failures Redis is not
//! asked for `cooldown`, so a dead server costs no latency per request; then one
//! probe is let through (half-open), and its success closes the circuit.
//!
//! A standalone server has one breaker; a cluster has one per master (see
//! [`crate::nodes`]), so a dead master's slots are answered by the failure policy
//! while the other masters' keys still go to Redis.
//!
//! Every transition is logged through the `log` facade, with the server's
//! address: `warn` when the circuit opens (or a probe fails and it opens again),
//! `info` when a probe is let through and when the circuit closes.

use core::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use core::time::Duration;
use std::time::Instant;

/// Breaker settings.
///
/// ```
/// use sluicegate_redis::BreakerConfig;
/// let b = BreakerConfig::default();
/// assert_eq!(b.failure_threshold, 3);
/// assert_eq!(b.cooldown.as_millis(), 500);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BreakerConfig {
    /// Consecutive failures (errors or timeouts) that open the circuit.
    pub failure_threshold: u32,
    /// How long the circuit stays open before one probe is let through.
    pub cooldown: Duration,
}

impl Default for BreakerConfig {
    fn default() -> Self {
        Self {
            failure_threshold: 3,
            cooldown: Duration::from_millis(500),
        }
    }
}

/// What the breaker allows for one call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Permit {
    /// Closed: ask Redis.
    Call,
    /// Half-open: this call is the one probe.
    Probe,
    /// Open: do not ask.
    Reject,
}

#[derive(Debug)]
pub(crate) struct Breaker {
    cfg: BreakerConfig,
    /// The server (or cluster master) the breaker guards, for the log.
    label: String,
    /// Times the circuit opened.
    opened: AtomicU64,
    epoch: Instant,
    failures: AtomicU32,
    /// Nanoseconds since `epoch` until which the circuit is open; 0 = closed.
    open_until: AtomicU64,
    probing: AtomicBool,
}

impl Breaker {
    pub(crate) fn new(cfg: BreakerConfig, label: impl Into<String>) -> Self {
        Self {
            cfg,
            label: label.into(),
            opened: AtomicU64::new(0),
            epoch: Instant::now(),
            failures: AtomicU32::new(0),
            open_until: AtomicU64::new(0),
            probing: AtomicBool::new(false),
        }
    }

    fn now(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_nanos())
            .unwrap_or(u64::MAX)
            .max(1)
    }

    pub(crate) fn permit(&self) -> Permit {
        // Relaxed throughout: the breaker is advisory; a stale read costs at most
        // one extra call or one extra policy decision, never a wrong limit.
        let until = self.open_until.load(Ordering::Relaxed);
        if until == 0 {
            return Permit::Call;
        }
        if self.now() < until {
            return Permit::Reject;
        }
        if self
            .probing
            .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_ok()
        {
            log::info!(
                "sluicegate-redis: circuit half-open for {}: one probe let through",
                self.label
            );
            Permit::Probe
        } else {
            Permit::Reject
        }
    }

    pub(crate) fn success(&self, permit: Permit) {
        self.failures.store(0, Ordering::Relaxed);
        if permit == Permit::Probe || self.open_until.load(Ordering::Relaxed) != 0 {
            if self.open_until.swap(0, Ordering::Relaxed) != 0 {
                log::info!(
                    "sluicegate-redis: circuit closed for {}: it answered",
                    self.label
                );
            }
            self.probing.store(false, Ordering::Release);
        }
    }

    /// Counts a failed call; true when this failure opened a closed circuit.
    pub(crate) fn failure(&self, permit: Permit) -> bool {
        let cooldown = u64::try_from(self.cfg.cooldown.as_nanos()).unwrap_or(u64::MAX);
        let reopen = || {
            self.open_until
                .store(self.now().saturating_add(cooldown), Ordering::Relaxed)
        };
        if permit == Permit::Probe {
            reopen();
            self.probing.store(false, Ordering::Release);
            log::warn!(
                "sluicegate-redis: circuit open again for {}: the probe failed; the failure policy answers for {:?}",
                self.label,
                self.cfg.cooldown
            );
            return false;
        }
        let f = self
            .failures
            .fetch_add(1, Ordering::Relaxed)
            .saturating_add(1);
        if f >= self.cfg.failure_threshold.max(1) && self.open_until.load(Ordering::Relaxed) == 0 {
            reopen();
            self.opened.fetch_add(1, Ordering::Relaxed);
            log::warn!(
                "sluicegate-redis: circuit open for {} after {f} consecutive failures; the failure policy answers for {:?}",
                self.label,
                self.cfg.cooldown
            );
            return true;
        }
        false
    }

    /// Whether calls go to Redis unguarded: neither open nor half-open.
    pub(crate) fn is_closed(&self) -> bool {
        self.open_until.load(Ordering::Relaxed) == 0
    }

    /// How many times the circuit opened.
    pub(crate) fn times_opened(&self) -> u64 {
        self.opened.load(Ordering::Relaxed)
    }

    /// Whether the circuit is open now (calls are answered by the failure policy).
    pub(crate) fn is_open(&self) -> bool {
        let until = self.open_until.load(Ordering::Relaxed);
        until != 0 && self.now() < until
    }
}
