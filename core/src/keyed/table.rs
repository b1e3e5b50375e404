//! The check path: find a key's slot and run the shared CAS loop on it, or place
//! a new key (two-choice placement, the full-table policy, eviction into the
//! sketch).
//!
//! The path is written once, over a [`Space`]: the slots a limit's keys live in
//! and what the limit knows of them. A [`Keyed`] table is a space of its own (every
//! slot is its own); a limit in a [`super::Pool`] shares its slots with other
//! limits and judges their slots through the pool's registry.
//!
//! # Placing a new key without a lock
//! Two racing first requests of one key must not land in two slots (each would
//! start from a full bucket). No lock serialises them, so that a thread — or a
//! process sharing the table, killed at any instruction — can never leave
//! anything held. A placement runs in named steps:
//!
//! 1. **find**: the key is in no candidate slot (a *pending* slot of the key is
//!    waited for a bounded spin, then withdrawn: its placer may be dead);
//! 2. **decide** from the sketch's start state `s0`; a denial places nothing;
//! 3. **claim** a free slot by CAS, marked *pending* (bit 127) with a token unique
//!    to this claim where the state will go: nobody decides on a pending slot,
//!    and nobody but the validation rule below touches it until it is stale;
//! 4. **validate**: look at every other candidate slot again. Another slot of
//!    the key that is committed wins: withdraw ours (CAS it empty), decide again.
//!    Another pending one: the one earlier in the scan order wins; the later one
//!    is withdrawn, by its placer or by the winner (a CAS of that exact value);
//! 5. **re-read the sketch**: if the start state is no longer `s0` (the key was
//!    evicted meanwhile and folded there), withdraw and decide again;
//! 6. **commit**: CAS our exact pending value to the committed one. If it fails,
//!    someone withdrew it: start over. (The token is why a withdrawn claim made
//!    again by a third placer of the key is not our value: see
//!    [`super::slot::pending`].)
//!
//! At most one slot of a key is ever committed: of two placers, the one that
//! validates second sees the other's claim (each claims before it validates),
//! and each rule either withdraws one of the two or leaves the later to be
//! withdrawn before it can commit — the commit CAS and the withdrawing CAS of
//! one pending value cannot both succeed. A placer that dies between any two
//! steps leaves either nothing, a free slot it evicted into the sketch (its key's
//! state is in the sketch: step 5's order), or a pending slot, which is nobody's
//! state: the next placement of that key withdraws it after a bounded spin, and
//! any placement takes it over once it is stale (about a second old by the
//! placer's clock).
//!
//! The loom model `a_placer_killed_between_any_two_steps_leaves_every_limit_whole`
//! (loom-tests/tests/keyed.rs) stops a placer for good after step 3's choice
//! (an eviction folded, nothing claimed), after its claim, and after
//! validation, while another request checks the evicted key, in every
//! interleaving: no key gets more than its limit, the other key keeps its
//! state, and the dead placer's key is checked again (a model that left the
//! pending claim in place instead of withdrawing it fails: the next check
//! spins forever).
//!
//! A withdrawing CAS that fails (step 4) means the claim moved on — it may have
//! been committed meanwhile — so the slot is looked at again, never assumed gone.

use core::hash::BuildHasher;

use super::Keyed;
use super::slot::{
    DROP_SKEW_NS, FP_MASK, GROUP_SLOTS, Group, KeySlot, Slot, claimed, committed_to, droppable,
    fp_of, is_pending, pending, pending_held, state_of,
};
use super::stats::{Event, FullPolicy};
use crate::decision::Decision;
use crate::error::InsufficientCapacity;
#[cfg(feature = "std")]
use crate::limiter::give_back_cell;
use crate::limiter::{Algorithm, Step, apply_cell};
use crate::sync::spin_loop;

/// How many times a placement looks again at another placer's pending slot of
/// its key before it withdraws it (its placer may be dead).
const PENDING_SPINS: usize = 64;

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
    /// held before and `slot` the slot (for a placement).
    fn record(&self, home: usize, e: Event, prev: u128, slot: Option<&Slot>);
    /// Whether the limit holds as many live keys as it may (checked before a
    /// placement).
    fn bounded(&self, now: u64) -> bool;
    /// At its bound with none of its slots among a new key's candidates: frees
    /// one of its own live keys elsewhere (remembered in the sketch) so that the
    /// new key may take any slot; `false` if it found none.
    fn make_room(&self, p: &A::Params, now: u64) -> bool;
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

/// The key's first slot in scan order, committed or pending.
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

/// The key's committed slot: what a check decides on.
#[inline(always)]
fn find_committed<'a>(probe: &Probe<'a>) -> Option<(&'a Slot, u128)> {
    for g in &probe.window[..probe.probe] {
        for s in g.slots() {
            let v = s.load();
            if committed_to(v, probe.fp) {
                return Some((s, v));
            }
        }
    }
    None
}

/// The key's candidate slots in scan order.
fn candidates<'a>(probe: &Probe<'a>) -> impl Iterator<Item = &'a Slot> + 'a {
    let groups = probe.window;
    groups
        .into_iter()
        .take(probe.probe)
        .flat_map(|g| g.slots().iter())
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
    let mut hit = find_committed(&probe);
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
                    hit = find_committed(&probe);
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
        hit = find_committed(&probe);
    }
}

/// Gives back `n` units of the admission `prev -> next` of the key with hash
/// `h` (a compound's all-or-nothing undo, a policy's refund). A key no longer in
/// the table gets nothing back: its charged state may already be in the sketch.
#[cfg(feature = "std")]
pub(super) fn give_back<A: Algorithm, S: Space<A> + ?Sized>(
    space: &S,
    h: u64,
    n: u64,
    taken: (u64, u64),
    now: impl Fn() -> u64,
) {
    let probe = probe(space, h);
    if let Some((slot, v)) = find_committed(&probe) {
        let cell = KeySlot { slot, fp: probe.fp };
        give_back_cell::<A, _>(&cell, v, || space.params(), n, taken, now);
    }
}

/// Places a new key without a lock (the steps are in the [module docs](self)).
/// `None`: the key turned out to be present (placed by a racing request),
/// decide again.
fn place<A: Algorithm, S: Space<A> + ?Sized>(
    space: &S,
    probe: &Probe<'_>,
    n: u64,
    now: u64,
) -> Result<Option<(Step, u64)>, InsufficientCapacity> {
    let mut bounded = space.bounded(now);
    let Probe { fp, home, .. } = *probe;
    loop {
        // 1. find: present (decide again), pending (wait, then withdraw), absent.
        if let Some((slot, v)) = find(probe) {
            if !is_pending(v) {
                return Ok(None);
            }
            wait_or_withdraw(slot, v);
            continue;
        }
        // 2. decide from the sketch.
        let p = space.params();
        check_capacity::<A>(&p, n)?;
        let start = space.start(&p, fp, now);
        let step = A::decide(&p, start, now, n);
        let Some(next) = step.next else {
            // Denied (or a cost of 0): nothing to remember, no slot taken.
            return Ok(Some((step, start)));
        };
        // 3. claim a free slot, pending.
        let (slot, prev, event) = match choose::<A, S>(space, probe, &p, now, bounded) {
            Chosen::Slot(slot, v, event) => (slot, v, event),
            Chosen::Retry => continue,
            // At its bound, none of its own slots here: free one elsewhere.
            Chosen::TurnedAway(None) if bounded && space.make_room(&p, now) => {
                bounded = false;
                continue;
            }
            Chosen::Unlimited => {
                space.record(home, Event::Unlimited, 0, None);
                return Ok(Some((Step { next: None, ..step }, start)));
            }
            // Turned away: no room, by the policy or because the eviction could
            // not be remembered; `left` is when a candidate frees up, as far as
            // is known.
            Chosen::TurnedAway(left) => {
                let left = left.unwrap_or(step.decision.reset_after_ns);
                space.record(home, Event::Rejected, 0, None);
                let decision = Decision {
                    allowed: false,
                    remaining: 0,
                    retry_after_ns: left,
                    reset_after_ns: left,
                    limit: A::capacity(&p),
                };
                let step = Step {
                    decision,
                    next: None,
                    delay_ns: 0,
                };
                return Ok(Some((step, start)));
            }
        };
        #[cfg(loom)]
        if crash::here(crash::Point::Chosen) {
            return Ok(Some((step, start)));
        }
        let pending = pending(fp, now);
        if !slot.cas(prev, pending) {
            continue;
        }
        #[cfg(loom)]
        if crash::here(crash::Point::Claimed) {
            return Ok(Some((step, start)));
        }
        // 4. validate against every other slot of the key; 5. the sketch again.
        if !validate(probe, slot, pending) || space.start(&p, fp, now) != start {
            slot.cas(pending, 0);
            continue;
        }
        #[cfg(loom)]
        if crash::here(crash::Point::Validated) {
            return Ok(Some((step, start)));
        }
        // 6. commit.
        if slot.cas(pending, claimed(fp, next)) {
            space.record(home, event, prev, Some(slot));
            return Ok(Some((step, start)));
        }
    }
}

/// Another placer's pending slot `v` of our key: looked at again for a bounded
/// spin, then withdrawn (its placer may be dead); a committed or withdrawn slot
/// ends the wait.
fn wait_or_withdraw(slot: &Slot, v: u128) {
    for _ in 0..PENDING_SPINS {
        spin_loop();
        if slot.load() != v {
            return;
        }
    }
    slot.cas(v, 0);
}

/// Step 4: whether our pending claim `ours` in `mine` may commit: no other slot
/// of the key is committed, and every other pending one comes later in the scan
/// order (and is withdrawn here) — else ours must be withdrawn.
fn validate(probe: &Probe<'_>, mine: &Slot, ours: u128) -> bool {
    let mut earlier = true;
    for s in candidates(probe) {
        if core::ptr::eq(s, mine) {
            earlier = false;
            continue;
        }
        let mut v = s.load();
        while fp_of(v) == probe.fp {
            if !is_pending(v) || earlier {
                return false;
            }
            // A later pending claim of the key loses to ours. If the withdrawal
            // fails, the claim moved on — committed, perhaps: look again.
            if s.cas(v, 0) {
                break;
            }
            v = s.load();
        }
    }
    mine.load() == ours
}

/// The points between a placement's steps where a placer may stop for good
/// (its process killed there). The loom models (`--cfg loom`) stop one placer
/// at each point in turn while others check, and check that what it leaves
/// never lifts a limit and never blocks a later check: the module docs' claim
/// that a placer dying between any two steps is safe.
#[cfg(loom)]
#[doc(hidden)]
pub mod crash {
    use core::cell::Cell;

    /// A point between two steps of a placement.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub enum Point {
        /// Step 3 chose a slot (when evicting, after folding its state into the
        /// sketch) and has not claimed it.
        Chosen,
        /// Step 3's claim is in the slot, pending; not validated.
        Claimed,
        /// Steps 4 and 5 passed; not committed.
        Validated,
    }

    /// Every point.
    pub const ALL: [Point; 3] = [Point::Chosen, Point::Claimed, Point::Validated];

    loom::thread_local! {
        static AT: Cell<Option<Point>> = Cell::new(None);
    }

    /// Makes this model thread's placements stop for good at `point`.
    pub fn stop_at(point: Option<Point>) {
        AT.with(|a| a.set(point));
    }

    /// Whether this thread's placement stops here.
    pub(super) fn here(point: Point) -> bool {
        AT.with(|a| a.get() == Some(point))
    }
}

/// Where a new key goes.
enum Chosen<'a> {
    /// This slot, which held this value; the event it counts as.
    Slot(&'a Slot, u128, Event),
    /// The state changed under the choice (an eviction's slot moved on): again.
    Retry,
    /// No room: admit untracked (the policy says so).
    Unlimited,
    /// No room: turned away; when a candidate frees up, if known.
    TurnedAway(Option<u64>),
}

/// Step 3's choice: per candidate group its first empty slot, its first fresh
/// one, and how many it has of either; the new key goes to the group with more
/// room ("two choices": at 80 % load that leaves 0.02 % of keys without a slot,
/// against 2.5 % for first-fit over two adjacent groups), else it evicts the
/// stalest live slot after its state is folded into the sketch (so whoever sees
/// the slot taken over also sees the sketch), as the full-table policy says.
fn choose<'a, A: Algorithm, S: Space<A> + ?Sized>(
    space: &S,
    probe: &Probe<'a>,
    p: &A::Params,
    now: u64,
    bounded: bool,
) -> Chosen<'a> {
    let mut room = [Room::default(); PROBE_GROUPS];
    // Live candidates, for an eviction: the stalest first.
    let mut live: [Option<(&Slot, u128, u64)>; PROBE_GROUPS * GROUP_SLOTS] =
        [None; PROBE_GROUPS * GROUP_SLOTS];
    let mut lives = 0;
    for (g, r) in probe.window[..probe.probe].iter().zip(room.iter_mut()) {
        for s in g.slots() {
            let v = s.load();
            if !space.may_take(v, bounded) {
                continue;
            }
            let held = if is_pending(v) {
                pending_held(v, now)
            } else {
                space.held(p, v, now)
            };
            match held {
                Held::Empty => {
                    r.empty.get_or_insert((s, v));
                    r.free += 1;
                }
                Held::Fresh => {
                    r.fresh.get_or_insert((s, v));
                    r.free += 1;
                }
                // Another key's placement in flight is nobody's state yet, but
                // not free either.
                Held::Live { .. } if is_pending(v) => {}
                Held::Live { left } => {
                    if let Some(at) = live.get_mut(lives) {
                        *at = Some((s, v, left));
                        lives += 1;
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
    let live = &mut live[..lives];
    live.sort_unstable_by_key(|c| c.map_or(u64::MAX, |(_, _, left)| left));
    let stalest = live.first().copied().flatten().map(|(_, _, left)| left);
    match (best.empty, best.fresh) {
        (Some((s, v)), _) => Chosen::Slot(s, v, Event::Inserted),
        (None, Some((s, v))) => Chosen::Slot(s, v, Event::Reused),
        (None, None) if space.full_policy() == FullPolicy::AllowUnlimited => Chosen::Unlimited,
        (None, None) if space.full_policy() == FullPolicy::EvictStalest => {
            // The stalest whose state can be remembered (in a pool, a cell held
            // live by another limit refuses a fold: try the next).
            for &(s, v, _) in live.iter().flatten() {
                if space.fold(p, v, now) {
                    return if s.load() == v {
                        Chosen::Slot(s, v, Event::Evicted)
                    } else {
                        Chosen::Retry
                    };
                }
            }
            Chosen::TurnedAway(stalest)
        }
        // Rejected by the policy; or no slot this limit may take (at its bound of
        // live keys, none of the candidates is its own): `stalest` is `None`.
        (None, None) => Chosen::TurnedAway(stalest),
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
            .get()
            .fold::<A>(p, OWN, fp_of(v), state_of(v), now, |_| false)
    }
    fn start(&self, p: &A::Params, fp: u64, now: u64) -> u64 {
        self.sketch.get().start::<A>(p, OWN, fp, now)
    }
    fn full_policy(&self) -> FullPolicy {
        self.policy
    }
    fn record(&self, home: usize, e: Event, _: u128, _: Option<&Slot>) {
        self.stats.count(home, e);
    }
    fn bounded(&self, _: u64) -> bool {
        false
    }
    fn make_room(&self, _: &A::Params, _: u64) -> bool {
        false
    }
}

/// What slot value `v` holds for a limit of algorithm `A` with parameters `p`
/// at `now`: fresh (free to take) only once droppable ([`super::slot::DROP_SKEW_NS`]).
#[inline]
pub(super) fn judge<A: Algorithm>(p: &A::Params, v: u128, now: u64) -> Held {
    if fp_of(v) == 0 {
        Held::Empty
    } else if droppable::<A>(p, state_of(v), now) {
        Held::Fresh
    } else {
        // Until droppable: until fresh, then the margin; if fresh already, until
        // fresh as of the margin ago.
        let w = state_of(v);
        let left = if A::is_fresh(p, w, now) {
            A::decide(p, w, now.saturating_sub(DROP_SKEW_NS), 0)
                .decision
                .reset_after_ns
        } else {
            let until = A::decide(p, w, now, 0).decision.reset_after_ns;
            until.saturating_add(DROP_SKEW_NS)
        };
        Held::Live { left }
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
