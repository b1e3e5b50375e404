//! Arguments, input/output and printing; the work is in the library.

use std::io::{self, BufWriter, IsTerminal, Write};
use std::process::ExitCode;

use anyhow::{Context, Result};
use clap::{Parser, Subcommand, ValueEnum};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use sluicegate_cli::input::{Format, LogReader, open};
use sluicegate_cli::json::JsonFields;
use sluicegate_cli::replay::Replay;
use sluicegate_cli::report::Report;
use sluicegate_cli::{chart, rules, synth};
use sluicegate_policy::{Diagnostic, PolicyDef};

/// Exit statuses: 0 ok, 1 findings or errors, 2 usage (clap's own for bad
/// arguments).
const FINDINGS: u8 = 1;

#[derive(Parser, Debug)]
#[command(
    name = "sluicegate",
    version,
    about = "Replay access logs through a rate-limit policy; lint and explain rule files; import and export a rule store's domains."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// What a policy would have done to access logs: every line checked at its
    /// own time; per rule matched, allowed, denied, shadow-denied, top denied
    /// keys and peak rates.
    Replay {
        /// The rule file.
        #[arg(long, value_name = "RULES.toml")]
        policy: String,
        /// Log format (auto: decided per input from its first parsable line).
        #[arg(long, value_enum, default_value_t = LogFormat::Auto)]
        format: LogFormat,
        /// For JSON logs, read ATTRIBUTE from FIELD (time, ip, method, path,
        /// request, status, user-agent, referer); repeatable.
        #[arg(long = "field", value_name = "ATTRIBUTE=FIELD")]
        fields: Vec<String>,
        /// Print one JSON object instead of the text report.
        #[arg(long)]
        json: bool,
        /// Draw offered vs admitted requests per second per rule (SVG, or PNG
        /// for a path ending in .png).
        #[arg(long, value_name = "OUT.svg|OUT.png")]
        chart: Option<String>,
        /// Access logs, plain or gzip; `-` for standard input. Oldest first.
        #[arg(value_name = "LOG", required = true)]
        logs: Vec<String>,
    },
    /// Validate a rule file: errors and warnings with file:line:column (exit
    /// status 1 if there are errors).
    Lint {
        /// The rule file.
        #[arg(value_name = "RULES.toml")]
        rules: String,
    },
    /// Which rules match a request, the key each would use, their limits and
    /// backends.
    Explain {
        /// The rule file.
        #[arg(value_name = "RULES.toml")]
        rules: String,
        /// A request attribute, e.g. ip=203.0.113.7, path=/login, method=POST,
        /// header:x-api-key=k1; repeatable.
        #[arg(long = "attr", value_name = "NAME=VALUE")]
        attrs: Vec<String>,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// A rule store's domains as rule files: `import` replaces a domain's
    /// rules and tables with a file's (one transaction, audited as `import`),
    /// `export` writes a domain as a rule file to standard output.
    Store {
        #[command(subcommand)]
        command: StoreCommand,
    },
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

#[derive(Subcommand, Debug)]
enum StoreCommand {
    /// Replace the domain's rules, defaults and tables with the file's, in one
    /// transaction (rules left as they were keep their versions); the file is
    /// validated first, errors naming file:line:column and the rule.
    Import {
        /// The store: sqlite:PATH, sqlite://PATH or postgres://USER@HOST/DATABASE.
        #[arg(long, value_name = "URL")]
        store: String,
        /// The domain.
        #[arg(long)]
        domain: String,
        /// Who is importing, in the audit trail and `updated_by` (default:
        /// SLUICEGATE_USER, else USER, else `sluicegate-cli`).
        #[arg(long, value_name = "NAME")]
        by: Option<String>,
        /// The rule file; `-` for standard input.
        #[arg(value_name = "RULES.toml")]
        rules: String,
    },
    /// Write the domain as a rule file to standard output.
    Export {
        /// The store: sqlite:PATH, sqlite://PATH or postgres://USER@HOST/DATABASE.
        #[arg(long, value_name = "URL")]
        store: String,
        /// The domain.
        #[arg(long)]
        domain: String,
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
        Command::Replay {
            policy,
            format,
            fields,
            json,
            chart: chart_path,
            logs,
        } => replay(
            &policy,
            format.into(),
            &fields,
            json,
            chart_path.as_deref(),
            &logs,
        ),
        Command::Lint { rules: path } => {
            let lint = rules::lint(&path);
            for d in &lint.diagnostics {
                println!("{d}");
            }
            let (e, w) = (lint.errors(), lint.warnings());
            println!("{path}: {e} error{}, {w} warning{}", plural(e), plural(w));
            Ok(if e > 0 {
                ExitCode::from(FINDINGS)
            } else {
                ExitCode::SUCCESS
            })
        }
        Command::Explain {
            rules: path,
            attrs,
            json,
        } => {
            let mut pairs = Vec::new();
            for a in &attrs {
                match a.split_once('=') {
                    Some((k, v)) if !k.is_empty() => pairs.push((k.to_owned(), v.to_owned())),
                    _ => return Ok(usage(&format!("--attr {a}: expected NAME=VALUE"))),
                }
            }
            let text = std::fs::read_to_string(&path).with_context(|| format!("reading {path}"))?;
            let def = match PolicyDef::parse(&text, Some(&path)) {
                Ok(d) => d,
                Err(e) => return Ok(print_diagnostics(e.diagnostics())),
            };
            let explained = rules::explain(&def, &pairs);
            if json {
                println!("{}", serde_json::to_string_pretty(&explained)?);
            } else {
                print!("{}", rules::explain_text(&explained));
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Store { command } => store(command),
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
                        eprintln!(
                            "sluicegate: writing {lines} lines to a terminal; use -o FILE to write a file"
                        );
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

/// `updated_by` of an import: `--by`, SLUICEGATE_USER, USER, or the command's name.
fn importer(by: Option<String>) -> String {
    by.or_else(|| std::env::var("SLUICEGATE_USER").ok())
        .or_else(|| std::env::var("USER").ok())
        .filter(|s| !s.trim().is_empty())
        .unwrap_or_else(|| "sluicegate-cli".to_owned())
}

fn store(command: StoreCommand) -> Result<ExitCode> {
    use sluicegate_policy::store::{Store, StoreError, redact};
    let open = |url: &str| Store::open(url).with_context(|| format!("opening {}", redact(url)));
    match command {
        StoreCommand::Import {
            store: url,
            domain,
            by,
            rules: path,
        } => {
            let text = if path == "-" {
                io::read_to_string(io::stdin()).context("reading standard input")?
            } else {
                std::fs::read_to_string(&path).with_context(|| format!("reading {path}"))?
            };
            let by = importer(by);
            let name = if path == "-" {
                "<stdin>"
            } else {
                path.as_str()
            };
            match open(&url)?.import_toml(&domain, &text, Some(name), &by) {
                Ok(s) if s.is_unchanged() => {
                    eprintln!(
                        "{name}: domain `{domain}` unchanged (version {}, {} rules)",
                        s.version,
                        s.unchanged.len()
                    );
                    Ok(ExitCode::SUCCESS)
                }
                Ok(s) => {
                    eprintln!(
                        "{name}: imported into domain `{domain}` at version {} by {by}: {} created, {} replaced, {} deleted, {} unchanged{}",
                        s.version,
                        s.created.len(),
                        s.replaced.len(),
                        s.deleted.len(),
                        s.unchanged.len(),
                        if s.settings { "; tables replaced" } else { "" }
                    );
                    Ok(ExitCode::SUCCESS)
                }
                Err(StoreError::Invalid(e)) => Ok(print_diagnostics(e.diagnostics())),
                Err(e) => Err(e.into()),
            }
        }
        StoreCommand::Export { store: url, domain } => {
            let text = open(&url)?.export_toml(&domain)?;
            let mut out = io::stdout().lock();
            out.write_all(text.as_bytes())
                .context("writing the rules")?;
            out.flush().context("writing the rules")?;
            Ok(ExitCode::SUCCESS)
        }
    }
}

fn plural(n: usize) -> &'static str {
    if n == 1 { "" } else { "s" }
}

/// A usage error found after parsing: exit status 2, as clap's own.
fn usage(msg: &str) -> ExitCode {
    eprintln!("sluicegate: usage: {msg}");
    ExitCode::from(2)
}

fn print_diagnostics(diagnostics: &[Diagnostic]) -> ExitCode {
    for d in diagnostics {
        eprintln!("{d}");
    }
    ExitCode::from(FINDINGS)
}

fn replay(
    policy_path: &str,
    format: Format,
    field_args: &[String],
    json: bool,
    chart_path: Option<&str>,
    logs: &[String],
) -> Result<ExitCode> {
    let mut fields = JsonFields::default();
    for f in field_args {
        let Some((attr, name)) = f.split_once('=') else {
            return Ok(usage(&format!("--field {f}: expected ATTRIBUTE=FIELD")));
        };
        if let Err(e) = fields.set(attr, name) {
            return Ok(usage(&e));
        }
    }
    if logs.iter().filter(|l| *l == "-").count() > 1 {
        return Ok(usage("standard input (-) can be read only once"));
    }
    let (policy, local) = match rules::load_for_replay(policy_path) {
        Ok(p) => p,
        Err(d) => return Ok(print_diagnostics(&d)),
    };
    if !local.is_empty() {
        eprintln!(
            "sluicegate: note: replaying redis/hybrid rules on local limiters: {}",
            local.join(", ")
        );
    }
    let progress = progress_bar(logs);
    let started = std::time::Instant::now();
    let mut replay = Replay::new(policy);
    let mut reader = LogReader::new(format, fields);
    for log in logs {
        let input = open(log, &progress).with_context(|| format!("opening {log}"))?;
        reader
            .read(log, input, |req| replay.check(req))
            .with_context(|| format!("reading {log}"))?;
    }
    progress.finish_and_clear();
    let elapsed = started.elapsed().as_secs_f64();
    let report = Report::new(&replay, reader.stats());
    if let Some(path) = chart_path {
        chart::draw(&replay, std::path::Path::new(path))?;
    }
    let stdout = io::stdout();
    let mut out = stdout.lock();
    if json {
        serde_json::to_writer(&mut out, &report)?;
        writeln!(out)?;
    } else {
        write!(out, "{}", report.to_text())?;
        eprintln!(
            "sluicegate: replayed {} lines in {elapsed:.2} s ({:.0} lines/s)",
            report.lines,
            report.lines as f64 / elapsed.max(1e-9)
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// A bar over the inputs' total size when stderr is a terminal; hidden otherwise
/// (a pipe or a file gets no progress output).
fn progress_bar(logs: &[String]) -> ProgressBar {
    if !io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    let total: u64 = logs
        .iter()
        .filter(|l| *l != "-")
        .filter_map(|l| std::fs::metadata(l).ok())
        .map(|m| m.len())
        .sum();
    let bar = if logs.iter().any(|l| l == "-") || total == 0 {
        ProgressBar::new_spinner()
    } else {
        ProgressBar::new(total)
    };
    bar.set_draw_target(ProgressDrawTarget::stderr());
    if let Ok(style) = ProgressStyle::with_template(
        "{spinner} {bar:40} {bytes}/{total_bytes} ({bytes_per_sec}, {eta} left)",
    ) {
        bar.set_style(style);
    }
    bar
}
