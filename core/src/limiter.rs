//! The one compare-and-swap loop, the config cell, and the generic [`Limiter`].
//!
//! Each algorithm is a pure function `decide(params, word, now, n) -> Step` (see
//! [`Algorithm`]); `apply` is the only loop that turns such a function into an
//! atomic update, and every single-word limiter, the keyed table and the compound
//! limiter go through it.
//!
//! # Runtime reconfiguration
//! Parameters live in a small seqlock (`ConfigCell`) next to the state word. Every
//! algorithm's word means the same thing under any parameters the limiter can be
//! reconfigured to (a token bucket's word is the instant it is next full; a window's
//! word is a window index and counts, and the window length is fixed at
//! construction), so reconfiguring never rewrites the word: the new parameters apply
//! to the state from the next decision on. A check loads the word (`Acquire`) before
//! the parameters and publishes its new word with `Release`, so a check that builds
//! on a word written under new parameters also decides under them. A check that
//! overlaps `set_quota` is decided under the old or the new quota, never a mix.

use core::marker::PhantomData;

use crate::clock::Clock;
use crate::decision::Decision;
use crate::error::{ConfigError, InsufficientCapacity};
use crate::quota::Quota;
use crate::sync::{AtomicU64, Ordering, fence, order, spin_loop};

/// How many `u64`s an algorithm's parameters take in the config cell.
pub const PARAM_WORDS: usize = 4;

/// What one decision does: the answer, and the word to store if it consumes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Step {
    /// The answer for the caller.
    pub decision: Decision,
    /// The new state word when the request is admitted with a cost above zero;
    /// `None` when nothing is written (a denial, or a cost of zero).
    pub next: Option<u64>,
    /// For the shaper: how long the admitted request must wait before it runs.
    pub delay_ns: u64,
}

/// An algorithm whose whole state is one `u64` word.
///
/// The word `0` is the fresh state of every algorithm (a full bucket, an empty
/// window); a word that decides like `0` at `now` is reported by [`Self::is_fresh`]
/// and may be recycled by a keyed table without changing any decision.
///
/// ```
/// use sluicegate::{Algorithm, Gcra, Quota};
/// let p = Gcra::params(&Quota::per_second(10)).unwrap();
/// let step = Gcra::decide(&p, 0, 0, 3);
/// assert!(step.decision.allowed);
/// assert_eq!(step.decision.remaining, 7);
/// assert!(Gcra::is_fresh(&p, step.next.unwrap(), 1_000_000_000));
/// ```
pub trait Algorithm {
    /// The validated parameters.
    type Params: Copy + core::fmt::Debug + PartialEq;
    /// Validates a quota into parameters.
    fn params(quota: &Quota) -> Result<Self::Params, ConfigError>;
    /// Validates a change of quota on a live limiter (`old` are its parameters).
    fn reparams(old: &Self::Params, quota: &Quota) -> Result<Self::Params, ConfigError> {
        let _ = old;
        Self::params(quota)
    }
    /// The parameters as words for the config cell.
    fn to_words(p: &Self::Params) -> [u64; PARAM_WORDS];
    /// The inverse of [`Self::to_words`].
    fn from_words(w: [u64; PARAM_WORDS]) -> Self::Params;
    /// The largest cost that can ever be admitted at once.
    fn capacity(p: &Self::Params) -> u64;
    /// The decision for a request of cost `n` (`n <= capacity`) at `now`.
    fn decide(p: &Self::Params, word: u64, now: u64, n: u64) -> Step;
    /// Whether `word` decides exactly like the fresh word `0` at `now` and at every
    /// later time.
    fn is_fresh(p: &Self::Params, word: u64, now: u64) -> bool;
    /// The word after giving back `n` units admitted by the update `prev -> next`,
    /// when other updates have since turned `next` into `word`. Never credits more
    /// than the admission took (see the compound limiter's docs).
    fn give_back(p: &Self::Params, word: u64, n: u64, prev: u64, next: u64, now: u64) -> u64;
    /// A word at least as restrictive as both `a` and `b` at `now` and at every
    /// later time and under any parameters the limiter can be reconfigured to:
    /// from it, no request is admitted that `a` or `b` would deny. A keyed table
    /// folds the state of each key it evicts into such words (see
    /// [`crate::keyed`]). `None` (the default) means the algorithm offers no join:
    /// a full table then turns a new key away instead of evicting a live one.
    ///
    /// ```
    /// use sluicegate::{Algorithm, Gcra, Quota};
    /// let p = Gcra::params(&Quota::per_second(10)).unwrap();
    /// let a = Gcra::decide(&p, 0, 0, 3).next.unwrap();
    /// let b = Gcra::decide(&p, 0, 0, 7).next.unwrap();
    /// let j = Gcra::join(&p, a, b, 0).unwrap();
    /// assert_eq!(Gcra::decide(&p, j, 0, 1).decision.remaining, 2); // as b
    /// ```
    fn join(p: &Self::Params, a: u64, b: u64, now: u64) -> Option<u64> {
        let _ = (p, a, b, now);
        None
    }
}

/// A seqlock of parameter words: read on every check, written only by
/// reconfiguration. Readers never write; a reader that overlaps a writer retries.
#[derive(Debug)]
#[repr(C)]
pub(crate) struct ConfigCell {
    seq: AtomicU64,
    words: [AtomicU64; PARAM_WORDS],
}

impl ConfigCell {
    #[cfg(not(loom))]
    pub(crate) const fn new(w: [u64; PARAM_WORDS]) -> Self {
        Self {
            seq: AtomicU64::new(0),
            words: [
                AtomicU64::new(w[0]),
                AtomicU64::new(w[1]),
                AtomicU64::new(w[2]),
                AtomicU64::new(w[3]),
            ],
        }
    }

    #[cfg(loom)]
    pub(crate) fn new(w: [u64; PARAM_WORDS]) -> Self {
        Self {
            seq: AtomicU64::new(0),
            words: [
                AtomicU64::new(w[0]),
                AtomicU64::new(w[1]),
                AtomicU64::new(w[2]),
                AtomicU64::new(w[3]),
            ],
        }
    }

    #[inline]
    pub(crate) fn load(&self) -> [u64; PARAM_WORDS] {
        loop {
            if let Some(w) = self.read() {
                return w;
            }
            spin_loop();
        }
    }

    /// One seqlock read: the words, unless a writer held or changed them.
    #[inline(always)]
    fn read(&self) -> Option<[u64; PARAM_WORDS]> {
        let s1 = self.seq.load(Ordering::Acquire);
        if s1 & 1 != 0 {
            return None;
        }
        let w = [
            self.words[0].load(Ordering::Relaxed),
            self.words[1].load(Ordering::Relaxed),
            self.words[2].load(Ordering::Relaxed),
            self.words[3].load(Ordering::Relaxed),
        ];
        fence(Ordering::Acquire);
        (self.seq.load(Ordering::Relaxed) == s1).then_some(w)
    }

    /// Stores `w` outright, without the sequence number: only before the cell
    /// is published to readers (a pool registry entry in caller memory, whose
    /// words never change once alive, is read without a writer ever holding it).
    #[cfg(feature = "std")]
    pub(crate) fn init(&self, w: [u64; PARAM_WORDS]) {
        for (slot, v) in self.words.iter().zip(w) {
            slot.store(v, Ordering::Relaxed);
        }
    }

    /// The words, if no writer holds the cell within a bounded spin: for cells
    /// in memory other processes write (a writer killed mid-update, or stray
    /// bytes, must not hang a reader).
    #[cfg(feature = "std")]
    pub(crate) fn try_load(&self) -> Option<[u64; PARAM_WORDS]> {
        for _ in 0..64 {
            if let Some(w) = self.read() {
                return Some(w);
            }
            spin_loop();
        }
        None
    }

    /// New parameters of algorithm `A` from `quota`, validated against the
    /// current ones ([`Algorithm::reparams`]): a live limiter's change of quota.
    pub(crate) fn requota<A: Algorithm>(&self, quota: &Quota) -> Result<(), ConfigError> {
        self.update(|w| {
            let old = A::from_words(w);
            A::reparams(&old, quota).map(|p| A::to_words(&p))
        })
    }

    /// Replaces the words, computed by `f` from the current ones; writers exclude
    /// each other through the odd sequence number.
    pub(crate) fn update<E>(
        &self,
        f: impl FnOnce([u64; PARAM_WORDS]) -> Result<[u64; PARAM_WORDS], E>,
    ) -> Result<(), E> {
        seq_write(&self.seq, || {
            let cur = [
                self.words[0].load(Ordering::Relaxed),
                self.words[1].load(Ordering::Relaxed),
                self.words[2].load(Ordering::Relaxed),
                self.words[3].load(Ordering::Relaxed),
            ];
            let result = f(cur);
            if let Ok(new) = &result {
                for (slot, v) in self.words.iter().zip(new) {
                    slot.store(*v, Ordering::Relaxed);
                }
            }
            result.map(|_| ())
        })
    }
}

/// Runs `write` as the one writer of the seqlock `seq`: an odd sequence number
/// excludes other writers and sends overlapping readers round again; the next
/// even number, stored with `Release`, publishes what `write` stored.
pub(crate) fn seq_write<R>(seq: &AtomicU64, write: impl FnOnce() -> R) -> R {
    let s = loop {
        let s = seq.load(Ordering::Relaxed);
        if s & 1 == 0
            && seq
                .compare_exchange_weak(s, s + 1, Ordering::Acquire, Ordering::Relaxed)
                .is_ok()
        {
            break s;
        }
        spin_loop();
    };
    fence(Ordering::Release);
    let result = write();
    seq.store(s + 2, Ordering::Release);
    result
}

/// A place that holds one state word: a limiter's own `AtomicU64`, or a keyed
/// table's slot (which also holds the key's fingerprint). [`apply_cell`] is the
/// one compare-and-swap loop over any of them.
pub(crate) trait StateCell {
    /// What one load returns.
    type Raw: Copy;
    /// The state word in `raw`, or `None` when the cell no longer holds the state
    /// being decided (a keyed slot another key has taken over).
    fn state(&self, raw: Self::Raw) -> Option<u64>;
    /// Replaces the state of `current` by `next` if the cell still holds
    /// `current` (orderings [`order::CAS_OK`] / [`order::CAS_ERR`]; may fail
    /// spuriously); otherwise returns what it holds.
    fn swap_state(&self, current: Self::Raw, next: u64) -> Result<(), Self::Raw>;
}

impl StateCell for AtomicU64 {
    type Raw = u64;
    #[inline]
    fn state(&self, raw: u64) -> Option<u64> {
        Some(raw)
    }
    #[inline]
    fn swap_state(&self, current: u64, next: u64) -> Result<(), u64> {
        self.compare_exchange_weak(current, next, order::CAS_OK, order::CAS_ERR)
            .map(|_| ())
    }
}

/// The compare-and-swap loop: decides on the state in `raw` (a load of `cell`)
/// and writes the new state, again and again until the write lands.
///
/// `params` is called on every attempt (it is the config cell's read), after the
/// word is loaded: see the module docs for why that order matters. With `consume`
/// false nothing is written. Returns the step and the word it was decided on, or
/// `None` when the cell stopped holding the state (see [`StateCell::state`]).
#[inline(always)]
pub(crate) fn apply_cell<A: Algorithm, W: StateCell>(
    cell: &W,
    mut raw: W::Raw,
    params: impl Fn() -> A::Params,
    now: u64,
    n: u64,
    consume: bool,
) -> Result<Option<(Step, u64)>, InsufficientCapacity> {
    loop {
        let Some(cur) = cell.state(raw) else {
            return Ok(None);
        };
        let p = params();
        let capacity = A::capacity(&p);
        if n > capacity {
            return Err(InsufficientCapacity {
                requested: n,
                capacity,
            });
        }
        let step = A::decide(&p, cur, now, n);
        let next = match step.next {
            Some(next) if consume && next != cur => next,
            _ => return Ok(Some((step, cur))),
        };
        match cell.swap_state(raw, next) {
            Ok(()) => return Ok(Some((step, cur))),
            Err(actual) => raw = actual,
        }
    }
}

/// Gives back `n` units of an admission `prev -> next` on `cell` (whose load was
/// `raw`): restores `prev` if the cell still holds `next`, otherwise applies
/// [`Algorithm::give_back`] (reading the time only then, as `Core::give_back`
/// does). A cell that no longer holds the state gets nothing back: keeping the
/// charge is the conservative answer.
// Only the keyed table's undo (used by `AnyKeyed`, std) calls it.
#[cfg(feature = "std")]
pub(crate) fn give_back_cell<A: Algorithm, W: StateCell>(
    cell: &W,
    mut raw: W::Raw,
    params: impl Fn() -> A::Params,
    n: u64,
    (prev, next): (u64, u64),
    now: impl Fn() -> u64,
) {
    let mut later: Option<u64> = None;
    loop {
        let Some(cur) = cell.state(raw) else {
            return;
        };
        let back = if cur == next && later.is_none() {
            prev
        } else {
            let now = *later.get_or_insert_with(&now);
            A::give_back(&params(), cur, n, prev, next, now)
        };
        if back == cur {
            return;
        }
        match cell.swap_state(raw, back) {
            Ok(()) => return,
            Err(actual) => raw = actual,
        }
    }
}

/// Runs one decision against `word` through [`apply_cell`]. Returns the step and
/// the word it was decided on.
///
/// Always inlined: out of line, its `Result<(Step, u64), _>` goes through memory
/// and every caller reloads it with wider loads than the stores that wrote it (a
/// store-forwarding stall: 15 ns instead of 8 ns per `check_at` here).
#[inline(always)]
pub(crate) fn apply<A: Algorithm>(
    word: &AtomicU64,
    params: impl Fn() -> A::Params,
    now: u64,
    n: u64,
    consume: bool,
) -> Result<(Step, u64), InsufficientCapacity> {
    loop {
        // A plain word always holds its state, so `None` never comes back; were it
        // to, deciding again is the safe answer.
        if let Some(done) =
            apply_cell::<A, _>(word, word.load(order::LOAD), &params, now, n, consume)?
        {
            return Ok(done);
        }
    }
}

/// State word plus parameters: a limiter without a clock.
#[derive(Debug)]
pub(crate) struct Core<A> {
    pub(crate) word: AtomicU64,
    pub(crate) config: ConfigCell,
    _algorithm: PhantomData<fn() -> A>,
}

impl<A: Algorithm> Core<A> {
    #[cfg(not(loom))]
    pub(crate) const fn from_words(words: [u64; PARAM_WORDS]) -> Self {
        Self {
            word: AtomicU64::new(0),
            config: ConfigCell::new(words),
            _algorithm: PhantomData,
        }
    }

    #[cfg(loom)]
    pub(crate) fn from_words(words: [u64; PARAM_WORDS]) -> Self {
        Self {
            word: AtomicU64::new(0),
            config: ConfigCell::new(words),
            _algorithm: PhantomData,
        }
    }

    pub(crate) fn new(p: &A::Params) -> Self {
        Self::from_words(A::to_words(p))
    }

    #[inline]
    pub(crate) fn params(&self) -> A::Params {
        A::from_words(self.config.load())
    }

    #[inline(always)]
    pub(crate) fn run(
        &self,
        now: u64,
        n: u64,
        consume: bool,
    ) -> Result<(Step, u64), InsufficientCapacity> {
        apply::<A>(&self.word, || self.params(), now, n, consume)
    }

    /// Replaces the word `current` by `new` (orderings of [`apply`]'s CAS); false
    /// if the word is no longer `current` (or, rarely, spuriously).
    #[inline]
    pub(crate) fn cas(&self, current: u64, new: u64) -> bool {
        self.word
            .compare_exchange_weak(current, new, order::CAS_OK, order::CAS_ERR)
            .is_ok()
    }

    pub(crate) fn set_quota(&self, quota: &Quota) -> Result<(), ConfigError> {
        self.config.requota::<A>(quota)
    }

    /// Gives back `n` units of an admission `prev -> next`: restores `prev` exactly
    /// if nothing else happened since, otherwise applies [`Algorithm::give_back`].
    pub(crate) fn give_back(&self, n: u64, prev: u64, next: u64, now: impl Fn() -> u64) {
        if self
            .word
            .compare_exchange(next, prev, order::CAS_OK, order::CAS_ERR)
            .is_ok()
        {
            return;
        }
        // Read the time only now, after the exact undo failed: every update that
        // beat us read its time earlier, which is what give_back's bound needs.
        let now = now();
        let mut cur = self.word.load(order::LOAD);
        loop {
            let p = self.params();
            let back = A::give_back(&p, cur, n, prev, next, now);
            if back == cur {
                return;
            }
            match self
                .word
                .compare_exchange_weak(cur, back, order::CAS_OK, order::CAS_ERR)
            {
                Ok(_) => return,
                Err(actual) => cur = actual,
            }
        }
    }
}

/// A rate limiter: one algorithm's state word, its parameters and a clock.
///
/// Use the aliases ([`crate::TokenBucket`], [`crate::LeakyBucket`],
/// [`crate::FixedWindow`], [`crate::SlidingWindow`]) to name one. `C` is the clock
/// for the calls without `_at`; with `C = ()` only the `_at` calls exist.
///
/// ```
/// use sluicegate::{ManualClock, Quota, TokenBucket};
/// let tb = TokenBucket::with_clock(Quota::per_second(1), ManualClock::new(0)).unwrap();
/// assert!(tb.check().allowed);
/// assert!(!tb.check().allowed);
/// tb.clock().advance(1_000_000_000);
/// assert!(tb.check().allowed);
/// ```
#[derive(Debug)]
pub struct Limiter<A, C> {
    pub(crate) core: Core<A>,
    clock: C,
}

impl<A: Algorithm, C> Limiter<A, C> {
    #[cfg(not(loom))]
    pub(crate) const fn from_parts(words: [u64; PARAM_WORDS], clock: C) -> Self {
        Self {
            core: Core::from_words(words),
            clock,
        }
    }

    #[cfg(loom)]
    pub(crate) fn from_parts(words: [u64; PARAM_WORDS], clock: C) -> Self {
        Self {
            core: Core::from_words(words),
            clock,
        }
    }

    /// Builds a limiter from validated parameters (see [`Algorithm::params`]).
    ///
    /// ```
    /// use sluicegate::{Algorithm, FixedWindow, Quota, Fixed};
    /// let p = Fixed::params(&Quota::per_second(5)).unwrap();
    /// let w = FixedWindow::from_params(p, ());
    /// assert_eq!(w.check_at(0).remaining, 4);
    /// ```
    pub fn from_params(params: A::Params, clock: C) -> Self {
        Self {
            core: Core::new(&params),
            clock,
        }
    }

    /// Admits one unit at `now` if the quota allows, and charges it.
    ///
    /// ```
    /// # use sluicegate::{Quota, TokenBucket};
    /// let tb = TokenBucket::with_clock(Quota::per_second(1), ()).unwrap();
    /// assert!(tb.check_at(0).allowed);
    /// assert!(!tb.check_at(1).allowed);
    /// ```
    #[inline]
    pub fn check_at(&self, now: u64) -> Decision {
        match self.core.run(now, 1, true) {
            Ok((step, _)) => step.decision,
            // Every algorithm's capacity is at least 1 (validated), so a cost of 1
            // always fits; a denial is the conservative answer if it ever did not.
            Err(e) => over_capacity(e),
        }
    }

    /// Admits `n` units at `now` all-or-nothing. `n = 0` is a peek.
    ///
    /// ```
    /// # use sluicegate::{Quota, TokenBucket};
    /// let tb = TokenBucket::with_clock(Quota::per_second(10), ()).unwrap();
    /// assert_eq!(tb.check_n_at(7, 0).unwrap().remaining, 3);
    /// assert!(!tb.check_n_at(4, 0).unwrap().allowed); // nothing charged
    /// assert!(tb.check_n_at(3, 0).unwrap().allowed);
    /// assert!(tb.check_n_at(11, 0).is_err()); // can never succeed
    /// ```
    #[inline]
    pub fn check_n_at(&self, n: u64, now: u64) -> Result<Decision, InsufficientCapacity> {
        self.core.run(now, n, true).map(|(s, _)| s.decision)
    }

    /// What [`Self::check_n_at`] would answer, without charging anything.
    ///
    /// ```
    /// # use sluicegate::{Quota, TokenBucket};
    /// let tb = TokenBucket::with_clock(Quota::per_second(10), ()).unwrap();
    /// assert!(tb.peek_n_at(10, 0).unwrap().allowed);
    /// assert_eq!(tb.peek_n_at(10, 0).unwrap().remaining, 0); // would leave 0
    /// assert_eq!(tb.check_at(0).remaining, 9); // the peek took nothing
    /// ```
    #[inline]
    pub fn peek_n_at(&self, n: u64, now: u64) -> Result<Decision, InsufficientCapacity> {
        self.core.run(now, n, false).map(|(s, _)| s.decision)
    }

    /// The current state at `now`: the answer a cost-1 request would get, without
    /// charging it.
    ///
    /// ```
    /// # use sluicegate::{Quota, FixedWindow};
    /// let w = FixedWindow::with_clock(Quota::per_second(3), ()).unwrap();
    /// w.check_at(0);
    /// assert_eq!(w.peek_at(0).remaining, 1); // one more would leave 1
    /// ```
    #[inline]
    pub fn peek_at(&self, now: u64) -> Decision {
        match self.peek_n_at(1, now) {
            Ok(d) => d,
            Err(e) => over_capacity(e),
        }
    }

    /// Changes the quota of a live limiter; the state carries over (each
    /// algorithm's docs give the rule). Checks running at the same time are decided
    /// under the old or the new quota.
    ///
    /// ```
    /// # use sluicegate::{Quota, TokenBucket};
    /// let tb = TokenBucket::with_clock(Quota::per_second(1), ()).unwrap();
    /// assert!(tb.check_at(0).allowed);
    /// assert!(!tb.check_at(0).allowed);
    /// tb.set_quota(&Quota::per_second(1).burst(3)).unwrap();
    /// assert!(tb.check_at(0).allowed); // the bigger bucket has room now
    /// assert!(tb.set_quota(&Quota::per_second(0)).is_err()); // and stays as it was
    /// ```
    pub fn set_quota(&self, quota: &Quota) -> Result<(), ConfigError> {
        self.core.set_quota(quota)
    }

    /// The current parameters.
    ///
    /// ```
    /// # use sluicegate::{Quota, TokenBucket};
    /// let tb = TokenBucket::with_clock(Quota::per_second(4), ()).unwrap();
    /// assert_eq!(tb.params().burst(), 4);
    /// ```
    pub fn params(&self) -> A::Params {
        self.core.params()
    }

    /// The most units admitted at once (the burst or limit).
    ///
    /// ```
    /// # use sluicegate::{Quota, SlidingWindow};
    /// let w = SlidingWindow::with_clock(Quota::per_minute(60), ()).unwrap();
    /// assert_eq!(w.capacity(), 60);
    /// ```
    pub fn capacity(&self) -> u64 {
        A::capacity(&self.params())
    }

    /// Forgets all consumption: the limiter is fresh again.
    ///
    /// ```
    /// # use sluicegate::{Quota, TokenBucket};
    /// let tb = TokenBucket::with_clock(Quota::per_second(1), ()).unwrap();
    /// tb.check_at(0);
    /// tb.reset();
    /// assert!(tb.check_at(0).allowed);
    /// ```
    pub fn reset(&self) {
        self.core.word.store(0, Ordering::Release);
    }

    /// The raw state word, for diagnostics and tests.
    ///
    /// ```
    /// # use sluicegate::{Quota, TokenBucket};
    /// let tb = TokenBucket::with_clock(Quota::per_second(1), ()).unwrap();
    /// assert_eq!(tb.state_word(), 0);
    /// ```
    pub fn state_word(&self) -> u64 {
        self.core.word.load(order::LOAD)
    }

    /// The clock.
    ///
    /// ```
    /// # use sluicegate::{Clock, ManualClock, Quota, TokenBucket};
    /// let tb = TokenBucket::with_clock(Quota::per_second(1), ManualClock::new(7)).unwrap();
    /// assert_eq!(tb.clock().now(), 7);
    /// ```
    pub fn clock(&self) -> &C {
        &self.clock
    }
}

impl<A: Algorithm, C: Clock> Limiter<A, C> {
    /// [`Self::check_at`] at the clock's time.
    ///
    /// ```
    /// # use sluicegate::{Quota, TokenBucket};
    /// let tb = TokenBucket::new(Quota::per_second(100)).unwrap();
    /// assert!(tb.check().allowed);
    /// ```
    #[inline]
    pub fn check(&self) -> Decision {
        self.check_at(self.clock.now())
    }

    /// [`Self::check_n_at`] at the clock's time.
    ///
    /// ```
    /// # use sluicegate::{Quota, TokenBucket};
    /// let tb = TokenBucket::new(Quota::per_second(100)).unwrap();
    /// assert!(tb.check_n(50).unwrap().allowed);
    /// ```
    #[inline]
    pub fn check_n(&self, n: u64) -> Result<Decision, InsufficientCapacity> {
        self.check_n_at(n, self.clock.now())
    }

    /// [`Self::peek_at`] at the clock's time.
    ///
    /// ```
    /// # use sluicegate::{Quota, TokenBucket};
    /// let tb = TokenBucket::new(Quota::per_second(100)).unwrap();
    /// assert_eq!(tb.peek().remaining, 99);
    /// ```
    #[inline]
    pub fn peek(&self) -> Decision {
        self.peek_at(self.clock.now())
    }

    /// [`Self::peek_n_at`] at the clock's time.
    ///
    /// ```
    /// # use sluicegate::{Quota, TokenBucket};
    /// let tb = TokenBucket::new(Quota::per_second(100)).unwrap();
    /// assert!(tb.peek_n(100).unwrap().allowed);
    /// ```
    #[inline]
    pub fn peek_n(&self, n: u64) -> Result<Decision, InsufficientCapacity> {
        self.peek_n_at(n, self.clock.now())
    }
}

#[cold]
fn over_capacity(e: InsufficientCapacity) -> Decision {
    Decision::never(e.capacity)
}

/// Generates an algorithm's constructors: `with_clock` (a `const fn`, so a limiter
/// can be a `static`), and `new` with the default clock under `std`.
macro_rules! constructors {
    ($alg:ty, $params:path, $alias:literal) => {
        impl<C> $crate::limiter::Limiter<$alg, C> {
            #[doc = concat!("A ", $alias, " for `quota`, reading time from `clock`.")]
            ///
            /// ```
            /// # use sluicegate::*;
            #[doc = concat!("let l = ", $alias, "::with_clock(Quota::per_second(5), ManualClock::new(0)).unwrap();")]
            /// assert_eq!(l.capacity(), 5);
            #[doc = concat!("assert!(", $alias, "::with_clock(Quota::per_second(0), ()).is_err());")]
            /// ```
            pub fn with_clock(quota: $crate::Quota, clock: C) -> Result<Self, $crate::ConfigError> {
                $params(&quota).map(|p| Self::from_parts(p.words(), clock))
            }
        }

        #[cfg(not(loom))]
        impl<C: Copy> $crate::limiter::Limiter<$alg, C> {
            #[doc = concat!("[`Self::with_clock`] as a `const fn`, so a ", $alias, " can be a `static`.")]
            ///
            /// The clock must be `Copy` (a zero-sized type over a hardware timer, `()`
            /// for `_at` calls only, or a `&'static` reference).
            ///
            /// ```
            /// # use sluicegate::*;
            #[doc = concat!("static LIMITER: ", $alias, "<()> = match ", $alias, "::with_clock_const(Quota::per_second(5), ()) {")]
            ///     Ok(l) => l,
            ///     Err(_) => panic!("invalid quota"), // a compile-time error in a static
            /// };
            /// assert!(LIMITER.check_at(0).allowed);
            /// ```
            pub const fn with_clock_const(
                quota: $crate::Quota,
                clock: C,
            ) -> Result<Self, $crate::ConfigError> {
                match $params(&quota) {
                    Ok(p) => Ok(Self::from_parts(p.words(), clock)),
                    Err(e) => Err(e),
                }
            }
        }

        #[cfg(feature = "std")]
        impl $crate::limiter::Limiter<$alg, $crate::clock::DefaultClock> {
            #[doc = concat!("A ", $alias, " for `quota` on the default clock ([`crate::QuantaClock`]).")]
            ///
            /// ```
            /// # use sluicegate::*;
            #[doc = concat!("let l = ", $alias, "::new(Quota::per_second(5)).unwrap();")]
            /// assert!(l.check().allowed);
            /// ```
            pub fn new(quota: $crate::Quota) -> Result<Self, $crate::ConfigError> {
                Self::with_clock(quota, Default::default())
            }
        }
    };
}
pub(crate) use constructors;
