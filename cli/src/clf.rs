//! The common and combined log formats of nginx and Apache:
//!
//! ```text
//! common    $remote_addr - $remote_user [$time_local] "$request" $status $body_bytes_sent
//! combined  common + ` "$http_referer" "$http_user_agent"`
//! ```
//!
//! Fields after the user agent (nginx formats that append `$http_x_forwarded_for`
//! or timings) are ignored. Every attribute borrows from the line: parsing a line
//! allocates nothing.

use std::borrow::Cow;

use memchr::memchr;

use crate::record::{Request, present, split_request};
use crate::time::parse_clf;

/// Why a line is not in the expected format (a fixed message: no allocation).
///
/// ```
/// let reason: sluicegate_cli::clf::Malformed = sluicegate_cli::clf::parse("x", true).unwrap_err();
/// assert_eq!(reason, "no space after the client address");
/// ```
pub type Malformed = &'static str;

/// Parses a `common` (`combined == false`) or `combined` line.
///
/// ```
/// use sluicegate_cli::clf::parse;
/// let line = r#"203.0.113.7 - - [10/Oct/2000:13:55:36 -0700] "GET /a?b=1 HTTP/1.1" 200 2326 "-" "curl/8""#;
/// let r = parse(line, true).unwrap();
/// assert_eq!((r.get("ip"), r.get("method"), r.get("path")), (Some("203.0.113.7"), Some("GET"), Some("/a")));
/// assert_eq!((r.get("status"), r.get("header:user-agent"), r.get("header:referer")), (Some("200"), Some("curl/8"), None));
/// assert_eq!(r.time_ns, 971_211_336_000_000_000);
/// assert!(parse("garbage", true).is_err());
/// ```
pub fn parse(line: &str, combined: bool) -> Result<Request<'_>, Malformed> {
    let b = line.as_bytes();
    let ip_end = memchr(b' ', b).ok_or("no space after the client address")?;
    if ip_end == 0 {
        return Err("empty client address");
    }
    let open = ip_end + memchr(b'[', &b[ip_end..]).ok_or("no [timestamp]")?;
    let close = open + memchr(b']', &b[open..]).ok_or("unterminated [timestamp]")?;
    let time_ns = parse_clf(&line[open + 1..close]).ok_or("bad timestamp")?;
    let (request, mut at) = quoted(line, close + 1).ok_or("no quoted request")?;
    let (status, next) = word(line, at).ok_or("no status")?;
    if status.len() != 3 || !status.bytes().all(|c| c.is_ascii_digit()) {
        return Err("bad status");
    }
    let (bytes, next) = word(line, next).ok_or("no response size")?;
    if bytes != "-" && !bytes.bytes().all(|c| c.is_ascii_digit()) {
        return Err("bad response size");
    }
    at = next;
    let (mut referer, mut user_agent) = (None, None);
    if combined {
        let (r, next) = quoted(line, at).ok_or("no quoted referer")?;
        let (u, _) = quoted(line, next).ok_or("no quoted user agent")?;
        referer = present(r).map(Cow::Borrowed);
        user_agent = present(u).map(Cow::Borrowed);
    } else if b[at..].iter().any(|c| *c != b' ') {
        return Err("text after the response size (a combined line?)");
    }
    let (method, path) = match split_request(request) {
        Some((m, p)) => (Some(Cow::Borrowed(m)), Some(Cow::Borrowed(p))),
        None => (None, None),
    };
    Ok(Request {
        time_ns,
        ip: Cow::Borrowed(&line[..ip_end]),
        method,
        path,
        status: Some(Cow::Borrowed(status)),
        user_agent,
        referer,
        fields: Vec::new(),
    })
}

/// The next `"..."` after spaces at `from`: its contents (escapes kept) and the
/// index after the closing quote. A quote preceded by an odd number of
/// backslashes (Apache's `\"`) does not close the field.
fn quoted(line: &str, from: usize) -> Option<(&str, usize)> {
    let b = line.as_bytes();
    let start = from + b[from..].iter().position(|c| *c != b' ')?;
    if b[start] != b'"' {
        return None;
    }
    let mut i = start + 1;
    loop {
        let q = i + memchr(b'"', &b[i..])?;
        let backslashes = b[start + 1..q]
            .iter()
            .rev()
            .take_while(|c| **c == b'\\')
            .count();
        if backslashes % 2 == 0 {
            return Some((&line[start + 1..q], q + 1));
        }
        i = q + 1;
    }
}

/// The next space-separated word after spaces at `from`, and the index after it.
fn word(line: &str, from: usize) -> Option<(&str, usize)> {
    let b = line.as_bytes();
    let start = from + b[from..].iter().position(|c| *c != b' ')?;
    let end = start + memchr(b' ', &b[start..]).unwrap_or(b.len() - start);
    Some((&line[start..end], end))
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: &str = "[10/Oct/2000:13:55:36 -0700]";

    #[test]
    fn common_and_escapes() {
        let l = format!(r#"::1 - frank {T} "POST /login HTTP/1.1" 302 -"#);
        let r = parse(&l, false).unwrap();
        assert_eq!(r.get("ip"), Some("::1"));
        assert_eq!(r.get("method"), Some("POST"));
        assert_eq!(r.get("header:user-agent"), None);
        assert_eq!(parse(&l, true).unwrap_err(), "no quoted referer");
        let l =
            format!(r#"1.2.3.4 - - {T} "GET / HTTP/1.1" 200 5 "-" "say \"hi\" \\" "x-forwarded""#);
        let r = parse(&l, true).unwrap();
        assert_eq!(r.get("header:user-agent"), Some(r#"say \"hi\" \\"#));
    }

    #[test]
    fn malformed_lines_are_errors_not_panics() {
        let good = format!(r#"1.2.3.4 - - {T} "GET / HTTP/1.1" 200 5 "-" "ua""#);
        for cut in 0..good.len() {
            let _ = parse(&good[..cut], true);
            let _ = parse(&good[..cut], false);
        }
        let l = format!(r#"1.2.3.4 - - {T} "\x16\x03\x01" 400 150 "-" "-""#);
        let r = parse(&l, true).unwrap();
        assert_eq!(
            (r.get("method"), r.get("path"), r.get("status")),
            (None, None, Some("400"))
        );
        assert_eq!(
            parse(
                &format!(r#"1.2.3.4 - - {T} "GET / HTTP/1.1" 2000 5"#),
                false
            )
            .unwrap_err(),
            "bad status"
        );
    }
}
