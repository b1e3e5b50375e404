//! Loom models live in tests/; run them with `scripts/loom`.
//!
//! This library is what the models share: the operations a thread can run on a
//! limiter, a sequential reference built from the algorithm's own pure `decide`
//! (the function the compare-and-swap loop calls), and a brute-force
//! linearizability check. A model races two or three threads on one limiter,
//! records what each call answered, and then asks [`linearizations`] for every
//! order of those calls (each thread's calls kept in program order) that a single
//! thread could have made to get exactly those answers. Passing means: no
//! over-admission (every admission is one the sequential algorithm makes), no lost
//! update (the limiter's final word is the word that order ends in), and no denial
//! that mutated state (a denial leaves the reference's word unchanged, so the final
//! words would differ).
//!
//! Nothing here names loom except `race` (built only under `--cfg loom`), so the
//! checker itself is unit-tested in a normal build.

use sluicegate::{Algorithm, ConfigError, Decision, InsufficientCapacity, Limiter, Quota};

/// Every order of the calls in `histories` (one list per thread, in program order,
/// each call with the answer it got) that, replayed one at a time from `init` by
/// `step`, reproduces every answer. Returns the state each such order ends in (one
/// entry per order, so duplicates are possible); empty means the history is not
/// linearizable.
///
/// ```
/// use sluicegate_loom_tests::linearizations;
/// // Two threads each took a ticket from a counter; answers 1 and 0.
/// let histories = vec![vec![((), 1u32)], vec![((), 0u32)]];
/// let ends = linearizations(&0u32, &histories, |s: &mut u32, _: &()| {
///     *s += 1;
///     *s - 1
/// });
/// assert_eq!(ends, vec![2]);
/// ```
pub fn linearizations<S, O, R>(
    init: &S,
    histories: &[Vec<(O, R)>],
    step: impl Fn(&mut S, &O) -> R,
) -> Vec<S>
where
    S: Clone,
    R: PartialEq,
{
    fn go<S: Clone, O, R: PartialEq>(
        state: &S,
        histories: &[Vec<(O, R)>],
        next: &mut [usize],
        step: &dyn Fn(&mut S, &O) -> R,
        out: &mut Vec<S>,
    ) {
        let mut done = true;
        for t in 0..histories.len() {
            let Some((op, answer)) = histories[t].get(next[t]) else {
                continue;
            };
            done = false;
            let mut s = state.clone();
            if step(&mut s, op) == *answer {
                next[t] += 1;
                go(&s, histories, next, step, out);
                next[t] -= 1;
            }
        }
        if done {
            out.push(state.clone());
        }
    }
    let mut next = vec![0; histories.len()];
    let mut out = Vec::new();
    go(init, histories, &mut next, &step, &mut out);
    out
}

/// A call on a [`Limiter`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    /// `check_n_at(n, now)`.
    Check {
        /// The cost.
        n: u64,
        /// The caller's time.
        now: u64,
    },
    /// `peek_n_at(n, now)`.
    Peek {
        /// The cost.
        n: u64,
        /// The caller's time.
        now: u64,
    },
    /// `set_quota(quota)`.
    SetQuota(Quota),
}

impl Op {
    /// A check of `n` units at `now`.
    ///
    /// ```
    /// # use sluicegate_loom_tests::Op;
    /// assert_eq!(Op::check(2, 5), Op::Check { n: 2, now: 5 });
    /// ```
    pub const fn check(n: u64, now: u64) -> Op {
        Op::Check { n, now }
    }

    /// A peek at `n` units at `now`.
    ///
    /// ```
    /// # use sluicegate_loom_tests::Op;
    /// assert_eq!(Op::peek(2, 5), Op::Peek { n: 2, now: 5 });
    /// ```
    pub const fn peek(n: u64, now: u64) -> Op {
        Op::Peek { n, now }
    }
}

/// What a call answered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Answer {
    /// A check or a peek.
    Decided(Result<Decision, InsufficientCapacity>),
    /// A reconfiguration.
    Configured(Result<(), ConfigError>),
}

impl Answer {
    /// Whether this is an admission that consumed (a check with `allowed`).
    pub fn admitted(&self) -> bool {
        matches!(self, Answer::Decided(Ok(d)) if d.allowed)
    }

    /// The decision, if this answer has one.
    pub fn decision(&self) -> Option<Decision> {
        match self {
            Answer::Decided(Ok(d)) => Some(*d),
            _ => None,
        }
    }
}

/// Runs `op` on the real limiter.
pub fn call<A: Algorithm, C>(limiter: &Limiter<A, C>, op: Op) -> Answer {
    match op {
        Op::Check { n, now } => Answer::Decided(limiter.check_n_at(n, now)),
        Op::Peek { n, now } => Answer::Decided(limiter.peek_n_at(n, now)),
        Op::SetQuota(q) => Answer::Configured(limiter.set_quota(&q)),
    }
}

/// The sequential reference: parameters and state word, advanced by the
/// algorithm's pure `decide` exactly as one thread running alone would.
pub struct Reference<A: Algorithm> {
    /// The parameters.
    pub params: A::Params,
    /// The state word.
    pub word: u64,
}

impl<A: Algorithm> core::fmt::Debug for Reference<A> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "{:?} word {:#x}", self.params, self.word)
    }
}

impl<A: Algorithm> Clone for Reference<A> {
    fn clone(&self) -> Self {
        Self {
            params: self.params,
            word: self.word,
        }
    }
}

impl<A: Algorithm> PartialEq for Reference<A> {
    fn eq(&self, other: &Self) -> bool {
        self.params == other.params && self.word == other.word
    }
}

impl<A: Algorithm> Reference<A> {
    /// The reference for a limiter built from `quota` whose word is `word`.
    ///
    /// # Panics
    /// On an invalid quota: a broken model, not a result.
    pub fn new(quota: &Quota, word: u64) -> Self {
        match A::params(quota) {
            Ok(params) => Self { params, word },
            Err(e) => panic!("invalid quota in a model: {e}"),
        }
    }

    /// The reference for the limiter's current state (call it before racing).
    pub fn of<C>(limiter: &Limiter<A, C>) -> Self {
        Self {
            params: limiter.params(),
            word: limiter.state_word(),
        }
    }

    /// One call, as a single thread would make it.
    pub fn step(&mut self, op: &Op) -> Answer {
        match *op {
            Op::Check { n, now } => Answer::Decided(self.decide(n, now, true)),
            Op::Peek { n, now } => Answer::Decided(self.decide(n, now, false)),
            Op::SetQuota(q) => Answer::Configured(A::reparams(&self.params, &q).map(|p| {
                self.params = p;
            })),
        }
    }

    fn decide(
        &mut self,
        n: u64,
        now: u64,
        consume: bool,
    ) -> Result<Decision, InsufficientCapacity> {
        let capacity = A::capacity(&self.params);
        if n > capacity {
            return Err(InsufficientCapacity {
                requested: n,
                capacity,
            });
        }
        let step = A::decide(&self.params, self.word, now, n);
        if consume {
            if let Some(next) = step.next {
                self.word = next;
            }
        }
        Ok(step.decision)
    }
}

/// Asserts that some order of `histories` (see [`linearizations`]), replayed from
/// `before` by `step`, gives every answer and ends in a state that `is_final`
/// accepts: the real object's end, described by `end` in the failure message.
/// A model with its own reference (its own `Op` and `Answer`) checks its race with
/// this; [`assert_linearizable`] is this for a [`Limiter`].
///
/// # Panics
/// When no order gives the answers (over-admission, a denial that mutated) or
/// none ends where the real object did (a lost update): the model failed.
///
/// ```
/// use sluicegate_loom_tests::assert_some_order_ends;
/// // Two tickets taken from a counter that ends at 2.
/// let histories = vec![vec![((), 1u32)], vec![((), 0u32)]];
/// let take = |s: &mut u32, _: &()| {
///     *s += 1;
///     *s - 1
/// };
/// assert_some_order_ends(&0u32, &histories, take, |s| *s == 2, &2);
/// let lost = std::panic::catch_unwind(|| {
///     assert_some_order_ends(&0u32, &histories, take, |s| *s == 1, &1)
/// });
/// assert!(lost.is_err());
/// ```
pub fn assert_some_order_ends<S, O, R>(
    before: &S,
    histories: &[Vec<(O, R)>],
    step: impl Fn(&mut S, &O) -> R,
    is_final: impl Fn(&S) -> bool,
    end: &dyn core::fmt::Debug,
) where
    S: Clone + core::fmt::Debug,
    O: core::fmt::Debug,
    R: PartialEq + core::fmt::Debug,
{
    let ends = linearizations(before, histories, step);
    assert!(
        !ends.is_empty(),
        "no sequential order gives these answers: {histories:#?}"
    );
    assert!(
        ends.iter().any(is_final),
        "lost update: the real end {end:?} is none of the sequential orders' ends \
         {ends:#?} ({histories:#?})"
    );
}

/// Asserts that the raced `histories` are linearizable from `before` and that the
/// limiter ended where one such order ends. Returns how many units were admitted.
///
/// # Panics
/// When they are not: the model failed.
pub fn assert_linearizable<A: Algorithm, C>(
    before: &Reference<A>,
    histories: &[Vec<(Op, Answer)>],
    limiter: &Limiter<A, C>,
) -> u64 {
    let after = Reference::<A>::of(limiter);
    assert_some_order_ends(
        before,
        histories,
        |s: &mut Reference<A>, op: &Op| s.step(op),
        |end| *end == after,
        &after,
    );
    admitted_units(histories)
}

/// Units admitted by the checks in `histories`.
pub fn admitted_units(histories: &[Vec<(Op, Answer)>]) -> u64 {
    histories
        .iter()
        .flatten()
        .map(|(op, a)| match (op, a.admitted()) {
            (Op::Check { n, .. }, true) => *n,
            _ => 0,
        })
        .sum()
}

/// Runs each of `threads` on its own loom thread against one shared limiter and
/// returns each thread's calls with their answers, in thread order.
///
/// The model's own thread only spawns and joins. Racing on it too would save a
/// thread, but loom does not explore schedules in which calls that only load
/// (a peek, a parameter read) on the spawning thread run after a spawned
/// thread's first step, so a racer there would be checked at one position only.
#[cfg(loom)]
pub fn race<A, C>(
    limiter: &loom::sync::Arc<Limiter<A, C>>,
    threads: &[&[Op]],
) -> Vec<Vec<(Op, Answer)>>
where
    A: Algorithm + 'static,
    C: Send + Sync + 'static,
{
    let limiter = limiter.clone();
    let threads = threads.iter().map(|ops| ops.to_vec()).collect();
    spawn_all(threads, move |ops: Vec<Op>| {
        ops.into_iter().map(|op| (op, call(&limiter, op))).collect()
    })
}

/// Puts a limiter (or table) just built behind a loom `Arc` for racing threads.
///
/// # Panics
/// When building failed: a broken model, not a result.
#[cfg(loom)]
pub fn shared<T, E: core::fmt::Display>(built: Result<T, E>) -> loom::sync::Arc<T> {
    match built {
        Ok(t) => loom::sync::Arc::new(t),
        Err(e) => panic!("a model built an invalid limiter: {e}"),
    }
}

/// [`shared`], with `n` units already spent at `at` (a single-threaded prelude:
/// the model races what comes after).
///
/// # Panics
/// When building failed or the limiter refused those units: a broken model.
#[cfg(loom)]
pub fn shared_spent<A: Algorithm, C>(
    built: Result<Limiter<A, C>, ConfigError>,
    n: u64,
    at: u64,
) -> loom::sync::Arc<Limiter<A, C>> {
    let limiter = shared(built);
    assert!(
        limiter.check_n_at(n, at).is_ok_and(|d| d.allowed),
        "a model's prelude could not spend {n} at {at}"
    );
    limiter
}

/// Runs `run` on its own loom thread with a handle on `shared`; [`join`] it.
#[cfg(loom)]
pub fn spawn_on<T, R>(
    shared: &loom::sync::Arc<T>,
    run: impl FnOnce(&T) -> R + Send + 'static,
) -> loom::thread::JoinHandle<R>
where
    T: Send + Sync + 'static,
    R: Send + 'static,
{
    let shared = shared.clone();
    loom::thread::spawn(move || run(&shared))
}

/// Joins a loom thread, resuming its panic here.
#[cfg(loom)]
pub fn join<R>(handle: loom::thread::JoinHandle<R>) -> R {
    match handle.join() {
        Ok(r) => r,
        Err(e) => std::panic::resume_unwind(e),
    }
}

/// [`race`]s `threads` on `limiter` and asserts, with [`assert_linearizable`],
/// that the answers and the final word are those of some sequential order from the
/// state before the race. Returns the histories and the units admitted.
#[cfg(loom)]
pub fn race_linearizable<A, C>(
    limiter: &loom::sync::Arc<Limiter<A, C>>,
    threads: &[&[Op]],
) -> (Vec<Vec<(Op, Answer)>>, u64)
where
    A: Algorithm + 'static,
    C: Send + Sync + 'static,
{
    let before = Reference::of(&**limiter);
    let histories = race(limiter, threads);
    let admitted = assert_linearizable(&before, &histories, limiter);
    (histories, admitted)
}

/// Races `threads` on a `limiter` that has no room for any of their checks:
/// linearizable, nothing admitted, and the state word exactly as before (a
/// denial that wrote would still pass the answers but not this).
#[cfg(loom)]
pub fn assert_denials_change_nothing<A, C>(
    limiter: &loom::sync::Arc<Limiter<A, C>>,
    threads: &[&[Op]],
) where
    A: Algorithm + 'static,
    C: Send + Sync + 'static,
{
    let full = limiter.state_word();
    let (_, admitted) = race_linearizable(limiter, threads);
    assert_eq!(admitted, 0);
    assert_eq!(limiter.state_word(), full);
}

/// Runs `run` on each of `inputs`, each on its own loom thread, and returns the
/// results in input order (a panic in a thread is resumed here).
#[cfg(loom)]
pub fn spawn_all<I, R, F>(inputs: Vec<I>, run: F) -> Vec<R>
where
    I: Send + 'static,
    R: Send + 'static,
    F: Fn(I) -> R + Clone + Send + 'static,
{
    let handles: Vec<_> = inputs
        .into_iter()
        .map(|input| {
            let run = run.clone();
            loom::thread::spawn(move || run(input))
        })
        .collect();
    handles.into_iter().map(join).collect()
}

// Outside `loom::model` loom's atomics panic, so the checker's own tests run in a
// normal build only.
#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use sluicegate::{Fixed, FixedWindow, Gcra, TokenBucket};

    const SEC: u64 = 1_000_000_000;

    #[test]
    fn a_forced_outcome_has_one_end() {
        let q = Quota::per_second(2);
        let before = Reference::<Gcra>::new(&q, 0);
        let check = Op::Check { n: 1, now: 0 };
        let mut seq = before.clone();
        let answers: Vec<_> = (0..3).map(|_| seq.step(&check)).collect();
        assert_eq!(answers.iter().filter(|a| a.admitted()).count(), 2);
        // Thread 0 got the denial, thread 1 both admissions.
        let histories = vec![
            vec![(check, answers[2])],
            vec![(check, answers[0]), (check, answers[1])],
        ];
        let ends = linearizations(&before, &histories, |s: &mut Reference<Gcra>, op: &Op| {
            s.step(op)
        });
        assert_eq!(ends, vec![seq]);
    }

    #[test]
    fn an_over_admission_is_caught() {
        let q = Quota::per_second(1);
        let before = Reference::<Fixed>::new(&q, 0);
        let check = Op::Check { n: 1, now: 0 };
        let allowed = before.clone().step(&check);
        assert!(allowed.admitted());
        // Both threads claim the only unit.
        let histories = vec![vec![(check, allowed)], vec![(check, allowed)]];
        let ends = linearizations(&before, &histories, |s: &mut Reference<Fixed>, op: &Op| {
            s.step(op)
        });
        assert!(ends.is_empty());
    }

    #[test]
    fn a_lost_update_is_caught() {
        let tb =
            TokenBucket::with_clock(Quota::per_second(3), ()).unwrap_or_else(|e| panic!("{e}"));
        let before = Reference::of(&tb);
        let check = Op::Check { n: 1, now: SEC };
        let histories = vec![
            vec![(check, call(&tb, check))],
            vec![(check, call(&tb, check))],
        ];
        assert_eq!(assert_linearizable(&before, &histories, &tb), 2);
        // A limiter that forgot one of the two admissions.
        let lost =
            TokenBucket::with_clock(Quota::per_second(3), ()).unwrap_or_else(|e| panic!("{e}"));
        let _ = lost.check_at(SEC);
        let caught = std::panic::catch_unwind(|| assert_linearizable(&before, &histories, &lost));
        assert!(caught.is_err());
    }

    #[test]
    fn reconfiguration_is_a_step() {
        let w = FixedWindow::with_clock(Quota::per_second(1), ()).unwrap_or_else(|e| panic!("{e}"));
        let before = Reference::of(&w);
        let ops = [
            Op::Check { n: 1, now: 0 },
            Op::SetQuota(Quota::per_second(2)),
            Op::Check { n: 1, now: 0 },
            Op::SetQuota(Quota::per_minute(2)),
        ];
        let history: Vec<_> = ops.iter().map(|&op| (op, call(&w, op))).collect();
        assert!(history[2].1.admitted());
        assert!(matches!(history[3].1, Answer::Configured(Err(_))));
        assert_eq!(assert_linearizable(&before, &[history], &w), 2);
    }
}
