//! Waiting for capacity (std only): blocking, and async without a runtime.
//!
//! The core has no timers. [`Wait::wait_n`] sleeps the thread for each
//! `retry_after`; [`Wait::wait_n_async`] awaits a sleep future from whatever
//! runtime the caller uses (`tokio::time::sleep`, `async_io::Timer::after`, …),
//! so it never blocks an executor thread and depends on no runtime.
//!
//! Both re-check after every sleep (another caller may have taken the capacity),
//! and give up with [`WaitError::Timeout`] as soon as the next wait would pass the
//! deadline, without sleeping for nothing.

use core::fmt;
use core::future::Future;
use core::ops::ControlFlow;
use std::time::{Duration, Instant};

use crate::clock::Clock;
use crate::compound::Compound;
use crate::decision::Decision;
use crate::error::InsufficientCapacity;
use crate::limiter::{Algorithm, Limiter};
use crate::sliding_log::SlidingLog;

/// Why a wait gave up.
///
/// ```
/// use sluicegate::{WaitError, InsufficientCapacity};
/// let e = WaitError::InsufficientCapacity(InsufficientCapacity { requested: 5, capacity: 4 });
/// assert!(e.to_string().contains("can never"));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WaitError {
    /// The request would not be admitted before the timeout; the last decision.
    Timeout(Decision),
    /// The request can never be admitted.
    InsufficientCapacity(InsufficientCapacity),
}

impl fmt::Display for WaitError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Timeout(d) => write!(
                f,
                "timed out waiting for rate-limit capacity (next chance in {:?})",
                d.retry_after()
            ),
            Self::InsufficientCapacity(e) => e.fmt(f),
        }
    }
}

impl std::error::Error for WaitError {}

impl From<InsufficientCapacity> for WaitError {
    fn from(e: InsufficientCapacity) -> Self {
        Self::InsufficientCapacity(e)
    }
}

/// Waiting on any limiter with a clock.
///
/// ```
/// use std::time::Duration;
/// use sluicegate::{Quota, TokenBucket, Wait};
/// let tb = TokenBucket::new(Quota::per_second(100).burst(1)).unwrap();
/// assert!(tb.wait_n(1, Duration::ZERO).is_ok());
/// let started = std::time::Instant::now();
/// assert!(tb.wait_n(1, Duration::from_secs(1)).unwrap().allowed); // ~10 ms
/// assert!(started.elapsed() >= Duration::from_millis(5));
/// assert!(tb.wait_n(1, Duration::ZERO).is_err()); // no time to wait
/// ```
pub trait Wait {
    /// One attempt: a consuming check of `n` units now.
    fn try_n(&self, n: u64) -> Result<Decision, InsufficientCapacity>;

    /// Blocks the thread until `n` units are admitted, or `timeout` would pass.
    fn wait_n(&self, n: u64, timeout: Duration) -> Result<Decision, WaitError> {
        let deadline = Instant::now().checked_add(timeout);
        loop {
            match attempt(self, n, deadline)? {
                ControlFlow::Break(d) => return Ok(d),
                ControlFlow::Continue(pause) => std::thread::sleep(pause),
            }
        }
    }

    /// Waits without blocking the thread, sleeping through `sleep` (the caller's
    /// runtime timer).
    ///
    /// ```
    /// use std::time::Duration;
    /// use sluicegate::{Quota, TokenBucket, Wait};
    /// let tb = TokenBucket::new(Quota::per_second(1000)).unwrap();
    /// // any executor; here a trivial one with a sleep that is ready at once
    /// let fut = tb.wait_n_async(1, Duration::from_secs(1), |_| std::future::ready(()));
    /// let d = futures_lite_block_on(fut).unwrap();
    /// assert!(d.allowed);
    /// # fn futures_lite_block_on<F: std::future::Future>(f: F) -> F::Output {
    /// #     use std::task::{Context, Poll, Waker};
    /// #     let mut f = std::pin::pin!(f);
    /// #     let mut cx = Context::from_waker(Waker::noop());
    /// #     loop { if let Poll::Ready(v) = f.as_mut().poll(&mut cx) { return v; } }
    /// # }
    /// ```
    fn wait_n_async<S, F>(
        &self,
        n: u64,
        timeout: Duration,
        mut sleep: S,
    ) -> impl Future<Output = Result<Decision, WaitError>>
    where
        S: FnMut(Duration) -> F,
        F: Future<Output = ()>,
    {
        async move {
            let deadline = Instant::now().checked_add(timeout);
            loop {
                match attempt(self, n, deadline)? {
                    ControlFlow::Break(d) => return Ok(d),
                    ControlFlow::Continue(pause) => sleep(pause).await,
                }
            }
        }
    }
}

/// One try of a wait: `Break` with the decision that admitted `n` units, or
/// `Continue` with how long to sleep after a denial; the timeout if that sleep
/// would pass the deadline.
fn attempt<W: Wait + ?Sized>(
    w: &W,
    n: u64,
    deadline: Option<Instant>,
) -> Result<ControlFlow<Decision, Duration>, WaitError> {
    let d = w.try_n(n)?;
    if d.allowed {
        return Ok(ControlFlow::Break(d));
    }
    // Never spin: even a 0 ns retry (a lost race) waits a microsecond.
    let pause = d.retry_after().max(Duration::from_micros(1));
    match deadline {
        Some(deadline)
            if Instant::now()
                .checked_add(pause)
                .is_none_or(|t| t > deadline) =>
        {
            Err(WaitError::Timeout(d))
        }
        _ => Ok(ControlFlow::Continue(pause)),
    }
}

impl<A: Algorithm, C: Clock> Wait for Limiter<A, C> {
    fn try_n(&self, n: u64) -> Result<Decision, InsufficientCapacity> {
        self.check_n(n)
    }
}

impl<A: Algorithm, const N: usize, C: Clock> Wait for Compound<A, N, C> {
    fn try_n(&self, n: u64) -> Result<Decision, InsufficientCapacity> {
        self.check_n(n)
    }
}

impl<C: Clock> Wait for SlidingLog<C> {
    fn try_n(&self, n: u64) -> Result<Decision, InsufficientCapacity> {
        self.check_n(n)
    }
}
