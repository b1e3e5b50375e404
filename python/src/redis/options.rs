//! `RedisOptions`: where Redis is and what a limiter does when it fails, and the
//! deprecated keyword arguments it replaces.

use std::time::Duration;

use pyo3::exceptions::{PyDeprecationWarning, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyDict;
use sluicegate_redis::{Backend, ClientCert, Config, FailurePolicy, TlsConfig};

use crate::errors;

pub(super) fn secs(s: f64, what: &str) -> PyResult<Duration> {
    Duration::try_from_secs_f64(s).map_err(|_| {
        PyValueError::new_err(format!("{what} must be a finite number of seconds >= 0"))
    })
}

/// Where Redis is and what a limiter does when it fails: one object, shared by
/// any number of limiters (each still opens its own connection).
///
/// >>> opts = RedisOptions("redis://127.0.0.1:6379", timeout=0.05, failure_policy="closed")
/// >>> opts.failure_policy
/// 'closed'
#[pyclass(frozen, name = "RedisOptions", module = "sluicegate._sluicegate")]
pub struct PyRedisOptions {
    url: String,
    pub(super) backend: Backend,
    pub(super) cfg: Config,
}

#[pymethods]
impl PyRedisOptions {
    #[new]
    #[pyo3(signature = (url, *, prefix = "sluicegate:", timeout = 0.025, connect_timeout = None, failure_policy = "local", local_share = 10, ssl_ca_certs = None, ssl_certfile = None, ssl_keyfile = None, max_connections = 8))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        url: &str,
        prefix: &str,
        timeout: f64,
        connect_timeout: Option<f64>,
        failure_policy: &str,
        local_share: i64,
        ssl_ca_certs: Option<std::path::PathBuf>,
        ssl_certfile: Option<std::path::PathBuf>,
        ssl_keyfile: Option<std::path::PathBuf>,
        max_connections: i64,
    ) -> PyResult<Self> {
        let policy = match failure_policy {
            "open" => FailurePolicy::Open,
            "closed" => FailurePolicy::Closed,
            "local" => match local_share {
                share @ 1..=100 => FailurePolicy::Local {
                    share_percent: share as u8,
                },
                _ => {
                    return Err(PyValueError::new_err(
                        "local_share is a percentage from 1 to 100",
                    ))
                }
            },
            other => {
                return Err(PyValueError::new_err(format!(
                    "unknown failure_policy {other:?}: expected \"open\", \"closed\" or \"local\""
                )))
            }
        };
        let timeout = secs(timeout, "timeout")?;
        if timeout.is_zero() {
            return Err(PyValueError::new_err("timeout must be positive"));
        }
        let connect_timeout = match connect_timeout {
            Some(t) => secs(t, "connect_timeout")?,
            None => timeout.max(Duration::from_millis(50)),
        };
        let max_connections = usize::try_from(max_connections).map_err(|_| {
            PyValueError::new_err("max_connections is a number of connections, 0 or more")
        })?;
        let cfg = Config {
            prefix: prefix.to_owned(),
            timeout,
            connect_timeout,
            policy,
            blocking_connections: max_connections,
            ..Config::default()
        };
        let tls = Tls {
            ca: ssl_ca_certs,
            cert: ssl_certfile,
            key: ssl_keyfile,
        };
        let mut backend = Backend::from_url(url).map_err(errors::backend)?;
        if let Some(tls) = tls.config()? {
            backend = backend.with_tls(tls).map_err(errors::backend)?;
        }
        Ok(Self {
            url: url.to_owned(),
            backend,
            cfg,
        })
    }

    /// The server's URL.
    #[getter]
    fn url(&self) -> &str {
        &self.url
    }

    /// The key prefix.
    #[getter]
    fn prefix(&self) -> &str {
        &self.cfg.prefix
    }

    /// The longest one call may take, in seconds.
    #[getter]
    fn timeout(&self) -> f64 {
        self.cfg.timeout.as_secs_f64()
    }

    /// The most connections a limiter's calling threads drive themselves (see
    /// `sluicegate_redis::blocking`); past it, checks share one multiplexed
    /// connection. 0: always that one.
    #[getter]
    fn max_connections(&self) -> usize {
        self.cfg.blocking_connections
    }

    /// `"open"`, `"closed"` or `"local"`.
    #[getter]
    fn failure_policy(&self) -> &'static str {
        match self.cfg.policy {
            FailurePolicy::Open => "open",
            FailurePolicy::Closed => "closed",
            FailurePolicy::Local { .. } => "local",
        }
    }

    fn __repr__(&self) -> String {
        format!(
            "RedisOptions({:?}, timeout={:?}, failure_policy={:?})",
            self.url,
            self.cfg.timeout.as_secs_f64(),
            self.failure_policy()
        )
    }
}

/// The `ssl_*` arguments: PEM file paths, as redis-py names them.
struct Tls {
    ca: Option<std::path::PathBuf>,
    cert: Option<std::path::PathBuf>,
    key: Option<std::path::PathBuf>,
}

impl Tls {
    /// `None` without any; the files read now (an unreadable one is an `OSError`
    /// naming it, from the constructor, not from the first check).
    fn config(self) -> PyResult<Option<TlsConfig>> {
        let read = |p: &std::path::Path| {
            std::fs::read(p)
                .map_err(|e| pyo3::exceptions::PyOSError::new_err(format!("{}: {e}", p.display())))
        };
        let client =
            match (self.cert, self.key) {
                (Some(c), Some(k)) => Some(ClientCert {
                    cert_pem: read(&c)?,
                    key_pem: read(&k)?,
                }),
                (None, None) => None,
                _ => return Err(PyValueError::new_err(
                    "ssl_certfile and ssl_keyfile go together (a client certificate and its key)",
                )),
            };
        let root_ca_pem = self.ca.as_deref().map(read).transpose()?;
        if root_ca_pem.is_none() && client.is_none() {
            return Ok(None);
        }
        Ok(Some(TlsConfig {
            root_ca_pem,
            client,
        }))
    }
}

/// The options of a limiter: `redis=`, or (deprecated) the keyword arguments the
/// constructors took before `RedisOptions`, passed to it as they are.
pub(super) fn options<'py>(
    py: Python<'py>,
    redis: Option<Bound<'py, PyRedisOptions>>,
    legacy: Option<&Bound<'py, PyDict>>,
) -> PyResult<Bound<'py, PyRedisOptions>> {
    let legacy = legacy.filter(|d| !d.is_empty());
    match (redis, legacy) {
        (Some(o), None) => Ok(o),
        (Some(_), Some(_)) => Err(PyTypeError::new_err(
            "give the connection settings either as redis=RedisOptions(...) or as keyword arguments, not both",
        )),
        (None, Some(kw)) => {
            PyErr::warn(
                py,
                &py.get_type::<PyDeprecationWarning>(),
                c"url=, prefix=, timeout=, failure_policy=, local_share= and ssl_*= are deprecated: pass redis=RedisOptions(url, ...)",
                2,
            )?;
            Ok(py
                .get_type::<PyRedisOptions>()
                .call((), Some(kw))?
                .cast_into::<PyRedisOptions>()?)
        }
        (None, None) => Err(PyTypeError::new_err(
            "missing redis=RedisOptions(url, ...): where the shared state lives",
        )),
    }
}
