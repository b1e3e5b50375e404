//! Several limits checked all-or-nothing, e.g. 10 per second *and* 1000 per hour.
//!
//! # Design: check all, then commit, with exact give-back
//! A request is first *peeked* against every limit; if any would deny, the request
//! is denied and nothing is charged anywhere. Otherwise each limit is charged in
//! turn with its own compare-and-swap. If a concurrent request took the last room
//! of a later limit in between, the earlier charges are given back:
//!
//! * if nothing touched that limit since, its word is restored exactly;
//! * otherwise the algorithm's inverse is applied: windows subtract the count from
//!   the window it was added to (exact, counts are additive); the token bucket
//!   credits `n·T` less the time elapsed since the charge's base instant, read
//!   after the exact restore failed — with every caller on one monotonic clock this
//!   never credits more than the charge still weighs, so no limit is ever
//!   over-admitted. With caller-supplied timestamps (`_at`) the bound holds when the
//!   racing callers' timestamps are not ahead of this caller's.
//!
//! Each limit is charged by its own CAS, so no limit ever admits more than its own
//! quota under any interleaving; a racing request may see a tentative charge and be
//! denied although the final outcome would have let it through (a conservative,
//! transient denial). A double-width word was rejected: it would cap every limit
//! at 32 bits of state and need 128-bit atomics that loom cannot model.
//!
//! The decision reports the *binding* limit: the one with the fewest remaining
//! units (`remaining` and `limit` from it), the longest `retry_after` and the
//! longest `reset_after`.

use crate::clock::Clock;
use crate::decision::{Decision, or_never};
use crate::error::{ConfigError, InsufficientCapacity};
use crate::limiter::{Algorithm, Core, PARAM_WORDS};
use crate::quota::Quota;

/// `N` limits of one algorithm, admitted together or not at all.
///
/// ```
/// use sluicegate::{Compound, Gcra, Quota};
/// // 2 per second and 3 per minute
/// let c: Compound<Gcra, 2, ()> =
///     Compound::with_clock([Quota::per_second(2), Quota::per_minute(3)], ()).unwrap();
/// assert!(c.check_at(0).allowed);
/// assert!(c.check_at(0).allowed);
/// assert!(!c.check_at(0).allowed); // the per-second limit
/// let sec = 1_000_000_000;
/// assert!(c.check_at(sec).allowed);
/// let d = c.check_at(sec);
/// assert!(!d.allowed); // now the per-minute limit binds
/// assert_eq!(d.limit, 3);
/// ```
#[derive(Debug)]
pub struct Compound<A, const N: usize, C> {
    parts: [Core<A>; N],
    clock: C,
}

impl<A: Algorithm, const N: usize, C> Compound<A, N, C> {
    /// Builds the limits from `quotas` (at least one), on `clock`.
    ///
    /// ```
    /// # use sluicegate::{Compound, ConfigError, Fixed, Quota};
    /// let bad = Compound::<Fixed, 2, ()>::with_clock([Quota::per_second(1), Quota::per_second(0)], ());
    /// assert_eq!(bad.unwrap_err(), ConfigError::Zero { field: "limit" });
    /// assert!(Compound::<Fixed, 0, ()>::with_clock([], ()).is_err());
    /// ```
    pub fn with_clock(quotas: [Quota; N], clock: C) -> Result<Self, ConfigError> {
        if N == 0 {
            return Err(ConfigError::Zero { field: "limits" });
        }
        let mut words = [[0; PARAM_WORDS]; N];
        for (slot, q) in words.iter_mut().zip(&quotas) {
            *slot = A::to_words(&A::params(q)?);
        }
        let parts = core::array::from_fn(|i| Core::from_words(words[i]));
        Ok(Self { parts, clock })
    }

    /// Admits one unit at `now` if every limit allows.
    ///
    /// ```
    /// # use sluicegate::{Compound, Sliding, Quota};
    /// let c = Compound::<Sliding, 2, ()>::with_clock([Quota::per_second(1), Quota::per_hour(10)], ()).unwrap();
    /// assert!(c.check_at(0).allowed);
    /// ```
    pub fn check_at(&self, now: u64) -> Decision {
        self.charge(1, now, || now, or_never)
    }

    /// Admits `n` units at `now` if every limit allows, charging none otherwise.
    ///
    /// ```
    /// # use sluicegate::{Compound, Gcra, Quota};
    /// let c = Compound::<Gcra, 2, ()>::with_clock([Quota::per_second(10), Quota::per_minute(15)], ()).unwrap();
    /// assert!(c.check_n_at(10, 0).unwrap().allowed);
    /// assert!(!c.check_n_at(6, 1_000_000_000).unwrap().allowed); // per-minute has 5
    /// assert!(c.check_n_at(5, 1_000_000_000).unwrap().allowed);  // and nothing was lost
    /// assert!(c.check_n_at(11, 0).is_err()); // more than the per-second burst
    /// ```
    pub fn check_n_at(&self, n: u64, now: u64) -> Result<Decision, InsufficientCapacity> {
        self.charge(n, now, || now, core::convert::identity)
    }

    /// What [`Self::check_n_at`] would answer, charging nothing.
    ///
    /// ```
    /// # use sluicegate::{Compound, Gcra, Quota};
    /// let c = Compound::<Gcra, 2, ()>::with_clock([Quota::per_second(10), Quota::per_minute(15)], ()).unwrap();
    /// assert_eq!(c.peek_n_at(4, 0).unwrap().remaining, 6);
    /// assert_eq!(c.peek_n_at(4, 0).unwrap().remaining, 6);
    /// ```
    pub fn peek_n_at(&self, n: u64, now: u64) -> Result<Decision, InsufficientCapacity> {
        peek_all(&self.parts, n, now)
    }

    /// Changes the quota of limit `index`. An index out of range is a
    /// [`ConfigError::TooLarge`] for the field `index`.
    ///
    /// ```
    /// # use sluicegate::{Compound, Gcra, Quota};
    /// let c = Compound::<Gcra, 2, ()>::with_clock([Quota::per_second(1), Quota::per_minute(5)], ()).unwrap();
    /// c.set_quota(0, &Quota::per_second(5)).unwrap();
    /// assert_eq!(c.check_n_at(5, 0).unwrap().remaining, 0);
    /// assert!(c.set_quota(2, &Quota::per_second(5)).is_err());
    /// ```
    pub fn set_quota(&self, index: usize, quota: &Quota) -> Result<(), ConfigError> {
        match self.parts.get(index) {
            Some(part) => part.set_quota(quota),
            None => Err(ConfigError::TooLarge {
                field: "index",
                max: N.saturating_sub(1) as u64,
            }),
        }
    }

    /// The clock.
    ///
    /// ```
    /// # use sluicegate::{Clock, Compound, Gcra, ManualClock, Quota};
    /// let c = Compound::<Gcra, 1, _>::with_clock([Quota::per_second(1)], ManualClock::new(2)).unwrap();
    /// assert_eq!(c.clock().now(), 2);
    /// ```
    pub fn clock(&self) -> &C {
        &self.clock
    }

    #[inline(always)]
    fn charge<R>(
        &self,
        n: u64,
        now: u64,
        refund_now: impl Fn() -> u64,
        finish: impl Fn(Result<Decision, InsufficientCapacity>) -> R,
    ) -> R {
        charge_all(&self.parts, &mut [(0, 0); N], n, now, refund_now, finish)
    }
}

/// What charging `n` to every limit in `parts` at `now` would answer, charging
/// nothing: the binding limit's decision.
pub(crate) fn peek_all<A: Algorithm>(
    parts: &[Core<A>],
    n: u64,
    now: u64,
) -> Result<Decision, InsufficientCapacity> {
    let mut combined = None;
    for part in parts {
        let (step, _) = part.run(now, n, false)?;
        combined = Some(merge(combined, &step.decision));
    }
    Ok(combined.unwrap_or_else(no_limits))
}

/// Charges `n` to every limit in `parts` at `now`, or to none (see the module
/// docs). `taken` has room for one `(word before, word after)` per part;
/// `refund_now` is read only if a give-back has to compute one.
///
/// The peek keeps, per part, the word it decided on and the word the charge would
/// write, so a part that nothing touched since is charged with one
/// compare-and-swap from that word, without deciding again; a part that changed
/// is decided again on its new word ([`charge_rest`]).
///
/// The answer is passed through `finish` on every path, inside the cold retry
/// too: a caller that maps it (`check_at` turns an error into a denial) then gets
/// its own return value from both paths, written once where it is returned. With
/// the mapping after a shared `Result`, the fast path's answer went through a
/// stack temporary that `charge_rest` also returns into, and the copy out of it
/// reloaded the one-byte `allowed` as part of a word: a store-forwarding stall.
#[inline(always)]
pub(crate) fn charge_all<A: Algorithm, R>(
    parts: &[Core<A>],
    taken: &mut [(u64, u64)],
    n: u64,
    now: u64,
    refund_now: impl Fn() -> u64,
    finish: impl Fn(Result<Decision, InsufficientCapacity>) -> R,
) -> R {
    debug_assert!(taken.len() >= parts.len());
    let mut peeked = None;
    for (part, slot) in parts.iter().zip(taken.iter_mut()) {
        let (step, cur) = match part.run(now, n, false) {
            Ok(ran) => ran,
            Err(e) => return finish(Err(e)),
        };
        *slot = (cur, step.next.unwrap_or(cur));
        peeked = Some(merge(peeked, &step.decision));
    }
    let peeked = peeked.unwrap_or_else(no_limits);
    if !peeked.allowed || n == 0 {
        return finish(Ok(peeked));
    }
    for i in 0..parts.len() {
        let (prev, next) = taken[i];
        if next != prev && !parts[i].cas(prev, next) {
            return charge_rest(parts, taken, i, n, now, refund_now, finish);
        }
    }
    // Every part was charged from the word its peek decided on: the answer is the
    // peek's.
    finish(Ok(peeked))
}

/// [`charge_all`] from part `first` on, once its word changed after the peek:
/// parts before it are charged (with their peek's decisions, decided again on the
/// word they were charged from); each later part is decided again on its current
/// word, and a denial gives the earlier charges back. Its answer goes through
/// `finish`, as [`charge_all`]'s does.
#[cold]
fn charge_rest<A: Algorithm, R>(
    parts: &[Core<A>],
    taken: &mut [(u64, u64)],
    first: usize,
    n: u64,
    now: u64,
    refund_now: impl Fn() -> u64,
    finish: impl Fn(Result<Decision, InsufficientCapacity>) -> R,
) -> R {
    let mut recharge = || -> Result<Decision, InsufficientCapacity> {
        let mut combined = None;
        for (part, &(prev, _)) in parts[..first].iter().zip(&taken[..first]) {
            let d = A::decide(&part.params(), prev, now, n).decision;
            combined = Some(merge(combined, &d));
        }
        for (i, part) in parts.iter().enumerate().skip(first) {
            // `n` fit every part during the peek; a concurrent `set_quota` may have
            // shrunk one since, which is reported like any other error.
            let charged = part.run(now, n, true);
            let step = match charged {
                Ok((step, _)) if step.decision.allowed => step,
                other => {
                    for (earlier, &(prev, next)) in parts[..i].iter().zip(&taken[..i]) {
                        earlier.give_back(n, prev, next, &refund_now);
                    }
                    return other.map(|(step, _)| merge(combined, &step.decision));
                }
            };
            if let (Ok((_, prev)), Some(slot)) = (charged, taken.get_mut(i)) {
                *slot = (prev, step.next.unwrap_or(prev));
            }
            combined = Some(merge(combined, &step.decision));
        }
        Ok(combined.unwrap_or_else(no_limits))
    };
    finish(recharge())
}

#[inline]
pub(crate) fn merge(acc: Option<Decision>, d: &Decision) -> Decision {
    match acc {
        None => *d,
        Some(a) => {
            // The binding limit: a denying one first, then the fewest remaining,
            // then the longest waits.
            let rank = |x: &Decision| {
                (
                    x.allowed,
                    x.remaining,
                    u64::MAX - x.retry_after_ns,
                    u64::MAX - x.reset_after_ns,
                )
            };
            let binding = if rank(d) < rank(&a) { d } else { &a };
            Decision {
                allowed: a.allowed && d.allowed,
                remaining: binding.remaining,
                retry_after_ns: a.retry_after_ns.max(d.retry_after_ns),
                reset_after_ns: a.reset_after_ns.max(d.reset_after_ns),
                limit: binding.limit,
            }
        }
    }
}

fn no_limits() -> Decision {
    Decision {
        allowed: true,
        remaining: u64::MAX,
        retry_after_ns: 0,
        reset_after_ns: 0,
        limit: u64::MAX,
    }
}

impl<A: Algorithm, const N: usize, C: Clock> Compound<A, N, C> {
    /// Admits one unit now.
    ///
    /// ```
    /// # use sluicegate::{Compound, Gcra, ManualClock, Quota};
    /// let c = Compound::<Gcra, 1, _>::with_clock([Quota::per_second(1)], ManualClock::new(0)).unwrap();
    /// assert!(c.check().allowed);
    /// ```
    pub fn check(&self) -> Decision {
        self.charge(1, self.clock.now(), || self.clock.now(), or_never)
    }

    /// Admits `n` units now; a give-back reads the clock afresh (see the module docs).
    ///
    /// ```
    /// # use sluicegate::{Compound, Gcra, ManualClock, Quota};
    /// let c = Compound::<Gcra, 1, _>::with_clock([Quota::per_second(3)], ManualClock::new(0)).unwrap();
    /// assert_eq!(c.check_n(3).unwrap().remaining, 0);
    /// ```
    pub fn check_n(&self, n: u64) -> Result<Decision, InsufficientCapacity> {
        self.charge(
            n,
            self.clock.now(),
            || self.clock.now(),
            core::convert::identity,
        )
    }
}
