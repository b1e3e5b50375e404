//! A rule's key: the values of its `key` attributes, hashed where they lie.

use std::fmt::Write as _;
use std::hash::{Hash, Hasher};
use std::net::IpAddr;

use crate::attrs::{AttrName, Attrs};
use crate::cond::{mask, parse_ip};

/// The key of one request under one rule, borrowed from the request: hashing it
/// copies nothing. An absent attribute is a value of its own (every request
/// without it shares one limiter, so leaving a header out does not escape the
/// limit); `ip` is hashed as the parsed address with IPv6 cut to the policy's
/// prefix, so `2001:db8::1` and `2001:db8::2` share a /64's limiter.
pub(crate) struct KeyRef<'a, A: ?Sized> {
    pub attrs: &'a A,
    pub names: &'a [AttrName],
    pub ipv6_prefix: u8,
}

/// One attribute's part of a key.
enum Part<'a> {
    Absent,
    Ip(IpAddr),
    Text(&'a str),
}

fn part<'a, A: Attrs + ?Sized>(attrs: &'a A, name: &AttrName, v6: u8) -> Part<'a> {
    match attrs.get(name.as_str()) {
        None => Part::Absent,
        Some(v) if name.is_ip() => match parse_ip(v) {
            Some(IpAddr::V6(a)) => match a.to_ipv4_mapped() {
                Some(v4) => Part::Ip(IpAddr::V4(v4)),
                None => Part::Ip(mask(IpAddr::V6(a), v6)),
            },
            Some(a) => Part::Ip(a),
            None => Part::Text(v),
        },
        Some(v) => Part::Text(v),
    }
}

impl<A: Attrs + ?Sized> Hash for KeyRef<'_, A> {
    fn hash<H: Hasher>(&self, h: &mut H) {
        for name in self.names {
            match part(self.attrs, name, self.ipv6_prefix) {
                Part::Absent => h.write_u8(0),
                Part::Ip(IpAddr::V4(a)) => {
                    h.write_u8(1);
                    h.write(&a.octets());
                }
                Part::Ip(IpAddr::V6(a)) => {
                    h.write_u8(2);
                    h.write(&a.octets());
                }
                Part::Text(s) => {
                    h.write_u8(3);
                    s.hash(h);
                }
            }
        }
    }
}

impl<A: Attrs + ?Sized> KeyRef<'_, A> {
    /// The key as text, the same in every process (for shared backends): the
    /// parts joined by `|`, each `|` and `\` in a value escaped with `\`, an absent
    /// attribute as `\0`, addresses in their canonical form (IPv6 cut to the prefix).
    pub(crate) fn text(&self) -> String {
        let mut out = String::new();
        for (i, name) in self.names.iter().enumerate() {
            if i > 0 {
                out.push('|');
            }
            match part(self.attrs, name, self.ipv6_prefix) {
                Part::Absent => out.push_str("\\0"),
                Part::Ip(a) => {
                    let _ = write!(out, "{a}");
                }
                Part::Text(s) => {
                    for c in s.chars() {
                        if c == '|' || c == '\\' {
                            out.push('\\');
                        }
                        out.push(c);
                    }
                }
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::hash::BuildHasher;

    fn names(n: &[&str]) -> Vec<AttrName> {
        n.iter().map(|s| AttrName::parse(s).unwrap()).collect()
    }

    #[test]
    fn ipv6_grouped_and_absent_distinct() {
        let s = std::collections::hash_map::RandomState::new();
        let n = names(&["ip", "tenant"]);
        let k = |a: &[(&str, &str)]| {
            let r = KeyRef {
                attrs: a,
                names: &n,
                ipv6_prefix: 64,
            };
            (s.hash_one(&r), r.text())
        };
        let a = k(&[("ip", "2001:db8::1"), ("tenant", "x")]);
        let b = k(&[("ip", "2001:db8::ffff"), ("tenant", "x")]);
        let c = k(&[("ip", "2001:db8:0:1::1"), ("tenant", "x")]);
        assert_eq!(a, b);
        assert_ne!(a.0, c.0);
        assert_eq!(a.1, "2001:db8::|x");
        let absent = k(&[("ip", "10.0.0.1")]);
        let empty = k(&[("ip", "10.0.0.1"), ("tenant", "")]);
        assert_ne!(absent, empty);
        assert_eq!(absent.1, "10.0.0.1|\\0");
        let mapped = k(&[("ip", "::ffff:10.0.0.1")]);
        assert_eq!(mapped, absent);
        assert_eq!(k(&[("ip", "a|b"), ("tenant", "c\\")]).1, "a\\|b|c\\\\");
    }
}
