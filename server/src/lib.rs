//! # sluicegate-server
//!
//! An Envoy rate limit service: `envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit`
//! over gRPC, configured with envoyproxy/ratelimit's YAML files, deciding with
//! sluicegate's lock-free keyed limiters in memory. `grpc.health.v1` on the gRPC
//! port; Prometheus `/metrics` on a separate HTTP port.
//!
//! The binary (`sluicegate-server --config PATH --grpc ADDR:PORT --http ADDR:PORT`)
//! only parses flags and calls [`Bound::bind`] and [`Bound::serve`]; everything else
//! lives here so that tests drive it directly.
//!
//! ```
//! use sluicegate_server::{DescriptorTree, LimitKind};
//! let yaml = "domain: edge\ndescriptors:\n  - key: remote_address\n    rate_limit: {unit: second, requests_per_unit: 10}\n";
//! let domain = DescriptorTree::from_yaml("edge.yaml", yaml)?;
//! let limit = domain.resolve([("remote_address", "10.1.2.3")]).unwrap();
//! assert!(matches!(limit.kind, LimitKind::Rate { requests_per_unit: 10, .. }));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
#![forbid(unsafe_code)]
#![warn(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

pub mod admin;
mod coalesce;
mod config;
mod limit;
mod metrics;
mod overrides;
mod rule_set;
mod serve;
mod service;
mod store_domains;
mod tls;
mod toml_domain;
mod yaml;
mod yaml_domain;

pub use admin::AdminConfig;
pub use config::{build_rules, read_sources, Config, ConfigError};
pub use rule_set::{RuleSet, TableSettings};
pub use serve::{shutdown_signal, BindError, Bound, SERVICE_NAME};
pub use service::ServiceSettings;
pub use store_domains::StoreConfig;
pub use tls::TlsFiles;
pub use yaml::{unit_seconds, DescriptorTree, LimitDef, LimitKind};
