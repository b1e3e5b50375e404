//! The link to Redis: the connection (one multiplexed connection to a
//! standalone server, or a cluster connection), (re)connected by one task at a
//! time, and the blocking API's pool of connections its callers drive
//! themselves ([`crate::direct`]); the circuit breaker each call counts against (the server's, or on a
//! cluster the master's that serves the key's slot); and the outcome of every
//! call, classified: unavailability feeds the breaker, a per-key data error
//! does not.

use core::future::Future;
use core::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use core::time::Duration;
use std::sync::{Arc, Mutex, PoisonError, RwLock};

use crate::breaker::{Breaker, BreakerConfig, Permit};
use crate::conn::{Backend, Conn};
use crate::direct::{DirectConn, Pool, Taken};
use crate::error::Error;
use crate::nodes::{key_slot, NodeMap};
use crate::resp::Args as _;

pub(crate) struct Link {
    pub(crate) backend: Backend,
    timeout: Duration,
    connect_timeout: Duration,
    breaker_cfg: BreakerConfig,
    conn: RwLock<Option<Conn>>,
    connecting: tokio::sync::Mutex<()>,
    /// Failed connection attempts so far: a task that waited for another's attempt
    /// and sees it fail does not try again itself (no queue of timeouts).
    connect_failures: AtomicU64,
    /// The breaker of a standalone server; on a cluster, of the calls no master's
    /// breaker covers (before the first slot map, or slots it does not list).
    pub(crate) breaker: Breaker,
    /// On a cluster: each master's breaker and the slots it serves.
    nodes: RwLock<Option<NodeMap>>,
    /// A slot-map refresh is running.
    refreshing: AtomicBool,
    last_error: Mutex<Option<Error>>,
    /// The blocking API's connections (none on a cluster).
    pub(crate) direct: Pool,
}

/// The breaker a call counts against: the main one, or a cluster master's.
pub(crate) enum BreakerRef<'a> {
    Main(&'a Breaker),
    Node(Arc<Breaker>),
}

impl core::ops::Deref for BreakerRef<'_> {
    type Target = Breaker;
    fn deref(&self) -> &Breaker {
        match self {
            Self::Main(b) => b,
            Self::Node(b) => b,
        }
    }
}

impl Link {
    pub(crate) fn new(
        backend: Backend,
        timeout: Duration,
        connect_timeout: Duration,
        breaker: BreakerConfig,
        direct: usize,
    ) -> Self {
        Self {
            direct: Pool::new(&backend, direct, timeout, connect_timeout),
            breaker: Breaker::new(breaker, backend.label()),
            backend,
            timeout,
            connect_timeout,
            breaker_cfg: breaker,
            conn: RwLock::new(None),
            connecting: tokio::sync::Mutex::new(()),
            connect_failures: AtomicU64::new(0),
            nodes: RwLock::new(None),
            refreshing: AtomicBool::new(false),
            last_error: Mutex::new(None),
        }
    }

    pub(crate) fn timeout(&self) -> Duration {
        self.timeout
    }

    pub(crate) fn connect_timeout(&self) -> Duration {
        self.connect_timeout
    }

    pub(crate) fn is_cluster(&self) -> bool {
        matches!(
            self.backend,
            Backend::Cluster(_) | Backend::ClusterTls { .. }
        )
    }

    /// The breaker for the Redis key `rkey`: a standalone server's checks never
    /// touch the node map (no lock on their path).
    pub(crate) fn breaker_for(&self, rkey: &str) -> BreakerRef<'_> {
        if !self.is_cluster() {
            return BreakerRef::Main(&self.breaker);
        }
        let node = self.nodes.read().ok().and_then(|m| {
            m.as_ref()
                .and_then(|m| m.breaker(key_slot(rkey.as_bytes())).cloned())
        });
        match node {
            Some(b) => BreakerRef::Node(b),
            None => BreakerRef::Main(&self.breaker),
        }
    }

    /// Whether any breaker is open.
    pub(crate) fn any_open(&self) -> bool {
        self.breaker.is_open()
            || self
                .nodes
                .read()
                .ok()
                .is_some_and(|m| m.as_ref().is_some_and(NodeMap::any_open))
    }

    /// Times a circuit opened: the main breaker's and every known master's.
    pub(crate) fn times_opened(&self) -> u64 {
        let nodes = self
            .nodes
            .read()
            .ok()
            .and_then(|m| m.as_ref().map(NodeMap::times_opened))
            .unwrap_or(0);
        self.breaker.times_opened() + nodes
    }

    pub(crate) fn last_error(&self) -> Option<Error> {
        self.last_error
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    fn record(&self, e: &Error) {
        *self
            .last_error
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some(e.clone());
    }

    /// Runs `call` on the connection under `rkey`'s breaker and the timeout, and
    /// records its outcome. `Err(CircuitOpen)` without asking when the breaker
    /// says no.
    pub(crate) async fn run<T, F, Fut>(self: &Arc<Self>, rkey: &str, call: F) -> Result<T, Error>
    where
        F: FnOnce(Conn) -> Fut,
        Fut: Future<Output = Result<T, Error>>,
    {
        let breaker = self.breaker_for(rkey);
        let permit = breaker.permit();
        if permit == Permit::Reject {
            return Err(Error::CircuitOpen);
        }
        let result = async {
            let conn = self.conn(&breaker).await?;
            match tokio::time::timeout(self.timeout, call(conn)).await {
                Ok(r) => r,
                Err(_) => Err(Error::Timeout),
            }
        }
        .await;
        self.settle(&breaker, permit, result.as_ref().err());
        result
    }

    /// Records a call's outcome on its breaker. Unavailability counts as a
    /// failure; a per-key data error is an answer (the server is fine). After a
    /// timeout or a broken connection to a standalone server, starts from a fresh
    /// connection (a SIGSTOPped server keeps its socket open and would never
    /// answer). A cluster connection is kept: it reconnects to a master on its
    /// own, and dropping it would cost the live masters' keys a reconnect too.
    pub(crate) fn settle(
        self: &Arc<Self>,
        breaker: &Breaker,
        permit: Permit,
        error: Option<&Error>,
    ) {
        match error {
            None => breaker.success(permit),
            Some(e) if !e.is_unavailable() => {
                self.record(e);
                breaker.success(permit);
            }
            Some(e) => {
                self.record(e);
                if breaker.failure(permit) && self.is_cluster() {
                    // A master's circuit opened: a failover or a slot migration
                    // may be why; read the slot map again.
                    self.refresh_nodes();
                }
                if !server_said(e) && !self.is_cluster() {
                    self.drop_conn();
                }
            }
        }
    }

    /// Reads `CLUSTER SLOTS` on a task of its own (no check waits for it) and
    /// installs the map, keeping the breakers of masters it already knew.
    pub(crate) fn refresh_nodes(self: &Arc<Self>) {
        let Some(Conn::Cluster(mut conn)) = self.current() else {
            return;
        };
        if self.refreshing.swap(true, Ordering::Acquire) {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            self.refreshing.store(false, Ordering::Release);
            return;
        };
        let this = Arc::clone(self);
        runtime.spawn(async move {
            let cmd = redis::cmd("CLUSTER").arg("SLOTS").clone();
            let timeout = this.timeout.max(Duration::from_millis(250));
            if let Ok(Ok(reply)) =
                tokio::time::timeout(timeout, cmd.query_async::<redis::Value>(&mut conn)).await
            {
                if let Ok(mut g) = this.nodes.write() {
                    if let Some(map) =
                        NodeMap::from_cluster_slots(&reply, g.as_ref(), this.breaker_cfg)
                    {
                        *g = Some(map);
                    }
                }
            }
            this.refreshing.store(false, Ordering::Release);
        });
    }

    /// Drops the connection, and the pool's idle connections (those in use are
    /// closed when given back).
    pub(crate) fn drop_conn(&self) {
        if let Ok(mut g) = self.conn.write() {
            *g = None;
        }
        self.direct.clear();
    }

    /// [`Self::run`] on a pooled connection, driven by the calling thread
    /// ([`crate::direct`]): the same breaker, timeout, classification and
    /// outcome records. `None` (nothing done, no permit taken) when the pool
    /// has no connection to give: the caller goes through [`Self::run`].
    pub(crate) fn run_direct<T>(
        self: &Arc<Self>,
        rkey: &str,
        call: impl FnOnce(&mut DirectConn) -> Result<T, Error>,
    ) -> Option<Result<T, Error>> {
        // Taken before the permit: a half-open breaker's one probe is never
        // taken by a call that then goes elsewhere.
        let taken = self.direct.take()?;
        let breaker = self.breaker_for(rkey);
        let permit = breaker.permit();
        if permit == Permit::Reject {
            self.direct.untake(taken);
            return Some(Err(Error::CircuitOpen));
        }
        let mut conn = match taken {
            Taken::Idle(c) => c,
            Taken::Slot => match self.direct_open(&breaker) {
                Ok(c) => c,
                Err(e) => {
                    self.direct.release();
                    self.settle(&breaker, permit, Some(&e));
                    return Some(Err(e));
                }
            },
        };
        self.direct.start(&mut conn);
        self.direct.calls.fetch_add(1, Ordering::Relaxed);
        let result = call(&mut conn);
        match &result {
            Err(e) if !in_step(e) => self.direct.close(conn),
            _ => self.direct.put(conn),
        }
        self.settle(&breaker, permit, result.as_ref().err());
        Some(result)
    }

    /// Opens a pooled connection, one attempt at a time: a caller that waited
    /// for another's attempt and sees it fail does not try again itself (as
    /// [`Self::conn`]), nor while `breaker` is open.
    fn direct_open(&self, breaker: &Breaker) -> Result<Box<DirectConn>, Error> {
        let failures = self.connect_failures.load(Ordering::Relaxed);
        let _guard = self
            .direct
            .connecting
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if self.connect_failures.load(Ordering::Relaxed) != failures || breaker.is_open() {
            return Err(Error::CircuitOpen);
        }
        self.direct_connect()
    }

    /// Opens a pooled connection now (the caller holds the pool's `connecting`).
    fn direct_connect(&self) -> Result<Box<DirectConn>, Error> {
        self.direct.open().map_err(|e| {
            let e = if e.is_timeout() {
                Error::Timeout
            } else {
                Error::Redis(e)
            };
            self.connect_failures.fetch_add(1, Ordering::Relaxed);
            self.record(&e);
            e
        })
    }

    /// [`Self::ping`] on a pooled connection (opened if none is idle), which
    /// then stays in the pool; `None` when the pool has none to give.
    pub(crate) fn ping_direct(&self) -> Option<Result<(), Error>> {
        let mut conn = match self.direct.take()? {
            Taken::Idle(c) => c,
            Taken::Slot => {
                let opened = {
                    let _guard = self
                        .direct
                        .connecting
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner);
                    self.direct_connect()
                };
                match opened {
                    Ok(c) => c,
                    Err(e) => {
                        self.direct.release();
                        return Some(Err(e));
                    }
                }
            }
        };
        self.direct.start(&mut conn);
        match conn.request(|e| e.text(b"PING")) {
            Ok(_) => {
                self.direct.put(conn);
                Some(Ok(()))
            }
            Err(e) => {
                let e = if e.is_timeout() {
                    Error::Timeout
                } else {
                    Error::Redis(e)
                };
                self.record(&e);
                self.direct.close(conn);
                Some(Err(e))
            }
        }
    }

    /// The connection, (re)connecting if there is none, unless `breaker` (the
    /// calling check's) opened meanwhile or another task's attempt just failed.
    pub(crate) async fn conn(self: &Arc<Self>, breaker: &Breaker) -> Result<Conn, Error> {
        if let Some(c) = self.current() {
            return Ok(c);
        }
        let failures = self.connect_failures.load(Ordering::Relaxed);
        let _guard = self.connecting.lock().await;
        if let Some(c) = self.current() {
            return Ok(c);
        }
        if self.connect_failures.load(Ordering::Relaxed) != failures || breaker.is_open() {
            return Err(Error::CircuitOpen);
        }
        self.connect_now().await
    }

    /// Connects now (the caller holds `connecting`), keeping the connection.
    async fn connect_now(self: &Arc<Self>) -> Result<Conn, Error> {
        let c = match self
            .backend
            .connect(self.connect_timeout, self.timeout)
            .await
        {
            Ok(c) => c,
            Err(e) => {
                self.connect_failures.fetch_add(1, Ordering::Relaxed);
                self.record(&e);
                return Err(e);
            }
        };
        if let Ok(mut g) = self.conn.write() {
            *g = Some(c.clone());
        }
        if self.is_cluster() {
            self.refresh_nodes();
        }
        Ok(c)
    }

    /// Connects if there is no connection and sends `PING`: every error is
    /// returned as it is (a refused connection, a wrong password, `NOAUTH`, a DB
    /// index out of range, a server that does not speak the protocol), and kept
    /// as the last error. The breaker is not consulted, and a failure does not
    /// count against it.
    pub(crate) async fn ping(self: &Arc<Self>) -> Result<(), Error> {
        let conn = match self.current() {
            Some(c) => c,
            None => {
                let _guard = self.connecting.lock().await;
                match self.current() {
                    Some(c) => c,
                    None => self.connect_now().await?,
                }
            }
        };
        let mut conn = conn;
        let ping = redis::cmd("PING");
        let result = match tokio::time::timeout(self.timeout, conn.query(&ping)).await {
            Ok(Ok(_)) => Ok(()),
            // Everything PING can hit is about the server, none about a key.
            Ok(Err(e)) if e.is_timeout() => Err(Error::Timeout),
            Ok(Err(e)) => Err(Error::Redis(e)),
            Err(_) => Err(Error::Timeout),
        };
        if let Err(e) = &result {
            self.record(e);
            if !self.is_cluster() {
                self.drop_conn();
            }
        }
        result
    }

    pub(crate) fn current(&self) -> Option<Conn> {
        self.conn.read().ok().and_then(|g| g.clone())
    }
}

/// Whether the server itself answered with `e` (an error reply about itself:
/// the connection is fine).
fn server_said(e: &Error) -> bool {
    matches!(e, Error::Redis(r) if matches!(
        r.kind(),
        redis::ErrorKind::Server(_) | redis::ErrorKind::Extension
    ))
}

/// Whether a connection that failed a call with `e` is still in step with the
/// server: the server answered (an error reply, or a reply the script does not
/// make), so no reply is left half read.
fn in_step(e: &Error) -> bool {
    matches!(e, Error::Data(_) | Error::Reply(_)) || server_said(e)
}
