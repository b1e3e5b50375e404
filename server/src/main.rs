//! `sluicegate-server`: flags and environment in, [`sluicegate_server::Bound`] out.
//! Exit codes: 0 after a graceful shutdown, 1 when the server fails, 2 on a usage
//! or configuration error (nothing was bound).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;

// The `mimalloc` feature (on by default): glibc's malloc and free were 18 % of
// the server's CPU per decision; see the `[features]` note in Cargo.toml.
#[cfg(feature = "mimalloc")]
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;
use sluicegate_server::{
    AdminConfig, BindError, Bound, Config, ServiceSettings, StoreConfig, TlsFiles,
};

/// An Envoy rate limit service (RLS v3 gRPC) on sluicegate limiters.
#[derive(Debug, Parser)]
#[command(version, about)]
struct Args {
    /// A config file or a directory of them, one domain each: envoyproxy/ratelimit
    /// YAML (*.yaml, *.yml) or a TOML policy (<domain>.toml). Optional with --store.
    #[arg(long, env = "SLUICEGATE_CONFIG", required_unless_present = "store")]
    config: Option<PathBuf>,
    /// A rule store (sqlite:PATH) whose every domain is served like a TOML
    /// domain of that name, following its changes within a second.
    #[arg(long, env = "SLUICEGATE_STORE")]
    store: Option<String>,
    /// A directory each store domain is written to after every good load
    /// (<domain>.json), read at start when the store cannot be reached.
    #[arg(long, env = "SLUICEGATE_STORE_SNAPSHOT", requires = "store")]
    store_snapshot: Option<PathBuf>,
    /// The admin API and page (needs --store and --admin-tokens): ADDR:PORT,
    /// or PORT alone for 127.0.0.1:PORT.
    #[arg(long, env = "SLUICEGATE_ADMIN", value_parser = parse_admin_addr)]
    admin: Option<SocketAddr>,
    /// The admin tokens: one `<name> <read|write> <token>` per line, `#`
    /// comments. Reloaded on change or SIGHUP.
    #[arg(long, env = "SLUICEGATE_ADMIN_TOKENS")]
    admin_tokens: Option<PathBuf>,
    /// TLS certificate chain (PEM) of the gRPC listener.
    #[arg(long, env = "SLUICEGATE_GRPC_TLS_CERT", requires = "grpc_tls_key")]
    grpc_tls_cert: Option<PathBuf>,
    /// Its private key (PEM).
    #[arg(long, env = "SLUICEGATE_GRPC_TLS_KEY", requires = "grpc_tls_cert")]
    grpc_tls_key: Option<PathBuf>,
    /// A CA (PEM) the gRPC clients' certificates must chain to (mTLS).
    #[arg(long, env = "SLUICEGATE_GRPC_CLIENT_CA", requires = "grpc_tls_cert")]
    grpc_client_ca: Option<PathBuf>,
    /// TLS certificate chain (PEM) of the admin listener.
    #[arg(long, env = "SLUICEGATE_ADMIN_TLS_CERT", requires = "admin_tls_key")]
    admin_tls_cert: Option<PathBuf>,
    /// Its private key (PEM).
    #[arg(long, env = "SLUICEGATE_ADMIN_TLS_KEY", requires = "admin_tls_cert")]
    admin_tls_key: Option<PathBuf>,
    /// A CA (PEM) the admin clients' certificates must chain to (mTLS).
    #[arg(long, env = "SLUICEGATE_ADMIN_CLIENT_CA", requires = "admin_tls_cert")]
    admin_client_ca: Option<PathBuf>,
    /// TLS certificate chain (PEM) of the HTTP listener (/metrics, /healthz).
    #[arg(long, env = "SLUICEGATE_HTTP_TLS_CERT", requires = "http_tls_key")]
    http_tls_cert: Option<PathBuf>,
    /// Its private key (PEM).
    #[arg(long, env = "SLUICEGATE_HTTP_TLS_KEY", requires = "http_tls_cert")]
    http_tls_key: Option<PathBuf>,
    /// A CA (PEM) the HTTP clients' certificates must chain to (mTLS).
    #[arg(long, env = "SLUICEGATE_HTTP_CLIENT_CA", requires = "http_tls_cert")]
    http_client_ca: Option<PathBuf>,
    /// Address of the gRPC listener (RateLimitService and grpc.health.v1).
    #[arg(long, env = "SLUICEGATE_GRPC", default_value = "127.0.0.1:8081")]
    grpc: SocketAddr,
    /// Address of the HTTP listener (/metrics, /healthz).
    #[arg(long, env = "SLUICEGATE_HTTP", default_value = "127.0.0.1:8080")]
    http: SocketAddr,
    /// Seconds between checks of the config for changes (0: no hot reload).
    #[arg(long, env = "SLUICEGATE_RELOAD_INTERVAL", default_value_t = 1.0)]
    reload_interval: f64,
    /// Distinct descriptor values each YAML limit tracks at once; when all are live,
    /// a new value is over the limit until one frees up.
    #[arg(long, env = "SLUICEGATE_KEYS_PER_LIMIT", default_value_t = 131_072)]
    keys_per_limit: usize,
    /// Memory for every limit's keys, all domains together (one pool: 16 bytes a
    /// key; a full pool evicts the stalest keys into each limit's sketch, never
    /// lifting a limit): bytes, or e.g. "256 MiB", "1 GiB".
    #[arg(long, env = "SLUICEGATE_STATE_MEMORY", default_value = "64 MiB",
          value_parser = sluicegate_policy::StateSettings::parse_memory)]
    state_memory: usize,
    /// Largest hits_addend accepted; larger requests get INVALID_ARGUMENT.
    #[arg(
        long,
        env = "SLUICEGATE_MAX_HITS_ADDEND",
        default_value_t = 1_000_000_000
    )]
    max_hits_addend: u64,
    /// Add RateLimit and RateLimit-Policy headers to every response.
    #[arg(long, env = "SLUICEGATE_RESPONSE_HEADERS")]
    response_headers: bool,
}

/// `--admin`: ADDR:PORT, or a port alone on the loopback interface (an admin
/// port is never exposed by default).
fn parse_admin_addr(s: &str) -> Result<SocketAddr, String> {
    if let Ok(port) = s.parse::<u16>() {
        return Ok(SocketAddr::from(([127, 0, 0, 1], port)));
    }
    s.parse()
        .map_err(|_| format!("`{s}` is neither ADDR:PORT nor a port"))
}

/// A listener's TLS files, if its certificate was given.
fn tls(
    cert: Option<PathBuf>,
    key: Option<PathBuf>,
    client_ca: Option<PathBuf>,
) -> Option<TlsFiles> {
    Some(TlsFiles {
        cert: cert?,
        key: key?,
        client_ca,
    })
}

fn main() -> ExitCode {
    let args = Args::parse();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    let Ok(reload_interval) = Duration::try_from_secs_f64(args.reload_interval) else {
        eprintln!("error: --reload-interval must be a finite, non-negative number of seconds");
        return ExitCode::from(2);
    };
    let admin = match (args.admin, args.admin_tokens) {
        (Some(addr), Some(tokens)) => Some(AdminConfig {
            addr,
            tokens,
            tls: tls(
                args.admin_tls_cert,
                args.admin_tls_key,
                args.admin_client_ca,
            ),
        }),
        (Some(_), None) => {
            eprintln!("error: --admin needs --admin-tokens PATH (SLUICEGATE_ADMIN_TOKENS): there are no default credentials, so without a token file the admin listener does not start");
            return ExitCode::from(2);
        }
        (None, _) => None,
    };
    let config = Config {
        config_path: args.config,
        store: args.store.map(|url| StoreConfig {
            url,
            snapshot: args.store_snapshot,
        }),
        admin,
        grpc_tls: tls(args.grpc_tls_cert, args.grpc_tls_key, args.grpc_client_ca),
        http_tls: tls(args.http_tls_cert, args.http_tls_key, args.http_client_ca),
        grpc: args.grpc,
        http: args.http,
        reload_interval,
        keys_per_limit: args.keys_per_limit,
        state_memory: args.state_memory,
        service: ServiceSettings {
            max_hits_addend: args.max_hits_addend,
            response_headers: args.response_headers,
        },
    };
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    runtime.block_on(async {
        let bound = match Bound::bind(config).await {
            Ok(b) => b,
            Err(e @ BindError::Config(_)) => {
                eprintln!("error: {e}");
                return ExitCode::from(2);
            }
            Err(e) => {
                eprintln!("error: {e}");
                return ExitCode::FAILURE;
            }
        };
        match bound.serve(sluicegate_server::shutdown_signal()).await {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("error: {e}");
                ExitCode::FAILURE
            }
        }
    })
}
