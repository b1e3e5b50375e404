//! The rule index: which rules a request can match at all, found at a cost that
//! does not grow with the number of rules.
//!
//! Every rule is filed under one of its conditions, when one can be filed: a
//! list of exact values (`method = "POST"`, `tenant = ["acme", "globex"]`) in a
//! hash map per attribute, path patterns by the literal directory before their
//! first wildcard (`/api/*` under `/api`, `/users/*/posts` under `/users`) in a
//! trie over `/`-separated segments, and CIDR blocks in a hash map per prefix
//! length (IPv4 and IPv6 apart; an IPv4-mapped IPv6 address also looks in the
//! IPv4 maps, as [`Cidr::contains`] matches it). Of a rule's conditions, the
//! one whose values the fewest rules share is chosen (a value many rules name,
//! such as `GET`, lets in many requests), the narrower kind on a tie.
//!
//! Rules with no such condition (none at all, only `*`, or a pattern whose first
//! wildcard precedes its first `/`) are always candidates. A request's
//! candidates are those plus, per indexed attribute, the rules filed under what
//! its value hits: at most one exact value, one trie node per segment of the
//! path, one block per prefix length in use. Every candidate is then matched in
//! full, in file order: the index only skips rules that cannot match, so a
//! pattern filed by its directory may still fail its wildcard.

use std::net::IpAddr;

// Seeded at random per map: request values only look up the operator's keys,
// whose spread no request can change.
use foldhash::HashMap;

use crate::attrs::AttrName;
use crate::cond::{Cidr, Cond, Value};
use crate::key::Lookup;

/// A rule's position in the policy, in file order.
pub(crate) type Id = u32;

/// See the [module docs](self).
#[derive(Debug, Default)]
pub(crate) struct RuleIndex {
    /// Rules filed nowhere, ascending.
    always: Box<[Id]>,
    /// Per attribute with filed rules, in attribute order.
    attrs: Box<[AttrIndex]>,
}

/// The rules filed under one attribute's values; each list ascending.
#[derive(Debug, Default)]
struct AttrIndex {
    /// The attribute's index in the policy's names.
    attr: u16,
    exact: HashMap<Box<str>, Vec<Id>>,
    dirs: Trie,
    blocks: Blocks,
}

/// Where one value of a condition is filed.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
enum Slot<'a> {
    Exact(&'a str),
    /// A pattern's literal directory: every value it matches starts with it and
    /// then `/` or ends there.
    Dir(&'a str),
    Block(Cidr),
}

impl Slot<'_> {
    /// How much wider than one value the slot is, for the choice between a rule's
    /// conditions shared by as many rules: 0 for an exact value, 2 for one that
    /// lets in (nearly) every value (`/*`, `0.0.0.0/0`), 1 between.
    fn breadth(self) -> u8 {
        match self {
            Slot::Exact(_) => 0,
            Slot::Dir("") => 2,
            Slot::Block(c) if c.prefix() == 0 => 2,
            Slot::Dir(_) | Slot::Block(_) => 1,
        }
    }
}

/// Where `v` is filed, if it can be.
fn slot(v: &Value) -> Option<Slot<'_>> {
    match v {
        Value::Exact(s) => Some(Slot::Exact(s)),
        Value::Glob(p) => glob_dir(p).map(Slot::Dir),
        Value::Cidr(c) => Some(Slot::Block(*c)),
    }
}

/// The part of pattern `p` before the last `/` that precedes its first wildcard:
/// a value matching `p` starts with it and a `/` (everything up to the first
/// wildcard is matched literally). `None` when no `/` precedes the wildcard.
fn glob_dir(p: &str) -> Option<&str> {
    let wild = p.find(['*', '?']).unwrap_or(p.len());
    p[..wild].rfind('/').map(|slash| &p[..slash])
}

/// The slots of a condition, if every value has one (an empty list has none and
/// is filed nowhere: it never matches).
fn slots(c: &Cond) -> Option<impl Iterator<Item = Slot<'_>> + Clone> {
    match c {
        Cond::Any(values) if values.iter().all(|v| slot(v).is_some()) => {
            Some(values.iter().filter_map(slot))
        }
        _ => None,
    }
}

fn push(ids: &mut Vec<Id>, id: Id) {
    // Rules are filed in file order, so a list stays ascending; a value listed
    // twice in one rule files it once.
    if ids.last() != Some(&id) {
        ids.push(id);
    }
}

impl RuleIndex {
    /// The index of rules whose conditions are `rules[i]` (attribute index,
    /// condition). Linear in the number of values, bar hashing.
    pub(crate) fn build(rules: &[&[(u16, Cond)]]) -> RuleIndex {
        // How many rules name each slot.
        let mut shared: HashMap<(u16, Slot<'_>), u32> = HashMap::default();
        for conds in rules {
            for (a, c) in conds.iter() {
                for s in slots(c).into_iter().flatten() {
                    *shared.entry((*a, s)).or_default() += 1;
                }
            }
        }
        let mut always = Vec::new();
        let mut attrs: HashMap<u16, AttrIndex> = HashMap::default();
        for (id, conds) in (0..).zip(rules) {
            let best = conds
                .iter()
                .filter_map(|(a, c)| Some((*a, slots(c)?)))
                .min_by_key(|(a, s)| {
                    let share: u64 = s
                        .clone()
                        .map(|s| shared.get(&(*a, s)).map_or(0, |&n| u64::from(n)))
                        .sum();
                    let breadth = s.clone().map(Slot::breadth).max().unwrap_or(0);
                    (share, breadth)
                });
            let Some((a, s)) = best else {
                always.push(id);
                continue;
            };
            let at = attrs.entry(a).or_insert_with(|| AttrIndex {
                attr: a,
                ..AttrIndex::default()
            });
            for s in s {
                match s {
                    Slot::Exact(v) => push(at.exact.entry(v.into()).or_default(), id),
                    Slot::Dir(d) => at.dirs.file(d, id),
                    Slot::Block(c) => at.blocks.file(c, id),
                }
            }
        }
        let mut attrs: Vec<AttrIndex> = attrs.into_values().collect();
        attrs.sort_unstable_by_key(|a| a.attr);
        RuleIndex {
            always: always.into(),
            attrs: attrs.into(),
        }
    }

    /// The rules the request in `lookup` can match, ascending; `hits` is scratch
    /// space the caller keeps (no allocation once it has grown to a request's
    /// share).
    #[inline]
    pub(crate) fn candidates<'s, L: Lookup + ?Sized>(
        &'s self,
        lookup: &L,
        names: &[AttrName],
        hits: &'s mut Vec<Id>,
    ) -> Candidates<'s> {
        hits.clear();
        // Lists appended: more than one needs sorting into file order.
        let mut lists = 0;
        for at in self.attrs.iter() {
            let Some(name) = names.get(usize::from(at.attr)) else {
                continue;
            };
            let Some(v) = lookup.value(at.attr, name) else {
                continue;
            };
            if let Some(ids) = at.exact.get(v) {
                hits.extend_from_slice(ids);
                lists += 1;
            }
            lists += at.dirs.find(v, hits);
            if !at.blocks.is_empty() {
                if let Some(ip) = lookup.ip(at.attr, name) {
                    lists += at.blocks.find(ip, hits);
                }
            }
        }
        if lists > 1 {
            hits.sort_unstable();
            hits.dedup();
        }
        Candidates {
            always: &self.always,
            hits,
        }
    }
}

/// A request's candidate rules in file order: two ascending lists merged.
#[derive(Debug)]
pub(crate) struct Candidates<'a> {
    always: &'a [Id],
    hits: &'a [Id],
}

impl Iterator for Candidates<'_> {
    type Item = usize;

    #[inline]
    fn next(&mut self) -> Option<usize> {
        let id = match (self.always.split_first(), self.hits.split_first()) {
            (Some((&a, rest)), Some((&h, later))) if a <= h => {
                self.always = rest;
                if a == h {
                    // Never filed and always both; kept out of the loop anyway.
                    self.hits = later;
                }
                a
            }
            (_, Some((&h, rest))) => {
                self.hits = rest;
                h
            }
            (Some((&a, rest)), None) => {
                self.always = rest;
                a
            }
            (None, None) => return None,
        };
        usize::try_from(id).ok()
    }
}

/// Path patterns by their literal directory: a trie over `/`-separated segments.
/// A directory `d` lets in the values `d` and `d/…`, exactly the values whose
/// segments start with `d`'s.
#[derive(Debug, Default)]
struct Trie {
    /// `nodes[0]` is the root (no segment); empty until a rule is filed.
    nodes: Vec<Node>,
}

#[derive(Debug, Default)]
struct Node {
    next: Children,
    /// The rules filed under the directory this node ends.
    ids: Vec<Id>,
}

/// A node's children by segment: compared in a short list (most nodes have a
/// few children, and comparing a few short segments costs less than hashing
/// one), hashed when there are more.
#[derive(Debug)]
enum Children {
    Few(Vec<(Box<[u8]>, usize)>),
    Many(HashMap<Box<[u8]>, usize>),
}

/// Children kept in a list, at most.
const FEW: usize = 8;

impl Default for Children {
    fn default() -> Self {
        Children::Few(Vec::new())
    }
}

impl Children {
    fn is_empty(&self) -> bool {
        match self {
            Children::Few(few) => few.is_empty(),
            Children::Many(many) => many.is_empty(),
        }
    }

    #[inline]
    fn get(&self, seg: &[u8]) -> Option<usize> {
        match self {
            Children::Few(few) => few.iter().find(|(s, _)| same(s, seg)).map(|(_, i)| *i),
            Children::Many(many) => many.get(seg).copied(),
        }
    }

    fn insert(&mut self, seg: &[u8], node: usize) {
        match self {
            Children::Few(few) if few.len() < FEW => few.push((seg.into(), node)),
            Children::Few(few) => {
                let mut many: HashMap<Box<[u8]>, usize> = std::mem::take(few).into_iter().collect();
                many.insert(seg.into(), node);
                *self = Children::Many(many);
            }
            Children::Many(many) => {
                many.insert(seg.into(), node);
            }
        }
    }
}

/// Byte equality without a call into `memcmp`: segments are short.
#[inline]
fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x == y)
}

impl Trie {
    fn file(&mut self, dir: &str, id: Id) {
        if self.nodes.is_empty() {
            self.nodes.push(Node::default());
        }
        let mut at = 0;
        for seg in dir.as_bytes().split(|&b| b == b'/') {
            at = match self.nodes[at].next.get(seg) {
                Some(next) => next,
                None => {
                    let fresh = self.nodes.len();
                    self.nodes[at].next.insert(seg, fresh);
                    self.nodes.push(Node::default());
                    fresh
                }
            };
        }
        push(&mut self.nodes[at].ids, id);
    }

    /// Appends the rules filed under each directory of `value` to `out`; how many
    /// lists it appended.
    fn find(&self, value: &str, out: &mut Vec<Id>) -> usize {
        let Some(mut node) = self.nodes.first() else {
            return 0;
        };
        let (mut rest, mut lists) = (value.as_bytes(), 0);
        // Segment by segment, until a segment has no node or a node no children.
        while !node.next.is_empty() {
            let (seg, tail) = match rest.iter().position(|&b| b == b'/') {
                Some(slash) => (&rest[..slash], Some(&rest[slash + 1..])),
                None => (rest, None),
            };
            let Some(next) = node.next.get(seg).and_then(|i| self.nodes.get(i)) else {
                break;
            };
            if !next.ids.is_empty() {
                out.extend_from_slice(&next.ids);
                lists += 1;
            }
            node = next;
            match tail {
                Some(t) => rest = t,
                None => break,
            }
        }
        lists
    }
}

/// CIDR blocks: per prefix length in use, the blocks' network addresses.
#[derive(Debug, Default)]
struct Blocks {
    v4: Vec<(u8, HashMap<u32, Vec<Id>>)>,
    v6: Vec<(u8, HashMap<u128, Vec<Id>>)>,
}

/// The first `len` bits of `bits`, the others cleared.
fn high<T>(bits: T, len: u8, width: u32) -> T
where
    T: std::ops::Shl<u32, Output = T> + std::ops::BitAnd<Output = T> + Copy + From<bool>,
    T: std::ops::Not<Output = T>,
{
    // `!0 << (width - len)`, with len 0 a zero mask (a shift by `width` overflows).
    let ones = !T::from(false);
    match width.checked_sub(u32::from(len)) {
        Some(shift) if shift < width => bits & (ones << shift),
        _ => T::from(false),
    }
}

impl Blocks {
    fn is_empty(&self) -> bool {
        self.v4.is_empty() && self.v6.is_empty()
    }

    fn file(&mut self, c: Cidr, id: Id) {
        let len = c.prefix();
        match c.addr() {
            IpAddr::V4(a) => push(entry(&mut self.v4, len).entry(a.into()).or_default(), id),
            IpAddr::V6(a) => push(entry(&mut self.v6, len).entry(a.into()).or_default(), id),
        }
    }

    /// Appends the rules filed under each block holding `ip` to `out`; how many
    /// lists it appended.
    fn find(&self, ip: IpAddr, out: &mut Vec<Id>) -> usize {
        match ip {
            IpAddr::V4(a) => find(&self.v4, u32::from(a), 32, out),
            IpAddr::V6(a) => {
                let mapped = a
                    .to_ipv4_mapped()
                    .map_or(0, |v4| find(&self.v4, u32::from(v4), 32, out));
                mapped + find(&self.v6, u128::from(a), 128, out)
            }
        }
    }
}

/// The map of prefix length `len` in `by_len`, added if new.
fn entry<K>(by_len: &mut Vec<(u8, HashMap<K, Vec<Id>>)>, len: u8) -> &mut HashMap<K, Vec<Id>> {
    let i = match by_len.iter().position(|(l, _)| *l == len) {
        Some(i) => i,
        None => {
            by_len.push((len, HashMap::default()));
            by_len.len() - 1
        }
    };
    &mut by_len[i].1
}

fn find<K>(by_len: &[(u8, HashMap<K, Vec<Id>>)], addr: K, width: u32, out: &mut Vec<Id>) -> usize
where
    K: std::ops::Shl<u32, Output = K> + std::ops::BitAnd<Output = K> + Copy + From<bool>,
    K: std::ops::Not<Output = K> + std::hash::Hash + Eq,
{
    let mut lists = 0;
    for (len, blocks) in by_len {
        if let Some(ids) = blocks.get(&high(addr, *len, width)) {
            out.extend_from_slice(ids);
            lists += 1;
        }
    }
    lists
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cond::glob;

    #[test]
    fn pattern_dirs() {
        assert_eq!(glob_dir("/api/*"), Some("/api"));
        assert_eq!(glob_dir("/*"), Some(""));
        assert_eq!(glob_dir("/users/*/posts"), Some("/users"));
        assert_eq!(glob_dir("/static/**.css"), Some("/static"));
        assert_eq!(glob_dir("/v?/x"), Some(""));
        assert_eq!(glob_dir("*.json"), None);
        assert_eq!(glob_dir("a*/b"), None);
        // Every value a pattern matches lies under its directory.
        for (p, s) in [
            ("/api/*", "/api"),
            ("/api/*", "/api/v1/x"),
            ("/users/*/posts", "/users/42/posts"),
            ("/a/b?/c", "/a/b1/c"),
            ("/*", ""),
        ] {
            assert!(glob(p.as_bytes(), s.as_bytes()), "{p} {s}");
            let d = glob_dir(p).unwrap();
            assert!(s == d || s.starts_with(&format!("{d}/")), "{p} {s}");
        }
    }

    #[test]
    fn trie_lists_then_hashes_children() {
        let mut t = Trie::default();
        for i in 0..20 {
            t.file(&format!("/p{i}"), i);
        }
        t.file("/p3/x", 20);
        t.file("", 21);
        let found = |v: &str| {
            let mut out = Vec::new();
            let lists = t.find(v, &mut out);
            (lists, out)
        };
        assert_eq!(found("/p3/x/y"), (3, vec![21, 3, 20]));
        assert_eq!(found("/p19"), (2, vec![21, 19]));
        assert_eq!(found("/p20"), (1, vec![21]));
        assert_eq!(found("p3"), (0, vec![]));
    }

    #[test]
    fn masks() {
        assert_eq!(high(0xffff_ffffu32, 0, 32), 0);
        assert_eq!(high(0xffff_ffffu32, 8, 32), 0xff00_0000);
        assert_eq!(high(0xffff_ffffu32, 32, 32), 0xffff_ffff);
        assert_eq!(high(u128::MAX, 128, 128), u128::MAX);
        assert_eq!(high(u128::MAX, 1, 128), 1 << 127);
    }

    #[test]
    fn candidates_merge_in_order() {
        let c = Candidates {
            always: &[0, 4, 9],
            hits: &[1, 4, 5, 12],
        };
        assert_eq!(c.collect::<Vec<_>>(), [0, 1, 4, 5, 9, 12]);
    }
}
