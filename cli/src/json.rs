//! JSON-lines logs: one object per line, such as nginx's
//!
//! ```text
//! log_format json escape=json '{"time_iso8601":"$time_iso8601","remote_addr":"$remote_addr",'
//!   '"request":"$request","status":$status,"body_bytes_sent":$body_bytes_sent,'
//!   '"http_referer":"$http_referer","http_user_agent":"$http_user_agent"}';
//! ```
//!
//! Every field becomes an attribute under its own name (strings unescaped,
//! numbers and booleans as written, `null` absent, nested values as their JSON
//! text). The policy's standard attributes are taken from the first present field
//! of a list of candidates ([`JsonFields`]), each replaceable on the command line
//! (`--field ip=client_ip`). Unescaped strings are borrowed from the line.

use std::borrow::Cow;
use std::fmt;

use serde::de::{Deserializer, MapAccess, Visitor};
use serde_json::value::RawValue;

use crate::record::{Request, present, split_request, strip_query};
use crate::time::parse_any;

/// Which JSON fields hold the standard attributes: for each, candidates tried in
/// order. The defaults fit nginx variable names and common alternatives.
///
/// ```
/// use sluicegate_cli::json::JsonFields;
/// let mut f = JsonFields::default();
/// assert_eq!(f.ip[0], "remote_addr");
/// f.set("ip", "client").unwrap();
/// assert_eq!(f.ip, ["client"]);
/// assert!(f.set("colour", "x").is_err());
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JsonFields {
    /// Timestamp (epoch seconds, RFC 3339 or common log format); nginx's `msec`
    /// first, as the most precise.
    pub time: Vec<String>,
    /// Client address.
    pub ip: Vec<String>,
    /// Method (else taken from `request`).
    pub method: Vec<String>,
    /// Path or request URI, query removed (else taken from `request`).
    pub path: Vec<String>,
    /// The whole request line `GET /a HTTP/1.1`.
    pub request: Vec<String>,
    /// Response status.
    pub status: Vec<String>,
    /// `User-Agent`.
    pub user_agent: Vec<String>,
    /// `Referer`.
    pub referer: Vec<String>,
}

fn names(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| (*s).to_owned()).collect()
}

impl Default for JsonFields {
    fn default() -> Self {
        JsonFields {
            time: names(&[
                "msec",
                "time_iso8601",
                "time_local",
                "timestamp",
                "@timestamp",
                "time",
            ]),
            ip: names(&["remote_addr", "client_ip", "ip"]),
            method: names(&["request_method", "method"]),
            path: names(&["request_uri", "uri", "path"]),
            request: names(&["request"]),
            status: names(&["status"]),
            user_agent: names(&["http_user_agent", "user_agent"]),
            referer: names(&["http_referer", "referer"]),
        }
    }
}

impl JsonFields {
    /// The attribute names `set` accepts.
    ///
    /// ```
    /// assert!(sluicegate_cli::json::JsonFields::ATTRIBUTES.contains(&"user-agent"));
    /// ```
    pub const ATTRIBUTES: [&'static str; 8] = [
        "time",
        "ip",
        "method",
        "path",
        "request",
        "status",
        "user-agent",
        "referer",
    ];

    /// Reads `attribute` from `field` only (replacing the default candidates).
    ///
    /// ```
    /// let mut f = sluicegate_cli::json::JsonFields::default();
    /// f.set("time", "ts")?;
    /// assert_eq!(f.time, ["ts"]);
    /// # Ok::<(), String>(())
    /// ```
    pub fn set(&mut self, attribute: &str, field: &str) -> Result<(), String> {
        let slot = match attribute {
            "time" => &mut self.time,
            "ip" => &mut self.ip,
            "method" => &mut self.method,
            "path" => &mut self.path,
            "request" => &mut self.request,
            "status" => &mut self.status,
            "user-agent" | "header:user-agent" => &mut self.user_agent,
            "referer" | "header:referer" => &mut self.referer,
            _ => {
                return Err(format!(
                    "unknown attribute `{attribute}` for --field; expected one of {}",
                    Self::ATTRIBUTES.join(", ")
                ));
            }
        };
        *slot = vec![field.to_owned()];
        Ok(())
    }
}

/// Parses one JSON line.
///
/// ```
/// use sluicegate_cli::json::{parse, JsonFields};
/// let f = JsonFields::default();
/// let line = r#"{"time_iso8601":"2000-10-10T13:55:36-07:00","remote_addr":"2001:db8::1",
///   "request":"GET /x?y HTTP/2.0","status":429,"http_x_api_key":"k","tenant":"acme"}"#;
/// let r = parse(line, &f).unwrap();
/// assert_eq!((r.get("ip"), r.get("path"), r.get("status")), (Some("2001:db8::1"), Some("/x"), Some("429")));
/// assert_eq!((r.get("header:x-api-key"), r.get("tenant")), (Some("k"), Some("acme")));
/// assert!(parse(r#"{"remote_addr":"1.2.3.4"}"#, &f).is_err()); // no time
/// ```
pub fn parse<'a>(line: &'a str, names: &JsonFields) -> Result<Request<'a>, &'static str> {
    let mut de = serde_json::Deserializer::from_str(line);
    let fields = de
        .deserialize_map(FieldsVisitor)
        .map_err(|_| "not a JSON object")?;
    de.end().map_err(|_| "text after the JSON object")?;
    let find = |cands: &[String]| -> Option<Cow<'a, str>> {
        cands.iter().find_map(|c| {
            fields
                .iter()
                .find(|(k, v)| k == c && present(v).is_some())
                .map(|(_, v)| v.clone())
        })
    };
    let time = find(&names.time).ok_or("no timestamp field")?;
    let time_ns = parse_any(&time).ok_or("bad timestamp")?;
    let ip = find(&names.ip).ok_or("no client address field")?;
    let request = find(&names.request);
    let split = request.as_deref().and_then(split_request);
    let method = find(&names.method).or_else(|| split.map(|(m, _)| Cow::Owned(m.to_owned())));
    let path = match find(&names.path) {
        Some(Cow::Borrowed(p)) => Some(Cow::Borrowed(strip_query(p))),
        Some(Cow::Owned(p)) => Some(Cow::Owned(strip_query(&p).to_owned())),
        None => split.map(|(_, p)| Cow::Owned(p.to_owned())),
    };
    let (status, user_agent, referer) = (
        find(&names.status),
        find(&names.user_agent),
        find(&names.referer),
    );
    Ok(Request {
        time_ns,
        ip,
        method,
        path,
        status,
        user_agent,
        referer,
        fields,
    })
}

type Fields<'a> = Vec<(Cow<'a, str>, Cow<'a, str>)>;

/// Reads an object's members as (name, value text) pairs in one pass.
struct FieldsVisitor;

impl<'de> Visitor<'de> for FieldsVisitor {
    type Value = Fields<'de>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<M: MapAccess<'de>>(self, mut map: M) -> Result<Fields<'de>, M::Error> {
        let mut out = Vec::with_capacity(16);
        while let Some(key) = map.next_key::<Cow<'de, str>>()? {
            let raw: &'de RawValue = map.next_value()?;
            let text = raw.get();
            let value = if text.starts_with('"') {
                serde_json::from_str::<Cow<'de, str>>(text).map_err(serde::de::Error::custom)?
            } else if text == "null" {
                continue;
            } else {
                Cow::Borrowed(text)
            };
            out.push((key, value));
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nginx_defaults_and_overrides() {
        let f = JsonFields::default();
        let line = r#"{"msec":"971211336.250","remote_addr":"10.0.0.1","request_method":"POST","request_uri":"/login?next=%2F","status":"200","http_user_agent":"a\"b","http_referer":"-","n":null,"o":{"a":1}}"#;
        let r = parse(line, &f).unwrap();
        assert_eq!(r.time_ns, 971_211_336_250_000_000);
        assert_eq!(r.get("method"), Some("POST"));
        assert_eq!(r.get("path"), Some("/login"));
        assert_eq!(r.get("header:user-agent"), Some("a\"b"));
        assert_eq!(r.get("header:referer"), None);
        assert_eq!(r.get("n"), None);
        assert_eq!(r.get("o"), Some(r#"{"a":1}"#));
        let mut g = JsonFields::default();
        g.set("ip", "n").unwrap();
        assert_eq!(parse(line, &g).unwrap_err(), "no client address field");
        for bad in ["", "[]", "{", r#"{"a":1} x"#, "null"] {
            assert!(parse(bad, &f).is_err(), "{bad}");
        }
    }
}
