//! Lease refreshes of many keys in one pipeline: the first lease asked for opens
//! a batch, the leases of other keys asked for before its task runs join it,
//! and the batch is one pipeline of lease script calls (one write, one read,
//! one timeout; [`crate::RedisLimiter::check_many`]'s machinery). At a window's
//! start every active key asks for its lease at about the same moment: they go
//! out together instead of one round trip each. A cluster's keys live on
//! several nodes: there each lease is its own call (the connection pipelines
//! them per node).

use std::sync::{Mutex, PoisonError};

use tokio::sync::oneshot;

use super::HybridLimiter;
use crate::error::Error;
use crate::limit::{Mode, Reply};

/// One lease waiting for its batch: the key, the units asked for, where the
/// reply goes.
type Waiting = (String, u64, oneshot::Sender<Result<Reply, Error>>);

/// The batch being gathered (empty: none open).
#[derive(Default)]
pub(crate) struct Batch(Mutex<Vec<Waiting>>);

impl HybridLimiter {
    /// Leases up to `n` units of `key` (as [`crate::RedisLimiter::try_lease`]),
    /// sent with the other keys' leases asked for meanwhile.
    pub(super) async fn lease_batched(&self, key: &str, n: u64) -> Result<Reply, Error> {
        let remote = &self.inner.remote;
        if remote.inner.link.is_cluster() {
            return remote.try_lease(key, n).await;
        }
        let (tx, rx) = oneshot::channel();
        let open = {
            let mut q = self
                .inner
                .batch
                .0
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            q.push((key.to_owned(), n, tx));
            q.len() == 1
        };
        if open {
            // Its own task, so that a check that gives up (its future dropped)
            // strands no other key's lease.
            let this = self.clone();
            tokio::spawn(async move { this.send_batch().await });
        }
        // A batch that vanished (its task panicked or the runtime shut down):
        // unavailable, like a timeout.
        rx.await.unwrap_or(Err(Error::Timeout))
    }

    /// Sends the open batch once the tasks ready to run have asked for theirs.
    async fn send_batch(&self) {
        tokio::task::yield_now().await;
        let batch = std::mem::take(
            &mut *self
                .inner
                .batch
                .0
                .lock()
                .unwrap_or_else(PoisonError::into_inner),
        );
        let remote = &self.inner.remote;
        if let [(key, n, _)] = batch.as_slice() {
            let r = remote.try_lease(key, *n).await;
            if let Some((_, _, tx)) = batch.into_iter().next() {
                let _ = tx.send(r);
            }
            return;
        }
        let capacity = remote.limit().capacity();
        let chunk = remote.inner.cfg.pipeline_max.max(1);
        let mut batch = batch.into_iter().peekable();
        while batch.peek().is_some() {
            let group: Vec<Waiting> = batch.by_ref().take(chunk).collect();
            let items: Vec<(&str, u64)> = group
                .iter()
                .map(|(k, n, _)| (k.as_str(), (*n).clamp(1, capacity)))
                .collect();
            let replies = remote.pipelined(&items, Mode::Lease).await;
            for ((_, _, tx), r) in group.into_iter().zip(replies) {
                let _ = tx.send(r);
            }
        }
    }
}
