//! The running server: the two listeners (gRPC: RLS + health; HTTP: `/metrics`,
//! `/healthz`), hot reload by polling the configuration, and graceful shutdown.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_server::RateLimitServiceServer;
use tokio::net::TcpListener;
use tokio::sync::{mpsc, watch};
use tokio_stream::StreamExt as _;

use crate::admin::Tokens;
use crate::coalesce::Coalesced;
use crate::config::{build_rules, read_sources, Config, ConfigError};
use crate::rule_set::{DomainRules, RuleSet, TableSettings};
use crate::service::{RateLimiter, Shared};
use crate::store_domains::StoreState;
use crate::tls::{accept_loop, ChannelListener, TlsFiles, TlsState};
use crate::toml_domain::TomlDomain;

/// The gRPC service name Envoy calls, also reported by `grpc.health.v1`.
///
/// ```
/// assert!(sluicegate_server::SERVICE_NAME.ends_with("RateLimitService"));
/// ```
pub const SERVICE_NAME: &str = "envoy.service.ratelimit.v3.RateLimitService";

/// A server whose configuration is loaded and whose ports are bound.
///
/// ```
/// # tokio::runtime::Runtime::new()?.block_on(async {
/// use std::time::Duration;
/// use sluicegate_server::{Bound, Config, ServiceSettings};
/// let dir = std::env::temp_dir().join(format!("sg-bound-doc-{}", std::process::id()));
/// std::fs::create_dir_all(&dir)?;
/// std::fs::write(dir.join("edge.yaml"), "domain: edge\n")?;
/// let config = Config {
///     config_path: Some(dir.clone()),
///     grpc: "127.0.0.1:0".parse()?,
///     http: "127.0.0.1:0".parse()?,
///     reload_interval: Duration::ZERO,
///     keys_per_limit: 1024,
///     state_memory: 8 << 20,
///     service: ServiceSettings { max_hits_addend: 1000, response_headers: false },
///     ..Config::default()
/// };
/// let bound = Bound::bind(config).await?;
/// let (grpc, http) = (bound.grpc_addr()?, bound.http_addr()?);
/// assert!(grpc.port() != 0 && http.port() != 0 && grpc != http);
/// assert!(bound.admin_addr().is_none()); // no --admin
/// bound.serve(async {}).await?; // a shutdown that is already due: serve, then stop
/// assert!(tokio::net::TcpStream::connect(grpc).await.is_err());
/// # std::fs::remove_dir_all(&dir)?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// # })?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct Bound {
    config: Config,
    shared: Arc<Shared>,
    sources: Vec<(String, String)>,
    grpc: TcpListener,
    http: TcpListener,
    admin: Option<(TcpListener, Arc<Tokens>)>,
    tls: Listeners<Option<Arc<TlsState>>>,
}

/// One thing per listener.
#[derive(Debug, Default)]
struct Listeners<T> {
    grpc: T,
    http: T,
    admin: T,
}

impl Bound {
    /// Loads and validates the configuration (the files, the store's domains,
    /// the admin tokens, the certificates), then binds the ports (never the
    /// other way round: a bad config leaves no port half-open). See [`Bound`].
    ///
    /// ```
    /// # tokio::runtime::Runtime::new()?.block_on(async {
    /// use sluicegate_server::{BindError, Bound, Config};
    /// let config = Config { config_path: Some("/nonexistent/sluicegate".into()), ..Config::default() };
    /// assert!(matches!(Bound::bind(config).await, Err(BindError::Config(_))));
    /// let neither = Bound::bind(Config::default()).await.unwrap_err();
    /// assert!(neither.to_string().contains("--config PATH, --store URL or both"));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// # })?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub async fn bind(config: Config) -> Result<Bound, BindError> {
        let bad = |what: &str, e: String| BindError::Config(ConfigError::new(what, e));
        let settings = TableSettings::new(config.keys_per_limit, config.state_memory)
            .map_err(|e| bad("--state-memory", e.to_string()))?;
        if config.config_path.is_none() && config.store.is_none() {
            return Err(bad(
                "--config",
                "nothing to serve: give --config PATH, --store URL or both".into(),
            ));
        }
        if config.admin.is_some() && config.store.is_none() {
            return Err(bad(
                "--admin",
                "the admin API edits a rule store: give --store URL too".into(),
            ));
        }
        let (sources, mut rules) = match &config.config_path {
            Some(path) => {
                let sources = read_sources(path).map_err(BindError::Config)?;
                let rules =
                    build_rules(&sources, None, settings.clone()).map_err(BindError::Config)?;
                (sources, rules)
            }
            None => (Vec::new(), RuleSet::default()),
        };
        let store = match config.store.clone() {
            Some(store_config) => {
                let pool = settings.pool.clone();
                let opened =
                    tokio::task::spawn_blocking(move || StoreState::open(store_config, &pool))
                        .await
                        .map_err(|e| bad("--store", e.to_string()))?;
                let (state, policies) = opened.map_err(BindError::Config)?;
                for (name, policy) in policies {
                    let domain = Arc::new(TomlDomain::from_store(&name, policy));
                    rules
                        .add_store_domain(&name, DomainRules::Store(domain))
                        .map_err(BindError::Config)?;
                }
                Some(Arc::new(state))
            }
            None => None,
        };
        let tokens = match &config.admin {
            Some(a) => Some(Arc::new(
                Tokens::load(&a.tokens).map_err(|e| bad("--admin-tokens", e))?,
            )),
            None => None,
        };
        let load = |flag: &str, files: &Option<TlsFiles>, alpn: &[&[u8]]| {
            files
                .clone()
                .map(|f| TlsState::load(f, alpn).map(Arc::new))
                .transpose()
                .map_err(|e| bad(flag, e))
        };
        let tls = Listeners {
            grpc: load("--grpc-tls-cert", &config.grpc_tls, &[b"h2"])?,
            http: load("--http-tls-cert", &config.http_tls, &[b"http/1.1"])?,
            admin: load(
                "--admin-tls-cert",
                &config.admin.as_ref().and_then(|a| a.tls.clone()),
                &[b"http/1.1"],
            )?,
        };
        let grpc = TcpListener::bind(config.grpc)
            .await
            .map_err(|e| BindError::Io(config.grpc, e))?;
        let http = TcpListener::bind(config.http)
            .await
            .map_err(|e| BindError::Io(config.http, e))?;
        let admin = match (&config.admin, tokens) {
            (Some(a), Some(tokens)) => Some((
                TcpListener::bind(a.addr)
                    .await
                    .map_err(|e| BindError::Io(a.addr, e))?,
                tokens,
            )),
            _ => None,
        };
        let shared = Arc::new(Shared::new(rules, config.service, settings).with_store(store));
        Ok(Bound {
            config,
            shared,
            sources,
            grpc,
            http,
            admin,
            tls,
        })
    }

    /// The gRPC address actually bound (port 0 picks a free one); see [`Bound`].
    pub fn grpc_addr(&self) -> std::io::Result<SocketAddr> {
        self.grpc.local_addr()
    }

    /// The HTTP address actually bound; see [`Bound`].
    pub fn http_addr(&self) -> std::io::Result<SocketAddr> {
        self.http.local_addr()
    }

    /// The admin address actually bound (`None`: no `--admin`); see [`Bound`].
    pub fn admin_addr(&self) -> Option<SocketAddr> {
        self.admin.as_ref().and_then(|(l, _)| l.local_addr().ok())
    }

    /// Serves until `shutdown` completes, then stops accepting, reports NOT_SERVING
    /// and lets requests in flight finish; see [`Bound`].
    pub async fn serve(
        self,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> Result<(), std::io::Error> {
        let (grpc_addr, http_addr) = (self.grpc_addr()?, self.http_addr()?);
        let admin_addr = self.admin_addr();
        let Bound {
            config,
            shared,
            sources,
            grpc,
            http,
            admin,
            tls,
        } = self;
        let (stop_tx, stop_rx) = watch::channel(false);
        let (health, health_service) = tonic_health::server::health_reporter();
        report_health(&health, tonic_health::ServingStatus::Serving).await;

        let reload = tokio::spawn(reload_loop(
            config.clone(),
            shared.clone(),
            sources,
            stop_rx.clone(),
        ));
        let store_follow = tokio::spawn(crate::store_domains::follow_domains(
            shared.clone(),
            stop_rx.clone(),
        ));
        let tokens = admin.as_ref().map(|(_, t)| t.clone());
        let secrets = tokio::spawn(reload_secrets(
            tokens.clone(),
            [tls.grpc.clone(), tls.http.clone(), tls.admin.clone()]
                .into_iter()
                .flatten()
                .collect(),
            stop_rx.clone(),
        ));

        let (grpc_tx, grpc_rx) = mpsc::channel(256);
        tokio::spawn(accept_loop(
            grpc,
            tls.grpc.clone(),
            grpc_tx,
            stop_rx.clone(),
        ));
        let mut grpc_stop = stop_rx.clone();
        let incoming = tokio_stream::wrappers::ReceiverStream::new(grpc_rx)
            .map(|(conn, _)| Ok::<_, std::io::Error>(Coalesced::new(conn)));
        let grpc_task = tokio::spawn(
            tonic::transport::Server::builder()
                .add_service(health_service)
                .add_service(RateLimitServiceServer::new(RateLimiter::new(
                    shared.clone(),
                )))
                .serve_with_incoming_shutdown(incoming, async move {
                    let _ = grpc_stop.wait_for(|s| *s).await;
                }),
        );
        let metrics_shared = shared.clone();
        let health_shared = shared.clone();
        let app = axum::Router::new()
            .route(
                "/metrics",
                axum::routing::get(move || {
                    let s = metrics_shared.clone();
                    async move {
                        (
                            [("content-type", "text/plain; version=0.0.4")],
                            s.render_metrics(),
                        )
                    }
                }),
            )
            .route(
                "/healthz",
                axum::routing::get(move || {
                    let s = health_shared.clone();
                    async move { healthz(&s) }
                }),
            );
        let http_task = serve_http(http, tls.http.clone(), app, &stop_rx);
        let admin_task = match (admin, &shared.store) {
            (Some((listener, tokens)), Some(store)) => {
                let app = crate::admin::router(crate::admin::Admin {
                    shared: shared.clone(),
                    store: store.clone(),
                    tokens,
                    started: std::time::SystemTime::now(),
                });
                Some(serve_http(listener, tls.admin.clone(), app, &stop_rx))
            }
            _ => None,
        };
        // scripts/test-server reads the bound addresses from this line.
        let admin_shown = admin_addr.map_or_else(|| "-".to_owned(), |a| a.to_string());
        tracing::info!(grpc = %grpc_addr, http = %http_addr, admin = %admin_shown, domains = shared.rules().domain_count(), "serving");

        shutdown.await;
        tracing::info!("shutting down: NOT_SERVING, draining requests in flight");
        report_health(&health, tonic_health::ServingStatus::NotServing).await;
        let _ = stop_tx.send(true);
        let grpc_result = grpc_task.await.map_err(std::io::Error::other)?;
        let http_result = http_task.await.map_err(std::io::Error::other)?;
        let admin_result = match admin_task {
            Some(t) => t.await.map_err(std::io::Error::other)?,
            None => Ok(()),
        };
        let _ = reload.await;
        let _ = store_follow.await;
        let _ = secrets.await;
        grpc_result.map_err(std::io::Error::other)?;
        http_result?;
        admin_result
    }
}

/// `/healthz`: 200 with `{"status": "ok"}`, or `{"status": "degraded", …}`
/// while the rule store cannot be reached (the rules in force still decide).
fn healthz(shared: &Shared) -> axum::response::Response {
    use axum::response::IntoResponse as _;
    let body = match shared.store_health() {
        Some(h) if !h.up => serde_json::json!({
            "status": "degraded",
            "store": "unreachable",
            "store_errors": h.errors,
            "last_error": h.last_error,
        }),
        Some(_) => serde_json::json!({"status": "ok", "store": "reachable"}),
        None => serde_json::json!({"status": "ok"}),
    };
    ([("content-type", "application/json")], format!("{body}\n")).into_response()
}

/// Serves `app` on `listener` (TLS if `tls`) until the stop signal.
fn serve_http(
    listener: TcpListener,
    tls: Option<Arc<TlsState>>,
    app: axum::Router,
    stop: &watch::Receiver<bool>,
) -> tokio::task::JoinHandle<std::io::Result<()>> {
    let local = listener.local_addr();
    let (tx, rx) = mpsc::channel(256);
    tokio::spawn(accept_loop(listener, tls, tx, stop.clone()));
    let mut stop = stop.clone();
    tokio::spawn(async move {
        let listener = ChannelListener { rx, local: local? };
        axum::serve(listener, app)
            .with_graceful_shutdown(async move {
                let _ = stop.wait_for(|s| *s).await;
            })
            .await
    })
}

/// Reads the admin tokens and every listener's certificates again each
/// second and on SIGHUP; a change is in force for the next request (tokens) or
/// connection (certificates). A file that does not load is logged once per
/// change and the one in force stays.
async fn reload_secrets(
    tokens: Option<Arc<Tokens>>,
    tls: Vec<Arc<TlsState>>,
    mut stop: watch::Receiver<bool>,
) {
    if tokens.is_none() && tls.is_empty() {
        return;
    }
    #[cfg(unix)]
    let mut hup = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()).ok();
    let mut failing: Vec<String> = Vec::new();
    loop {
        #[cfg(unix)]
        let hangup = async {
            match hup.as_mut() {
                Some(h) => {
                    h.recv().await;
                }
                None => std::future::pending().await,
            }
        };
        #[cfg(not(unix))]
        let hangup = std::future::pending::<()>();
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_secs(1)) => {}
            _ = hangup => tracing::info!("SIGHUP: reading the admin tokens and certificates again"),
            _ = stop.wait_for(|s| *s) => return,
        }
        let (tokens, tls) = (tokens.clone(), tls.clone());
        let results = tokio::task::spawn_blocking(move || {
            let mut out = Vec::new();
            if let Some(t) = &tokens {
                out.push(("admin tokens".to_owned(), t.reload()));
            }
            for t in &tls {
                out.push((t.cert_path().display().to_string(), t.reload()));
            }
            out
        })
        .await
        .unwrap_or_default();
        let mut now_failing = Vec::new();
        for (what, r) in results {
            match r {
                Ok(true) => tracing::info!(file = %what, "reloaded"),
                Ok(false) => {}
                Err(e) => {
                    if !failing.contains(&e) {
                        tracing::error!(file = %what, error = %e, "reload failed; keeping the one in force");
                    }
                    now_failing.push(e);
                }
            }
        }
        failing = now_failing;
    }
}

/// Polls the configuration every `reload_interval`; on a change, builds new rules
/// (state carried over) and puts them in force, or logs the error and keeps the old
/// rules. A failed text is not retried until it changes again.
async fn reload_loop(
    config: Config,
    shared: Arc<Shared>,
    mut seen: Vec<(String, String)>,
    mut stop: watch::Receiver<bool>,
) {
    let Some(path) = config.config_path.clone() else {
        return;
    };
    if config.reload_interval.is_zero() {
        return;
    }
    loop {
        tokio::select! {
            _ = tokio::time::sleep(config.reload_interval) => {}
            _ = stop.wait_for(|s| *s) => return,
        }
        let p = path.clone();
        let read = tokio::task::spawn_blocking(move || read_sources(&p)).await;
        let sources = match read {
            Ok(Ok(s)) => s,
            Ok(Err(e)) => {
                // A missing or unreadable source is a failed reload only once per change.
                let marker = vec![(e.file.clone(), e.message.clone())];
                if seen != marker {
                    tracing::error!(error = %e, "config reload failed; keeping the rules in force");
                    shared.metrics.reload(false);
                    seen = marker;
                }
                continue;
            }
            Err(_) => continue,
        };
        if sources == seen {
            continue;
        }
        let built = shared.update(|old| build_rules(&sources, Some(old), shared.tables.clone()));
        match built {
            Ok(()) => {
                tracing::info!(domains = shared.rules().domain_count(), "config reloaded");
                shared.metrics.reload(true);
            }
            Err(e) => {
                tracing::error!(error = %e, "config reload failed; keeping the rules in force");
                shared.metrics.reload(false);
            }
        }
        seen = sources;
    }
}

/// Why the server could not start.
///
/// ```
/// use sluicegate_server::{BindError, ConfigError};
/// let e = BindError::Config(ConfigError::new("a.yaml", "bad"));
/// assert_eq!(e.to_string(), "invalid configuration: a.yaml: bad");
/// ```
#[derive(Debug)]
pub enum BindError {
    /// The configuration is invalid (nothing was bound).
    Config(ConfigError),
    /// A port could not be bound.
    Io(SocketAddr, std::io::Error),
}

impl std::fmt::Display for BindError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Config(e) => write!(f, "invalid configuration: {e}"),
            Self::Io(addr, e) => write!(f, "cannot listen on {addr}: {e}"),
        }
    }
}

impl std::error::Error for BindError {}

/// Completes on SIGTERM or Ctrl-C.
///
/// ```
/// # tokio::runtime::Runtime::new().unwrap().block_on(async {
/// let waited = tokio::time::timeout(std::time::Duration::from_millis(10), sluicegate_server::shutdown_signal()).await;
/// assert!(waited.is_err(), "no signal was sent");
/// # });
/// ```
pub async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = term.recv() => {}
                    _ = ctrl_c => {}
                }
            }
            Err(_) => {
                let _ = ctrl_c.await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = ctrl_c.await;
    }
}

/// Reports `status` for the whole server (`""`) and for the rate limit service.
async fn report_health(
    health: &tonic_health::server::HealthReporter,
    status: tonic_health::ServingStatus,
) {
    for service in ["", SERVICE_NAME] {
        health.set_service_status(service, status).await;
    }
}
