//! Runtime reconfiguration: `set_quota` publishes new parameters through a seqlock
//! next to the state word. A check racing it is decided under the old or the new
//! quota, never a mix (the linearizability check replays `set_quota` as a step and
//! compares whole decisions, so a decision built from parts of two quotas has no
//! sequential order), the word carries over, and no reader ever sees a torn
//! parameter set.
#![cfg(loom)]

use loom::sync::Arc;
use sluicegate::{
    Algorithm, ConfigError, FixedWindow, Gcra, GcraParams, Limiter, Quota, SlidingWindow,
    TokenBucket,
};
use sluicegate_loom_tests::{join, race_linearizable, shared, shared_spent, spawn_on, Op};

const SEC: u64 = 1_000_000_000;
const NOW: u64 = 17 * SEC;

fn one(now: u64) -> Op {
    Op::check(1, now)
}

/// A bucket under the first of three quotas that differ in every parameter word,
/// the quotas, and their parameters (to tell a whole set from a torn one).
fn bucket_of_three_quotas() -> (Arc<TokenBucket<()>>, [Quota; 3], [GcraParams; 3]) {
    let q = [
        Quota::per_second(2),
        Quota::per_second(4).burst(1),
        Quota::per_second(1).burst(3),
    ];
    let p = q.map(|q| match Gcra::params(&q) {
        Ok(p) => p,
        Err(e) => panic!("{e}"),
    });
    (shared(TokenBucket::with_clock(q[0], ())), q, p)
}

/// Two checks at `NOW` race raising the quota of `built`, with `n` units spent at
/// `NOW`, to `raised`, which has room for one more: at most one is admitted.
fn two_checks_race_a_raise<A: Algorithm + 'static>(
    built: Result<Limiter<A, ()>, ConfigError>,
    n: u64,
    raised: Quota,
) {
    let limiter = shared_spent(built, n, NOW);
    let (_, admitted) =
        race_linearizable(&limiter, &[&[one(NOW), one(NOW)], &[Op::SetQuota(raised)]]);
    assert!(admitted <= 1);
}

#[test]
fn a_bigger_burst_races_checks_on_a_full_bucket() {
    loom::model(|| {
        // Under burst 2 the bucket is empty; under burst 3 it has one token.
        let tb = TokenBucket::with_clock(Quota::per_second(2), ());
        two_checks_race_a_raise(tb, 2, Quota::per_second(2).burst(3));
    });
}

#[test]
fn a_new_rate_races_a_check() {
    loom::model(|| {
        // Every parameter word changes: T 500 → 250 ms, tolerance 1 s → 250 ms,
        // burst 2 → 1. A check that mixed them would match neither quota.
        let tb = shared_spent(TokenBucket::with_clock(Quota::per_second(2), ()), 1, NOW);
        race_linearizable(
            &tb,
            &[
                &[one(NOW + SEC / 10), Op::peek(1, NOW + SEC / 5)],
                &[Op::SetQuota(Quota::per_second(4).burst(1))],
            ],
        );
    });
}

#[test]
fn config_reads_are_never_torn() {
    loom::model(|| {
        let (tb, q, p) = bucket_of_three_quotas();
        let writer = spawn_on(&tb, move |tb| {
            for q in &q[1..] {
                assert_eq!(tb.set_quota(q), Ok(()));
            }
        });
        let reader = spawn_on(&tb, move |tb| {
            // Whole parameter sets, in the order they were written.
            let seen: Vec<usize> = (0..2)
                .map(|_| {
                    let r = tb.params();
                    match p.iter().position(|x| *x == r) {
                        Some(i) => i,
                        None => panic!("torn parameters {r:?}, written {p:?}"),
                    }
                })
                .collect();
            assert!(seen[0] <= seen[1], "went back: {seen:?}");
        });
        join(writer);
        join(reader);
        assert_eq!(tb.params(), p[2]);
    });
}

#[test]
fn two_writers_never_interleave() {
    loom::model(|| {
        let (tb, q, p) = bucket_of_three_quotas();
        let other = spawn_on(&tb, move |tb| assert_eq!(tb.set_quota(&q[1]), Ok(())));
        assert_eq!(tb.set_quota(&q[2]), Ok(()));
        join(other);
        // The last writer's set, whole.
        let r = tb.params();
        assert!(r == p[1] || r == p[2], "torn parameters {r:?}");
    });
}

#[test]
fn a_higher_window_limit_races_checks() {
    loom::model(|| {
        let w = FixedWindow::with_clock(Quota::per_second(1), ());
        two_checks_race_a_raise(w, 1, Quota::per_second(2));
    });
}

#[test]
fn a_lower_sliding_limit_races_checks() {
    loom::model(|| {
        let w = shared_spent(
            SlidingWindow::with_clock(Quota::per_second(4), ()),
            2,
            NOW - SEC / 2,
        );
        // A change of window is refused (the layout depends on it) and changes nothing.
        race_linearizable(
            &w,
            &[
                &[one(NOW), Op::check(2, NOW)],
                &[
                    Op::SetQuota(Quota::per_second(2)),
                    Op::SetQuota(Quota::per_minute(2)),
                ],
            ],
        );
    });
}
