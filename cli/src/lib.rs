//! # sluicegate-cli
//!
//! The work behind the `sluicegate` command, as a library its tests call
//! directly: reading access logs ([`input`], [`clf`], [`json`], [`time`]),
//! replaying them through a policy ([`replay`], [`report`], [`chart`]), rule
//! files ([`rules`]: load, lint, explain), and a seeded log generator ([`synth`]).
//!
//! ```
//! use sluicegate_cli::input::{Format, LogReader};
//! let log = br#"203.0.113.7 - - [02/Mar/2026:09:00:00 +0000] "GET /login HTTP/1.1" 200 512 "-" "curl/8.5""#;
//! let mut reader = LogReader::new(Format::Auto, Default::default());
//! let mut paths = Vec::new();
//! reader.read("-", &log[..], |req| paths.push(req.get("path").map(str::to_owned)))?;
//! assert_eq!(paths, [Some("/login".to_owned())]);
//! # Ok::<(), std::io::Error>(())
//! ```
#![forbid(unsafe_code)]
#![warn(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

pub mod chart;
pub mod clf;
pub mod input;
pub mod json;
pub mod record;
pub mod replay;
pub mod report;
pub mod rules;
pub mod synth;
pub mod tally;
pub mod time;
