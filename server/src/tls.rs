//! TLS on a listener (rustls, the `ring` provider only), chosen per listener:
//! a certificate, its key and an optional client CA (mTLS). The files are read
//! again when they change (checked every second) or on SIGHUP, and a new
//! configuration is swapped in for the connections accepted after it; a set of
//! files that does not load is logged and the one in force stays.
//!
//! Every listener, TLS or not, goes through one accept loop ([`accept_loop`]):
//! it hands each connection (its handshake done on a task of its own, bounded
//! in time) to a channel that tonic (as a stream) or axum (as a
//! [`ChannelListener`]) serves.

use std::io;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use arc_swap::ArcSwap;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;
use rustls::{RootCertStore, ServerConfig};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch};

/// How long a client has to finish its TLS handshake.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// The files of one listener's TLS: `--<listener>-tls-cert`,
/// `--<listener>-tls-key`, `--<listener>-client-ca`.
///
/// ```
/// let t = sluicegate_server::TlsFiles { cert: "server.pem".into(), key: "server.key".into(), client_ca: None };
/// assert!(t.client_ca.is_none()); // no client certificate asked for
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsFiles {
    /// The certificate chain (PEM), the server's first.
    pub cert: PathBuf,
    /// Its private key (PEM: PKCS#8, PKCS#1 or SEC1).
    pub key: PathBuf,
    /// With it, a client must present a certificate this CA (PEM) signed.
    pub client_ca: Option<PathBuf>,
}

/// One listener's TLS configuration in force, and the bytes it was built from.
#[derive(Debug)]
pub(crate) struct TlsState {
    files: TlsFiles,
    alpn: Vec<Vec<u8>>,
    config: ArcSwap<ServerConfig>,
    loaded: Mutex<Vec<Vec<u8>>>,
}

impl TlsState {
    /// Loads `files` (an error names the file at fault); `alpn` is the protocol
    /// the listener speaks (`h2` for gRPC, `http/1.1` for the HTTP ones).
    pub(crate) fn load(files: TlsFiles, alpn: &[&[u8]]) -> Result<TlsState, String> {
        let alpn: Vec<Vec<u8>> = alpn.iter().map(|p| p.to_vec()).collect();
        let bytes = read_all(&files)?;
        let config = build(&files, &bytes, &alpn)?;
        Ok(TlsState {
            files,
            alpn,
            config: ArcSwap::from_pointee(config),
            loaded: Mutex::new(bytes),
        })
    }

    /// Reads the files again and, if they changed and load, puts them in force.
    /// `Ok(true)`: a new configuration is in force.
    pub(crate) fn reload(&self) -> Result<bool, String> {
        let bytes = read_all(&self.files)?;
        let mut loaded = self.loaded.lock().unwrap_or_else(|p| p.into_inner());
        if *loaded == bytes {
            return Ok(false);
        }
        let config = build(&self.files, &bytes, &self.alpn)?;
        self.config.store(Arc::new(config));
        *loaded = bytes;
        Ok(true)
    }

    /// The files, for a log line.
    pub(crate) fn cert_path(&self) -> &std::path::Path {
        &self.files.cert
    }

    fn acceptor(&self) -> tokio_rustls::TlsAcceptor {
        tokio_rustls::TlsAcceptor::from(self.config.load_full())
    }
}

fn read_all(files: &TlsFiles) -> Result<Vec<Vec<u8>>, String> {
    let read = |p: &PathBuf| std::fs::read(p).map_err(|e| format!("{}: {e}", p.display()));
    let mut out = vec![read(&files.cert)?, read(&files.key)?];
    if let Some(ca) = &files.client_ca {
        out.push(read(ca)?);
    }
    Ok(out)
}

fn build(files: &TlsFiles, bytes: &[Vec<u8>], alpn: &[Vec<u8>]) -> Result<ServerConfig, String> {
    let at = |p: &PathBuf, e: &dyn std::fmt::Display| format!("{}: {e}", p.display());
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(&bytes[0])
        .collect::<Result<_, _>>()
        .map_err(|e| at(&files.cert, &e))?;
    if certs.is_empty() {
        return Err(at(&files.cert, &"no PEM certificate in the file"));
    }
    let key = PrivateKeyDer::from_pem_slice(&bytes[1]).map_err(|e| at(&files.key, &e))?;
    // The one provider of this build, named rather than taken from a process
    // default: the Redis tier's (ring).
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?;
    let builder = match (&files.client_ca, bytes.get(2)) {
        (Some(path), Some(ca)) => {
            let mut roots = RootCertStore::empty();
            for c in CertificateDer::pem_slice_iter(ca) {
                roots
                    .add(c.map_err(|e| at(path, &e))?)
                    .map_err(|e| at(path, &e))?;
            }
            if roots.is_empty() {
                return Err(at(path, &"no PEM certificate in the file"));
            }
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
                .build()
                .map_err(|e| at(path, &e))?;
            builder.with_client_cert_verifier(verifier)
        }
        _ => builder.with_no_client_auth(),
    };
    let mut config = builder
        .with_single_cert(certs, key)
        .map_err(|e| at(&files.key, &e))?;
    config.alpn_protocols = alpn.to_vec();
    Ok(config)
}

/// A connection a listener accepted: plain TCP, or TLS over it.
pub(crate) enum Conn {
    Plain(TcpStream),
    Tls(Box<tokio_rustls::server::TlsStream<TcpStream>>),
}

impl AsyncRead for Conn {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Conn::Plain(s) => Pin::new(s).poll_read(cx, buf),
            Conn::Tls(s) => Pin::new(s).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Conn {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Conn::Plain(s) => Pin::new(s).poll_write(cx, buf),
            Conn::Tls(s) => Pin::new(s).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Conn::Plain(s) => Pin::new(s).poll_flush(cx),
            Conn::Tls(s) => Pin::new(s).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Conn::Plain(s) => Pin::new(s).poll_shutdown(cx),
            Conn::Tls(s) => Pin::new(s).poll_shutdown(cx),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Conn::Plain(s) => Pin::new(s).poll_write_vectored(cx, bufs),
            Conn::Tls(s) => Pin::new(s).poll_write_vectored(cx, bufs),
        }
    }

    fn is_write_vectored(&self) -> bool {
        match self {
            Conn::Plain(s) => s.is_write_vectored(),
            Conn::Tls(s) => s.is_write_vectored(),
        }
    }
}

/// What tonic asks of a connection: where it came from.
#[derive(Debug, Clone, Copy)]
pub(crate) struct PeerAddr(#[allow(dead_code)] pub Option<SocketAddr>);

impl tonic::transport::server::Connected for Conn {
    type ConnectInfo = PeerAddr;
    fn connect_info(&self) -> PeerAddr {
        let tcp = match self {
            Conn::Plain(s) => s,
            Conn::Tls(s) => s.get_ref().0,
        };
        PeerAddr(tcp.peer_addr().ok())
    }
}

/// Accepts on `listener` until `stop`, handing each connection (TLS
/// handshake done, if `tls`) to `tx`. A failed handshake (no client
/// certificate under mTLS, an untrusted one, a client that stalls) closes that
/// connection alone, logged at debug level.
pub(crate) async fn accept_loop(
    listener: TcpListener,
    tls: Option<Arc<TlsState>>,
    tx: mpsc::Sender<(Conn, SocketAddr)>,
    mut stop: watch::Receiver<bool>,
) {
    loop {
        let (tcp, peer) = tokio::select! {
            r = listener.accept() => match r {
                Ok(c) => c,
                Err(e) => {
                    // Out of descriptors and the like: pause rather than spin.
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            _ = async { let _ = stop.wait_for(|s| *s).await; } => return,
        };
        let _ = tcp.set_nodelay(true);
        match &tls {
            None => {
                if tx.send((Conn::Plain(tcp), peer)).await.is_err() {
                    return;
                }
            }
            Some(tls) => {
                let acceptor = tls.acceptor();
                let tx = tx.clone();
                tokio::spawn(async move {
                    match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await {
                        Ok(Ok(s)) => {
                            let _ = tx.send((Conn::Tls(Box::new(s)), peer)).await;
                        }
                        Ok(Err(e)) => tracing::debug!(%peer, error = %e, "TLS handshake failed"),
                        Err(_) => tracing::debug!(%peer, "TLS handshake timed out"),
                    }
                });
            }
        }
    }
}

/// The connections of an [`accept_loop`], as axum's listener.
pub(crate) struct ChannelListener {
    pub rx: mpsc::Receiver<(Conn, SocketAddr)>,
    pub local: SocketAddr,
}

impl axum::serve::Listener for ChannelListener {
    type Io = Conn;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Conn, SocketAddr) {
        match self.rx.recv().await {
            Some(c) => c,
            // The accept loop ended (shutdown): no more connections, ever.
            None => std::future::pending().await,
        }
    }

    fn local_addr(&self) -> io::Result<SocketAddr> {
        Ok(self.local)
    }
}
