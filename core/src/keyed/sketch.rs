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
//! A cell is a plain `AtomicU64`; folding is a compare-and-swap loop per cell,
//! and a cell whose word has gone fresh is simply overwritten (every state folded
//! into it has gone fresh with it).

#[cfg(feature = "alloc")]
use alloc::boxed::Box;

use crate::limiter::Algorithm;
use crate::sync::{AtomicU64, order};

/// Cells per evicted key.
pub(super) const HASHES: usize = 3;
#[cfg(feature = "alloc")]
/// Slots per cell, at least (the count is rounded down to a power of two, between
/// [`MIN_CELLS`] and [`MAX_CELLS`]): at most a quarter byte per slot.
const SLOTS_PER_CELL: usize = 32;
#[cfg(feature = "alloc")]
/// The fewest cells of a table (512 bytes).
pub(super) const MIN_CELLS: usize = 64;
#[cfg(feature = "alloc")]
/// The most cells of a table (256 KiB).
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
    Owned(Box<[AtomicU64]>),
    None,
}

impl Cells {
    #[inline]
    pub(super) fn get(&self) -> &[AtomicU64] {
        match self {
            #[cfg(feature = "alloc")]
            Cells::Owned(c) => c,
            Cells::None => &[],
        }
    }

    /// The cells of fingerprint `fp`: multiply-shift of three independent mixes.
    #[inline]
    fn of(&self, fp: u64) -> Option<[&AtomicU64; HASHES]> {
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

    /// Folds the live state `word` of the key `fp` into its cells. `false`: the
    /// algorithm cannot join states (the caller must not evict) or the table has
    /// no cells.
    pub(super) fn fold<A: Algorithm>(&self, p: &A::Params, fp: u64, word: u64, now: u64) -> bool {
        let Some(cells) = self.of(fp) else {
            return false;
        };
        for cell in cells {
            let mut cur = cell.load(order::LOAD);
            loop {
                let joined = if A::is_fresh(p, cur, now) {
                    word
                } else {
                    match A::join(p, cur, word, now) {
                        Some(j) => j,
                        None => return false,
                    }
                };
                if joined == cur {
                    break;
                }
                match cell.compare_exchange_weak(cur, joined, order::CAS_OK, order::CAS_ERR) {
                    Ok(_) => break,
                    Err(actual) => cur = actual,
                }
            }
        }
        true
    }

    /// The state a key `fp` that is not in the table starts from at `now`: fresh
    /// (`0`) if one of its cells is, else the cell that leaves the most room.
    #[inline]
    pub(super) fn start<A: Algorithm>(&self, p: &A::Params, fp: u64, now: u64) -> u64 {
        let Some(cells) = self.of(fp) else {
            return 0;
        };
        let mut best: Option<(u64, (u64, u64))> = None;
        for cell in cells {
            let w = cell.load(order::LOAD);
            if A::is_fresh(p, w, now) {
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

    /// Forgets every evicted key.
    pub(super) fn clear(&self) {
        for c in self.get() {
            c.store(0, order::STORE);
        }
    }
}
