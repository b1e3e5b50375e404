//! Load generator for sluicegate-server: many concurrent ShouldRateLimit streams
//! over several HTTP/2 connections, measuring decisions per second and latency
//! percentiles on loopback.
//!
//! ```text
//! cargo run --release -p sluicegate-server --example loadgen -- --seconds 5 --distinct 1000
//! cargo run --release -p sluicegate-server --example loadgen -- --seconds 5 --distinct 1000 --rate 25000
//! ```
//! Without `--addr` it starts a server in this process on 127.0.0.1 (its own
//! runtime, `--server-threads` workers) with one per-second limit keyed by the
//! descriptor value; `--distinct` values are cycled through. `--rate` switches from
//! closed loop (as fast as answers come back) to an open loop at that many requests
//! per second. Latency is measured from the moment each request is sent; in open
//! loop the lag of sends behind their schedule (tokio's timer has 1 ms
//! granularity, and a saturated client falls behind) is reported apart, so that
//! coordinated omission shows instead of hiding.
//!
//! `--algorithm token_bucket|fixed_window|sliding_window|...` sets the limit's
//! algorithm (a TOML rule on every backend, `local` included; without it,
//! `local` serves envoyproxy/ratelimit YAML and `redis`/`hybrid` a fixed window).
//!
//! `--backend redis|hybrid --redis redis://127.0.0.1:6379` gives the in-process
//! server the same limit as a TOML rule on that backend (a fixed window per
//! second keyed by the descriptor value, keys under a prefix of this run's own)
//! and reports how many Redis script calls the run made per decision, read from
//! the server's `INFO commandstats` before and after: 1.0 for `redis` (one
//! round trip per decision), the share not answered from leases for `hybrid`.
//!
//! ```text
//! cargo run --release -p sluicegate-server --example loadgen -- --seconds 5 --distinct 1000 \
//!     --backend hybrid --redis redis://127.0.0.1:6379
//! ```

use std::io::{BufRead, BufReader, Read, Write};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use clap::Parser;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use tonic::transport::Channel;

#[derive(Debug, Parser)]
struct Args {
    /// A running server; default: start one in this process.
    #[arg(long)]
    addr: Option<SocketAddr>,
    /// Seconds of load (after a 0.5 s warm-up).
    #[arg(long, default_value_t = 5.0)]
    seconds: f64,
    /// Distinct descriptor values, cycled through.
    #[arg(long, default_value_t = 1000)]
    distinct: u64,
    /// Concurrent request streams.
    #[arg(long, default_value_t = 64)]
    concurrency: usize,
    /// HTTP/2 connections the streams are spread over.
    #[arg(long, default_value_t = 4)]
    connections: usize,
    /// Open loop at this many requests per second (default: closed loop).
    #[arg(long)]
    rate: Option<f64>,
    /// Worker threads of the in-process server.
    #[arg(long, default_value_t = 2)]
    server_threads: usize,
    /// Worker threads of the client.
    #[arg(long, default_value_t = 2)]
    client_threads: usize,
    /// Requests per second allowed per descriptor value by the in-process server.
    #[arg(long, default_value_t = 1000)]
    limit: u32,
    /// Where the in-process server keeps its counts: `local` (envoyproxy/ratelimit
    /// YAML, in memory), or a TOML rule on `redis` or `hybrid` (needs `--redis`).
    #[arg(long, value_enum, default_value_t = Backend::Local)]
    backend: Backend,
    /// The Redis server of `--backend redis|hybrid` (`redis://host:port`).
    #[arg(long)]
    redis: Option<String>,
    /// `--backend hybrid`: the rule file's `[redis]` `lease_horizon_ms` and
    /// `lease_ttl_ms` (default: the policy's).
    #[arg(long)]
    lease_ms: Option<u64>,
    /// The limit's algorithm, by its canonical name (`token_bucket`,
    /// `fixed_window`, `sliding_window`, ...: core's `Kind`); default: a fixed
    /// window for `redis`/`hybrid`, envoyproxy/ratelimit's own for `local`.
    #[arg(long)]
    algorithm: Option<sluicegate::Kind>,
}

/// The in-process server's backend.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum Backend {
    Local,
    Redis,
    Hybrid,
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = Args::parse();
    if args.distinct == 0
        || args.concurrency == 0
        || args.connections == 0
        || !args.seconds.is_finite()
        || args.seconds <= 0.0
    {
        return Err(
            "--distinct, --concurrency, --connections and --seconds must be positive".into(),
        );
    }
    let redis = match (args.backend, &args.redis) {
        (Backend::Local, None) => None,
        (Backend::Local, Some(_)) => return Err("--redis needs --backend redis or hybrid".into()),
        (_, None) => return Err("--backend redis|hybrid needs --redis URL".into()),
        (_, Some(_)) if args.addr.is_some() => {
            return Err("--backend configures the in-process server: not with --addr".into())
        }
        (_, Some(url)) => Some(RedisStats::new(url)?),
    };
    let (addr, _server) = match args.addr {
        Some(a) => (a, None),
        None => {
            let (a, s) = start_server(&args)?;
            (a, Some(s))
        }
    };
    let calls_before = redis.as_ref().map(RedisStats::script_calls).transpose()?;
    let cpu_before = process_cpu_secs();
    let client_rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(args.client_threads)
        .enable_all()
        .build()?;
    let (report, decisions) = client_rt.block_on(run(&args, addr))?;
    // CPU this process spent per decision (client, plus the server when it runs
    // in-process), warm-up included: what 2 idle cores would sustain, whatever
    // else the machine was doing during the run.
    let cpu = match (cpu_before, process_cpu_secs()) {
        (Some(a), Some(b)) if decisions > 0 => {
            let us = (b - a) * 1e6 / decisions as f64;
            format!(
                ", {us:.1} us CPU per decision ({} process)",
                if args.addr.is_some() {
                    "client"
                } else {
                    "client + server"
                }
            )
        }
        _ => String::new(),
    };
    let redis_calls = match (&redis, calls_before) {
        (Some(r), Some(before)) => {
            let calls = r.script_calls()?.saturating_sub(before);
            format!(
                ", {:.3} Redis script calls per decision ({calls} calls)",
                calls as f64 / decisions.max(1) as f64
            )
        }
        _ => String::new(),
    };
    let algorithm = args.algorithm.map_or("", sluicegate::Kind::name);
    println!(
        "backend={:?}{}{algorithm} {report}{cpu}{redis_calls}",
        args.backend,
        if algorithm.is_empty() {
            ""
        } else {
            " algorithm="
        }
    );
    Ok(())
}

/// The Redis server of a `redis`/`hybrid` run, asked for its script call counts
/// over a plain RESP connection (`INFO commandstats`).
struct RedisStats {
    addr: String,
}

impl RedisStats {
    fn new(url: &str) -> Result<Self, Box<dyn std::error::Error>> {
        let rest = url
            .strip_prefix("redis://")
            .ok_or("--redis takes a redis://host:port URL")?;
        let host_port = rest.split(['/', '?']).next().unwrap_or(rest);
        let host_port = host_port.rsplit('@').next().unwrap_or(host_port);
        let addr = if host_port.contains(':') {
            host_port.to_owned()
        } else {
            format!("{host_port}:6379")
        };
        let stats = Self { addr };
        stats.script_calls()?;
        Ok(stats)
    }

    /// Calls of `EVALSHA`, `EVAL` and `FCALL` so far.
    fn script_calls(&self) -> Result<u64, Box<dyn std::error::Error>> {
        let mut conn = std::net::TcpStream::connect(&self.addr)?;
        conn.set_read_timeout(Some(Duration::from_secs(5)))?;
        conn.write_all(b"*2\r\n$4\r\nINFO\r\n$12\r\ncommandstats\r\n")?;
        let mut reader = BufReader::new(conn);
        let mut header = String::new();
        reader.read_line(&mut header)?;
        let len: usize = header
            .strip_prefix('$')
            .and_then(|l| l.trim().parse().ok())
            .ok_or_else(|| format!("INFO commandstats: unexpected reply {header:?}"))?;
        let mut body = vec![0; len];
        reader.read_exact(&mut body)?;
        let text = String::from_utf8_lossy(&body);
        let mut calls = 0;
        for line in text.lines() {
            for cmd in ["evalsha", "eval", "fcall"] {
                let Some(stats) = line.strip_prefix(&format!("cmdstat_{cmd}:")) else {
                    continue;
                };
                calls += stats
                    .split(',')
                    .find_map(|kv| kv.strip_prefix("calls="))
                    .and_then(|v| v.parse::<u64>().ok())
                    .unwrap_or(0);
            }
        }
        Ok(calls)
    }
}

/// The in-process server's runtime and the sender whose drop stops it.
type InProcess = (tokio::runtime::Runtime, tokio::sync::oneshot::Sender<()>);

/// The in-process server: its own runtime, stopped when the returned sender drops.
fn start_server(args: &Args) -> Result<(SocketAddr, InProcess), Box<dyn std::error::Error>> {
    let dir = std::env::temp_dir().join(format!("sluicegate-loadgen-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    match (args.backend, &args.redis) {
        (Backend::Local, _) if args.algorithm.is_some() => {
            // The same rule as redis/hybrid's below, on the local backend.
            let toml = format!(
                "[[rule]]\nname = \"per-client\"\nkey = [\"client\"]\nlimit = \"{}/second\"\n\
                 algorithm = \"{}\"\n",
                args.limit,
                args.algorithm
                    .unwrap_or(sluicegate::Kind::FixedWindow)
                    .name(),
            );
            std::fs::write(dir.join("bench.toml"), toml)?;
        }
        (Backend::Redis | Backend::Hybrid, Some(url)) => {
            // The YAML limit as a TOML rule: per second per value, a fixed
            // window unless --algorithm says otherwise.
            let toml = format!(
                "[redis]\nurl = \"{url}\"\nprefix = \"loadgen-{}-{}:\"\n{}\n\
                 [[rule]]\nname = \"per-client\"\nkey = [\"client\"]\nlimit = \"{}/second\"\n\
                 algorithm = \"{}\"\nbackend = \"{}\"\non_error = \"open\"\n",
                std::process::id(),
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| d.as_nanos()),
                args.lease_ms.map_or_else(String::new, |ms| format!(
                    "lease_horizon_ms = {ms}\nlease_ttl_ms = {ms}\n"
                )),
                args.limit,
                args.algorithm
                    .unwrap_or(sluicegate::Kind::FixedWindow)
                    .name(),
                if args.backend == Backend::Redis {
                    "redis"
                } else {
                    "hybrid"
                },
            );
            std::fs::write(dir.join("bench.toml"), toml)?;
        }
        _ => {
            let yaml = format!("domain: bench\ndescriptors:\n  - key: client\n    rate_limit: {{unit: second, requests_per_unit: {}}}\n", args.limit);
            std::fs::write(dir.join("bench.yaml"), yaml)?;
        }
    }
    let config = sluicegate_server::Config {
        config_path: Some(dir.clone()),
        grpc: "127.0.0.1:0".parse()?,
        http: "127.0.0.1:0".parse()?,
        reload_interval: Duration::ZERO,
        keys_per_limit: (args.distinct as usize).saturating_mul(2).max(1024),
        state_memory: 256 << 20,
        service: sluicegate_server::ServiceSettings {
            max_hits_addend: 1_000_000,
            response_headers: false,
        },
        ..Default::default()
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(args.server_threads)
        .enable_all()
        .build()?;
    let bound = rt.block_on(sluicegate_server::Bound::bind(config))?;
    let addr = bound.grpc_addr()?;
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    rt.spawn(bound.serve(async move {
        let _ = rx.await;
    }));
    let _ = std::fs::remove_dir_all(&dir);
    Ok((addr, (rt, tx)))
}

/// The `p` quantile of sorted nanoseconds, in microseconds (0 when empty).
fn percentile_us(sorted: &[u64], p: f64) -> f64 {
    let i = ((p * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len().max(1)) - 1;
    sorted.get(i).copied().unwrap_or(0) as f64 / 1000.0
}

/// User + system CPU seconds of this process (Linux `/proc`, USER_HZ = 100).
fn process_cpu_secs() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // Fields after the command name (which may contain spaces) start at `) `.
    let rest = stat.get(stat.rfind(')')? + 2..)?;
    let fields: Vec<&str> = rest.split(' ').collect();
    let utime: f64 = fields.get(11)?.parse().ok()?;
    let stime: f64 = fields.get(12)?.parse().ok()?;
    Some((utime + stime) / 100.0)
}

fn request(value: u64) -> RateLimitRequest {
    RateLimitRequest {
        domain: "bench".into(),
        descriptors: vec![RateLimitDescriptor {
            entries: vec![Entry {
                key: "client".into(),
                value: value.to_string(),
            }],
            ..Default::default()
        }],
        hits_addend: 1,
    }
}

struct TaskResult {
    latencies_ns: Vec<u64>,
    lag_ns: Vec<u64>,
    sent: u64,
    over: u64,
    errors: u64,
}

/// The report line and the number of requests sent (warm-up included).
async fn run(args: &Args, addr: SocketAddr) -> Result<(String, u64), Box<dyn std::error::Error>> {
    let mut channels = Vec::with_capacity(args.connections);
    for _ in 0..args.connections {
        channels.push(
            Channel::from_shared(format!("http://{addr}"))?
                .tcp_nodelay(true)
                .connect()
                .await?,
        );
    }
    let warmup = Duration::from_millis(500);
    let measure = Duration::from_secs_f64(args.seconds);
    let start = Instant::now() + Duration::from_millis(50);
    let per_task_interval = args
        .rate
        .map(|r| Duration::from_secs_f64(args.concurrency as f64 / r));
    let mut tasks = Vec::with_capacity(args.concurrency);
    for t in 0..args.concurrency {
        let mut client = RateLimitServiceClient::new(channels[t % channels.len()].clone());
        let distinct = args.distinct;
        let phase = t as f64 / args.concurrency as f64;
        tasks.push(tokio::spawn(async move {
            let mut res = TaskResult {
                latencies_ns: Vec::with_capacity(1 << 16),
                lag_ns: Vec::new(),
                over: 0,
                errors: 0,
                sent: 0,
            };
            // Spread the tasks' first values and, in open loop, their start times.
            let mut i = (t as u64).wrapping_mul(7919) % distinct;
            let mut next = start + per_task_interval.map_or(Duration::ZERO, |iv| iv.mul_f64(phase));
            let end = start + warmup + measure;
            loop {
                let scheduled = match per_task_interval {
                    Some(iv) => {
                        let scheduled = next;
                        tokio::time::sleep_until(scheduled.into()).await;
                        next += iv;
                        Some(scheduled)
                    }
                    None => None,
                };
                let sent = Instant::now();
                if scheduled.unwrap_or(sent) >= end {
                    break;
                }
                if let Some(s) = scheduled.filter(|_| sent >= start + warmup) {
                    res.lag_ns
                        .push(u64::try_from((sent - s).as_nanos()).unwrap_or(u64::MAX));
                }
                let answer = client.should_rate_limit(request(i)).await;
                let done = Instant::now();
                res.sent += 1;
                i = (i + 1) % distinct;
                if sent < start + warmup {
                    continue;
                }
                match answer {
                    Ok(r) if r.get_ref().overall_code == Code::OverLimit as i32 => res.over += 1,
                    Ok(_) => {}
                    Err(_) => res.errors += 1,
                }
                res.latencies_ns
                    .push(u64::try_from((done - sent).as_nanos()).unwrap_or(u64::MAX));
            }
            res
        }));
    }
    let (mut all, mut lag) = (Vec::new(), Vec::new());
    let (mut over, mut errors, mut sent) = (0, 0, 0);
    for t in tasks {
        let r = t.await?;
        sent += r.sent;
        all.extend(r.latencies_ns);
        lag.extend(r.lag_ns);
        over += r.over;
        errors += r.errors;
    }
    all.sort_unstable();
    lag.sort_unstable();
    let n = all.len() as u64;
    let pct = |p: f64| percentile_us(&all, p);
    let mode = args.rate.map_or_else(
        || "closed loop".to_owned(),
        |r| {
            format!(
                "open loop {r:.0}/s (send lag p50 {:.0} us, p99 {:.0} us)",
                percentile_us(&lag, 0.5),
                percentile_us(&lag, 0.99)
            )
        },
    );
    let line = format!(
        "distinct={} {mode} concurrency={} connections={}: {:.0} decisions/s, p50 {:.0} us, p99 {:.0} us, p99.9 {:.0} us, over_limit {:.1}%, errors {errors}",
        args.distinct,
        args.concurrency,
        args.connections,
        n as f64 / measure.as_secs_f64(),
        pct(0.50),
        pct(0.99),
        pct(0.999),
        100.0 * over as f64 / n.max(1) as f64,
    );
    Ok((line, sent))
}
