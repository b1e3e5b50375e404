//! [`AnyKeyed`]: a keyed limiter of any keyed [`Kind`], built from a [`Spec`] —
//! the one handle a binding holds for per-key limiting.

use alloc::boxed::Box;
use core::fmt;
use core::hash::{BuildHasher, Hash};
use std::sync::Mutex;

use super::{random_hasher, DefaultHashBuilder, FullPolicy, Group, Keyed, KeyedStats};
use crate::any::Outcome;
use crate::clock::Clock;
use crate::compound::merge;
use crate::error::{ConfigError, InsufficientCapacity};
use crate::kind::Kind;
use crate::limiter::Algorithm;
use crate::shaper::{ShaperParams, Shaping};
use crate::spec::{Spec, SpecError};

/// One table per limit of the spec, all hashing with the table's one hasher.
type Table<A> = Keyed<A, (), Box<[Group]>, DefaultHashBuilder>;

/// The tables behind an [`AnyKeyed`], generic over the algorithm.
trait Engine: Send + Sync + fmt::Debug {
    fn run(
        &self,
        h: u64,
        n: u64,
        now: u64,
        consume: bool,
        refund_now: &dyn Fn() -> u64,
    ) -> Result<Outcome, InsufficientCapacity>;
    fn set_spec(&self, spec: &Spec) -> Result<(), SpecError>;
    fn set_policy(&mut self, policy: FullPolicy);
    fn stats(&self) -> KeyedStats;
    fn len_at(&self, now: u64) -> usize;
    fn capacity(&self) -> usize;
    fn clear(&self);
}

#[derive(Debug)]
struct Tables<A>(Box<[Table<A>]>);

impl<A: Algorithm + fmt::Debug + 'static> Engine for Tables<A>
where
    Table<A>: Send + Sync,
{
    #[inline]
    fn run(
        &self,
        h: u64,
        n: u64,
        now: u64,
        consume: bool,
        refund_now: &dyn Fn() -> u64,
    ) -> Result<Outcome, InsufficientCapacity> {
        if let [one] = &*self.0 {
            let (step, _) = one.run(h, n, now, consume)?;
            return Ok(Outcome {
                decision: step.decision,
                delay_ns: if consume && step.decision.allowed {
                    step.delay_ns
                } else {
                    0
                },
            });
        }
        // All-or-nothing per key: peek every limit, then charge them in order and
        // give back what was charged if one denies (a racing request got there).
        let mut combined = None;
        for t in self.0.iter() {
            let (step, _) = t.run(h, n, now, false)?;
            combined = Some(merge(combined, &step.decision));
        }
        let Some(peeked) = combined else {
            return Ok(Outcome::plain(crate::Decision::never(0)));
        };
        if !consume || !peeked.allowed || n == 0 {
            return Ok(Outcome::plain(peeked));
        }
        let mut taken = [(0u64, 0u64); Spec::MAX_LIMITS];
        let mut combined = None;
        for (i, t) in self.0.iter().enumerate() {
            let charged = t.run(h, n, now, true);
            match charged {
                Ok((step, prev)) if step.decision.allowed => {
                    taken[i] = (prev, step.next.unwrap_or(prev));
                    combined = Some(merge(combined, &step.decision));
                }
                other => {
                    for (earlier, &back) in self.0[..i].iter().zip(&taken[..i]) {
                        earlier.give_back(h, n, back, refund_now);
                    }
                    let (step, _) = other?;
                    return Ok(Outcome::plain(merge(combined, &step.decision)));
                }
            }
        }
        Ok(Outcome::plain(combined.unwrap_or(peeked)))
    }

    fn set_spec(&self, spec: &Spec) -> Result<(), SpecError> {
        // Every limit's own check first, so a rejected spec changes nothing.
        for (index, (t, q)) in self.0.iter().zip(spec.quotas()).enumerate() {
            A::reparams(&t.params(), q).map_err(|error| SpecError::Config { index, error })?;
        }
        for (index, (t, q)) in self.0.iter().zip(spec.quotas()).enumerate() {
            t.set_quota(q)
                .map_err(|error| SpecError::Config { index, error })?;
        }
        Ok(())
    }

    fn set_policy(&mut self, policy: FullPolicy) {
        for t in self.0.iter_mut() {
            t.policy = policy;
        }
    }

    fn stats(&self) -> KeyedStats {
        self.0
            .iter()
            .map(Keyed::stats)
            .fold(KeyedStats::default(), |a, s| KeyedStats {
                inserted: a.inserted.wrapping_add(s.inserted),
                reused: a.reused.wrapping_add(s.reused),
                evicted: a.evicted.wrapping_add(s.evicted),
                rejected: a.rejected.wrapping_add(s.rejected),
                unlimited: a.unlimited.wrapping_add(s.unlimited),
            })
    }

    fn len_at(&self, now: u64) -> usize {
        self.0.iter().map(|t| t.len_at(now)).max().unwrap_or(0)
    }

    fn capacity(&self) -> usize {
        self.0.first().map_or(0, Keyed::capacity)
    }

    fn clear(&self) {
        for t in self.0.iter() {
            t.clear();
        }
    }
}

/// The tables of a spec of a single-word algorithm `A`, one per limit.
fn tables<A: Algorithm + fmt::Debug + 'static>(
    spec: &Spec,
    capacity: usize,
    hasher: &DefaultHashBuilder,
) -> Result<Box<dyn Engine>, SpecError>
where
    Table<A>: Send + Sync,
{
    let quotas = spec.quotas();
    let mut v = alloc::vec::Vec::new();
    v.try_reserve_exact(quotas.len())
        .map_err(|_| SpecError::Alloc {
            bytes: quotas
                .len()
                .saturating_mul(core::mem::size_of::<Table<A>>()),
        })?;
    for (index, q) in quotas.iter().enumerate() {
        let t = Table::<A>::with_capacity_and_hasher(*q, capacity, hasher.clone(), ())
            .map_err(|error| spec_error(index, error))?;
        v.push(t);
    }
    Ok(Box::new(Tables(v.into_boxed_slice())))
}

/// The keyed shaper of a spec (one limit, with its max delay).
fn shaper(
    spec: &Spec,
    capacity: usize,
    hasher: &DefaultHashBuilder,
) -> Result<Box<dyn Engine>, SpecError> {
    let q = spec.quotas()[0];
    ShaperParams::new(&q, spec.max_delay_ns()).map_err(|error| spec_error(0, error))?;
    let t = Table::<Shaping>::with_capacity_and_hasher(q, capacity, hasher.clone(), ())
        .map_err(|error| spec_error(0, error))?
        .with_max_delay(spec.max_delay_ns());
    Ok(Box::new(Tables(Box::new([t]))))
}

/// An allocation failure is the spec's; anything else names the quota.
fn spec_error(index: usize, error: ConfigError) -> SpecError {
    match error {
        ConfigError::Alloc { bytes } => SpecError::Alloc { bytes },
        error => SpecError::Config { index, error },
    }
}

/// A keyed limiter of any keyed [`Kind`], from a [`Spec`]: one state per key in a
/// bounded table ([`Keyed`], with its guarantees), one table per limit of a
/// compound spec. A compound is all-or-nothing per key: a request is charged to
/// every limit or to none (a denial by one limit gives back what the others
/// took, never more than they took).
///
/// ```
/// use sluicegate::keyed::AnyKeyed;
/// use sluicegate::{Kind, Spec};
/// let spec = Spec::parse(Kind::TokenBucket, "2/second; 3/minute")?;
/// let per_ip = AnyKeyed::with_clock(&spec, 1024, ())?;
/// assert!(per_ip.check_n_at(&"10.0.0.1", 2, 0)?.decision.allowed);
/// // The second limit has 1 left, the first none: denied, nothing charged.
/// assert!(!per_ip.check_n_at(&"10.0.0.1", 1, 0)?.decision.allowed);
/// assert!(per_ip.check_n_at(&"10.0.0.1", 1, 1_000_000_000)?.decision.allowed);
/// assert!(!per_ip.check_n_at(&"10.0.0.1", 1, 2_000_000_000)?.decision.allowed); // 3/minute
/// assert!(per_ip.check_n_at(&"10.0.0.2", 2, 0)?.decision.allowed); // its own state
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct AnyKeyed<C> {
    engine: Box<dyn Engine>,
    hasher: DefaultHashBuilder,
    spec: Mutex<Spec>,
    clock: C,
}

impl<C> fmt::Debug for AnyKeyed<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AnyKeyed")
            .field("spec", &self.spec())
            .field("capacity", &self.capacity())
            .finish_non_exhaustive()
    }
}

impl<C> AnyKeyed<C> {
    /// A table of at least `capacity` keys per limit of `spec`, allocated now,
    /// fallibly ([`SpecError::Alloc`] when the memory is not there).
    ///
    /// ```
    /// use sluicegate::keyed::AnyKeyed;
    /// use sluicegate::{Kind, Spec, SpecError};
    /// let spec = Spec::parse(Kind::FixedWindow, "5/s")?;
    /// assert_eq!(AnyKeyed::with_clock(&spec, 100, ())?.capacity(), 104);
    /// assert!(matches!(AnyKeyed::with_clock(&spec, usize::MAX, ()), Err(SpecError::Alloc { .. })));
    /// let log = Spec::parse(Kind::SlidingLog, "5/s")?;
    /// assert!(matches!(AnyKeyed::with_clock(&log, 100, ()), Err(SpecError::Unsupported { .. })));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn with_clock(spec: &Spec, capacity: usize, clock: C) -> Result<Self, SpecError> {
        let kind = spec.kind();
        if !kind.caps().keyed {
            return Err(SpecError::Unsupported {
                kind,
                what: "keyed limiting",
            });
        }
        let hasher = random_hasher();
        let engine = match kind {
            Kind::TokenBucket => tables::<crate::token_bucket::Gcra>(spec, capacity, &hasher),
            Kind::LeakyBucket => tables::<crate::token_bucket::Leaky>(spec, capacity, &hasher),
            Kind::Shaper => shaper(spec, capacity, &hasher),
            Kind::FixedWindow => tables::<crate::fixed_window::Fixed>(spec, capacity, &hasher),
            Kind::SlidingWindow => {
                tables::<crate::sliding_window::Sliding>(spec, capacity, &hasher)
            }
            Kind::SlidingLog => Err(SpecError::Unsupported {
                kind,
                what: "keyed limiting",
            }),
        }?;
        Ok(Self {
            engine,
            hasher,
            spec: Mutex::new(*spec),
            clock,
        })
    }

    /// Sets the full-table policy of every table.
    ///
    /// ```
    /// use sluicegate::keyed::{AnyKeyed, FullPolicy};
    /// use sluicegate::{Kind, Spec};
    /// let t = AnyKeyed::with_clock(&Spec::parse(Kind::TokenBucket, "1/minute")?, 8, ())?
    ///     .with_policy(FullPolicy::Reject);
    /// let admitted = (0..20u32).filter(|k| t.check_n_at(k, 1, 0).unwrap().decision.allowed).count();
    /// assert_eq!(admitted, 8);
    /// assert_eq!(t.stats().rejected, 12);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[must_use]
    pub fn with_policy(mut self, policy: FullPolicy) -> Self {
        self.engine.set_policy(policy);
        self
    }

    /// Charges `n` units to `key` at `now` (all-or-nothing over every limit);
    /// `n = 0` is a peek. The outcome carries the shaper's delay.
    ///
    /// ```
    /// use sluicegate::keyed::AnyKeyed;
    /// use sluicegate::{Kind, Spec};
    /// let spec = Spec::parse(Kind::Shaper, "10/s burst 1")?.with_max_delay_ns(500_000_000)?;
    /// let t = AnyKeyed::with_clock(&spec, 64, ())?;
    /// assert_eq!(t.check_n_at(&"job", 1, 0)?.delay_ns, 0);
    /// assert_eq!(t.check_n_at(&"job", 1, 0)?.delay_ns, 100_000_000);
    /// assert!(t.check_n_at(&"job", spec.capacity() + 1, 0).is_err()); // can never run
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[inline]
    pub fn check_n_at<K: Hash + ?Sized>(
        &self,
        key: &K,
        n: u64,
        now: u64,
    ) -> Result<Outcome, InsufficientCapacity> {
        let h = self.hasher.hash_one(key);
        self.engine.run(h, n, now, true, &|| now)
    }

    /// What [`Self::check_n_at`] would answer, charging nothing.
    ///
    /// ```
    /// use sluicegate::keyed::AnyKeyed;
    /// use sluicegate::{Kind, Spec};
    /// let t = AnyKeyed::with_clock(&Spec::parse(Kind::SlidingWindow, "5/s; 7/min")?, 64, ())?;
    /// assert_eq!(t.peek_n_at(&1u64, 2, 0)?.decision.remaining, 3);
    /// assert_eq!(t.stats().inserted, 0);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[inline]
    pub fn peek_n_at<K: Hash + ?Sized>(
        &self,
        key: &K,
        n: u64,
        now: u64,
    ) -> Result<Outcome, InsufficientCapacity> {
        let h = self.hasher.hash_one(key);
        self.engine.run(h, n, now, false, &|| now)
    }

    /// Changes the quotas of every key at once (same kind, same number of
    /// limits, same max delay); states carry over; all-or-nothing.
    ///
    /// ```
    /// use sluicegate::keyed::AnyKeyed;
    /// use sluicegate::{Kind, Spec, SpecError};
    /// let t = AnyKeyed::with_clock(&Spec::parse(Kind::TokenBucket, "1/s")?, 64, ())?;
    /// assert!(t.check_n_at(&"a", 1, 0)?.decision.allowed);
    /// t.set_spec(&Spec::parse(Kind::TokenBucket, "1/s burst 2")?)?;
    /// assert!(t.check_n_at(&"a", 1, 0)?.decision.allowed);
    /// let other = Spec::parse(Kind::FixedWindow, "1/s")?;
    /// assert_eq!(t.set_spec(&other), Err(SpecError::Immutable { field: "kind" }));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn set_spec(&self, spec: &Spec) -> Result<(), SpecError> {
        let mut cur = self.spec.lock().unwrap_or_else(|e| e.into_inner());
        let immutable = |field| Err(SpecError::Immutable { field });
        if spec.kind() != cur.kind() {
            return immutable("kind");
        }
        if spec.quotas().len() != cur.quotas().len() {
            return immutable("number of limits");
        }
        if spec.max_delay_ns() != cur.max_delay_ns() {
            return immutable("max delay");
        }
        self.engine.set_spec(spec)?;
        *cur = *spec;
        Ok(())
    }

    /// The current spec.
    ///
    /// ```
    /// use sluicegate::keyed::AnyKeyed;
    /// use sluicegate::{Kind, Spec};
    /// let spec = Spec::parse(Kind::LeakyBucket, "3/s")?;
    /// assert_eq!(AnyKeyed::with_clock(&spec, 8, ())?.spec(), spec);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn spec(&self) -> Spec {
        *self.spec.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The table's event counters, summed over its limits (one table each).
    ///
    /// ```
    /// use sluicegate::keyed::AnyKeyed;
    /// use sluicegate::{Kind, Spec};
    /// let t = AnyKeyed::with_clock(&Spec::parse(Kind::TokenBucket, "1/s")?, 8, ())?;
    /// t.check_n_at(&"a", 1, 0)?;
    /// assert_eq!(t.stats().inserted, 1);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn stats(&self) -> KeyedStats {
        self.engine.stats()
    }

    /// Keys holding live state at `now` (the most over its limits).
    ///
    /// ```
    /// use sluicegate::keyed::AnyKeyed;
    /// use sluicegate::{Kind, Spec};
    /// let t = AnyKeyed::with_clock(&Spec::parse(Kind::TokenBucket, "1/s")?, 8, ())?;
    /// t.check_n_at(&"a", 1, 0)?;
    /// assert_eq!((t.len_at(0), t.len_at(1_000_000_000)), (1, 0));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn len_at(&self, now: u64) -> usize {
        self.engine.len_at(now)
    }

    /// Keys a table holds at once.
    ///
    /// ```
    /// use sluicegate::keyed::AnyKeyed;
    /// use sluicegate::{Kind, Spec};
    /// let t = AnyKeyed::with_clock(&Spec::parse(Kind::TokenBucket, "1/s")?, 9, ())?;
    /// assert_eq!(t.capacity(), 16);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn capacity(&self) -> usize {
        self.engine.capacity()
    }

    /// Forgets every key.
    ///
    /// ```
    /// use sluicegate::keyed::AnyKeyed;
    /// use sluicegate::{Kind, Spec};
    /// let t = AnyKeyed::with_clock(&Spec::parse(Kind::TokenBucket, "1/s")?, 8, ())?;
    /// t.check_n_at(&"a", 1, 0)?;
    /// t.clear();
    /// assert!(t.check_n_at(&"a", 1, 0)?.decision.allowed);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn clear(&self) {
        self.engine.clear();
    }

    /// The clock.
    ///
    /// ```
    /// use sluicegate::keyed::AnyKeyed;
    /// use sluicegate::{Clock, Kind, ManualClock, Spec};
    /// let t = AnyKeyed::with_clock(&Spec::parse(Kind::TokenBucket, "1/s")?, 8, ManualClock::new(4))?;
    /// assert_eq!(t.clock().now(), 4);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn clock(&self) -> &C {
        &self.clock
    }
}

impl<C: Clock> AnyKeyed<C> {
    /// [`Self::check_n_at`] on the clock; a give-back reads the clock afresh.
    ///
    /// ```
    /// use sluicegate::keyed::AnyKeyed;
    /// use sluicegate::{Kind, ManualClock, Spec};
    /// let t = AnyKeyed::with_clock(&Spec::parse(Kind::TokenBucket, "1/s")?, 8, ManualClock::new(0))?;
    /// assert!(t.check_n(&"a", 1)?.decision.allowed);
    /// assert!(!t.check_n(&"a", 1)?.decision.allowed);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[inline]
    pub fn check_n<K: Hash + ?Sized>(
        &self,
        key: &K,
        n: u64,
    ) -> Result<Outcome, InsufficientCapacity> {
        let h = self.hasher.hash_one(key);
        self.engine
            .run(h, n, self.clock.now(), true, &|| self.clock.now())
    }

    /// [`Self::peek_n_at`] on the clock.
    ///
    /// ```
    /// use sluicegate::keyed::AnyKeyed;
    /// use sluicegate::{Kind, ManualClock, Spec};
    /// let t = AnyKeyed::with_clock(&Spec::parse(Kind::TokenBucket, "4/s")?, 8, ManualClock::new(0))?;
    /// assert_eq!(t.peek_n(&"a", 1)?.decision.remaining, 3);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[inline]
    pub fn peek_n<K: Hash + ?Sized>(
        &self,
        key: &K,
        n: u64,
    ) -> Result<Outcome, InsufficientCapacity> {
        self.peek_n_at(key, n, self.clock.now())
    }
}
