//! What the store tests share: a store of each backend to run one test body
//! against ([`Fixture`]), and waiting helpers.
//!
//! PostgreSQL: `SLUICEGATE_TEST_POSTGRES_URL` names a database (scripts/test-store
//! starts a server and sets it); each fixture is a schema of its own in it
//! (`options=-c search_path=...`). Unset, the PostgreSQL tests skip, saying so,
//! unless `SLUICEGATE_TEST_POSTGRES_REQUIRED` is set (then they fail).
#![allow(dead_code)]

use std::path::PathBuf;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use sluicegate_policy::Policy;
use sluicegate_policy::store::{FollowOptions, Store};

/// Which backend a fixture is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Sqlite,
    Postgres,
}

/// A fresh, empty store of one backend.
pub struct Fixture {
    pub kind: Kind,
    /// The store's URL.
    pub url: String,
    /// SQLite: the directory holding `rules.db`.
    pub dir: tempfile::TempDir,
    /// PostgreSQL: the fixture's schema.
    pub schema: Option<String>,
}

#[cfg(feature = "postgres")]
static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// The PostgreSQL database's URL, if the environment names one.
pub fn postgres_url() -> Option<String> {
    match std::env::var("SLUICEGATE_TEST_POSTGRES_URL") {
        Ok(url) if !url.is_empty() => Some(url),
        _ => {
            assert!(
                std::env::var_os("SLUICEGATE_TEST_POSTGRES_REQUIRED").is_none(),
                "SLUICEGATE_TEST_POSTGRES_REQUIRED is set but SLUICEGATE_TEST_POSTGRES_URL is not"
            );
            eprintln!(
                "SLUICEGATE_TEST_POSTGRES_URL is unset: PostgreSQL test skipped (scripts/test-store runs it)"
            );
            None
        }
    }
}

/// An environment variable scripts/test-store sets with the URL.
pub fn env(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| panic!("{name} is unset (scripts/test-store sets it)"))
}

/// `url` with a query parameter added.
pub fn with_param(url: &str, param: &str) -> String {
    let sep = if url.contains('?') { '&' } else { '?' };
    format!("{url}{sep}{param}")
}

/// Runs `sql` on the database at `url` (a connection of the test's own).
#[cfg(feature = "postgres")]
pub fn postgres_exec(url: &str, sql: &str) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let (client, conn) = tokio_postgres::connect(url, tokio_postgres::NoTls)
            .await
            .unwrap_or_else(|e| panic!("connecting to {url}: {e}"));
        tokio::spawn(conn);
        client
            .batch_execute(sql)
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e:?}"));
    });
}

impl Fixture {
    pub fn sqlite() -> Fixture {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite:{}", dir.path().join("rules.db").display());
        Fixture {
            kind: Kind::Sqlite,
            url,
            dir,
            schema: None,
        }
    }

    /// A fresh schema in the test database (`None`: no database to test on).
    #[cfg(feature = "postgres")]
    pub fn postgres() -> Option<Fixture> {
        let base = postgres_url()?;
        let schema = format!(
            "t_{}_{}_{}",
            std::process::id(),
            NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .subsec_nanos()
        );
        postgres_exec(&base, &format!("CREATE SCHEMA {schema}"));
        let url = with_param(&base, &format!("options=-c%20search_path%3D{schema}"));
        Some(Fixture {
            kind: Kind::Postgres,
            url,
            dir: tempfile::tempdir().unwrap(),
            schema: Some(schema),
        })
    }

    /// The store, opened (made if new).
    pub fn store(&self) -> Store {
        Store::open(&self.url).unwrap_or_else(|e| panic!("{e}"))
    }

    /// Runs SQL around the store (as a hand or an older writer would): `sqlite`
    /// on the SQLite file, `postgres` on the fixture's schema.
    pub fn raw(&self, sqlite: &str, postgres: &str) {
        match self.kind {
            Kind::Sqlite => {
                let conn = rusqlite::Connection::open(self.dir.path().join("rules.db")).unwrap();
                conn.execute_batch(sqlite).unwrap();
            }
            #[cfg(feature = "postgres")]
            Kind::Postgres => postgres_exec(&self.url, postgres),
            #[cfg(not(feature = "postgres"))]
            Kind::Postgres => unreachable!("{postgres}"),
        }
    }

    /// A file beside the store (snapshots).
    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }
}

/// The PostgreSQL server's control, for the outage tests: one test at a time
/// stops it (the guard keeps the others waiting).
pub struct Server {
    _serial: MutexGuard<'static, ()>,
    ctl: String,
}

static SERIAL: Mutex<()> = Mutex::new(());

impl Server {
    pub fn take() -> Server {
        Server {
            _serial: SERIAL.lock().unwrap_or_else(PoisonError::into_inner),
            ctl: env("SLUICEGATE_TEST_POSTGRES_CTL"),
        }
    }

    fn run(&self, what: &str) {
        let status = std::process::Command::new(&self.ctl)
            .arg(what)
            .status()
            .unwrap();
        assert!(status.success(), "{} {what}: {status}", self.ctl);
    }

    pub fn stop(&self) {
        self.run("stop");
    }

    pub fn start(&self) {
        self.run("start");
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        // A failed test leaves the server up for the next.
        let _ = std::process::Command::new(&self.ctl).arg("start").status();
    }
}

/// Waits up to `limit` for `done`; the time it took, or `None`.
pub fn wait_for(limit: Duration, mut done: impl FnMut() -> bool) -> Option<Duration> {
    let start = Instant::now();
    while start.elapsed() < limit {
        if done() {
            return Some(start.elapsed());
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    None
}

/// Whether a check of `attrs` (a peek: cost 0) is matched by rule `name`.
pub fn in_force(p: &Policy, attrs: &[(&str, &str)], name: &str) -> bool {
    p.check_n(attrs, 0).rules().any(|r| r.name == name)
}

/// Polls every 20 ms.
pub fn fast() -> FollowOptions {
    FollowOptions::new().poll_interval(Duration::from_millis(20))
}

/// One test body per backend: `per_backend!(a, b)` makes `sqlite::a`,
/// `postgres::a`, ... each calling `a(&Fixture)`.
#[macro_export]
macro_rules! per_backend {
    ($($name:ident),* $(,)?) => {
        mod sqlite {
            $(
                #[test]
                fn $name() {
                    super::$name(&$crate::store_support::Fixture::sqlite());
                }
            )*
        }
        #[cfg(feature = "postgres")]
        mod postgres {
            $(
                #[test]
                fn $name() {
                    if let Some(f) = $crate::store_support::Fixture::postgres() {
                        super::$name(&f);
                    }
                }
            )*
        }
    };
}
