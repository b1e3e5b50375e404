//! One `match` entry compiled: how a value is tested, without allocating.

use std::net::IpAddr;

/// What one attribute must satisfy. Built by the rule-file reader; a list in the
/// file is any-of.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Cond {
    /// `*`: the attribute is present, with any value.
    Present,
    /// Any of these values (a string in the file is a list of one).
    Any(Box<[Value]>),
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Value {
    Exact(Box<str>),
    /// `path` with `*`: a glob (see [`glob`]).
    Glob(Box<str>),
    /// `ip`: a CIDR block (a plain address is a /32 or /128).
    Cidr(Cidr),
}

impl Cond {
    pub(crate) fn matches(&self, value: Option<&str>) -> bool {
        self.matches_with(value, || value.and_then(parse_ip))
    }

    /// [`Self::matches`] with the value's address (for CIDR blocks) from `ip`,
    /// called at most once: a request's address is parsed once for all rules.
    pub(crate) fn matches_with(
        &self,
        value: Option<&str>,
        ip: impl FnOnce() -> Option<IpAddr>,
    ) -> bool {
        let Some(v) = value else { return false };
        match self {
            Cond::Present => true,
            Cond::Any(values) => {
                let mut ip = Some(ip);
                let mut addr: Option<Option<IpAddr>> = None;
                values.iter().any(|want| match want {
                    Value::Exact(s) => **s == *v,
                    Value::Glob(p) => glob(p.as_bytes(), v.as_bytes()),
                    Value::Cidr(c) => addr
                        .get_or_insert_with(|| ip.take().and_then(|f| f()))
                        .is_some_and(|a| c.contains(&a)),
                })
            }
        }
    }

    /// Whether no value can ever satisfy it (an empty list).
    pub(crate) fn is_empty(&self) -> bool {
        matches!(self, Cond::Any(v) if v.is_empty())
    }
}

/// An address block.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct Cidr {
    addr: IpAddr,
    prefix: u8,
}

impl Cidr {
    /// `a.b.c.d/len`, `x::y/len`, or a plain address; the error says why not.
    pub(crate) fn parse(s: &str) -> Result<Cidr, String> {
        let (a, len) = match s.split_once('/') {
            Some((a, l)) => (a, Some(l)),
            None => (s, None),
        };
        let addr: IpAddr = a
            .parse()
            .map_err(|_| format!("`{s}` is not an IP address or CIDR block"))?;
        let max = if addr.is_ipv4() { 32 } else { 128 };
        let prefix = match len {
            None => max,
            Some(l) => match l.parse::<u8>() {
                Ok(p) if p <= max => p,
                _ => return Err(format!("`{s}`: the prefix length must be 0 to {max}")),
            },
        };
        if mask(addr, prefix) != addr {
            return Err(format!(
                "`{s}` has bits set after the /{prefix} prefix (did you mean {}/{prefix}?)",
                mask(addr, prefix)
            ));
        }
        Ok(Cidr { addr, prefix })
    }

    /// The network address (bits after the prefix clear).
    pub(crate) fn addr(&self) -> IpAddr {
        self.addr
    }

    /// The prefix length.
    pub(crate) fn prefix(&self) -> u8 {
        self.prefix
    }

    pub(crate) fn contains(&self, a: &IpAddr) -> bool {
        let a = match (self.addr, *a) {
            // An IPv4-mapped IPv6 peer (::ffff:a.b.c.d) matches IPv4 blocks.
            (IpAddr::V4(_), IpAddr::V6(v6)) => match v6.to_ipv4_mapped() {
                Some(v4) => IpAddr::V4(v4),
                None => return false,
            },
            (IpAddr::V6(_), IpAddr::V4(_)) => return false,
            (_, a) => a,
        };
        mask(a, self.prefix) == self.addr
    }
}

pub(crate) fn parse_ip(s: &str) -> Option<IpAddr> {
    s.parse().ok()
}

/// `addr` with every bit after the first `prefix` cleared.
pub(crate) fn mask(addr: IpAddr, prefix: u8) -> IpAddr {
    match addr {
        IpAddr::V4(a) => {
            let m = u32::MAX
                .checked_shl(32 - u32::from(prefix.min(32)))
                .unwrap_or(0);
            IpAddr::V4((u32::from(a) & m).into())
        }
        IpAddr::V6(a) => {
            let m = u128::MAX
                .checked_shl(128 - u32::from(prefix.min(128)))
                .unwrap_or(0);
            IpAddr::V6((u128::from(a) & m).into())
        }
    }
}

/// Path patterns: a trailing `/*` matches the prefix itself and everything below
/// it; elsewhere `*` matches any run of characters within one segment (no `/`),
/// `**` any run including `/`, `?` one character other than `/`.
pub(crate) fn glob(p: &[u8], s: &[u8]) -> bool {
    if let Some(prefix) = p.strip_suffix(b"/*") {
        if !prefix.contains(&b'*') && !prefix.contains(&b'?') {
            return s == prefix || (s.starts_with(prefix) && s.get(prefix.len()) == Some(&b'/'));
        }
    }
    glob_at(p, s)
}

/// Backtracking over the last star only (linear for one `*`, quadratic worst case
/// for several; patterns come from the operator, paths are short).
fn glob_at(p: &[u8], s: &[u8]) -> bool {
    let (mut pi, mut si) = (0, 0);
    // (pattern index after the star, string index it resumes from, star crosses '/')
    let mut star: Option<(usize, usize, bool)> = None;
    while si < s.len() {
        match p.get(pi) {
            Some(b'*') => {
                let deep = p.get(pi + 1) == Some(&b'*');
                pi += if deep { 2 } else { 1 };
                star = Some((pi, si, deep));
                continue;
            }
            Some(b'?') if s[si] != b'/' => {
                pi += 1;
                si += 1;
                continue;
            }
            Some(&c) if c != b'?' && c == s[si] => {
                pi += 1;
                si += 1;
                continue;
            }
            _ => {}
        }
        match star {
            Some((sp, ss, deep)) if deep || s[ss] != b'/' => {
                star = Some((sp, ss + 1, deep));
                pi = sp;
                si = ss + 1;
            }
            _ => return false,
        }
    }
    p[pi..].iter().all(|&c| c == b'*')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs() {
        assert!(glob(b"/api/*", b"/api"));
        assert!(glob(b"/api/*", b"/api/"));
        assert!(glob(b"/api/*", b"/api/v1/users"));
        assert!(!glob(b"/api/*", b"/apiary"));
        assert!(glob(b"/users/*/posts", b"/users/42/posts"));
        assert!(!glob(b"/users/*/posts", b"/users/4/2/posts"));
        assert!(glob(b"/static/**.css", b"/static/a/b.css"));
        assert!(glob(b"/v?/x", b"/v1/x"));
        assert!(!glob(b"/v?/x", b"/v12/x"));
        assert!(glob(b"*.json", b"a.json"));
        assert!(!glob(b"*.json", b"a/b.json"));
    }

    #[test]
    fn cidrs() {
        let c = Cidr::parse("10.0.0.0/8").unwrap();
        assert!(c.contains(&"10.1.2.3".parse().unwrap()));
        assert!(c.contains(&"::ffff:10.1.2.3".parse().unwrap()));
        assert!(!c.contains(&"11.0.0.1".parse().unwrap()));
        let v6 = Cidr::parse("2001:db8::/32").unwrap();
        assert!(v6.contains(&"2001:db8::1".parse().unwrap()));
        assert!(!v6.contains(&"10.0.0.1".parse().unwrap()));
        assert!(Cidr::parse("10.0.0.1/8").is_err());
        assert!(Cidr::parse("10.0.0.0/33").is_err());
        assert!(Cidr::parse("nope").is_err());
        assert_eq!(Cidr::parse("0.0.0.0/0").unwrap().prefix, 0);
        assert!(
            Cidr::parse("0.0.0.0/0")
                .unwrap()
                .contains(&"1.2.3.4".parse().unwrap())
        );
    }
}
