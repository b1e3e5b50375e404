//! Per-key coalescing of consuming checks ([`crate::Config::coalesce`]): the
//! first check of a key opens a flight, the key's checks arriving within the
//! window join it, and the flight is one run of the multi-cost script that
//! decides each cost as a single call would, in arrival order.

use core::time::Duration;

use crate::conn::Conn;
use crate::error::Error;
use crate::limit::{Mode, Reply};
use crate::limiter::RedisLimiter;

impl RedisLimiter {
    /// A consuming call: coalesced with the key's concurrent ones when
    /// [`crate::Config::coalesce`] is on, else one script call.
    pub(crate) async fn consume(&self, key: &str, n: u64) -> Result<Reply, Error> {
        let Some(window) = self.inner.cfg.coalesce else {
            return self.call(key, n, Mode::Consume).await;
        };
        self.within_capacity(n)?;
        let (tx, rx) = tokio::sync::oneshot::channel();
        let open = {
            let mut flights = match self.inner.flights.lock() {
                Ok(g) => g,
                Err(p) => p.into_inner(),
            };
            match flights.get_mut(key) {
                Some(f) => {
                    f.push((n, tx));
                    false
                }
                None => {
                    flights.insert(key.to_owned(), vec![(n, tx)]);
                    true
                }
            }
        };
        if open {
            // The flight runs on its own task, so that a caller that gives up (its
            // future dropped) cannot strand the others.
            let (this, key) = (self.clone(), key.to_owned());
            tokio::spawn(async move { this.fly(key, window).await });
        }
        // A flight that vanished (its task panicked or the runtime shut down):
        // unavailable, like a timeout.
        rx.await.unwrap_or(Err(Error::Timeout))
    }

    /// Sends `key`'s flight after `window`: one single call for one cost, else the
    /// multi-cost script; hands each caller its reply (or the flight's error,
    /// each caller its own copy of it).
    async fn fly(&self, key: String, window: Duration) {
        if window.is_zero() {
            tokio::task::yield_now().await;
        } else {
            tokio::time::sleep(window).await;
        }
        let flight = {
            let mut flights = match self.inner.flights.lock() {
                Ok(g) => g,
                Err(p) => p.into_inner(),
            };
            flights.remove(&key).unwrap_or_default()
        };
        if let [(n, _)] = flight[..] {
            let r = self.call(&key, n, Mode::Consume).await;
            if let Some((_, tx)) = flight.into_iter().next() {
                let _ = tx.send(r);
            }
            return;
        }
        let costs: Vec<u64> = flight.iter().map(|(n, _)| *n).collect();
        match self.call_multi(&key, &costs).await {
            Ok(replies) => {
                for ((_, tx), r) in flight.into_iter().zip(replies) {
                    let _ = tx.send(Ok(r));
                }
            }
            Err(e) => {
                for (_, tx) in flight {
                    let _ = tx.send(Err(e.clone()));
                }
            }
        }
    }

    /// The multi-cost script on one key, with the breaker and timeout of a single
    /// call: one reply per cost, in order, or one error for all.
    async fn call_multi(&self, key: &str, costs: &[u64]) -> Result<Vec<Reply>, Error> {
        let inner = &self.inner;
        let rkey = &self.redis_key(key);
        let limit = &inner.limit;
        inner
            .link
            .run(rkey, |mut conn: Conn| async move {
                let v = inner
                    .scripts
                    .invoke_multi(&mut conn, rkey, |c| limit.push_multi_args(c, costs))
                    .await
                    .map_err(Error::from_redis)?;
                match v {
                    redis::Value::Array(items) if items.len() == costs.len() => {
                        items.iter().map(Reply::parse).collect()
                    }
                    other => Err(Error::Reply(format!(
                        "expected {} replies, got {other:?}",
                        costs.len()
                    ))),
                }
            })
            .await
    }
}
