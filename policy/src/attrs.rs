//! Requests as named string attributes, and the syntax of attribute names.

use std::collections::{BTreeMap, HashMap};
use std::fmt;

/// A request, as the policy sees it: a set of named string attributes.
///
/// The HTTP integrations fill `ip`, `path`, `method`, `host` and
/// `header:<lower-case name>`; applications add any others (`tenant`, `channel`,
/// `user`…). Implement it over whatever the caller already holds so that a check
/// copies no attribute value: it is implemented for slices and arrays of
/// `(&str, &str)` pairs and for string maps.
///
/// ```
/// use sluicegate_policy::Attrs;
/// let req = [("path", "/login"), ("method", "POST")];
/// assert_eq!(req.get("method"), Some("POST"));
/// assert_eq!(req.get("ip"), None);
/// ```
pub trait Attrs {
    /// The value of attribute `name`, if the request has it.
    fn get(&self, name: &str) -> Option<&str>;
}

impl<A: Attrs + ?Sized> Attrs for &A {
    fn get(&self, name: &str) -> Option<&str> {
        (**self).get(name)
    }
}

impl<N: AsRef<str>, V: AsRef<str>> Attrs for [(N, V)] {
    fn get(&self, name: &str) -> Option<&str> {
        self.iter()
            .find(|(n, _)| n.as_ref() == name)
            .map(|(_, v)| v.as_ref())
    }
}

impl<N: AsRef<str>, V: AsRef<str>, const L: usize> Attrs for [(N, V); L] {
    fn get(&self, name: &str) -> Option<&str> {
        Attrs::get(self.as_slice(), name)
    }
}

impl<N: AsRef<str>, V: AsRef<str>> Attrs for Vec<(N, V)> {
    fn get(&self, name: &str) -> Option<&str> {
        Attrs::get(self.as_slice(), name)
    }
}

impl<V: AsRef<str>, S: std::hash::BuildHasher> Attrs for HashMap<String, V, S> {
    fn get(&self, name: &str) -> Option<&str> {
        HashMap::get(self, name).map(AsRef::as_ref)
    }
}

impl<V: AsRef<str>> Attrs for BTreeMap<String, V> {
    fn get(&self, name: &str) -> Option<&str> {
        BTreeMap::get(self, name).map(AsRef::as_ref)
    }
}

/// A valid attribute name: `ip`, `path`, `method`, `host`, `header:<name>` with a
/// lower-case header name, or an application attribute (a lower-case ASCII letter
/// followed by lower-case letters, digits, `_`, `-` or `.`).
///
/// ```
/// use sluicegate_policy::AttrName;
/// assert!(AttrName::parse("header:x-api-key").is_ok());
/// assert!(AttrName::parse("tenant").is_ok());
/// assert!(AttrName::parse("header:X-Api-Key").is_err());
/// assert!(AttrName::parse("Tenant").is_err());
/// assert!(AttrName::parse("ip").unwrap().is_ip());
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct AttrName(Box<str>);

impl AttrName {
    /// Checks the syntax of `name`; the error says what is wrong.
    ///
    /// ```
    /// use sluicegate_policy::AttrName;
    /// let e = AttrName::parse("header:").unwrap_err();
    /// assert!(e.contains("header name"));
    /// ```
    pub fn parse(name: &str) -> Result<AttrName, String> {
        if let Some(h) = name.strip_prefix("header:") {
            if h.is_empty() {
                return Err("`header:` needs a header name, e.g. `header:x-api-key`".into());
            }
            if let Some(c) = h.chars().find(|c| !is_header_char(*c)) {
                return Err(if c.is_ascii_uppercase() {
                    format!(
                        "header names are written in lower case: `header:{}`",
                        h.to_ascii_lowercase()
                    )
                } else {
                    format!("`{c}` is not allowed in a header name")
                });
            }
            return Ok(AttrName(name.into()));
        }
        let mut chars = name.chars();
        match chars.next() {
            Some(c) if c.is_ascii_lowercase() => {}
            Some(_) => {
                return Err(format!(
                    "attribute `{name}`: a name starts with a lower-case letter (or is `header:<name>`)"
                ));
            }
            None => return Err("an attribute name cannot be empty".into()),
        }
        if let Some(c) = chars.find(|c| !is_app_char(*c)) {
            return Err(format!(
                "attribute `{name}`: `{c}` is not allowed (lower-case letters, digits, `_`, `-`, `.`; headers as `header:<name>`)"
            ));
        }
        Ok(AttrName(name.into()))
    }

    /// The name as written.
    ///
    /// ```
    /// # use sluicegate_policy::AttrName;
    /// assert_eq!(AttrName::parse("path").unwrap().as_str(), "path");
    /// ```
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Whether this is the client address attribute `ip` (CIDR matching, IPv6
    /// grouped by prefix in keys).
    ///
    /// ```
    /// # use sluicegate_policy::AttrName;
    /// assert!(!AttrName::parse("path").unwrap().is_ip());
    /// ```
    pub fn is_ip(&self) -> bool {
        &*self.0 == "ip"
    }

    /// Whether this is `path` (patterns with `*` and a trailing `/*`).
    ///
    /// ```
    /// # use sluicegate_policy::AttrName;
    /// assert!(AttrName::parse("path").unwrap().is_path());
    /// ```
    pub fn is_path(&self) -> bool {
        &*self.0 == "path"
    }
}

impl fmt::Display for AttrName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// RFC 9110 token characters, lower case only.
fn is_header_char(c: char) -> bool {
    c.is_ascii_lowercase() || c.is_ascii_digit() || "!#$%&'*+-.^_`|~".contains(c)
}

fn is_app_char(c: char) -> bool {
    c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, '_' | '-' | '.')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        for ok in [
            "ip",
            "path",
            "method",
            "host",
            "header:x-api-key",
            "tenant",
            "user.id",
        ] {
            assert!(AttrName::parse(ok).is_ok(), "{ok}");
        }
        for bad in [
            "",
            "Ip",
            "1x",
            "a b",
            "header:",
            "header:X",
            "header:a b",
            "tenant!",
        ] {
            assert!(AttrName::parse(bad).is_err(), "{bad}");
        }
        let map: HashMap<String, String> = [("a".to_string(), "b".to_string())].into();
        assert_eq!(Attrs::get(&map, "a"), Some("b"));
        let v = vec![("a", "1")];
        assert_eq!(Attrs::get(&v, "a"), Some("1"));
    }
}
