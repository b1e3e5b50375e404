//! The SQLite backend: one file, WAL mode (readers never wait for a writer), a
//! busy timeout (a writer waits for another instead of failing at once), and
//! the schema brought up to date at open.
//!
//! Migrations are a list of SQL scripts numbered by their place, the number
//! applied kept in SQLite's own `PRAGMA user_version`: one transaction takes
//! the schema from whatever version it has to the newest, and a database newer
//! than this build is refused. A dozen lines, so no migration crate (whose
//! version table would be one more thing a PostgreSQL backend must mirror).

use std::path::Path;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rusqlite::{Connection, OpenFlags, OptionalExtension, TransactionBehavior, params};

use super::{
    Action, AuditEntry, Backend, Cursor, Domain, Meta, Plan, Planner, Record, RuleRecord, Stamp,
    StoreError, StoredRule, StoredSettings, decode, json, sql_version, version,
};

/// The schema, one script per version (version = index + 1). Never edit one
/// that shipped: add the next.
const MIGRATIONS: &[&str] = &[
    // 1: domains (settings, and the change number readers poll), rules, audit.
    "CREATE TABLE domains (
        name TEXT PRIMARY KEY,
        version INTEGER NOT NULL,
        settings TEXT NOT NULL,
        settings_version INTEGER NOT NULL,
        created_at INTEGER NOT NULL,
        updated_at INTEGER NOT NULL,
        updated_by TEXT NOT NULL
    ) STRICT;
    CREATE TABLE rules (
        domain TEXT NOT NULL REFERENCES domains(name),
        name TEXT NOT NULL,
        position INTEGER NOT NULL,
        rule TEXT NOT NULL,
        version INTEGER NOT NULL,
        created_at INTEGER NOT NULL,
        updated_at INTEGER NOT NULL,
        updated_by TEXT NOT NULL,
        PRIMARY KEY (domain, name)
    ) STRICT;
    CREATE INDEX rules_in_order ON rules(domain, position, name);
    CREATE TABLE audit (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        at INTEGER NOT NULL,
        by TEXT NOT NULL,
        action TEXT NOT NULL,
        domain TEXT NOT NULL,
        rule TEXT,
        before TEXT,
        after TEXT
    ) STRICT;
    CREATE INDEX audit_by_domain ON audit(domain, id);",
];

/// How long a write waits for another writer's lock before it fails.
const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

pub(crate) struct Sqlite {
    url: String,
    conn: Mutex<Connection>,
}

impl Sqlite {
    pub(crate) fn open(url: &str, path: &Path, create: bool) -> Result<Sqlite, StoreError> {
        let down = |e: rusqlite::Error| StoreError::unavailable(url, e);
        // NO_MUTEX: the connection is behind our own mutex. No URI: the path is
        // a path, never `file:...?mode=` options.
        let mut flags = OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX;
        if create {
            flags |= OpenFlags::SQLITE_OPEN_CREATE;
        }
        let mut conn = Connection::open_with_flags(path, flags).map_err(down)?;
        conn.busy_timeout(BUSY_TIMEOUT).map_err(down)?;
        // WAL is a property of the file: set once, kept by every later open.
        // Several processes opening a new file at once: the switch to WAL takes
        // an exclusive lock, and SQLite answers "database is locked" there
        // without calling the busy handler. Retried, as a busy write would be.
        let mode: String =
            retry_busy(|| conn.query_row("PRAGMA journal_mode = WAL", [], |r| r.get(0)))
                .map_err(down)?;
        if !mode.eq_ignore_ascii_case("wal") {
            return Err(StoreError::unavailable(
                url,
                format!("the database cannot use WAL mode (journal mode `{mode}`)"),
            ));
        }
        conn.pragma_update(None, "foreign_keys", true)
            .map_err(down)?;
        migrate(&mut conn, url)?;
        Ok(Sqlite {
            url: url.to_owned(),
            conn: Mutex::new(conn),
        })
    }

    fn down(&self) -> impl Fn(rusqlite::Error) -> StoreError + '_ {
        move |e| StoreError::unavailable(&self.url, e)
    }

    fn conn(&self) -> std::sync::MutexGuard<'_, Connection> {
        self.conn.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// `f` again while SQLite answers "busy" or "locked", up to [`BUSY_TIMEOUT`].
fn retry_busy<T>(mut f: impl FnMut() -> rusqlite::Result<T>) -> rusqlite::Result<T> {
    let start = std::time::Instant::now();
    loop {
        match f() {
            Err(rusqlite::Error::SqliteFailure(e, _))
                if matches!(
                    e.code,
                    rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked
                ) && start.elapsed() < BUSY_TIMEOUT =>
            {
                std::thread::sleep(Duration::from_millis(5));
            }
            other => return other,
        }
    }
}

fn migrate(conn: &mut Connection, url: &str) -> Result<(), StoreError> {
    let down = |e: rusqlite::Error| StoreError::unavailable(url, e);
    let known = MIGRATIONS.len() as i64;
    let version = |c: &Connection| -> Result<i64, StoreError> {
        c.pragma_query_value(None, "user_version", |r| r.get(0))
            .map_err(down)
    };
    // Up to date (every open but the first): no write lock taken.
    if version(conn)? == known {
        return Ok(());
    }
    let tx = conn
        .transaction_with_behavior(TransactionBehavior::Immediate)
        .map_err(down)?;
    let found = version(&tx)?;
    if found > known {
        return Err(StoreError::Schema { found, known });
    }
    for script in MIGRATIONS.iter().skip(found.max(0) as usize) {
        tx.execute_batch(script).map_err(down)?;
    }
    tx.pragma_update(None, "user_version", known)
        .map_err(down)?;
    tx.commit().map_err(down)
}

fn millis(t: SystemTime) -> i64 {
    t.duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

fn time(ms: i64) -> SystemTime {
    UNIX_EPOCH + Duration::from_millis(u64::try_from(ms).unwrap_or(0))
}

/// Reads a domain in the transaction (or connection) `c`.
fn read_domain(c: &Connection, url: &str, name: &str) -> Result<Option<Domain>, StoreError> {
    let down = |e: rusqlite::Error| StoreError::unavailable(url, e);
    let head = c
        .query_row(
            "SELECT version, settings, settings_version, created_at, updated_at, updated_by
             FROM domains WHERE name = ?1",
            [name],
            |r| {
                Ok((
                    r.get::<_, i64>(0)?,
                    r.get::<_, String>(1)?,
                    r.get::<_, i64>(2)?,
                    r.get::<_, i64>(3)?,
                    r.get::<_, i64>(4)?,
                    r.get::<_, String>(5)?,
                ))
            },
        )
        .optional()
        .map_err(down)?;
    let Some((v, settings, sv, created, updated, by)) = head else {
        return Ok(None);
    };
    let settings = StoredSettings {
        settings: decode(&settings, &format!("domain `{name}`'s settings"))?,
        meta: Meta {
            version: version(sv),
            created_at: time(created),
            updated_at: time(updated),
            updated_by: by,
        },
    };
    let mut q = c
        .prepare_cached(
            "SELECT name, position, rule, version, created_at, updated_at, updated_by
             FROM rules WHERE domain = ?1 ORDER BY position, name",
        )
        .map_err(down)?;
    let rows = q
        .query_map([name], |r| {
            Ok((
                r.get::<_, String>(0)?,
                r.get::<_, i64>(1)?,
                r.get::<_, String>(2)?,
                r.get::<_, i64>(3)?,
                r.get::<_, i64>(4)?,
                r.get::<_, i64>(5)?,
                r.get::<_, String>(6)?,
            ))
        })
        .map_err(down)?;
    let mut rules = Vec::new();
    for row in rows {
        let (rule_name, position, rule, v, created, updated, by) = row.map_err(down)?;
        let rule: RuleRecord = decode(&rule, &format!("rule `{rule_name}` of `{name}`"))?;
        rules.push(StoredRule {
            rule,
            position,
            meta: Meta {
                version: version(v),
                created_at: time(created),
                updated_at: time(updated),
                updated_by: by,
            },
        });
    }
    Ok(Some(Domain {
        name: name.to_owned(),
        version: version(v),
        settings,
        rules,
    }))
}

/// Saves one plan of a write, and its audit entry, in the transaction `tx`.
fn save(
    tx: &Connection,
    domain: &str,
    p: &Plan,
    v: i64,
    at: i64,
    by: &str,
) -> Result<(), SaveError> {
    match (&p.after, &p.rule) {
        (Some(Record::Rule(r)), _) => {
            tx.execute(
                "INSERT INTO rules (domain, name, position, rule, version, created_at, updated_at, updated_by)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)
                 ON CONFLICT (domain, name) DO UPDATE SET position = excluded.position,
                   rule = excluded.rule, version = excluded.version,
                   updated_at = excluded.updated_at, updated_by = excluded.updated_by",
                params![
                    domain,
                    r.rule.name,
                    r.position,
                    json(&r.rule)?,
                    v,
                    millis(r.meta.created_at),
                    at,
                    by
                ],
            )?;
        }
        (Some(Record::Settings(s)), _) => {
            tx.execute(
                "UPDATE domains SET settings = ?2, settings_version = ?3, updated_at = ?4, updated_by = ?5
                 WHERE name = ?1",
                params![domain, json(&s.settings)?, v, at, by],
            )?;
        }
        (None, Some(name)) => {
            tx.execute(
                "DELETE FROM rules WHERE domain = ?1 AND name = ?2",
                params![domain, name],
            )?;
        }
        (None, None) => {}
    }
    let before = p.before.as_ref().map(json).transpose()?;
    let after = p.after.as_ref().map(json).transpose()?;
    tx.execute(
        "INSERT INTO audit (at, by, action, domain, rule, before, after)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
        params![at, by, p.action.name(), domain, p.rule, before, after],
    )?;
    Ok(())
}

/// A failed save: the database's error, or a record that does not encode.
enum SaveError {
    Db(rusqlite::Error),
    Store(StoreError),
}

impl From<rusqlite::Error> for SaveError {
    fn from(e: rusqlite::Error) -> Self {
        SaveError::Db(e)
    }
}

impl From<StoreError> for SaveError {
    fn from(e: StoreError) -> Self {
        SaveError::Store(e)
    }
}

impl Backend for Sqlite {
    fn domains(&self) -> Result<Vec<String>, StoreError> {
        let c = self.conn();
        let mut q = c
            .prepare_cached("SELECT name FROM domains ORDER BY name")
            .map_err(self.down())?;
        let names = q
            .query_map([], |r| r.get(0))
            .map_err(self.down())?
            .collect::<Result<Vec<String>, _>>()
            .map_err(self.down())?;
        Ok(names)
    }

    fn domain(&self, name: &str) -> Result<Option<Domain>, StoreError> {
        let mut c = self.conn();
        // One read transaction: the rules and settings of one moment.
        let tx = c.transaction().map_err(self.down())?;
        let d = read_domain(&tx, &self.url, name)?;
        tx.finish().map_err(self.down())?;
        Ok(d)
    }

    fn version(&self, domain: &str) -> Result<Option<u64>, StoreError> {
        self.conn()
            .query_row(
                "SELECT version FROM domains WHERE name = ?1",
                [domain],
                |r| r.get::<_, i64>(0),
            )
            .optional()
            .map(|v| v.map(version))
            .map_err(self.down())
    }

    fn write(
        &self,
        domain: &str,
        by: &str,
        plan: &mut Planner<'_>,
    ) -> Result<Vec<Plan>, StoreError> {
        let mut c = self.conn();
        // IMMEDIATE: the write lock from the first read, so the domain the plan
        // is checked against is the one it is saved over.
        let tx = c
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(self.down())?;
        let current = read_domain(&tx, &self.url, domain)?;
        let stamp = Stamp {
            // Millisecond precision, as stored: what a write returns is what a
            // read gives back.
            at: time(millis(SystemTime::now())),
            by,
            version: current.as_ref().map_or(0, |d| d.version) + 1,
        };
        // Dropping `tx` on an error (or with nothing to save) rolls it back.
        let plans = plan(current.as_ref(), &stamp)?;
        if plans.is_empty() {
            return Ok(plans);
        }
        let at = millis(stamp.at);
        let v = sql_version(stamp.version);
        let down = self.down();
        if current.is_none() {
            tx.execute(
                "INSERT INTO domains (name, version, settings, settings_version, created_at, updated_at, updated_by)
                 VALUES (?1, ?2, '{}', 0, ?3, ?3, ?4)",
                params![domain, v, at, by],
            )
            .map_err(&down)?;
        } else {
            tx.execute(
                "UPDATE domains SET version = ?2 WHERE name = ?1",
                params![domain, v],
            )
            .map_err(&down)?;
        }
        for p in &plans {
            save(&tx, domain, p, v, at, by).map_err(|e| match e {
                SaveError::Db(e) => down(e),
                SaveError::Store(e) => e,
            })?;
        }
        tx.commit().map_err(&down)?;
        Ok(plans)
    }

    fn reopen_per_poll(&self) -> bool {
        true
    }

    fn audit(
        &self,
        domain: Option<&str>,
        after: u64,
        limit: usize,
    ) -> Result<Vec<AuditEntry>, StoreError> {
        let c = self.conn();
        let mut q = c
            .prepare_cached(
                "SELECT id, at, by, action, domain, rule, before, after FROM audit
                 WHERE id > ?1 AND (?2 IS NULL OR domain = ?2) ORDER BY id LIMIT ?3",
            )
            .map_err(self.down())?;
        let rows = q
            .query_map(
                params![
                    sql_version(after),
                    domain,
                    i64::try_from(limit).unwrap_or(i64::MAX)
                ],
                |r| {
                    Ok((
                        r.get::<_, i64>(0)?,
                        r.get::<_, i64>(1)?,
                        r.get::<_, String>(2)?,
                        r.get::<_, String>(3)?,
                        r.get::<_, String>(4)?,
                        r.get::<_, Option<String>>(5)?,
                        r.get::<_, Option<String>>(6)?,
                        r.get::<_, Option<String>>(7)?,
                    ))
                },
            )
            .map_err(self.down())?;
        let mut out = Vec::new();
        for row in rows {
            let (id, at, by, action, domain, rule, before, after) = row.map_err(self.down())?;
            let record = |text: Option<String>| {
                text.map(|t| decode::<Record>(&t, &format!("audit entry {id}")))
                    .transpose()
            };
            out.push(AuditEntry {
                cursor: Cursor(version(id)),
                at: time(at),
                by,
                action: action.parse::<Action>().map_err(StoreError::Corrupt)?,
                domain,
                rule,
                before: record(before)?,
                after: record(after)?,
            });
        }
        Ok(out)
    }
}
