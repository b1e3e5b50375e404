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
//!
//! On a plain TCP or Unix socket a pooled connection speaks RESP2 itself
//! ([`crate::resp`]) after the handshake redis-rs's connections make (`AUTH`,
//! `SELECT`; no `CLIENT SETINFO`); over TLS (or with `protocol=resp3` in the
//! URL) it is redis-rs's synchronous connection, with its rustls setup. A
//! forked child never writes to its parent's sockets: the pool notices the new
//! process id and opens connections of its own. Fork only while no other thread
//! is inside a call: a child forked while another thread held the pool's lock
//! (mid-connect) would wait on it for good, as with any threaded client.

use core::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};
use core::time::Duration;
use std::io::{Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::sync::{Mutex, OnceLock, PoisonError};
use std::time::Instant;

use redis::{ConnectionAddr, ConnectionLike, ErrorKind, RedisError, RedisResult, Value};

use crate::conn::Backend;
use crate::resp::{self, Args, Encoder};

/// The socket under a pooled connection.
enum Wire {
    /// A plain TCP or Unix socket, written and read here ([`crate::resp`]).
    Plain {
        stream: Stream,
        /// Bytes read and not yet parsed (a reply arrives in one read but
        /// rarely).
        input: Vec<u8>,
    },
    /// TLS (and a `protocol=resp3` URL): redis-rs's synchronous connection,
    /// with its own rustls setup and parser.
    Redis(redis::Connection),
}

enum Stream {
    Tcp(TcpStream),
    #[cfg(unix)]
    Unix(std::os::unix::net::UnixStream),
}

impl Stream {
    fn set_timeouts(&self, t: Duration) -> std::io::Result<()> {
        match self {
            Self::Tcp(s) => {
                s.set_read_timeout(Some(t))?;
                s.set_write_timeout(Some(t))
            }
            #[cfg(unix)]
            Self::Unix(s) => {
                s.set_read_timeout(Some(t))?;
                s.set_write_timeout(Some(t))
            }
        }
    }

    fn set_read_timeout(&self, t: Duration) -> std::io::Result<()> {
        match self {
            Self::Tcp(s) => s.set_read_timeout(Some(t)),
            #[cfg(unix)]
            Self::Unix(s) => s.set_read_timeout(Some(t)),
        }
    }

    fn write_all(&mut self, b: &[u8]) -> std::io::Result<()> {
        match self {
            Self::Tcp(s) => s.write_all(b),
            #[cfg(unix)]
            Self::Unix(s) => s.write_all(b),
        }
    }

    fn read(&mut self, b: &mut [u8]) -> std::io::Result<usize> {
        match self {
            Self::Tcp(s) => s.read(b),
            #[cfg(unix)]
            Self::Unix(s) => s.read(b),
        }
    }
}

/// A connection of the pool, and the read timeout its socket has.
pub(crate) struct DirectConn {
    wire: Wire,
    /// False once a call broke it (an I/O error, a reply that does not parse):
    /// it is closed, not put back.
    open: bool,
    /// The command being written.
    encoder: Encoder,
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
    /// Opens a connection to the server of `client` within `connect` and
    /// authenticates as redis-rs would (`AUTH [user] password`, again with the
    /// password alone on a server older than ACLs, then `SELECT db`); its
    /// socket's timeouts are then `timeout`. TLS and RESP3 go through redis-rs's
    /// connection.
    fn open(client: &redis::Client, connect: Duration, timeout: Duration) -> RedisResult<Self> {
        let start = Instant::now();
        let info = client.get_connection_info();
        let plain = info.redis_settings().protocol() == redis::ProtocolVersion::RESP2;
        let stream = match info.addr() {
            ConnectionAddr::Tcp(host, port) if plain => Stream::Tcp(tcp(host, *port, connect)?),
            #[cfg(unix)]
            ConnectionAddr::Unix(path) if plain => {
                Stream::Unix(std::os::unix::net::UnixStream::connect(path)?)
            }
            _ => {
                let conn = client.get_connection_with_timeout(connect)?;
                conn.set_read_timeout(Some(timeout))?;
                conn.set_write_timeout(Some(timeout))?;
                return Ok(Self::new(Wire::Redis(conn), timeout));
            }
        };
        let left = connect.saturating_sub(start.elapsed());
        if left.is_zero() {
            return Err(timed_out());
        }
        stream.set_timeouts(left)?;
        let mut c = Self::new(
            Wire::Plain {
                stream,
                input: Vec::new(),
            },
            left,
        );
        c.authenticate(info.redis_settings())?;
        if let Wire::Plain { stream, .. } = &c.wire {
            stream.set_timeouts(timeout)?;
        }
        c.read_timeout = timeout;
        Ok(c)
    }

    fn new(wire: Wire, timeout: Duration) -> Self {
        Self {
            wire,
            open: true,
            encoder: Encoder::default(),
            generation: 0,
            read_timeout: timeout,
            started: Instant::now(),
            timeout,
        }
    }

    /// The handshake of redis-rs's own connections (its `setup_connection`),
    /// with the same errors.
    fn authenticate(&mut self, info: &redis::RedisConnectionInfo) -> RedisResult<()> {
        let failed = || {
            RedisError::from((
                ErrorKind::AuthenticationFailed,
                "Password authentication failed",
            ))
        };
        if let Some(password) = info.password() {
            let user = info.username();
            let r = self.exchange(|e| {
                e.text(b"AUTH");
                if let Some(u) = user {
                    e.text(u.as_bytes());
                }
                e.text(password.as_bytes());
            })?;
            match r {
                Value::Okay => {}
                // A server older than ACLs (no user names): the password alone.
                Value::ServerError(e)
                    if user.is_some()
                        && e.details().is_some_and(|d| {
                            d.contains("wrong number of arguments for 'auth' command")
                        }) =>
                {
                    let r = self.exchange(|e| {
                        e.text(b"AUTH");
                        e.text(password.as_bytes());
                    })?;
                    if r != Value::Okay {
                        return Err(failed());
                    }
                }
                _ => return Err(failed()),
            }
        }
        if info.db() != 0 {
            let db = info.db().to_string();
            if let Value::ServerError(e) = self.exchange(|e| {
                e.text(b"SELECT");
                e.text(db.as_bytes());
            })? {
                let refused = "Redis server refused to switch database";
                return Err(match e.details() {
                    Some(d) => (
                        redis::ServerErrorKind::ResponseError.into(),
                        refused,
                        d.to_owned(),
                    )
                        .into(),
                    None => (redis::ServerErrorKind::ResponseError.into(), refused).into(),
                });
            }
        }
        Ok(())
    }

    /// Sends the command `build` writes and reads its reply, an error reply
    /// as an error (as redis-rs's `query` has it), within what is left of the
    /// call's timeout (the socket's read and write timeouts are the whole
    /// timeout; a second command of one call, `EVAL` after `NOSCRIPT`, gets
    /// what is left).
    pub(crate) fn request(&mut self, build: impl FnOnce(&mut Encoder)) -> RedisResult<Value> {
        let left = self.timeout.saturating_sub(self.started.elapsed());
        if left.is_zero() {
            return Err(timed_out());
        }
        // Only shortened for a command that started late in its call: a
        // syscall on the second command of a call, never on the first.
        if left + Duration::from_millis(1) < self.read_timeout {
            match &self.wire {
                Wire::Plain { stream, .. } => stream.set_read_timeout(left)?,
                Wire::Redis(c) => c.set_read_timeout(Some(left))?,
            }
            self.read_timeout = left;
        }
        self.exchange(build)?.extract_error()
    }

    /// Writes the command and reads one reply, as it is.
    fn exchange(&mut self, build: impl FnOnce(&mut Encoder)) -> RedisResult<Value> {
        self.encoder.clear();
        build(&mut self.encoder);
        let r = match &mut self.wire {
            Wire::Plain { stream, input } => {
                let packed = self.encoder.packed();
                match stream.write_all(packed) {
                    Ok(()) => read_reply(stream, input),
                    Err(e) => Err(e.into()),
                }
            }
            Wire::Redis(c) => c
                .send_packed_command(self.encoder.packed())
                .and_then(|()| c.recv_response()),
        };
        if r.is_err() {
            self.open = false;
        }
        r
    }

    fn is_open(&self) -> bool {
        self.open
            && match &self.wire {
                Wire::Plain { .. } => true,
                Wire::Redis(c) => c.is_open(),
            }
    }
}

/// One reply from `stream`, whole. A reply that came in one read (nearly all
/// of them) is parsed where it was read; a longer one is gathered in `input`.
fn read_reply(stream: &mut Stream, input: &mut Vec<u8>) -> RedisResult<Value> {
    input.clear();
    let mut buf = [0u8; 1024];
    loop {
        let n = stream.read(&mut buf)?;
        if n == 0 {
            return Err(RedisError::from(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                "the server closed the connection",
            )));
        }
        let parsed = if input.is_empty() {
            resp::parse(&buf[..n])?.map(|(v, used)| (v, used, n))
        } else {
            None
        };
        let (v, used, filled) = match parsed {
            Some(p) => p,
            None => {
                input.extend_from_slice(&buf[..n]);
                match resp::parse(input)? {
                    Some((v, used)) => (v, used, input.len()),
                    None => continue,
                }
            }
        };
        input.clear();
        if used != filled {
            // One command, one reply: anything more is not this protocol.
            return Err(RedisError::from((
                ErrorKind::Parse,
                "invalid reply",
                "more bytes than one reply".to_owned(),
            )));
        }
        return Ok(v);
    }
}

/// A TCP connection to `host:port` within `within` (each address it resolves
/// to tried in turn), with `TCP_NODELAY`.
fn tcp(host: &str, port: u16, within: Duration) -> RedisResult<TcpStream> {
    let start = Instant::now();
    let mut last = None;
    for addr in (host, port).to_socket_addrs()? {
        let left = within.saturating_sub(start.elapsed());
        if left.is_zero() {
            break;
        }
        match TcpStream::connect_timeout(&addr, left) {
            Ok(s) => {
                s.set_nodelay(true)?;
                return Ok(s);
            }
            Err(e) => last = Some(e),
        }
    }
    Err(last.map_or_else(timed_out, RedisError::from))
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
    Idle(Box<DirectConn>),
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
    /// Boxed: a connection moves between the pool and its callers as a
    /// pointer, not its 200-odd bytes.
    #[allow(clippy::vec_box)]
    idle: Mutex<Vec<Box<DirectConn>>>,
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
    pub(crate) fn open(&self) -> RedisResult<Box<DirectConn>> {
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
        let mut c = DirectConn::open(client, self.connect_timeout, self.timeout)?;
        c.generation = generation;
        Ok(Box::new(c))
    }

    /// Starts a call on `c`: its timeout runs from now.
    pub(crate) fn start(&self, c: &mut DirectConn) {
        c.started = Instant::now();
        c.timeout = self.timeout;
    }

    /// Puts `c` back for the next caller, unless it is of an older generation
    /// or closed; a shortened read timeout is restored first.
    pub(crate) fn put(&self, mut c: Box<DirectConn>) {
        if c.generation != self.generation.load(Ordering::Acquire) || !c.is_open() {
            return self.close(c);
        }
        if c.read_timeout != self.timeout {
            let restored = match &c.wire {
                Wire::Plain { stream, .. } => stream.set_read_timeout(self.timeout).is_ok(),
                Wire::Redis(r) => r.set_read_timeout(Some(self.timeout)).is_ok(),
            };
            if !restored {
                return self.close(c);
            }
            c.read_timeout = self.timeout;
        }
        self.lock_idle().push(c);
    }

    /// Closes `c` (its reply may be half read: never reused).
    pub(crate) fn close(&self, c: Box<DirectConn>) {
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

    #[allow(clippy::vec_box)]
    fn lock_idle(&self) -> std::sync::MutexGuard<'_, Vec<Box<DirectConn>>> {
        self.idle.lock().unwrap_or_else(PoisonError::into_inner)
    }
}
