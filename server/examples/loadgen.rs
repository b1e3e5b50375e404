//! Load generator for sluicegate-server: many concurrent ShouldRateLimit streams
//! over several HTTP/2 connections, measuring decisions per second, latency
//! percentiles and CPU per decision on loopback.
//!
//! ```text
//! cargo run --release -p sluicegate-server --example loadgen -- --seconds 5 --distinct 1000
//! cargo run --release -p sluicegate-server --example loadgen -- --seconds 5 --distinct 1000 --rate 25000
//! ```
//! Without `--addr` it starts a server in this process on 127.0.0.1 (its own
//! runtime, `--server-threads` workers) with one per-second limit keyed by the
//! descriptor value; `--distinct` values are cycled through. `--rate` switches from
//! closed loop (as fast as answers come back) to an open loop at that many requests
//! per second: a pacer thread (the kernel's high-resolution sleeps: tokio's
//! timer has 1 ms granularity, and would send each millisecond's requests in
//! one burst) releases one request every `1/rate` s, each on its own task, with
//! no cap on requests in flight. Latency is measured from the moment each
//! request is sent; in open loop the lag of sends behind their schedule (a
//! saturated client falls behind) is reported apart, so that coordinated
//! omission shows instead of hiding.
//!
//! CPU per decision is split: the client's (its runtime's threads, named
//! `loadgen-client`, and the main thread) and the in-process server's (every
//! other thread of the process: its runtime, and the Redis driver of a `redis`
//! or `hybrid` rule), both over the decisions sent, warm-up included.
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
//! `--backend floor` is the gRPC floor: a minimal tonic server (defaults, plus
//! `TCP_NODELAY` as the client sets) answering every `ShouldRateLimit` with the
//! same constant OK, what any RLS server on tonic costs at the least.
//!
//! `--backend` takes a list (`floor,local,redis,hybrid`): each server is started
//! once, and each of `--rounds` rounds runs every backend in turn (A B A B, so
//! that the machine's drift falls on all of them). A summary then gives each
//! backend's medians and the target rows: ratios against `local` (the medians
//! of each round's ratio), and with `--open-loop-half` the open-loop latency of
//! every backend at half `local`'s closed-loop median rate.
//!
//! ```text
//! cargo run --release -p sluicegate-server --example loadgen -- --seconds 4 --distinct 1000 \
//!     --connections 2 --concurrency 128 --rounds 3 --open-loop-half \
//!     --backend floor,local,redis,hybrid --redis redis://127.0.0.1:6379
//! ```

use std::io::{BufRead, BufReader, Read, Write};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use clap::Parser;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_server::{
    RateLimitService, RateLimitServiceServer,
};
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use tonic::transport::Channel;

// The server binary's allocator, so that the in-process server runs on it
// (`--no-default-features`: the system's).
#[cfg(feature = "mimalloc")]
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// The name prefix of the client runtime's threads: the CPU of these (and of
/// the main thread) is the client's, that of every other thread the server's.
const CLIENT_THREADS: &str = "loadgen-client";

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
    /// YAML, in memory), a TOML rule on `redis` or `hybrid` (needs `--redis`), or
    /// `floor` (no limit: a minimal tonic server's constant OK). A list
    /// (`floor,local`) runs each in turn, every round.
    #[arg(long, value_enum, value_delimiter = ',', default_value = "local")]
    backend: Vec<Backend>,
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
    /// Rounds, each running every `--backend` in turn; the summary gives medians.
    #[arg(long, default_value_t = 1)]
    rounds: usize,
    /// After the closed-loop rounds, an open-loop run of every backend at half
    /// the closed-loop median rate of `local` (of the first backend without it).
    #[arg(long, conflicts_with = "rate")]
    open_loop_half: bool,
}

/// The in-process server's backend.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, clap::ValueEnum)]
enum Backend {
    Floor,
    Local,
    Redis,
    Hybrid,
}

impl Backend {
    fn name(self) -> &'static str {
        match self {
            Backend::Floor => "floor",
            Backend::Local => "local",
            Backend::Redis => "redis",
            Backend::Hybrid => "hybrid",
        }
    }
}

/// The checks of the flags that clap's parser cannot express.
fn validate(args: &Args) -> Result<(), String> {
    if args.distinct == 0
        || args.concurrency == 0
        || args.connections == 0
        || args.rounds == 0
        || !args.seconds.is_finite()
        || args.seconds <= 0.0
    {
        return Err(
            "--distinct, --concurrency, --connections, --rounds and --seconds must be positive"
                .into(),
        );
    }
    if args.rate.is_some_and(|r| !r.is_finite() || r <= 0.0) {
        return Err("--rate must be a positive number of requests per second".into());
    }
    let mut seen = Vec::new();
    for b in &args.backend {
        if seen.contains(b) {
            return Err(format!("--backend lists {} twice", b.name()));
        }
        seen.push(*b);
    }
    let remote = seen
        .iter()
        .any(|b| matches!(b, Backend::Redis | Backend::Hybrid));
    match (remote, &args.redis) {
        (false, Some(_)) => return Err("--redis needs --backend redis or hybrid".into()),
        (true, None) => return Err("--backend redis|hybrid needs --redis URL".into()),
        _ => {}
    }
    if args.addr.is_some() && seen != [Backend::Local] {
        return Err("--backend configures the in-process server: not with --addr".into());
    }
    Ok(())
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = Args::parse();
    validate(&args)?;
    let redis = args.redis.as_deref().map(RedisStats::new).transpose()?;
    let mut servers = Vec::new();
    for &backend in &args.backend {
        let (addr, server) = match (args.addr, backend) {
            (Some(a), _) => (a, None),
            (None, Backend::Floor) => {
                let (a, s) = start_floor(args.server_threads)?;
                (a, Some((s, None)))
            }
            (None, _) => {
                let (a, http, s) = start_server(&args, backend)?;
                (a, Some((s, Some(http))))
            }
        };
        let metrics = server.as_ref().and_then(|(_, http)| *http);
        servers.push((backend, addr, metrics, server));
    }
    let client_rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(args.client_threads)
        .thread_name(CLIENT_THREADS)
        // The open loop's pacer is a blocking thread of this runtime: kept,
        // so that its CPU stays counted as the client's between runs.
        .thread_keep_alive(Duration::from_secs(24 * 3600))
        .enable_all()
        .build()?;
    let mut closed: Vec<Vec<Measured>> = vec![Vec::new(); servers.len()];
    for _ in 0..args.rounds {
        for (i, (backend, addr, metrics, _)) in servers.iter().enumerate() {
            let m = measure(
                &args,
                &client_rt,
                (*backend, *addr, *metrics),
                args.rate,
                redis.as_ref(),
            )?;
            println!("{}", m.line(&args));
            closed[i].push(m);
        }
    }
    let mut open = Vec::new();
    if args.open_loop_half {
        let anchor = servers
            .iter()
            .position(|(b, _, _, _)| *b == Backend::Local)
            .unwrap_or(0);
        let rate = median(closed[anchor].iter().map(|m| m.per_sec)) / 2.0;
        for (backend, addr, metrics, _) in &servers {
            let m = measure(
                &args,
                &client_rt,
                (*backend, *addr, *metrics),
                Some(rate),
                redis.as_ref(),
            )?;
            println!("{}", m.line(&args));
            open.push(m);
        }
    }
    if args.rounds > 1 || servers.len() > 1 || args.open_loop_half {
        print!("{}", summary(&args, &closed, &open));
    }
    Ok(())
}

/// One run's figures.
#[derive(Debug, Clone)]
struct Measured {
    backend: Backend,
    /// `Some(rate)`: open loop.
    rate: Option<f64>,
    per_sec: f64,
    p50_us: f64,
    p99_us: f64,
    p999_us: f64,
    /// Send lag behind the schedule (open loop): p50, p99.
    lag_us: Option<(f64, f64)>,
    over_pct: f64,
    errors: u64,
    /// Microseconds of CPU per decision: the client's, the in-process server's.
    client_us: Option<f64>,
    server_us: Option<f64>,
    /// Redis script calls per decision (`redis`/`hybrid`), and their number.
    redis_calls: Option<(f64, u64)>,
    /// Decisions the rule's `on_error` made because Redis failed (a timeout,
    /// or the circuit breaker open after a few): cheap answers that make a
    /// run's rate incomparable (in-process `redis`/`hybrid` servers).
    backend_errors: Option<u64>,
}

impl Measured {
    /// The run's report line.
    fn line(&self, args: &Args) -> String {
        let algorithm = match (self.backend, args.algorithm) {
            (Backend::Floor, _) | (_, None) => String::new(),
            (_, Some(k)) => format!(" algorithm={}", k.name()),
        };
        let mode = match (self.rate, self.lag_us) {
            (Some(r), Some((p50, p99))) => {
                format!("open loop {r:.0}/s (send lag p50 {p50:.0} us, p99 {p99:.0} us)")
            }
            _ => "closed loop".to_owned(),
        };
        let mut cpu = String::new();
        if let Some(s) = self.server_us {
            cpu += &format!(", server {s:.1} us CPU per decision");
        }
        if let Some(c) = self.client_us {
            cpu += &format!(", client {c:.1} us CPU per decision");
        }
        let mut calls = self.redis_calls.map_or_else(String::new, |(per, n)| {
            format!(", {per:.3} Redis script calls per decision ({n} calls)")
        });
        if let Some(e) = self.backend_errors {
            calls += &format!(", {e} answered by on_error (Redis failed)");
        }
        format!(
            "backend={}{algorithm} distinct={} {mode} concurrency={} connections={}: {:.0} decisions/s, p50 {:.0} us, p99 {:.0} us, p99.9 {:.0} us, over_limit {:.1}%, errors {}{cpu}{calls}",
            self.backend.name(),
            args.distinct,
            args.concurrency,
            args.connections,
            self.per_sec,
            self.p50_us,
            self.p99_us,
            self.p999_us,
            self.over_pct,
            self.errors,
        )
    }
}

/// One run of `backend` at `addr` (its `/metrics` at `metrics`, when in
/// process): closed loop, or open loop at `rate`.
fn measure(
    args: &Args,
    client_rt: &tokio::runtime::Runtime,
    (backend, addr, metrics): (Backend, SocketAddr, Option<SocketAddr>),
    rate: Option<f64>,
    redis: Option<&RedisStats>,
) -> Result<Measured, Box<dyn std::error::Error>> {
    let redis = redis.filter(|_| matches!(backend, Backend::Redis | Backend::Hybrid));
    let metrics = metrics.filter(|_| redis.is_some());
    let calls_before = redis.map(RedisStats::script_calls).transpose()?;
    let errors_before = metrics.map(backend_errors).transpose()?;
    let cpu_before = Cpu::now();
    let (mut m, sent) = client_rt.block_on(run(args, addr, rate))?;
    m.backend = backend;
    if let (Some(a), Some(b)) = (cpu_before, Cpu::now()) {
        if sent > 0 {
            let per = |secs: f64| secs * 1e6 / sent as f64;
            m.client_us = Some(per(b.client - a.client));
            // With --addr the server is another process.
            if args.addr.is_none() {
                m.server_us = Some(per((b.process - b.client) - (a.process - a.client)));
            }
        }
    }
    if let (Some(r), Some(before)) = (redis, calls_before) {
        let calls = r.script_calls()?.saturating_sub(before);
        m.redis_calls = Some((calls as f64 / sent.max(1) as f64, calls));
    }
    if let (Some(at), Some(before)) = (metrics, errors_before) {
        m.backend_errors = Some(backend_errors(at)?.saturating_sub(before));
    }
    Ok(m)
}

/// The server's decisions made by a rule's `on_error` so far (the sum of
/// `sluicegate_server_rule_backend_errors_total` on its `/metrics`).
fn backend_errors(http: SocketAddr) -> Result<u64, Box<dyn std::error::Error>> {
    let mut conn = std::net::TcpStream::connect(http)?;
    conn.set_read_timeout(Some(Duration::from_secs(5)))?;
    conn.write_all(b"GET /metrics HTTP/1.1\r\nHost: loadgen\r\nConnection: close\r\n\r\n")?;
    let mut text = String::new();
    std::io::Read::read_to_string(&mut conn, &mut text)?;
    Ok(text
        .lines()
        .filter(|l| l.starts_with("sluicegate_server_rule_backend_errors_total"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
        .sum())
}

/// The median (0 when empty).
fn median(values: impl Iterator<Item = f64>) -> f64 {
    let mut v: Vec<f64> = values.filter(|x| x.is_finite()).collect();
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => 0.0,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

/// "met" or "missed".
fn verdict(ok: bool) -> &'static str {
    if ok {
        "met"
    } else {
        "MISSED"
    }
}

/// The summary: each backend's medians over the rounds, then the target rows
/// (ratios are the medians of each round's ratio, the backends of a round
/// having run back to back).
fn summary(args: &Args, closed: &[Vec<Measured>], open: &[Measured]) -> String {
    let mut out = format!(
        "summary: {} round(s) of {} s, distinct={} concurrency={} connections={}, medians\n",
        args.rounds, args.seconds, args.distinct, args.concurrency, args.connections
    );
    out += "  backend  decisions/s  server us/decision  client us/decision  p99 us  script calls/decision\n";
    let opt = |v: Option<f64>, digits: usize| {
        v.map_or_else(|| "-".to_owned(), |x| format!("{x:.digits$}"))
    };
    let all_some = |runs: &[Measured], f: fn(&Measured) -> Option<f64>| -> Option<f64> {
        let v: Option<Vec<f64>> = runs.iter().map(f).collect();
        v.map(|v| median(v.into_iter()))
    };
    for runs in closed {
        let Some(first) = runs.first() else { continue };
        out += &format!(
            "  {:<7}  {:>11.0}  {:>18}  {:>18}  {:>6.0}  {:>21}\n",
            first.backend.name(),
            median(runs.iter().map(|m| m.per_sec)),
            opt(all_some(runs, |m| m.server_us), 1),
            opt(all_some(runs, |m| m.client_us), 1),
            median(runs.iter().map(|m| m.p99_us)),
            opt(all_some(runs, |m| m.redis_calls.map(|c| c.0)), 3),
        );
    }
    let runs_of = |b: Backend| {
        closed
            .iter()
            .find(|r| r.first().is_some_and(|m| m.backend == b))
    };
    // The median over rounds of `f(ours) / f(anchor)`, paired by round.
    let ratio = |ours: &[Measured], anchor: &[Measured], f: fn(&Measured) -> Option<f64>| {
        let v: Option<Vec<f64>> = ours
            .iter()
            .zip(anchor)
            .map(|(o, a)| Some(f(o)? / f(a)?))
            .collect();
        v.map(|v| median(v.into_iter()))
    };
    let mut rows = Vec::new();
    if let (Some(local), Some(floor)) = (runs_of(Backend::Local), runs_of(Backend::Floor)) {
        if let Some(r) = ratio(local, floor, |m| Some(m.per_sec)) {
            rows.push(format!(
                "local / floor decisions/s: {r:.2} (target >= 0.8): {}",
                verdict(r >= 0.8)
            ));
        }
        if let Some(r) = ratio(local, floor, |m| m.server_us) {
            rows.push(format!(
                "local / floor server CPU per decision: {r:.2} (target <= 1.25): {}",
                verdict(r <= 1.25)
            ));
        }
    }
    // Their targets are at 1,000 values; at 100,000 each decision of either
    // is a round trip, and the ratio is reported alone.
    for (b, target) in [(Backend::Redis, 0.5), (Backend::Hybrid, 0.9)] {
        if let (Some(ours), Some(local)) = (runs_of(b), runs_of(Backend::Local)) {
            if let Some(r) = ratio(ours, local, |m| Some(m.per_sec)) {
                rows.push(if args.distinct <= 1000 {
                    format!(
                        "{} / local decisions/s: {r:.2} (target >= {target} at 1,000 values): {}",
                        b.name(),
                        verdict(r >= target)
                    )
                } else {
                    format!("{} / local decisions/s: {r:.2}", b.name())
                });
            }
        }
    }
    if let (Some(hybrid), Some(redis)) = (runs_of(Backend::Hybrid), runs_of(Backend::Redis)) {
        if let Some(r) = ratio(hybrid, redis, |m| Some(m.per_sec)) {
            rows.push(format!(
                "hybrid / redis decisions/s: {r:.2} (target >= 1.0 at every number of values): {}",
                verdict(r >= 1.0)
            ));
        }
    }
    if let Some(hybrid) = runs_of(Backend::Hybrid) {
        if let Some(calls) = all_some(hybrid, |m| m.redis_calls.map(|c| c.0)) {
            let local = 100.0 * (1.0 - calls);
            // The target is for values each checked many times a lease's
            // life (1,000 of them at these rates); at 100,000 hybrid makes
            // the `redis` backend's one call per decision, by design.
            rows.push(if args.distinct <= 1000 {
                format!(
                    "hybrid decisions without a round trip: {local:.1}% (target >= 90% at 1,000 values): {}",
                    verdict(local >= 90.0)
                )
            } else {
                format!("hybrid decisions without a round trip: {local:.1}%")
            });
        }
    }
    for m in open {
        let rate = m.rate.unwrap_or(0.0);
        let row = format!(
            "{} open loop at {rate:.0}/s (half local's closed loop): p50 {:.0} us, p99 {:.0} us, p99.9 {:.0} us",
            m.backend.name(),
            m.p50_us,
            m.p99_us,
            m.p999_us
        );
        rows.push(if m.backend == Backend::Local {
            format!(
                "{row} (target p99 <= 1000 us): {}",
                verdict(m.p99_us <= 1000.0)
            )
        } else {
            row
        });
    }
    let failed: Vec<String> = closed
        .iter()
        .flatten()
        .chain(open)
        .filter_map(|m| match m.backend_errors {
            Some(e) if e > 0 => Some(format!("{} ({e})", m.backend.name())),
            _ => None,
        })
        .collect();
    if !failed.is_empty() {
        rows.push(format!(
            "WARNING: Redis failed in {} run(s), whose decisions on_error made are cheap: those rates are not comparable: {}",
            failed.len(),
            failed.join(", ")
        ));
    }
    if !rows.is_empty() {
        out += "targets:\n";
        for r in rows {
            out += &format!("  {r}\n");
        }
    }
    out
}

/// CPU seconds (user + system) of this process, and of its client threads.
#[derive(Debug, Clone, Copy)]
struct Cpu {
    process: f64,
    client: f64,
}

impl Cpu {
    /// Now, from Linux's `/proc` (`None` elsewhere).
    fn now() -> Option<Cpu> {
        let (_, process) = proc_stat(&std::fs::read_to_string("/proc/self/stat").ok()?)?;
        let main = std::process::id().to_string();
        let mut client = 0.0;
        for task in std::fs::read_dir("/proc/self/task").ok()?.flatten() {
            // A thread that ended between the listing and the read is skipped.
            let Ok(stat) = std::fs::read_to_string(task.path().join("stat")) else {
                continue;
            };
            let Some((name, secs)) = proc_stat(&stat) else {
                continue;
            };
            if name.starts_with(CLIENT_THREADS) || task.file_name().to_str() == Some(&main) {
                client += secs;
            }
        }
        Some(Cpu { process, client })
    }
}

/// The name and user + system CPU seconds of a `/proc/.../stat` line (USER_HZ = 100).
fn proc_stat(stat: &str) -> Option<(&str, f64)> {
    // The name is in parentheses and may itself contain spaces or parentheses.
    let name = stat.get(stat.find('(')? + 1..stat.rfind(')')?)?;
    let rest = stat.get(stat.rfind(')')? + 2..)?;
    let fields: Vec<&str> = rest.split(' ').collect();
    let utime: f64 = fields.get(11)?.parse().ok()?;
    let stime: f64 = fields.get(12)?.parse().ok()?;
    Some((name, (utime + stime) / 100.0))
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

/// An in-process server's runtime and the sender whose drop stops it.
type InProcess = (tokio::runtime::Runtime, tokio::sync::oneshot::Sender<()>);

/// A runtime of `threads` workers for an in-process server (its threads named
/// `loadgen-<name>`: not the client's).
fn server_runtime(threads: usize, name: &str) -> std::io::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(threads)
        .thread_name(format!("loadgen-{name}"))
        .enable_all()
        .build()
}

/// The gRPC floor: every `ShouldRateLimit` answered with the same OK, whatever
/// it asks (no validation, no limit, no metrics).
#[derive(Debug, Clone, Copy, Default)]
struct Floor;

#[tonic::async_trait]
impl RateLimitService for Floor {
    async fn should_rate_limit(
        &self,
        _request: tonic::Request<RateLimitRequest>,
    ) -> Result<tonic::Response<RateLimitResponse>, tonic::Status> {
        Ok(tonic::Response::new(RateLimitResponse {
            overall_code: Code::Ok as i32,
            ..Default::default()
        }))
    }
}

/// The floor server on 127.0.0.1: a minimal tonic server (its defaults, plus
/// `TCP_NODELAY` on each connection as the client sets it) on its own runtime.
fn start_floor(threads: usize) -> Result<(SocketAddr, InProcess), Box<dyn std::error::Error>> {
    let rt = server_runtime(threads, "floor")?;
    let incoming = {
        let _in_runtime = rt.enter();
        tonic::transport::server::TcpIncoming::bind("127.0.0.1:0".parse()?)?
            .with_nodelay(Some(true))
    };
    let addr = incoming.local_addr()?;
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    rt.spawn(
        tonic::transport::Server::builder()
            .add_service(RateLimitServiceServer::new(Floor))
            .serve_with_incoming_shutdown(incoming, async move {
                let _ = rx.await;
            }),
    );
    Ok((addr, (rt, tx)))
}

/// The in-process sluicegate-server of `backend`: its own runtime, stopped when
/// the returned sender drops.
/// Its gRPC address, its HTTP (`/metrics`) address, and the server.
fn start_server(
    args: &Args,
    backend: Backend,
) -> Result<(SocketAddr, SocketAddr, InProcess), Box<dyn std::error::Error>> {
    let dir = std::env::temp_dir().join(format!(
        "sluicegate-loadgen-{}-{}",
        std::process::id(),
        backend.name()
    ));
    std::fs::create_dir_all(&dir)?;
    match (backend, &args.redis) {
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
                backend.name(),
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
    let rt = server_runtime(args.server_threads, "server")?;
    let bound = rt.block_on(sluicegate_server::Bound::bind(config));
    let _ = std::fs::remove_dir_all(&dir);
    let bound = bound?;
    let addr = bound.grpc_addr()?;
    let http = bound.http_addr()?;
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    rt.spawn(bound.serve(async move {
        let _ = rx.await;
    }));
    Ok((addr, http, (rt, tx)))
}

/// The `p` quantile of sorted nanoseconds, in microseconds (0 when empty).
fn percentile_us(sorted: &[u64], p: f64) -> f64 {
    let i = ((p * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len().max(1)) - 1;
    sorted.get(i).copied().unwrap_or(0) as f64 / 1000.0
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

/// One run against `addr` (open loop at `rate`, else closed), and the number
/// of requests sent (warm-up included). The CPU and Redis figures are the
/// caller's to fill in.
async fn run(
    args: &Args,
    addr: SocketAddr,
    rate: Option<f64>,
) -> Result<(Measured, u64), Box<dyn std::error::Error>> {
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
    if let Some(rate) = rate {
        return run_open(args, &channels, rate, warmup, measure).await;
    }
    let start = Instant::now() + Duration::from_millis(50);
    let mut tasks = Vec::with_capacity(args.concurrency);
    for t in 0..args.concurrency {
        let mut client = RateLimitServiceClient::new(channels[t % channels.len()].clone());
        let distinct = args.distinct;
        tasks.push(tokio::spawn(async move {
            let mut res = TaskResult {
                latencies_ns: Vec::with_capacity(1 << 16),
                lag_ns: Vec::new(), // open loop only
                over: 0,
                errors: 0,
                sent: 0,
            };
            // Spread the tasks' first values.
            let mut i = (t as u64).wrapping_mul(7919) % distinct;
            let end = start + warmup + measure;
            loop {
                let sent = Instant::now();
                if sent >= end {
                    break;
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
    let mut all = Vec::new();
    let (mut over, mut errors, mut sent) = (0, 0, 0);
    for t in tasks {
        let r = t.await?;
        sent += r.sent;
        all.extend(r.latencies_ns);
        over += r.over;
        errors += r.errors;
    }
    all.sort_unstable();
    let n = all.len() as u64;
    let pct = |p: f64| percentile_us(&all, p);
    let measured = Measured {
        backend: Backend::Local,
        rate: None,
        per_sec: n as f64 / measure.as_secs_f64(),
        p50_us: pct(0.50),
        p99_us: pct(0.99),
        p999_us: pct(0.999),
        lag_us: None,
        over_pct: 100.0 * over as f64 / n.max(1) as f64,
        errors,
        client_us: None,
        server_us: None,
        redis_calls: None,
        backend_errors: None,
    };
    Ok((measured, sent))
}

/// The open loop at `rate`: a pacer (a plain thread, whose sleeps are the
/// kernel's high-resolution timers, not tokio's 1 ms wheel, which would send
/// each millisecond's requests in one burst) releases a request every
/// `1/rate` s, and each goes out on its own task (no cap on requests in
/// flight), round robin over the connections, cycling through the values.
/// Latency is from the send; the lag of each send behind its schedule (the
/// pacer's and the client runtime's delays) is reported apart.
async fn run_open(
    args: &Args,
    channels: &[Channel],
    rate: f64,
    warmup: Duration,
    measure: Duration,
) -> Result<(Measured, u64), Box<dyn std::error::Error>> {
    let interval = Duration::from_secs_f64(1.0 / rate);
    let start = Instant::now() + Duration::from_millis(50);
    let end = start + warmup + measure;
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<(u64, Instant)>();
    let pacer = tokio::task::spawn_blocking(move || {
        for k in 0u64.. {
            let at = start + interval.mul_f64(k as f64);
            if at >= end {
                break;
            }
            let now = Instant::now();
            if at > now {
                std::thread::sleep(at - now);
            }
            if tx.send((k, at)).is_err() {
                break;
            }
        }
    });
    let clients: Vec<_> = channels
        .iter()
        .map(|c| RateLimitServiceClient::new(c.clone()))
        .collect();
    let mut res = TaskResult {
        latencies_ns: Vec::with_capacity(1 << 16),
        lag_ns: Vec::with_capacity(1 << 16),
        over: 0,
        errors: 0,
        sent: 0,
    };
    let ns = |d: Duration| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
    let record = |res: &mut TaskResult, r: (Instant, Instant, Instant, Option<bool>)| {
        let (scheduled, sent, done, over) = r;
        res.sent += 1;
        // Measured by schedule: exactly the requests of the measured time,
        // however late a loaded client sends them.
        if scheduled < start + warmup {
            return;
        }
        res.lag_ns.push(ns(sent - scheduled));
        res.latencies_ns.push(ns(done - sent));
        match over {
            Some(true) => res.over += 1,
            Some(false) => {}
            None => res.errors += 1,
        }
    };
    let mut flying = tokio::task::JoinSet::new();
    let distinct = args.distinct;
    while let Some((k, scheduled)) = rx.recv().await {
        let mut client = clients[k as usize % clients.len()].clone();
        flying.spawn(async move {
            let sent = Instant::now();
            let answer = client.should_rate_limit(request(k % distinct)).await;
            let over = answer
                .ok()
                .map(|r| r.get_ref().overall_code == Code::OverLimit as i32);
            (scheduled, sent, Instant::now(), over)
        });
        while let Some(done) = flying.try_join_next() {
            record(&mut res, done?);
        }
    }
    while let Some(done) = flying.join_next().await {
        record(&mut res, done?);
    }
    pacer.await?;
    res.latencies_ns.sort_unstable();
    res.lag_ns.sort_unstable();
    let n = res.latencies_ns.len() as u64;
    let pct = |p: f64| percentile_us(&res.latencies_ns, p);
    let measured = Measured {
        backend: Backend::Local,
        rate: Some(rate),
        per_sec: n as f64 / measure.as_secs_f64(),
        p50_us: pct(0.50),
        p99_us: pct(0.99),
        p999_us: pct(0.999),
        lag_us: Some((
            percentile_us(&res.lag_ns, 0.5),
            percentile_us(&res.lag_ns, 0.99),
        )),
        over_pct: 100.0 * res.over as f64 / n.max(1) as f64,
        errors: res.errors,
        client_us: None,
        server_us: None,
        redis_calls: None,
        backend_errors: None,
    };
    Ok((measured, res.sent))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(flags: &[&str]) -> Result<Args, String> {
        let args = Args::try_parse_from(std::iter::once("loadgen").chain(flags.iter().copied()))
            .map_err(|e| e.to_string())?;
        validate(&args)?;
        Ok(args)
    }

    #[test]
    fn the_open_loop_sends_at_its_rate_spread_over_time() {
        // 2,000/s for 0.5 s of warm-up and 0.5 s measured, against the floor.
        let (addr, _floor) = start_floor(1).expect("floor");
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .expect("runtime");
        let args = parse(&["--seconds", "0.5", "--rate", "2000"]).expect("flags");
        let (m, sent) = rt.block_on(run(&args, addr, args.rate)).expect("run");
        // One request per 500 us from the start: 2,000 in the second (the
        // last scheduled at the end is not sent), 1,000 of them measured.
        assert_eq!(sent, 2000);
        assert!((995.0..=1005.0).contains(&(m.per_sec / 2.0)), "{m:?}");
        assert_eq!(m.errors, 0);
        // Spread, not sent a millisecond's worth at once: one request is then
        // alone on the connection, and the median send is on time to within
        // a few timer slacks (tokio's 1 ms timer put the median 500 us late).
        let (lag_p50, _) = m.lag_us.expect("open loop");
        assert!(lag_p50 < 400.0, "{m:?}");
    }

    #[test]
    fn flags_list_backends_and_refuse_what_cannot_run() {
        let a = parse(&[
            "--backend",
            "floor,local,hybrid",
            "--redis",
            "redis://127.0.0.1:1",
        ])
        .expect("a list of backends");
        assert_eq!(a.backend, [Backend::Floor, Backend::Local, Backend::Hybrid]);
        assert_eq!(parse(&[]).expect("defaults").backend, [Backend::Local]);
        for (flags, why) in [
            (&["--backend", "local,local"][..], "twice"),
            (&["--backend", "floor,redis"], "needs --redis"),
            (&["--redis", "redis://127.0.0.1:1"], "needs --backend"),
            (
                &["--addr", "127.0.0.1:1", "--backend", "floor"],
                "not with --addr",
            ),
            (&["--rounds", "0"], "must be positive"),
            (&["--rate", "0"], "--rate"),
            (
                &["--rate", "100", "--open-loop-half"],
                "cannot be used with",
            ),
        ] {
            let e = parse(flags).expect_err(why);
            assert!(e.contains(why), "{flags:?}: {e}");
        }
        parse(&["--addr", "127.0.0.1:1"]).expect("--addr with the default backend");
    }

    /// What the floor says whatever it is asked: the constant OK.
    #[test]
    fn floor_answers_every_request_with_the_same_ok() {
        let (addr, server) = start_floor(1).expect("floor");
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        rt.block_on(async {
            let channel = Channel::from_shared(format!("http://{addr}"))
                .expect("uri")
                .connect()
                .await
                .expect("connect");
            let mut client = RateLimitServiceClient::new(channel);
            let expected = RateLimitResponse {
                overall_code: Code::Ok as i32,
                ..Default::default()
            };
            // A real server refuses the empty ones and limits the huge hits.
            let huge = RateLimitRequest {
                hits_addend: u32::MAX,
                ..request(7)
            };
            for req in [request(1), request(1), RateLimitRequest::default(), huge] {
                let got = client.should_rate_limit(req).await.expect("answer");
                assert_eq!(got.into_inner(), expected);
            }
        });
        drop(server);
    }

    fn run_of(backend: Backend, per_sec: f64, server_us: f64, p99_us: f64) -> Measured {
        Measured {
            backend,
            rate: None,
            per_sec,
            p50_us: p99_us / 2.0,
            p99_us,
            p999_us: p99_us * 2.0,
            lag_us: None,
            over_pct: 0.0,
            errors: 0,
            client_us: Some(10.0),
            server_us: Some(server_us),
            redis_calls: None,
            backend_errors: None,
        }
    }

    #[test]
    fn summary_pairs_rounds_and_says_which_targets_are_met() {
        let args = parse(&["--backend", "floor,local", "--rounds", "3"]).expect("flags");
        // Round by round, local makes 0.9, 0.7 and 0.85 of the floor: median 0.85.
        let floor = vec![
            run_of(Backend::Floor, 1000.0, 10.0, 500.0),
            run_of(Backend::Floor, 2000.0, 10.0, 500.0),
            run_of(Backend::Floor, 1000.0, 10.0, 500.0),
        ];
        let local = vec![
            run_of(Backend::Local, 900.0, 14.0, 600.0),
            run_of(Backend::Local, 1400.0, 13.0, 600.0),
            run_of(Backend::Local, 850.0, 12.0, 600.0),
        ];
        let mut open_local = run_of(Backend::Local, 450.0, 12.0, 1500.0);
        open_local.rate = Some(450.0);
        let text = summary(&args, &[floor, local], &[open_local]);
        assert!(
            text.contains("local / floor decisions/s: 0.85 (target >= 0.8): met"),
            "{text}"
        );
        assert!(
            text.contains("local / floor server CPU per decision: 1.30 (target <= 1.25): MISSED"),
            "{text}"
        );
        assert!(
            text.contains("local open loop at 450/s")
                && text.contains("p99 1500 us, p99.9 3000 us (target p99 <= 1000 us): MISSED"),
            "{text}"
        );
    }

    #[test]
    fn summary_compares_hybrid_with_redis_and_states_the_round_trip_target_at_1000_values() {
        let with_calls = |b, per_sec, calls| Measured {
            redis_calls: Some((calls, 0)),
            ..run_of(b, per_sec, 10.0, 500.0)
        };
        let redis = vec![with_calls(Backend::Redis, 1000.0, 1.0)];
        let mut hybrid = vec![with_calls(Backend::Hybrid, 950.0, 0.08)];
        hybrid[0].backend_errors = Some(0);
        let at = |distinct: &str| {
            parse(&[
                "--backend",
                "redis,hybrid",
                "--redis",
                "redis://127.0.0.1:1",
                "--distinct",
                distinct,
            ])
            .expect("flags")
        };
        let args = at("1000");
        let local = vec![run_of(Backend::Local, 1000.0, 10.0, 500.0)];
        let text = summary(&args, &[local.clone(), redis.clone(), hybrid.clone()], &[]);
        assert!(
            text.contains("hybrid / local decisions/s: 0.95 (target >= 0.9 at 1,000 values): met"),
            "{text}"
        );
        assert!(
            text.contains("hybrid / redis decisions/s: 0.95 (target >= 1.0 at every number of values): MISSED"),
            "{text}"
        );
        assert!(
            text.contains(
                "hybrid decisions without a round trip: 92.0% (target >= 90% at 1,000 values): met"
            ),
            "{text}"
        );
        assert!(!text.contains("WARNING"), "{text}");
        hybrid[0].backend_errors = Some(12);
        let text = summary(&args, &[redis.clone(), hybrid.clone()], &[]);
        assert!(
            text.contains("WARNING: Redis failed in 1 run(s)") && text.contains("hybrid (12)"),
            "{text}"
        );
        // At 100,000 values the share is reported, with no target.
        let args = at("100000");
        let text = summary(&args, &[local, redis, hybrid], &[]);
        assert!(
            text.contains("hybrid / local decisions/s: 0.95\n"),
            "{text}"
        );
        assert!(
            text.contains("hybrid decisions without a round trip: 92.0%\n"),
            "{text}"
        );
    }

    #[test]
    fn proc_stat_reads_names_with_spaces_and_parentheses() {
        let line = "42 (a (b) c) S 1 2 3 4 5 6 7 8 9 10 250 50 0 0";
        assert_eq!(proc_stat(line), Some(("a (b) c", 3.0)));
        assert_eq!(proc_stat("42 (x) S 1"), None);
    }

    /// Burns CPU on a thread named `name` until it has used `secs` of it; the
    /// thread then lives (its CPU counted in `/proc/self/task`) until the
    /// returned sender is dropped.
    fn burn(name: &str, secs: f64) -> std::sync::mpsc::Sender<()> {
        let (done_tx, done_rx) = std::sync::mpsc::channel();
        let (exit_tx, exit_rx) = std::sync::mpsc::channel::<()>();
        std::thread::Builder::new()
            .name(name.to_owned())
            .spawn(move || {
                let deadline = Instant::now() + Duration::from_secs(60);
                let mut x = 0u64;
                while Instant::now() < deadline {
                    for i in 0..100_000u64 {
                        x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(i));
                    }
                    let s = std::fs::read_to_string("/proc/thread-self/stat").expect("stat");
                    if proc_stat(&s).expect("parse").1 >= secs {
                        break;
                    }
                }
                let _ = done_tx.send(());
                let _ = exit_rx.recv();
            })
            .expect("spawn");
        done_rx
            .recv_timeout(Duration::from_secs(90))
            .expect("the burning thread ended");
        exit_tx
    }

    #[test]
    fn cpu_of_client_threads_is_told_from_the_rest() {
        let before = Cpu::now().expect("/proc");
        let client = burn(&format!("{CLIENT_THREADS}-test"), 0.3);
        let mid = Cpu::now().expect("/proc");
        assert!(mid.client - before.client >= 0.29, "{before:?} {mid:?}");
        let server = burn("loadgen-server", 0.3);
        let after = Cpu::now().expect("/proc");
        drop((client, server));
        // Other tests' threads may add to the server's share, never the client's.
        assert!(after.client - mid.client < 0.1, "{mid:?} {after:?}");
        assert!(
            (after.process - after.client) - (mid.process - mid.client) >= 0.29,
            "{mid:?} {after:?}"
        );
    }
}
