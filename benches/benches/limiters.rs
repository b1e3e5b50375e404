//! sluicegate side by side with the limiters a user would otherwise pick, in one
//! criterion binary so one run measures every contender under the same conditions.
//!
//! * `direct` (group `direct`): one thread, one limiter. Ours with the time passed
//!   in (`check_at`), with the default clock (`check`, `check_n`); governor's direct
//!   limiter (`check`, `check_n`, its default quanta clock); the `ratelimit` crate
//!   (`try_wait`, `Instant` clock); a `Mutex` token bucket written like Go's
//!   `x/time/rate`; and every sluicegate algorithm through `check_at`.
//! * `contended` (group `contended_2t`): two threads on one shared limiter.
//! * `striped` (groups `striped_1t`, `striped_2t`): the striped limiter on one hot
//!   key, one thread and two threads.
//! * `keyed` (groups `keyed_1`, `keyed_100k`, `keyed_1m`): keyed limiters on one
//!   hot key, 100,000 and 1,000,000 keys; ours against governor's keyed limiter
//!   (`u64` and `String` keys) and the seeds' `RwLock<HashMap<String, Mutex<_>>>`.
//!
//! Every limiter is configured so that every call is admitted: the admit path is
//! the one that writes state (a compare-and-swap, or a store under the lock) and
//! so the expensive one. The deny path of each contender is described where it is
//! built. `preflight` checks, before anything is timed, that every contender really
//! admits every call in exactly the loop that is timed.
//!
//! Run with `scripts/bench`, which prints the table of medians and ratios.

// Setup code panics on a bad quota: that is a broken benchmark, not a result.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use criterion::{criterion_main, Criterion};

#[path = "limiters/contended.rs"]
mod contended;
#[path = "limiters/contenders.rs"]
mod contenders;
#[path = "limiters/direct.rs"]
mod direct;
#[path = "limiters/keyed.rs"]
mod keyed;
#[path = "limiters/mutex_bucket.rs"]
mod mutex_bucket;
#[path = "limiters/striped.rs"]
mod striped;

/// Short enough that the direct, contended and striped groups (28 benchmarks)
/// take about three minutes after compiling, long enough for stable medians on a
/// noisy 2-core VM; the keyed groups set shorter times of their own.
fn config() -> Criterion {
    Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(5))
        .sample_size(60)
        .without_plots()
}

/// The group `criterion_group!` builds is a `pub fn` with no docs; a private module
/// keeps it out of the documented surface.
mod group {
    use super::{config, contended, contenders, direct, keyed, striped};
    criterion::criterion_group! {
        name = limiters;
        config = config();
        targets = contenders::preflight, direct::bench, contended::bench, striped::bench, keyed::bench
    }
}
criterion_main!(group::limiters);
