//! The configuration: what the server is started with ([`Config`]), the config
//! files it reads (a file or a directory of them), each parsed by its format
//! (envoyproxy/ratelimit YAML or a TOML policy), and the errors that name the file.

use std::fmt;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use sluicegate_policy::PolicyDef;

use crate::admin::AdminConfig;
use crate::rule_set::{RuleSet, Source, TableSettings};
use crate::service::ServiceSettings;
use crate::store_domains::StoreConfig;
use crate::tls::TlsFiles;
use crate::yaml::DescriptorTree;

/// A problem in a configuration file; `Display` names the file and, where known,
/// the line and column or the descriptor.
///
/// ```
/// let e = sluicegate_server::DescriptorTree::from_yaml("a.yaml", "domain: ''\n").unwrap_err();
/// assert_eq!((e.file.as_str(), e.to_string().as_str()), ("a.yaml", "a.yaml: config file cannot have empty domain"));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    /// The file (or directory) at fault.
    pub file: String,
    /// What is wrong, with the line/column or descriptor path (a TOML policy's
    /// first error).
    pub message: String,
    /// A TOML policy's findings, each with its line, column and rule: `Display`
    /// shows them all (`file:line:column: error: rule `a`: …`).
    pub policy: Option<sluicegate_policy::Error>,
}

impl ConfigError {
    /// An error in `file`.
    ///
    /// ```
    /// let e = sluicegate_server::ConfigError::new("a.yaml", "bad");
    /// assert_eq!(e.to_string(), "a.yaml: bad");
    /// ```
    pub fn new(file: impl Into<String>, message: impl Into<String>) -> ConfigError {
        ConfigError {
            file: file.into(),
            message: message.into(),
            policy: None,
        }
    }

    /// The findings of the TOML policy `file`.
    pub(crate) fn policy(file: &str, e: sluicegate_policy::Error) -> ConfigError {
        let message = e
            .diagnostics()
            .first()
            .map_or_else(String::new, |d| d.message.clone());
        ConfigError {
            file: file.to_owned(),
            message,
            policy: Some(e),
        }
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.policy {
            Some(e) => write!(f, "{e}"),
            None => write!(f, "{}: {}", self.file, self.message),
        }
    }
}

impl std::error::Error for ConfigError {}

/// Everything the server is started with (flags, environment).
///
/// ```
/// use std::time::Duration;
/// use sluicegate_server::{Config, StoreConfig};
/// let config = Config {
///     config_path: Some("ratelimit/".into()),
///     store: Some(StoreConfig { url: "sqlite:/var/lib/sluicegate/rules.db".into(), snapshot: None }),
///     ..Config::default()
/// };
/// assert_eq!(config.grpc.port(), 8081);
/// assert_eq!(config.reload_interval, Duration::from_secs(1));
/// ```
#[derive(Debug, Clone)]
pub struct Config {
    /// A config file, or a directory of them (one domain each): envoyproxy/ratelimit
    /// YAML (`*.yaml`, `*.yml`) or a TOML policy (`<domain>.toml`). Optional
    /// when `store` is set.
    pub config_path: Option<PathBuf>,
    /// Where the gRPC services listen.
    pub grpc: SocketAddr,
    /// Where `/metrics` and `/healthz` listen.
    pub http: SocketAddr,
    /// How often the configuration is checked for changes (zero: never).
    pub reload_interval: Duration,
    /// Live keys each limit holds at most.
    pub keys_per_limit: usize,
    /// Bytes of the pool every domain's keyed limits keep their keys in.
    pub state_memory: usize,
    /// Service behaviour (hits bound, response headers).
    pub service: ServiceSettings,
    /// A rule store whose every domain is served (`--store`).
    pub store: Option<StoreConfig>,
    /// The admin API and page (`--admin`; needs `store`).
    pub admin: Option<AdminConfig>,
    /// TLS on the gRPC listener.
    pub grpc_tls: Option<TlsFiles>,
    /// TLS on the HTTP listener (`/metrics`, `/healthz`).
    pub http_tls: Option<TlsFiles>,
}

impl Default for Config {
    /// The flags' defaults: no config, no store, no admin, loopback ports.
    fn default() -> Config {
        Config {
            config_path: None,
            grpc: SocketAddr::from(([127, 0, 0, 1], 8081)),
            http: SocketAddr::from(([127, 0, 0, 1], 8080)),
            reload_interval: Duration::from_secs(1),
            keys_per_limit: 131_072,
            state_memory: 64 << 20,
            service: ServiceSettings {
                max_hits_addend: 1_000_000_000,
                response_headers: false,
            },
            store: None,
            admin: None,
            grpc_tls: None,
            http_tls: None,
        }
    }
}

/// The config files under `path` with their text: the file itself, or the
/// directory's `*.yaml`, `*.yml` and `*.toml` files (not hidden ones, not subdirectories) in
/// name order.
///
/// ```
/// let dir = std::env::temp_dir().join(format!("sg-read-sources-{}", std::process::id()));
/// std::fs::create_dir_all(&dir)?;
/// std::fs::write(dir.join("b.yaml"), "domain: b\n")?;
/// std::fs::write(dir.join("a.toml"), "")?;
/// std::fs::write(dir.join("notes.txt"), "ignored")?;
/// let files = sluicegate_server::read_sources(&dir)?;
/// let names: Vec<_> = files.iter().map(|(f, _)| f.rsplit('/').next().unwrap()).collect();
/// assert_eq!(names, ["a.toml", "b.yaml"]);
/// # std::fs::remove_dir_all(&dir)?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn read_sources(path: &Path) -> Result<Vec<(String, String)>, ConfigError> {
    let err =
        |p: &Path, e: std::io::Error| ConfigError::new(p.display().to_string(), e.to_string());
    let meta = std::fs::metadata(path).map_err(|e| err(path, e))?;
    let files = if meta.is_dir() {
        let mut files = Vec::new();
        for entry in std::fs::read_dir(path).map_err(|e| err(path, e))? {
            let p = entry.map_err(|e| err(path, e))?.path();
            let name = p.file_name().and_then(|n| n.to_str()).unwrap_or(".");
            let known = p
                .extension()
                .is_some_and(|x| x == "yaml" || x == "yml" || x == "toml");
            if known && !name.starts_with('.') && p.is_file() {
                files.push(p);
            }
        }
        files.sort();
        if files.is_empty() {
            return Err(ConfigError::new(
                path.display().to_string(),
                "no *.yaml, *.yml or *.toml files in the directory",
            ));
        }
        files
    } else {
        vec![path.to_path_buf()]
    };
    files
        .into_iter()
        .map(|p| {
            std::fs::read_to_string(&p)
                .map(|t| (p.display().to_string(), t))
                .map_err(|e| err(&p, e))
        })
        .collect()
}

/// Parses and builds the rules of `sources` (file name, text), taking state over
/// from `old`. A `*.toml` file is a policy for the domain named by its stem; any
/// other is envoyproxy/ratelimit YAML.
///
/// ```
/// use sluicegate_server::{build_rules, TableSettings};
/// let settings = TableSettings::new(64, 1 << 20).unwrap();
/// let bad = [("e.yaml".to_owned(), "domain: e\ndescriptors:\n  - key: k\n    rate_limit: {unit: lightyear}\n".to_owned())];
/// assert!(build_rules(&bad, None, settings).unwrap_err().to_string().contains("invalid rate limit unit"));
/// ```
pub fn build_rules(
    sources: &[(String, String)],
    old: Option<&RuleSet>,
    settings: TableSettings,
) -> Result<RuleSet, ConfigError> {
    let parsed = sources
        .iter()
        .map(|(file, text)| parse_source(file, text).map(|s| (file.clone(), s)))
        .collect::<Result<Vec<_>, _>>()?;
    RuleSet::build(parsed, old, settings)
}

/// One file: a TOML policy for the domain named by its stem, else YAML.
fn parse_source(file: &str, text: &str) -> Result<Source, ConfigError> {
    let path = Path::new(file);
    if path.extension().is_none_or(|x| x != "toml") {
        return DescriptorTree::from_yaml(file, text).map(Source::Yaml);
    }
    let domain = path
        .file_stem()
        .and_then(|s| s.to_str())
        .filter(|s| !s.is_empty())
        .ok_or_else(|| {
            ConfigError::new(
                file,
                "a TOML policy's file name is its domain: <domain>.toml",
            )
        })?;
    let def = PolicyDef::parse(text, Some(file)).map_err(|e| ConfigError::policy(file, e))?;
    Ok(Source::Toml {
        domain: domain.to_owned(),
        text: text.to_owned(),
        def,
    })
}
