//! The admin API's JSON: records out (a rule as its TOML fields plus
//! `position`, `version`, `created_at`, `updated_at`, `updated_by`; a domain's
//! settings with any password in its `[redis]` URL as `***`), rules and
//! settings in (every error naming its field), and the error body.

use std::time::{SystemTime, UNIX_EPOCH};

use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{json, Map, Value};
use sluicegate_policy::store::{
    redact, AuditEntry, DomainSettings, Record, RuleRecord, StoredRule, StoredSettings,
};
use sluicegate_policy::{Diagnostic, Severity};

/// An admin API error: its status and `{"errors": [{"field", "message",
/// "line", "column"}]}` (line and column for TOML text; `rule` when a finding
/// is about another rule of the domain).
#[derive(Debug)]
pub(crate) struct ApiError {
    status: StatusCode,
    errors: Vec<Value>,
}

impl ApiError {
    /// An error of `status` about `field` (if one).
    pub(crate) fn new(
        status: StatusCode,
        field: Option<&str>,
        message: impl Into<String>,
    ) -> ApiError {
        ApiError {
            status,
            errors: vec![
                json!({"field": field, "message": message.into(), "line": null, "column": null}),
            ],
        }
    }

    pub(crate) fn bad_request(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::BAD_REQUEST, None, message)
    }

    pub(crate) fn not_found(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::NOT_FOUND, None, message)
    }

    pub(crate) fn unauthorized(message: &str) -> ApiError {
        ApiError::new(StatusCode::UNAUTHORIZED, None, message)
    }

    pub(crate) fn unprocessable(field: &str, message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, Some(field), message)
    }

    pub(crate) fn precondition_required(what: &str, version: u64) -> ApiError {
        ApiError::new(
            StatusCode::PRECONDITION_REQUIRED,
            None,
            format!("`{what}` exists (version {version}): send If-Match: \"{version}\" with the version you read"),
        )
    }

    /// 422 with every error finding of a validation.
    pub(crate) fn invalid(e: &sluicegate_policy::Error) -> ApiError {
        let errors = e
            .diagnostics()
            .iter()
            .filter(|d| d.severity == Severity::Error)
            .map(diagnostic)
            .collect();
        ApiError {
            status: StatusCode::UNPROCESSABLE_ENTITY,
            errors,
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = to_body(&json!({ "errors": self.errors }));
        let mut r = (self.status, body).into_response();
        let h = r.headers_mut();
        h.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        common_headers(h);
        if self.status == StatusCode::UNAUTHORIZED {
            h.insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        r
    }
}

/// Headers on every admin response: never cached, never sniffed.
pub(crate) fn common_headers(h: &mut HeaderMap) {
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
}

pub(crate) fn to_body(v: &Value) -> String {
    let mut s = v.to_string();
    s.push('\n');
    s
}

/// A finding: field, message, and line/column for rule-file text (null for
/// records, whose findings name the field instead).
pub(crate) fn diagnostic(d: &Diagnostic) -> Value {
    let located = d.line > 0;
    json!({
        "field": d.field,
        "message": d.message,
        "line": located.then_some(d.line),
        "column": located.then_some(d.column),
        "rule": d.rule,
    })
}

/// Milliseconds since the Unix epoch.
pub(crate) fn unix_ms(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// `t` as RFC 3339 UTC with milliseconds (`2026-12-06T11:30:00.123Z`).
pub(crate) fn rfc3339(t: SystemTime) -> String {
    let ms = unix_ms(t);
    let secs = ms / 1000;
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:03}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60,
        ms % 1000
    )
}

/// A stored rule as the API shows it.
pub(crate) fn rule(r: &StoredRule) -> Value {
    let mut v = serde_json::to_value(&r.rule).unwrap_or_else(|_| json!({}));
    if let Value::Object(m) = &mut v {
        m.insert("position".into(), json!(r.position));
        meta(m, &r.meta);
    }
    v
}

fn meta(m: &mut Map<String, Value>, meta: &sluicegate_policy::store::Meta) {
    m.insert("version".into(), json!(meta.version));
    m.insert("created_at".into(), json!(rfc3339(meta.created_at)));
    m.insert("updated_at".into(), json!(rfc3339(meta.updated_at)));
    m.insert("updated_by".into(), json!(meta.updated_by));
}

/// A domain's settings as the API shows them: the `[redis]` URL's password `***`.
pub(crate) fn settings(s: &StoredSettings) -> Value {
    let mut shown = s.settings.clone();
    if let Some(r) = &mut shown.redis {
        r.url = redact(&r.url);
    }
    let mut v = serde_json::to_value(&shown).unwrap_or_else(|_| json!({}));
    if let Value::Object(m) = &mut v {
        meta(m, &s.meta);
    }
    v
}

/// An audit entry as the API shows it.
pub(crate) fn audit_entry(e: &AuditEntry) -> Value {
    let record = |r: &Option<Record>| match r {
        Some(Record::Rule(r)) => rule(r),
        Some(Record::Settings(s)) => settings(s),
        None => Value::Null,
    };
    json!({
        "cursor": e.cursor.to_string(),
        "at": rfc3339(e.at),
        "by": e.by,
        "action": e.action.name(),
        "domain": e.domain,
        "rule": e.rule,
        "before": record(&e.before),
        "after": record(&e.after),
    })
}

/// A body that says it is not JSON is 415 (none said is taken as JSON).
pub(crate) fn check_json_type(headers: &HeaderMap) -> Result<(), ApiError> {
    let Some(v) = headers.get(header::CONTENT_TYPE) else {
        return Ok(());
    };
    let v = v.to_str().unwrap_or("");
    if v.trim().starts_with("application/json") {
        return Ok(());
    }
    Err(ApiError::new(
        StatusCode::UNSUPPORTED_MEDIA_TYPE,
        None,
        format!("Content-Type `{v}`: send application/json (or application/toml to validate a domain's TOML)"),
    ))
}

/// A JSON object, or 400 naming where the text stops being JSON.
fn object(bytes: &[u8], what: &str) -> Result<Map<String, Value>, ApiError> {
    let v: Value = serde_json::from_slice(bytes).map_err(|e| {
        ApiError::bad_request(format!(
            "malformed JSON at line {}, column {}: {e}",
            e.line(),
            e.column()
        ))
    })?;
    match v {
        Value::Object(m) => Ok(m),
        _ => Err(ApiError::bad_request(format!("{what} is a JSON object"))),
    }
}

/// The fields a record shows besides its own, ignored when sent back.
const SHOWN_ONLY: [&str; 4] = ["version", "created_at", "updated_at", "updated_by"];

/// `T` from `m`; an error names the first field that does not fit.
fn fields<T: serde::de::DeserializeOwned>(
    m: Map<String, Value>,
    base: &[(&str, Value)],
) -> Result<T, ApiError> {
    match serde_json::from_value::<T>(Value::Object(m.clone())) {
        Ok(t) => Ok(t),
        Err(whole) => {
            for (k, v) in &m {
                let mut one: Map<String, Value> = base
                    .iter()
                    .map(|(k, v)| ((*k).to_owned(), v.clone()))
                    .collect();
                one.insert(k.clone(), v.clone());
                if let Err(e) = serde_json::from_value::<T>(Value::Object(one)) {
                    return Err(ApiError::unprocessable(k, format!("{k}: {e}")));
                }
            }
            Err(ApiError::new(
                StatusCode::UNPROCESSABLE_ENTITY,
                None,
                whole.to_string(),
            ))
        }
    }
}

/// A rule from a request body: its TOML fields, and `position` (the fields
/// only shown, `version` and the timestamps, are ignored). `name` is the
/// URL's: the body's, if any, must be the same.
pub(crate) fn parse_rule(
    bytes: &[u8],
    name: Option<&str>,
) -> Result<(RuleRecord, Option<i64>), ApiError> {
    let mut m = object(bytes, "a rule")?;
    for k in SHOWN_ONLY {
        m.remove(k);
    }
    let position = match m.remove("position") {
        None | Some(Value::Null) => None,
        Some(v) => Some(
            v.as_i64()
                .ok_or_else(|| ApiError::unprocessable("position", "position is an integer"))?,
        ),
    };
    match (name, m.get("name")) {
        (Some(n), None) => {
            m.insert("name".into(), json!(n));
        }
        (Some(n), Some(v)) if v.as_str() != Some(n) => {
            return Err(ApiError::unprocessable(
                "name",
                format!("the body's name {v} is not the URL's `{n}`"),
            ));
        }
        (None, None) => return Err(ApiError::unprocessable("name", "a rule needs a name")),
        _ => {}
    }
    let name = m.get("name").cloned().unwrap_or(Value::Null);
    let rule: RuleRecord = fields(m, &[("name", name)])?;
    if rule.name.is_empty() {
        return Err(ApiError::unprocessable(
            "name",
            "a rule's name is not empty",
        ));
    }
    Ok((rule, position))
}

/// A domain's settings (`defaults`, `redis`, `state`) from a request body.
pub(crate) fn parse_settings(bytes: &[u8]) -> Result<DomainSettings, ApiError> {
    let mut m = object(bytes, "a domain's settings")?;
    for k in SHOWN_ONLY {
        m.remove(k);
    }
    fields(m, &[])
}

/// A `[redis]` URL sent back as the API showed it keeps the stored password.
pub(crate) fn keep_redacted_password(new: &mut DomainSettings, current: Option<&DomainSettings>) {
    let (Some(n), Some(c)) = (new.redis.as_mut(), current.and_then(|c| c.redis.as_ref())) else {
        return;
    };
    if n.url != c.url && n.url == redact(&c.url) {
        n.url = c.url.clone();
    }
}

/// A query string's `name=value` pairs, percent-decoded (`+` a space).
pub(crate) fn query_pairs(q: &str) -> Result<Vec<(String, String)>, ApiError> {
    let decode = |s: &str| -> Result<String, ApiError> {
        let bytes = s.as_bytes();
        let mut out = Vec::with_capacity(bytes.len());
        let mut i = 0;
        while i < bytes.len() {
            match bytes[i] {
                b'+' => out.push(b' '),
                b'%' => {
                    let hex = s
                        .get(i + 1..i + 3)
                        .and_then(|h| u8::from_str_radix(h, 16).ok())
                        .ok_or_else(|| {
                            ApiError::bad_request(format!("bad percent-encoding in `{s}`"))
                        })?;
                    out.push(hex);
                    i += 2;
                }
                b => out.push(b),
            }
            i += 1;
        }
        String::from_utf8(out).map_err(|_| ApiError::bad_request(format!("`{s}` is not UTF-8")))
    };
    q.split('&')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            Ok((decode(k)?, decode(v)?))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn times_are_rfc3339() {
        assert_eq!(rfc3339(UNIX_EPOCH), "1970-01-01T00:00:00.000Z");
        let t = UNIX_EPOCH + Duration::from_millis(1_709_210_096_789); // a leap day
        assert_eq!(rfc3339(t), "2024-02-29T12:34:56.789Z");
    }

    #[test]
    fn rules_name_their_bad_field() {
        let e = parse_rule(br#"{"limit": "5/s", "capacity": "many"}"#, Some("a")).unwrap_err();
        assert_eq!(e.status, StatusCode::UNPROCESSABLE_ENTITY);
        assert_eq!(e.errors[0]["field"], "capacity");
        let e = parse_rule(br#"{"limt": "5/s"}"#, Some("a")).unwrap_err();
        assert_eq!(e.errors[0]["field"], "limt");
        let e = parse_rule(br#"{"name": "b", "limit": "5/s"}"#, Some("a")).unwrap_err();
        assert_eq!(e.errors[0]["field"], "name");
        assert_eq!(
            parse_rule(b"{\"limit\": ", Some("a")).unwrap_err().status,
            StatusCode::BAD_REQUEST
        );
        let (r, p) = parse_rule(
            br#"{"limit": "5/s", "position": 3, "version": 9}"#,
            Some("a"),
        )
        .unwrap();
        assert_eq!(
            (r.name.as_str(), r.limit.as_deref(), p),
            ("a", Some("5/s"), Some(3))
        );
    }

    #[test]
    fn queries_decode() {
        let q = query_pairs("path=%2Flogin&ip=10.0.0.1&x=a+b").unwrap();
        assert_eq!(q[0], ("path".into(), "/login".into()));
        assert_eq!(q[2].1, "a b");
        assert!(query_pairs("a=%zz").is_err());
    }
}
