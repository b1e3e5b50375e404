//! The admin API (`--admin ADDR:PORT`): JSON over HTTP on a listener of its
//! own, over the rule store the server serves (`--store`), and the admin page
//! at `/admin/`. Routes, status codes and bodies are documented in the
//! server's README; in short:
//!
//! * every `/admin/v1/` request carries `Authorization: Bearer <token>`
//!   ([`Tokens`]): none or a wrong one is 401, a `read` token writing 403;
//! * a record's version is its `ETag` (`"<version>"`); PUT on an absent rule
//!   creates it (201), replacing or deleting needs `If-Match` (428 without,
//!   412 when stale);
//! * errors are `{"errors": [{"field", "message", "line", "column"}]}`;
//! * a GET never writes; bodies are bounded ([`MAX_BODY`], 413), a malformed
//!   one is 400, an invalid rule 422 naming the field;
//! * passwords in a `[redis]` URL are shown as `***` in every response.

mod json;
mod page;
mod tokens;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::SystemTime;

use axum::body::Body;
use axum::extract::{Path, RawQuery, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use serde_json::{json, Value};
use sluicegate_policy::store::{Cursor, Domain, Meta, Store, StoreError, StoredRule};
use sluicegate_policy::{Mode, PolicyDef};
use tokio_stream::StreamExt as _;

use crate::rule_set::DomainRules;
use crate::service::Shared;
use crate::store_domains::StoreState;
use crate::tls::TlsFiles;
use json::ApiError;
pub use tokens::{Principal, Role, Tokens, MIN_TOKEN_LEN};

/// The largest request body the admin API reads (a rule, a domain's settings,
/// a whole domain's TOML to validate); larger is 413.
///
/// ```
/// assert_eq!(sluicegate_server::admin::MAX_BODY, 1 << 20);
/// ```
pub const MAX_BODY: usize = 1 << 20;

/// Audit entries a page holds when the request does not say (`limit=`; at most
/// the store's `MAX_AUDIT_PAGE`).
///
/// ```
/// assert!(sluicegate_server::admin::DEFAULT_AUDIT_PAGE <= sluicegate_policy::store::MAX_AUDIT_PAGE);
/// ```
pub const DEFAULT_AUDIT_PAGE: usize = 100;

/// The admin listener: `--admin`, `--admin-tokens` and its TLS.
///
/// ```
/// let a = sluicegate_server::AdminConfig { addr: "127.0.0.1:9090".parse()?, tokens: "/etc/sluicegate/tokens".into(), tls: None };
/// assert!(a.addr.ip().is_loopback());
/// # Ok::<(), std::net::AddrParseError>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AdminConfig {
    /// Where it listens (`--admin PORT` alone is 127.0.0.1:PORT).
    pub addr: SocketAddr,
    /// The token file (there are no default credentials: without one the
    /// listener does not start).
    pub tokens: PathBuf,
    /// TLS on the admin listener.
    pub tls: Option<TlsFiles>,
}

/// What the admin handlers share.
#[derive(Clone)]
pub(crate) struct Admin {
    pub shared: Arc<Shared>,
    pub store: Arc<StoreState>,
    pub tokens: Arc<Tokens>,
    pub started: SystemTime,
}

/// The admin listener's routes: the API and the page.
pub(crate) fn router(admin: Admin) -> Router {
    let api = Router::new()
        .route("/admin/v1/domains", get(domains))
        .route("/admin/v1/domains/{domain}/rules", get(rules))
        .route(
            "/admin/v1/domains/{domain}/rules/{name}",
            get(get_rule).put(put_rule).delete(delete_rule),
        )
        .route(
            "/admin/v1/domains/{domain}/defaults",
            get(get_defaults).put(put_defaults),
        )
        .route("/admin/v1/domains/{domain}/validate", post(validate))
        .route("/admin/v1/domains/{domain}/explain", get(explain))
        .route("/admin/v1/domains/{domain}/stats", get(stats))
        .route("/admin/v1/audit", get(audit))
        .fallback(|| async { ApiError::new(StatusCode::NOT_FOUND, None, "no such admin route") })
        .with_state(admin);
    page::routes().merge(api)
}

impl Admin {
    /// The principal of the request's bearer token, allowed to write if `write`.
    fn auth(&self, headers: &HeaderMap, write: bool) -> Result<Principal, ApiError> {
        let presented = headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| {
                let (scheme, token) = v.split_once(' ')?;
                scheme.eq_ignore_ascii_case("bearer").then(|| token.trim())
            });
        let Some(presented) = presented else {
            return Err(ApiError::unauthorized(
                "an `Authorization: Bearer <token>` header is required",
            ));
        };
        let Some(p) = self.tokens.find(presented) else {
            return Err(ApiError::unauthorized(
                "the token is not one of the admin tokens",
            ));
        };
        if write && p.role != Role::Write {
            return Err(ApiError::new(
                StatusCode::FORBIDDEN,
                None,
                format!("the token `{}` may read, not write", p.name),
            ));
        }
        Ok(p)
    }

    fn store(&self) -> Result<Store, ApiError> {
        self.store.store().map_err(ApiError::store)
    }
}

/// Runs a store call off the runtime's threads (the store's calls block).
async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, ApiError> + Send + 'static,
) -> Result<T, ApiError> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, None, e.to_string()))?
}

/// Reads a request body of at most [`MAX_BODY`] bytes.
async fn read_body(headers: &HeaderMap, body: Body) -> Result<Vec<u8>, ApiError> {
    let too_large = || {
        ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            None,
            format!("the body is larger than {MAX_BODY} bytes"),
        )
    };
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > MAX_BODY as u64) {
        return Err(too_large());
    }
    let mut out = Vec::new();
    let mut stream = body.into_data_stream();
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.map_err(|e| ApiError::bad_request(format!("reading the body: {e}")))?;
        if out.len() + chunk.len() > MAX_BODY {
            return Err(too_large());
        }
        out.extend_from_slice(&chunk);
    }
    Ok(out)
}

/// `If-Match: "<version>"` (`None`: absent). Anything else is 400: `*` would
/// overwrite whatever is there, which is what versions are here to prevent.
fn if_match(headers: &HeaderMap) -> Result<Option<u64>, ApiError> {
    let Some(v) = headers.get(header::IF_MATCH) else {
        return Ok(None);
    };
    let v = v.to_str().unwrap_or("").trim();
    let bare = v.strip_prefix("W/").unwrap_or(v);
    bare.trim_matches('"').parse().map(Some).map_err(|_| {
        ApiError::bad_request(format!(
            "If-Match must be one version as the ETag gives it (\"<version>\"), not `{v}`"
        ))
    })
}

fn etag(version: u64) -> (header::HeaderName, String) {
    (header::ETAG, format!("\"{version}\""))
}

/// A JSON response.
fn reply(status: StatusCode, body: Value, etag_of: Option<u64>) -> Response {
    let mut r = (status, json::to_body(&body)).into_response();
    let h = r.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    json::common_headers(h);
    if let Some(v) = etag_of {
        let (name, value) = etag(v);
        if let Ok(value) = HeaderValue::from_str(&value) {
            h.insert(name, value);
        }
    }
    r
}

async fn domains(State(a): State<Admin>, headers: HeaderMap) -> Result<Response, ApiError> {
    a.auth(&headers, false)?;
    let store = a.store()?;
    let list = blocking(move || {
        let names = store.domains().map_err(ApiError::store)?;
        names
            .into_iter()
            .map(|n| {
                let v = store.version(&n).map_err(ApiError::store)?;
                Ok((n, v))
            })
            .collect::<Result<Vec<_>, ApiError>>()
    })
    .await?;
    let rules = a.shared.rules();
    let out: Vec<Value> = list
        .into_iter()
        .map(|(name, version)| {
            let served = matches!(rules.domain(&name), Some(DomainRules::Store(_)));
            json!({"name": name, "version": version, "served": served})
        })
        .collect();
    Ok(reply(StatusCode::OK, json!({ "domains": out }), None))
}

/// The domain, or 404.
fn read_domain(store: &Store, domain: &str) -> Result<Domain, ApiError> {
    store
        .domain(domain)
        .map_err(ApiError::store)?
        .ok_or_else(|| ApiError::not_found(format!("no domain `{domain}` in the store")))
}

async fn rules(
    State(a): State<Admin>,
    Path(domain): Path<String>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    a.auth(&headers, false)?;
    let store = a.store()?;
    let d = blocking(move || read_domain(&store, &domain)).await?;
    let rules: Vec<Value> = d.rules.iter().map(json::rule).collect();
    let body = json!({"domain": d.name, "version": d.version, "rules": rules});
    Ok(reply(StatusCode::OK, body, Some(d.version)))
}

async fn get_rule(
    State(a): State<Admin>,
    Path((domain, name)): Path<(String, String)>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    a.auth(&headers, false)?;
    let store = a.store()?;
    let r = blocking(move || {
        store
            .rule(&domain, &name)
            .map_err(ApiError::store)?
            .ok_or_else(|| ApiError::not_found(format!("no rule `{name}` in domain `{domain}`")))
    })
    .await?;
    Ok(reply(StatusCode::OK, json::rule(&r), Some(r.meta.version)))
}

async fn put_rule(
    State(a): State<Admin>,
    Path((domain, name)): Path<(String, String)>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let who = a.auth(&headers, true)?;
    let expected = if_match(&headers)?;
    let bytes = read_body(&headers, body).await?;
    json::check_json_type(&headers)?;
    let (rule, position) = json::parse_rule(&bytes, Some(&name))?;
    let store = a.store()?;
    let (created, stored) = blocking(move || match expected {
        None => {
            if let Some(r) = store.rule(&domain, &name).map_err(ApiError::store)? {
                return Err(ApiError::precondition_required(&name, r.meta.version));
            }
            let r = store
                .create_rule(&domain, rule, position, &who.name)
                .map_err(ApiError::store)?;
            Ok((true, r))
        }
        Some(v) => {
            let r = store
                .replace_rule(&domain, rule, position, v, &who.name)
                .map_err(ApiError::store)?;
            Ok((false, r))
        }
    })
    .await?;
    let status = if created {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    Ok(reply(
        status,
        json::rule(&stored),
        Some(stored.meta.version),
    ))
}

async fn delete_rule(
    State(a): State<Admin>,
    Path((domain, name)): Path<(String, String)>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let who = a.auth(&headers, true)?;
    let expected = if_match(&headers)?;
    let store = a.store()?;
    blocking(move || {
        let Some(v) = expected else {
            return match store.rule(&domain, &name).map_err(ApiError::store)? {
                Some(r) => Err(ApiError::precondition_required(&name, r.meta.version)),
                None => Err(ApiError::not_found(format!(
                    "no rule `{name}` in domain `{domain}`"
                ))),
            };
        };
        store
            .delete_rule(&domain, &name, v, &who.name)
            .map_err(ApiError::store)
    })
    .await?;
    let mut r = StatusCode::NO_CONTENT.into_response();
    json::common_headers(r.headers_mut());
    Ok(r)
}

async fn get_defaults(
    State(a): State<Admin>,
    Path(domain): Path<String>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    a.auth(&headers, false)?;
    let store = a.store()?;
    let s = blocking(move || {
        store
            .settings(&domain)
            .map_err(ApiError::store)?
            .ok_or_else(|| ApiError::not_found(format!("no domain `{domain}` in the store")))
    })
    .await?;
    Ok(reply(
        StatusCode::OK,
        json::settings(&s),
        Some(s.meta.version),
    ))
}

async fn put_defaults(
    State(a): State<Admin>,
    Path(domain): Path<String>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let who = a.auth(&headers, true)?;
    let expected = if_match(&headers)?;
    let bytes = read_body(&headers, body).await?;
    json::check_json_type(&headers)?;
    let mut settings = json::parse_settings(&bytes)?;
    let store = a.store()?;
    let (created, stored) = blocking(move || {
        let current = store.settings(&domain).map_err(ApiError::store)?;
        // A `[redis]` URL sent back as it was shown (password `***`) keeps
        // the password stored.
        json::keep_redacted_password(&mut settings, current.as_ref().map(|c| &c.settings));
        match (expected, current) {
            (None, Some(c)) => Err(ApiError::precondition_required("defaults", c.meta.version)),
            (None, None) => Ok((
                true,
                store
                    .put_settings(&domain, settings, None, &who.name)
                    .map_err(ApiError::store)?,
            )),
            (Some(v), _) => Ok((
                false,
                store
                    .put_settings(&domain, settings, Some(v), &who.name)
                    .map_err(ApiError::store)?,
            )),
        }
    })
    .await?;
    let status = if created {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    Ok(reply(
        status,
        json::settings(&stored),
        Some(stored.meta.version),
    ))
}

async fn validate(
    State(a): State<Admin>,
    Path(domain): Path<String>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let who = a.auth(&headers, false)?;
    let toml = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.trim().starts_with("application/toml"));
    if !toml {
        json::check_json_type(&headers)?;
    }
    let bytes = read_body(&headers, body).await?;
    let warnings = if toml {
        let text = String::from_utf8(bytes)
            .map_err(|_| ApiError::bad_request("the TOML text is not UTF-8"))?;
        let file = format!("{domain}.toml");
        let def = PolicyDef::parse(&text, Some(&file)).map_err(|e| ApiError::invalid(&e))?;
        def.warnings().to_vec()
    } else {
        let (rule, position) = json::parse_rule(&bytes, None)?;
        let store = a.store()?;
        blocking(move || {
            let now = SystemTime::now();
            let mut d = match store.domain(&domain).map_err(ApiError::store)? {
                Some(d) => d,
                None => Domain {
                    name: domain.clone(),
                    version: 0,
                    settings: sluicegate_policy::store::StoredSettings {
                        settings: Default::default(),
                        meta: Meta {
                            version: 0,
                            created_at: now,
                            updated_at: now,
                            updated_by: who.name.clone(),
                        },
                    },
                    rules: Vec::new(),
                },
            };
            let old = d.rules.iter().position(|r| r.rule.name == rule.name);
            let last = d
                .rules
                .iter()
                .map(|r| r.position)
                .max()
                .map_or(0, |p| p.saturating_add(1));
            let position = position
                .or_else(|| old.map(|i| d.rules[i].position))
                .unwrap_or(last);
            if let Some(i) = old {
                d.rules.remove(i);
            }
            d.rules.push(StoredRule {
                rule,
                position,
                meta: Meta {
                    version: 0,
                    created_at: now,
                    updated_at: now,
                    updated_by: who.name,
                },
            });
            d.rules
                .sort_by(|a, b| (a.position, &a.rule.name).cmp(&(b.position, &b.rule.name)));
            let def = d.to_def().map_err(|e| ApiError::invalid(&e))?;
            Ok(def.warnings().to_vec())
        })
        .await?
    };
    let warnings: Vec<Value> = warnings.iter().map(json::diagnostic).collect();
    Ok(reply(
        StatusCode::OK,
        json!({"valid": true, "warnings": warnings}),
        None,
    ))
}

/// The TOML policy deciding `domain` in this process, or 404.
fn policy_of(a: &Admin, domain: &str) -> Result<Arc<crate::toml_domain::TomlDomain>, ApiError> {
    match a.shared.rules().domain(domain) {
        Some(DomainRules::Store(t) | DomainRules::Toml(t)) => Ok(t.clone()),
        Some(DomainRules::Yaml(_)) => Err(ApiError::not_found(format!(
            "domain `{domain}` is an envoyproxy/ratelimit YAML domain: explain and stats cover policy domains"
        ))),
        None => Err(ApiError::not_found(format!(
            "this server does not serve domain `{domain}` (yet: a new store domain is served within a second)"
        ))),
    }
}

async fn explain(
    State(a): State<Admin>,
    Path(domain): Path<String>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    a.auth(&headers, false)?;
    let attrs = json::query_pairs(query.as_deref().unwrap_or(""))?;
    let t = policy_of(&a, &domain)?;
    let policy = t.policy();
    let now = policy.peek_n_async(&attrs, 0).await;
    let one = policy.peek_n_async(&attrs, 1).await;
    let rules: Vec<Value> = now
        .rules()
        .zip(one.rules())
        .map(|(r, next)| {
            json!({
                "name": r.name,
                "mode": if r.mode == Mode::Shadow { "shadow" } else { "enforce" },
                "key": r.key_text(&attrs),
                "remaining": r.remaining,
                "limit": r.limit,
                "window_seconds": r.window_ns as f64 / 1e9,
                "allowed": next.allowed,
                "backend_error": r.backend_error || next.backend_error,
            })
        })
        .collect();
    let attributes: serde_json::Map<String, Value> = attrs
        .iter()
        .map(|(k, v)| (k.clone(), Value::String(v.clone())))
        .collect();
    let body = json!({
        "domain": domain,
        "attributes": attributes,
        "allowed": one.allowed(),
        "rules": rules,
    });
    Ok(reply(StatusCode::OK, body, None))
}

async fn stats(
    State(a): State<Admin>,
    Path(domain): Path<String>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    a.auth(&headers, false)?;
    let t = policy_of(&a, &domain)?;
    let rules: Vec<Value> = t
        .hits()
        .into_iter()
        .map(|h| {
            let [allowed, denied, shadow_denied] = h.counts;
            json!({
                "name": h.name,
                "mode": if h.shadow { "shadow" } else { "enforce" },
                "allowed": allowed,
                "denied": denied,
                "shadow_denied": shadow_denied,
            })
        })
        .collect();
    let body = json!({
        "domain": domain,
        "scope": "process",
        "pid": std::process::id(),
        "started_at": json::rfc3339(a.started),
        "at_ms": json::unix_ms(SystemTime::now()),
        "rules": rules,
    });
    Ok(reply(StatusCode::OK, body, None))
}

async fn audit(
    State(a): State<Admin>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    a.auth(&headers, false)?;
    let (mut limit, mut after, mut domain) = (DEFAULT_AUDIT_PAGE, None, None);
    for (k, v) in json::query_pairs(query.as_deref().unwrap_or(""))? {
        match k.as_str() {
            "limit" => {
                limit = v.parse().ok().filter(|n| *n > 0).ok_or_else(|| {
                    ApiError::bad_request(format!("limit `{v}` is not a positive number"))
                })?;
            }
            "after" => {
                after = Some(v.parse::<Cursor>().map_err(ApiError::bad_request)?);
            }
            "domain" => domain = Some(v),
            other => {
                return Err(ApiError::bad_request(format!(
                    "unknown parameter `{other}`: limit, after, domain"
                )))
            }
        }
    }
    let store = a.store()?;
    let page = blocking(move || {
        store
            .audit(domain.as_deref(), after, limit)
            .map_err(ApiError::store)
    })
    .await?;
    let entries: Vec<Value> = page.entries.iter().map(json::audit_entry).collect();
    let next = page.next.map(|c| c.to_string());
    Ok(reply(
        StatusCode::OK,
        json!({"entries": entries, "next": next}),
        None,
    ))
}

/// Why an admin store call failed, as a status.
impl ApiError {
    fn store(e: StoreError) -> ApiError {
        match &e {
            StoreError::Invalid(err) => ApiError::invalid(err),
            StoreError::Stale { current, given } => ApiError::new(
                StatusCode::PRECONDITION_FAILED,
                None,
                match current {
                    Some(c) => format!(
                        "version {given} is stale: the record is at version {c}; read it again"
                    ),
                    None => format!("version {given} is stale: the record no longer exists"),
                },
            ),
            StoreError::Exists { current } => ApiError::new(
                StatusCode::PRECONDITION_FAILED,
                None,
                format!(
                    "the record was made meanwhile (version {current}); read it and send If-Match"
                ),
            ),
            StoreError::NotFound(_) => ApiError::not_found(e.to_string()),
            StoreError::Unavailable { .. } => {
                ApiError::new(StatusCode::SERVICE_UNAVAILABLE, None, e.to_string())
            }
            _ => ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, None, e.to_string()),
        }
    }
}
