//! Replay speed on one core: a generated combined-format log (1,000,000 lines by
//! default, in memory) read twice, once parsed only and once parsed and checked
//! against examples/shop-rules.toml (five local rules), giving lines per second
//! and the share of the time spent parsing vs deciding.
//!
//! `cargo bench -p sluicegate-cli --bench replay` (or `-- --lines N`);
//! `-- --test` runs it once on 10,000 lines.
//!
//! Times are the thread's CPU time where Linux reports it
//! (`/proc/thread-self/schedstat`), so a machine shared with other work measures
//! the speed of one core rather than the share of it this run was given; the
//! wall-clock figure is printed beside it.

use std::hint::black_box;
use std::time::Instant;

use sluicegate_cli::input::{Format, LogReader};
use sluicegate_cli::replay::Replay;
use sluicegate_cli::synth::{Config, generate, write};
use sluicegate_policy::Policy;

const RULES: &str = include_str!("../examples/shop-rules.toml");

/// This thread's CPU time in seconds, if the system says.
fn cpu_time() -> Option<f64> {
    let s = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
    let ns: u64 = s.split_whitespace().next()?.parse().ok()?;
    Some(ns as f64 / 1e9)
}

/// (CPU or wall seconds, wall seconds) spent in `f`.
fn timed(f: impl FnOnce()) -> (f64, f64) {
    let (cpu, wall) = (cpu_time(), Instant::now());
    f();
    let wall = wall.elapsed().as_secs_f64();
    match (cpu, cpu_time()) {
        (Some(a), Some(b)) => (b - a, wall),
        _ => (wall, wall),
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let test = args.iter().any(|a| a == "--test");
    let lines = args
        .iter()
        .position(|a| a == "--lines")
        .and_then(|i| args.get(i + 1))
        .and_then(|n| n.parse().ok())
        .unwrap_or(if test { 10_000 } else { 1_000_000 });
    let mut log = Vec::new();
    let entries = generate(&Config {
        lines,
        ..Config::default()
    });
    write(&entries, Format::Combined, &mut log).expect("writing to memory");
    drop(entries);
    let runs = if test { 1 } else { 3 };
    let (mut parse, mut total) = ((f64::MAX, f64::MAX), (f64::MAX, f64::MAX));
    let best = |a: (f64, f64), b: (f64, f64)| (a.0.min(b.0), a.1.min(b.1));
    for _ in 0..runs {
        let mut reader = LogReader::new(Format::Combined, Default::default());
        let mut sum = 0u64;
        let t = timed(|| {
            reader
                .read("bench", &log[..], |r| {
                    sum = sum.wrapping_add(r.time_ns + r.ip.len() as u64)
                })
                .expect("in memory")
        });
        black_box(sum);
        parse = best(parse, t);

        let mut replay = Replay::new(Policy::from_toml(RULES).expect("valid rules"));
        let mut reader = LogReader::new(Format::Combined, Default::default());
        let t = timed(|| {
            reader
                .read("bench", &log[..], |r| replay.check(r))
                .expect("in memory")
        });
        total = best(total, t);
        black_box(replay.totals());
    }
    let mb = log.len() as f64 / 1e6;
    println!("replay of {lines} combined lines ({mb:.0} MB), 5 local rules, best of {runs}:");
    let rate = |t: f64| lines as f64 / t;
    println!(
        "  parse only        {:>7.3} s CPU  {:>10.0} lines/s   (wall {:.3} s, {:.0} lines/s)",
        parse.0,
        rate(parse.0),
        parse.1,
        rate(parse.1)
    );
    println!(
        "  parse + decide    {:>7.3} s CPU  {:>10.0} lines/s   (wall {:.3} s, {:.0} lines/s)",
        total.0,
        rate(total.0),
        total.1,
        rate(total.1)
    );
    println!(
        "  share of the time: parse {:.0} %, decide {:.0} %",
        parse.0 / total.0 * 100.0,
        (1.0 - parse.0 / total.0) * 100.0
    );
}
