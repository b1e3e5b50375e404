//! The memory a policy of many keyed rules holds, as a whole process: 5,000
//! per-tenant rules keyed by client address, 10,000 distinct keys seen (two
//! addresses per tenant), resident set read from `/proc/self/status` (Linux).
//!
//! `cargo run --release -p sluicegate-policy --example state_memory [RULES] [KEYS]`
//!
//! Prints the resident set before the policy, after building it and after the
//! checks, the time to build it, and the pool's size (`Policy::state_memory`).
//! Issue 25's target: ≤ 200 MiB for the whole process at 5,000 rules and 10,000
//! keys (it was 1.6 MB per keyed rule, allocated up front: ~8 GB).

use std::time::Instant;

use sluicegate_policy::Policy;

fn rss_mib() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let kib: f64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(f64::NAN);
    kib / 1024.0
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let rules: usize = args.next().map_or(Ok(5_000), |a| a.parse())?;
    let keys: usize = args.next().map_or(Ok(10_000), |a| a.parse())?;
    let start_rss = rss_mib();
    let mut text = String::new();
    for i in 0..rules {
        text += &format!(
            "[[rule]]\nname = \"tenant-{i}\"\nmatch = {{ tenant = \"t{i}\" }}\nkey = [\"ip\"]\nlimit = \"100/minute\"\n"
        );
    }
    let t0 = Instant::now();
    let policy = Policy::from_toml(&text)?;
    let built = t0.elapsed();
    let built_rss = rss_mib();
    let mut allowed = 0usize;
    for k in 0..keys {
        let tenant = format!("t{}", k % rules.max(1));
        let ip = format!("10.{}.{}.{}", (k >> 16) & 255, (k >> 8) & 255, k & 255);
        let attrs = [("tenant", tenant.as_str()), ("ip", ip.as_str())];
        allowed += usize::from(policy.check_n_at(&attrs, 1, 0).allowed());
    }
    let live: u64 = policy.metrics_at(0).iter().map(|m| m.keys).sum();
    println!(
        "| rules | keys seen | admitted | live keys | pool | build | RSS before | built | after checks |"
    );
    println!("|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    println!(
        "| {rules} | {keys} | {allowed} | {live} | {:.1} MiB | {:.0} ms | {start_rss:.1} MiB | {built_rss:.1} MiB | {:.1} MiB |",
        policy.state_memory() as f64 / (1 << 20) as f64,
        built.as_secs_f64() * 1e3,
        rss_mib()
    );
    Ok(())
}
