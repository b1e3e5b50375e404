//! # sluicegate-policy
//!
//! Rate-limit policies: the rules of a whole service in one TOML file — a login
//! endpoint at 5 per minute per IP, an API at 20 per second and 1,000 per hour per
//! API key, a tenant at its contracted quota, the service under a global ceiling —
//! validated with errors that name the line and column, checked all-or-nothing
//! across rules, with shadow rules, hot reload and Prometheus metrics.
//!
//! * [`Policy::from_toml`] / [`Policy::from_path`] validate and build;
//!   [`PolicyDef::parse`] only validates (for linters).
//! * [`Policy::check`] / [`Policy::check_n_at`] take any [`Attrs`] (e.g. a slice
//!   of `(&str, &str)`): no attribute value is copied. The [`Decision`] carries
//!   each matching rule's answer and the `RateLimit`/`RateLimit-Policy` fields.
//! * [`Policy::reload_from_toml`], [`Watcher`]: hot reload keeping state.
//! * [`Policy::metrics_text`]: Prometheus text.
//! * [`RemoteFactory`]: the seam for `redis` and `hybrid` rules; with the `redis`
//!   feature, `redis::RedisFactory` builds them and `redis::RedisSource` keeps the
//!   rule file in Redis (reloaded by a fleet on each change).
//! * [`store`] (feature `store`): rules as records in SQLite, with versions and
//!   an audit trail; `Policy::from_store` follows a domain of them.
//! * `PolicyLayer` (feature `tower`): a tower layer for axum and hyper services.
//!
//! ```
//! use sluicegate_policy::Policy;
//! let policy = Policy::from_toml(r#"
//! [[rule]]
//! name = "api-per-key"
//! match = { path = "/api/*", "header:x-api-key" = "*" }
//! key = ["header:x-api-key"]
//! limit = "2/second; 1000/hour"
//!
//! [[rule]]
//! name = "new-limit"
//! match = { path = "/api/*" }
//! limit = "1/second"
//! mode = "shadow"
//! "#)?;
//! let req = [("path", "/api/users"), ("header:x-api-key", "k1")];
//! assert!(policy.check_n_at(&req, 1, 0).allowed());
//! let second = policy.check_n_at(&req, 1, 0);
//! assert!(second.allowed()); // the shadow rule would deny, but only counts
//! assert_eq!(policy.metrics_at(0)[1].shadow_denied, 1);
//! assert!(!policy.check_n_at(&req, 1, 0).allowed());
//! # Ok::<(), sluicegate_policy::Error>(())
//! ```
#![forbid(unsafe_code)]
#![warn(missing_docs)]
#![warn(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod attrs;
mod backend;
mod check;
mod cond;
mod counters;
mod decision;
mod def;
mod diag;
mod index;
mod input;
mod key;
#[cfg(feature = "tower")]
mod layer;
mod metrics;
mod model;
mod policy;
mod policy_def_builder;
mod raw;
#[cfg(feature = "redis")]
pub mod redis;
mod reload;
mod rule_builder;
mod state;
#[cfg(feature = "store")]
pub mod store;
mod table;
mod validate;

pub use attrs::{AttrName, Attrs};
pub use backend::{BackendError, RemoteFactory, RemoteFuture, RemoteLimiter};
pub use decision::{Decision, RuleDecision, push_sf_string};
pub use def::{
    Backend, Mode, OnError, PolicyDef, RedisSettings, RuleDef, SharedSettings, StateSettings,
};
pub use diag::{Code, Diagnostic, Error, Severity};
#[cfg(feature = "tower")]
pub use layer::{ExtraAttrs, PolicyLayer, PolicyService};
pub use metrics::RuleStats;
pub use policy::{Policy, PolicyBuilder};
pub use policy_def_builder::PolicyDefBuilder;
pub use reload::{Reloaded, Watcher};
pub use rule_builder::{Choice, RuleBuilder};

/// The crate README's Rust snippet, compiled and run as a doctest.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
