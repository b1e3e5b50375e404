//! The crate's only `unsafe`: a mapped file seen as the atomic words of a
//! region (its header, a pool's groups, sketch cells and registry).
//!
//! Every type laid over the mapping is made of atomic integers only
//! (`AtomicU64`, `AtomicU128`), `repr(C)` or `repr(transparent)`: any bit pattern
//! is a valid value of it, and all-zero bytes are its empty value (core
//! documents both for [`Group`], [`Slot`] and [`RegistryEntry`]). Other processes
//! write the same memory at any time, which atomics are made for; nothing here
//! ever hands out a `&mut` to mapped bytes.

use std::fs::File;
use std::mem::{align_of, size_of};
use std::sync::atomic::AtomicU64;

use memmap2::MmapRaw;
use sluicegate::keyed::{Group, RegistryEntry, Slot};

use crate::layout::{Header, Layout};

/// A region's file, mapped shared, with the layout its parts were checked
/// against.
#[derive(Debug)]
pub(crate) struct Mapped {
    map: MmapRaw,
    layout: Layout,
    /// The start of each part of the pool, found (and checked) once at mapping:
    /// every check reaches a part, so it is not looked up and checked again
    /// each time.
    groups: *const Group,
    cells: *const Slot,
    registry: *const RegistryEntry,
}

// SAFETY: the mapping is only ever read and written through atomics (see the
// module docs), so sharing it between threads is as safe as sharing the atomics.
unsafe impl Send for Mapped {}
// SAFETY: as above.
unsafe impl Sync for Mapped {}

impl Mapped {
    /// Maps `file` shared. `layout` must fit in the file's length (checked).
    pub(crate) fn new(file: &File, layout: Layout) -> std::io::Result<Self> {
        let map = MmapRaw::map_raw(file)?;
        if map.len() < layout.len {
            return Err(std::io::Error::other(
                "the region's file is shorter than its layout",
            ));
        }
        // The base is page-aligned; each part's offset is a multiple of its
        // alignment (Layout::new), so every part is aligned.
        debug_assert_eq!(map.as_ptr() as usize % 4096, 0);
        let mut mapped = Mapped {
            map,
            layout,
            groups: std::ptr::null(),
            cells: std::ptr::null(),
            registry: std::ptr::null(),
        };
        mapped.groups = mapped
            .part::<Group>(layout.groups_at, layout.groups)
            .as_ptr();
        mapped.cells = mapped.part::<Slot>(layout.cells_at, layout.cells).as_ptr();
        mapped.registry = mapped
            .part::<RegistryEntry>(layout.registry_at, layout.entries)
            .as_ptr();
        Ok(mapped)
    }

    pub(crate) fn layout(&self) -> &Layout {
        &self.layout
    }

    /// `count` values of `T` at byte `offset`.
    fn part<T>(&self, offset: usize, count: usize) -> &[T] {
        assert!(offset % align_of::<T>() == 0, "misaligned part");
        assert!(
            offset + count * size_of::<T>() <= self.map.len(),
            "part out of the map"
        );
        // SAFETY: the range lies inside the mapping (asserted), which lives as
        // long as `self`; the pointer is aligned for `T` (page-aligned base,
        // aligned offset); `T` is made of atomics only, so any bytes are a valid
        // `T` and concurrent writes by other processes are atomic accesses.
        unsafe { std::slice::from_raw_parts(self.map.as_ptr().add(offset).cast::<T>(), count) }
    }

    pub(crate) fn header(&self) -> &Header {
        &self.part::<Header>(0, 1)[0]
    }

    pub(crate) fn groups(&self) -> &[Group] {
        // SAFETY: `part` checked this range of the mapping in `new` (in bounds,
        // aligned); the mapping lives as long as `self`, as `part` says.
        unsafe { std::slice::from_raw_parts(self.groups, self.layout.groups) }
    }

    pub(crate) fn cells(&self) -> &[Slot] {
        // SAFETY: as for `groups`.
        unsafe { std::slice::from_raw_parts(self.cells, self.layout.cells) }
    }

    pub(crate) fn registry(&self) -> &[RegistryEntry] {
        // SAFETY: as for `groups`.
        unsafe { std::slice::from_raw_parts(self.registry, self.layout.entries) }
    }

    /// The whole mapping as words (to zero it when a region is reset).
    pub(crate) fn words(&self) -> &[AtomicU64] {
        self.part(0, self.layout.len / 8)
    }
}
