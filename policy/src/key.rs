//! A rule's key: the values of its `key` attributes, hashed where they lie.

use std::cell::Cell;
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
pub(crate) struct KeyRef<'a, L: ?Sized> {
    pub lookup: &'a L,
    /// The policy's attribute names, indexed by `idx`.
    pub names: &'a [AttrName],
    /// The rule's `key` attributes, as indices into `names`.
    pub idx: &'a [u16],
    pub ipv6_prefix: u8,
}

/// The request's attributes as a check reads them: by the policy's index of the
/// attribute (each looked up once per request) or by name.
pub(crate) trait Lookup {
    fn value(&self, idx: u16, name: &AttrName) -> Option<&str>;
    /// The attribute's value parsed as an address (for `ip`).
    fn ip(&self, idx: u16, name: &AttrName) -> Option<IpAddr> {
        self.value(idx, name).and_then(parse_ip)
    }
}

/// Looks every attribute up by name.
pub(crate) struct Direct<'a, A: ?Sized>(pub &'a A);

impl<A: Attrs + ?Sized> Lookup for Direct<'_, A> {
    fn value(&self, _: u16, name: &AttrName) -> Option<&str> {
        self.0.get(name.as_str())
    }
}

/// Values looked up once per request, by the policy's attribute index; the
/// client address parsed at most once per request.
pub(crate) struct Cached<'a> {
    pub vals: &'a [Option<&'a str>],
    pub ip: Cell<Option<Option<IpAddr>>>,
}

impl<'a> Cached<'a> {
    pub(crate) fn new(vals: &'a [Option<&'a str>]) -> Self {
        Cached {
            vals,
            ip: Cell::new(None),
        }
    }
}

impl Lookup for Cached<'_> {
    #[inline]
    fn value(&self, idx: u16, _: &AttrName) -> Option<&str> {
        self.vals.get(usize::from(idx)).copied().flatten()
    }

    #[inline]
    fn ip(&self, idx: u16, name: &AttrName) -> Option<IpAddr> {
        // `ip` is the only address attribute: one cell is enough.
        if let Some(a) = self.ip.get() {
            return a;
        }
        let a = self.value(idx, name).and_then(parse_ip);
        self.ip.set(Some(a));
        a
    }
}

/// One attribute's part of a key.
enum Part<'a> {
    Absent,
    Ip(IpAddr),
    Text(&'a str),
}

fn part<'a, L: Lookup + ?Sized>(l: &'a L, i: u16, name: &AttrName, v6: u8) -> Part<'a> {
    match l.value(i, name) {
        None => Part::Absent,
        Some(v) if name.is_ip() => match l.ip(i, name) {
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

impl<L: Lookup + ?Sized> Hash for KeyRef<'_, L> {
    fn hash<H: Hasher>(&self, h: &mut H) {
        for &i in self.idx {
            let name = &self.names[usize::from(i)];
            match part(self.lookup, i, name, self.ipv6_prefix) {
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

impl<L: Lookup + ?Sized> KeyRef<'_, L> {
    /// Appends the key as text, the same in every process (for shared backends): the
    /// parts joined by `|`, each `|` and `\` in a value escaped with `\`, an absent
    /// attribute as `\0`, addresses in their canonical form (IPv6 cut to the prefix).
    pub(crate) fn write_text(&self, out: &mut String) {
        for (n, &i) in self.idx.iter().enumerate() {
            if n > 0 {
                out.push('|');
            }
            let name = &self.names[usize::from(i)];
            match part(self.lookup, i, name, self.ipv6_prefix) {
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
    }
}

/// Writes the key text of a rule keyed by `names` for `attrs` into `out`
/// (cleared first): see [`KeyRef::text`].
pub(crate) fn key_text_into<A: crate::attrs::Attrs + ?Sized>(
    attrs: &A,
    names: &[AttrName],
    ipv6_prefix: u8,
    out: &mut String,
) {
    out.clear();
    // Rules have few key attributes; the indices of a longer list saturate
    // (never more than 65,536 attributes in a rule).
    let idx: Vec<u16> = (0..names.len())
        .map(|i| u16::try_from(i).unwrap_or(u16::MAX))
        .collect();
    KeyRef {
        lookup: &Direct(attrs),
        names,
        idx: &idx,
        ipv6_prefix,
    }
    .write_text(out);
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
                lookup: &Direct(a),
                names: &n,
                idx: &[0, 1],
                ipv6_prefix: 64,
            };
            (s.hash_one(&r), {
                let mut t = String::new();
                r.write_text(&mut t);
                t
            })
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
