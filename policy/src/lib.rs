//! # sluicegate-policy
//!
//! Rate-limit policies: the rules of a whole service in one TOML file — a login
//! endpoint at 5 per minute per IP, an API at 20 per second and 1,000 per hour per
//! API key, a tenant at its contracted quota, the service under a global ceiling —
//! validated with errors that name the line and column, checked all-or-nothing
//! across rules, with shadow rules, hot reload and Prometheus metrics.
//!
//! ```
//! use sluicegate_policy::PolicyDef;
//! let def = PolicyDef::parse(r#"
//! [[rule]]
//! name = "login"
//! match = { path = "/login", method = "POST" }
//! key = ["ip"]
//! limit = "5/minute"
//! algorithm = "sliding_window"
//! "#, Some("rules.toml"))?;
//! assert!(def.rules()[0].matches(&[("path", "/login"), ("method", "POST"), ("ip", "192.0.2.1")]));
//! # Ok::<(), sluicegate_policy::Error>(())
//! ```
#![forbid(unsafe_code)]
#![warn(missing_docs)]
#![warn(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod attrs;
mod cond;
mod def;
mod diag;
mod raw;
mod validate;

pub use attrs::{AttrName, Attrs};
pub use def::{Backend, Mode, OnError, PolicyDef, RedisSettings, RuleDef};
pub use diag::{Code, Diagnostic, Error, Severity};
