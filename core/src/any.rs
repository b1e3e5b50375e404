//! [`AnyLimiter`]: one handle for a limiter of any [`Kind`] built from a [`Spec`].
//!
//! A binding (the C ABI, Python, a policy engine) holds this one type instead of
//! an enum of its own: one limiter, a compound of up to [`Spec::MAX_LIMITS`] limits
//! of one kind checked all-or-nothing (the [`crate::Compound`] mechanism over a
//! slice), or a token bucket split over up to [`Spec::MAX_STRIPES`] stripes (the
//! [`crate::Striped`] mechanism). Every check answers an [`Outcome`]: the decision
//! and, for the shaper, how long the admitted request must wait.
//!
//! The algorithm behind the handle is reached through one virtual call; the
//! decision itself is the algorithm's own `decide` in the shared compare-and-swap
//! loop, exactly as in the concrete limiter.

use alloc::boxed::Box;

use crate::clock::Clock;
use crate::decision::Decision;
use crate::engine::Engine;
use crate::error::InsufficientCapacity;
use crate::kind::Kind;
use crate::quota::Quota;
use crate::receipt::Receipt;
use crate::spec::{Spec, SpecError};
use crate::sync::{AtomicU64, Ordering, spin_loop};

/// What a check answered: the decision, and the shaper's wait.
///
/// ```
/// use sluicegate::{AnyLimiter, Kind, Spec};
/// let spec = Spec::parse(Kind::Shaper, "10/s burst 1")?.with_max_delay_ns(1_000_000_000)?;
/// let l = AnyLimiter::with_clock(&spec, ())?;
/// assert_eq!(l.check_n_at(1, 0)?.delay_ns, 0);
/// let second = l.check_n_at(1, 0)?;
/// assert!(second.decision.allowed);
/// assert_eq!(second.delay_ns, 100_000_000); // wait 100 ms, then proceed
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Outcome {
    /// The decision.
    pub decision: Decision,
    /// The shaper: nanoseconds the admitted request must wait before it runs.
    /// 0 for every other kind, for a denial and for a peek (nothing was scheduled).
    pub delay_ns: u64,
}

impl Outcome {
    pub(crate) fn plain(decision: Decision) -> Self {
        Self {
            decision,
            delay_ns: 0,
        }
    }
}

/// The current spec of a live limiter: the parts that cannot change, and the
/// quotas in a seqlock (written only by `set_spec`, which it also serialises).
#[derive(Debug)]
struct SpecCell {
    base: Spec,
    seq: AtomicU64,
    /// `(amount, period_ns, burst)` of each quota, then the capacity.
    words: [AtomicU64; SPEC_WORDS],
}

const SPEC_WORDS: usize = 3 * Spec::MAX_LIMITS + 1;

impl SpecCell {
    fn new(spec: &Spec) -> Self {
        let cell = Self {
            base: *spec,
            seq: AtomicU64::new(0),
            words: core::array::from_fn(|_| AtomicU64::new(0)),
        };
        cell.store(spec);
        cell
    }

    fn store(&self, spec: &Spec) {
        for (i, q) in spec.quotas().iter().enumerate() {
            self.words[3 * i].store(q.amount(), Ordering::Relaxed);
            self.words[3 * i + 1].store(q.period_ns(), Ordering::Relaxed);
            self.words[3 * i + 2].store(q.burst_size(), Ordering::Relaxed);
        }
        self.words[SPEC_WORDS - 1].store(spec.capacity(), Ordering::Relaxed);
    }

    fn load(&self) -> Spec {
        loop {
            let s1 = self.seq.load(Ordering::Acquire);
            if s1 & 1 == 0 {
                let spec = self.read();
                crate::sync::fence(Ordering::Acquire);
                if self.seq.load(Ordering::Relaxed) == s1 {
                    return spec;
                }
            }
            spin_loop();
        }
    }

    /// The spec in the words (consistent when no writer overlaps).
    fn read(&self) -> Spec {
        let w = |i: usize| self.words[i].load(Ordering::Relaxed);
        let quotas: [Quota; Spec::MAX_LIMITS] =
            core::array::from_fn(|i| Quota::from_nanos(w(3 * i), w(3 * i + 1)).burst(w(3 * i + 2)));
        self.base.with_checked_quotas(&quotas, w(SPEC_WORDS - 1))
    }

    /// As the one writer: computes the new spec from the current one with
    /// `next`, applies it to the limiter with `apply`, and records it if both
    /// succeed.
    fn update(
        &self,
        next: impl FnOnce(Spec) -> Result<Spec, SpecError>,
        apply: impl FnOnce(&Spec, &Spec) -> Result<(), SpecError>,
    ) -> Result<(), SpecError> {
        crate::limiter::seq_write(&self.seq, || {
            let current = self.read();
            next(current).and_then(|new| {
                apply(&current, &new)?;
                self.store(&new);
                Ok(())
            })
        })
    }
}

/// A limiter of any [`Kind`] built from a [`Spec`]: one limit, a compound of
/// several limits of one kind admitted all-or-nothing, or a striped token bucket.
///
/// `C` is the clock of the calls without `_at` (`()`: only the `_at` calls).
///
/// ```
/// use sluicegate::{AnyLimiter, Kind, Spec};
/// let spec = Spec::parse(Kind::FixedWindow, "2/second; 3/minute")?;
/// let l = AnyLimiter::with_clock(&spec, ())?;
/// assert!(l.check_n_at(2, 0)?.decision.allowed);
/// assert!(!l.check_n_at(1, 0)?.decision.allowed); // the per-second limit
/// let d = l.check_n_at(2, 1_000_000_000)?.decision;
/// assert!(!d.allowed && d.limit == 3); // the per-minute limit binds, nothing charged
/// assert!(l.check_n_at(1, 1_000_000_000)?.decision.allowed);
/// assert!(l.check_n_at(3, 0).is_err()); // more than 2 at once can never pass
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct AnyLimiter<C> {
    engine: Box<dyn Engine>,
    spec: SpecCell,
    clock: C,
}

impl<C> AnyLimiter<C> {
    /// The limiter `spec` describes, reading time from `clock`.
    ///
    /// ```
    /// use sluicegate::{AnyLimiter, Kind, Spec};
    /// for kind in Kind::ALL {
    ///     let l = AnyLimiter::with_clock(&Spec::parse(kind, "5/s")?, ())?;
    ///     assert_eq!(l.kind(), kind);
    ///     assert_eq!(l.check_n_at(5, 0)?.decision.remaining, 0);
    /// }
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn with_clock(spec: &Spec, clock: C) -> Result<Self, SpecError> {
        Ok(Self {
            engine: spec.kind().dispatch(crate::engine::Build(spec))?,
            spec: SpecCell::new(spec),
            clock,
        })
    }

    /// A single limiter `spec` (one quota) whose state word lives in `pool`'s
    /// registry: for a pool in memory several processes map
    /// ([`crate::keyed::Pool::in_memory`]), every process that registers the same
    /// spec checks the same word, with the same one CAS as an in-process limiter.
    /// Its parameters there are fixed: [`Self::set_spec`] is refused
    /// ([`crate::ConfigError::Immutable`] `"shared"`). The sliding log and
    /// several quotas are refused.
    ///
    /// ```
    /// use sluicegate::keyed::Pool;
    /// use sluicegate::{AnyLimiter, Kind, Spec, SpecError};
    /// let pool = Pool::with_memory(1 << 16)?;
    /// let spec = Spec::parse(Kind::TokenBucket, "2/minute")?;
    /// let a = AnyLimiter::in_pool(&pool, &spec, ())?;
    /// assert!(a.check_n_at(2, 0)?.decision.allowed);
    /// assert!(!a.check_n_at(1, 0)?.decision.allowed);
    /// let log = Spec::parse(Kind::SlidingLog, "2/minute")?;
    /// assert!(matches!(AnyLimiter::in_pool(&pool, &log, ()), Err(SpecError::Unsupported { .. })));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[cfg(feature = "std")]
    pub fn in_pool(pool: &crate::keyed::Pool, spec: &Spec, clock: C) -> Result<Self, SpecError> {
        Ok(Self {
            engine: spec
                .kind()
                .dispatch(crate::keyed::BuildPoolWord { pool, spec })?,
            spec: SpecCell::new(spec),
            clock,
        })
    }

    /// A token bucket `spec` split over `stripes` cache-padded stripes
    /// (`1 ..= min(Spec::MAX_STRIPES, burst)`), for one limit many threads hit at
    /// once: each thread checks its own stripe and borrows from the others, so the
    /// whole quota is exact (see [`crate::Striped`]).
    ///
    /// ```
    /// use sluicegate::{AnyLimiter, Kind, Spec, SpecError};
    /// let spec = Spec::parse(Kind::TokenBucket, "1000/s burst 8")?;
    /// let hot = AnyLimiter::striped(&spec, 4, ())?;
    /// assert!(hot.check_n_at(8, 0)?.decision.allowed); // gathered from every stripe
    /// assert!(!hot.check_n_at(1, 0)?.decision.allowed);
    /// assert_eq!(AnyLimiter::striped(&spec, 65, ()).unwrap_err(), SpecError::Stripes { max: 64 });
    /// let window = Spec::parse(Kind::FixedWindow, "10/s")?;
    /// assert!(matches!(AnyLimiter::striped(&window, 2, ()), Err(SpecError::Unsupported { .. })));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn striped(spec: &Spec, stripes: usize, clock: C) -> Result<Self, SpecError> {
        if !spec.kind().caps().striped {
            return Err(spec.unsupported("stripes"));
        }
        let [quota] = spec.quotas() else {
            return Err(spec.unsupported("stripes over several limits"));
        };
        if stripes == 0 || stripes > Spec::MAX_STRIPES {
            return Err(SpecError::Stripes {
                max: Spec::MAX_STRIPES,
            });
        }
        Ok(Self {
            engine: crate::engine::stripes(quota, stripes)?,
            spec: SpecCell::new(spec),
            clock,
        })
    }

    /// Admits `n` units at `now` all-or-nothing (every limit of a compound, or
    /// none); `n = 0` is a peek. An `n` above [`Spec::capacity`] can never succeed
    /// and is an error, not a denial.
    ///
    /// ```
    /// # use sluicegate::{AnyLimiter, Kind, Spec};
    /// let l = AnyLimiter::with_clock(&Spec::parse(Kind::TokenBucket, "10/s")?, ())?;
    /// assert_eq!(l.check_n_at(7, 0)?.decision.remaining, 3);
    /// assert!(!l.check_n_at(4, 0)?.decision.allowed);
    /// assert!(l.check_n_at(11, 0).is_err());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[inline]
    pub fn check_n_at(&self, n: u64, now: u64) -> Result<Outcome, InsufficientCapacity> {
        self.engine.run(None, n, now, true, &|| now)
    }

    /// What [`Self::check_n_at`] would answer, charging nothing (and scheduling
    /// nothing: the shaper's `delay_ns` is 0).
    ///
    /// ```
    /// # use sluicegate::{AnyLimiter, Kind, Spec};
    /// let l = AnyLimiter::with_clock(&Spec::parse(Kind::SlidingLog, "3/s")?, ())?;
    /// assert_eq!(l.peek_n_at(2, 0)?.decision.remaining, 1);
    /// assert_eq!(l.check_n_at(3, 0)?.decision.remaining, 0); // the peek took nothing
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[inline]
    pub fn peek_n_at(&self, n: u64, now: u64) -> Result<Outcome, InsufficientCapacity> {
        self.engine.run(None, n, now, false, &|| now)
    }

    /// [`Self::check_n_at`], writing into `receipt` what it took, to give back
    /// with [`Self::refund`] (the receipt is overwritten: empty for a denial, a
    /// cost of 0, or a limiter that cannot give back, see [`Self::can_refund`]).
    /// The receipt is the caller's, so a hot path can reuse one.
    ///
    /// ```
    /// # use sluicegate::{AnyLimiter, Kind, Receipt, Spec};
    /// let l = AnyLimiter::with_clock(&Spec::parse(Kind::TokenBucket, "2/s; 3/min")?, ())?;
    /// let mut r = Receipt::empty();
    /// assert!(l.check_n_at_receipt(2, 0, &mut r)?.decision.allowed);
    /// assert_eq!(r.units(), 2);
    /// l.refund(&mut r, 0); // e.g. another limit of the request denied it
    /// assert!(r.is_empty());
    /// assert_eq!(l.peek_n_at(1, 0)?.decision.remaining, 1); // 2/s full again
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[inline]
    pub fn check_n_at_receipt(
        &self,
        n: u64,
        now: u64,
        receipt: &mut Receipt,
    ) -> Result<Outcome, InsufficientCapacity> {
        receipt.len = 0;
        let (o, len) = self.engine.charge(n, now, &mut receipt.taken)?;
        if len > 0 {
            receipt.owner = self.owner();
            receipt.n = n;
            receipt.len = len as u8;
        }
        Ok(o)
    }

    /// Gives back what the admission recorded in `receipt` took, never more (see
    /// [`Receipt`]), and empties it; a receipt of another handle gives nothing
    /// back (and stays as it is). `now` is read only when other admissions
    /// changed the state since.
    ///
    /// ```
    /// # use sluicegate::{AnyLimiter, Kind, Receipt, Spec};
    /// let l = AnyLimiter::with_clock(&Spec::parse(Kind::SlidingWindow, "4/s")?, ())?;
    /// let other = AnyLimiter::with_clock(&Spec::parse(Kind::SlidingWindow, "4/s")?, ())?;
    /// let mut mine = Receipt::empty();
    /// l.check_n_at_receipt(3, 0, &mut mine)?;
    /// assert!(l.check_n_at(1, 0)?.decision.allowed); // someone else's unit
    /// other.refund(&mut mine, 0); // not its receipt: nothing
    /// assert!(!l.peek_n_at(1, 0)?.decision.allowed);
    /// l.refund(&mut mine, 0);
    /// l.refund(&mut mine, 0); // spent: nothing more
    /// assert_eq!(l.peek_n_at(0, 0)?.decision.remaining, 3);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn refund(&self, receipt: &mut Receipt, now: u64) {
        if let Some(taken) = receipt.taken_by(self.owner()) {
            self.engine.give_back(receipt.n, taken, now);
            receipt.len = 0;
        }
    }

    /// Whether admissions can be given back ([`Self::refund`]): single limits
    /// and compounds of every kind but the sliding log; not stripes.
    ///
    /// ```
    /// # use sluicegate::{AnyLimiter, Kind, Spec};
    /// let tb = Spec::parse(Kind::TokenBucket, "8/s")?;
    /// assert!(AnyLimiter::with_clock(&tb, ())?.can_refund());
    /// assert!(!AnyLimiter::striped(&tb, 2, ())?.can_refund());
    /// assert!(!AnyLimiter::with_clock(&Spec::parse(Kind::SlidingLog, "8/s")?, ())?.can_refund());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn can_refund(&self) -> bool {
        self.engine.can_refund()
    }

    /// Undoes the admission recorded in `receipt` exactly, only if no other
    /// admission changed the limit since, and says whether it did (an undo spends
    /// the receipt). The shaper's cancel: a later reservation was
    /// promised a start time after this one, so only the latest can be taken back
    /// (a [`Self::refund`] gives back what it can at any time instead). A receipt
    /// of several limits (a compound), of another handle or of nothing is never
    /// undone.
    ///
    /// ```
    /// use sluicegate::{AnyLimiter, Kind, Receipt, Spec};
    /// let s = AnyLimiter::with_clock(&Spec::parse(Kind::Shaper, "1/s")?.with_max_delay_ns(5_000_000_000)?, ())?;
    /// let (mut a, mut b) = (Receipt::empty(), Receipt::empty());
    /// s.check_n_at_receipt(1, 0, &mut a)?;
    /// assert_eq!(s.check_n_at_receipt(1, 0, &mut b)?.delay_ns, 1_000_000_000);
    /// assert!(!s.undo(&mut a)); // b's start assumed a was scheduled
    /// assert!(s.undo(&mut b));
    /// assert!(!s.undo(&mut b)); // spent
    /// let mut c = Receipt::empty();
    /// assert_eq!(s.check_n_at_receipt(1, 0, &mut c)?.delay_ns, 1_000_000_000); // b's slot
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn undo(&self, receipt: &mut Receipt) -> bool {
        let undone = receipt
            .taken_by(self.owner())
            .is_some_and(|taken| self.engine.undo(taken));
        if undone {
            receipt.len = 0;
        }
        undone
    }

    /// This handle's identity in receipts.
    fn owner(&self) -> usize {
        &*self.engine as *const dyn Engine as *const u8 as usize
    }

    /// [`Self::check_n_at`] starting from stripe `stripe` (any number, modulo the
    /// stripe count) of a striped limiter, for callers that number their own
    /// workers; other limiters ignore `stripe`.
    ///
    /// ```
    /// # use sluicegate::{AnyLimiter, Kind, Spec};
    /// let spec = Spec::parse(Kind::TokenBucket, "4/s")?;
    /// let l = AnyLimiter::striped(&spec, 2, ())?;
    /// assert!(l.check_n_at_stripe(0, 3, 0)?.decision.allowed); // 2 + 1 borrowed
    /// assert!(!l.check_n_at_stripe(1, 2, 0)?.decision.allowed);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[inline]
    pub fn check_n_at_stripe(
        &self,
        stripe: usize,
        n: u64,
        now: u64,
    ) -> Result<Outcome, InsufficientCapacity> {
        self.engine.run(Some(stripe), n, now, true, &|| now)
    }

    /// Changes the quotas of a live limiter; the state carries over (each
    /// algorithm's docs give the rule) and concurrent checks see the old or the
    /// new quota of each limit. The kind, the number of limits, the shaper's max
    /// delay, a window's length and the log's capacity cannot change
    /// ([`SpecError::Immutable`], or [`SpecError::Config`] naming the field); a
    /// rejected spec changes nothing.
    ///
    /// ```
    /// # use sluicegate::{AnyLimiter, Kind, Spec, SpecError};
    /// let l = AnyLimiter::with_clock(&Spec::parse(Kind::TokenBucket, "1/s")?, ())?;
    /// assert!(l.check_n_at(1, 0)?.decision.allowed);
    /// l.set_spec(&Spec::parse(Kind::TokenBucket, "1/s burst 3")?)?;
    /// assert!(l.check_n_at(2, 0)?.decision.allowed); // the bigger bucket has room now
    /// let other = Spec::parse(Kind::FixedWindow, "1/s")?;
    /// assert_eq!(l.set_spec(&other), Err(SpecError::Immutable { field: "kind" }));
    /// assert_eq!(l.spec(), Spec::parse(Kind::TokenBucket, "1/s burst 3")?);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn set_spec(&self, spec: &Spec) -> Result<(), SpecError> {
        self.spec.base.check_live_change(spec)?;
        self.spec
            .update(|_| Ok(*spec), |old, new| self.engine.set_spec(old, new))
    }

    /// Changes quota `index` alone (0 for a single limit), keeping the others and
    /// the kind's parameters; as [`Self::set_spec`] otherwise. Concurrent changes
    /// of different quotas are all kept.
    ///
    /// ```
    /// # use sluicegate::{AnyLimiter, ConfigError, Kind, Quota, Spec, SpecError};
    /// let l = AnyLimiter::with_clock(&Spec::parse(Kind::TokenBucket, "1/s; 5/m")?, ())?;
    /// l.set_quota(0, &Quota::per_second(5))?;
    /// assert_eq!(l.spec(), Spec::parse(Kind::TokenBucket, "5/s; 5/m")?);
    /// assert_eq!(l.check_n_at(5, 0)?.decision.remaining, 0);
    /// let e = l.set_quota(2, &Quota::per_second(5)).unwrap_err();
    /// assert_eq!(e, SpecError::Config { index: 2, error: ConfigError::TooLarge { field: "index", max: 1 } });
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn set_quota(&self, index: usize, quota: &Quota) -> Result<(), SpecError> {
        self.spec.update(
            |current| {
                let mut quotas = [*quota; Spec::MAX_LIMITS];
                let n = current.quotas().len();
                if index >= n {
                    return Err(SpecError::Config {
                        index,
                        error: crate::error::ConfigError::TooLarge {
                            field: "index",
                            max: n.saturating_sub(1) as u64,
                        },
                    });
                }
                quotas[..n].copy_from_slice(current.quotas());
                quotas[index] = *quota;
                Spec::new(current.kind(), &quotas[..n])?
                    .with_max_delay_ns(current.max_delay_ns())?
                    .with_log_capacity(current.log_capacity_set().unwrap_or(0))
            },
            |old, new| self.engine.set_spec(old, new),
        )
    }

    /// The current spec (as built, with the quotas of the last `set_spec`).
    ///
    /// ```
    /// # use sluicegate::{AnyLimiter, Kind, Spec};
    /// let spec = Spec::parse(Kind::SlidingWindow, "5/s; 100/h")?;
    /// assert_eq!(AnyLimiter::with_clock(&spec, ())?.spec(), spec);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn spec(&self) -> Spec {
        self.spec.load()
    }

    /// The algorithm.
    ///
    /// ```
    /// # use sluicegate::{AnyLimiter, Kind, Spec};
    /// let l = AnyLimiter::with_clock(&Spec::parse(Kind::Shaper, "5/s")?, ())?;
    /// assert_eq!(l.kind(), Kind::Shaper);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn kind(&self) -> Kind {
        self.spec.base.kind()
    }

    /// Forgets all consumption of a single limit (any kind but the log) or a
    /// striped one; a sliding log or several limits cannot be reset at once
    /// ([`SpecError::Unsupported`]).
    ///
    /// ```
    /// # use sluicegate::{AnyLimiter, Kind, Spec};
    /// let l = AnyLimiter::with_clock(&Spec::parse(Kind::FixedWindow, "1/s")?, ())?;
    /// l.check_n_at(1, 0)?;
    /// l.reset()?;
    /// assert!(l.check_n_at(1, 0)?.decision.allowed);
    /// let log = AnyLimiter::with_clock(&Spec::parse(Kind::SlidingLog, "1/s")?, ())?;
    /// assert!(log.reset().is_err());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn reset(&self) -> Result<(), SpecError> {
        self.engine.reset().map_err(|what| SpecError::Unsupported {
            kind: self.kind(),
            what,
        })
    }

    /// The clock.
    ///
    /// ```
    /// # use sluicegate::{AnyLimiter, Clock, Kind, ManualClock, Spec};
    /// let l = AnyLimiter::with_clock(&Spec::parse(Kind::Shaper, "5/s")?, ManualClock::new(3))?;
    /// assert_eq!(l.clock().now(), 3);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn clock(&self) -> &C {
        &self.clock
    }
}

impl<C: Clock> AnyLimiter<C> {
    /// [`Self::check_n_at`] at the clock's time; a compound's give-back reads the
    /// clock afresh (see [`crate::compound`]).
    ///
    /// ```
    /// # use sluicegate::{AnyLimiter, Kind, ManualClock, Spec};
    /// let l = AnyLimiter::with_clock(&Spec::parse(Kind::TokenBucket, "1/s")?, ManualClock::new(0))?;
    /// assert!(l.check_n(1)?.decision.allowed);
    /// assert!(!l.check_n(1)?.decision.allowed);
    /// l.clock().advance(1_000_000_000);
    /// assert!(l.check_n(1)?.decision.allowed);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[inline]
    pub fn check_n(&self, n: u64) -> Result<Outcome, InsufficientCapacity> {
        self.engine
            .run(None, n, self.clock.now(), true, &|| self.clock.now())
    }

    /// [`Self::peek_n_at`] at the clock's time.
    ///
    /// ```
    /// # use sluicegate::{AnyLimiter, Kind, ManualClock, Spec};
    /// let l = AnyLimiter::with_clock(&Spec::parse(Kind::FixedWindow, "2/s")?, ManualClock::new(0))?;
    /// assert_eq!(l.peek_n(1)?.decision.remaining, 1);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[inline]
    pub fn peek_n(&self, n: u64) -> Result<Outcome, InsufficientCapacity> {
        let now = self.clock.now();
        self.engine.run(None, n, now, false, &|| now)
    }
}
