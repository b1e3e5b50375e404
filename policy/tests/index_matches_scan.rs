//! The rule index against a linear scan: on random rule sets and requests, a
//! check reports exactly the rules that `RuleDef::matches` (every condition
//! tested, no index) accepts, in file order. Values are drawn from small pools so
//! that rules share values, lists overlap, patterns nest and blocks contain each
//! other: exact values and lists (empty ones too), `*`, path prefixes, globs with
//! a wildcard mid-segment, mid-path or `**`, CIDR blocks of both families and
//! IPv4-mapped addresses, and requests without some attributes.

mod common;

use proptest::prelude::*;
use sluicegate_policy::{Decision, Policy};

const ATTRS: [&str; 5] = ["path", "ip", "method", "tenant", "header:x-k"];

/// What rules may name, per attribute of [`ATTRS`] (`*` alone is "present").
fn rule_values(attr: usize) -> Vec<&'static str> {
    match attr {
        0 => vec![
            "/", "/a", "/a/b", "/ab", "", "/a/", "a", "/a/*", "/*", "/a/b/*", "/ab/*", "/a*/*",
            "/a/*/c", "/**", "/a/**", "*.c", "/a?/*", "/a/b?", "a/*", "/a//*", "/a/**/c", "*",
        ],
        1 => vec![
            "10.0.0.0/8",
            "10.1.0.0/16",
            "10.1.2.3",
            "10.1.2.0/24",
            "0.0.0.0/0",
            "::/0",
            "::ffff:0:0/96",
            "2001:db8::/32",
            "2001:db8::1",
            "192.168.0.0/24",
            "*",
        ],
        2 => vec!["GET", "POST", "*"],
        3 => vec!["t1", "t2", "t3", "*"],
        _ => vec!["k1", "k2", ""],
    }
}

/// What requests carry, per attribute of [`ATTRS`].
fn request_values(attr: usize) -> Vec<&'static str> {
    match attr {
        0 => vec![
            "/", "", "/a", "/a/", "/a/b", "/ab", "/a/b/c", "/a/x/c", "/ax/y", "/x.c", "x.c",
            "/a//b", "a", "a/b", "/a1/z", "/a/b1", "/a/b/x/c", "/abc",
        ],
        1 => vec![
            "10.1.2.3",
            "10.1.9.9",
            "10.2.0.1",
            "::ffff:10.1.2.3",
            "::ffff:192.168.0.9",
            "2001:db8::1",
            "2001:db8::2",
            "2001:db9::1",
            "192.168.0.5",
            "::1",
            "not-an-ip",
        ],
        2 => vec!["GET", "POST", "PUT"],
        3 => vec!["t1", "t2", "t3", "t4", ""],
        _ => vec!["k1", "k2", "", "k3"],
    }
}

/// One `match` entry: a list of values (possibly empty; `*` among them is
/// "present"), written as a string when it has one value and `bare`.
#[derive(Clone, Debug)]
struct Entry {
    attr: usize,
    values: Vec<&'static str>,
    bare: bool,
}

fn entry(attr: usize) -> impl Strategy<Value = Entry> {
    (
        prop::collection::vec(prop::sample::select(rule_values(attr)), 0..4),
        any::<bool>(),
    )
        .prop_map(move |(values, bare)| Entry { attr, values, bare })
}

fn rule() -> impl Strategy<Value = Vec<Entry>> {
    prop::sample::subsequence((0..ATTRS.len()).collect::<Vec<_>>(), 0..=3)
        .prop_flat_map(|attrs| attrs.into_iter().map(entry).collect::<Vec<_>>())
}

fn request() -> impl Strategy<Value = Vec<(&'static str, &'static str)>> {
    (0..ATTRS.len())
        .map(|a| prop::option::of(prop::sample::select(request_values(a))))
        .collect::<Vec<_>>()
        .prop_map(|vals| {
            ATTRS
                .iter()
                .zip(vals)
                .filter_map(|(n, v)| Some((*n, v?)))
                .collect()
        })
}

fn toml(rules: &[Vec<Entry>]) -> String {
    let mut t = String::new();
    for (i, r) in rules.iter().enumerate() {
        let entries: Vec<String> = r
            .iter()
            .map(|e| {
                let value = match e.values.as_slice() {
                    [one] if e.bare => format!("\"{one}\""),
                    all => {
                        let quoted: Vec<String> = all.iter().map(|v| format!("\"{v}\"")).collect();
                        format!("[{}]", quoted.join(", "))
                    }
                };
                format!("\"{}\" = {value}", ATTRS[e.attr])
            })
            .collect();
        t += &format!(
            "[[rule]]\nname = \"r{i}\"\nlimit = \"1000000/second\"\nmatch = {{ {} }}\n",
            entries.join(", ")
        );
    }
    t
}

proptest! {
    // About 3 s in a debug build.
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

    #[test]
    fn index_picks_what_a_scan_picks(
        rules in prop::collection::vec(rule(), 0..40),
        requests in prop::collection::vec(request(), 1..40),
    ) {
        let text = toml(&rules);
        let policy: Policy = common::valid_policy(&text);
        let def = policy.definition();
        let mut d = Decision::new();
        for (now, req) in (0..).zip(&requests) {
            policy.check_n_at_into(req.as_slice(), 1, now, &mut d);
            let indexed: Vec<usize> = d.rules().map(|r| r.index).collect();
            let scanned: Vec<usize> = (0..def.rules().len())
                .filter(|&i| def.rules()[i].matches(req.as_slice()))
                .collect();
            prop_assert_eq!(indexed, scanned, "request {:?}\n{}", req, text);
            prop_assert!(d.allowed());
        }
    }
}
