//! The leaky bucket shaper: racing reservations are granted distinct start times
//! spaced `T` apart and never past the max delay; a cancel refunds a reservation
//! exactly, only while it is the latest, and at most once; a cancel racing a
//! change of rate gives back exactly what the reservation took.
#![cfg(loom)]

use loom::sync::{Arc, Mutex};
use sluicegate::{
    Algorithm, ConfigError, Decision, InsufficientCapacity, Quota, Reservation, Shaper,
    ShaperParams, Shaping,
};
use sluicegate_loom_tests::{assert_some_order_ends, shared, spawn_all};

const SEC: u64 = 1_000_000_000;
const NOW: u64 = 3 * SEC;
/// 10 per second, one at a time: `T` = 100 ms.
const T: u64 = SEC / 10;
/// Reservation slots a model can name; the last one is shared by every thread
/// (behind a mutex: a reservation is not `Clone`, so it cannot be cancelled twice
/// through copies).
const SLOTS: usize = 4;
const SHARED: usize = SLOTS - 1;

fn shaper(max_delay_ns: u64) -> Arc<Shaper<()>> {
    shared(Shaper::with_clock(
        Quota::per_second(10).burst(1),
        max_delay_ns,
        (),
    ))
}

/// A call; `slot` names the reservation it makes or cancels.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Op {
    Reserve { n: u64, now: u64, slot: usize },
    Cancel { slot: usize, now: u64 },
    SetQuota(Quota),
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Answer {
    /// Granted, the delay, the decision.
    Reserved(Result<(bool, u64, Decision), InsufficientCapacity>),
    Cancelled(bool),
    Configured(Result<(), ConfigError>),
}

/// The sequential shaper: its schedule word and, per slot, the (base, end) of the
/// reservation there while it can still be refunded.
#[derive(Clone, Debug, PartialEq)]
struct Model {
    params: ShaperParams,
    word: u64,
    slots: [Option<(u64, u64)>; SLOTS],
}

impl Model {
    fn step(&mut self, op: &Op) -> Answer {
        match *op {
            Op::Reserve { n, now, slot } => {
                let capacity = Shaping::capacity(&self.params);
                if n > capacity {
                    return Answer::Reserved(Err(InsufficientCapacity {
                        requested: n,
                        capacity,
                    }));
                }
                let step = Shaping::decide(&self.params, self.word, now, n);
                self.slots[slot] = None;
                if let (true, Some(next)) = (step.decision.allowed, step.next) {
                    self.slots[slot] = Some((self.word.max(now), next));
                    self.word = next;
                }
                Answer::Reserved(Ok((step.decision.allowed, step.delay_ns, step.decision)))
            }
            Op::Cancel { slot, .. } => match self.slots[slot] {
                Some((base, end)) if self.word == end => {
                    self.word = base;
                    self.slots[slot] = None;
                    Answer::Cancelled(true)
                }
                _ => Answer::Cancelled(false),
            },
            Op::SetQuota(q) => Answer::Configured(Shaping::reparams(&self.params, &q).map(|p| {
                self.params = p;
            })),
        }
    }
}

/// The schedule word: a peek at time 0 reports it as `reset_after`.
fn word(s: &Shaper<()>) -> u64 {
    match s.peek_n_at(0, 0) {
        Ok(d) => d.reset_after_ns,
        Err(e) => panic!("{e}"),
    }
}

type Shared = Option<Arc<Mutex<Reservation>>>;

fn run(s: &Shaper<()>, shared: &Shared, ops: Vec<Op>) -> Vec<(Op, Answer)> {
    let mut mine: [Option<Reservation>; SLOTS] = std::array::from_fn(|_| None);
    ops.into_iter()
        .map(|op| {
            let answer = match op {
                Op::Reserve { n, now, slot } => Answer::Reserved(s.reserve_n_at(n, now).map(|r| {
                    let seen = (r.granted(), r.delay_ns(), *r.decision());
                    mine[slot] = Some(r);
                    seen
                })),
                Op::Cancel { slot: SHARED, now } => {
                    Answer::Cancelled(shared.as_ref().is_some_and(|r| {
                        let mut r = r.lock().unwrap_or_else(|e| e.into_inner());
                        s.cancel_at(&mut r, now)
                    }))
                }
                Op::Cancel { slot, now } => {
                    Answer::Cancelled(mine[slot].as_mut().is_some_and(|r| s.cancel_at(r, now)))
                }
                Op::SetQuota(q) => Answer::Configured(s.set_quota(&q)),
            };
            (op, answer)
        })
        .collect()
}

/// Races `threads`, each on its own thread, and checks the answers and the final
/// schedule against the sequential shaper. `shared` was reserved before the race
/// and sits in slot [`SHARED`] of every thread.
fn race(
    s: &Arc<Shaper<()>>,
    shared: Option<Reservation>,
    threads: Vec<Vec<Op>>,
) -> Vec<Vec<(Op, Answer)>> {
    let mut slots = [None; SLOTS];
    if shared.as_ref().is_some_and(|r| r.granted()) {
        // The shared reservation of one unit was the latest when the race began.
        let w = word(s);
        slots[SHARED] = Some((w - T, w));
    }
    let shared: Shared = shared.map(|r| Arc::new(Mutex::new(r)));
    let before = Model {
        params: s.params(),
        word: word(s),
        slots,
    };
    let (sh, shared2) = (s.clone(), shared.clone());
    let h = spawn_all(threads, move |ops| run(&sh, &shared2, ops));
    let (params, w) = (s.params(), word(s));
    assert_some_order_ends(
        &before,
        &h,
        |m: &mut Model, op: &Op| m.step(op),
        |m| m.params == params && m.word == w,
        &format_args!("schedule {w} under {params:?}"),
    );
    h
}

fn reserve(slot: usize) -> Op {
    Op::Reserve {
        n: 1,
        now: NOW,
        slot,
    }
}

/// Three threads reserve one unit each at `NOW` on `s`; returns the delays of
/// the granted reservations, sorted.
fn three_reservations(s: &Arc<Shaper<()>>) -> Vec<u64> {
    let h = race(
        s,
        None,
        vec![vec![reserve(0)], vec![reserve(1)], vec![reserve(2)]],
    );
    let mut d: Vec<u64> = h
        .iter()
        .flatten()
        .filter_map(|(_, a)| match a {
            Answer::Reserved(Ok((true, delay, _))) => Some(*delay),
            _ => None,
        })
        .collect();
    d.sort_unstable();
    d
}

#[test]
fn racing_reservations_are_spaced_by_t() {
    loom::model(|| {
        let s = shaper(SEC);
        assert_eq!(three_reservations(&s), [0, T, 2 * T]);
        assert_eq!(word(&s), NOW + 3 * T);
    });
}

#[test]
fn the_max_delay_caps_the_queue() {
    loom::model(|| {
        assert_eq!(three_reservations(&shaper(T)), [0, T]);
    });
}

#[test]
fn a_cancel_refunds_only_the_latest_reservation() {
    loom::model(|| {
        let s = shaper(SEC);
        let h = race(
            &s,
            None,
            vec![
                vec![reserve(0), Op::Cancel { slot: 0, now: NOW }],
                vec![reserve(1)],
            ],
        );
        let refunded = h[0][1].1 == Answer::Cancelled(true);
        // The other reservation keeps its time: only one start remains scheduled
        // after a refund, two without one.
        assert_eq!(word(&s), NOW + if refunded { T } else { 2 * T });
    });
}

#[test]
fn a_second_cancel_refunds_nothing() {
    loom::model(|| {
        let s = shaper(SEC);
        let cancel = Op::Cancel { slot: 0, now: NOW };
        // The other thread's reservation may be given exactly the slot the first
        // cancel freed; the second cancel must not free it again.
        let h = race(
            &s,
            None,
            vec![vec![reserve(0), cancel, cancel], vec![reserve(1)]],
        );
        assert_eq!(h[0][2].1, Answer::Cancelled(false));
    });
}

#[test]
fn a_shared_reservation_is_refunded_at_most_once() {
    loom::model(|| {
        let s = shaper(SEC);
        let shared = s.reserve_at(NOW);
        assert!(shared.granted());
        let cancel = Op::Cancel {
            slot: SHARED,
            now: NOW,
        };
        // Two holders of the same reservation cancel it while a third thread
        // reserves (and may be given the very slot the first cancel freed).
        let h = race(
            &s,
            Some(shared),
            vec![vec![cancel], vec![cancel], vec![reserve(2)]],
        );
        let refunds = h
            .iter()
            .flatten()
            .filter(|(_, a)| *a == Answer::Cancelled(true))
            .count();
        assert!(refunds <= 1);
    });
}

#[test]
fn a_cancel_racing_a_new_rate_gives_back_what_was_taken() {
    loom::model(|| {
        let s = shaper(SEC);
        // An earlier reservation that stays: the schedule is busy until NOW + T.
        assert!(s.reserve_at(NOW).granted());
        let h = race(
            &s,
            None,
            vec![
                vec![reserve(0), Op::Cancel { slot: 0, now: NOW }],
                vec![Op::SetQuota(Quota::per_second(5).burst(1))],
            ],
        );
        // Nothing else reserved, so the refund is exact, whichever rate it was
        // granted under: the earlier reservation is still there.
        assert_eq!(h[0][1].1, Answer::Cancelled(true));
        assert_eq!(word(&s), NOW + T);
    });
}
