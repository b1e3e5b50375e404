//! Batches: [`RedisLimiter::check_many`] sends its checks in pipelines of at
//! most [`crate::Config::pipeline_max`] script calls, one after another, each
//! under the call timeout (scaled by the pipeline's length), so a batch of any size is answered by a healthy
//! server, and a stalled one costs one timeout, not one per pipeline.

use crate::breaker::Permit;
use crate::error::Error;
use crate::limit::{Mode, Reply};
use crate::limiter::RedisLimiter;
use crate::verdict::Verdict;

impl RedisLimiter {
    /// Checks many `(key, cost)` pairs at once. On a standalone server, pipelines
    /// of at most [`crate::Config::pipeline_max`] calls (one write, one read each;
    /// `NOSCRIPT` items sent again as `EVAL`), one after another; on a cluster,
    /// groups of as many concurrent calls, which the connection pipelines per
    /// node. Answers come in the order asked; each is decided in that order on
    /// its key, and is what [`Self::check_n`] would answer: a pipeline that
    /// times out or breaks is answered by the failure policy, with every
    /// pipeline after it (nothing of it is replayed, so nothing is charged
    /// twice).
    ///
    /// ```no_run
    /// # async fn f(rl: sluicegate_redis::RedisLimiter) -> Result<(), sluicegate_redis::Error> {
    /// let v = rl.check_many(&[("a", 1), ("b", 1), ("a", 1)]).await;
    /// assert_eq!(v.len(), 3);
    /// # Ok(()) }
    /// ```
    pub async fn check_many(&self, items: &[(&str, u64)]) -> Vec<Result<Verdict, Error>> {
        let chunk = self.inner.cfg.pipeline_max.max(1);
        let mut out = Vec::with_capacity(items.len());
        if self.inner.link.is_cluster() {
            // Concurrent calls, which the cluster connection pipelines per node,
            // a bounded group at a time.
            for group in items.chunks(chunk) {
                let calls = group.iter().map(|(k, n)| self.check_n(k, *n));
                out.extend(futures_util::future::join_all(calls).await);
            }
            return out;
        }
        let mut failed = false;
        for group in items.chunks(chunk) {
            let replies = if failed {
                group.iter().map(|_| Err(Error::Timeout)).collect()
            } else {
                self.pipelined(group, Mode::Consume).await
            };
            failed = failed
                || replies
                    .iter()
                    .any(|r| matches!(r, Err(e) if e.is_unavailable()));
            for (&(key, n), r) in group.iter().zip(replies) {
                out.push(self.answer(key, n, true, r));
            }
        }
        out
    }

    /// One pipeline of `EVALSHA`s for `items` in `mode` (one write, one read); the items
    /// that got `NOSCRIPT` (they did not run) go again as `EVAL`s. An item above
    /// the capacity is its error, never sent.
    pub(crate) async fn pipelined(
        &self,
        items: &[(&str, u64)],
        mode: Mode,
    ) -> Vec<Result<Reply, Error>> {
        let inner = &self.inner;
        let link = &inner.link;
        let mut results: Vec<Option<Result<Reply, Error>>> = items
            .iter()
            .map(|&(_, n)| self.within_capacity(n).err().map(Err))
            .collect();
        let mut pending: Vec<usize> = (0..items.len()).filter(|&i| results[i].is_none()).collect();
        if pending.is_empty() {
            return results.into_iter().flatten().collect();
        }
        let fail_all = |results: &mut Vec<Option<Result<Reply, Error>>>, e: Error| {
            results
                .iter_mut()
                .map(|r| r.take().unwrap_or_else(|| Err(e.clone())))
                .collect::<Vec<_>>()
        };
        let permit = link.breaker.permit();
        if permit == Permit::Reject {
            return fail_all(&mut results, Error::CircuitOpen);
        }
        let mut conn = match link.conn(&link.breaker).await {
            Ok(c) => c,
            Err(e) => {
                link.settle(&link.breaker, permit, Some(&e));
                return fail_all(&mut results, e);
            }
        };
        for eval in [false, true] {
            if pending.is_empty() {
                break;
            }
            let mut pipe = redis::pipe();
            pipe.ignore_errors();
            for &j in &pending {
                let (key, n) = items[j];
                let limit = &inner.limit;
                pipe.add_command(
                    inner
                        .scripts
                        .command(eval, &self.redis_key(key), |c| limit.push_args(c, n, mode)),
                );
            }
            // The server runs a pipeline's scripts one after another: its timeout
            // grows with its length (one more timeout per 128 calls).
            let len = u32::try_from(pending.len()).unwrap_or(u32::MAX);
            let timeout = link.timeout() + link.timeout() * len / 128;
            let replies = match tokio::time::timeout(timeout, conn.pipeline(&pipe)).await {
                Ok(Ok(r)) if r.len() == pending.len() => r,
                other => {
                    // Timed out or broken: none of it is replayed.
                    let e = match other {
                        Ok(Err(e)) if !e.is_timeout() => Error::Redis(e),
                        _ => Error::Timeout,
                    };
                    link.settle(&link.breaker, permit, Some(&e));
                    return fail_all(&mut results, e);
                }
            };
            let mut again = Vec::new();
            for (&j, r) in pending.iter().zip(replies) {
                match r {
                    Err(e) if !eval && crate::script::no_script(&e) => again.push(j),
                    Err(e) => results[j] = Some(Err(Error::from_redis(e))),
                    Ok(v) => results[j] = Some(Reply::parse(&v)),
                }
            }
            pending = again;
        }
        link.settle(&link.breaker, permit, None);
        fail_all(&mut results, Error::Timeout)
    }
}
