//! One parsed log line: its time and the request's attributes, borrowed from the
//! line wherever the text can be used as it is.

use std::borrow::Cow;

/// A request read from a log line, as the policy sees it.
///
/// Attribute names are the policy's: `ip`, `method`, `path` (without the query
/// string), `status`, `header:user-agent`, `header:referer`, and for JSON lines
/// every field under its own name, plus `header:<name>` for a field
/// `http_<name>` (nginx's `$http_x_api_key` is `header:x-api-key`). A value the log
/// writes as `-` (nginx and Apache write it for an absent header) is an absent
/// attribute. Escapes in the common log format (`\"`, `\x22`) are kept as written.
///
/// ```
/// use sluicegate_cli::record::Request;
/// let r = Request { time_ns: 1, ip: "192.0.2.1".into(), method: Some("GET".into()),
///                   path: Some("/".into()), ..Request::default() };
/// assert_eq!(r.get("ip"), Some("192.0.2.1"));
/// assert_eq!(r.get("header:referer"), None);
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Request<'a> {
    /// The line's timestamp in nanoseconds since the Unix epoch.
    pub time_ns: u64,
    /// The client address as logged.
    pub ip: Cow<'a, str>,
    /// The request method.
    pub method: Option<Cow<'a, str>>,
    /// The request path without its query string.
    pub path: Option<Cow<'a, str>>,
    /// The response status.
    pub status: Option<Cow<'a, str>>,
    /// The `User-Agent` header.
    pub user_agent: Option<Cow<'a, str>>,
    /// The `Referer` header.
    pub referer: Option<Cow<'a, str>>,
    /// Every field of a JSON line (empty for the common log format).
    pub fields: Vec<(Cow<'a, str>, Cow<'a, str>)>,
}

impl Request<'_> {
    /// The value of attribute `name`, if the line has it.
    ///
    /// ```
    /// use sluicegate_cli::record::Request;
    /// let r = Request { fields: vec![("http_x_api_key".into(), "k1".into()),
    ///                                ("tenant".into(), "acme".into())], ..Request::default() };
    /// assert_eq!(r.get("header:x-api-key"), Some("k1"));
    /// assert_eq!(r.get("tenant"), Some("acme"));
    /// assert_eq!(r.get("http_x_api_key"), Some("k1"));
    /// ```
    pub fn get(&self, name: &str) -> Option<&str> {
        let known = match name {
            "ip" => Some(&self.ip).filter(|v| !v.is_empty()),
            "method" => self.method.as_ref(),
            "path" => self.path.as_ref(),
            "status" => self.status.as_ref(),
            "header:user-agent" => self.user_agent.as_ref(),
            "header:referer" => self.referer.as_ref(),
            _ => None,
        };
        if let Some(v) = known {
            return Some(v);
        }
        if self.fields.is_empty() {
            return None;
        }
        let found = match name.strip_prefix("header:") {
            Some(header) => self
                .fields
                .iter()
                .find(|(k, _)| is_http_field(k, header))
                .or_else(|| self.fields.iter().find(|(k, _)| k == name)),
            None => self.fields.iter().find(|(k, _)| k == name),
        };
        found.map(|(_, v)| v.as_ref()).filter(|v| *v != "-")
    }
}

/// Whether JSON field `field` is nginx's `http_<header>` for `header`
/// (`-` written as `_`, any case).
fn is_http_field(field: &str, header: &str) -> bool {
    let Some(rest) = field.strip_prefix("http_") else {
        return false;
    };
    rest.len() == header.len()
        && rest.bytes().zip(header.bytes()).all(|(f, h)| {
            let f = f.to_ascii_lowercase();
            f == h || (f == b'_' && h == b'-')
        })
}

/// Splits a request line `GET /a?b HTTP/1.1` into method and path (query removed).
/// `None` when the line has no method and target (`-`, or a garbage request nginx
/// logged with status 400).
///
/// ```
/// use sluicegate_cli::record::split_request;
/// assert_eq!(split_request("GET /search?q=x HTTP/1.1"), Some(("GET", "/search")));
/// assert_eq!(split_request("GET /"), Some(("GET", "/")));
/// assert_eq!(split_request("-"), None);
/// ```
pub fn split_request(request: &str) -> Option<(&str, &str)> {
    let b = request.as_bytes();
    let sp = b.iter().position(|c| !c.is_ascii_uppercase())?;
    if sp == 0 || b[sp] != b' ' {
        return None;
    }
    let rest = &request[sp + 1..];
    let end = memchr::memchr3(b' ', b'?', b'#', rest.as_bytes()).unwrap_or(rest.len());
    let (method, path) = (&request[..sp], &rest[..end]);
    (!path.is_empty()).then_some((method, path))
}

/// A request target without its query string (and fragment).
///
/// ```
/// assert_eq!(sluicegate_cli::record::strip_query("/a/b?x=1#f"), "/a/b");
/// ```
pub fn strip_query(target: &str) -> &str {
    match memchr::memchr2(b'?', b'#', target.as_bytes()) {
        Some(i) => &target[..i],
        None => target,
    }
}

/// `-` (the log's "absent") as `None`.
pub(crate) fn present(v: &str) -> Option<&str> {
    (v != "-" && !v.is_empty()).then_some(v)
}
