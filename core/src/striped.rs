//! A striped token bucket for one very hot key shared by many threads.
//!
//! One atomic word that every core updates is a cache line bouncing between
//! cores: throughput *falls* as threads are added. The striped limiter splits one
//! quota into `N` token buckets (stripes), each in its own [`CachePadded`] block:
//! stripe `i` gets `1/N` of the rate (its emission interval is `N·T`, rounded up)
//! and `⌊b/N⌋` or `⌈b/N⌉` of the burst. A thread checks its own stripe (a
//! thread-local index under `std`, or one the caller passes), so uncontended
//! threads never share a line.
//!
//! When its stripe is empty a request **borrows** from the neighbours: it tries
//! each other stripe in turn, and a request larger than any one stripe's burst is
//! gathered from several stripes all-or-nothing (taken, and given back exactly if
//! the total falls short). So the whole burst `b` stays usable from any thread.
//!
//! Guarantee: every stripe admits at most `bᵢ + Δ/(N·T)` over any interval `Δ`,
//! so the limiter admits at most `b + Δ/T = b + r·Δ` overall — exactly the single
//! bucket's bound, under any interleaving.
//!
//! `remaining` on an admitted request counts the stripe that served it (a lower
//! bound on the whole). On a denial `remaining` is the sum over stripes and
//! `retry_after` the time the whole rate needs to refill the shortfall (the
//! stripes' refills are granular, so this is a lower bound).

use crossbeam_utils::CachePadded;

#[cfg(all(feature = "std", not(loom)))]
use crate::clock::Clock;
use crate::decision::{Decision, or_never};
use crate::error::{ConfigError, InsufficientCapacity};
use crate::limiter::{Algorithm, ConfigCell, Core};
use crate::quota::Quota;
use crate::token_bucket::{Gcra, GcraParams};

/// `N` cache-padded stripes of one token-bucket quota.
///
/// ```
/// use sluicegate::{Quota, Striped};
/// let hot: Striped<4, ()> = Striped::with_clock(Quota::per_second(1000).burst(8), ()).unwrap();
/// // 2 tokens per stripe, but any stripe can serve the whole burst by borrowing:
/// assert!(hot.check_n_at_stripe(0, 8, 0).unwrap().allowed);
/// assert!(!hot.check_at_stripe(3, 0).allowed);
/// ```
#[derive(Debug)]
pub struct Striped<const N: usize, C> {
    stripes: [CachePadded<Core<Gcra>>; N],
    /// The whole quota, for `limit` and estimates; read-only except `set_quota`.
    whole: CachePadded<ConfigCell>,
    clock: C,
}

/// The quota of stripe `i` of `n`.
fn stripe_quota(quota: &Quota, i: usize, n: usize) -> Result<Quota, ConfigError> {
    let n64 = n as u64;
    let period = quota
        .period_ns()
        .checked_mul(n64)
        .ok_or(ConfigError::TooLarge {
            field: "period",
            max: u64::MAX / n64,
        })?;
    let burst = quota.burst_size() / n64 + u64::from((i as u64) < quota.burst_size() % n64);
    Ok(Quota::from_nanos(quota.amount(), period).burst(burst))
}

/// The parameter words of stripe `i` of `n`.
pub(crate) fn stripe_words(
    quota: &Quota,
    i: usize,
    n: usize,
) -> Result<[u64; crate::limiter::PARAM_WORDS], ConfigError> {
    Ok(Gcra::to_words(&GcraParams::new(&stripe_quota(
        quota, i, n,
    )?)?))
}

/// Validates `quota` for `n` stripes; returns the whole quota's parameters.
pub(crate) fn whole_params(quota: &Quota, n: usize) -> Result<GcraParams, ConfigError> {
    let whole = GcraParams::new(quota)?;
    if n == 0 {
        return Err(ConfigError::Zero { field: "stripes" });
    }
    if (n as u64) > quota.burst_size() {
        return Err(ConfigError::TooLarge {
            field: "stripes",
            max: quota.burst_size(),
        });
    }
    for i in 0..n {
        GcraParams::new(&stripe_quota(quota, i, n)?)?;
    }
    Ok(whole)
}

impl<const N: usize, C> Striped<N, C> {
    /// `quota` split over `N` stripes (`1 ≤ N ≤ burst`), on `clock`.
    ///
    /// ```
    /// # use sluicegate::{ConfigError, Quota, Striped};
    /// assert_eq!(
    ///     Striped::<4, ()>::with_clock(Quota::per_second(10).burst(2), ()).unwrap_err(),
    ///     ConfigError::TooLarge { field: "stripes", max: 2 }
    /// );
    /// ```
    pub fn with_clock(quota: Quota, clock: C) -> Result<Self, ConfigError> {
        let whole = whole_params(&quota, N)?;
        let mut words = [[0; crate::limiter::PARAM_WORDS]; N];
        for (i, w) in words.iter_mut().enumerate() {
            *w = stripe_words(&quota, i, N)?;
        }
        Ok(Self {
            stripes: core::array::from_fn(|i| CachePadded::new(Core::from_words(words[i]))),
            whole: CachePadded::new(ConfigCell::new(whole.words())),
            clock,
        })
    }

    /// Admits one unit at `now`, starting from stripe `stripe` (any number; taken
    /// modulo `N`).
    ///
    /// ```
    /// # use sluicegate::{Quota, Striped};
    /// let s = Striped::<2, ()>::with_clock(Quota::per_second(2), ()).unwrap();
    /// assert!(s.check_at_stripe(7, 0).allowed);
    /// assert!(s.check_at_stripe(7, 0).allowed); // borrowed from the other stripe
    /// assert!(!s.check_at_stripe(7, 0).allowed);
    /// ```
    pub fn check_at_stripe(&self, stripe: usize, now: u64) -> Decision {
        or_never(self.check_n_at_stripe(stripe, 1, now))
    }

    /// Admits `n` units at `now` all-or-nothing, starting from stripe `stripe`.
    ///
    /// ```
    /// # use sluicegate::{Quota, Striped};
    /// let s = Striped::<2, ()>::with_clock(Quota::per_second(4), ()).unwrap();
    /// assert!(s.check_n_at_stripe(0, 3, 0).unwrap().allowed); // 2 + 1 borrowed
    /// assert!(!s.check_n_at_stripe(1, 2, 0).unwrap().allowed); // only 1 left
    /// assert!(s.check_n_at_stripe(1, 1, 0).unwrap().allowed);
    /// assert!(s.check_n_at_stripe(0, 5, 0).is_err());
    /// ```
    pub fn check_n_at_stripe(
        &self,
        stripe: usize,
        n: u64,
        now: u64,
    ) -> Result<Decision, InsufficientCapacity> {
        check_stripes::<N>(&self.stripes, &self.whole, stripe, n, now, true)
    }

    /// Changes the quota; every stripe's state carries over as in the token bucket.
    ///
    /// ```
    /// # use sluicegate::{Quota, Striped};
    /// let s = Striped::<2, ()>::with_clock(Quota::per_second(2), ()).unwrap();
    /// s.set_quota(&Quota::per_second(4)).unwrap();
    /// assert!(s.check_n_at_stripe(0, 4, 0).unwrap().allowed);
    /// assert!(s.set_quota(&Quota::per_second(1)).is_err()); // burst 1 < 2 stripes
    /// ```
    pub fn set_quota(&self, quota: &Quota) -> Result<(), ConfigError> {
        set_stripes_quota(&self.stripes, &self.whole, quota)
    }

    /// The clock.
    ///
    /// ```
    /// # use sluicegate::{Clock, ManualClock, Quota, Striped};
    /// let s = Striped::<2, _>::with_clock(Quota::per_second(2), ManualClock::new(1)).unwrap();
    /// assert_eq!(s.clock().now(), 1);
    /// ```
    pub fn clock(&self) -> &C {
        &self.clock
    }
}

#[cfg(all(feature = "std", not(loom)))]
impl<const N: usize, C: Clock> Striped<N, C> {
    /// Admits one unit now, starting from this thread's stripe.
    ///
    /// ```
    /// # use sluicegate::{Quota, Striped};
    /// let s = Striped::<2, _>::with_clock(Quota::per_second(100), sluicegate::QuantaClock::default()).unwrap();
    /// assert!(s.check().allowed);
    /// ```
    pub fn check(&self) -> Decision {
        self.check_at_stripe(crate::sync::thread_index(), self.clock.now())
    }

    /// Admits `n` units now, starting from this thread's stripe.
    ///
    /// ```
    /// # use sluicegate::{Quota, Striped};
    /// let s = Striped::<2, _>::with_clock(Quota::per_second(100), sluicegate::QuantaClock::default()).unwrap();
    /// assert!(s.check_n(100).unwrap().allowed);
    /// ```
    pub fn check_n(&self, n: u64) -> Result<Decision, InsufficientCapacity> {
        self.check_n_at_stripe(crate::sync::thread_index(), n, self.clock.now())
    }
}

/// Admits `n` units at `now` from `stripes` all-or-nothing, starting from stripe
/// `stripe` (modulo the count) and borrowing from the others; with `consume`
/// false, what that would answer, charging nothing. `whole` holds the whole
/// quota's parameters; `M`, at least the number of stripes, sizes the record of
/// what a gather took.
pub(crate) fn check_stripes<const M: usize>(
    stripes: &[CachePadded<Core<Gcra>>],
    whole: &ConfigCell,
    stripe: usize,
    n: u64,
    now: u64,
    consume: bool,
) -> Result<Decision, InsufficientCapacity> {
    debug_assert!(M >= stripes.len());
    let whole = GcraParams::from_words(whole.load());
    let burst = whole.burst();
    if n > burst {
        return Err(InsufficientCapacity {
            requested: n,
            capacity: burst,
        });
    }
    let count = stripes.len().max(1);
    let first = stripe % count;
    // Own stripe, then each neighbour, whole.
    for k in 0..stripes.len() {
        let s = &stripes[(first + k) % count];
        if let Ok((step, _)) = s.run(now, n, consume) {
            if step.decision.allowed {
                return Ok(Decision {
                    limit: burst,
                    ..step.decision
                });
            }
        }
    }
    Ok(gather(
        stripes,
        first,
        n,
        now,
        consume,
        &whole,
        &mut [(0, 0, 0); M],
    ))
}

/// Takes `n` from several stripes, or nothing (with `consume` false: whether it
/// could).
fn gather(
    stripes: &[CachePadded<Core<Gcra>>],
    first: usize,
    n: u64,
    now: u64,
    consume: bool,
    whole: &GcraParams,
    taken: &mut [(u64, u64, u64)],
) -> Decision {
    let count = stripes.len().min(taken.len());
    let mut need = n;
    let mut available = 0u64;
    let mut reset = 0u64;
    for k in 0..count {
        let i = (first + k) % count;
        let s = &stripes[i];
        let Ok((peek, _)) = s.run(now, 0, false) else {
            continue;
        };
        available = available.saturating_add(peek.decision.remaining);
        reset = reset.max(peek.decision.reset_after_ns);
        let m = peek.decision.remaining.min(need);
        if need == 0 || m == 0 {
            continue;
        }
        if let Ok((step, prev)) = s.run(now, m, consume) {
            if step.decision.allowed {
                taken[i] = (m, prev, step.next.unwrap_or(prev));
                need -= m;
            }
        }
    }
    if need == 0 {
        return Decision {
            allowed: true,
            remaining: available.saturating_sub(n),
            retry_after_ns: 0,
            reset_after_ns: reset.max(n.saturating_mul(whole.emission_interval_ns())),
            limit: whole.burst(),
        };
    }
    for (s, &(m, prev, next)) in stripes.iter().zip(taken.iter()) {
        if m > 0 && consume {
            s.give_back(m, prev, next, || now);
        }
    }
    let shortfall = n.saturating_sub(available);
    Decision {
        allowed: false,
        remaining: available,
        retry_after_ns: shortfall
            .max(1)
            .saturating_mul(whole.emission_interval_ns()),
        reset_after_ns: reset,
        limit: whole.burst(),
    }
}

/// Changes the quota of `stripes` (validated for their count first); every
/// stripe's state carries over as in the token bucket.
pub(crate) fn set_stripes_quota(
    stripes: &[CachePadded<Core<Gcra>>],
    whole: &ConfigCell,
    quota: &Quota,
) -> Result<(), ConfigError> {
    let n = stripes.len();
    let params = whole_params(quota, n)?;
    for (i, s) in stripes.iter().enumerate() {
        s.set_quota(&stripe_quota(quota, i, n)?)?;
    }
    whole.update(|_| Ok::<_, ConfigError>(params.words()))
}
