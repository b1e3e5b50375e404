//! The full-table policy and the table's event counters.

use crossbeam_utils::CachePadded;

use crate::sync::{AtomicU64, order};

/// What to do with a new key when all its candidate slots hold live state.
///
/// Whatever the policy, a key that is already being limited is never admitted
/// beyond its quota because the table is full (only [`Self::AllowUnlimited`]
/// admits the *new* key without a limit, by choice).
///
/// ```
/// use sluicegate::keyed::FullPolicy;
/// assert_eq!(FullPolicy::default(), FullPolicy::EvictStalest);
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum FullPolicy {
    /// Deny the new key (`retry_after` = until a candidate slot frees up). Safe
    /// under attack: keys already tracked keep their limits exactly; new clients
    /// wait. Counted in [`KeyedStats::rejected`].
    Reject,
    /// Admit the new key without tracking it: availability first; the untracked
    /// requests are not limited. Counted in [`KeyedStats::unlimited`].
    AllowUnlimited,
    /// Replace the live entry that is closest to fresh (the least state lost),
    /// after folding its state into the table's eviction sketch: when that key
    /// comes back it resumes at least as limited as it left, so a flood of new
    /// keys cannot reset anyone's limit. The price is paid by new keys whose
    /// sketch cells are all still live (see the [module docs](super)): they start
    /// limited early. Counted in [`KeyedStats::evicted`]. A table without a sketch
    /// (over caller-provided storage) or an algorithm without
    /// [`crate::Algorithm::join`] rejects instead, counted in
    /// [`KeyedStats::rejected`].
    #[default]
    EvictStalest,
}

/// Event counters of a keyed table (monotonic since construction).
///
/// ```
/// use sluicegate::keyed::KeyedStats;
/// assert_eq!(KeyedStats::default().inserted, 0);
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct KeyedStats {
    /// New keys placed in an empty slot.
    pub inserted: u64,
    /// New keys placed in a slot whose previous key had gone fresh (lossless reuse).
    pub reused: u64,
    /// Live entries replaced under [`FullPolicy::EvictStalest`].
    pub evicted: u64,
    /// New keys denied under [`FullPolicy::Reject`] (or under
    /// [`FullPolicy::EvictStalest`] when the table cannot remember an eviction).
    pub rejected: u64,
    /// New keys admitted untracked under [`FullPolicy::AllowUnlimited`].
    pub unlimited: u64,
}

const STAT_STRIPES: usize = 8;

#[derive(Debug)]
#[repr(C)]
struct StatCells([AtomicU64; 5]);

impl StatCells {
    #[cfg(not(loom))]
    const fn new() -> Self {
        Self([const { AtomicU64::new(0) }; 5])
    }
    #[cfg(loom)]
    fn new() -> Self {
        Self(core::array::from_fn(|_| AtomicU64::new(0)))
    }
}

#[derive(Clone, Copy)]
pub(super) enum Event {
    Inserted = 0,
    Reused = 1,
    Evicted = 2,
    Rejected = 3,
    Unlimited = 4,
}

/// The counters, striped by home group so that placements in different groups
/// do not contend on one line (`N` stripes: a pool's many limits keep one each).
#[derive(Debug)]
#[repr(C)]
pub(super) struct Stats<const N: usize = STAT_STRIPES>([CachePadded<StatCells>; N]);

impl<const N: usize> Stats<N> {
    pub(super) fn new() -> Self {
        Self(core::array::from_fn(|_| CachePadded::new(StatCells::new())))
    }

    pub(super) fn count(&self, group: usize, e: Event) {
        self.0[group % N].0[e as usize].fetch_add(1, order::STAT);
    }

    /// Zeroes every counter (a pool's id taken by a new limit).
    #[cfg(feature = "std")]
    pub(super) fn reset(&self) {
        for c in self.0.iter().flat_map(|s| s.0.iter()) {
            c.store(0, order::STAT);
        }
    }

    pub(super) fn snapshot(&self) -> KeyedStats {
        let sum = |e: Event| {
            self.0
                .iter()
                .map(|c| c.0[e as usize].load(order::STAT))
                .fold(0u64, u64::wrapping_add)
        };
        KeyedStats {
            inserted: sum(Event::Inserted),
            reused: sum(Event::Reused),
            evicted: sum(Event::Evicted),
            rejected: sum(Event::Rejected),
            unlimited: sum(Event::Unlimited),
        }
    }
}
