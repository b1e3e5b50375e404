//! A tower [`Layer`] that checks every request against a [`Policy`] (feature
//! `tower`).
//!
//! Attributes: `ip` (the client: the socket peer from axum's `ConnectInfo`, or a
//! `SocketAddr` extension; behind trusted proxies, the first untrusted hop of
//! `X-Forwarded-For` read from the right), `path`, `method`, `host` (the `Host`
//! header, else the URI's), `header:<name>`, and any the application puts in an
//! [`ExtraAttrs`] request extension. A denial answers `429 Too Many Requests` with
//! `Retry-After`, `RateLimit-Policy` and `RateLimit` (one item per enforcing rule)
//! and an `application/problem+json` body; an admitted request gets the two
//! `RateLimit` fields on its response, and waits first if a shaper rule asked.

use std::fmt::Write as _;
use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::extract::ConnectInfo;
use http::header::{CONTENT_TYPE, HOST, HeaderName, HeaderValue, RETRY_AFTER};
use http::{Request, Response, StatusCode};
use tower_layer::Layer;
use tower_service::Service;

use crate::attrs::Attrs;
use crate::cond::{Cidr, parse_ip};
use crate::{Decision, Policy};

/// Attributes the application adds to a request (e.g. `tenant` from an earlier
/// authentication layer), as a request extension the policy layer reads.
///
/// ```
/// use sluicegate_policy::ExtraAttrs;
/// let mut req = http::Request::new(());
/// req.extensions_mut().insert(ExtraAttrs(vec![("tenant".into(), "acme".into())]));
/// assert_eq!(req.extensions().get::<ExtraAttrs>().unwrap().0[0].1, "acme");
/// ```
#[derive(Clone, Debug, Default)]
pub struct ExtraAttrs(pub Vec<(String, String)>);

/// The policy layer; see the module docs.
///
/// ```
/// use std::sync::Arc;
/// use sluicegate_policy::{Policy, PolicyLayer};
/// let policy = Arc::new(Policy::from_toml("[[rule]]\nname = \"a\"\nkey = [\"ip\"]\nlimit = \"5/s\"\n")?);
/// let layer = PolicyLayer::new(policy).trusted_proxies(["10.0.0.0/8", "::1"]).unwrap();
/// let app: axum::Router = axum::Router::new()
///     .route("/", axum::routing::get(|| async { "hello" }))
///     .layer(layer);
/// # let _ = app;
/// # Ok::<(), sluicegate_policy::Error>(())
/// ```
#[derive(Clone, Debug)]
pub struct PolicyLayer {
    policy: Arc<Policy>,
    trusted: Arc<[Cidr]>,
}

impl PolicyLayer {
    /// Checks requests against `policy`; no proxy is trusted (`ip` is the peer).
    ///
    /// ```
    /// # use std::sync::Arc;
    /// # use sluicegate_policy::{Policy, PolicyLayer};
    /// let layer = PolicyLayer::new(Arc::new(Policy::from_toml("")?));
    /// # let _ = layer;
    /// # Ok::<(), sluicegate_policy::Error>(())
    /// ```
    pub fn new(policy: Arc<Policy>) -> PolicyLayer {
        PolicyLayer {
            policy,
            trusted: Arc::from([]),
        }
    }

    /// Proxies (addresses or CIDR blocks) whose `X-Forwarded-For` is believed.
    ///
    /// ```
    /// # use std::sync::Arc;
    /// # use sluicegate_policy::{Policy, PolicyLayer};
    /// let layer = PolicyLayer::new(Arc::new(Policy::from_toml("")?));
    /// assert!(layer.clone().trusted_proxies(["10.0.0.0/8"]).is_ok());
    /// assert!(layer.trusted_proxies(["10.0.0.1/8"]).unwrap_err().contains("after the /8"));
    /// # Ok::<(), sluicegate_policy::Error>(())
    /// ```
    pub fn trusted_proxies<I, S>(mut self, proxies: I) -> Result<PolicyLayer, String>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let all: Result<Vec<Cidr>, String> = proxies
            .into_iter()
            .map(|p| Cidr::parse(p.as_ref()))
            .collect();
        self.trusted = all?.into();
        Ok(self)
    }
}

impl<S> Layer<S> for PolicyLayer {
    type Service = PolicyService<S>;
    fn layer(&self, inner: S) -> PolicyService<S> {
        PolicyService {
            inner,
            layer: self.clone(),
        }
    }
}

/// The service [`PolicyLayer`] wraps around an inner one.
///
/// ```
/// use std::sync::Arc;
/// use sluicegate_policy::{Policy, PolicyLayer, PolicyService};
/// use tower_layer::Layer;
/// let layer = PolicyLayer::new(Arc::new(Policy::from_toml("")?));
/// let svc: PolicyService<()> = layer.layer(());
/// # let _ = svc;
/// # Ok::<(), sluicegate_policy::Error>(())
/// ```
#[derive(Clone, Debug)]
pub struct PolicyService<S> {
    inner: S,
    layer: PolicyLayer,
}

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

impl<S, B, RB> Service<Request<B>> for PolicyService<S>
where
    S: Service<Request<B>, Response = Response<RB>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
    B: Send + 'static,
    RB: From<String> + Send + 'static,
{
    type Response = Response<RB>;
    type Error = S::Error;
    type Future = BoxFuture<Result<Response<RB>, S::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<B>) -> Self::Future {
        let ip = client_ip(&req, &self.layer.trusted);
        let mut ip_text = IpText::default();
        if let Some(ip) = ip {
            let _ = write!(ip_text, "{ip}");
        }
        let attrs = HttpAttrs {
            req: &req,
            ip: ip.map(|_| ip_text.as_str()),
        };
        let d = self.layer.policy.check(&attrs);
        if !d.allowed() {
            return Box::pin(std::future::ready(Ok(too_many(&d))));
        }
        let fields = [
            (
                HeaderName::from_static("ratelimit-policy"),
                d.ratelimit_policy_header(),
            ),
            (HeaderName::from_static("ratelimit"), d.ratelimit_header()),
        ];
        let delay = d.delay_ns();
        // The clone is not known to be ready; the original is: call that one.
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        Box::pin(async move {
            if delay > 0 {
                tokio::time::sleep(Duration::from_nanos(delay)).await;
            }
            let mut resp = inner.call(req).await?;
            for (name, value) in fields {
                if let Ok(v) = HeaderValue::try_from(value) {
                    if !v.is_empty() {
                        resp.headers_mut().insert(name, v);
                    }
                }
            }
            Ok(resp)
        })
    }
}

/// The request's attributes, read where they are.
struct HttpAttrs<'a, B> {
    req: &'a Request<B>,
    ip: Option<&'a str>,
}

impl<B> Attrs for HttpAttrs<'_, B> {
    fn get(&self, name: &str) -> Option<&str> {
        match name {
            "ip" => self.ip,
            "path" => Some(self.req.uri().path()),
            "method" => Some(self.req.method().as_str()),
            "host" => self
                .req
                .headers()
                .get(HOST)
                .and_then(|h| h.to_str().ok())
                .or_else(|| self.req.uri().host()),
            _ => match name.strip_prefix("header:") {
                Some(h) => self.req.headers().get(h).and_then(|v| v.to_str().ok()),
                None => self
                    .req
                    .extensions()
                    .get::<ExtraAttrs>()
                    .and_then(|e| Attrs::get(e.0.as_slice(), name)),
            },
        }
    }
}

/// The client: the peer, or behind trusted proxies the rightmost untrusted hop.
fn client_ip<B>(req: &Request<B>, trusted: &[Cidr]) -> Option<IpAddr> {
    let peer = req
        .extensions()
        .get::<ConnectInfo<SocketAddr>>()
        .map(|c| c.0)
        .or_else(|| req.extensions().get::<SocketAddr>().copied())?
        .ip();
    let is_trusted = |ip: &IpAddr| trusted.iter().any(|c| c.contains(ip));
    if !is_trusted(&peer) {
        return Some(peer);
    }
    let mut client = peer;
    let hops = req
        .headers()
        .get_all("x-forwarded-for")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .collect::<Vec<_>>();
    for hop in hops.iter().rev().flat_map(|v| v.rsplit(',')) {
        match parse_ip(hop.trim()) {
            Some(ip) if is_trusted(&ip) => client = ip,
            Some(ip) => return Some(ip),
            // A malformed hop: stop at the last address we could trust.
            None => return Some(client),
        }
    }
    Some(client)
}

fn too_many<RB: From<String>>(d: &Decision) -> Response<RB> {
    let secs = d.retry_after_secs();
    let mut rules = String::new();
    for (i, r) in d.denying().enumerate() {
        if i > 0 {
            rules.push(',');
        }
        json_string(&mut rules, r.name);
    }
    let body = format!(
        "{{\"type\":\"about:blank\",\"title\":\"Too Many Requests\",\"status\":429,\
         \"detail\":\"rate limit exceeded; retry in {secs} s\",\"retry_after\":{secs},\"rules\":[{rules}]}}"
    );
    let mut resp = Response::new(RB::from(body));
    *resp.status_mut() = StatusCode::TOO_MANY_REQUESTS;
    let h = resp.headers_mut();
    h.insert(
        CONTENT_TYPE,
        HeaderValue::from_static("application/problem+json"),
    );
    h.insert(RETRY_AFTER, HeaderValue::from(secs));
    for (name, value) in [
        ("ratelimit-policy", d.ratelimit_policy_header()),
        ("ratelimit", d.ratelimit_header()),
    ] {
        if let Ok(v) = HeaderValue::try_from(value) {
            h.insert(HeaderName::from_static(name), v);
        }
    }
    resp
}

fn json_string(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if u32::from(c) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", u32::from(c));
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

/// An address as text on the stack (the longest, an IPv4-mapped IPv6, is 45 bytes).
struct IpText {
    buf: [u8; 48],
    len: usize,
}

impl Default for IpText {
    fn default() -> Self {
        IpText {
            buf: [0; 48],
            len: 0,
        }
    }
}

impl IpText {
    fn as_str(&self) -> &str {
        std::str::from_utf8(&self.buf[..self.len]).unwrap_or("")
    }
}

impl std::fmt::Write for IpText {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        let end = self.len + s.len();
        let dst = self.buf.get_mut(self.len..end).ok_or(std::fmt::Error)?;
        dst.copy_from_slice(s.as_bytes());
        self.len = end;
        Ok(())
    }
}
