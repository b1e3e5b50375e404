//! The compound limiter (check all, then commit, with give-back): racing callers
//! never over-admit any of its limits, every limit ends holding exactly the
//! admitted requests (a charge undone after a later limit denied leaves no trace,
//! whether it was restored exactly or given back past another thread's charge),
//! and a denial charges nothing anywhere.
#![cfg(loom)]

use loom::sync::Arc;
use sluicegate::{
    Algorithm, Compound, Decision, Fixed, Gcra, InsufficientCapacity, Quota, Sliding,
};
use sluicegate_loom_tests::{shared, spawn_all};

const SEC: u64 = 1_000_000_000;
const NOW: u64 = 11 * SEC + SEC / 3;

type Answer = Result<Decision, InsufficientCapacity>;

/// A call: a cost, and whether it is a check (`true`) or a peek.
type Call = (u64, bool);

fn compound<A: Algorithm>(quotas: [Quota; 2]) -> Arc<Compound<A, 2, ()>> {
    shared(Compound::with_clock(quotas, ()))
}

fn run<A: Algorithm>(c: &Compound<A, 2, ()>, calls: Vec<Call>) -> Vec<(Call, Answer)> {
    calls
        .into_iter()
        .map(|(n, check)| {
            let a = if check {
                c.check_n_at(n, NOW)
            } else {
                c.peek_n_at(n, NOW)
            };
            ((n, check), a)
        })
        .collect()
}

/// Races `threads`, each on its own thread; returns units admitted per thread.
fn race<A: Algorithm + 'static>(c: &Arc<Compound<A, 2, ()>>, threads: Vec<Vec<Call>>) -> Vec<u64> {
    let c = c.clone();
    let h = spawn_all(threads, move |calls| run(&c, calls));
    h.iter()
        .map(|calls| {
            calls
                .iter()
                .map(|((n, check), a)| match a {
                    Ok(d) if d.allowed && *check => *n,
                    Ok(_) => 0,
                    Err(e) => panic!("{e}"),
                })
                .sum()
        })
        .collect()
}

/// What limit `i` alone has left at `NOW`: the other limit is widened (its state
/// kept) while the compound is peeked, then put back.
fn left<A: Algorithm>(
    c: &Compound<A, 2, ()>,
    quotas: [Quota; 2],
    wide: [Quota; 2],
    i: usize,
) -> u64 {
    let j = 1 - i;
    let widen = c.set_quota(j, &wide[j]);
    let left = c.peek_n_at(0, NOW).map(|d| d.remaining);
    let back = c.set_quota(j, &quotas[j]);
    assert_eq!((widen, back), (Ok(()), Ok(())));
    match left {
        Ok(l) => l,
        Err(e) => panic!("{e}"),
    }
}

/// The same rate with room for 1000 (token bucket: the burst; windows: the limit).
fn wide_bucket(q: Quota) -> Quota {
    q.burst(1000)
}

fn wide_window(q: Quota) -> Quota {
    Quota::from_nanos(1000, q.period_ns())
}

fn both_left<A: Algorithm>(
    c: &Compound<A, 2, ()>,
    quotas: [Quota; 2],
    wide: fn(Quota) -> Quota,
) -> [u64; 2] {
    let wide = quotas.map(wide);
    [left(c, quotas, wide, 0), left(c, quotas, wide, 1)]
}

const ONE: Call = (1, true);

/// Three callers race for one unit each on a fresh compound of `quotas`: `admitted`
/// units in all, and the limits end with `left` (measured by widening with `wide`).
fn three_callers_of_one<A: Algorithm + 'static>(
    quotas: [Quota; 2],
    wide: fn(Quota) -> Quota,
    admitted: u64,
    left: [u64; 2],
) {
    loom::model(move || {
        let c = compound::<A>(quotas);
        let got = race(&c, vec![vec![ONE], vec![ONE], vec![ONE]]);
        assert_eq!(got.iter().sum::<u64>(), admitted);
        assert_eq!(both_left(&c, quotas, wide), left);
    });
}

#[test]
fn three_callers_share_a_burst_of_two() {
    let quotas = [Quota::per_second(2), Quota::per_minute(3)];
    three_callers_of_one::<Gcra>(quotas, wide_bucket, 2, [0, 1]);
}

#[test]
fn a_denial_by_the_second_limit_gives_the_first_back() {
    // The per-minute limit admits one; a caller that charged the per-second
    // limit and then lost the race for it must give its charge back, exactly
    // (nothing else moved) or past the other callers' charges.
    let quotas = [Quota::per_second(3), Quota::per_minute(1)];
    three_callers_of_one::<Gcra>(quotas, wide_bucket, 1, [2, 0]);
}

#[test]
fn racing_costs_leave_each_limit_with_the_winner_only() {
    loom::model(|| {
        // 2 + 1 fit the first limit, not the second (room for 2): one wins.
        let quotas = [Quota::per_second(3), Quota::per_minute(2)];
        let c = compound::<Gcra>(quotas);
        let admitted = race(&c, vec![vec![(2, true)], vec![ONE]]);
        let expected = match admitted[..] {
            [2, 0] => [1, 0],
            [0, 1] => [2, 1],
            _ => panic!("admitted {admitted:?}: not one of the sequential outcomes"),
        };
        assert_eq!(both_left(&c, quotas, wide_bucket), expected);
    });
}

#[test]
fn a_denial_charges_nothing() {
    loom::model(|| {
        let quotas = [Quota::per_second(3), Quota::per_minute(1)];
        let c = compound::<Gcra>(quotas);
        assert!(c.check_at(NOW).allowed);
        // The per-minute limit is spent: both callers are denied, and the
        // per-second limit keeps the two units it had.
        let admitted = race(&c, vec![vec![ONE], vec![(1, false), ONE]]);
        assert_eq!(admitted, [0, 0]);
        assert_eq!(both_left(&c, quotas, wide_bucket), [2, 0]);
    });
}

#[test]
fn fixed_windows_give_back_exactly() {
    let quotas = [Quota::per_second(2), Quota::per_minute(1)];
    three_callers_of_one::<Fixed>(quotas, wide_window, 1, [1, 0]);
}

#[test]
fn sliding_windows_give_back_exactly() {
    let quotas = [Quota::per_second(2), Quota::per_minute(1)];
    three_callers_of_one::<Sliding>(quotas, wide_window, 1, [1, 0]);
}
