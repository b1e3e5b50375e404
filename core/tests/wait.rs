//! Waiting for capacity: blocking and async.
#![cfg(feature = "std")]

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use sluicegate::{Quota, TokenBucket, Wait, WaitError};

#[test]
fn blocking_wait_sleeps_until_admitted() {
    let tb = TokenBucket::new(Quota::per_second(50).burst(1)).unwrap();
    assert!(tb.check().allowed);
    let started = Instant::now();
    let d = tb.wait_n(1, Duration::from_secs(5)).unwrap();
    assert!(d.allowed);
    // One token takes 20 ms to come back; the wait cannot have returned before.
    assert!(
        started.elapsed() >= Duration::from_millis(15),
        "{:?}",
        started.elapsed()
    );
}

#[test]
fn blocking_wait_gives_up_at_once_when_the_deadline_is_too_close() {
    let tb = TokenBucket::new(Quota::per_minute(1)).unwrap();
    assert!(tb.check().allowed);
    let started = Instant::now();
    match tb.wait_n(1, Duration::from_millis(100)) {
        Err(WaitError::Timeout(d)) => assert!(d.retry_after() > Duration::from_secs(50)),
        other => panic!("expected a timeout, got {other:?}"),
    }
    // It did not sleep through the timeout for nothing.
    assert!(started.elapsed() < Duration::from_millis(100));
}

#[test]
fn waiting_for_more_than_the_burst_is_an_error_not_a_hang() {
    let tb = TokenBucket::new(Quota::per_second(5)).unwrap();
    assert!(matches!(
        tb.wait_n(6, Duration::from_secs(60)),
        Err(WaitError::InsufficientCapacity(_))
    ));
}

#[tokio::test(flavor = "current_thread")]
async fn async_wait_does_not_block_the_executor() {
    let tb = Arc::new(TokenBucket::new(Quota::per_second(10).burst(1)).unwrap());
    assert!(tb.check().allowed);
    let ticks = Arc::new(AtomicU64::new(0));
    let ticker = {
        let ticks = ticks.clone();
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(Duration::from_millis(5)).await;
                ticks.fetch_add(1, Ordering::Relaxed);
            }
        })
    };
    let started = Instant::now();
    let d = tb
        .wait_n_async(1, Duration::from_secs(5), tokio::time::sleep)
        .await
        .unwrap();
    let waited = started.elapsed();
    assert!(d.allowed);
    assert!(waited >= Duration::from_millis(50), "{waited:?}");
    // On a single-threaded runtime the ticker only ran if the wait yielded.
    assert!(
        ticks.load(Ordering::Relaxed) >= 5,
        "ticker starved: {ticks:?}"
    );
    ticker.abort();
}

#[tokio::test(flavor = "current_thread")]
async fn async_wait_times_out() {
    let tb = TokenBucket::new(Quota::per_hour(1)).unwrap();
    assert!(tb.check().allowed);
    let r = tb
        .wait_n_async(1, Duration::from_millis(10), tokio::time::sleep)
        .await;
    assert!(matches!(r, Err(WaitError::Timeout(_))));
}
