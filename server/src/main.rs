//! `sluicegate-server`: flags and environment in, [`sluicegate_server::Bound`] out.
//! Exit codes: 0 after a graceful shutdown, 1 when the server fails, 2 on a usage
//! or configuration error (nothing was bound).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use sluicegate_server::{BindError, Bound, Config, ServiceSettings};

/// An Envoy rate limit service (RLS v3 gRPC) on sluicegate limiters.
#[derive(Debug, Parser)]
#[command(version, about)]
struct Args {
    /// A config file or a directory of them, one domain each: envoyproxy/ratelimit
    /// YAML (*.yaml, *.yml) or a TOML policy (<domain>.toml).
    #[arg(long, env = "SLUICEGATE_CONFIG")]
    config: PathBuf,
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
    let config = Config {
        config_path: args.config,
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
