//! Arguments, input/output and printing; the work is in the library.

use std::io::{self, BufWriter, IsTerminal, Write};
use std::process::ExitCode;

use anyhow::{Context, Result};
use clap::{Parser, Subcommand, ValueEnum};

use sluicegate_cli::input::Format;
use sluicegate_cli::synth;

/// Exit statuses: 0 ok, 1 findings or errors, 2 usage (clap's own for bad
/// arguments).
const FINDINGS: u8 = 1;

#[derive(Parser, Debug)]
#[command(
    name = "sluicegate",
    version,
    about = "Replay access logs through a rate-limit policy; lint and explain rule files."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Write a seeded, realistic access log (steady users, a scraper, a burst,
    /// malformed lines), for trying `replay` and measuring its speed.
    GenerateLog {
        /// How many lines.
        #[arg(long, default_value_t = 100_000)]
        lines: usize,
        /// The seed: the same seed, the same log.
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// Line format.
        #[arg(long, value_enum, default_value_t = LogFormat::Combined)]
        format: LogFormat,
        /// Write some lines up to two seconds out of time order.
        #[arg(long)]
        disorder: bool,
        /// Output file (default: standard output).
        #[arg(short, long)]
        output: Option<String>,
    },
}

/// `--format` values.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum LogFormat {
    /// Detected per input.
    Auto,
    /// nginx / Apache combined.
    Combined,
    /// nginx / Apache common.
    Common,
    /// One JSON object per line.
    Json,
}

impl From<LogFormat> for Format {
    fn from(f: LogFormat) -> Format {
        match f {
            LogFormat::Auto => Format::Auto,
            LogFormat::Combined => Format::Combined,
            LogFormat::Common => Format::Common,
            LogFormat::Json => Format::Json,
        }
    }
}

/// Runs the command line and maps the outcome to an exit status.
pub fn run() -> ExitCode {
    let cli = Cli::parse();
    match dispatch(cli) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("sluicegate: error: {e:#}");
            ExitCode::from(FINDINGS)
        }
    }
}

fn dispatch(cli: Cli) -> Result<ExitCode> {
    match cli.command {
        Command::GenerateLog {
            lines,
            seed,
            format,
            disorder,
            output,
        } => {
            let cfg = synth::Config {
                seed,
                lines,
                disorder,
                ..synth::Config::default()
            };
            let entries = synth::generate(&cfg);
            let format = Format::from(format);
            match output {
                Some(path) => {
                    let file =
                        std::fs::File::create(&path).with_context(|| format!("creating {path}"))?;
                    let mut w = BufWriter::new(file);
                    synth::write(&entries, format, &mut w)
                        .with_context(|| format!("writing {path}"))?;
                    w.flush().with_context(|| format!("writing {path}"))?;
                }
                None => {
                    let stdout = io::stdout();
                    if stdout.is_terminal() && lines > 1000 {
                        eprintln!("sluicegate: writing {lines} lines to a terminal; use -o FILE to write a file");
                    }
                    let mut w = BufWriter::new(stdout.lock());
                    synth::write(&entries, format, &mut w).context("writing the log")?;
                    w.flush().context("writing the log")?;
                }
            }
            Ok(ExitCode::SUCCESS)
        }
    }
}
