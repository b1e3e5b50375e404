//! The public check calls: one key's decision, the keyed shaper, and the forms
//! that read the table's clock.

use core::hash::{BuildHasher, Hash};

use super::Keyed;
use super::slot::Group;
use crate::clock::Clock;
use crate::decision::{Decision, or_never};
use crate::error::InsufficientCapacity;
use crate::limiter::Algorithm;
use crate::shaper::{Reservation, Shaping};

impl<A: Algorithm, C, S: AsRef<[Group]>, H: BuildHasher> Keyed<A, C, S, H> {
    /// Admits one unit for `key` at `now`.
    ///
    /// ```
    /// # use sluicegate::{SlidingWindow, Sliding, Quota};
    /// # use sluicegate::keyed::KeyedLimiter;
    /// let t = KeyedLimiter::<Sliding, ()>::with_clock(Quota::per_second(1), 8, ()).unwrap();
    /// assert!(t.check_at(&"k", 0).allowed);
    /// assert!(!t.check_at(&"k", 1).allowed);
    /// ```
    #[inline]
    pub fn check_at<K: Hash + ?Sized>(&self, key: &K, now: u64) -> Decision {
        or_never(self.check_n_at(key, 1, now))
    }

    /// Admits `n` units for `key` at `now`, all-or-nothing; `n = 0` is a peek.
    ///
    /// ```
    /// # use sluicegate::{Gcra, Quota};
    /// # use sluicegate::keyed::KeyedLimiter;
    /// let t = KeyedLimiter::<Gcra, ()>::with_clock(Quota::per_second(5), 8, ()).unwrap();
    /// assert_eq!(t.check_n_at(&7u64, 5, 0).unwrap().remaining, 0);
    /// assert!(t.check_n_at(&7u64, 6, 0).is_err());
    /// ```
    #[inline]
    pub fn check_n_at<K: Hash + ?Sized>(
        &self,
        key: &K,
        n: u64,
        now: u64,
    ) -> Result<Decision, InsufficientCapacity> {
        self.run(self.hasher.hash_one(key), n, now, true)
            .map(|(s, _)| s.decision)
    }

    /// What [`Self::check_n_at`] would answer for `key`, charging nothing (and
    /// placing no new key).
    ///
    /// ```
    /// # use sluicegate::{Gcra, Quota};
    /// # use sluicegate::keyed::KeyedLimiter;
    /// let t = KeyedLimiter::<Gcra, ()>::with_clock(Quota::per_second(5), 8, ()).unwrap();
    /// assert_eq!(t.peek_n_at(&"x", 2, 0).unwrap().remaining, 3);
    /// assert_eq!(t.stats().inserted, 0);
    /// ```
    #[inline]
    pub fn peek_n_at<K: Hash + ?Sized>(
        &self,
        key: &K,
        n: u64,
        now: u64,
    ) -> Result<Decision, InsufficientCapacity> {
        self.run(self.hasher.hash_one(key), n, now, false)
            .map(|(s, _)| s.decision)
    }

    /// The state of `key` at `now` as a cost-1 request would see it, charging nothing.
    ///
    /// ```
    /// # use sluicegate::{Gcra, Quota};
    /// # use sluicegate::keyed::KeyedLimiter;
    /// let t = KeyedLimiter::<Gcra, ()>::with_clock(Quota::per_second(5), 8, ()).unwrap();
    /// t.check_at(&"x", 0);
    /// assert_eq!(t.peek_at(&"x", 0).remaining, 3);
    /// ```
    #[inline]
    pub fn peek_at<K: Hash + ?Sized>(&self, key: &K, now: u64) -> Decision {
        or_never(self.peek_n_at(key, 1, now))
    }
}

impl<C, S: AsRef<[Group]>, H: BuildHasher> Keyed<Shaping, C, S, H> {
    /// Sets the longest wait a reservation may be given (0 after construction).
    ///
    /// ```
    /// # use sluicegate::{Quota, Shaping};
    /// # use sluicegate::keyed::Keyed;
    /// let t = Keyed::<Shaping, _, _, _>::with_capacity_and_hasher(
    ///     Quota::per_second(10).burst(1), 8, foldhash::fast::FixedState::with_seed(3), (),
    /// ).unwrap().with_max_delay(1_000_000_000);
    /// t.reserve_n_at(&"job", 1, 0).unwrap();
    /// assert_eq!(t.reserve_n_at(&"job", 1, 0).unwrap().delay_ns(), 100_000_000);
    /// ```
    #[must_use]
    pub fn with_max_delay(self, max_delay_ns: u64) -> Self {
        let _ = self.config.update(|mut w| {
            w[3] = max_delay_ns;
            Ok::<_, ()>(w)
        });
        self
    }

    /// Reserves `n` units for `key` at `now` (keyed shaper): the delay to wait.
    ///
    /// ```
    /// # use sluicegate::{Quota, Shaping};
    /// # use sluicegate::keyed::Keyed;
    /// let t = Keyed::<Shaping, _, _, _>::with_capacity_and_hasher(
    ///     Quota::per_second(10).burst(1), 8, foldhash::fast::FixedState::with_seed(3), (),
    /// ).unwrap();
    /// assert_eq!(t.reserve_n_at(&"job", 1, 0).unwrap().delay_ns(), 0);
    /// assert!(!t.reserve_n_at(&"job", 1, 0).unwrap().granted()); // max delay 0
    /// ```
    pub fn reserve_n_at<K: Hash + ?Sized>(
        &self,
        key: &K,
        n: u64,
        now: u64,
    ) -> Result<Reservation, InsufficientCapacity> {
        let (step, _) = self.run(self.hasher.hash_one(key), n, now, true)?;
        Ok(Reservation::from_step(
            &step,
            n,
            self.params().gcra().emission_interval_ns(),
        ))
    }
}

impl<A: Algorithm, C: Clock, S: AsRef<[Group]>, H: BuildHasher> Keyed<A, C, S, H> {
    /// [`Self::check_at`] on the table's clock.
    ///
    /// ```
    /// # use sluicegate::{Gcra, Quota};
    /// # use sluicegate::keyed::KeyedLimiter;
    /// let t = KeyedLimiter::<Gcra>::new(Quota::per_second(10), 64).unwrap();
    /// assert!(t.check(&"k").allowed);
    /// ```
    #[inline]
    pub fn check<K: Hash + ?Sized>(&self, key: &K) -> Decision {
        or_never(self.clocked(key, 1, true))
    }

    /// [`Self::check_n_at`] on the table's clock.
    ///
    /// ```
    /// # use sluicegate::{Gcra, Quota};
    /// # use sluicegate::keyed::KeyedLimiter;
    /// let t = KeyedLimiter::<Gcra>::new(Quota::per_second(10), 64).unwrap();
    /// assert!(t.check_n(&"k", 10).unwrap().allowed);
    /// ```
    #[inline]
    pub fn check_n<K: Hash + ?Sized>(
        &self,
        key: &K,
        n: u64,
    ) -> Result<Decision, InsufficientCapacity> {
        self.clocked(key, n, true)
    }

    /// [`Self::peek_at`] on the table's clock.
    ///
    /// ```
    /// # use sluicegate::{Gcra, Quota};
    /// # use sluicegate::keyed::KeyedLimiter;
    /// let t = KeyedLimiter::<Gcra>::new(Quota::per_second(10), 64).unwrap();
    /// assert_eq!(t.peek(&"k").remaining, 9);
    /// ```
    #[inline]
    pub fn peek<K: Hash + ?Sized>(&self, key: &K) -> Decision {
        or_never(self.clocked(key, 1, false))
    }

    /// [`Self::peek_n_at`] on the table's clock.
    ///
    /// ```
    /// # use sluicegate::{Gcra, Quota};
    /// # use sluicegate::keyed::KeyedLimiter;
    /// let t = KeyedLimiter::<Gcra>::new(Quota::per_second(10), 64).unwrap();
    /// assert!(t.peek_n(&"k", 10).unwrap().allowed);
    /// ```
    #[inline]
    pub fn peek_n<K: Hash + ?Sized>(
        &self,
        key: &K,
        n: u64,
    ) -> Result<Decision, InsufficientCapacity> {
        self.clocked(key, n, false)
    }

    /// A decision on the table's clock, read once the key's slot has been looked
    /// up (see [`Self::run_with`]): at a million keys the lookup's cache misses
    /// then overlap the clock read (`keyed_1m/sluicegate check` 181–225 → 158–195
    /// ns, the hot key 25–26 → 21 ns, in interleaved runs on a Zen 4 VM).
    #[inline]
    fn clocked<K: Hash + ?Sized>(
        &self,
        key: &K,
        n: u64,
        consume: bool,
    ) -> Result<Decision, InsufficientCapacity> {
        self.run_with(self.hasher.hash_one(key), n, || self.clock.now(), consume)
            .map(|(s, _)| s.decision)
    }

    /// Live keys now (see [`Self::len_at`]).
    ///
    /// ```
    /// # use sluicegate::{Gcra, Quota};
    /// # use sluicegate::keyed::KeyedLimiter;
    /// let t = KeyedLimiter::<Gcra>::new(Quota::per_minute(10), 64).unwrap();
    /// t.check(&"k");
    /// assert_eq!(t.len(), 1);
    /// ```
    pub fn len(&self) -> usize {
        self.len_at(self.clock.now())
    }

    /// Whether no key holds live state now.
    ///
    /// ```
    /// # use sluicegate::{Gcra, Quota};
    /// # use sluicegate::keyed::KeyedLimiter;
    /// let t = KeyedLimiter::<Gcra>::new(Quota::per_minute(10), 64).unwrap();
    /// assert!(t.is_empty());
    /// ```
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}
