//! A token bucket behind a `Mutex`, written like Go's `golang.org/x/time/rate`
//! `Limiter`: the state is `{tokens: f64, last: Instant}` and every call refills
//! it from the elapsed time under the lock (`advance`), then takes `n` tokens if
//! that leaves none negative. As in Go's `Allow` (= `AllowN(time.Now(), 1)`), the
//! clock is read before the lock is taken; a refused request writes nothing (Go's
//! `reserveN` with `maxFutureReserve = 0`). What it leaves out of Go's
//! `Limiter` — the infinite-rate shortcut, `lastEvent` and reservations — is not on
//! the `Allow` path.
//!
//! [`KeyedMutexMap`] is the keyed form the seeds use: one such bucket per key.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError, RwLock};
use std::time::Instant;

/// See the module docs.
pub(crate) struct MutexBucket {
    rate_per_sec: f64,
    burst: f64,
    state: Mutex<State>,
}

struct State {
    tokens: f64,
    last: Instant,
}

impl MutexBucket {
    /// A full bucket of `burst` tokens refilled at `rate_per_sec`.
    pub(crate) fn new(rate_per_sec: f64, burst: f64) -> Self {
        Self {
            rate_per_sec,
            burst,
            state: Mutex::new(State::full(burst, Instant::now())),
        }
    }

    /// Takes one token now if there is one (Go's `Allow`).
    #[inline]
    pub(crate) fn allow(&self) -> bool {
        self.allow_n(Instant::now(), 1.0)
    }

    /// Takes `n` tokens at `now` if there are that many (Go's `AllowN`).
    #[inline]
    pub(crate) fn allow_n(&self, now: Instant, n: f64) -> bool {
        if n > self.burst {
            return false;
        }
        // A panic under this lock cannot leave the two fields inconsistent (both are
        // written together after every computation), so a poisoned lock is usable.
        let mut s = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        s.take(self.rate_per_sec, self.burst, now, n)
    }
}

impl State {
    fn full(burst: f64, now: Instant) -> Self {
        Self {
            tokens: burst,
            last: now,
        }
    }

    /// Go's `advance` then the take: refill from the elapsed time (a time before
    /// `last` counts as no time passing), take `n` if that leaves none negative.
    #[inline]
    fn take(&mut self, rate_per_sec: f64, burst: f64, now: Instant, n: f64) -> bool {
        let last = self.last.min(now);
        let elapsed = now.duration_since(last).as_secs_f64();
        let tokens = (self.tokens + elapsed * rate_per_sec).min(burst) - n;
        if tokens < 0.0 {
            return false;
        }
        self.tokens = tokens;
        self.last = now;
        true
    }
}

/// The seeds' keyed design: `RwLock<HashMap<String, Mutex<bucket>>>`, one
/// [`MutexBucket`]-style state per key under one shared quota. A check reads the
/// clock, takes the read lock, looks the key up by `&str` (no allocation) and
/// locks that key's bucket; only a key seen for the first time takes the write
/// lock and copies the key. std's `HashMap` with its default SipHash-1-3
/// `RandomState` (what the seeds use; resistant to hash flooding). Nothing is ever
/// removed: the map grows with every new key, as in the seeds.
pub(crate) struct KeyedMutexMap {
    rate_per_sec: f64,
    burst: f64,
    map: RwLock<HashMap<String, Mutex<State>>>,
}

impl KeyedMutexMap {
    /// An empty map whose buckets start full of `burst` and refill at `rate_per_sec`.
    pub(crate) fn new(rate_per_sec: f64, burst: f64) -> Self {
        Self {
            rate_per_sec,
            burst,
            map: RwLock::new(HashMap::new()),
        }
    }

    /// Takes one token for `key` now if it has one.
    #[inline]
    pub(crate) fn allow(&self, key: &str) -> bool {
        let now = Instant::now();
        {
            let map = self.map.read().unwrap_or_else(PoisonError::into_inner);
            if let Some(b) = map.get(key) {
                let mut b = b.lock().unwrap_or_else(PoisonError::into_inner);
                return b.take(self.rate_per_sec, self.burst, now, 1.0);
            }
        }
        let mut map = self.map.write().unwrap_or_else(PoisonError::into_inner);
        let b = map
            .entry(key.to_owned())
            .or_insert_with(|| Mutex::new(State::full(self.burst, now)));
        b.get_mut().unwrap_or_else(PoisonError::into_inner).take(
            self.rate_per_sec,
            self.burst,
            now,
            1.0,
        )
    }

    /// Keys in the map.
    pub(crate) fn len(&self) -> usize {
        self.map
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }
}
