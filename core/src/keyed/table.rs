//! The check path: find a key's slot and run the shared CAS loop on it, or place
//! a new key (two-choice placement, the full-table policy, eviction into the
//! sketch).
//!
//! The path is written once, over a [`Space`]: the slots a limit's keys live in
//! and what the limit knows of them. A [`Keyed`] table is a space of its own (every
//! slot is its own); a limit in a [`super::Pool`] shares its slots with other
//! limits and judges their slots through the pool's registry.

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

/// What a slot holds, as seen by a new key being placed.
#[derive(Clone, Copy)]
pub(super) enum Held {
    /// Nothing: free.
    Empty,
    /// A state that decides like a fresh one (or whose limit is gone): free to
    /// take over without changing any decision.
    Fresh,
    /// A live state, full again in `left` nanoseconds.
    Live { left: u64 },
}

/// The slots one limit's keys live in, and what the limit knows of them.
pub(super) trait Space<A: Algorithm> {
    /// The groups.
    fn groups(&self) -> &[Group];
    /// The limit's parameters now.
    fn params(&self) -> A::Params;
    /// The fingerprint of a key hash in this space (non-zero, within
    /// [`FP_MASK`]) and the hash that picks its groups.
    fn locate(&self, h: u64) -> (u64, u64);
    /// What the slot value `v` holds at `now`, for a new key of this limit.
    fn held(&self, p: &A::Params, v: u128, now: u64) -> Held;
    /// Whether a new key may take the slot holding `v` while the limit is at its
    /// bound of live keys (`bounded`): then only its own slots.
    fn may_take(&self, v: u128, bounded: bool) -> bool;
    /// Remembers the live state in `v` before its slot is taken over (the
    /// sketch); `false`: it cannot be remembered, so it must not be evicted.
    fn fold(&self, p: &A::Params, v: u128, now: u64) -> bool;
    /// The state a key `fp` of this limit that is not in the table starts from.
    fn start(&self, p: &A::Params, fp: u64, now: u64) -> u64;
    /// What to do when every candidate slot is live.
    fn full_policy(&self) -> FullPolicy;
    /// Records a placement event in home group `home`; `prev` is what the slot
    /// held before (for a placement).
    fn record(&self, home: usize, e: Event, prev: u128);
    /// Whether the limit holds as many live keys as it may (checked before a
    /// placement, outside any lock).
    fn bounded(&self, now: u64) -> bool;
}

/// What one candidate group offers a new key: its first empty slot, its first
/// fresh one (with the values they held), and how many of either it has.
#[derive(Clone, Copy, Default)]
struct Room<'a> {
    empty: Option<(&'a Slot, u128)>,
    fresh: Option<(&'a Slot, u128)>,
    free: usize,
}

/// A key's hash, split: its fingerprint, home group and candidate groups.
pub(super) struct Probe<'a> {
    fp: u64,
    home: usize,
    window: [&'a Group; PROBE_GROUPS],
    /// How many of `window` to probe (1 in a one-group table).
    probe: usize,
}

/// The fingerprint of hash `h` in `space`, its home group and second choice.
#[inline]
pub(super) fn probe<A: Algorithm, S: Space<A> + ?Sized>(space: &S, h: u64) -> Probe<'_> {
    let groups = space.groups();
    let len = groups.len();
    let (fp, h) = space.locate(h);
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

/// The decision for hash `h` in `space`, with the time read by `now` once the
/// key's slot has been looked up (the lookup's cache misses overlap the clock
/// read): find the key's slot (lock-free) and run the shared CAS loop on it, or
/// place the key. Also returns the state word the decision was made on (for a
/// give-back).
#[inline]
pub(super) fn run_with<A: Algorithm, S: Space<A> + ?Sized>(
    space: &S,
    h: u64,
    n: u64,
    now: impl FnOnce() -> u64,
    consume: bool,
) -> Result<(Step, u64), InsufficientCapacity> {
    let probe = probe(space, h);
    let mut hit = find(&probe);
    let now = now();
    loop {
        if let Some((slot, v)) = hit {
            let cell = KeySlot { slot, fp: probe.fp };
            // Parameters are read after the slot, as in the single limiter
            // (limiter.rs explains why the order matters for `set_quota`).
            match apply_cell::<A, _>(&cell, v, || space.params(), now, n, consume)? {
                Some(done) => return Ok(done),
                // Another key took the slot over: look again.
                None => {
                    hit = find(&probe);
                    continue;
                }
            }
        }
        if !consume {
            let p = space.params();
            check_capacity::<A>(&p, n)?;
            let start = space.start(&p, probe.fp, now);
            return Ok((A::decide(&p, start, now, n), start));
        }
        if let Some(step) = place(space, &probe, n, now)? {
            return Ok(step);
        }
        hit = find(&probe);
    }
}

/// Gives back `n` units of the admission `prev -> next` of the key with hash
/// `h` (a compound's all-or-nothing undo, a policy's refund). A key no longer in
/// the table gets nothing back: its charged state may already be in the sketch.
pub(super) fn give_back<A: Algorithm, S: Space<A> + ?Sized>(
    space: &S,
    h: u64,
    n: u64,
    taken: (u64, u64),
    now: impl Fn() -> u64,
) {
    let probe = probe(space, h);
    if let Some((slot, v)) = find(&probe) {
        let cell = KeySlot { slot, fp: probe.fp };
        give_back_cell::<A, _>(&cell, v, || space.params(), n, taken, now);
    }
}

/// Places a new key under its home group's lock. `None`: the key turned out
/// to be present (placed by a racing request), decide again.
fn place<A: Algorithm, S: Space<A> + ?Sized>(
    space: &S,
    probe: &Probe<'_>,
    n: u64,
    now: u64,
) -> Result<Option<(Step, u64)>, InsufficientCapacity> {
    let bounded = space.bounded(now);
    probe.window[0].lock();
    let outcome = place_locked(space, probe, n, now, bounded);
    probe.window[0].unlock();
    outcome
}

fn place_locked<A: Algorithm, S: Space<A> + ?Sized>(
    space: &S,
    probe: &Probe<'_>,
    n: u64,
    now: u64,
    bounded: bool,
) -> Result<Option<(Step, u64)>, InsufficientCapacity> {
    let Probe { fp, home, .. } = *probe;
    loop {
        if find(probe).is_some() {
            return Ok(None);
        }
        // Only now, with the key absent and its home lock held (so no one can
        // place it, hence no one can evict it), is the sketch complete for it:
        // an eviction folds before it frees the slot, and our `find` saw the
        // slot freed.
        let p = space.params();
        check_capacity::<A>(&p, n)?;
        let start = space.start(&p, fp, now);
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
                if !space.may_take(v, bounded) {
                    continue;
                }
                match space.held(&p, v, now) {
                    Held::Empty => {
                        r.empty.get_or_insert((s, v));
                        r.free += 1;
                    }
                    Held::Fresh => {
                        r.fresh.get_or_insert((s, v));
                        r.free += 1;
                    }
                    Held::Live { left } => {
                        if stalest.is_none_or(|(_, _, l)| left < l) {
                            stalest = Some((s, v, left));
                        }
                    }
                }
            }
        }
        let best = if room[1].free > room[0].free {
            room[1]
        } else {
            room[0]
        };
        // Turned away: no room, by the policy or because the eviction could not be
        // remembered; `left` is when a candidate frees up, as far as is known.
        let turned_away = |left: u64| {
            space.record(home, Event::Rejected, 0);
            Ok(Some((
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
            )))
        };
        let (target, event) = match (best.empty, best.fresh, stalest) {
            (Some(t), _, _) => (t, Event::Inserted),
            (None, Some(t), _) => (t, Event::Reused),
            (None, None, _) if space.full_policy() == FullPolicy::AllowUnlimited => {
                space.record(home, Event::Unlimited, 0);
                return Ok(Some((Step { next: None, ..step }, start)));
            }
            // Remember the evicted key before its slot is freed, so that whoever
            // sees the slot taken over also sees the sketch.
            (None, None, Some((s, v, _)))
                if space.full_policy() == FullPolicy::EvictStalest && space.fold(&p, v, now) =>
            {
                ((s, v), Event::Evicted)
            }
            (None, None, Some((_, _, left))) => return turned_away(left),
            // No slot this limit may take (at its bound of live keys, none of the
            // candidates is its own).
            (None, None, None) => return turned_away(step.decision.reset_after_ns),
        };
        let (slot, v) = target;
        if slot.cas(v, claimed(v, fp, next)) {
            space.record(home, event, v);
            return Ok(Some((step, start)));
        }
        // The slot changed under us (its owner checked, or a key from another
        // home group took it): choose again.
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

/// A table's own sketch cells carry this owner tag (every slot is the table's).
pub(super) const OWN: u64 = 1;

impl<A: Algorithm, C, S: AsRef<[Group]>, H: BuildHasher> Space<A> for Keyed<A, C, S, H> {
    #[inline(always)]
    fn groups(&self) -> &[Group] {
        self.groups.as_ref()
    }
    #[inline(always)]
    fn params(&self) -> A::Params {
        Keyed::params(self)
    }
    #[inline(always)]
    fn locate(&self, h: u64) -> (u64, u64) {
        let fp = match h & FP_MASK {
            0 => 1,
            f => f,
        };
        (fp, h)
    }
    fn held(&self, p: &A::Params, v: u128, now: u64) -> Held {
        judge::<A>(p, v, now)
    }
    fn may_take(&self, _: u128, _: bool) -> bool {
        true
    }
    fn fold(&self, p: &A::Params, v: u128, now: u64) -> bool {
        self.sketch
            .fold::<A>(p, OWN, fp_of(v), state_of(v), now, |_| false)
    }
    fn start(&self, p: &A::Params, fp: u64, now: u64) -> u64 {
        self.sketch.start::<A>(p, OWN, fp, now)
    }
    fn full_policy(&self) -> FullPolicy {
        self.policy
    }
    fn record(&self, home: usize, e: Event, _: u128) {
        self.stats.count(home, e);
    }
    fn bounded(&self, _: u64) -> bool {
        false
    }
}

/// What slot value `v` holds for a limit of algorithm `A` with parameters `p`.
#[inline]
pub(super) fn judge<A: Algorithm>(p: &A::Params, v: u128, now: u64) -> Held {
    if fp_of(v) == 0 {
        Held::Empty
    } else if A::is_fresh(p, state_of(v), now) {
        Held::Fresh
    } else {
        Held::Live {
            left: A::decide(p, state_of(v), now, 0).decision.reset_after_ns,
        }
    }
}

impl<A: Algorithm, C, S: AsRef<[Group]>, H: BuildHasher> Keyed<A, C, S, H> {
    /// See [`run_with`], with the time known.
    #[inline]
    pub(super) fn run(
        &self,
        h: u64,
        n: u64,
        now: u64,
        consume: bool,
    ) -> Result<(Step, u64), InsufficientCapacity> {
        run_with(self, h, n, || now, consume)
    }

    /// See [`run_with`].
    #[inline]
    pub(super) fn run_with(
        &self,
        h: u64,
        n: u64,
        now: impl FnOnce() -> u64,
        consume: bool,
    ) -> Result<(Step, u64), InsufficientCapacity> {
        run_with(self, h, n, now, consume)
    }
}
