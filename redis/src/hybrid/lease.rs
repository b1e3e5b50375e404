//! A key's lease: the units Redis charged to this process, spent with one
//! compare-and-swap; the negative cache; and the round trip that takes the next
//! batch (sizes, expiry on the local clock, the answer when it fails).

use core::sync::atomic::{AtomicU64, Ordering};
use core::time::Duration;
use std::sync::Arc;

use sluicegate::Decision;

use super::HybridLimiter;
use crate::error::Error;
use crate::limit::Reply;
use crate::script::window_left_ns;
use crate::verdict::{Source, Verdict};

/// The lease word: the units left in its low 32 bits, the lease's sequence number
/// in the high 32 (one per lease, so a compare-and-swap against an earlier
/// lease's word fails).
pub(crate) const UNITS: u64 = u32::MAX as u64;
/// A window lease expires `1/2^DRIFT_SHIFT` of its time early: room for NTP's
/// slew (at most 500 ppm) of each of the two clocks.
const DRIFT_SHIFT: u32 = 9;
/// A lease asks for this much of the key's expected demand over its life (a
/// bucket's TTL, the rest of a window): room for a rate that wavers, so that a
/// key at a steady rate makes its one round trip per lease life and not one
/// and a bit (a lease sized at the mean runs out early about half the time).
const HEADROOM: f64 = 1.25;
/// The shortest gap between a cold check and the next that counts as a rate
/// (1 ms): closer ones are concurrent checks.
const SEED_GAP: u64 = 1_000_000;

/// One key's local state. Everything a lease hit reads is here, next to the lease
/// word it writes: one cache line moves per hit.
#[derive(Debug, Default)]
#[repr(align(128))]
pub(crate) struct Entry {
    /// The lease: sequence number and units left (see [`UNITS`]).
    pub(crate) lease: AtomicU64,
    /// When the lease's units expire (ns on the limiter's monotonic clock).
    pub(crate) expires: AtomicU64,
    /// Windows: where the lease's window ends, in Redis time (ns since the epoch).
    pub(crate) window_end: AtomicU64,
    /// Windows: Redis time minus local time at the last lease, rounded up (ns):
    /// local `t` is no later than Redis time `t + offset` (0: no lease yet).
    pub(crate) offset: AtomicU64,
    /// Deny requests of at least `deny_cost` locally until then (negative cache).
    pub(crate) deny_until: AtomicU64,
    pub(crate) deny_cost: AtomicU64,
    /// When the last lease was taken, and the units it put in this process's
    /// hands: spent since = `leased` − units left.
    pub(crate) last_lease: AtomicU64,
    pub(crate) leased: AtomicU64,
    /// The key's rate in this process (units per second, `f64` bits; 0: not
    /// known yet), averaged over about [`super::HybridConfig::horizon`]:
    /// written by the key's flight only.
    pub(crate) rate: AtomicU64,
    pub(crate) flight: tokio::sync::Mutex<()>,
    /// Units asked for by the checks of the key waiting for its flight: the
    /// flight's lease holds them too, so that concurrent checks of a key new
    /// or gone quiet make one round trip, not one each in turn.
    pub(crate) waiting: AtomicU64,
    /// Round trips of this key that failed (Redis unavailable).
    pub(crate) failures: AtomicU64,
}

impl Entry {
    /// Whether dropping the entry loses nothing: no units leased, no denial
    /// pending, no check holding it.
    pub(crate) fn idle(self: &Arc<Self>, now: u64) -> bool {
        Arc::strong_count(self) == 1
            && (self.lease.load(Ordering::Relaxed) & UNITS == 0
                || now >= self.expires.load(Ordering::Relaxed))
            && now >= self.deny_until.load(Ordering::Relaxed)
    }

    /// A new key's first lease after it was checked cold at `at` (ns; now
    /// `now`): that check's unit as the first sample of its rate, if the gap
    /// is long enough to be a rate (a millisecond: checks closer than a round
    /// trip are concurrent ones, which the flight serves). The caller holds
    /// the key's flight.
    pub(crate) fn seed(&self, at: u64, now: u64) {
        if self.last_lease.load(Ordering::Relaxed) == 0 && now.saturating_sub(at) >= SEED_GAP {
            self.last_lease.store(at.max(1), Ordering::Relaxed);
            self.leased.store(1, Ordering::Relaxed);
        }
    }

    /// Whether the lease word `word` holds `n` units still unexpired at `now`.
    #[inline]
    fn covers(&self, word: u64, n: u64, now: u64) -> bool {
        word & UNITS >= n && now < self.expires.load(Ordering::Acquire)
    }

    /// Until when a request of `n` units is denied locally (negative cache), if it
    /// is at `now`.
    #[inline]
    fn denied_until(&self, n: u64, now: u64) -> Option<u64> {
        let until = self.deny_until.load(Ordering::Acquire);
        (now < until && n >= self.deny_cost.load(Ordering::Relaxed)).then_some(until)
    }

    /// Replaces the lease (the caller holds the key's flight). Readers that loaded
    /// the old word fail their compare-and-swap; readers that load the new one see
    /// its expiry and window, stored before it.
    fn store_lease(&self, units: u64, expires: u64, window_end: u64, offset: u64) {
        let seq = (self.lease.load(Ordering::Relaxed) >> 32).wrapping_add(1) << 32;
        self.lease.store(seq, Ordering::Release);
        self.expires.store(expires, Ordering::Release);
        self.window_end.store(window_end, Ordering::Release);
        self.offset.store(offset, Ordering::Release);
        self.lease.store(seq | units.min(UNITS), Ordering::Release);
    }
}

impl HybridLimiter {
    /// Joins `key`'s single flight: at once if no other check of the key is
    /// making a round trip. Otherwise `None` (answer by the policy) when the
    /// key's circuit is not closed (the other check is the half-open probe: only
    /// it waits), when the wait would pass the timeout + connect timeout bound,
    /// or when the round trip it waited for failed (no queue of timeouts).
    /// While it waits, its `n` units count in the key's `waiting`.
    pub(super) async fn join_flight<'e>(
        &self,
        e: &'e Entry,
        key: &str,
        n: u64,
    ) -> Option<tokio::sync::MutexGuard<'e, ()>> {
        if let Ok(g) = e.flight.try_lock() {
            return Some(g);
        }
        let remote = &self.inner.remote;
        if !remote.circuit_closed_for(key) {
            return None;
        }
        let failures = e.failures.load(Ordering::Acquire);
        let link = &remote.inner.link;
        let bound = link.timeout() + link.connect_timeout();
        // Counted until this check holds the flight or gives up (its future
        // dropped included).
        let _waiting = Waiting::new(&e.waiting, n);
        let g = tokio::time::timeout(bound, e.flight.lock()).await.ok()?;
        (e.failures.load(Ordering::Acquire) == failures).then_some(g)
    }

    /// A decision without a round trip, if there is one: units from the lease, or
    /// the negative cache.
    pub(super) fn local(&self, e: &Entry, key: &str, n: u64, limit: u64) -> Option<Verdict> {
        let inner = &*self.inner;
        let mut word = e.lease.load(Ordering::Acquire);
        loop {
            // The clock is read after the lease word is loaded: a lease seen here
            // was charged on Redis before this instant.
            let now = inner.now();
            if e.covers(word, n, now) {
                // Loaded after the word, before the swap: if the swap succeeds they
                // are this lease's (a new lease changes the word first).
                let end = e.window_end.load(Ordering::Acquire);
                let offset = e.offset.load(Ordering::Acquire);
                match e.lease.compare_exchange_weak(
                    word,
                    word - n,
                    Ordering::AcqRel,
                    Ordering::Acquire,
                ) {
                    Ok(_) => {
                        inner.counters.local();
                        // A window's front records the units in the window they
                        // were charged to.
                        let at = now.saturating_add(offset).min(end.saturating_sub(1));
                        inner.front.charge(key, n, at);
                        return Some(Verdict {
                            decision: Decision {
                                allowed: true,
                                remaining: (word & UNITS) - n,
                                retry_after_ns: 0,
                                reset_after_ns: 0,
                                limit,
                            },
                            source: Source::Lease,
                            delay_ns: 0,
                        });
                    }
                    Err(w) => {
                        word = w;
                        continue;
                    }
                }
            }
            if let Some(deny_until) = e.denied_until(n, now) {
                inner.counters.local();
                return Some(Verdict {
                    decision: Decision {
                        allowed: false,
                        remaining: 0,
                        retry_after_ns: deny_until - now,
                        reset_after_ns: 0,
                        limit,
                    },
                    source: Source::LocalDenial,
                    delay_ns: 0,
                });
            }
            return None;
        }
    }

    /// Whether [`Self::local`] would answer `n` units now (units left in an
    /// unexpired lease, or a pending denial), spending nothing.
    pub(super) fn local_ready(&self, e: &Entry, n: u64) -> bool {
        let word = e.lease.load(Ordering::Acquire);
        let now = self.inner.now();
        e.covers(word, n, now) || e.denied_until(n, now).is_some()
    }

    /// The round trip: one lease of a batch (the caller holds the key's flight).
    pub(super) async fn lease(&self, e: &Entry, key: &str, n: u64) -> Result<Verdict, Error> {
        let inner = &*self.inner;
        inner.counters.round_trip();
        // Before the request is sent: Redis decides at or after this instant.
        let t0 = inner.now();
        // The checks waiting for this flight are served by its lease too.
        let waiting = e.waiting.load(Ordering::Acquire);
        let batch = self
            .batch_size(e, n, t0)
            .max(n.saturating_add(waiting).min(inner.max_batch));
        let r = match self.lease_batched(key, batch).await {
            Ok(r) => r,
            Err(err) if err.is_unavailable() => {
                // The checks waiting for this flight answer by the policy too,
                // instead of each trying again (see `join_flight`).
                e.failures.fetch_add(1, Ordering::Release);
                return Ok(inner.remote.policy(key, n, true));
            }
            // The capacity, or a per-key data error: this check's alone.
            Err(err) => return Err(err),
        };
        let (expires, window_end, offset) = self.expiry(t0, &r);
        inner.note_offset(offset);
        if r.decision.allowed && r.granted >= n {
            let left = r.granted - n;
            e.store_lease(left, expires, window_end, offset);
            e.last_lease.store(t0, Ordering::Relaxed);
            e.leased.store(r.granted, Ordering::Relaxed);
            let at = inner
                .now()
                .saturating_add(offset)
                .min(window_end.saturating_sub(1));
            inner.front.charge(key, n, at);
            return Ok(Verdict {
                decision: Decision {
                    remaining: r.decision.remaining + left,
                    ..r.decision
                },
                source: Source::Redis,
                delay_ns: 0,
            });
        }
        // Denied, or granted fewer than n: those are kept for smaller requests.
        let (retry, cost) = if r.granted > 0 {
            e.store_lease(r.granted, expires, window_end, offset);
            e.last_lease.store(t0, Ordering::Relaxed);
            e.leased.store(r.granted, Ordering::Relaxed);
            (self.retry_for(n, r.granted, &r), n)
        } else {
            // A denial of one unit: it holds for every cost, until a batch of
            // this key's demand can be there (at saturation the next lease then
            // brings a batch, not the one unit freed first; the units wait in
            // Redis, not lost, and the wait is at most a batch's worth of rate).
            let batch_retry = self.retry_for(batch, 0, &r);
            (r.decision.retry_after_ns.max(batch_retry), 1)
        };
        e.deny_cost.store(cost, Ordering::Relaxed);
        e.deny_until
            .store(t0.saturating_add(retry), Ordering::Release);
        Ok(Verdict {
            decision: Decision {
                allowed: false,
                remaining: r.decision.remaining + r.granted,
                retry_after_ns: retry,
                ..r.decision
            },
            source: Source::Redis,
            delay_ns: 0,
        })
    }

    /// After a lease granted `granted < n` (all Redis had), the earliest `n` fresh
    /// units can be there, at the latest: a lower bound on when a retry can
    /// succeed.
    fn retry_for(&self, n: u64, granted: u64, r: &Reply) -> u64 {
        let limit = self.inner.remote.limit();
        (limit.script.partial_retry_ns)(&limit.params, n, granted, r.now_us)
    }

    /// A lease's local expiry, its window's end in Redis time, and the Redis-time
    /// offset (see the module docs' "Leases and time").
    fn expiry(&self, t0: u64, r: &Reply) -> (u64, u64, u64) {
        let inner = &*self.inner;
        let w = inner.window_ns;
        if w == 0 {
            return (t0.saturating_add(nanos(inner.cfg.lease_ttl)), u64::MAX, 0);
        }
        let now_ns = r.now_us.saturating_mul(1000);
        // Redis' true time was below now_us + 1 µs when it decided, at or after t0.
        let left = window_left_ns(r.now_us, w).saturating_sub(1000);
        let safe = left - (left >> DRIFT_SHIFT);
        let expires = t0.saturating_add(safe);
        let end = now_ns.saturating_add(window_left_ns(r.now_us, w));
        (expires, end, redis_offset(t0, r))
    }

    /// How many units the next lease of `e` asks for, for a check of `n` at
    /// `now` (see the module docs' "Lease size"): `n`, and the key's expected
    /// demand over the lease's life at its own rate (until `lease_ttl` for
    /// the buckets, until its window's end for the windows), at most
    /// `max_batch`. Updates the key's rate (the caller holds its flight).
    fn batch_size(&self, e: &Entry, n: u64, now: u64) -> u64 {
        let inner = &*self.inner;
        let max = inner.max_batch.max(n);
        let last = e.last_lease.load(Ordering::Relaxed);
        if last == 0 {
            return n; // no rate known yet: start small
        }
        let left = e.lease.load(Ordering::Relaxed) & UNITS;
        let spent = e.leased.load(Ordering::Relaxed).saturating_sub(left);
        // A bucket lease's units were spent while it lasted (its TTL): a check
        // that comes soon after it expired does not stretch the sample by its
        // gap (at a steady rate that read half a check's gap per lease low);
        // one that comes after more than a TTL again is a key gone quiet. (A
        // window lease lasts until its window's end, however little is left:
        // its samples run from lease to lease.)
        let elapsed = now.saturating_sub(last).max(1);
        let lasted = e.expires.load(Ordering::Relaxed).saturating_sub(last);
        let span =
            if inner.window_ns == 0 && elapsed > lasted && elapsed <= lasted.saturating_mul(2) {
                lasted.max(1)
            } else {
                elapsed
            };
        let rate = self.observe(e, spent, span, elapsed);
        let life = if inner.window_ns == 0 {
            nanos(inner.cfg.lease_ttl)
        } else {
            // A window's units are charged to it whenever they are spent, and
            // expire with it: lease what the key is expected to spend before
            // the window ends (Redis time estimated late: the time left, low).
            // A warm key's first lease has no offset of its own yet: the
            // limiter's last one (the cold check's reply set it).
            let offset = match e.offset.load(Ordering::Relaxed) {
                0 => inner.redis_offset.load(Ordering::Relaxed),
                o => o,
            };
            if offset == 0 {
                return n; // no Redis time known: no place in the window
            }
            let redis_now = now.saturating_add(offset);
            inner.window_ns - redis_now % inner.window_ns
        };
        // A quarter more (`HEADROOM`): what is left over when the lease ends
        // only lowers the key's admissions elsewhere, never raises any.
        let want = (rate * life as f64 / 1e9 * HEADROOM).ceil();
        // `as` saturates a float (and maps NaN to 0).
        (n - 1).saturating_add(want as u64).clamp(n, max)
    }

    /// Folds one sample, `spent` units over `span` ns of the last lease's life,
    /// `elapsed` ns since it was taken, into `e`'s rate: an average over about
    /// `horizon` (the sample weighs `1 − e^(−elapsed/horizon)`; the first one
    /// is taken as it is). The rate in units per second.
    fn observe(&self, e: &Entry, spent: u64, span: u64, elapsed: u64) -> f64 {
        let sample = spent as f64 * 1e9 / span as f64;
        let old = f64::from_bits(e.rate.load(Ordering::Relaxed));
        let horizon = nanos(self.inner.cfg.horizon).max(1) as f64;
        let rate = if old > 0.0 {
            let weight = 1.0 - (-(elapsed as f64) / horizon).exp();
            old + weight * (sample - old)
        } else {
            sample
        };
        e.rate.store(rate.to_bits(), Ordering::Relaxed);
        rate
    }
}

/// Redis time minus local time, rounded up, for a reply to a call sent at
/// local `t0`: local `t` is no later than Redis time `t + offset` (at least 1).
pub(crate) fn redis_offset(t0: u64, r: &Reply) -> u64 {
    let now_ns = r.now_us.saturating_mul(1000);
    now_ns.saturating_add(999).saturating_sub(t0).max(1)
}

pub(crate) fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// Units a check adds to its key's [`Entry::waiting`] while it waits for the
/// key's flight, taken back when dropped.
struct Waiting<'e>(&'e AtomicU64, u64);

impl<'e> Waiting<'e> {
    fn new(count: &'e AtomicU64, n: u64) -> Self {
        count.fetch_add(n, Ordering::AcqRel);
        Self(count, n)
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(self.1, Ordering::AcqRel);
    }
}
