//! The storage: a slot (fingerprint and state word in one 128-bit atomic, and a
//! bit saying whether its key's placement is still pending) and a group of slots
//! in one cache-padded block.

use crossbeam_utils::CachePadded;

use crate::limiter::StateCell;
use crate::sync::{AtomicU128, order};

/// Slots per group (2 under loom, to keep the model's state space small: the
/// algorithm does not depend on the group size).
#[cfg(not(loom))]
pub const GROUP_SLOTS: usize = 8;
/// Slots per group (2 under loom, to keep the model's state space small).
#[cfg(loom)]
pub const GROUP_SLOTS: usize = 2;

/// Bit 127 of a slot: its key's placement is pending (claimed, not yet
/// validated: see [`super::table`]). A pending slot is nobody's state yet.
pub(super) const PENDING: u128 = 1 << 127;
/// A fingerprint is the key's hash masked to 63 bits; 0 marks an empty slot.
pub(super) const FP_MASK: u64 = u64::MAX >> 1;
const STATE_MASK: u128 = u64::MAX as u128;

#[inline]
pub(super) fn fp_of(v: u128) -> u64 {
    (v >> 64) as u64 & FP_MASK
}
#[inline]
pub(super) fn state_of(v: u128) -> u64 {
    v as u64
}
/// `v` with its state replaced (fingerprint and pending bit kept).
#[inline]
fn with_state(v: u128, state: u64) -> u128 {
    (v & !STATE_MASK) | state as u128
}
/// A committed slot of `fp` with `state`.
#[inline]
pub(super) fn claimed(fp: u64, state: u64) -> u128 {
    ((fp as u128) << 64) | state as u128
}

/// Whether slot value `v` is a committed slot of `fp` (one compare: the pending
/// bit lies in the fingerprint's word).
#[inline(always)]
pub(super) fn committed_to(v: u128, fp: u64) -> bool {
    (v >> 64) as u64 == fp
}

/// Whether slot value `v` is a placement still pending.
#[inline]
pub(super) fn is_pending(v: u128) -> bool {
    v & PENDING != 0
}

/// The state in slot value `v` if it is a committed key's (not empty, not
/// pending: a pending slot's low word is a claim token, nobody's state).
#[inline]
pub(super) fn committed_state(v: u128) -> Option<u64> {
    (fp_of(v) != 0 && !is_pending(v)).then_some(state_of(v))
}

/// Low bits of a claim token: the claim's number.
const CLAIM_BITS: u32 = 20;
/// A pending claim this old (by the judging caller's clock, ~1.07 s) is taken to
/// be its placer's last act: any placement may take its slot over.
pub(super) const PENDING_STALE_NS: u64 = 1 << 30;

/// How long a state must have been fresh, by the judging caller's clock, before
/// it is dropped (its slot reused, its sketch cell overwritten or taken over) —
/// 2²⁶ ns, ~67 ms. Callers' clocks disagree: a check reads its time, then may
/// wait (preempted, or another process's clock read earlier) while another
/// caller, whose time is later, judges the key's state fresh and drops it. The
/// key then comes back fresh at the earlier time, when its own state would still
/// have limited it. A state dropped only after this margin is fresh to every
/// caller whose clock lags the judge's by less: so no check is admitted beyond
/// its key's model unless its time lags another caller's by more than the margin
/// (and then by at most `rate × (lag − margin)`).
///
/// ```
/// use sluicegate::keyed::{AnyKeyed, DROP_SKEW_NS, FullPolicy};
/// use sluicegate::{Kind, Spec};
///
/// // One group of 8 slots, every one live: a new key is turned away until the
/// // stalest key's state has been fresh for the margin.
/// let spec = Spec::parse(Kind::TokenBucket, "1/s")?;
/// let t = AnyKeyed::with_clock(&spec, 8, ())?.with_policy(FullPolicy::Reject);
/// for k in 0..t.capacity() as u64 {
///     assert!(t.check_n_at(&k, 1, 0)?.decision.allowed);
/// }
/// let full_again = 1_000_000_000;
/// assert!(!t.check_n_at("new", 1, full_again)?.decision.allowed);
/// assert!(t.check_n_at("new", 1, full_again + DROP_SKEW_NS)?.decision.allowed);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub const DROP_SKEW_NS: u64 = 1 << 26;

/// Whether state `word` may be dropped at `now` (fresh since [`DROP_SKEW_NS`]).
#[inline]
pub(super) fn droppable<A: crate::limiter::Algorithm>(p: &A::Params, word: u64, now: u64) -> bool {
    A::is_fresh(p, word, now.saturating_sub(DROP_SKEW_NS))
}

/// A pending claim of the slot by key `fp` at `now`.
///
/// Its low word is a token, unique to this claim: the claim's time (to 2²⁰ ns)
/// and a claim number (a counter, offset per process by its id). A claim withdrawn by another placer and made again by a third for
/// the same key must differ from the first, or the first placer's commit — a
/// compare-and-swap of its exact pending value — could land on the third's
/// claim, and two slots of one key would be committed. Within one process the
/// number repeats only after 2²⁰ claims in one 2²⁰ ns tick; across processes
/// sharing a table, two claims of one key in one slot in one tick would also
/// need equal numbers.
pub(super) fn pending(fp: u64, now: u64) -> u128 {
    let number = claim_number() & ((1 << CLAIM_BITS) - 1);
    let token = (now >> CLAIM_BITS << CLAIM_BITS) | u64::from(number);
    PENDING | claimed(fp, token)
}

/// What a pending slot value `v` holds for another placer at `now`: free once
/// stale, else a claim (live) that goes stale in `left` nanoseconds.
pub(super) fn pending_held(v: u128, now: u64) -> super::table::Held {
    let at = state_of(v) >> CLAIM_BITS << CLAIM_BITS;
    match PENDING_STALE_NS.checked_sub(now.saturating_sub(at)) {
        None | Some(0) => super::table::Held::Fresh,
        Some(left) => super::table::Held::Live { left },
    }
}

/// The next claim number of this process.
fn claim_number() -> u32 {
    #[cfg(loom)]
    use core::sync::atomic::{AtomicU32, Ordering};
    #[cfg(not(loom))]
    use portable_atomic::{AtomicU32, Ordering};
    static CLAIMS: AtomicU32 = AtomicU32::new(0);
    // Processes sharing a table number their claims apart: by their process id
    // (a forked child has its parent's counter and addresses, not its id), or
    // without std by where the counter lives (address-space randomisation).
    #[cfg(feature = "std")]
    let offset = std::process::id();
    #[cfg(not(feature = "std"))]
    let offset = (core::ptr::addr_of!(CLAIMS) as usize >> 12) as u32;
    CLAIMS
        .fetch_add(1, Ordering::Relaxed)
        .wrapping_add(offset.wrapping_mul(0x9E37_79B9))
}

/// Whether a slot's 128-bit compare-and-swap is lock-free on this CPU (native
/// `cmpxchg16b`, `casp`, …). Where it is not, the atomics fall back to a lock in
/// process memory, which another process does not see: memory shared between
/// processes must refuse such a CPU.
///
/// ```
/// # #[cfg(target_arch = "x86_64")]
/// # if std::arch::is_x86_feature_detected!("cmpxchg16b") {
/// assert!(sluicegate::keyed::slots_lock_free());
/// # }
/// ```
pub fn slots_lock_free() -> bool {
    #[cfg(loom)]
    return true;
    #[cfg(not(loom))]
    AtomicU128::is_lock_free()
}

/// One table entry: fingerprint and state word in one 128-bit atomic.
#[derive(Debug)]
#[repr(transparent)]
pub struct Slot(AtomicU128);

#[cfg(not(loom))]
impl Default for Slot {
    fn default() -> Self {
        Self::new()
    }
}

impl Slot {
    /// An empty slot (a sketch cell's initial value; the same as all-zero
    /// bytes): for sketch cells in caller memory ([`super::PoolMemory`]).
    ///
    /// ```
    /// let cells: Vec<sluicegate::keyed::Slot> = (0..64).map(|_| sluicegate::keyed::Slot::new()).collect();
    /// # assert_eq!(cells.len(), 64);
    /// ```
    #[cfg(not(loom))]
    pub const fn new() -> Self {
        Slot(AtomicU128::new(0))
    }

    /// An empty slot (a sketch cell's initial value).
    #[cfg(feature = "alloc")]
    pub(super) fn empty() -> Self {
        Slot(AtomicU128::new(0))
    }
    #[inline]
    pub(super) fn load(&self) -> u128 {
        self.0.load(order::LOAD)
    }
    #[inline]
    pub(super) fn cas(&self, current: u128, new: u128) -> bool {
        self.0
            .compare_exchange(current, new, order::CAS_OK, order::CAS_ERR)
            .is_ok()
    }
}

/// A slot seen as the state word of the key with fingerprint `fp`: what the
/// shared CAS loop ([`crate::limiter::apply_cell`]) updates on a keyed check.
/// Fingerprint and state change together, so a loop that started on one key's
/// state can never write it into a slot another key has since taken over: the
/// compare-and-swap fails, the next load shows the other fingerprint, and the
/// loop stops to look for the key again.
pub(super) struct KeySlot<'a> {
    pub(super) slot: &'a Slot,
    pub(super) fp: u64,
}

impl StateCell for KeySlot<'_> {
    type Raw = u128;
    #[inline(always)]
    fn state(&self, raw: u128) -> Option<u64> {
        // One compare: the high word is the fingerprint alone only when the
        // pending bit is clear.
        committed_to(raw, self.fp).then_some(state_of(raw))
    }
    #[inline(always)]
    fn swap_state(&self, current: u128, next: u64) -> Result<(), u128> {
        self.slot
            .0
            .compare_exchange_weak(
                current,
                with_state(current, next),
                order::CAS_OK,
                order::CAS_ERR,
            )
            .map(|_| ())
    }
}

/// Eight slots in one cache-padded block: the unit of storage. Build arrays of
/// them for a table without a heap:
///
/// ```
/// use sluicegate::keyed::Group;
/// static SLOTS: [Group; 16] = [const { Group::new() }; 16]; // 128 keys
/// assert_eq!(core::mem::size_of::<Group>() % 128, 0);
/// ```
#[derive(Debug)]
pub struct Group(CachePadded<[Slot; GROUP_SLOTS]>);

impl Group {
    /// An empty group.
    ///
    /// ```
    /// # use sluicegate::keyed::Group;
    /// let g = Group::new();
    /// # let _ = g;
    /// ```
    #[cfg(not(loom))]
    pub const fn new() -> Self {
        Self(CachePadded::new(
            [const { Slot(AtomicU128::new(0)) }; GROUP_SLOTS],
        ))
    }

    /// An empty group.
    #[cfg(loom)]
    pub fn new() -> Self {
        Self(CachePadded::new(core::array::from_fn(|_| {
            Slot(AtomicU128::new(0))
        })))
    }

    pub(super) fn slots(&self) -> &[Slot; GROUP_SLOTS] {
        &self.0
    }

    /// Empties every slot (a pending placement in one of them starts over).
    pub(super) fn clear(&self) {
        self.clear_where(|_| true);
    }

    /// Empties every slot whose value `pick` selects.
    pub(super) fn clear_where(&self, pick: impl Fn(u128) -> bool) {
        for s in self.slots() {
            let mut v = s.load();
            while v != 0 && pick(v) && !s.cas(v, 0) {
                v = s.load();
            }
        }
    }
}

impl Default for Group {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::keyed::table::Held;

    /// Two claims of one key at one time are different values (a placer's
    /// commit can only land on its own claim), and neither is a committed state.
    #[test]
    fn claims_of_one_key_at_one_time_differ() {
        let fp = 0x1234_5678;
        let claims: [u128; 64] = core::array::from_fn(|_| pending(fp, 5_000_000_000));
        for (i, a) in claims.iter().enumerate() {
            assert!(is_pending(*a) && fp_of(*a) == fp && committed_state(*a).is_none());
            assert!(claims[i + 1..].iter().all(|b| b != a), "claim {i} repeated");
        }
    }

    /// A claim is live to other placers until it is stale by their clock, also
    /// when their clock is behind the claimer's.
    #[test]
    fn a_claim_goes_stale_after_a_second() {
        let at = 7 << 30;
        let v = pending(99, at);
        let left = |now| match pending_held(v, now) {
            Held::Live { left } => Some(left),
            Held::Fresh => None,
            Held::Empty => panic!("a claim is never empty"),
        };
        assert_eq!(left(at), Some(PENDING_STALE_NS));
        assert_eq!(left(0), Some(PENDING_STALE_NS));
        assert_eq!(left(at + 1000), Some(PENDING_STALE_NS - 1000));
        assert_eq!(left(at + PENDING_STALE_NS), None);
        assert_eq!(left(u64::MAX), None);
    }
}
