//! The running server: the two listeners (gRPC: RLS + health; HTTP: `/metrics`,
//! `/healthz`), hot reload by polling the configuration, and graceful shutdown.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;

use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_server::RateLimitServiceServer;
use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::config::{build_rules, read_sources, Config, ConfigError};
use crate::rule_set::TableSettings;
use crate::service::{RateLimiter, Shared};

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
///     config_path: dir.clone(),
///     grpc: "127.0.0.1:0".parse()?,
///     http: "127.0.0.1:0".parse()?,
///     reload_interval: Duration::ZERO,
///     keys_per_limit: 1024,
///     state_memory: 8 << 20,
///     service: ServiceSettings { max_hits_addend: 1000, response_headers: false },
/// };
/// let bound = Bound::bind(config).await?;
/// let (grpc, http) = (bound.grpc_addr()?, bound.http_addr()?);
/// assert!(grpc.port() != 0 && http.port() != 0 && grpc != http);
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
}

impl Bound {
    /// Loads and validates the configuration, then binds both ports (never the
    /// other way round: a bad config leaves no port half-open). See [`Bound`].
    ///
    /// ```
    /// # tokio::runtime::Runtime::new()?.block_on(async {
    /// # use std::time::Duration;
    /// use sluicegate_server::{BindError, Bound, Config, ServiceSettings};
    /// let config = Config {
    ///     config_path: "/nonexistent/sluicegate".into(),
    ///     grpc: "127.0.0.1:0".parse()?,
    ///     http: "127.0.0.1:0".parse()?,
    ///     reload_interval: Duration::ZERO,
    ///     keys_per_limit: 64,
    ///     state_memory: 1 << 20,
    ///     service: ServiceSettings { max_hits_addend: 1, response_headers: false },
    /// };
    /// assert!(matches!(Bound::bind(config).await, Err(BindError::Config(_))));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// # })?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub async fn bind(config: Config) -> Result<Bound, BindError> {
        let settings = TableSettings::new(config.keys_per_limit, config.state_memory)
            .map_err(|e| BindError::Config(ConfigError::new("--state-memory", e.to_string())))?;
        let sources = read_sources(&config.config_path).map_err(BindError::Config)?;
        let rules = build_rules(&sources, None, settings.clone()).map_err(BindError::Config)?;
        let grpc = TcpListener::bind(config.grpc)
            .await
            .map_err(|e| BindError::Io(config.grpc, e))?;
        let http = TcpListener::bind(config.http)
            .await
            .map_err(|e| BindError::Io(config.http, e))?;
        let shared = Arc::new(Shared::new(rules, config.service, settings));
        Ok(Bound {
            config,
            shared,
            sources,
            grpc,
            http,
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

    /// Serves until `shutdown` completes, then stops accepting, reports NOT_SERVING
    /// and lets requests in flight finish; see [`Bound`].
    pub async fn serve(
        self,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> Result<(), std::io::Error> {
        let (grpc_addr, http_addr) = (self.grpc_addr()?, self.http_addr()?);
        let Bound {
            config,
            shared,
            sources,
            grpc,
            http,
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

        let mut grpc_stop = stop_rx.clone();
        let grpc_task = tokio::spawn(
            tonic::transport::Server::builder()
                .add_service(health_service)
                .add_service(RateLimitServiceServer::new(RateLimiter::new(
                    shared.clone(),
                )))
                .serve_with_incoming_shutdown(tokio_incoming(grpc), async move {
                    let _ = grpc_stop.wait_for(|s| *s).await;
                }),
        );
        let metrics_shared = shared.clone();
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
            .route("/healthz", axum::routing::get(|| async { "ok\n" }));
        let mut http_stop = stop_rx.clone();
        let http_task = tokio::spawn(async move {
            axum::serve(http, app)
                .with_graceful_shutdown(async move {
                    let _ = http_stop.wait_for(|s| *s).await;
                })
                .await
        });
        // scripts/test-server reads the bound addresses from this line.
        tracing::info!(grpc = %grpc_addr, http = %http_addr, domains = shared.rules().domain_count(), "serving");

        shutdown.await;
        tracing::info!("shutting down: NOT_SERVING, draining requests in flight");
        report_health(&health, tonic_health::ServingStatus::NotServing).await;
        let _ = stop_tx.send(true);
        let grpc_result = grpc_task.await.map_err(std::io::Error::other)?;
        let http_result = http_task.await.map_err(std::io::Error::other)?;
        let _ = reload.await;
        grpc_result.map_err(std::io::Error::other)?;
        http_result
    }
}

/// tonic's incoming stream over a bound listener (TCP_NODELAY: answers are small).
fn tokio_incoming(
    listener: TcpListener,
) -> impl tokio_stream::Stream<Item = std::io::Result<tokio::net::TcpStream>> + Send + 'static {
    use tokio_stream::StreamExt as _;
    tokio_stream::wrappers::TcpListenerStream::new(listener).map(|conn| {
        let conn = conn?;
        conn.set_nodelay(true)?;
        Ok(conn)
    })
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
    if config.reload_interval.is_zero() {
        return;
    }
    loop {
        tokio::select! {
            _ = tokio::time::sleep(config.reload_interval) => {}
            _ = stop.wait_for(|s| *s) => return,
        }
        let path = config.config_path.clone();
        let read = tokio::task::spawn_blocking(move || read_sources(&path)).await;
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
        let old = shared.rules();
        match build_rules(&sources, Some(&old), shared.tables.clone()) {
            Ok(rules) => {
                tracing::info!(domains = rules.domain_count(), "config reloaded");
                shared.replace(rules);
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
