//! The keys' lease state: a map of up to 64 shards (see the module docs' "Key
//! map"), the sketch of when keys without lease state were last seen (see
//! "Cold keys"), and the hit counters, striped per thread.

use core::hash::BuildHasher;
use core::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
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
/// A slot's key tag (31 bits of the key's hash, above the stamp).
const TAG: u64 = (1 << 31) - 1;
/// A slot's top bit: its key turned warm and left it to any other.
const RELEASED: u64 = 1 << 63;

/// When keys were last checked: a fixed table of slots indexed by a seeded
/// hash of the key, each the last key's 31-bit tag (more bits of its hash), a
/// released bit and a `u32` stamp. It tells a key checked again within a lease's life (worth a
/// lease) from one seen seldom (a lease of it would be one round trip per
/// check anyway), without keeping lease state for the seldom ones. Keys that
/// share a slot overwrite each other's stamps; the tag tells which key stamped
/// it, so a key never takes another's time for its own.
pub(crate) struct Seen {
    slots: Box<[AtomicU64]>,
    hasher: DefaultHashBuilder,
}

/// What [`Seen::touch`] found in a key's slot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Last {
    /// Nothing within the span: the key is cold.
    Cold,
    /// This key, at this time (ns), within the span.
    This(u64),
    /// Another key sharing the slot, within the span: whether this key was
    /// checked recently is not known.
    Other,
}

impl Seen {
    /// A sketch of `slots` slots (rounded up to a power of two, at least 256),
    /// 8 bytes each.
    pub(crate) fn new(slots: usize) -> Self {
        let n = slots.clamp(256, 1 << 22).next_power_of_two();
        Self {
            slots: (0..n).map(|_| AtomicU64::new(0)).collect(),
            hasher: DefaultHashBuilder::default(),
        }
    }

    /// Records that `key` is checked at `now` (ns), and answers who was
    /// checked last in its slot within `span` ns (at most [`SEEN_SPAN_MAX`]).
    /// A slot another key stamped within the span is left to that key until
    /// that stamp is older than the span, or until its key turns warm and
    /// releases it ([`Self::release`]).
    pub(crate) fn touch(&self, key: &str, now: u64, span: u64) -> Last {
        let (slot, tag) = self.slot(key);
        // 0 is "never": a stamp is at least 1.
        let stamp = ((now >> SEEN_SHIFT) as u32).max(1);
        let last = slot.load(Ordering::Relaxed);
        let last_stamp = last as u32;
        let ago = u64::from(stamp.wrapping_sub(last_stamp)) << SEEN_SHIFT;
        let recent = last_stamp != 0 && ago < SEEN_SPAN_MAX && ago <= span;
        let mine = (last >> 32) & TAG == tag;
        if recent && !mine && last & RELEASED == 0 {
            return Last::Other;
        }
        // Two threads may stamp at once: either stamp will do.
        slot.store(tag << 32 | u64::from(stamp), Ordering::Relaxed);
        if recent && mine {
            Last::This(now.saturating_sub(ago))
        } else {
            Last::Cold
        }
    }

    /// Marks `key`'s slot free for another key if `key` stamped it last: the
    /// key has turned warm (its lease state routes it from now on). Its stamp
    /// stays, for its own checks that race its first lease.
    pub(crate) fn release(&self, key: &str) {
        let (slot, tag) = self.slot(key);
        let last = slot.load(Ordering::Relaxed);
        if (last >> 32) & TAG == tag {
            let _ =
                slot.compare_exchange(last, last | RELEASED, Ordering::Relaxed, Ordering::Relaxed);
        }
    }

    /// `key`'s slot and tag.
    fn slot(&self, key: &str) -> (&AtomicU64, u64) {
        let h = self.hasher.hash_one(key);
        (&self.slots[h as usize & (self.slots.len() - 1)], h >> 33)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    #[test]
    fn a_key_is_warm_when_seen_again_within_the_span() {
        let s = Seen::new(1 << 10);
        assert_eq!(s.touch("a", 10 * MS, 500 * MS), Last::Cold, "never seen");
        let Last::This(at) = s.touch("a", 300 * MS, 500 * MS) else {
            panic!("seen 290 ms ago")
        };
        // Stamps are 65.5 µs apart: the time it was seen, to within one.
        assert!(at >= 10 * MS && at - 10 * MS < 1 << SEEN_SHIFT, "{at}");
        assert_eq!(
            s.touch("a", 900 * MS, 500 * MS),
            Last::Cold,
            "600 ms: cold again"
        );
        assert!(matches!(s.touch("a", 901 * MS, 500 * MS), Last::This(_)));
    }

    #[test]
    fn a_slot_another_key_stamped_is_left_to_it_until_the_stamp_is_old() {
        let s = Seen::new(256);
        // Two keys of one slot.
        let slot = |k: &str| s.hasher.hash_one(k) as usize & (s.slots.len() - 1);
        let a = "k0".to_owned();
        let b = (1..)
            .map(|i| format!("k{i}"))
            .find(|k| slot(k) == slot(&a))
            .expect("a key sharing the slot");
        let span = 500 * MS;
        assert_eq!(s.touch(&a, 10 * MS, span), Last::Cold);
        // b never takes a's time for its own, and leaves the slot to a.
        assert_eq!(s.touch(&b, 20 * MS, span), Last::Other);
        assert_eq!(s.touch(&b, 30 * MS, span), Last::Other);
        let Last::This(at) = s.touch(&a, 40 * MS, span) else {
            panic!("a keeps its slot")
        };
        // Stamps are 65.5 µs apart: the time it was seen, to within one.
        assert!(at.abs_diff(10 * MS) < 1 << SEEN_SHIFT, "{at}");
        // Once a's stamp (now 40 ms) is older than the span, b takes the slot.
        assert_eq!(s.touch(&b, 600 * MS, span), Last::Cold);
        assert!(matches!(s.touch(&b, 700 * MS, span), Last::This(_)));
        assert_eq!(s.touch(&a, 710 * MS, span), Last::Other);
        // b turns warm and releases the slot; its own checks racing its first
        // lease still find their time; a is told warm on its next two.
        s.release(&a);
        assert_eq!(s.touch(&a, 720 * MS, span), Last::Other, "only b frees it");
        s.release(&b);
        assert!(matches!(s.touch(&b, 725 * MS, span), Last::This(_)));
        s.release(&b);
        assert_eq!(s.touch(&a, 730 * MS, span), Last::Cold);
        assert!(matches!(s.touch(&a, 740 * MS, span), Last::This(_)));
        assert_eq!(s.touch(&b, 750 * MS, span), Last::Other);
    }

    #[test]
    fn a_stamp_from_past_half_the_wrap_or_the_future_is_cold() {
        let s = Seen::new(256);
        let t = 5 * MS;
        assert_eq!(s.touch("k", t, u64::MAX), Last::Cold);
        // Past half the wrap (1.6 days): too old to tell, so cold.
        assert_eq!(
            s.touch("k", t + SEEN_SPAN_MAX + (1 << SEEN_SHIFT), u64::MAX),
            Last::Cold
        );
        let later = t + SEEN_SPAN_MAX + 10 * MS;
        assert!(matches!(s.touch("k", later, u64::MAX), Last::This(_)));
        // A clock read before the stamp (another thread's later read won the
        // slot): a stamp from the future is no evidence.
        assert_eq!(s.touch("k", later - MS, u64::MAX), Last::Cold);
        // u64 extremes do not overflow.
        assert_eq!(s.touch("x", u64::MAX, u64::MAX), Last::Cold);
        assert!(matches!(s.touch("x", u64::MAX, u64::MAX), Last::This(_)));
    }
}
