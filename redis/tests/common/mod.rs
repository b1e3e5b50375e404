//! Shared by the integration tests: the servers scripts/test-redis started, and
//! servers of the tests' own for the fault tests.
#![allow(dead_code)]

pub mod fault;

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use sluicegate_redis::{Backend, Config, Limit, RedisLimiter};

fn env(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| {
        panic!("{name} is not set: run scripts/test-redis, which starts the servers and sets it")
    })
}

/// The standalone server's URL.
pub fn standalone() -> Backend {
    Backend::from_url(&env("SLUICEGATE_REDIS_URL")).unwrap()
}

/// The cluster's URL.
pub fn cluster() -> Backend {
    Backend::from_url(&env("SLUICEGATE_REDIS_CLUSTER_URL")).unwrap()
}

/// Both backends, for tests that run on each.
pub fn backends() -> Vec<(&'static str, Backend)> {
    vec![("standalone", standalone()), ("cluster", cluster())]
}

/// A xorshift generator: the tests' random traffic, the same for a seed.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    /// A number below `n`.
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// Awaits `test`, failing if it takes over a minute (a hung server or lost reply
/// fails the test instead of stalling the run).
pub async fn within_a_minute<F: std::future::Future>(test: F) -> F::Output {
    tokio::time::timeout(Duration::from_secs(60), test)
        .await
        .expect("took over a minute")
}

/// A key no other test (or earlier run) uses.
pub fn fresh(tag: &str) -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    format!(
        "{tag}-{}-{t}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

/// A limiter with a generous timeout (these servers are up; the fault tests use
/// their own settings).
pub fn limiter(backend: Backend, limit: Limit) -> RedisLimiter {
    let cfg = Config {
        timeout: Duration::from_millis(500),
        connect_timeout: Duration::from_millis(500),
        ..Config::default()
    };
    RedisLimiter::new(backend, &fresh("t"), limit, cfg).unwrap()
}

/// A raw connection for inspecting keys.
pub async fn raw(backend: &Backend) -> redis::aio::MultiplexedConnection {
    let Backend::Standalone(url) = backend else {
        panic!("raw() is for the standalone server")
    };
    redis::Client::open(url.as_str())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap()
}

/// A redis-server of the test's own, which it can kill, restart and pause.
pub struct Server {
    pub port: u16,
    dir: PathBuf,
    child: Option<Child>,
    /// Extra `redis-server` arguments (e.g. cluster mode), kept for restarts.
    args: Vec<String>,
}

impl Server {
    /// A standalone server on a free port.
    pub fn start() -> Self {
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        Self::start_with(port, &[])
    }

    /// A server on `port` with extra arguments; relative paths in them (such as
    /// `--cluster-config-file nodes.conf`) land in the server's own directory.
    pub fn start_with(port: u16, args: &[&str]) -> Self {
        let dir = std::env::temp_dir().join(fresh("sluicegate-fault"));
        std::fs::create_dir_all(&dir).unwrap();
        let mut s = Self {
            port,
            dir,
            child: None,
            args: args.iter().map(|a| a.to_string()).collect(),
        };
        s.spawn();
        s
    }

    /// One command, or `None` if the server does not answer it.
    pub fn cmd(&self, args: &[&str]) -> Option<redis::Value> {
        let mut c = redis::Client::open(self.url())
            .ok()?
            .get_connection()
            .ok()?;
        let mut cmd = redis::cmd(args[0]);
        for a in &args[1..] {
            cmd.arg(*a);
        }
        cmd.query(&mut c).ok()
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    fn spawn(&mut self) {
        let bin =
            std::env::var("SLUICEGATE_REDIS_SERVER").unwrap_or_else(|_| "redis-server".into());
        let child = Command::new(bin)
            .args([
                "--bind",
                "127.0.0.1",
                "--port",
                &self.port.to_string(),
                "--save",
                "",
                "--appendonly",
                "no",
            ])
            .arg("--dir")
            .arg(&self.dir)
            .args(&self.args)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server (set SLUICEGATE_REDIS_SERVER or run scripts/test-redis)");
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            if let Ok(mut c) = redis::Client::open(self.url()).unwrap().get_connection() {
                if redis::cmd("PING").query::<String>(&mut c).is_ok() {
                    return;
                }
            }
            assert!(
                Instant::now() < deadline,
                "redis-server did not start on {}",
                self.port
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn signal(&self, sig: &str) {
        let pid = self.child.as_ref().unwrap().id().to_string();
        let ok = Command::new("kill")
            .args([sig, &pid])
            .status()
            .unwrap()
            .success();
        assert!(ok, "kill {sig} {pid}");
    }

    /// SIGKILL: the server is gone, with its data and script cache.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// A new, empty server on the same port (script cache lost: NOSCRIPT).
    pub fn restart(&mut self) {
        self.kill();
        self.spawn();
    }

    /// SIGSTOP: the socket stays open, nothing answers.
    pub fn pause(&self) {
        self.signal("-STOP");
    }

    /// SIGCONT.
    pub fn resume(&self) {
        self.signal("-CONT");
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if self.child.is_some() {
            self.signal("-CONT");
        }
        self.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Whether admissions, each known to lie in Redis time `[before, after]` (µs),
/// can be spread over the aligned windows of `w_us` with at most `limit` in each.
/// An admission may lie in any window its interval meets; for intervals over a
/// line of windows, Hall's condition on every run of consecutive windows `i..=j`
/// decides it: the admissions that must lie in the run are at most
/// `(j − i + 1)·limit`. Returns the first run that fails, with its count.
pub fn over_limit(admitted: &[(u64, u64)], w_us: u64, limit: u64) -> Option<(u64, u64, u64)> {
    let spans: Vec<(u64, u64)> = admitted
        .iter()
        .map(|&(b, a)| (b / w_us, a / w_us))
        .collect();
    let first = spans.iter().map(|s| s.0).min()?;
    let last = spans.iter().map(|s| s.1).max()?;
    for i in first..=last {
        for j in i..=last {
            let inside = spans.iter().filter(|s| s.0 >= i && s.1 <= j).count() as u64;
            if inside > (j - i + 1) * limit {
                return Some((i, j, inside));
            }
        }
    }
    None
}

/// Misconfigured URLs for a server on `port` whose password is `s3cret`: what
/// each is, the URL, and what `connect()`'s error (with its causes) must say.
pub fn misconfigured(port: u16) -> [(&'static str, String, &'static str); 3] {
    [
        (
            "wrong password",
            format!("redis://:nope@127.0.0.1:{port}"),
            "authentication failed",
        ),
        ("no password", format!("redis://127.0.0.1:{port}"), "NOAUTH"),
        (
            "DB 99",
            format!("redis://:s3cret@127.0.0.1:{port}/99"),
            "DB index is out of range",
        ),
    ]
}

/// An error and its causes, joined by ` / `.
pub fn chain(e: &sluicegate_redis::Error) -> String {
    let mut s = e.to_string();
    let mut cur: Option<&dyn std::error::Error> = std::error::Error::source(e);
    while let Some(c) = cur {
        s.push_str(&format!(" / {c}"));
        cur = c.source();
    }
    s
}
