//! What a keyed table remembers of the keys it evicts: a fixed array of state
//! words ("cells"), each at least as restrictive as every evicted key that hashes
//! to it (a count-min sketch over limiter states rather than counts).
//!
//! An evicted key's live state is folded ([`Algorithm::join`]) into its
//! [`HASHES`] cells, picked by independent mixes of its fingerprint, *before* its
//! slot is taken over. A key that is not in the table starts from the least
//! restrictive of its cells (any one is at least as restrictive as the key's own
//! state, since every cell is); when one of them is fresh that is a fresh state,
//! exactly as without a sketch. So:
//!
//! * **no key is ever admitted beyond its quota because it was evicted**: it comes
//!   back with a state at least as restrictive as the one it left with;
//! * **the cost falls on innocent keys**, and only on keys that are not in the
//!   table: a new key all of whose cells are still live (each hit by an evicted
//!   key within that key's reset time) starts as limited as the least limited of
//!   them. With `e` live evictions folded into `m` cells, a new key meets that
//!   with probability about `(1 − e^(−3e/m))³`.
//!
//! A cell is a [`Slot`]: a state word tagged with its **owner** (in a table of
//! its own, the table; in a [`super::Pool`], the limit whose keys were folded into
//! it), so limits of different algorithms or quotas can share one array of cells
//! without ever joining each other's words. Folding is a compare-and-swap loop
//! per cell; a cell whose word has been fresh for [`super::DROP_SKEW_NS`] is
//! simply overwritten (every state folded into it has gone fresh with it, for
//! every caller whose clock lags by less than that). A cell of another owner is taken only
//! when that owner's state in it carries no information (fresh, or the owner is
//! gone); a live one makes the fold fail, and the caller does not evict. So a
//! cell that does not carry a key's owner tells the key nothing: its folded state,
//! if any, had gone fresh before the cell changed hands.

#[cfg(feature = "alloc")]
use alloc::boxed::Box;

use super::slot::{Slot, claimed, droppable, fp_of, state_of};
use crate::limiter::Algorithm;

/// Cells per evicted key.
pub(super) const HASHES: usize = 3;
#[cfg(feature = "alloc")]
/// Slots per cell, at least (the count is rounded down to a power of two, between
/// [`MIN_CELLS`] and [`MAX_CELLS`]): at most half a byte per slot.
const SLOTS_PER_CELL: usize = 32;
#[cfg(feature = "alloc")]
/// The fewest cells of a table (1 KiB).
pub(super) const MIN_CELLS: usize = 64;
#[cfg(feature = "alloc")]
/// The most cells of a table (512 KiB).
pub(super) const MAX_CELLS: usize = 1 << 15;

#[cfg(feature = "alloc")]
/// Cells of a table of `slots` slots.
pub(super) fn cells_for(slots: usize) -> usize {
    let cells = slots / SLOTS_PER_CELL;
    let pow2 = match cells.checked_ilog2() {
        Some(log) => 1 << log,
        None => 0,
    };
    pow2.clamp(MIN_CELLS, MAX_CELLS)
}

/// The cells: allocated with a heap-backed table; none for a table over
/// caller-provided storage (which then turns new keys away rather than evict).
#[derive(Debug)]
pub(super) enum Cells {
    #[cfg(feature = "alloc")]
    Owned(Box<[Slot]>),
    None,
}

impl Cells {
    #[inline]
    pub(super) fn get(&self) -> Sketch<'_> {
        match self {
            #[cfg(feature = "alloc")]
            Cells::Owned(c) => Sketch(c),
            Cells::None => Sketch(&[]),
        }
    }
}

/// A sketch's cells, wherever they live (a table's own allocation, a pool's,
/// or memory the caller provides).
#[derive(Clone, Copy, Debug)]
pub(super) struct Sketch<'a>(pub(super) &'a [Slot]);

impl<'a> Sketch<'a> {
    /// The cells.
    #[inline]
    pub(super) fn get(self) -> &'a [Slot] {
        self.0
    }

    /// The cells of fingerprint `fp`: multiply-shift of three independent mixes.
    #[inline]
    fn of(self, fp: u64) -> Option<[&'a Slot; HASHES]> {
        let cells = self.get();
        if cells.is_empty() {
            return None;
        }
        let len = cells.len() as u128;
        let pick = |seed: u64| {
            let x = (fp ^ seed).wrapping_mul(0xD6E8_FEB8_6659_FD93);
            let x = (x ^ (x >> 32)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
            &cells[((x as u128 * len) >> 64) as usize]
        };
        Some([
            pick(0x243F_6A88_85A3_08D3),
            pick(0x1319_8A2E_0370_7344),
            pick(0xA409_3822_299F_31D0),
        ])
    }

    /// Folds the live state `word` of the key `fp`, owned by `owner`, into its
    /// cells. A cell of another owner is taken only if `foreign_fresh` says its
    /// word carries no information. `false`: the algorithm cannot join states, the
    /// table has no cells, or a cell holds another owner's live state — the caller
    /// must not evict (cells already folded stay more restrictive for `owner`'s
    /// keys, never less).
    pub(super) fn fold<A: Algorithm>(
        self,
        p: &A::Params,
        owner: u64,
        fp: u64,
        word: u64,
        now: u64,
        foreign_fresh: impl Fn(u128) -> bool,
    ) -> bool {
        let Some(cells) = self.of(fp) else {
            return false;
        };
        for cell in cells {
            let mut cur = cell.load();
            loop {
                let joined = if fp_of(cur) == 0 || (fp_of(cur) != owner && foreign_fresh(cur)) {
                    word
                } else if fp_of(cur) != owner {
                    return false;
                } else if droppable::<A>(p, state_of(cur), now) {
                    word
                } else {
                    match A::join(p, state_of(cur), word, now) {
                        Some(j) => j,
                        None => return false,
                    }
                };
                let next = claimed(owner, joined);
                if next == cur || cell.cas(cur, next) {
                    break;
                }
                cur = cell.load();
            }
        }
        true
    }

    /// The state a key `fp` of `owner` that is not in the table starts from at
    /// `now`: fresh (`0`) if one of its cells is fresh or is not `owner`'s, else
    /// the cell that leaves the most room.
    #[inline]
    pub(super) fn start<A: Algorithm>(self, p: &A::Params, owner: u64, fp: u64, now: u64) -> u64 {
        let Some(cells) = self.of(fp) else {
            return 0;
        };
        let mut best: Option<(u64, (u64, u64))> = None;
        for cell in cells {
            let v = cell.load();
            let w = state_of(v);
            if fp_of(v) != owner || A::is_fresh(p, w, now) {
                return 0;
            }
            let d = A::decide(p, w, now, 0).decision;
            // Most remaining first, then the soonest full again.
            let rank = (u64::MAX - d.remaining, d.reset_after_ns);
            if best.is_none_or(|(_, r)| rank < r) {
                best = Some((w, rank));
            }
        }
        best.map_or(0, |(w, _)| w)
    }

    /// Forgets the evicted keys of every owner `gone` selects.
    pub(super) fn clear_where(self, gone: impl Fn(u64) -> bool) {
        for c in self.get() {
            let mut v = c.load();
            while fp_of(v) != 0 && gone(fp_of(v)) && !c.cas(v, 0) {
                v = c.load();
            }
        }
    }

    /// Forgets every evicted key.
    pub(super) fn clear(self) {
        self.clear_where(|_| true);
    }
}
