//! A token bucket behind a `Mutex`, written like Go's `golang.org/x/time/rate`
//! `Limiter`: the state is `{tokens: f64, last: Instant}` and every call refills
//! it from the elapsed time under the lock (`advance`), then takes `n` tokens if
//! that leaves none negative. As in Go's `Allow` (= `AllowN(time.Now(), 1)`), the
//! clock is read before the lock is taken; a refused request writes nothing (Go's
//! `reserveN` with `maxFutureReserve = 0`). What it leaves out of Go's
//! `Limiter` — the infinite-rate shortcut, `lastEvent` and reservations — is not on
//! the `Allow` path.

use std::sync::{Mutex, PoisonError};
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
            state: Mutex::new(State {
                tokens: burst,
                last: Instant::now(),
            }),
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
        // Go's `advance`: a time before `last` counts as no time passing.
        let last = s.last.min(now);
        let elapsed = now.duration_since(last).as_secs_f64();
        let tokens = (s.tokens + elapsed * self.rate_per_sec).min(self.burst) - n;
        if tokens < 0.0 {
            return false;
        }
        s.tokens = tokens;
        s.last = now;
        true
    }
}
