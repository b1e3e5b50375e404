//! The keys' lease state: a map of up to 64 shards (see the module docs' "Key
//! map"), the sketch of when keys without lease state were last seen (see
//! "Cold keys"), and the hit counters, striped per thread.

use core::hash::BuildHasher;
use core::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::collections::HashMap;
use std::sync::{Arc, PoisonError, RwLock};

use sluicegate::keyed::DefaultHashBuilder;

use super::lease::Entry;

/// At most this many key-map shards (fewer when `max_keys` is smaller).
const MAX_SHARDS: usize = 64;
/// Stripes of the hit counters.
pub(crate) const STRIPES: usize = 16;

/// A small per-thread number, so that threads count in their own stripe.
fn stripe() -> usize {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    std::thread_local! {
        static STRIPE: usize = NEXT.fetch_add(1, Ordering::Relaxed) % STRIPES;
    }
    STRIPE.with(|s| *s)
}

#[derive(Debug, Default)]
#[repr(align(128))]
pub(crate) struct Stripe {
    pub(crate) local: AtomicU64,
    pub(crate) round_trips: AtomicU64,
}

#[derive(Debug)]
pub(crate) struct Counters(pub(crate) [Stripe; STRIPES]);

impl Counters {
    pub(crate) fn local(&self) {
        self.0[stripe()].local.fetch_add(1, Ordering::Relaxed);
    }
    pub(crate) fn round_trip(&self) {
        self.0[stripe()].round_trips.fetch_add(1, Ordering::Relaxed);
    }
}

#[repr(align(128))]
struct Shard(RwLock<HashMap<String, Arc<Entry>, DefaultHashBuilder>>);

/// The keys' entries: shards chosen by a seeded hash, `per_shard` keys each.
pub(crate) struct KeyMap {
    shards: Box<[Shard]>,
    per_shard: usize,
    hasher: DefaultHashBuilder,
}

impl KeyMap {
    pub(crate) fn new(max_keys: usize) -> Self {
        let max_keys = max_keys.max(1);
        // The largest power of two at most min(max_keys, MAX_SHARDS): the shards
        // together hold at most max_keys.
        let n = 1usize << (usize::BITS - 1 - max_keys.min(MAX_SHARDS).leading_zeros());
        Self {
            shards: (0..n)
                .map(|_| Shard(RwLock::new(HashMap::default())))
                .collect(),
            per_shard: max_keys / n,
            hasher: DefaultHashBuilder::default(),
        }
    }

    fn shard(&self, key: &str) -> &RwLock<HashMap<String, Arc<Entry>, DefaultHashBuilder>> {
        // The high bits: the maps' own hashers are seeded apart, but keep clear of
        // the bits a map indexes with anyway.
        let h = (self.hasher.hash_one(key) >> 40) as usize;
        &self.shards[h & (self.shards.len() - 1)].0
    }

    /// `f` on `key`'s entry, under its shard's read lock, if it has one.
    pub(crate) fn with<R>(&self, key: &str, f: impl FnOnce(&Entry) -> R) -> Option<R> {
        let map = self
            .shard(key)
            .read()
            .unwrap_or_else(PoisonError::into_inner);
        map.get(key).map(|e| f(e))
    }

    /// `key`'s entry, made if it has none (dropping idle keys, or one live key,
    /// from a full shard).
    pub(crate) fn entry(&self, key: &str, now: u64) -> Arc<Entry> {
        let shard = self.shard(key);
        if let Some(e) = shard
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(key)
        {
            return Arc::clone(e);
        }
        let mut map = shard.write().unwrap_or_else(PoisonError::into_inner);
        if let Some(e) = map.get(key) {
            return Arc::clone(e);
        }
        if map.len() >= self.per_shard {
            map.retain(|_, e| !e.idle(now));
            if map.len() >= self.per_shard {
                let victim = map
                    .iter()
                    .find(|(_, e)| Arc::strong_count(e) == 1)
                    .or_else(|| map.iter().next())
                    .map(|(k, _)| k.clone());
                if let Some(k) = victim {
                    map.remove(&k);
                }
            }
        }
        Arc::clone(map.entry(key.to_owned()).or_default())
    }

    pub(crate) fn len(&self) -> usize {
        self.shards
            .iter()
            .map(|s| s.0.read().unwrap_or_else(PoisonError::into_inner).len())
            .sum()
    }
}

/// A [`Seen`] stamp's unit: 2^16 ns (65.5 µs). A `u32` of them wraps after
/// 3.3 days, so spans up to half that compare correctly.
const SEEN_SHIFT: u32 = 16;
/// The longest span [`Seen::touch`] tells apart: half the stamps' wrap.
pub(crate) const SEEN_SPAN_MAX: u64 = (1u64 << 31) << SEEN_SHIFT;

/// When keys were last checked, in a fixed table of `u32` stamps indexed by a
/// seeded hash of the key (lossy: keys sharing a slot share a stamp). It tells a
/// key checked again within a lease's life (worth a lease) from one seen
/// seldom (a lease of it would be one round trip per check anyway), without
/// keeping lease state for the seldom ones. A collision only makes a cold key
/// look warm: it then takes the lease path, which is always exact.
pub(crate) struct Seen {
    stamps: Box<[AtomicU32]>,
    hasher: DefaultHashBuilder,
}

impl Seen {
    /// A sketch of `slots` stamps (rounded up to a power of two, at least 256).
    pub(crate) fn new(slots: usize) -> Self {
        let n = slots.clamp(256, 1 << 22).next_power_of_two();
        Self {
            stamps: (0..n).map(|_| AtomicU32::new(0)).collect(),
            hasher: DefaultHashBuilder::default(),
        }
    }

    /// Records that `key` is checked at `now` (ns), and answers when it was
    /// last seen before, if that was within `span` ns (at most
    /// [`SEEN_SPAN_MAX`]): the ns of that stamp, at most `now`.
    pub(crate) fn touch(&self, key: &str, now: u64, span: u64) -> Option<u64> {
        let slot = &self.stamps[self.hasher.hash_one(key) as usize & (self.stamps.len() - 1)];
        // 0 is "never": a stamp is at least 1.
        let stamp = ((now >> SEEN_SHIFT) as u32).max(1);
        let last = slot.swap(stamp, Ordering::Relaxed);
        if last == 0 {
            return None;
        }
        let ago = u64::from(stamp.wrapping_sub(last)) << SEEN_SHIFT;
        (ago < SEEN_SPAN_MAX && ago <= span).then(|| now.saturating_sub(ago))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    #[test]
    fn a_key_is_warm_when_seen_again_within_the_span() {
        let s = Seen::new(1 << 10);
        assert_eq!(s.touch("a", 10 * MS, 500 * MS), None, "never seen");
        let at = s.touch("a", 300 * MS, 500 * MS).expect("seen 290 ms ago");
        // Stamps are 65.5 µs apart: the time it was seen, to within one.
        assert!(at >= 10 * MS && at - 10 * MS < 1 << SEEN_SHIFT, "{at}");
        assert_eq!(s.touch("a", 900 * MS, 500 * MS), None, "600 ms: cold again");
        assert!(s.touch("a", 901 * MS, 500 * MS).is_some());
    }

    #[test]
    fn a_stamp_from_past_half_the_wrap_or_the_future_is_cold() {
        let s = Seen::new(256);
        let t = 5 * MS;
        assert_eq!(s.touch("k", t, u64::MAX), None);
        // Past half the wrap (1.6 days): too old to tell, so cold.
        assert_eq!(
            s.touch("k", t + SEEN_SPAN_MAX + (1 << SEEN_SHIFT), u64::MAX),
            None
        );
        let later = t + SEEN_SPAN_MAX + 10 * MS;
        assert!(s.touch("k", later, u64::MAX).is_some());
        // A clock read before the stamp (another thread's later read won the
        // slot): a stamp from the future is no evidence.
        assert_eq!(s.touch("k", later - MS, u64::MAX), None);
        // u64 extremes do not overflow.
        assert_eq!(s.touch("x", u64::MAX, u64::MAX), None);
        assert!(s.touch("x", u64::MAX, u64::MAX).is_some());
    }
}
