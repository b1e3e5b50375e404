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

/// One table entry: fingerprint and state word in one 128-bit atomic.
#[derive(Debug)]
#[repr(transparent)]
pub struct Slot(AtomicU128);

impl Slot {
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
