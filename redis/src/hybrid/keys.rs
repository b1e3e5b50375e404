//! The keys' lease state: a map of up to 64 shards (see the module docs' "Key
//! map"), and the hit counters, striped per thread.

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
