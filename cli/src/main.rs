//! `sluicegate`: replay access logs through a rate-limit policy, lint and explain
//! rule files. The work is in the `sluicegate_cli` library; this file only runs
//! the command line (`cli.rs`) and turns its result into an exit status.

mod cli;

fn main() -> std::process::ExitCode {
    cli::run()
}
