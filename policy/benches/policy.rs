//! A policy of 20 rules of which 3 match (per-IP keyed, per-path keyed, global),
//! local backend, against one keyed check of core's table; then how a check and
//! a compile scale with the number of rules (10 to 10,000), for rules on an exact
//! attribute (`tenant = "t<i>"`), on a path prefix (`/p<i>/*`) and on a CIDR block
//! (`10.a.b.0/24`), each set with one global rule: a request matches 2 rules.
//!
//! The same 20-rule check through the async API (`check_n_at_into_async`,
//! polled once) shows what the async path costs a policy without remote rules,
//! and with `--features shared` in a shared-memory region (`[shared]`).
//!
//! `cargo bench -p sluicegate-policy --bench policy -- --warm-up-time 1 --measurement-time 3`

// criterion_group! generates an undocumented public function.
#![allow(missing_docs)]

use std::future::Future;
use std::hint::black_box;
use std::pin::pin;
use std::task::{Context, Waker};
use std::time::Duration;

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use sluicegate::keyed::Keyed;
use sluicegate::{Gcra, Quota};
use sluicegate_policy::{Decision, Policy};

fn rules() -> String {
    let mut t = String::new();
    for i in 0..17 {
        t += &format!(
            "[[rule]]\nname = \"other-{i}\"\nmatch = {{ path = \"/other/{i}/*\", method = \"POST\" }}\nkey = [\"ip\"]\nlimit = \"100/second\"\n"
        );
    }
    t += "[[rule]]\nname = \"per-ip\"\nkey = [\"ip\"]\nlimit = \"1000000/second\"\n";
    t += "[[rule]]\nname = \"per-path\"\nmatch = { path = \"/api/*\" }\nkey = [\"path\"]\nlimit = \"1000000/second\"\n";
    t += "[[rule]]\nname = \"global\"\nlimit = \"1000000000/second\"\n";
    t
}

/// The benchmarks' request from `ip`: it matches per-ip, per-path and global.
fn request(ip: &str) -> [(&'static str, &str); 3] {
    [("ip", ip), ("path", "/api/items"), ("method", "GET")]
}

fn bench(c: &mut Criterion) {
    let ips: Vec<String> = (0..1024)
        .map(|i| format!("10.0.{}.{}", i / 256, i % 256))
        .collect();
    let mut g = c.benchmark_group("policy");

    let keyed: Keyed<Gcra, (), _, _> =
        Keyed::with_clock(Quota::per_second(1_000_000), 100_000, ()).unwrap();
    let (mut i, mut now) = (0usize, 0u64);
    g.bench_function("one keyed check", |b| {
        b.iter(|| {
            i = (i + 1) & 1023;
            now += 1_000;
            black_box(keyed.check_at(ips[i].as_str(), now))
        })
    });

    let policy = Policy::from_toml(&rules()).unwrap();
    let mut d = Decision::new();
    let (mut i, mut now) = (0usize, 0u64);
    // The 20-rule check of `policy`, the next IP and a microsecond later each time.
    let mut check20 = |policy: &Policy, d: &mut Decision| {
        i = (i + 1) & 1023;
        now += 1_000;
        policy.check_n_at_into(&request(&ips[i]), 1, now, d);
        black_box(d.allowed())
    };
    g.bench_function("policy 20 rules, 3 match", |b| {
        b.iter(|| check20(&policy, &mut d))
    });
    // With `--features shared`: the same rules with their keyed state in a
    // shared-memory region (`[shared]`), whose keys hash as text.
    #[cfg(feature = "shared")]
    {
        let path = std::env::temp_dir().join(format!("sg-bench-policy-{}", std::process::id()));
        let _ = std::fs::remove_file(&path);
        let shared = format!("[shared]\npath = \"{}\"\n\n{}", path.display(), rules());
        let policy = Policy::from_toml(&shared).unwrap();
        g.bench_function("policy 20 rules, 3 match, shared region", |b| {
            b.iter(|| check20(&policy, &mut d))
        });
        drop(policy);
        let _ = std::fs::remove_file(&path);
    }
    // The async check of the same local policy, polled once: it never awaits.
    let mut cx = Context::from_waker(Waker::noop());
    g.bench_function("policy 20 rules, 3 match, async", |b| {
        b.iter(|| {
            i = (i + 1) & 1023;
            now += 1_000;
            let ready = pin!(policy.check_n_at_into_async(&request(&ips[i]), 1, now, &mut d))
                .poll(&mut cx)
                .is_ready();
            black_box(ready && d.allowed())
        })
    });
    g.finish();
}

/// One of the scaling benchmarks' rule sets: rule `i`'s `match` table.
#[derive(Clone, Copy)]
enum Set {
    /// `{ tenant = "t<i>" }`
    Exact,
    /// `{ path = "/p<i>/*" }`
    Prefix,
    /// `{ ip = "10.<i/256>.<i%256>.0/24" }`
    Cidr,
}

impl Set {
    const ALL: [Set; 3] = [Set::Exact, Set::Prefix, Set::Cidr];

    fn name(self) -> &'static str {
        match self {
            Set::Exact => "exact",
            Set::Prefix => "prefix",
            Set::Cidr => "cidr",
        }
    }

    fn cond(self, i: usize) -> String {
        match self {
            Set::Exact => format!("tenant = \"t{i}\""),
            Set::Prefix => format!("path = \"/p{i}/*\""),
            Set::Cidr => format!("ip = \"10.{}.{}.0/24\"", i / 256, i % 256),
        }
    }

    /// `n - 1` rules of this set and a global rule; `key` is the `key` line.
    fn policy(self, n: usize, key: &str) -> String {
        let mut t = String::with_capacity(n * 100);
        for i in 0..n - 1 {
            t += &format!(
                "[[rule]]\nname = \"r{i}\"\nmatch = {{ {} }}\n{key}limit = \"1000000000/second\"\n",
                self.cond(i)
            );
        }
        t += "[[rule]]\nname = \"global\"\nlimit = \"1000000000/second\"\n";
        t
    }

    /// A request that matches rule `i` (and the global rule).
    fn request(self, i: usize) -> [(&'static str, String); 3] {
        let (tenant, path, ip) = match self {
            Set::Exact => (
                format!("t{i}"),
                "/x/items/42".to_owned(),
                "192.0.2.7".into(),
            ),
            Set::Prefix => ("x".into(), format!("/p{i}/items/42"), "192.0.2.7".into()),
            Set::Cidr => (
                "x".into(),
                "/x/items/42".into(),
                format!("10.{}.{}.7", i / 256, i % 256),
            ),
        };
        [("tenant", tenant), ("path", path), ("ip", ip)]
    }
}

const SIZES: [usize; 4] = [10, 100, 1_000, 10_000];

fn scale(c: &mut Criterion) {
    let mut g = c.benchmark_group("policy_check");
    for set in Set::ALL {
        for n in SIZES {
            let policy = Policy::from_toml(&set.policy(n, "")).unwrap();
            // 64 requests, each for another rule spread over the set.
            let reqs: Vec<_> = (0..64).map(|k| set.request(k * (n - 1) / 64)).collect();
            let mut d = Decision::new();
            for r in &reqs {
                let attrs: Vec<(&str, &str)> = r.iter().map(|(k, v)| (*k, v.as_str())).collect();
                policy.check_n_at_into(&attrs, 1, 0, &mut d);
                assert_eq!(d.rules().count(), 2, "each request matches two rules");
            }
            let (mut i, mut now) = (0usize, 0u64);
            g.bench_function(BenchmarkId::new(set.name(), n), |b| {
                b.iter(|| {
                    i = (i + 1) & 63;
                    now += 1_000;
                    let r = &reqs[i];
                    let attrs = [
                        (r[0].0, r[0].1.as_str()),
                        (r[1].0, r[1].1.as_str()),
                        (r[2].0, r[2].1.as_str()),
                    ];
                    policy.check_n_at_into(&attrs, 1, now, &mut d);
                    black_box(d.allowed())
                })
            });
        }
    }
    g.finish();

    let mut g = c.benchmark_group("policy_compile");
    g.sample_size(10);
    g.warm_up_time(Duration::from_millis(100));
    for (set, n, key, name) in [
        (Set::Exact, 10_000, "", "exact 10000"),
        (Set::Prefix, 10_000, "", "prefix 10000"),
        (Set::Cidr, 10_000, "", "cidr 10000"),
        // Keyed rules: each builds its table (100,000 keys by default).
        (Set::Exact, 1_000, "key = [\"ip\"]\n", "exact keyed 1000"),
    ] {
        let text = set.policy(n, key);
        g.bench_function(name, |b| {
            b.iter(|| black_box(Policy::from_toml(&text).unwrap()))
        });
    }
    g.finish();
}

criterion_group!(benches, bench, scale);
criterion_main!(benches);
