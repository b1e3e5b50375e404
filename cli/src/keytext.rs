//! A rule's key as text, for reports: the values of the rule's `key`
//! attributes joined by `|`, the client address as the policy groups it (IPv6
//! by its prefix, IPv4-mapped IPv6 as IPv4), an absent attribute as `\0`, and
//! `|` or `\` inside a value escaped with `\`. This mirrors the policy's own key
//! text; the policy does not expose it per decision, so it is rebuilt here, and
//! only for denied requests.

use std::fmt::Write as _;
use std::net::IpAddr;

use sluicegate_policy::{AttrName, Attrs};

/// Writes the key of a rule keyed by `names` for `attrs` into `out` (cleared
/// first). A rule without key attributes has the empty key.
///
/// ```
/// use sluicegate_cli::keytext::key_text;
/// use sluicegate_policy::AttrName;
/// let names = [AttrName::parse("ip").unwrap(), AttrName::parse("path").unwrap()];
/// let mut out = String::new();
/// key_text(&[("ip", "2001:db8::7"), ("path", "/a|b")], &names, 64, &mut out);
/// assert_eq!(out, "2001:db8::|/a\\|b");
/// key_text(&[("ip", "::ffff:192.0.2.1")], &names, 64, &mut out);
/// assert_eq!(out, "192.0.2.1|\\0");
/// ```
pub fn key_text<A: Attrs + ?Sized>(
    attrs: &A,
    names: &[AttrName],
    ipv6_prefix: u8,
    out: &mut String,
) {
    out.clear();
    for (i, name) in names.iter().enumerate() {
        if i > 0 {
            out.push('|');
        }
        let Some(v) = attrs.get(name.as_str()) else {
            out.push_str("\\0");
            continue;
        };
        if name.is_ip() {
            if let Ok(addr) = v.parse::<IpAddr>() {
                let addr = match addr {
                    IpAddr::V6(a) => match a.to_ipv4_mapped() {
                        Some(v4) => IpAddr::V4(v4),
                        None => {
                            let bits = u32::from(ipv6_prefix.min(128));
                            let mask = u128::MAX.checked_shl(128 - bits).unwrap_or(0);
                            IpAddr::V6((u128::from(a) & mask).into())
                        }
                    },
                    v4 => v4,
                };
                let _ = write!(out, "{addr}");
                continue;
            }
        }
        for c in v.chars() {
            if c == '|' || c == '\\' {
                out.push('\\');
            }
            out.push(c);
        }
    }
}
