//! A policy of 20 rules of which 3 match (per-IP keyed, per-path keyed, global),
//! local backend, against one keyed check of core's table.
//!
//! `cargo bench -p sluicegate-policy --bench policy -- --warm-up-time 1 --measurement-time 3`

// criterion_group! generates an undocumented public function.
#![allow(missing_docs)]

use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
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
    g.bench_function("policy 20 rules, 3 match", |b| {
        b.iter(|| {
            i = (i + 1) & 1023;
            now += 1_000;
            let attrs = [
                ("ip", ips[i].as_str()),
                ("path", "/api/items"),
                ("method", "GET"),
            ];
            policy.check_n_at_into(&attrs, 1, now, &mut d);
            black_box(d.allowed())
        })
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
