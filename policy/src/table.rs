//! A keyed rule's limiters: one [`AnyLimiter`] per key fingerprint, in a bounded,
//! sharded table.
//!
//! This is the policy's own table until core's `AnyKeyed` (one word per key,
//! lock-free) is available for every keyed kind; it has the same calls
//! (`check_n_at`, `peek_n_at`, `set_spec`, `len_at`) so the swap is local to this
//! file. Memory stays bounded the way DESIGN §4 and §10 require: an entry whose
//! limiter is back to full (`reset_after_ns == 0`) carries no information and is
//! reclaimed when a shard is full; when every entry is live, a new key is denied
//! (counted as `rejected`): bounded memory may make a rule early to limit, never late.

use std::collections::hash_map::RandomState;
use std::collections::HashMap;
use std::hash::{BuildHasher, BuildHasherDefault, Hash, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};

use sluicegate::{AnyLimiter, Decision, InsufficientCapacity, Outcome, Spec, SpecError};

/// The fingerprints are already keyed SipHash outputs: the map uses them as is.
#[derive(Default)]
struct Identity(u64);

impl Hasher for Identity {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 << 8) | u64::from(b);
        }
    }
    fn write_u64(&mut self, v: u64) {
        self.0 = v;
    }
}

type Shard = HashMap<u64, AnyLimiter<()>, BuildHasherDefault<Identity>>;

const SHARDS: usize = 16;

pub(crate) struct KeyedTable {
    shards: Box<[Mutex<Shard>]>,
    per_shard: usize,
    hasher: RandomState,
    spec: Mutex<Spec>,
    evictions: AtomicU64,
    rejected: AtomicU64,
}

impl KeyedTable {
    pub(crate) fn new(spec: &Spec, capacity: usize) -> Result<Self, SpecError> {
        // Build one limiter now, so a spec the keyed kinds cannot take fails here.
        AnyLimiter::with_clock(spec, ())?;
        Ok(KeyedTable {
            shards: (0..SHARDS).map(|_| Mutex::new(Shard::default())).collect(),
            per_shard: capacity.div_ceil(SHARDS).max(1),
            hasher: RandomState::new(),
            spec: Mutex::new(*spec),
            evictions: AtomicU64::new(0),
            rejected: AtomicU64::new(0),
        })
    }

    pub(crate) fn check_n_at<K: Hash + ?Sized>(
        &self,
        key: &K,
        n: u64,
        now: u64,
        consume: bool,
    ) -> Result<Outcome, InsufficientCapacity> {
        let fp = self.hasher.hash_one(key);
        let mut shard = self.shards[(fp as usize) % SHARDS]
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if !shard.contains_key(&fp) {
            if shard.len() >= self.per_shard {
                let before = shard.len();
                shard.retain(|_, l| {
                    l.peek_n_at(0, now)
                        .is_ok_and(|o| o.decision.reset_after_ns != 0)
                });
                let freed = (before - shard.len()) as u64;
                self.evictions.fetch_add(freed, Ordering::Relaxed);
            }
            let spec = *self.spec.lock().unwrap_or_else(PoisonError::into_inner);
            if shard.len() >= self.per_shard {
                self.rejected.fetch_add(1, Ordering::Relaxed);
                return Ok(Outcome {
                    decision: Decision::never(spec.capacity()),
                    delay_ns: 0,
                });
            }
            match AnyLimiter::with_clock(&spec, ()) {
                Ok(l) => {
                    shard.insert(fp, l);
                }
                Err(_) => {
                    self.rejected.fetch_add(1, Ordering::Relaxed);
                    return Ok(Outcome {
                        decision: Decision::never(spec.capacity()),
                        delay_ns: 0,
                    });
                }
            }
        }
        match shard.get(&fp) {
            Some(l) if consume => l.check_n_at(n, now),
            Some(l) => l.peek_n_at(n, now),
            None => Ok(Outcome {
                decision: Decision::never(0),
                delay_ns: 0,
            }),
        }
    }

    /// New quotas for every key; each key's state carries over.
    pub(crate) fn set_spec(&self, spec: &Spec) -> Result<(), SpecError> {
        let mut current = self.spec.lock().unwrap_or_else(PoisonError::into_inner);
        // Validate against a fresh limiter first, so a rejected spec changes nothing.
        AnyLimiter::with_clock(&current, ())?.set_spec(spec)?;
        for s in self.shards.iter() {
            let s = s.lock().unwrap_or_else(PoisonError::into_inner);
            for l in s.values() {
                l.set_spec(spec)?;
            }
        }
        *current = *spec;
        Ok(())
    }

    /// Keys holding state (not back to full) at `now`.
    pub(crate) fn len_at(&self, now: u64) -> usize {
        self.shards
            .iter()
            .map(|s| {
                let s = s.lock().unwrap_or_else(PoisonError::into_inner);
                s.values()
                    .filter(|l| {
                        l.peek_n_at(0, now)
                            .is_ok_and(|o| o.decision.reset_after_ns != 0)
                    })
                    .count()
            })
            .sum()
    }

    pub(crate) fn evictions(&self) -> u64 {
        self.evictions.load(Ordering::Relaxed)
    }

    pub(crate) fn rejected(&self) -> u64 {
        self.rejected.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluicegate::Kind;

    #[test]
    fn bounded_reclaims_fresh_then_rejects() {
        let spec = Spec::parse(Kind::FixedWindow, "1/s").unwrap();
        let t = KeyedTable::new(&spec, SHARDS).unwrap();
        // Fill far more keys than fit at one instant: the later ones are denied.
        let admitted = (0..200u32)
            .filter(|k| t.check_n_at(k, 1, 0, true).unwrap().decision.allowed)
            .count();
        assert!((SHARDS..200).contains(&admitted), "{admitted}");
        assert!(t.rejected() > 0);
        assert_eq!(t.len_at(0), admitted);
        // A second later every window expired: entries are reclaimed, keys admitted.
        let sec = 1_000_000_000;
        assert!(
            t.check_n_at(&9999u32, 1, sec, true)
                .unwrap()
                .decision
                .allowed
        );
        assert!(t.evictions() > 0);
        // No key is ever admitted twice in one window.
        assert!(
            !t.check_n_at(&9999u32, 1, sec, true)
                .unwrap()
                .decision
                .allowed
        );
    }
}
