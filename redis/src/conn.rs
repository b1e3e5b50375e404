//! Connections: one multiplexed connection to a standalone server (concurrent
//! calls share its socket and are written to it together: pipelining without a
//! batch API), or a cluster connection that routes each call by its key's slot.

use core::time::Duration;

use redis::aio::MultiplexedConnection;
use redis::cluster::ClusterClientBuilder;
use redis::cluster_async::ClusterConnection;
use redis::{AsyncConnectionConfig, Cmd, Pipeline, RedisResult, Value};

use crate::error::Error;

/// Where the limits live.
///
/// ```
/// use sluicegate_redis::Backend;
/// let b = Backend::from_url("redis://127.0.0.1:6379/0").unwrap();
/// assert!(matches!(b, Backend::Standalone(_)));
/// let c = Backend::from_url("redis+cluster://127.0.0.1:7000,127.0.0.1:7001").unwrap();
/// assert_eq!(c, Backend::Cluster(vec!["redis://127.0.0.1:7000".into(), "redis://127.0.0.1:7001".into()]));
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Backend {
    /// One server (or a Valkey server): a `redis://` or `rediss://` URL.
    Standalone(String),
    /// A Redis Cluster, from one or more seed nodes' URLs.
    Cluster(Vec<String>),
    /// One server over TLS (`rediss://` URL) whose certificate must chain to
    /// `root_ca_pem` (one or more PEM certificates) alone, not to the system trust
    /// store or webpki-roots: for a private CA. Needs the `tls` feature
    /// ([`crate::RedisLimiter::new`] returns [`Error::Url`] without it).
    StandaloneTls {
        /// The `rediss://` URL; its host name is checked against the certificate.
        url: String,
        /// The CA certificate(s) to trust, PEM.
        root_ca_pem: Vec<u8>,
    },
}

impl Backend {
    /// `redis://[user:pass@]host:port[/db]`, `rediss://…` (with the `tls` feature),
    /// or `redis+cluster://host:port[,host:port…]` (`rediss+cluster://` for TLS).
    ///
    /// ```
    /// # use sluicegate_redis::Backend;
    /// assert!(Backend::from_url("http://x").is_err());
    /// ```
    pub fn from_url(url: &str) -> Result<Self, Error> {
        for (scheme, node) in [
            ("redis+cluster://", "redis://"),
            ("rediss+cluster://", "rediss://"),
        ] {
            if let Some(rest) = url.strip_prefix(scheme) {
                let (auth, hosts) = match rest.rsplit_once('@') {
                    Some((a, h)) => (format!("{a}@"), h),
                    None => (String::new(), rest),
                };
                let nodes: Vec<String> = hosts
                    .split(',')
                    .filter(|h| !h.is_empty())
                    .map(|h| format!("{node}{auth}{}", h.trim_end_matches('/')))
                    .collect();
                if nodes.is_empty() {
                    return Err(Error::Url(format!("{url}: no cluster nodes")));
                }
                return Ok(Self::Cluster(nodes));
            }
        }
        if url.starts_with("redis://") || url.starts_with("rediss://") || url.starts_with("unix://")
        {
            return Ok(Self::Standalone(url.to_owned()));
        }
        Err(Error::Url(format!(
            "{url}: expected redis://, rediss:// or redis+cluster://"
        )))
    }

    /// Whether this backend can be used with the features this crate was built
    /// with: [`Backend::StandaloneTls`] and `rediss://` URLs need `tls`.
    pub(crate) fn check_features(&self) -> Result<(), Error> {
        if cfg!(feature = "tls") {
            return Ok(());
        }
        let tls = match self {
            Self::Standalone(url) => url.starts_with("rediss://"),
            Self::Cluster(nodes) => nodes.iter().any(|n| n.starts_with("rediss://")),
            Self::StandaloneTls { .. } => true,
        };
        if tls {
            return Err(Error::Url(
                "TLS (rediss://) needs sluicegate-redis's `tls` feature".into(),
            ));
        }
        Ok(())
    }

    pub(crate) async fn connect(
        &self,
        connect: Duration,
        response: Duration,
    ) -> Result<Conn, Error> {
        let fut = async {
            match self {
                Self::Standalone(url) => {
                    let client = redis::Client::open(url.as_str())?;
                    // The response timeout is the limiter's own, one timer per call
                    // around the whole script call (EVALSHA and a NOSCRIPT's EVAL).
                    let cfg = AsyncConnectionConfig::new()
                        .set_connection_timeout(Some(connect))
                        .set_response_timeout(None);
                    let c = client
                        .get_multiplexed_async_connection_with_config(&cfg)
                        .await?;
                    Ok::<_, redis::RedisError>(Conn::Single(c))
                }
                #[cfg(feature = "tls")]
                Self::StandaloneTls { url, root_ca_pem } => {
                    let client = redis::Client::build_with_tls(
                        url.as_str(),
                        redis::TlsCertificates {
                            client_tls: None,
                            root_cert: Some(root_ca_pem.clone()),
                        },
                    )?;
                    let cfg = AsyncConnectionConfig::new()
                        .set_connection_timeout(Some(connect))
                        .set_response_timeout(None);
                    let c = client
                        .get_multiplexed_async_connection_with_config(&cfg)
                        .await?;
                    Ok(Conn::Single(c))
                }
                #[cfg(not(feature = "tls"))]
                Self::StandaloneTls { .. } => Err(redis::RedisError::from((
                    redis::ErrorKind::InvalidClientConfig,
                    "TLS needs the `tls` feature",
                ))),
                Self::Cluster(nodes) => {
                    // No retries: a call that failed or timed out may have run, and
                    // replaying it could charge twice.
                    let client = ClusterClientBuilder::new(nodes.clone())
                        .retries(0)
                        .connection_timeout(connect)
                        .response_timeout(response)
                        .build()?;
                    Ok(Conn::Cluster(client.get_async_connection().await?))
                }
            }
        };
        match tokio::time::timeout(connect, fut).await {
            Ok(r) => r.map_err(Error::Redis),
            Err(_) => Err(Error::Timeout),
        }
    }
}

/// A live connection; cloning shares it.
#[derive(Clone)]
pub(crate) enum Conn {
    Single(MultiplexedConnection),
    Cluster(ClusterConnection),
}

impl Conn {
    pub(crate) async fn query(&mut self, cmd: &Cmd) -> RedisResult<Value> {
        match self {
            Self::Single(c) => cmd.query_async(c).await,
            Self::Cluster(c) => cmd.query_async(c).await,
        }
    }

    /// A pipeline with `ignore_errors`: one result per command.
    pub(crate) async fn pipeline(
        &mut self,
        pipe: &Pipeline,
    ) -> RedisResult<Vec<RedisResult<Value>>> {
        match self {
            Self::Single(c) => pipe.query_async(c).await,
            Self::Cluster(c) => pipe.query_async(c).await,
        }
    }
}

#[cfg(all(test, not(feature = "tls")))]
mod tests {
    use super::Backend;

    #[test]
    fn tls_without_the_feature_is_refused_up_front() {
        let b = Backend::from_url("rediss://127.0.0.1:6380").unwrap();
        assert!(b.check_features().is_err());
        let b = Backend::StandaloneTls {
            url: "rediss://127.0.0.1:6380".into(),
            root_ca_pem: Vec::new(),
        };
        assert!(b.check_features().is_err());
        assert!(Backend::from_url("redis://127.0.0.1:6379")
            .unwrap()
            .check_features()
            .is_ok());
    }
}
