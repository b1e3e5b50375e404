//! The tables behind an [`super::AnyKeyed`], generic over the algorithm, and their
//! construction from a spec's kind (a [`Dispatch`], like every per-kind build).

use alloc::boxed::Box;
use alloc::vec::Vec;
use core::fmt;
use core::marker::PhantomData;

use super::pool::{Member, Pool};
use super::table::{self, Space};
use super::{DefaultHashBuilder, FullPolicy, Group, Keyed, KeyedStats};
use crate::any::Outcome;
use crate::compound::merge;
use crate::error::{ConfigError, InsufficientCapacity};
use crate::kind::Dispatch;
use crate::limiter::{Algorithm, PARAM_WORDS};
use crate::quota::Quota;
use crate::shaper::{ShaperParams, Shaping};
use crate::spec::{Spec, SpecError};

/// One table per limit of the spec, all hashing with the table's one hasher.
type Table<A> = Keyed<A, (), Box<[Group]>, DefaultHashBuilder>;

/// Per limit, the words before and after an admission (a receipt's contents).
pub(super) type Taken = [(u64, u64); Spec::MAX_LIMITS];

/// What [`Engine::run`] returns through its `dyn` call: the outcome as plain
/// words, and how many limits a consuming admission recorded for a give-back.
/// An [`Outcome`] has a `bool` and seven bytes of padding; returned through
/// memory, the caller's copy of it loaded those bytes across the callee's
/// narrower stores, and the failed store forwarding cost a hot-key check about
/// 10 of its 27 ns (`perf annotate`: 44 % of `Tables::run`'s samples on one
/// load; `cargo bench -p sluicegate-ffi --bench abi`, `keyed_check_at/rust_any`
/// 26.7 → 17.1 ns). Words are stored and loaded whole. (The same change to the
/// single limiter's engine made its check slower, 6.6 → 11.0 ns, so it is not
/// used there.)
#[derive(Clone, Copy)]
pub(super) struct Ran {
    allowed: u64,
    remaining: u64,
    retry_after_ns: u64,
    reset_after_ns: u64,
    limit: u64,
    delay_ns: u64,
    /// How many limits a consuming admission recorded (0: nothing to give back).
    pub(super) taken: u64,
}

impl Ran {
    #[inline(always)]
    fn new(o: Outcome, taken: usize) -> Self {
        let d = o.decision;
        Self {
            allowed: u64::from(d.allowed),
            remaining: d.remaining,
            retry_after_ns: d.retry_after_ns,
            reset_after_ns: d.reset_after_ns,
            limit: d.limit,
            delay_ns: o.delay_ns,
            taken: taken as u64,
        }
    }

    /// The outcome again.
    #[inline(always)]
    pub(super) fn outcome(&self) -> Outcome {
        Outcome {
            decision: crate::Decision {
                allowed: self.allowed != 0,
                remaining: self.remaining,
                retry_after_ns: self.retry_after_ns,
                reset_after_ns: self.reset_after_ns,
                limit: self.limit,
            },
            delay_ns: self.delay_ns,
        }
    }
}

/// The tables behind an [`super::AnyKeyed`], generic over the algorithm.
pub(super) trait Engine: Send + Sync + fmt::Debug {
    /// One decision for the key of hash `h` at the time `now` reads; with
    /// `taken`, a consuming admission records what each limit took there and
    /// returns how many it recorded. `now` is read once for the decision, after
    /// a one-limit table has looked the key up (`Keyed::run_with`), and again
    /// for the time of a give-back.
    fn run(
        &self,
        h: u64,
        n: u64,
        now: &dyn Fn() -> u64,
        consume: bool,
        taken: Option<&mut Taken>,
    ) -> Result<Ran, InsufficientCapacity>;
    /// Gives back `n` units the key of hash `h` took (as recorded in `taken`).
    fn give_back(&self, h: u64, n: u64, taken: &[(u64, u64)], now: u64);
    fn set_spec(&self, spec: &Spec) -> Result<(), SpecError>;
    fn set_policy(&mut self, policy: FullPolicy);
    fn stats(&self) -> KeyedStats;
    fn len_at(&self, now: u64) -> usize;
    fn capacity(&self) -> usize;
    fn clear(&self);
    /// The ids of its limits in a pool (empty for tables of its own).
    fn pool_ids(&self) -> Vec<u16>;
}

/// One limit's table: a [`Keyed`] of its own or a member of a [`Pool`], each a
/// [`Space`] the one check path runs over.
pub(super) trait Limit<A: Algorithm>: Space<A> + Send + Sync + fmt::Debug {
    fn set_quota(&self, q: &Quota) -> Result<(), ConfigError>;
    fn set_policy(&mut self, policy: FullPolicy);
    fn stats(&self) -> KeyedStats;
    fn len_at(&self, now: u64) -> usize;
    fn capacity(&self) -> usize;
    fn clear(&self);
    /// Its id in a pool.
    fn pool_id(&self) -> Option<u16>;
}

impl<A: Algorithm + fmt::Debug> Limit<A> for Table<A>
where
    Table<A>: Send + Sync,
{
    fn set_quota(&self, q: &Quota) -> Result<(), ConfigError> {
        Keyed::set_quota(self, q)
    }
    fn set_policy(&mut self, policy: FullPolicy) {
        self.policy = policy;
    }
    fn stats(&self) -> KeyedStats {
        Keyed::stats(self)
    }
    fn len_at(&self, now: u64) -> usize {
        Keyed::len_at(self, now)
    }
    fn capacity(&self) -> usize {
        Keyed::capacity(self)
    }
    fn clear(&self) {
        Keyed::clear(self);
    }
    fn pool_id(&self) -> Option<u16> {
        None
    }
}

impl<A: Algorithm + fmt::Debug> Limit<A> for Member<A>
where
    Member<A>: Send + Sync,
{
    fn set_quota(&self, q: &Quota) -> Result<(), ConfigError> {
        Member::set_quota(self, q)
    }
    fn set_policy(&mut self, policy: FullPolicy) {
        self.policy = policy;
    }
    fn stats(&self) -> KeyedStats {
        Member::stats(self)
    }
    fn len_at(&self, now: u64) -> usize {
        Member::len_at(self, now)
    }
    fn capacity(&self) -> usize {
        self.bound()
    }
    fn clear(&self) {
        Member::clear(self);
    }
    fn pool_id(&self) -> Option<u16> {
        Some(self.id())
    }
}

#[derive(Debug)]
struct Tables<A, T>(Box<[T]>, PhantomData<fn() -> A>);

impl<A: Algorithm + fmt::Debug + 'static, T: Limit<A> + 'static> Engine for Tables<A, T> {
    fn run(
        &self,
        h: u64,
        n: u64,
        now: &dyn Fn() -> u64,
        consume: bool,
        taken: Option<&mut Taken>,
    ) -> Result<Ran, InsufficientCapacity> {
        self.decide(h, n, now, consume, taken)
            .map(|(o, taken)| Ran::new(o, taken))
    }

    fn give_back(&self, h: u64, n: u64, taken: &[(u64, u64)], now: u64) {
        for (t, &back) in self.0.iter().zip(taken) {
            table::give_back(t, h, n, back, || now);
        }
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
            t.set_policy(policy);
        }
    }

    fn stats(&self) -> KeyedStats {
        self.0
            .iter()
            .map(Limit::stats)
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
        self.0.first().map_or(0, Limit::capacity)
    }

    fn clear(&self) {
        for t in self.0.iter() {
            t.clear();
        }
    }

    fn pool_ids(&self) -> Vec<u16> {
        self.0.iter().filter_map(Limit::pool_id).collect()
    }
}

impl<A: Algorithm, T: Limit<A>> Tables<A, T> {
    /// [`Engine::run`]'s decision, before it is put into words.
    #[inline(always)]
    fn decide(
        &self,
        h: u64,
        n: u64,
        now: &dyn Fn() -> u64,
        consume: bool,
        taken: Option<&mut Taken>,
    ) -> Result<(Outcome, usize), InsufficientCapacity> {
        if let [one] = &*self.0 {
            let (step, prev) = table::run_with(one, h, n, now, consume)?;
            let admitted = consume && step.decision.allowed;
            let mut len = 0;
            match (taken, step.next) {
                // A state that did not change took nothing to give back.
                (Some(taken), Some(next)) if admitted && next != prev => {
                    taken[0] = (prev, next);
                    len = 1;
                }
                _ => {}
            }
            let delay_ns = if admitted { step.delay_ns } else { 0 };
            let decision = step.decision;
            return Ok((Outcome { decision, delay_ns }, len));
        }
        // All-or-nothing per key: peek every limit, then charge them in order and
        // give back what was charged if one denies (a racing request got there).
        let (refund_now, now) = (now, now());
        let mut combined = None;
        for t in self.0.iter() {
            let (step, _) = table::run_with(t, h, n, || now, false)?;
            combined = Some(merge(combined, &step.decision));
        }
        let Some(peeked) = combined else {
            return Ok((Outcome::plain(crate::Decision::never(0)), 0));
        };
        if !consume || !peeked.allowed || n == 0 {
            return Ok((Outcome::plain(peeked), 0));
        }
        let mut scratch = [(0u64, 0u64); Spec::MAX_LIMITS];
        let (record, out) = match taken {
            Some(t) => (t, true),
            None => (&mut scratch, false),
        };
        let mut combined = None;
        for (i, t) in self.0.iter().enumerate() {
            match table::run_with(t, h, n, || now, true) {
                Ok((step, prev)) if step.decision.allowed => {
                    record[i] = (prev, step.next.unwrap_or(prev));
                    combined = Some(merge(combined, &step.decision));
                }
                other => {
                    for (earlier, &back) in self.0[..i].iter().zip(&record[..i]) {
                        table::give_back(earlier, h, n, back, refund_now);
                    }
                    let (step, _) = other?;
                    return Ok((Outcome::plain(merge(combined, &step.decision)), 0));
                }
            }
        }
        let len = if out { self.0.len() } else { 0 };
        Ok((Outcome::plain(combined.unwrap_or(peeked)), len))
    }
}

/// Where a keyed spec's tables live.
pub(super) enum Home<'a> {
    /// Tables of their own, of `capacity` keys each.
    Own {
        capacity: usize,
        hasher: &'a DefaultHashBuilder,
    },
    /// Members of a pool, each holding at most `max_keys` live keys.
    Pool { pool: &'a Pool, max_keys: usize },
}

/// Builds the tables of a spec whose kind is keyed (see `Kind::dispatch`).
pub(super) struct BuildKeyed<'a> {
    pub spec: &'a Spec,
    pub home: Home<'a>,
}

impl BuildKeyed<'_> {
    /// One table per limit, from each limit's parameters.
    fn tables<A: Algorithm + fmt::Debug + Send + Sync + 'static>(
        self,
        params: impl Fn(&Quota) -> Result<A::Params, ConfigError>,
    ) -> Result<Box<dyn Engine>, SpecError> {
        let quotas = self.spec.quotas();
        let mut words = [[0; PARAM_WORDS]; Spec::MAX_LIMITS];
        for (index, (q, w)) in quotas.iter().zip(words.iter_mut()).enumerate() {
            *w = A::to_words(&params(q).map_err(|error| spec_error(index, error))?);
        }
        let words = &words[..quotas.len()];
        match self.home {
            Home::Own { capacity, hasher } => {
                let tables = try_vec(words, |index, w| {
                    Table::<A>::with_capacity_and_hasher(
                        quotas[index],
                        capacity,
                        hasher.clone(),
                        (),
                    )
                    .map(|t| t.with_words(*w))
                    .map_err(|error| spec_error(index, error))
                })?;
                Ok(Box::new(Tables::<A, _>(tables, PhantomData)))
            }
            Home::Pool { pool, max_keys } => {
                let kind = self.spec.kind();
                let members = try_vec(words, |_, w| pool.register::<A>(kind, *w, max_keys))?;
                Ok(Box::new(Tables::<A, _>(members, PhantomData)))
            }
        }
    }
}

/// `make` of each of `words`, in a boxed slice allocated fallibly.
fn try_vec<T>(
    words: &[[u64; PARAM_WORDS]],
    make: impl Fn(usize, &[u64; PARAM_WORDS]) -> Result<T, SpecError>,
) -> Result<Box<[T]>, SpecError> {
    let mut v = Vec::new();
    v.try_reserve_exact(words.len())
        .map_err(|_| SpecError::Alloc {
            bytes: words.len().saturating_mul(core::mem::size_of::<T>()),
        })?;
    for (index, w) in words.iter().enumerate() {
        v.push(make(index, w)?);
    }
    Ok(v.into_boxed_slice())
}

impl Dispatch for BuildKeyed<'_> {
    type Output = Result<Box<dyn Engine>, SpecError>;

    fn word<A: Algorithm + fmt::Debug + Send + Sync + 'static>(self) -> Self::Output {
        self.tables::<A>(A::params)
    }

    /// One limit, with its max delay.
    fn shaper(self) -> Self::Output {
        let max_delay_ns = self.spec.max_delay_ns();
        self.tables::<Shaping>(|q| ShaperParams::new(q, max_delay_ns))
    }

    /// The log's state is not one word: no keyed form (`Caps::keyed` says so).
    fn log(self) -> Self::Output {
        Err(SpecError::Unsupported {
            kind: self.spec.kind(),
            what: "keyed limiting",
        })
    }
}

/// An allocation failure is the spec's; anything else names the quota.
fn spec_error(index: usize, error: ConfigError) -> SpecError {
    match error {
        ConfigError::Alloc { bytes } => SpecError::Alloc { bytes },
        error => SpecError::Config { index, error },
    }
}
