//! Hot reload from a watched file under concurrent load: no failed check, unchanged
//! rules keep their state, new limits apply within 1 s, an invalid file keeps the
//! old policy. Bounded: a few seconds at most.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use sluicegate_policy::{Policy, Watcher};

mod common;
use common::valid_policy;

/// The rule both versions hold unchanged: its state must survive the reload.
const KEEP: &str = r#"
[[rule]]
name = "keep"
key = ["ip"]
limit = "3/hour"
algorithm = "fixed_window"
"#;

/// The first version of the file: `KEEP`, then these (`.concat()` joins them).
const V1: [&str; 2] = [
    KEEP,
    r#"
[[rule]]
name = "change"
limit = "1000000/hour"

[[rule]]
name = "gone"
key = ["ip"]
limit = "1000/second"
"#,
];

/// The second: `KEEP`, "change" at twice its limit, "gone" gone, "new" added.
const V2: [&str; 2] = [
    KEEP,
    r#"
[[rule]]
name = "change"
limit = "2000000/hour"

[[rule]]
name = "new"
match = { path = "/new" }
limit = "1/hour"
"#,
];

const NAMES: [&str; 4] = ["keep", "change", "gone", "new"];

/// Polls `cond` every 5 ms for at most `limit`; the time it took.
fn within(limit: Duration, mut cond: impl FnMut() -> bool) -> Option<Duration> {
    let start = Instant::now();
    while start.elapsed() < limit {
        if cond() {
            return Some(start.elapsed());
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    None
}

fn limit_of(policy: &Policy, rule: &str) -> Option<u64> {
    let d = policy.check_n(&[("ip", "203.0.113.9"), ("path", "/")], 0);
    let r = d.rules().find(|r| r.name == rule)?;
    Some(r.limit)
}

#[test]
fn reload_under_load() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rules.toml");
    std::fs::write(&path, V1.concat()).unwrap();
    let policy = Arc::new(Policy::from_path(&path).unwrap());
    let watcher = Watcher::spawn(policy.clone(), &path, Duration::from_millis(25)).unwrap();

    // The client whose state must survive the reload spends its hour.
    let spent = [("ip", "192.0.2.1"), ("path", "/")];
    for _ in 0..3 {
        assert!(policy.check(&spent).allowed());
    }
    assert!(!policy.check(&spent).allowed());

    let stop = Arc::new(AtomicBool::new(false));
    let odd = Arc::new(AtomicU64::new(0));
    let threads: Vec<_> = (0..4u32)
        .map(|t| {
            let (policy, stop, odd) = (policy.clone(), stop.clone(), odd.clone());
            std::thread::spawn(move || {
                let mut checks = 0u64;
                let mut i = 0u32;
                while !stop.load(Ordering::Relaxed) {
                    i = i.wrapping_add(1);
                    let ip = format!("10.{t}.{}.{}", (i >> 8) & 255, i & 255);
                    let path = if i % 7 == 0 { "/new" } else { "/" };
                    let d = policy.check(&[("ip", ip.as_str()), ("path", path)]);
                    let ok = d.rules().count() >= 2 && d.rules().all(|r| NAMES.contains(&r.name));
                    if !ok {
                        odd.fetch_add(1, Ordering::Relaxed);
                    }
                    checks += 1;
                }
                checks
            })
        })
        .collect();

    std::thread::sleep(Duration::from_millis(100));
    assert_eq!(limit_of(&policy, "change"), Some(1_000_000));
    std::fs::write(&path, V2.concat()).unwrap();
    let took = within(Duration::from_secs(3), || {
        limit_of(&policy, "change") == Some(2_000_000)
    });
    let took = took.expect("the new limit was not applied");
    assert!(took < Duration::from_secs(1), "took {took:?}");
    assert_eq!(limit_of(&policy, "gone"), None);
    assert_eq!(limit_of(&policy, "new"), None); // does not match "/"
    let names: Vec<String> = policy
        .definition()
        .rules()
        .iter()
        .map(|r| r.name().to_owned())
        .collect();
    assert_eq!(names, ["keep", "change", "new"]);
    // The unchanged rule kept every key's state.
    let d = policy.check(&spent);
    assert!(!d.allowed());
    assert_eq!(d.denying().next().unwrap().name, "keep");

    // An invalid file: reported, the policy in force stays.
    std::fs::write(&path, V2.concat().replace("3/hour", "3/fortnight")).unwrap();
    let reported = within(Duration::from_secs(3), || policy.last_error().is_some());
    assert!(reported.is_some(), "the invalid file was not reported");
    let err = policy.last_error().unwrap();
    assert!(err.contains("rules.toml:5:12"), "{err}");
    assert_eq!(policy.definition().rules().len(), 3);
    assert_eq!(limit_of(&policy, "change"), Some(2_000_000));
    assert!(!policy.check(&spent).allowed());
    let text = policy.metrics_text();
    assert!(
        text.contains("sluicegate_policy_reloads_total{result=\"error\"} 1\n"),
        "{text}"
    );
    assert!(text.contains("sluicegate_policy_last_reload_error{message=\""));

    std::thread::sleep(Duration::from_millis(50));
    stop.store(true, Ordering::Relaxed);
    for t in threads {
        assert!(t.join().unwrap() > 0);
    }
    assert_eq!(odd.load(Ordering::Relaxed), 0);
    assert_eq!(policy.reload_count(), (1, 1));
    watcher.stop();
}

#[test]
fn changed_limit_carries_state_and_unknown_change_rebuilds() {
    let p = valid_policy(
        "[[rule]]\nname = \"a\"\nkey = [\"ip\"]\nlimit = \"2/minute\"\nalgorithm = \"fixed_window\"\n",
    );
    let ip = [("ip", "192.0.2.1")];
    assert!(p.check_n_at(&ip, 2, 0).allowed());
    // Raise the limit: the two units spent this window still count.
    let r = p
        .reload_from_toml("[[rule]]\nname = \"a\"\nkey = [\"ip\"]\nlimit = \"3/minute\"\nalgorithm = \"fixed_window\"\n")
        .unwrap();
    assert_eq!((r.kept, r.changed, r.built), (0, 1, 0));
    assert!(p.check_n_at(&ip, 1, 1).allowed());
    assert!(!p.check_n_at(&ip, 1, 2).allowed());
    // Another algorithm: built anew, full.
    let r = p
        .reload_from_toml("[[rule]]\nname = \"a\"\nkey = [\"ip\"]\nlimit = \"3/minute\"\nalgorithm = \"sliding_window\"\n")
        .unwrap();
    assert_eq!((r.kept, r.changed, r.built), (0, 0, 1));
    assert!(p.check_n_at(&ip, 3, 3).allowed());
    // Counters follow the name across all of it.
    let m = &p.metrics_at(3)[0];
    assert_eq!((m.allowed, m.denied), (3, 1));
}
