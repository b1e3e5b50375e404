//! A region's layout: the header (its first page) and where each part lies.
//!
//! ```text
//! offset 0      header (one 4 KiB page): magic, layout version, state,
//!               hash seed, time base, key hash, boot id, parts and their sizes
//! 4096          groups      (a pool's slots: 8 × 16 B per group, 128-aligned)
//! …             cells       (the pool's sketch: 16 B each)
//! …             registry    (one entry per limit: kind, parameters, bound, …)
//! ```
//!
//! Every field is a little-endian 64-bit word written and read atomically.

use std::mem::{align_of, size_of};
use std::sync::atomic::AtomicU64;

use sluicegate::keyed::{GROUP_SLOTS, Group, RegistryEntry, Slot};

/// "SLUICEGT" as a little-endian word: the region's first 8 bytes.
pub(crate) const MAGIC: u64 = u64::from_le_bytes(*b"SLUICEGT");

/// The layout version this build reads and writes. A region of another
/// version is never reinterpreted: a newer one is an error, an older one too
/// (remove it with [`crate::unlink`] to start a new one).
///
/// 2: a registry entry holds a single limiter's state word.
/// 3: a policy's keyed rules hash a key's text with the region's hash
/// (XXH3-64, seeded), as every other keyed limiter in a region does.
pub const LAYOUT_VERSION: u64 = 3;

/// `Header::state` once the creator has written every part.
pub(crate) const READY: u64 = 0x5245_4144_5921;

/// The time base: nanoseconds of `CLOCK_MONOTONIC` (one clock for every
/// process of a boot).
pub(crate) const TIME_MONOTONIC: u64 = 1;

/// The key hash: XXH3-64 of the key's bytes with the region's seed.
pub(crate) const HASH_XXH3_64: u64 = 1;

/// The header's size: one page, so the first part is page-aligned too.
pub(crate) const HEADER_BYTES: usize = 4096;

/// The header: the region's first page.
#[repr(C)]
#[derive(Debug)]
pub(crate) struct Header {
    pub(crate) magic: AtomicU64,
    pub(crate) version: AtomicU64,
    /// [`READY`] once initialised; anything else: being initialised (under the
    /// file lock) or left half-done by a creator that died.
    pub(crate) state: AtomicU64,
    pub(crate) seed: AtomicU64,
    pub(crate) time_base: AtomicU64,
    pub(crate) key_hash: AtomicU64,
    /// The boot the region was created in (`/proc/sys/kernel/random/boot_id`).
    pub(crate) boot: [AtomicU64; 2],
    /// The file's length, and the parts' counts.
    pub(crate) len: AtomicU64,
    pub(crate) groups: AtomicU64,
    pub(crate) cells: AtomicU64,
    pub(crate) entries: AtomicU64,
    /// Core's sizes when the region was made: a build whose slots or entries
    /// differ must not read it.
    pub(crate) group_bytes: AtomicU64,
    pub(crate) group_slots: AtomicU64,
    pub(crate) entry_bytes: AtomicU64,
}

const _: () = assert!(size_of::<Header>() <= HEADER_BYTES);

/// Where a region's parts lie, in bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Layout {
    pub(crate) len: usize,
    pub(crate) groups: usize,
    pub(crate) cells: usize,
    pub(crate) entries: usize,
    pub(crate) groups_at: usize,
    pub(crate) cells_at: usize,
    pub(crate) registry_at: usize,
}

fn align_up(x: usize, to: usize) -> Option<usize> {
    x.checked_add(to - 1).map(|v| v / to * to)
}

impl Layout {
    /// The layout of `groups` groups, `cells` sketch cells and `entries`
    /// registry entries; `None` if it overflows.
    pub(crate) fn new(groups: usize, cells: usize, entries: usize) -> Option<Layout> {
        let groups_at = HEADER_BYTES;
        let cells_at = align_up(
            groups_at.checked_add(groups.checked_mul(size_of::<Group>())?)?,
            align_of::<Slot>(),
        )?;
        let registry_at = align_up(
            cells_at.checked_add(cells.checked_mul(size_of::<Slot>())?)?,
            align_of::<RegistryEntry>(),
        )?;
        let end = registry_at.checked_add(entries.checked_mul(size_of::<RegistryEntry>())?)?;
        Some(Layout {
            len: align_up(end, 4096)?,
            groups,
            cells,
            entries,
            groups_at,
            cells_at,
            registry_at,
        })
    }

    /// The header alone (every part empty): what is read first of a file, to
    /// learn what the rest should be.
    pub(crate) const fn header_only() -> Layout {
        // HEADER_BYTES is a page, so every empty part starts there aligned.
        Layout {
            len: HEADER_BYTES,
            groups: 0,
            cells: 0,
            entries: 0,
            groups_at: HEADER_BYTES,
            cells_at: HEADER_BYTES,
            registry_at: HEADER_BYTES,
        }
    }

    /// The most groups whose slots and sketch fit in `bytes` (the sketch has a
    /// cell per 32 slots, at least 64), with `entries` registry entries.
    pub(crate) fn for_memory(bytes: usize, entries: usize) -> Option<Layout> {
        let per_group = size_of::<Group>() + GROUP_SLOTS * size_of::<Slot>() / 32;
        let groups = bytes / per_group;
        if groups == 0 {
            return None;
        }
        Layout::new(groups, cells_for(groups * GROUP_SLOTS), entries)
    }

    /// The layout a header describes, if it is possible at all and fits in
    /// `file_len` bytes.
    pub(crate) fn of(h: &Header, file_len: u64) -> Option<Layout> {
        let count =
            |w: &AtomicU64| usize::try_from(w.load(std::sync::atomic::Ordering::Acquire)).ok();
        let l = Layout::new(count(&h.groups)?, count(&h.cells)?, count(&h.entries)?)?;
        (l.groups > 0 && l.len as u64 <= file_len).then_some(l)
    }
}

/// Sketch cells for `slots` slots: one per 32, a power of two, at least 64.
fn cells_for(slots: usize) -> usize {
    let cells = (slots / 32).max(64);
    1 << cells.ilog2()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parts_are_aligned_and_in_order() {
        let l = Layout::for_memory(1 << 20, 1024).unwrap();
        assert_eq!(l.groups_at % align_of::<Group>(), 0);
        assert_eq!(l.cells_at % align_of::<Slot>(), 0);
        assert_eq!(l.registry_at % align_of::<RegistryEntry>(), 0);
        assert!(l.groups_at < l.cells_at && l.cells_at < l.registry_at && l.registry_at < l.len);
        assert!(l.groups * size_of::<Group>() + l.cells * size_of::<Slot>() <= 1 << 20);
        assert_eq!(l.len % 4096, 0);
        assert!(Layout::for_memory(10, 1).is_none());
        assert!(Layout::new(usize::MAX / 64, 64, 1).is_none());
    }

    #[test]
    fn the_header_alone_is_the_empty_layout() {
        assert_eq!(Some(Layout::header_only()), Layout::new(0, 0, 0));
    }
}
