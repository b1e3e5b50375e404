//! The sliding window log, the one limiter with more than one word (a ring of
//! timestamps under a writer lock taken by compare-and-swap on the head): the
//! lock excludes, so racing calls count exactly — every answer and the final log
//! are those of some sequential order — including across a change of quota.
//!
//! Two threads per model, not three: while one thread holds the lock, loom
//! explores every schedule of the others, including the endless one in which two
//! spinners yield to each other and the holder never runs again. A real scheduler
//! runs the holder; loom cannot bound that search, so each model here races two
//! threads with up to two calls each.
#![cfg(loom)]

use loom::sync::Arc;
use sluicegate::{ConfigError, InsufficientCapacity, Quota, SlidingLog};
use sluicegate_loom_tests::{assert_some_order_ends, shared, spawn_all, Op};

const SEC: u64 = 1_000_000_000;
const NOW: u64 = 13 * SEC;

/// Allowed, remaining and limit: what an exact count decides.
type Counted = (bool, u64, u64);

#[derive(Clone, Copy, Debug, PartialEq)]
enum Answer {
    Decided(Result<Counted, InsufficientCapacity>),
    Configured(Result<(), ConfigError>),
}

/// The exact sequential log: every admitted unit's timestamp.
#[derive(Clone, Debug, PartialEq)]
struct Log {
    limit: u64,
    window: u64,
    capacity: u64,
    stamps: Vec<u64>,
}

impl Log {
    fn decide(&mut self, n: u64, now: u64, consume: bool) -> Result<Counted, InsufficientCapacity> {
        if n > self.limit {
            return Err(InsufficientCapacity {
                requested: n,
                capacity: self.limit,
            });
        }
        // Timestamps are stored non-decreasing: an earlier one is decided at the
        // newest entry's time.
        let t = now.max(self.stamps.last().copied().unwrap_or(0));
        let inside = self
            .stamps
            .iter()
            .filter(|&&s| u128::from(s) + u128::from(self.window) > u128::from(t))
            .count() as u64;
        if inside + n <= self.limit {
            if consume {
                self.stamps.extend((0..n).map(|_| t));
            }
            Ok((true, self.limit - inside - n, self.limit))
        } else {
            Ok((false, self.limit.saturating_sub(inside), self.limit))
        }
    }

    fn step(&mut self, op: &Op) -> Answer {
        match *op {
            Op::Check { n, now } => Answer::Decided(self.decide(n, now, true)),
            Op::Peek { n, now } => Answer::Decided(self.decide(n, now, false)),
            Op::SetQuota(q) => Answer::Configured(if q.amount() == 0 {
                Err(ConfigError::Zero { field: "limit" })
            } else if q.period_ns() == 0 {
                Err(ConfigError::Zero { field: "window" })
            } else if q.amount() > self.capacity {
                Err(ConfigError::TooLarge {
                    field: "limit",
                    max: self.capacity,
                })
            } else {
                self.limit = q.amount();
                self.window = q.period_ns();
                Ok(())
            }),
        }
    }

    /// Cost-1 peeks at a few instants after the race: a fingerprint of the log.
    fn probe(&self) -> Vec<Answer> {
        probes()
            .map(|now| self.clone().step(&Op::peek(1, now)))
            .collect()
    }
}

fn probes() -> impl Iterator<Item = u64> {
    [NOW, NOW + SEC / 2, NOW + SEC, NOW + 2 * SEC].into_iter()
}

fn counted(d: sluicegate::Decision) -> Counted {
    (d.allowed, d.remaining, d.limit)
}

fn call(log: &SlidingLog<()>, op: Op) -> Answer {
    match op {
        Op::Check { n, now } => Answer::Decided(log.check_n_at(n, now).map(counted)),
        Op::Peek { n, now } => Answer::Decided(log.peek_n_at(n, now).map(counted)),
        Op::SetQuota(q) => Answer::Configured(log.set_quota(&q)),
    }
}

/// Races `threads`, each on its own thread, on a log that `before` describes and
/// checks answers and final log against the exact sequential one.
fn race(log: &Arc<SlidingLog<()>>, before: &Log, threads: Vec<Vec<Op>>) -> Vec<Vec<(Op, Answer)>> {
    fn run(log: &SlidingLog<()>, ops: Vec<Op>) -> Vec<(Op, Answer)> {
        ops.into_iter().map(|op| (op, call(log, op))).collect()
    }
    let shared = log.clone();
    let h = spawn_all(threads, move |ops| run(&shared, ops));
    let probe: Vec<Answer> = probes().map(|now| call(log, Op::peek(1, now))).collect();
    assert_some_order_ends(
        before,
        &h,
        |l: &mut Log, op: &Op| l.step(op),
        |l| l.probe() == probe,
        &format_args!("log answering {probe:?}"),
    );
    h
}

fn log(quota: Quota, capacity: u64) -> (Arc<SlidingLog<()>>, Log) {
    let model = Log {
        limit: quota.amount(),
        window: quota.period_ns(),
        capacity,
        stamps: Vec::new(),
    };
    (
        shared(SlidingLog::with_capacity(quota, capacity, ())),
        model,
    )
}

/// [`log`], with one unit admitted at `NOW` in both the real log and the model.
fn log_with_one_at_now(quota: Quota, capacity: u64) -> (Arc<SlidingLog<()>>, Log) {
    let (l, mut model) = log(quota, capacity);
    assert!(l.check_at(NOW).allowed);
    assert!(model.decide(1, NOW, true).is_ok_and(|(a, _, _)| a));
    (l, model)
}

fn admitted(h: &[Vec<(Op, Answer)>]) -> u64 {
    h.iter()
        .flatten()
        .map(|(op, a)| match (op, a) {
            (Op::Check { n, .. }, Answer::Decided(Ok((true, _, _)))) => *n,
            _ => 0,
        })
        .sum()
}

#[test]
fn three_checks_share_a_limit_of_two() {
    loom::model(|| {
        let (l, before) = log(Quota::per_second(2), 2);
        let one = Op::check(1, NOW);
        let h = race(&l, &before, vec![vec![one, one], vec![one]]);
        assert_eq!(admitted(&h), 2);
    });
}

#[test]
fn costs_peeks_and_expiry() {
    loom::model(|| {
        let (l, before) = log_with_one_at_now(Quota::per_second(3), 3);
        // A cost of 2 half a window later and then a peek; racing them, a cost of
        // 1 just when the first entry has left the window (after which the peek
        // is decided at that entry's later time).
        let h = race(
            &l,
            &before,
            vec![
                vec![Op::check(2, NOW + SEC / 2), Op::peek(2, NOW + SEC - 1)],
                vec![Op::check(1, NOW + SEC)],
            ],
        );
        assert!(admitted(&h) >= 1);
    });
}

#[test]
fn a_new_limit_races_checks() {
    loom::model(|| {
        let (l, before) = log_with_one_at_now(Quota::per_second(1), 2);
        let one = Op::check(1, NOW);
        // Each check is decided under limit 1 (denied) or 2; at most one fits.
        let h = race(
            &l,
            &before,
            vec![vec![one, one], vec![Op::SetQuota(Quota::per_second(2))]],
        );
        assert!(admitted(&h) <= 1);
    });
}
