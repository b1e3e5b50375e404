//! Connections: one multiplexed connection to a standalone server (concurrent
//! calls share its socket and are written to it together: pipelining without a
//! batch API), or a cluster connection that routes each call by its key's slot.

use core::time::Duration;

use redis::aio::MultiplexedConnection;
use redis::cluster::ClusterClientBuilder;
use redis::cluster_async::ClusterConnection;
use redis::{AsyncConnectionConfig, Cmd, IntoConnectionInfo, Pipeline, RedisResult, Value};

use crate::error::{ConfigError, Error};

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
    /// One server over TLS (`rediss://` URL) with [`TlsConfig`]: a private CA,
    /// a client certificate, or both. Needs the `tls` feature
    /// ([`crate::RedisLimiter::new`] returns [`Error::Config`] without it).
    StandaloneTls {
        /// The `rediss://` URL; its host name is checked against the certificate.
        url: String,
        /// Whom to trust, and the client certificate to present.
        tls: TlsConfig,
    },
    /// A Redis Cluster over TLS (`rediss://` seed URLs; the servers run with
    /// `tls-cluster yes`) with [`TlsConfig`], used for every node. Needs `tls`.
    ClusterTls {
        /// The seed nodes' `rediss://` URLs.
        nodes: Vec<String>,
        /// Whom to trust, and the client certificate to present.
        tls: TlsConfig,
    },
}

/// TLS settings beyond a plain `rediss://` URL (which trusts the system store and
/// webpki-roots and presents no certificate).
///
/// ```
/// use sluicegate_redis::{Backend, ClientCert, TlsConfig};
/// let tls = TlsConfig {
///     root_ca_pem: Some(b"-----BEGIN CERTIFICATE-----...".to_vec()),
///     client: Some(ClientCert { cert_pem: b"...".to_vec(), key_pem: b"...".to_vec() }),
/// };
/// let b = Backend::from_url("rediss+cluster://10.0.0.1:6379,10.0.0.2:6379").unwrap().with_tls(tls).unwrap();
/// assert!(matches!(b, Backend::ClusterTls { .. }));
/// // The private key never shows in debug output.
/// assert!(!format!("{b:?}").contains("key_pem: [46"));
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TlsConfig {
    /// Trust only these CA certificate(s), PEM (a private CA); `None`: the system
    /// trust store and webpki-roots.
    pub root_ca_pem: Option<Vec<u8>>,
    /// The client certificate and key to present (mutual TLS, for servers with
    /// `tls-auth-clients yes`); `None`: none.
    pub client: Option<ClientCert>,
}

/// A client certificate (chain) and its private key, both PEM.
///
/// ```
/// use sluicegate_redis::ClientCert;
/// let c = ClientCert { cert_pem: b"cert".to_vec(), key_pem: b"secret".to_vec() };
/// assert!(format!("{c:?}").contains("<redacted>"));
/// ```
#[derive(Clone, PartialEq, Eq)]
pub struct ClientCert {
    /// The certificate, then any intermediates, PEM.
    pub cert_pem: Vec<u8>,
    /// The private key, PEM.
    pub key_pem: Vec<u8>,
}

impl core::fmt::Debug for ClientCert {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("ClientCert")
            .field("cert_pem", &format_args!("{} bytes", self.cert_pem.len()))
            .field("key_pem", &format_args!("<redacted>"))
            .finish()
    }
}

#[cfg(feature = "tls")]
impl TlsConfig {
    fn certificates(&self) -> redis::TlsCertificates {
        redis::TlsCertificates {
            client_tls: self.client.as_ref().map(|c| redis::ClientTlsConfig {
                client_cert: c.cert_pem.clone(),
                client_key: c.key_pem.clone(),
            }),
            root_cert: self.root_ca_pem.clone(),
        }
    }
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
                    return Err(url_error(format!("{}: no cluster nodes", redact(url))));
                }
                for n in &nodes {
                    check_address(n)?;
                }
                return Ok(Self::Cluster(nodes));
            }
        }
        if url.starts_with("redis://") || url.starts_with("rediss://") {
            check_address(url)?;
            return Ok(Self::Standalone(url.to_owned()));
        }
        if url.starts_with("unix://") {
            return Ok(Self::Standalone(url.to_owned()));
        }
        Err(url_error(format!(
            "{}: expected redis://, rediss:// or redis+cluster://",
            redact(url)
        )))
    }

    /// The same servers over TLS with `tls`: a `rediss://` URL becomes
    /// [`Backend::StandaloneTls`], `rediss+cluster://` seeds [`Backend::ClusterTls`].
    /// A plain-text (`redis://`, `unix://`) backend is an [`Error::Config`].
    ///
    /// ```
    /// # use sluicegate_redis::{Backend, TlsConfig};
    /// let b = Backend::from_url("rediss://cache:6380").unwrap().with_tls(TlsConfig::default()).unwrap();
    /// assert!(matches!(b, Backend::StandaloneTls { .. }));
    /// assert!(Backend::from_url("redis://cache:6379").unwrap().with_tls(TlsConfig::default()).is_err());
    /// ```
    pub fn with_tls(self, tls: TlsConfig) -> Result<Self, Error> {
        let secure = |u: &str| u.starts_with("rediss://");
        match self {
            Self::Standalone(url) if secure(&url) => Ok(Self::StandaloneTls { url, tls }),
            Self::Cluster(nodes) if !nodes.is_empty() && nodes.iter().all(|n| secure(n)) => {
                Ok(Self::ClusterTls { nodes, tls })
            }
            Self::StandaloneTls { url, .. } => Ok(Self::StandaloneTls { url, tls }),
            Self::ClusterTls { nodes, .. } => Ok(Self::ClusterTls { nodes, tls }),
            _ => Err(url_error(
                "TLS settings need rediss:// (or rediss+cluster://) URLs",
            )),
        }
    }

    /// The servers, without credentials, for log lines.
    pub(crate) fn label(&self) -> String {
        match self {
            Self::Standalone(url) | Self::StandaloneTls { url, .. } => redact(url),
            Self::Cluster(nodes) | Self::ClusterTls { nodes, .. } => {
                let nodes: Vec<String> = nodes.iter().map(|n| redact(n)).collect();
                format!("cluster {}", nodes.join(","))
            }
        }
    }

    /// Whether this backend can be used: every address has a host and a port in
    /// range, and the TLS variants and `rediss://` URLs need the `tls` feature.
    pub(crate) fn validate(&self) -> Result<(), Error> {
        match self {
            Self::Standalone(url) | Self::StandaloneTls { url, .. } => {
                if !url.starts_with("unix://") {
                    check_address(url)?;
                }
            }
            Self::Cluster(nodes) | Self::ClusterTls { nodes, .. } => {
                if nodes.is_empty() {
                    return Err(url_error("no cluster nodes"));
                }
                for n in nodes {
                    check_address(n)?;
                }
            }
        }
        if cfg!(feature = "tls") {
            return Ok(());
        }
        let tls = match self {
            Self::Standalone(url) => url.starts_with("rediss://"),
            Self::Cluster(nodes) => nodes.iter().any(|n| n.starts_with("rediss://")),
            Self::StandaloneTls { .. } | Self::ClusterTls { .. } => true,
        };
        if tls {
            return Err(url_error(
                "TLS (rediss://) needs sluicegate-redis's `tls` feature",
            ));
        }
        Ok(())
    }

    /// The client of a standalone server, plain or TLS (`None` for a cluster),
    /// for the blocking API's own connections ([`crate::direct`]), with
    /// `TCP_NODELAY` on their sockets.
    pub(crate) fn standalone_client(&self) -> Option<RedisResult<redis::Client>> {
        match self {
            Self::Standalone(url) => Some(client(url, None, true)),
            Self::StandaloneTls { url, tls } => Some(client(url, Some(tls), true)),
            Self::Cluster(_) | Self::ClusterTls { .. } => None,
        }
    }

    pub(crate) async fn connect(
        &self,
        connect: Duration,
        response: Duration,
    ) -> Result<Conn, Error> {
        let fut = async {
            match self {
                Self::Standalone(url) => single(client(url, None, false)?, connect).await,
                Self::StandaloneTls { url, tls } => {
                    single(client(url, Some(tls), false)?, connect).await
                }
                #[cfg(not(feature = "tls"))]
                Self::ClusterTls { .. } => Err(no_tls()),
                Self::Cluster(nodes) => {
                    let client = cluster_builder(nodes, connect, response).build()?;
                    Ok(Conn::Cluster(client.get_async_connection().await?))
                }
                #[cfg(feature = "tls")]
                Self::ClusterTls { nodes, tls } => {
                    let client = cluster_builder(nodes, connect, response)
                        .certs(tls.certificates())
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

/// The client of one server: `url`, over TLS with `tls`; `nodelay`:
/// `TCP_NODELAY` on its sockets.
fn client(url: &str, tls: Option<&TlsConfig>, nodelay: bool) -> RedisResult<redis::Client> {
    let mut info = url.into_connection_info()?;
    if nodelay {
        info = info.set_tcp_settings(redis::io::tcp::TcpSettings::default().set_nodelay(true));
    }
    match tls {
        None => redis::Client::open(info),
        #[cfg(feature = "tls")]
        Some(tls) => redis::Client::build_with_tls(info, tls.certificates()),
        #[cfg(not(feature = "tls"))]
        Some(_) => Err(no_tls()),
    }
}

#[cfg(not(feature = "tls"))]
fn no_tls() -> redis::RedisError {
    redis::RedisError::from((
        redis::ErrorKind::InvalidClientConfig,
        "TLS needs the `tls` feature",
    ))
}

/// A multiplexed connection to one server. Its response timeout is the
/// limiter's own: one timer per call around the whole script call (EVALSHA and a
/// NOSCRIPT's EVAL), so the connection sets none.
async fn single(client: redis::Client, connect: Duration) -> Result<Conn, redis::RedisError> {
    let cfg = AsyncConnectionConfig::new()
        .set_connection_timeout(Some(connect))
        .set_response_timeout(None);
    let c = client
        .get_multiplexed_async_connection_with_config(&cfg)
        .await?;
    Ok(Conn::Single(c))
}

fn url_error(reason: impl Into<String>) -> Error {
    Error::Config(ConfigError::new("url", reason))
}

/// `url` without its user name and password.
fn redact(url: &str) -> String {
    match (url.split_once("://"), url.rsplit_once('@')) {
        (Some((scheme, _)), Some((_, rest))) => format!("{scheme}://…@{rest}"),
        _ => url.to_owned(),
    }
}

/// A `redis://` or `rediss://` URL's address: a host, and a port (if given)
/// from 1 to 65535. Anything else would be accepted now and answered by the
/// failure policy forever, so it is refused here.
fn check_address(url: &str) -> Result<(), Error> {
    let bad = |why: &str| Err(url_error(format!("{}: {why}", redact(url))));
    let Some((_, rest)) = url.split_once("://") else {
        return bad("no scheme");
    };
    let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
    let hostport = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    let (host, port) = if let Some(v6) = hostport.strip_prefix('[') {
        match v6.split_once(']') {
            Some((h, p)) => (h, p.strip_prefix(':')),
            None => return bad("unclosed '[' in the host"),
        }
    } else {
        match hostport.rsplit_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (hostport, None),
        }
    };
    if host.is_empty() {
        return bad("no host");
    }
    match port.map(str::parse::<u16>) {
        None => Ok(()),
        Some(Ok(p)) if p != 0 => Ok(()),
        Some(_) => bad("the port must be a number from 1 to 65535"),
    }
}

/// The cluster client's settings. No retries: a call that failed or timed out
/// may have run, and replaying it could charge twice.
fn cluster_builder(
    nodes: &[String],
    connect: Duration,
    response: Duration,
) -> ClusterClientBuilder {
    ClusterClientBuilder::new(nodes.to_vec())
        .retries(0)
        .connection_timeout(connect)
        .response_timeout(response)
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

#[cfg(test)]
mod address_tests {
    use super::Backend;

    #[test]
    fn ports_out_of_range_or_not_numbers_are_refused_at_construction() {
        for bad in [
            "redis://127.0.0.1:notaport",
            "redis://127.0.0.1:99999",
            "redis://127.0.0.1:0",
            "redis://:6379",
            "redis+cluster://127.0.0.1:7000,127.0.0.1:70000",
            "redis://[::1",
        ] {
            assert!(Backend::from_url(bad).is_err(), "{bad}");
            let direct = Backend::Standalone(bad.into());
            assert!(direct.validate().is_err(), "{bad}");
        }
        for good in [
            "redis://127.0.0.1:6379/0",
            "redis://user:p%40ss@cache",
            "redis://[::1]:6380",
            "redis+cluster://a:1,b:65535",
        ] {
            let b = Backend::from_url(good).unwrap();
            assert!(b.validate().is_ok(), "{good}");
        }
        let b = Backend::from_url("redis://user:secret@cache:6379").unwrap();
        assert!(!b.label().contains("secret"));
    }
}

#[cfg(all(test, not(feature = "tls")))]
mod tests {
    use super::Backend;

    #[test]
    fn tls_without_the_feature_is_refused_up_front() {
        let b = Backend::from_url("rediss://127.0.0.1:6380").unwrap();
        assert!(b.validate().is_err());
        let b = Backend::StandaloneTls {
            url: "rediss://127.0.0.1:6380".into(),
            tls: super::TlsConfig::default(),
        };
        assert!(b.validate().is_err());
        let b = Backend::ClusterTls {
            nodes: vec!["rediss://127.0.0.1:6380".into()],
            tls: super::TlsConfig::default(),
        };
        assert!(b.validate().is_err());
        assert!(Backend::from_url("redis://127.0.0.1:6379")
            .unwrap()
            .validate()
            .is_ok());
    }
}
