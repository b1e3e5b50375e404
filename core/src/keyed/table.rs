//! The check path: find a key's slot and run the shared CAS loop on it, or place
//! a new key (two-choice placement, the full-table policy, eviction into the
//! sketch).

use core::hash::BuildHasher;

use super::Keyed;
use super::slot::{FP_MASK, Group, KeySlot, Slot, claimed, fp_of, state_of};
use super::stats::{Event, FullPolicy};
use crate::decision::Decision;
use crate::error::InsufficientCapacity;
#[cfg(feature = "std")]
use crate::limiter::give_back_cell;
use crate::limiter::{Algorithm, Step, apply_cell};

/// Groups a key may live in: its home group and an independent second choice.
pub(super) const PROBE_GROUPS: usize = 2;

/// What one candidate group offers a new key: its first empty slot, its first
/// fresh one (with the values they held), and how many of either it has.
#[derive(Clone, Copy, Default)]
struct Room<'a> {
    empty: Option<(&'a Slot, u128)>,
    fresh: Option<(&'a Slot, u128)>,
    free: usize,
}

/// A key's hash, split: its fingerprint, home group and candidate groups.
struct Probe<'a> {
    fp: u64,
    home: usize,
    window: [&'a Group; PROBE_GROUPS],
    /// How many of `window` to probe (1 in a one-group table).
    probe: usize,
}

impl<A: Algorithm, C, S: AsRef<[Group]>, H: BuildHasher> Keyed<A, C, S, H> {
    /// The fingerprint, the home group of a hash and its second choice.
    #[inline]
    fn probe(&self, h: u64) -> Probe<'_> {
        let groups = self.groups.as_ref();
        let len = groups.len();
        let fp = match h & FP_MASK {
            0 => 1,
            f => f,
        };
        // Multiply-shift: the high bits of the hash pick the home group, uniformly;
        // a second, independent mix of the hash picks the other choice.
        let home = ((h as u128 * len as u128) >> 64) as usize;
        let mixed = h.rotate_left(32).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        let mut other = ((mixed as u128 * len as u128) >> 64) as usize;
        if other == home {
            other = if home + 1 == len { 0 } else { home + 1 };
        }
        Probe {
            fp,
            home,
            window: [&groups[home], &groups[other]],
            probe: if len == 1 { 1 } else { PROBE_GROUPS },
        }
    }

    #[inline(always)]
    fn find<'a>(probe: &Probe<'a>) -> Option<(&'a Slot, u128)> {
        for g in &probe.window[..probe.probe] {
            for s in g.slots() {
                let v = s.load();
                if fp_of(v) == probe.fp {
                    return Some((s, v));
                }
            }
        }
        None
    }

    /// The decision for hash `h`: find the key's slot (lock-free) and run the
    /// shared CAS loop on it, or place the key. Also returns the state word the
    /// decision was made on (for a give-back).
    #[inline]
    pub(super) fn run(
        &self,
        h: u64,
        n: u64,
        now: u64,
        consume: bool,
    ) -> Result<(Step, u64), InsufficientCapacity> {
        self.run_with(h, n, || now, consume)
    }

    /// [`Self::run`] with the time read by `now` once the key's slot has been
    /// looked up: the lookup's cache misses overlap the clock read instead of
    /// waiting for it.
    #[inline]
    pub(super) fn run_with(
        &self,
        h: u64,
        n: u64,
        now: impl FnOnce() -> u64,
        consume: bool,
    ) -> Result<(Step, u64), InsufficientCapacity> {
        let probe = self.probe(h);
        let mut hit = Self::find(&probe);
        let now = now();
        loop {
            if let Some((slot, v)) = hit {
                let cell = KeySlot { slot, fp: probe.fp };
                // Parameters are read after the slot, as in the single limiter
                // (limiter.rs explains why the order matters for `set_quota`).
                match apply_cell::<A, _>(&cell, v, || self.params(), now, n, consume)? {
                    Some(done) => return Ok(done),
                    // Another key took the slot over: look again.
                    None => {
                        hit = Self::find(&probe);
                        continue;
                    }
                }
            }
            if !consume {
                let p = self.params();
                check_capacity::<A>(&p, n)?;
                let start = self.sketch.start::<A>(&p, probe.fp, now);
                return Ok((A::decide(&p, start, now, n), start));
            }
            if let Some(step) = self.place(&probe, n, now)? {
                return Ok(step);
            }
            hit = Self::find(&probe);
        }
    }

    /// Gives back `n` units of the admission `prev -> next` of the key with hash
    /// `h` (a compound's all-or-nothing undo). A key no longer in the table gets
    /// nothing back: its charged state may already be in the sketch.
    // Only `AnyKeyed` (std) undoes a keyed admission.
    #[cfg(feature = "std")]
    pub(super) fn give_back(&self, h: u64, n: u64, taken: (u64, u64), now: impl Fn() -> u64) {
        let probe = self.probe(h);
        if let Some((slot, v)) = Self::find(&probe) {
            let cell = KeySlot { slot, fp: probe.fp };
            give_back_cell::<A, _>(&cell, v, || self.params(), n, taken, now);
        }
    }

    /// Places a new key under its home group's lock. `None`: the key turned out
    /// to be present (placed by a racing request), decide again.
    fn place(
        &self,
        probe: &Probe<'_>,
        n: u64,
        now: u64,
    ) -> Result<Option<(Step, u64)>, InsufficientCapacity> {
        probe.window[0].lock();
        let outcome = self.place_locked(probe, n, now);
        probe.window[0].unlock();
        outcome
    }

    fn place_locked(
        &self,
        probe: &Probe<'_>,
        n: u64,
        now: u64,
    ) -> Result<Option<(Step, u64)>, InsufficientCapacity> {
        let Probe { fp, home, .. } = *probe;
        loop {
            if Self::find(probe).is_some() {
                return Ok(None);
            }
            // Only now, with the key absent and its home lock held (so no one can
            // place it, hence no one can evict it), is the sketch complete for it:
            // an eviction folds before it frees the slot, and our `find` saw the
            // slot freed.
            let p = self.params();
            check_capacity::<A>(&p, n)?;
            let start = self.sketch.start::<A>(&p, fp, now);
            let step = A::decide(&p, start, now, n);
            let Some(next) = step.next else {
                // Denied (or a cost of 0): nothing to remember, no slot taken.
                return Ok(Some((step, start)));
            };
            // Per candidate group: its first empty slot, its first fresh one, and how
            // many it has of either. The new key goes to the group with more room
            // ("two choices"): at 80 % load that leaves 0.02 % of keys without a
            // slot, against 2.5 % for first-fit over two adjacent groups.
            let mut room = [Room::default(); PROBE_GROUPS];
            let mut stalest: Option<(&Slot, u128, u64)> = None;
            for (g, r) in probe.window[..probe.probe].iter().zip(room.iter_mut()) {
                for s in g.slots() {
                    let v = s.load();
                    if fp_of(v) == 0 {
                        r.empty.get_or_insert((s, v));
                        r.free += 1;
                    } else if A::is_fresh(&p, state_of(v), now) {
                        r.fresh.get_or_insert((s, v));
                        r.free += 1;
                    } else {
                        let left = A::decide(&p, state_of(v), now, 0).decision.reset_after_ns;
                        if stalest.is_none_or(|(_, _, l)| left < l) {
                            stalest = Some((s, v, left));
                        }
                    }
                }
            }
            let best = if room[1].free > room[0].free {
                room[1]
            } else {
                room[0]
            };
            let (target, event) = match (best.empty, best.fresh, stalest) {
                (Some(t), _, _) => (t, Event::Inserted),
                (None, Some(t), _) => (t, Event::Reused),
                (None, None, Some((s, v, left))) => match self.policy {
                    // Remember the evicted key before its slot is freed, so that
                    // whoever sees the slot taken over also sees the sketch.
                    FullPolicy::EvictStalest
                        if self.sketch.fold::<A>(&p, fp_of(v), state_of(v), now) =>
                    {
                        ((s, v), Event::Evicted)
                    }
                    FullPolicy::EvictStalest | FullPolicy::Reject => {
                        self.stats.count(home, Event::Rejected);
                        return Ok(Some((
                            Step {
                                decision: Decision {
                                    allowed: false,
                                    remaining: 0,
                                    retry_after_ns: left,
                                    reset_after_ns: left,
                                    limit: A::capacity(&p),
                                },
                                next: None,
                                delay_ns: 0,
                            },
                            start,
                        )));
                    }
                    FullPolicy::AllowUnlimited => {
                        self.stats.count(home, Event::Unlimited);
                        return Ok(Some((Step { next: None, ..step }, start)));
                    }
                },
                // Every probed slot was empty, fresh or live: unreachable, but a
                // retry is the safe answer.
                (None, None, None) => continue,
            };
            let (slot, v) = target;
            if slot.cas(v, claimed(v, fp, next)) {
                self.stats.count(home, event);
                return Ok(Some((step, start)));
            }
            // The slot changed under us (its owner checked, or a key from another
            // home group took it): choose again.
        }
    }
}

#[inline]
fn check_capacity<A: Algorithm>(p: &A::Params, n: u64) -> Result<(), InsufficientCapacity> {
    let capacity = A::capacity(p);
    if n > capacity {
        return Err(InsufficientCapacity {
            requested: n,
            capacity,
        });
    }
    Ok(())
}
