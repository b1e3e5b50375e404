//! `cargo run --release -p sluicegate-demo [CHART.svg]`: bursty traffic through
//! every sluicegate algorithm, a table on stdout and an SVG chart (by default
//! `target/sluicegate-demo.svg`).

use std::path::PathBuf;
use std::process::ExitCode;

const USAGE: &str = "usage: sluicegate-demo [CHART.svg]   (default: target/sluicegate-demo.svg)";

fn main() -> ExitCode {
    let mut args = std::env::args_os().skip(1);
    let path = match (args.next(), args.next()) {
        (None, _) => PathBuf::from("target/sluicegate-demo.svg"),
        (Some(a), None) if a == "-h" || a == "--help" => {
            println!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        (Some(a), None) => PathBuf::from(a),
        (Some(_), Some(_)) => {
            eprintln!("{USAGE}");
            return ExitCode::from(2);
        }
    };
    match run(&path) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("sluicegate-demo: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run(path: &std::path::Path) -> Result<(), Box<dyn std::error::Error>> {
    use sluicegate_demo::*;
    let sim = simulate()?;
    println!(
        "{} requests over {} s of simulated time: a Poisson background of 4/s, bursts of",
        sim.arrivals.len(),
        DURATION_NS / WINDOW_NS
    );
    println!("20-50 requests every 4-8 s, and a flash crowd of +20/s from 30 s to 40 s.");
    println!(
        "Every limiter: {RATE} per second, burst {BURST}; the shaper delays up to {} ms; the",
        MAX_DELAY_NS / 1_000_000
    );
    println!("compound limiter is two sliding window counters, {RATE}/s and {PER_MINUTE}/min.\n");
    print!("{}", table(&sim));
    println!("\n\"max in any 1 s window\" is exact, over every interval (t - 1 s, t] of the");
    println!("admission times (for the shaper, the times the delayed requests run).");
    println!(
        "Guarantees: token bucket, leaky meter and shaper <= burst + rate x 1 s = {};",
        BURST + RATE
    );
    println!("fixed window and sliding counter <= {RATE} per aligned window; log <= {RATE} in any window.");

    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)?;
    }
    write_chart(&sim, path)?;
    let shown = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
    println!("\nchart: {}", shown.display());
    Ok(())
}
