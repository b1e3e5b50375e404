//! The limiters behind an [`crate::AnyLimiter`], one per shape (single words of
//! one algorithm, alone or as a compound; the sliding log; stripes), each generic
//! over the algorithm: [`Build`] makes the one for a spec's kind.

use alloc::boxed::Box;
use alloc::vec::Vec;
use core::fmt;

use crossbeam_utils::CachePadded;

use crate::any::Outcome;
use crate::compound::{charge_all, peek_all};
use crate::error::InsufficientCapacity;
use crate::kind::Dispatch;
use crate::limiter::{Algorithm, ConfigCell, Core, Step};
use crate::quota::Quota;
use crate::sliding_log::SlidingLog;
use crate::spec::{Spec, SpecError};
use crate::striped::{check_stripes, set_stripes_quota, stripe_words, whole_params};
use crate::sync::Ordering;
use crate::token_bucket::Gcra;

/// The limiter behind an [`AnyLimiter`]; one implementation per shape (single
/// words, the log, stripes), generic over the algorithm.
pub(crate) trait Engine: Send + Sync + fmt::Debug {
    /// One decision; `stripe` is the caller's (striped limiters; `None`: this
    /// thread's), `refund_now` is read only by a compound's give-back.
    fn run(
        &self,
        stripe: Option<usize>,
        n: u64,
        now: u64,
        consume: bool,
        refund_now: &dyn Fn() -> u64,
    ) -> Result<Outcome, InsufficientCapacity>;
    /// Applies `new` (same kind and count as `old`, validated), all-or-nothing
    /// against the limiter's own checks.
    fn set_spec(&self, old: &Spec, new: &Spec) -> Result<(), SpecError>;
    /// Forgets all consumption, or says what cannot be reset.
    fn reset(&self) -> Result<(), &'static str>;
    /// Whether [`Self::charge`] fills receipts (single words and compounds).
    fn can_refund(&self) -> bool {
        false
    }
    /// A consuming decision that records in `taken` what each limit took; returns
    /// how many limits it recorded (0: nothing to give back).
    fn charge(
        &self,
        n: u64,
        now: u64,
        taken: &mut [(u64, u64); Spec::MAX_LIMITS],
    ) -> Result<(Outcome, usize), InsufficientCapacity> {
        let _ = taken;
        self.run(None, n, now, true, &|| now).map(|o| (o, 0))
    }
    /// Gives back `n` units of what [`Self::charge`] recorded in `taken`.
    fn give_back(&self, n: u64, taken: &[(u64, u64)], now: u64) {
        let _ = (n, taken, now);
    }
    /// Restores the state from before the one-limit admission recorded in
    /// `taken` if nothing changed it since; whether it did. Several limits are
    /// never undone (no one compare-and-swap covers them).
    fn undo(&self, taken: &[(u64, u64)]) -> bool {
        let _ = taken;
        false
    }
}

/// [`Engine::undo`] of one word: `next` back to `prev`, only if it still holds `next`.
pub(crate) fn undo_word(word: &crate::sync::AtomicU64, taken: &[(u64, u64)]) -> bool {
    match taken {
        [(prev, next)] => word
            .compare_exchange(
                *next,
                *prev,
                crate::sync::order::CAS_OK,
                crate::sync::order::CAS_ERR,
            )
            .is_ok(),
        _ => false,
    }
}

/// A shaper spec's parameters: its quota and its max delay (which is not part
/// of the quota: `Shaping::params` would drop it).
pub(crate) fn shaper_params(spec: &Spec) -> Result<crate::shaper::ShaperParams, SpecError> {
    crate::shaper::ShaperParams::new(&spec.quotas()[0], spec.max_delay_ns())
        .map_err(|error| SpecError::Config { index: 0, error })
}

/// A single word's decision `step` as an [`Outcome`]: a peek (`!consume`)
/// schedules nothing, so it has no delay.
#[inline(always)]
pub(crate) fn word_outcome(step: &Step, consume: bool) -> Outcome {
    Outcome {
        decision: step.decision,
        delay_ns: if consume { step.delay_ns } else { 0 },
    }
}

/// A single word's charge `(step, word it decided on)` of `n` units: its
/// outcome, with `taken[0]` the word before and after, and how many limits it
/// recorded (1, or 0 when nothing was taken: a denial, a cost of 0, or a state
/// that did not change).
pub(crate) fn word_charge(
    (step, prev): (Step, u64),
    n: u64,
    taken: &mut [(u64, u64); Spec::MAX_LIMITS],
) -> (Outcome, usize) {
    let next = step.next.unwrap_or(prev);
    taken[0] = (prev, next);
    let charged = step.decision.allowed && n > 0 && next != prev;
    (
        word_outcome(&step, step.decision.allowed),
        usize::from(charged),
    )
}

/// One or more single-word limits of one algorithm.
#[derive(Debug)]
enum Words<A> {
    One(Core<A>),
    Many(Box<[Core<A>]>),
}

impl<A: Algorithm> Words<A> {
    fn parts(&self) -> &[Core<A>] {
        match self {
            Words::One(c) => core::slice::from_ref(c),
            Words::Many(m) => m,
        }
    }
}

impl<A: Algorithm + fmt::Debug + Send + Sync + 'static> Engine for Words<A> {
    #[inline]
    fn run(
        &self,
        _stripe: Option<usize>,
        n: u64,
        now: u64,
        consume: bool,
        refund_now: &dyn Fn() -> u64,
    ) -> Result<Outcome, InsufficientCapacity> {
        match self {
            Words::One(c) => c
                .run(now, n, consume)
                .map(|(s, _)| word_outcome(&s, consume)),
            Words::Many(parts) if consume => {
                let mut taken = [(0, 0); Spec::MAX_LIMITS];
                charge_all(parts, &mut taken, n, now, refund_now, |r| {
                    r.map(Outcome::plain)
                })
            }
            Words::Many(parts) => peek_all(parts, n, now).map(Outcome::plain),
        }
    }

    fn set_spec(&self, _old: &Spec, new: &Spec) -> Result<(), SpecError> {
        let parts = self.parts();
        // Every part's own check first, so a rejected spec changes nothing.
        for (index, (part, q)) in parts.iter().zip(new.quotas()).enumerate() {
            A::reparams(&part.params(), q).map_err(|error| SpecError::Config { index, error })?;
        }
        for (index, (part, q)) in parts.iter().zip(new.quotas()).enumerate() {
            part.set_quota(q)
                .map_err(|error| SpecError::Config { index, error })?;
        }
        Ok(())
    }

    fn can_refund(&self) -> bool {
        true
    }

    fn charge(
        &self,
        n: u64,
        now: u64,
        taken: &mut [(u64, u64); Spec::MAX_LIMITS],
    ) -> Result<(Outcome, usize), InsufficientCapacity> {
        match self {
            Words::One(c) => c.run(now, n, true).map(|ran| word_charge(ran, n, taken)),
            Words::Many(parts) => {
                let d = charge_all(parts, taken, n, now, || now, core::convert::identity)?;
                let charged = d.allowed && n > 0;
                Ok((Outcome::plain(d), if charged { parts.len() } else { 0 }))
            }
        }
    }

    fn give_back(&self, n: u64, taken: &[(u64, u64)], now: u64) {
        for (part, &(prev, next)) in self.parts().iter().zip(taken) {
            part.give_back(n, prev, next, || now);
        }
    }

    fn undo(&self, taken: &[(u64, u64)]) -> bool {
        match self {
            Words::One(c) => undo_word(&c.word, taken),
            Words::Many(_) => false,
        }
    }

    fn reset(&self) -> Result<(), &'static str> {
        match self {
            Words::One(c) => {
                c.word.store(0, Ordering::Release);
                Ok(())
            }
            // Not one store: a check between two would see a half-reset compound.
            Words::Many(_) => Err("a reset of several limits"),
        }
    }
}

impl Engine for SlidingLog<()> {
    fn run(
        &self,
        _stripe: Option<usize>,
        n: u64,
        now: u64,
        consume: bool,
        _refund_now: &dyn Fn() -> u64,
    ) -> Result<Outcome, InsufficientCapacity> {
        if consume {
            self.check_n_at(n, now).map(Outcome::plain)
        } else {
            self.peek_n_at(n, now).map(Outcome::plain)
        }
    }

    fn set_spec(&self, _old: &Spec, new: &Spec) -> Result<(), SpecError> {
        if new.log_capacity_set().is_some_and(|c| c != self.capacity()) {
            return Err(SpecError::Immutable {
                field: "log capacity",
            });
        }
        self.set_quota(&new.quotas()[0])
            .map_err(|error| SpecError::Config { index: 0, error })
    }

    fn reset(&self) -> Result<(), &'static str> {
        Err("a reset")
    }
}

/// A token bucket split over cache-padded stripes, of a count chosen at run time.
#[derive(Debug)]
struct Stripes {
    stripes: Box<[CachePadded<Core<Gcra>>]>,
    whole: CachePadded<ConfigCell>,
}

impl Engine for Stripes {
    fn run(
        &self,
        stripe: Option<usize>,
        n: u64,
        now: u64,
        consume: bool,
        _refund_now: &dyn Fn() -> u64,
    ) -> Result<Outcome, InsufficientCapacity> {
        check_stripes::<{ Spec::MAX_STRIPES }>(
            &self.stripes,
            &self.whole,
            stripe.unwrap_or_else(this_stripe),
            n,
            now,
            consume,
        )
        .map(Outcome::plain)
    }

    fn set_spec(&self, _old: &Spec, new: &Spec) -> Result<(), SpecError> {
        set_stripes_quota(&self.stripes, &self.whole, &new.quotas()[0])
            .map_err(|error| SpecError::Config { index: 0, error })
    }

    fn reset(&self) -> Result<(), &'static str> {
        for s in self.stripes.iter() {
            s.word.store(0, Ordering::Release);
        }
        Ok(())
    }
}

/// Collects `n` items made by `make` into a boxed slice, or reports the bytes
/// that could not be allocated.
fn try_boxed<T>(n: usize, make: impl FnMut(usize) -> T) -> Result<Box<[T]>, SpecError> {
    let mut v = Vec::new();
    v.try_reserve_exact(n).map_err(|_| SpecError::Alloc {
        bytes: n.saturating_mul(core::mem::size_of::<T>()),
    })?;
    v.extend((0..n).map(make));
    Ok(v.into_boxed_slice())
}

/// Builds the engine of a validated spec (see `Kind::dispatch`).
pub(crate) struct Build<'a>(pub(crate) &'a Spec);

impl Dispatch for Build<'_> {
    type Output = Result<Box<dyn Engine>, SpecError>;

    fn word<A: Algorithm + fmt::Debug + Send + Sync + 'static>(self) -> Self::Output {
        let spec = self.0;
        let params = |i: usize, q: &Quota| {
            A::params(q).map_err(|error| SpecError::Config { index: i, error })
        };
        let engine = match spec.quotas() {
            [q] => Words::One(Core::<A>::new(&params(0, q)?)),
            qs => {
                let mut words = [[0; crate::limiter::PARAM_WORDS]; Spec::MAX_LIMITS];
                for (i, q) in qs.iter().enumerate() {
                    words[i] = A::to_words(&params(i, q)?);
                }
                Words::Many(try_boxed(qs.len(), |i| Core::from_words(words[i]))?)
            }
        };
        Ok(Box::new(engine))
    }

    fn shaper(self) -> Self::Output {
        let core = Core::<crate::shaper::Shaping>::new(&shaper_params(self.0)?);
        Ok(Box::new(Words::One(core)))
    }

    fn log(self) -> Self::Output {
        Ok(Box::new(SlidingLog::from_spec(self.0, ())?))
    }
}

/// The engine of a token bucket `quota` over `stripes` stripes (`1..=MAX_STRIPES`).
pub(crate) fn stripes(quota: &Quota, stripes: usize) -> Result<Box<dyn Engine>, SpecError> {
    let config = |error| SpecError::Config { index: 0, error };
    let whole = whole_params(quota, stripes).map_err(config)?;
    let mut words = [[0; crate::limiter::PARAM_WORDS]; Spec::MAX_STRIPES];
    for (i, w) in words.iter_mut().take(stripes).enumerate() {
        *w = stripe_words(quota, i, stripes).map_err(config)?;
    }
    let engine = Stripes {
        stripes: try_boxed(stripes, |i| CachePadded::new(Core::from_words(words[i])))?,
        whole: CachePadded::new(ConfigCell::new(whole.words())),
    };
    Ok(Box::new(engine))
}

/// This thread's stripe under `std`; stripe 0 otherwise.
#[inline]
fn this_stripe() -> usize {
    #[cfg(all(feature = "std", not(loom)))]
    {
        crate::sync::thread_index()
    }
    #[cfg(not(all(feature = "std", not(loom))))]
    {
        0
    }
}
