//! The PostgreSQL backend (feature `postgres`): the SQLite backend's tables
//! and semantics, in a database shared by many processes.
//!
//! * Client: tokio-postgres (pure Rust) on a private runtime of one worker
//!   thread per store; every call is run there and waited for on the calling
//!   thread, so the store is usable from plain threads and from inside another
//!   async runtime alike. One connection, used by one call at a time (as the
//!   SQLite backend's), made again after it broke.
//! * Schema: `sluicegate_schema` holds the version; migrations are numbered
//!   scripts as SQLite's, run in one transaction under an advisory lock, so
//!   processes starting together wait for the first instead of racing it.
//! * Writes: one transaction under a second advisory lock (writes are
//!   serialized, as SQLite's `BEGIN IMMEDIATE` serializes them, so audit ids
//!   grow in commit order and a cursor never skips an entry committed late),
//!   validated by the shared planner between the read and the save, and a
//!   `NOTIFY sluicegate_store, '<domain>'` that PostgreSQL delivers at commit.
//! * Readers `LISTEN` on a connection of their own and wake on a notice;
//!   the poll stays as the fallback (a lost connection is made again on the
//!   next poll, and the version read after it catches what was missed).
//! * TLS: `sslmode` as libpq reads it, with rustls and the ring provider.

use std::future::Future;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{
    CertificateError, ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme,
};
use tokio_postgres::config::{Host, SslMode};
use tokio_postgres::error::SqlState;
use tokio_postgres::{AsyncMessage, Client, Config, NoTls, Row};
use tokio_postgres_rustls::MakeRustlsConnect;

use super::{
    Action, AuditEntry, Backend, Cursor, Domain, Listener, Meta, Plan, Planner, Record, RuleRecord,
    Stamp, StoreError, StoredRule, StoredSettings, decode, json, redact, sql_version, version,
};

/// The schema, one script per version (version = index + 1), as SQLite's.
/// Never edit one that shipped: add the next.
const MIGRATIONS: &[&str] = &[
    // 1: domains (settings, and the change number readers poll), rules, audit.
    "CREATE TABLE sluicegate_domains (
        name TEXT PRIMARY KEY,
        version BIGINT NOT NULL,
        settings JSONB NOT NULL,
        settings_version BIGINT NOT NULL,
        created_at TIMESTAMPTZ NOT NULL,
        updated_at TIMESTAMPTZ NOT NULL,
        updated_by TEXT NOT NULL
    );
    CREATE TABLE sluicegate_rules (
        domain TEXT NOT NULL REFERENCES sluicegate_domains(name),
        name TEXT NOT NULL,
        position BIGINT NOT NULL,
        rule JSONB NOT NULL,
        version BIGINT NOT NULL,
        created_at TIMESTAMPTZ NOT NULL,
        updated_at TIMESTAMPTZ NOT NULL,
        updated_by TEXT NOT NULL,
        PRIMARY KEY (domain, name)
    );
    CREATE INDEX sluicegate_rules_in_order ON sluicegate_rules(domain, position, name COLLATE \"C\");
    CREATE TABLE sluicegate_audit (
        id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        at TIMESTAMPTZ NOT NULL,
        by TEXT NOT NULL,
        action TEXT NOT NULL,
        domain TEXT NOT NULL,
        rule TEXT,
        before JSONB,
        after JSONB
    );
    CREATE INDEX sluicegate_audit_by_domain ON sluicegate_audit(domain, id);",
];

/// The advisory locks' class (`pg_advisory_xact_lock(CLASS, WHAT)`): "slgt".
const LOCK_CLASS: i32 = 0x736c_6774;
/// Taken by a migration.
const LOCK_MIGRATE: i32 = 1;
/// Taken by every write.
const LOCK_WRITE: i32 = 2;
/// The channel a write notifies, with the domain's name as the payload.
pub(crate) const CHANNEL: &str = "sluicegate_store";

/// How long a connection may take (unless the URL sets `connect_timeout`).
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// How long one call may take before the connection is given up.
const CALL_TIMEOUT: Duration = Duration::from_secs(10);

/// A `postgres://` URL, parsed: the connection's configuration and its TLS.
#[derive(Clone)]
pub(crate) struct Target {
    config: Config,
    tls: Option<Arc<ClientConfig>>,
}

/// `sslmode`, as libpq spells it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    Disable,
    Prefer,
    Require,
    VerifyCa,
    VerifyFull,
}

fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let hex = |c: u8| (c as char).to_digit(16);
        if b[i] == b'%' && i + 2 < b.len() {
            if let (Some(h), Some(l)) = (hex(b[i + 1]), hex(b[i + 2])) {
                out.push((h * 16 + l) as u8);
                i += 3;
                continue;
            }
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

impl Target {
    /// Parses a `postgres://` or `postgresql://` URL: libpq's TLS parameters
    /// (`sslmode`, `sslrootcert`, `sslcert`, `sslkey`) here, the rest by
    /// tokio-postgres.
    pub(crate) fn parse(url: &str) -> Result<Target, StoreError> {
        let bad = |m: String| StoreError::UrlParam {
            url: redact(url),
            message: m,
        };
        let (base, query) = url.split_once('?').unwrap_or((url, ""));
        let mut kept = Vec::new();
        let (mut mode, mut root, mut cert, mut key) = (Mode::Prefer, None, None, None);
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            let value = percent_decode(v);
            match k {
                "sslmode" => {
                    mode = match value.as_str() {
                        "disable" => Mode::Disable,
                        "allow" | "prefer" => Mode::Prefer,
                        "require" => Mode::Require,
                        "verify-ca" => Mode::VerifyCa,
                        "verify-full" => Mode::VerifyFull,
                        other => {
                            return Err(bad(format!(
                                "sslmode `{other}`: write disable, prefer, require, verify-ca or verify-full"
                            )));
                        }
                    }
                }
                "sslrootcert" => root = Some(value),
                "sslcert" => cert = Some(PathBuf::from(value)),
                "sslkey" => key = Some(PathBuf::from(value)),
                _ => kept.push(pair),
            }
        }
        let rest = if kept.is_empty() {
            base.to_owned()
        } else {
            format!("{base}?{}", kept.join("&"))
        };
        let mut config: Config = rest.parse().map_err(|e| bad(format!("{e}")))?;
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(CONNECT_TIMEOUT);
        }
        // libpq: `require` with a root certificate given verifies the chain.
        if mode == Mode::Require && root.as_deref().is_some_and(|r| r != "system") {
            mode = Mode::VerifyCa;
        }
        // No TLS over Unix sockets (PostgreSQL offers none there).
        let unix_only = config
            .get_hosts()
            .iter()
            .all(|h| matches!(h, Host::Unix(_)));
        if mode == Mode::Disable || unix_only && mode == Mode::Prefer {
            config.ssl_mode(SslMode::Disable);
            return Ok(Target { config, tls: None });
        }
        config.ssl_mode(if mode == Mode::Prefer {
            SslMode::Prefer
        } else {
            SslMode::Require
        });
        let tls = tls_config(mode, root.as_deref(), cert, key).map_err(bad)?;
        Ok(Target {
            config,
            tls: Some(Arc::new(tls)),
        })
    }
}

fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// The trusted roots: the PEM file `root`, else the system's store and the
/// Mozilla roots.
fn roots(root: Option<&str>) -> Result<RootCertStore, String> {
    let mut store = RootCertStore::empty();
    match root {
        Some(path) if path != "system" => {
            let certs = CertificateDer::pem_file_iter(path)
                .map_err(|e| format!("sslrootcert `{path}`: {e}"))?;
            for c in certs {
                let c = c.map_err(|e| format!("sslrootcert `{path}`: {e}"))?;
                store
                    .add(c)
                    .map_err(|e| format!("sslrootcert `{path}`: {e}"))?;
            }
            if store.is_empty() {
                return Err(format!("sslrootcert `{path}`: no certificate in it"));
            }
        }
        _ => {
            store.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
            let native = rustls_native_certs::load_native_certs();
            store.add_parsable_certificates(native.certs);
        }
    }
    Ok(store)
}

fn tls_config(
    mode: Mode,
    root: Option<&str>,
    cert: Option<PathBuf>,
    key: Option<PathBuf>,
) -> Result<ClientConfig, String> {
    let provider = provider();
    let builder = ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?;
    let verifier: Arc<dyn ServerCertVerifier> = match mode {
        Mode::Disable | Mode::Prefer | Mode::Require => Arc::new(Unverified(provider)),
        Mode::VerifyCa | Mode::VerifyFull => {
            let webpki =
                WebPkiServerVerifier::builder_with_provider(Arc::new(roots(root)?), provider)
                    .build()
                    .map_err(|e| format!("sslrootcert: {e}"))?;
            if mode == Mode::VerifyCa {
                Arc::new(ChainOnly(webpki))
            } else {
                webpki
            }
        }
    };
    let builder = builder
        .dangerous()
        .with_custom_certificate_verifier(verifier);
    match (cert, key) {
        (None, None) => Ok(builder.with_no_client_auth()),
        (Some(cert), Some(key)) => {
            let chain = CertificateDer::pem_file_iter(&cert)
                .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
                .map_err(|e| format!("sslcert `{}`: {e}", cert.display()))?;
            let key = PrivateKeyDer::from_pem_file(&key)
                .map_err(|e| format!("sslkey `{}`: {e}", key.display()))?;
            builder
                .with_client_auth_cert(chain, key)
                .map_err(|e| format!("sslcert/sslkey: {e}"))
        }
        _ => Err("sslcert and sslkey go together".into()),
    }
}

/// `prefer` and `require`: the server's certificate is not checked (as libpq
/// does without a root certificate), but its handshake signature is.
#[derive(Debug)]
struct Unverified(Arc<CryptoProvider>);

impl ServerCertVerifier for Unverified {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// `verify-ca`: the chain must lead to a trusted root; the name is not checked.
#[derive(Debug)]
struct ChainOnly(Arc<WebPkiServerVerifier>);

impl ServerCertVerifier for ChainOnly {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        // The chain is checked before the name: a name error means a good chain.
        match self
            .0
            .verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now)
        {
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_verify_schemes()
    }
}

/// Whether this thread is inside a Tokio runtime (where dropping a runtime
/// blocks, which Tokio refuses).
fn in_runtime() -> bool {
    tokio::runtime::Handle::try_current().is_ok()
}

/// The store's runtime, shut down without waiting when dropped inside another
/// runtime.
struct Private(Option<tokio::runtime::Runtime>);

impl Private {
    fn rt(&self) -> Option<&tokio::runtime::Runtime> {
        self.0.as_ref()
    }
}

impl Drop for Private {
    fn drop(&mut self) {
        if let Some(rt) = self.0.take() {
            if in_runtime() {
                rt.shutdown_background();
            }
        }
    }
}

/// What a connection's task tells of its notifications (`None`: it ended).
type OnMessage = Box<dyn FnMut(Option<&tokio_postgres::Notification>) + Send>;

/// A tokio-postgres error with its causes (its own text is only "db error"
/// or "error connecting to server"; what the server said is in its source).
fn describe(e: &tokio_postgres::Error) -> String {
    let mut text = e.to_string();
    let mut next = std::error::Error::source(e);
    while let Some(cause) = next {
        let more = cause.to_string();
        if !text.contains(&more) {
            text.push_str(": ");
            text.push_str(&more);
        }
        next = cause.source();
    }
    text
}

/// A failure inside a call: the database's, or the call ran out of time.
enum Fail {
    Db(tokio_postgres::Error),
    Timeout,
    Stopped,
}

pub(crate) struct Postgres {
    url: String,
    target: Target,
    rt: Private,
    conn: Mutex<Option<Arc<Client>>>,
}

/// The connection, held for one call or transaction.
struct Conn<'a> {
    pg: &'a Postgres,
    slot: MutexGuard<'a, Option<Arc<Client>>>,
    client: Arc<Client>,
}

impl Conn<'_> {
    /// Runs `f` on the connection; a broken connection is let go (the next
    /// call makes another).
    fn call<T, Fut>(&mut self, f: impl FnOnce(Arc<Client>) -> Fut) -> Result<T, StoreError>
    where
        T: Send + 'static,
        Fut: Future<Output = Result<T, tokio_postgres::Error>> + Send + 'static,
    {
        let fut = f(self.client.clone());
        let r = self.pg.hop(async move {
            match tokio::time::timeout(CALL_TIMEOUT, fut).await {
                Ok(Ok(v)) => Ok(v),
                Ok(Err(e)) => Err(Fail::Db(e)),
                Err(_) => Err(Fail::Timeout),
            }
        });
        match r {
            Ok(v) => Ok(v),
            Err(e) => {
                if !matches!(e, Fail::Db(_)) || self.client.is_closed() {
                    *self.slot = None;
                }
                Err(self.pg.fail(e))
            }
        }
    }

    /// Ends the transaction open on the connection, saving nothing (a failure
    /// lets the connection go: it may still be in the transaction).
    fn rollback(&mut self) {
        if self
            .call(|c| async move { c.batch_execute("ROLLBACK").await })
            .is_err()
        {
            *self.slot = None;
        }
    }
}

fn millis_time(t: SystemTime) -> SystemTime {
    let ms = t
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
    UNIX_EPOCH + Duration::from_millis(ms)
}

/// Reads a domain: its head row and its rules (in a transaction the caller
/// opened, so both are of one moment).
async fn read_domain(
    c: &Client,
    name: &str,
) -> Result<(Option<Row>, Vec<Row>), tokio_postgres::Error> {
    let head = c
        .query_opt(
            "SELECT version, settings::text, settings_version, created_at, updated_at, updated_by
             FROM sluicegate_domains WHERE name = $1",
            &[&name],
        )
        .await?;
    if head.is_none() {
        return Ok((None, Vec::new()));
    }
    let rules = c
        .query(
            "SELECT name, position, rule::text, version, created_at, updated_at, updated_by
             FROM sluicegate_rules WHERE domain = $1 ORDER BY position, name COLLATE \"C\"",
            &[&name],
        )
        .await?;
    Ok((head, rules))
}

fn decode_domain(
    name: &str,
    head: Option<Row>,
    rows: Vec<Row>,
) -> Result<Option<Domain>, StoreError> {
    let Some(h) = head else {
        return Ok(None);
    };
    let get = |e: tokio_postgres::Error| StoreError::Corrupt(format!("domain `{name}`: {e}"));
    let settings: String = h.try_get(1).map_err(get)?;
    let settings = StoredSettings {
        settings: decode(&settings, &format!("domain `{name}`'s settings"))?,
        meta: Meta {
            version: version(h.try_get(2).map_err(get)?),
            created_at: h.try_get(3).map_err(get)?,
            updated_at: h.try_get(4).map_err(get)?,
            updated_by: h.try_get(5).map_err(get)?,
        },
    };
    let mut rules = Vec::with_capacity(rows.len());
    for r in rows {
        let rule_name: String = r.try_get(0).map_err(get)?;
        let text: String = r.try_get(2).map_err(get)?;
        let rule: RuleRecord = decode(&text, &format!("rule `{rule_name}` of `{name}`"))?;
        rules.push(StoredRule {
            rule,
            position: r.try_get(1).map_err(get)?,
            meta: Meta {
                version: version(r.try_get(3).map_err(get)?),
                created_at: r.try_get(4).map_err(get)?,
                updated_at: r.try_get(5).map_err(get)?,
                updated_by: r.try_get(6).map_err(get)?,
            },
        });
    }
    Ok(Some(Domain {
        name: name.to_owned(),
        version: version(h.try_get(0).map_err(get)?),
        settings,
        rules,
    }))
}

/// One plan of a write, encoded to be saved.
struct Encoded {
    rule: Option<String>,
    action: &'static str,
    /// The rule record (name, position, JSON, created at) to upsert.
    upsert: Option<(String, i64, String, SystemTime)>,
    /// The settings' JSON to write.
    settings: Option<String>,
    before: Option<String>,
    after: Option<String>,
}

impl Postgres {
    pub(crate) fn open(url: &str, target: Target, create: bool) -> Result<Postgres, StoreError> {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("sluicegate-postgres")
            .enable_all()
            .build()
            .map_err(|e| StoreError::unavailable(url, e))?;
        let pg = Postgres {
            url: url.to_owned(),
            target,
            rt: Private(Some(rt)),
            conn: Mutex::new(None),
        };
        pg.migrate(create)?;
        Ok(pg)
    }

    /// Runs `fut` on the store's runtime and waits for it.
    fn hop<T: Send + 'static>(
        &self,
        fut: impl Future<Output = Result<T, Fail>> + Send + 'static,
    ) -> Result<T, Fail> {
        let Some(rt) = self.rt.rt() else {
            return Err(Fail::Stopped);
        };
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        rt.spawn(async move {
            let _ = tx.send(fut.await);
        });
        rx.recv().unwrap_or(Err(Fail::Stopped))
    }

    fn fail(&self, e: Fail) -> StoreError {
        match e {
            Fail::Db(e) => StoreError::unavailable(&self.url, describe(&e)),
            Fail::Timeout => StoreError::unavailable(
                &self.url,
                format!("no answer within {} s", CALL_TIMEOUT.as_secs()),
            ),
            Fail::Stopped => StoreError::unavailable(&self.url, "the store's runtime stopped"),
        }
    }

    /// A new connection, its connection task spawned on the store's runtime;
    /// `on_message` sees each notification (and `None` when the connection ends).
    fn connect(&self, on_message: Option<OnMessage>) -> Result<Client, StoreError> {
        let target = self.target.clone();
        self.hop(async move {
            let result = match &target.tls {
                None => {
                    let (client, conn) = target.config.connect(NoTls).await.map_err(Fail::Db)?;
                    tokio::spawn(drive(conn, on_message));
                    client
                }
                Some(tls) => {
                    let tls = MakeRustlsConnect::new((**tls).clone());
                    let (client, conn) = target.config.connect(tls).await.map_err(Fail::Db)?;
                    tokio::spawn(drive(conn, on_message));
                    client
                }
            };
            Ok(result)
        })
        .map_err(|e| self.fail(e))
    }

    /// The connection, made if there is none (or it broke).
    fn conn(&self) -> Result<Conn<'_>, StoreError> {
        let mut slot = self.conn.lock().unwrap_or_else(PoisonError::into_inner);
        let client = match &*slot {
            Some(c) if !c.is_closed() => c.clone(),
            _ => {
                *slot = None;
                let c = Arc::new(self.connect(None)?);
                *slot = Some(c.clone());
                c
            }
        };
        Ok(Conn {
            pg: self,
            slot,
            client,
        })
    }

    /// Brings the schema up to date (`create: false`: a database without the
    /// store's tables is an error, not a store to make).
    fn migrate(&self, create: bool) -> Result<(), StoreError> {
        let known = MIGRATIONS.len() as i64;
        let mut c = self.conn()?;
        let found = c.call(|c| async move {
            match c
                .query_opt("SELECT version FROM sluicegate_schema", &[])
                .await
            {
                Ok(None) => Ok(Some(0)),
                Ok(Some(r)) => Ok(Some(i64::from(r.try_get::<_, i32>(0)?))),
                Err(e) if e.code() == Some(&SqlState::UNDEFINED_TABLE) => Ok(None),
                Err(e) => Err(e),
            }
        })?;
        match found {
            Some(v) if v == known => return Ok(()),
            Some(v) if v > known => return Err(StoreError::Schema { found: v, known }),
            None if !create => {
                return Err(StoreError::unavailable(
                    &self.url,
                    "the database holds no rule store (Store::open or `sluicegate store import` makes one)",
                ));
            }
            _ => {}
        }
        let found = c.call(|c| async move {
            c.batch_execute("BEGIN").await?;
            c.execute(
                "SELECT pg_advisory_xact_lock($1, $2)",
                &[&LOCK_CLASS, &LOCK_MIGRATE],
            )
            .await?;
            c.batch_execute(
                "CREATE TABLE IF NOT EXISTS sluicegate_schema (version INTEGER NOT NULL)",
            )
            .await?;
            match c
                .query_opt("SELECT version FROM sluicegate_schema", &[])
                .await?
            {
                Some(r) => Ok(i64::from(r.try_get::<_, i32>(0)?)),
                None => Ok(0),
            }
        });
        let found = match found {
            Ok(v) => v,
            Err(e) => {
                c.rollback();
                return Err(e);
            }
        };
        if found > known {
            c.rollback();
            return Err(StoreError::Schema { found, known });
        }
        let scripts: Vec<&'static str> = MIGRATIONS
            .iter()
            .skip(found.max(0) as usize)
            .copied()
            .collect();
        let known32 = i32::try_from(known).unwrap_or(i32::MAX);
        let done = c.call(move |c| async move {
            for s in scripts {
                c.batch_execute(s).await?;
            }
            c.execute("DELETE FROM sluicegate_schema", &[]).await?;
            c.execute(
                "INSERT INTO sluicegate_schema (version) VALUES ($1)",
                &[&known32],
            )
            .await?;
            c.batch_execute("COMMIT").await
        });
        if done.is_err() {
            c.rollback();
        }
        done
    }
}

/// Drives a connection: its notifications to `on_message`, until it closes.
async fn drive<S, T>(mut conn: tokio_postgres::Connection<S, T>, mut on_message: Option<OnMessage>)
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
    T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    loop {
        match std::future::poll_fn(|cx| conn.poll_message(cx)).await {
            Some(Ok(AsyncMessage::Notification(n))) => {
                if let Some(f) = on_message.as_mut() {
                    f(Some(&n));
                }
            }
            Some(Ok(_)) => {}
            Some(Err(e)) => {
                log::debug!("sluicegate store: connection ended: {e}");
                break;
            }
            None => break,
        }
    }
    if let Some(f) = on_message.as_mut() {
        f(None);
    }
}

impl Backend for Postgres {
    fn domains(&self) -> Result<Vec<String>, StoreError> {
        let rows = self.conn()?.call(|c| async move {
            c.query(
                "SELECT name FROM sluicegate_domains ORDER BY name COLLATE \"C\"",
                &[],
            )
            .await
        })?;
        rows.iter()
            .map(|r| r.try_get(0).map_err(|e| StoreError::Corrupt(e.to_string())))
            .collect()
    }

    fn domain(&self, name: &str) -> Result<Option<Domain>, StoreError> {
        let mut c = self.conn()?;
        let owned = name.to_owned();
        let read = c.call(|c| async move {
            c.batch_execute("BEGIN ISOLATION LEVEL REPEATABLE READ, READ ONLY")
                .await?;
            let read = read_domain(&c, &owned).await;
            match read {
                Ok(r) => {
                    c.batch_execute("COMMIT").await?;
                    Ok(Ok(r))
                }
                // Kept for the caller to roll back.
                Err(e) => Ok(Err(e)),
            }
        })?;
        match read {
            Ok((head, rows)) => decode_domain(name, head, rows),
            Err(e) => {
                c.rollback();
                Err(self.fail(Fail::Db(e)))
            }
        }
    }

    fn version(&self, domain: &str) -> Result<Option<u64>, StoreError> {
        let owned = domain.to_owned();
        let row = self.conn()?.call(|c| async move {
            c.query_opt(
                "SELECT version FROM sluicegate_domains WHERE name = $1",
                &[&owned],
            )
            .await
        })?;
        row.map(|r| r.try_get(0).map(version))
            .transpose()
            .map_err(|e| StoreError::Corrupt(e.to_string()))
    }

    fn write(
        &self,
        domain: &str,
        by: &str,
        plan: &mut Planner<'_>,
    ) -> Result<Vec<Plan>, StoreError> {
        let mut c = self.conn()?;
        let owned = domain.to_owned();
        // The write lock, then the domain as it is under it.
        let read = c.call(|c| async move {
            c.batch_execute("BEGIN").await?;
            let read = async {
                c.execute(
                    "SELECT pg_advisory_xact_lock($1, $2)",
                    &[&LOCK_CLASS, &LOCK_WRITE],
                )
                .await?;
                read_domain(&c, &owned).await
            }
            .await;
            Ok(read)
        })?;
        let (head, rows) = match read {
            Ok(r) => r,
            Err(e) => {
                c.rollback();
                return Err(self.fail(Fail::Db(e)));
            }
        };
        let planned = decode_domain(domain, head, rows).and_then(|current| {
            let stamp = Stamp {
                // Millisecond precision, as SQLite stores it: what a write
                // returns is what a read gives back.
                at: millis_time(SystemTime::now()),
                by,
                version: current.as_ref().map_or(0, |d| d.version) + 1,
            };
            let plans = plan(current.as_ref(), &stamp)?;
            let rows = plans.iter().map(encode).collect::<Result<Vec<_>, _>>()?;
            Ok((current.is_some(), stamp.at, stamp.version, plans, rows))
        });
        let (exists, at, v, plans, rows) = match planned {
            Ok(p) if !p.3.is_empty() => p,
            Ok(p) => {
                c.rollback();
                return Ok(p.3);
            }
            Err(e) => {
                c.rollback();
                return Err(e);
            }
        };
        let (domain, by) = (domain.to_owned(), by.to_owned());
        let v = sql_version(v);
        let saved = c.call(move |c| async move {
            let saved = async {
                if exists {
                    c.execute(
                        "UPDATE sluicegate_domains SET version = $2 WHERE name = $1",
                        &[&domain, &v],
                    )
                    .await?;
                } else {
                    c.execute(
                        "INSERT INTO sluicegate_domains (name, version, settings, settings_version, created_at, updated_at, updated_by)
                         VALUES ($1, $2, '{}', 0, $3, $3, $4)",
                        &[&domain, &v, &at, &by],
                    )
                    .await?;
                }
                for r in &rows {
                    save(&c, &domain, r, v, at, &by).await?;
                }
                c.execute("SELECT pg_notify($1, $2)", &[&CHANNEL, &domain]).await?;
                c.batch_execute("COMMIT").await
            }
            .await;
            Ok(saved)
        })?;
        match saved {
            Ok(()) => Ok(plans),
            Err(e) => {
                c.rollback();
                Err(self.fail(Fail::Db(e)))
            }
        }
    }

    fn audit(
        &self,
        domain: Option<&str>,
        after: u64,
        limit: usize,
    ) -> Result<Vec<AuditEntry>, StoreError> {
        let domain = domain.map(str::to_owned);
        let after = sql_version(after);
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let rows = self.conn()?.call(|c| async move {
            c.query(
                "SELECT id, at, by, action, domain, rule, before::text, after::text FROM sluicegate_audit
                 WHERE id > $1 AND ($2::text IS NULL OR domain = $2) ORDER BY id LIMIT $3",
                &[&after, &domain, &limit],
            )
            .await
        })?;
        let mut out = Vec::with_capacity(rows.len());
        for r in rows {
            let get = |e: tokio_postgres::Error| StoreError::Corrupt(format!("audit entry: {e}"));
            let id: i64 = r.try_get(0).map_err(get)?;
            let record = |i: usize| -> Result<Option<Record>, StoreError> {
                let text: Option<String> = r.try_get(i).map_err(get)?;
                text.map(|t| decode::<Record>(&t, &format!("audit entry {id}")))
                    .transpose()
            };
            let action: String = r.try_get(3).map_err(get)?;
            out.push(AuditEntry {
                cursor: Cursor(version(id)),
                at: r.try_get(1).map_err(get)?,
                by: r.try_get(2).map_err(get)?,
                action: action.parse::<Action>().map_err(StoreError::Corrupt)?,
                domain: r.try_get(4).map_err(get)?,
                rule: r.try_get(5).map_err(get)?,
                before: record(6)?,
                after: record(7)?,
            });
        }
        Ok(out)
    }

    fn listen(
        &self,
        domain: &str,
        thread: std::thread::Thread,
    ) -> Result<Option<Box<dyn Listener>>, StoreError> {
        let alive = Arc::new(AtomicBool::new(true));
        let (flag, want) = (alive.clone(), domain.to_owned());
        let client = self.connect(Some(Box::new(move |n| match n {
            Some(n) if n.channel() == CHANNEL && n.payload() == want => thread.unpark(),
            Some(_) => {}
            None => {
                flag.store(false, Ordering::Release);
                thread.unpark();
            }
        })))?;
        let client = Arc::new(client);
        let listening = client.clone();
        self.hop(async move {
            match tokio::time::timeout(
                CALL_TIMEOUT,
                listening.batch_execute("LISTEN sluicegate_store"),
            )
            .await
            {
                Ok(r) => r.map_err(Fail::Db),
                Err(_) => Err(Fail::Timeout),
            }
        })
        .map_err(|e| self.fail(e))?;
        Ok(Some(Box::new(PgListener {
            alive,
            _client: client,
        })))
    }
}

/// A `LISTEN` connection; closed when dropped (its client gone, the
/// connection task ends).
struct PgListener {
    alive: Arc<AtomicBool>,
    _client: Arc<Client>,
}

impl Listener for PgListener {
    fn alive(&self) -> bool {
        self.alive.load(Ordering::Acquire)
    }
}

fn encode(p: &Plan) -> Result<Encoded, StoreError> {
    let (upsert, settings) = match &p.after {
        Some(Record::Rule(r)) => (
            Some((
                r.rule.name.clone(),
                r.position,
                json(&r.rule)?,
                r.meta.created_at,
            )),
            None,
        ),
        Some(Record::Settings(s)) => (None, Some(json(&s.settings)?)),
        None => (None, None),
    };
    Ok(Encoded {
        rule: p.rule.clone(),
        action: p.action.name(),
        upsert,
        settings,
        before: p.before.as_ref().map(json).transpose()?,
        after: p.after.as_ref().map(json).transpose()?,
    })
}

/// Saves one plan of a write, and its audit entry.
async fn save(
    c: &Client,
    domain: &str,
    r: &Encoded,
    v: i64,
    at: SystemTime,
    by: &str,
) -> Result<(), tokio_postgres::Error> {
    if let Some((name, position, rule, created)) = &r.upsert {
        c.execute(
            "INSERT INTO sluicegate_rules (domain, name, position, rule, version, created_at, updated_at, updated_by)
             VALUES ($1, $2, $3, $4::text::jsonb, $5, $6, $7, $8)
             ON CONFLICT (domain, name) DO UPDATE SET position = excluded.position,
               rule = excluded.rule, version = excluded.version,
               updated_at = excluded.updated_at, updated_by = excluded.updated_by",
            &[&domain, name, position, rule, &v, created, &at, &by],
        )
        .await?;
    } else if let Some(settings) = &r.settings {
        c.execute(
            "UPDATE sluicegate_domains SET settings = $2::text::jsonb, settings_version = $3,
               updated_at = $4, updated_by = $5 WHERE name = $1",
            &[&domain, settings, &v, &at, &by],
        )
        .await?;
    } else if let Some(name) = &r.rule {
        c.execute(
            "DELETE FROM sluicegate_rules WHERE domain = $1 AND name = $2",
            &[&domain, name],
        )
        .await?;
    }
    c.execute(
        "INSERT INTO sluicegate_audit (at, by, action, domain, rule, before, after)
         VALUES ($1, $2, $3, $4, $5, $6::text::jsonb, $7::text::jsonb)",
        &[&at, &by, &r.action, &domain, &r.rule, &r.before, &r.after],
    )
    .await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mode(url: &str) -> (SslMode, bool) {
        let t = Target::parse(url).unwrap_or_else(|e| panic!("{url}: {e}"));
        (t.config.get_ssl_mode(), t.tls.is_some())
    }

    #[test]
    fn sslmode_maps_as_libpq_reads_it() {
        assert_eq!(mode("postgres://h/db"), (SslMode::Prefer, true));
        assert_eq!(
            mode("postgres://h/db?sslmode=disable"),
            (SslMode::Disable, false)
        );
        assert_eq!(
            mode("postgresql://h/db?sslmode=allow"),
            (SslMode::Prefer, true)
        );
        for m in ["require", "verify-ca", "verify-full"] {
            assert_eq!(
                mode(&format!("postgres://h/db?sslmode={m}")),
                (SslMode::Require, true)
            );
        }
        // No TLS over a Unix socket unless asked for.
        assert_eq!(
            mode("postgres://u@/db?host=/run/postgresql"),
            (SslMode::Disable, false)
        );
        assert_eq!(
            mode("postgres://u@%2Frun%2Fpostgresql/db"),
            (SslMode::Disable, false)
        );
        // The parameters this module reads are not handed to tokio-postgres.
        let t =
            Target::parse("postgres://u:p@h:6000/db?sslmode=require&application_name=x").unwrap();
        assert_eq!(t.config.get_application_name(), Some("x"));
        assert_eq!(t.config.get_ports(), [6000]);
        assert_eq!(t.config.get_connect_timeout(), Some(&CONNECT_TIMEOUT));
    }

    #[test]
    fn percent_decoding() {
        assert_eq!(percent_decode("%2Ftmp%2Fca.pem"), "/tmp/ca.pem");
        assert_eq!(percent_decode("a%2"), "a%2");
        assert_eq!(percent_decode("%zz%41"), "%zzA");
    }
}
