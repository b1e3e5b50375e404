//! The blocking API's own connections: a small pool of synchronous connections
//! per limiter, each driven by the thread that calls.
//!
//! A blocking call takes an idle connection (or opens one, up to
//! [`crate::Config::blocking_connections`]), writes its command and reads the
//! reply itself, and puts the connection back: no other thread is woken, so a
//! sequential caller costs one round trip, as a raw socket would. A pooled
//! connection is only ever used by one thread at a time; the pool hands it from
//! one caller to the next. With every connection in use (more threads than the
//! bound calling at once), the call goes through the multiplexed connection
//! instead, driven by the limiter's runtime, where concurrent calls pipeline.
//! A cluster has no pool (its connection routes by slot and follows the
//! cluster's map; one such connection per thread would multiply both), and
//! neither do batches or hybrid lease refreshes (they pipeline on the
//! multiplexed connection).
//!
//! Everything else is the async path's: the same commands (`EVALSHA`, `EVAL` on
//! `NOSCRIPT`, [`crate::script`]), the same reply parsing and error
//! classification, the same breaker, timeout and failure policy
//! ([`crate::link::Link::run_direct`]). A connection whose reply was not read
//! in full (a timeout, a broken stream) is closed, never reused; a failure that
//! drops the multiplexed connection drops the idle pooled ones too.

use core::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};
use core::time::Duration;
use std::sync::{Mutex, OnceLock, PoisonError};
use std::time::Instant;

use redis::{Cmd, ConnectionLike, RedisError, RedisResult, Value};

use crate::conn::Backend;

/// A synchronous connection of the pool, and the read timeout its socket has.
pub(crate) struct DirectConn {
    conn: redis::Connection,
    /// The pool's generation when it was opened: an older one is closed, not
    /// put back.
    generation: u64,
    /// The socket's read timeout now.
    read_timeout: Duration,
    /// When the current call started and its timeout.
    started: Instant,
    timeout: Duration,
}

impl DirectConn {
    /// Sends `cmd` and reads its reply, within what is left of the call's
    /// timeout (the socket's read and write timeouts are the whole timeout; a
    /// second command of one call, `EVAL` after `NOSCRIPT`, gets what is left).
    pub(crate) fn query(&mut self, cmd: &Cmd) -> RedisResult<Value> {
        let left = self.timeout.saturating_sub(self.started.elapsed());
        if left.is_zero() {
            return Err(timed_out());
        }
        // Only shortened for a command that started late in its call: a
        // syscall on the second command of a call, never on the first.
        if left + Duration::from_millis(1) < self.read_timeout {
            self.conn.set_read_timeout(Some(left))?;
            self.read_timeout = left;
        }
        cmd.query(&mut self.conn)
    }
}

fn timed_out() -> RedisError {
    RedisError::from(std::io::Error::new(
        std::io::ErrorKind::TimedOut,
        "no reply within the timeout",
    ))
}

/// What [`Pool::take`] hands a caller: an idle connection, or a slot for one
/// it opens (counted already, so the pool never passes its bound).
pub(crate) enum Taken {
    Idle(DirectConn),
    Slot,
}

/// The pool of one limiter.
pub(crate) struct Pool {
    backend: Backend,
    /// The client the connections are opened from, built on first use (or why
    /// it cannot be: each attempt to open one fails with that).
    client: OnceLock<RedisResult<redis::Client>>,
    bound: usize,
    timeout: Duration,
    connect_timeout: Duration,
    idle: Mutex<Vec<DirectConn>>,
    /// Connections open or being opened (idle, in use, and reserved slots).
    open: AtomicUsize,
    /// Bumped to close every connection opened before.
    generation: AtomicU64,
    /// The process the connections belong to: a forked child must not write to
    /// its parent's sockets (see [`Self::take`]).
    pid: AtomicU32,
    /// One connection attempt at a time (see `Link::direct_open`).
    pub(crate) connecting: Mutex<()>,
    /// Script calls made on a pooled connection.
    pub(crate) calls: AtomicU64,
}

impl Pool {
    /// The pool of a limiter on `backend`: none on a cluster or with a bound of 0.
    pub(crate) fn new(
        backend: &Backend,
        bound: usize,
        timeout: Duration,
        connect_timeout: Duration,
    ) -> Self {
        let cluster = matches!(backend, Backend::Cluster(_) | Backend::ClusterTls { .. });
        Self {
            backend: backend.clone(),
            client: OnceLock::new(),
            bound: if cluster { 0 } else { bound },
            timeout,
            connect_timeout,
            idle: Mutex::new(Vec::new()),
            open: AtomicUsize::new(0),
            generation: AtomicU64::new(0),
            pid: AtomicU32::new(std::process::id()),
            connecting: Mutex::new(()),
            calls: AtomicU64::new(0),
        }
    }

    /// An idle connection, or a slot for a new one; `None` when the pool has
    /// neither (no pool, or every connection in use).
    pub(crate) fn take(&self) -> Option<Taken> {
        if self.bound == 0 {
            return None;
        }
        let mut idle = self.lock_idle();
        let pid = std::process::id();
        if self.pid.load(Ordering::Relaxed) != pid {
            // A forked child (gunicorn's workers after a `--preload` master used
            // the limiter): its parent's connections are the parent's, and a
            // reply read here would be missing there. Closing this process's
            // copy of their sockets leaves the parent's open; the calls the
            // parent had in flight have no thread here to give theirs back.
            self.generation.fetch_add(1, Ordering::AcqRel);
            idle.clear();
            self.open.store(0, Ordering::Release);
            self.pid.store(pid, Ordering::Relaxed);
        }
        if let Some(c) = idle.pop() {
            return Some(Taken::Idle(c));
        }
        drop(idle);
        self.open
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < self.bound).then_some(n + 1)
            })
            .ok()
            .map(|_| Taken::Slot)
    }

    /// Gives back what [`Self::take`] gave, unused.
    pub(crate) fn untake(&self, t: Taken) {
        match t {
            Taken::Idle(c) => self.put(c),
            Taken::Slot => self.release(),
        }
    }

    /// Frees a slot whose connection was never opened, or was closed.
    pub(crate) fn release(&self) {
        // Never below 0 (a connection of the parent's, counted before a fork's
        // reset, cannot be given back in the child, but be sure).
        let _ = self
            .open
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1));
    }

    /// Opens a connection for a slot (the caller holds `connecting`), with the
    /// limiter's timeouts on its socket.
    pub(crate) fn open(&self) -> RedisResult<DirectConn> {
        let client = self
            .client
            .get_or_init(|| {
                self.backend.standalone_client().unwrap_or_else(|| {
                    Err(RedisError::from((
                        redis::ErrorKind::InvalidClientConfig,
                        "a cluster has no pooled connections",
                    )))
                })
            })
            .as_ref()
            .map_err(Clone::clone)?;
        let generation = self.generation.load(Ordering::Acquire);
        let conn = client.get_connection_with_timeout(self.connect_timeout)?;
        conn.set_read_timeout(Some(self.timeout))?;
        conn.set_write_timeout(Some(self.timeout))?;
        Ok(DirectConn {
            conn,
            generation,
            read_timeout: self.timeout,
            started: Instant::now(),
            timeout: self.timeout,
        })
    }

    /// Starts a call on `c`: its timeout runs from now.
    pub(crate) fn start(&self, c: &mut DirectConn) {
        c.started = Instant::now();
        c.timeout = self.timeout;
    }

    /// Puts `c` back for the next caller, unless it is of an older generation
    /// or closed; a shortened read timeout is restored first.
    pub(crate) fn put(&self, mut c: DirectConn) {
        if c.generation != self.generation.load(Ordering::Acquire) || !c.conn.is_open() {
            return self.close(c);
        }
        if c.read_timeout != self.timeout {
            if c.conn.set_read_timeout(Some(self.timeout)).is_err() {
                return self.close(c);
            }
            c.read_timeout = self.timeout;
        }
        self.lock_idle().push(c);
    }

    /// Closes `c` (its reply may be half read: never reused).
    pub(crate) fn close(&self, c: DirectConn) {
        drop(c);
        self.release();
    }

    /// Closes every idle connection and marks those in use to be closed when
    /// given back: after a broken connection or a timeout, every later call
    /// starts from a fresh one, as the multiplexed connection does.
    pub(crate) fn clear(&self) {
        if self.bound == 0 {
            return;
        }
        self.generation.fetch_add(1, Ordering::AcqRel);
        let stale = std::mem::take(&mut *self.lock_idle());
        for c in stale {
            self.close(c);
        }
    }

    fn lock_idle(&self) -> std::sync::MutexGuard<'_, Vec<DirectConn>> {
        self.idle.lock().unwrap_or_else(PoisonError::into_inner)
    }
}
