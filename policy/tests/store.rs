//! The rule store (feature `store`) on a real SQLite file: every field round
//! trips and means what the same TOML means; optimistic concurrency; invalid
//! writes save nothing; the audit trail; readers (`Policy::from_store`) follow
//! a create and a delete within 1 s, keep the last good rules through an
//! outage and recover, and start from a snapshot. A few seconds in all.

use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::{Duration, Instant, SystemTime};

use sluicegate_policy::store::{
    Action, Defaults, DomainSettings, FollowOptions, MatchValue, Record, RedisTable, RuleRecord,
    StateTable, Store, StoreError,
};
use sluicegate_policy::{Policy, PolicyDef};

fn store_in(dir: &Path) -> (String, Store) {
    let url = format!("sqlite:{}", dir.join("rules.db").display());
    let store = Store::open(&url).unwrap();
    (url, store)
}

/// Waits up to `limit` for `done`; the time it took, or `None`.
fn wait_for(limit: Duration, mut done: impl FnMut() -> bool) -> Option<Duration> {
    let start = Instant::now();
    while start.elapsed() < limit {
        if done() {
            return Some(start.elapsed());
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    None
}

/// Whether a check of `attrs` (a peek: cost 0) is matched by rule `name`.
fn in_force(p: &Policy, attrs: &[(&str, &str)], name: &str) -> bool {
    p.check_n(attrs, 0).rules().any(|r| r.name == name)
}

fn fast() -> FollowOptions {
    FollowOptions::new().poll_interval(Duration::from_millis(20))
}

fn every_setting() -> DomainSettings {
    DomainSettings {
        defaults: Some(Defaults {
            algorithm: Some("fixed_window".into()),
            backend: Some("local".into()),
            on_error: Some("open".into()),
            mode: Some("enforce".into()),
            capacity: Some(2048),
            ipv6_prefix: Some(56),
        }),
        redis: Some(RedisTable {
            url: "redis://127.0.0.1:6379/2".into(),
            prefix: Some("app:".into()),
            lease_horizon_ms: Some(300),
            lease_ttl_ms: Some(700),
        }),
        state: Some(StateTable {
            memory: "8 MiB".into(),
        }),
    }
}

/// Between them, every field of a TOML rule.
fn every_rule_field() -> Vec<RuleRecord> {
    let mut a = RuleRecord::new("api", "10/s; 500/hour")
        .matching("path", "/api/*")
        .matching_any("method", ["GET", "POST"])
        .key(["ip", "header:x-api-key"]);
    a.algorithm = Some("sliding_window".into());
    a.backend = Some("redis".into());
    a.on_error = Some("closed".into());
    a.mode = Some("shadow".into());
    a.capacity = Some(500);
    let mut shaper = RuleRecord::new("shaper", "5/s");
    shaper.algorithm = Some("shaper".into());
    shaper.max_delay_ms = Some(250);
    let mut hot = RuleRecord::new("hot", "10000/s");
    hot.algorithm = Some("token_bucket".into());
    hot.stripes = Some(4);
    vec![a, shaper, hot]
}

/// The same domain as a rule file.
const EVERY_FIELD_TOML: &str = r#"
[defaults]
algorithm = "fixed_window"
backend = "local"
on_error = "open"
mode = "enforce"
capacity = 2048
ipv6_prefix = 56

[redis]
url = "redis://127.0.0.1:6379/2"
prefix = "app:"
lease_horizon_ms = 300
lease_ttl_ms = 700

[state]
memory = "8 MiB"

[[rule]]
name = "api"
match = { path = "/api/*", method = ["GET", "POST"] }
key = ["ip", "header:x-api-key"]
limit = "10/s; 500/hour"
algorithm = "sliding_window"
backend = "redis"
on_error = "closed"
mode = "shadow"
capacity = 500

[[rule]]
name = "shaper"
limit = "5/s"
algorithm = "shaper"
max_delay_ms = 250

[[rule]]
name = "hot"
limit = "10000/s"
algorithm = "token_bucket"
stripes = 4
"#;

#[test]
fn every_field_round_trips_and_means_what_the_toml_means() {
    let dir = tempfile::tempdir().unwrap();
    let (url, store) = store_in(dir.path());
    let before = SystemTime::now() - Duration::from_millis(1);
    let settings = store
        .put_settings("d", every_setting(), None, "alice")
        .unwrap();
    let mut written = Vec::new();
    for (i, r) in every_rule_field().into_iter().enumerate() {
        let pos = Some(10 * i as i64);
        written.push(store.create_rule("d", r, pos, "bob").unwrap());
    }
    // Read back through another connection: every field, position and meta.
    let again = Store::open(&url.replace("sqlite:", "sqlite://")).unwrap();
    let d = again.domain("d").unwrap().unwrap();
    assert_eq!(d.settings, settings);
    assert_eq!(d.settings.settings, every_setting());
    assert_eq!(d.rules, written);
    assert_eq!(
        d.rules.iter().map(|r| r.rule.clone()).collect::<Vec<_>>(),
        every_rule_field()
    );
    assert_eq!(d.version, 4);
    for (i, r) in d.rules.iter().enumerate() {
        assert_eq!(r.position, 10 * i as i64);
        assert_eq!(r.meta.version, 2 + i as u64);
        assert_eq!(r.meta.updated_by, "bob");
        assert!(r.meta.created_at >= before && r.meta.created_at <= SystemTime::now());
        assert_eq!(r.meta.created_at, r.meta.updated_at);
    }
    assert_eq!(d.settings.meta.updated_by, "alice");
    // The JSON encoding uses the TOML rule's field names.
    let json = serde_json::to_value(&d.rules[0].rule).unwrap();
    let mut keys: Vec<&str> = json
        .as_object()
        .unwrap()
        .keys()
        .map(|k| k.as_str())
        .collect();
    keys.sort_unstable();
    assert_eq!(
        keys,
        [
            "algorithm",
            "backend",
            "capacity",
            "key",
            "limit",
            "match",
            "mode",
            "name",
            "on_error"
        ]
    );
    assert_eq!(
        d.rules[0].rule.matches["method"],
        MatchValue::Many(vec!["GET".into(), "POST".into()])
    );
    // Validated, the records are the rule file's rules.
    let from_store = d.to_def().unwrap();
    let from_toml = PolicyDef::parse(EVERY_FIELD_TOML, None).unwrap();
    assert_eq!(from_store.rules().len(), from_toml.rules().len());
    for (s, t) in from_store.rules().iter().zip(from_toml.rules()) {
        assert_eq!(s.name(), t.name());
        assert_eq!(s.key(), t.key());
        assert_eq!(s.limit(), t.limit());
        assert_eq!(s.spec(), t.spec());
        assert_eq!(s.backend(), t.backend());
        assert_eq!(s.on_error(), t.on_error());
        assert_eq!(s.mode(), t.mode());
        assert_eq!(s.capacity(), t.capacity());
        assert_eq!(s.stripes(), t.stripes());
        let req = [("path", "/api/x"), ("method", "POST")];
        assert_eq!(s.matches(&req), t.matches(&req));
        let req = [("path", "/api/x"), ("method", "PUT")];
        assert_eq!(s.matches(&req), t.matches(&req));
    }
    assert_eq!(from_store.redis(), from_toml.redis());
    assert_eq!(from_store.state(), from_toml.state());
    assert_eq!(from_store.ipv6_prefix(), from_toml.ipv6_prefix());
}

#[test]
fn a_stale_version_is_refused_and_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let (_, store) = store_in(dir.path());
    let v1 = store
        .create_rule("d", RuleRecord::new("a", "1/s"), None, "ops")
        .unwrap();
    let v2 = store
        .replace_rule(
            "d",
            RuleRecord::new("a", "2/s"),
            None,
            v1.meta.version,
            "ops",
        )
        .unwrap();
    let trail = store.audit(None, None, 100).unwrap().entries.len();
    let stale = store.replace_rule(
        "d",
        RuleRecord::new("a", "3/s"),
        None,
        v1.meta.version,
        "late",
    );
    assert!(
        matches!(stale, Err(StoreError::Stale { current: Some(c), given }) if c == v2.meta.version && given == v1.meta.version),
        "{stale:?}"
    );
    let stale = store.delete_rule("d", "a", v1.meta.version, "late");
    assert!(matches!(stale, Err(StoreError::Stale { .. })), "{stale:?}");
    let exists = store.create_rule("d", RuleRecord::new("a", "4/s"), None, "late");
    assert!(matches!(exists, Err(StoreError::Exists { current }) if current == v2.meta.version));
    let settings = store.put_settings("d", DomainSettings::default(), None, "late");
    assert!(
        matches!(settings, Err(StoreError::Exists { current: 0 })),
        "{settings:?}"
    );
    let settings = store.put_settings("d", DomainSettings::default(), Some(7), "late");
    assert!(matches!(
        settings,
        Err(StoreError::Stale {
            current: Some(0),
            given: 7
        })
    ));
    assert_eq!(store.rule("d", "a").unwrap().unwrap(), v2);
    assert_eq!(store.audit(None, None, 100).unwrap().entries.len(), trail);
    // A version is never given twice: a rule deleted and made again does not
    // take its old version back, so a client holding it cannot overwrite.
    store.delete_rule("d", "a", v2.meta.version, "ops").unwrap();
    let again = store
        .create_rule("d", RuleRecord::new("a", "1/s"), None, "ops")
        .unwrap();
    assert!(again.meta.version > v2.meta.version);

    // Eight writers replace from one version at once: exactly one wins.
    let base = again.meta.version;
    let results: Vec<_> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..8)
            .map(|i| {
                let store = store.clone();
                s.spawn(move || {
                    let r = RuleRecord::new("a", format!("{}/s", i + 10));
                    store.replace_rule("d", r, None, base, &format!("w{i}"))
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let won: Vec<_> = results.iter().filter_map(|r| r.as_ref().ok()).collect();
    assert_eq!(won.len(), 1, "{results:?}");
    assert!(
        results
            .iter()
            .all(|r| matches!(r, Ok(_) | Err(StoreError::Stale { .. })))
    );
    assert_eq!(store.rule("d", "a").unwrap().unwrap(), *won[0]);
}

#[test]
fn an_invalid_write_saves_nothing_and_names_the_field() {
    let dir = tempfile::tempdir().unwrap();
    let (_, store) = store_in(dir.path());
    let mut redis_rule = RuleRecord::new("shared", "5/s");
    redis_rule.backend = Some("redis".into());
    let s = store
        .put_settings("d", every_setting(), None, "ops")
        .unwrap();
    store.create_rule("d", redis_rule, None, "ops").unwrap();
    let snapshot = |store: &Store| {
        (
            store.domain("d").unwrap(),
            store.audit(None, None, 100).unwrap(),
        )
    };
    let before = snapshot(&store);

    let field_of = |e: StoreError| {
        let err = e.invalid().expect("a validation error").clone();
        let d = &err.diagnostics()[0];
        (d.rule.clone(), d.field.clone())
    };
    let bad_limit = store
        .create_rule("d", RuleRecord::new("x", "5/fortnight"), None, "ops")
        .unwrap_err();
    assert_eq!(
        field_of(bad_limit),
        (Some("x".into()), Some("limit".into()))
    );
    let bad_key = store
        .create_rule("d", RuleRecord::new("x", "5/s").key(["IP"]), None, "ops")
        .unwrap_err();
    assert_eq!(field_of(bad_key), (Some("x".into()), Some("key".into())));
    let mut no_limit = RuleRecord::new("x", "1/s");
    no_limit.limit = None;
    let missing = store.create_rule("d", no_limit, None, "ops").unwrap_err();
    assert_eq!(field_of(missing), (Some("x".into()), Some("limit".into())));
    let mut bad_mode = RuleRecord::new("shared", "5/s");
    bad_mode.mode = Some("dry-run".into());
    let version = before.0.as_ref().unwrap().rules[0].meta.version;
    let replaced = store
        .replace_rule("d", bad_mode, None, version, "ops")
        .unwrap_err();
    assert_eq!(
        field_of(replaced),
        (Some("shared".into()), Some("mode".into()))
    );
    // Settings that would leave a rule invalid: no [redis] for a redis rule.
    let no_redis = DomainSettings {
        redis: None,
        ..every_setting()
    };
    let e = store
        .put_settings("d", no_redis, Some(s.meta.version), "ops")
        .unwrap_err();
    assert_eq!(field_of(e).0.as_deref(), Some("shared"));

    assert_eq!(snapshot(&store), before, "nothing saved, nothing audited");
}

#[test]
fn the_audit_trail_keeps_who_when_before_and_after() {
    let dir = tempfile::tempdir().unwrap();
    let (_, store) = store_in(dir.path());
    let t0 = SystemTime::now() - Duration::from_millis(1);
    let a1 = store
        .create_rule("d", RuleRecord::new("a", "1/s"), None, "alice")
        .unwrap();
    let a2 = store
        .replace_rule(
            "d",
            RuleRecord::new("a", "2/s"),
            Some(5),
            a1.meta.version,
            "bob",
        )
        .unwrap();
    let s = store
        .put_settings("d", every_setting(), Some(0), "carol")
        .unwrap();
    store
        .delete_rule("d", "a", a2.meta.version, "dave")
        .unwrap();
    store
        .create_rule("other", RuleRecord::new("z", "1/s"), None, "erin")
        .unwrap();
    let t1 = SystemTime::now();

    let all = store.audit(None, None, 100).unwrap();
    assert_eq!(all.next, None);
    let e = &all.entries;
    let row = |i: usize| {
        (
            e[i].action,
            e[i].by.as_str(),
            e[i].domain.as_str(),
            e[i].rule.as_deref(),
        )
    };
    assert_eq!(row(0), (Action::Create, "alice", "d", Some("a")));
    assert_eq!(row(1), (Action::Replace, "bob", "d", Some("a")));
    assert_eq!(row(2), (Action::Settings, "carol", "d", None));
    assert_eq!(row(3), (Action::Delete, "dave", "d", Some("a")));
    assert_eq!(row(4), (Action::Create, "erin", "other", Some("z")));
    assert!(e.iter().all(|e| e.at >= t0 && e.at <= t1));
    assert!(
        e.windows(2)
            .all(|w| w[0].cursor < w[1].cursor && w[0].at <= w[1].at)
    );
    assert_eq!(e[0].before, None);
    assert_eq!(e[0].after, Some(Record::Rule(a1.clone())));
    assert_eq!(e[1].before, Some(Record::Rule(a1)));
    assert_eq!(e[1].after, Some(Record::Rule(a2.clone())));
    assert!(
        matches!(&e[2].before, Some(Record::Settings(b)) if b.settings == DomainSettings::default())
    );
    assert_eq!(e[2].after, Some(Record::Settings(s)));
    assert_eq!(e[3].before, Some(Record::Rule(a2)));
    assert_eq!(e[3].after, None);
    // One domain's trail.
    let d = store.audit(Some("d"), None, 100).unwrap();
    assert_eq!(d.entries, all.entries[..4]);

    // Pages of two, by cursor: every entry once, in order.
    let mut paged = Vec::new();
    let mut after = None;
    loop {
        let page = store.audit(None, after, 2).unwrap();
        assert!(page.entries.len() <= 2);
        paged.extend(page.entries);
        match page.next {
            Some(c) => after = Some(c),
            None => break,
        }
    }
    assert_eq!(paged, all.entries);
}

#[test]
fn urls_and_schema() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("u.db");
    let a = Store::open(&format!("sqlite:{}", path.display())).unwrap();
    a.create_rule("d", RuleRecord::new("a", "1/s"), None, "ops")
        .unwrap();
    let b = Store::open(&format!("sqlite://{}", path.display())).unwrap();
    assert_eq!(b.domains().unwrap(), ["d"]);
    for (url, scheme) in [
        ("postgres://u:p@h/db", "postgres"),
        ("postgresql://h/db", "postgresql"),
    ] {
        let e = Store::open(url).unwrap_err();
        assert!(matches!(&e, StoreError::Unsupported { scheme: s } if s == scheme));
        assert!(e.to_string().contains(scheme) && e.to_string().contains("not built in yet"));
        assert!(!e.to_string().contains("u:p"), "no password in the message");
    }
    let e = Store::open("mysql://admin:s3cret@db.example:3306/rules").unwrap_err();
    assert_eq!(
        e.to_string(),
        "`mysql://admin:***@db.example:3306/rules` is not a store URL: write sqlite:PATH or sqlite://PATH"
    );
    for url in ["rules.db", "redis://h", "sqlite:", "sqlite://"] {
        assert!(matches!(Store::open(url), Err(StoreError::Url(_))), "{url}");
    }
    // A reader never makes a store where the path was mistyped.
    let missing = format!("sqlite:{}", dir.path().join("nope.db").display());
    assert!(matches!(
        Policy::from_store(&missing, "d"),
        Err(StoreError::Unavailable { .. })
    ));
    assert!(!dir.path().join("nope.db").exists());
    // A domain not in the store is an error at start.
    let url = format!("sqlite:{}", path.display());
    assert!(matches!(
        Policy::from_store(&url, "e"),
        Err(StoreError::NotFound(_))
    ));
    // The WAL journal.
    assert!(dir.path().join("u.db-wal").exists());
    // A store written by a newer version is refused, not misread.
    drop((a, b));
    let conn = rusqlite::Connection::open(&path).unwrap();
    conn.pragma_update(None, "user_version", 99).unwrap();
    drop(conn);
    let e = Store::open(&url).unwrap_err();
    assert!(
        matches!(
            e,
            StoreError::Schema {
                found: 99,
                known: 1
            }
        ),
        "{e}"
    );
}

#[test]
fn two_readers_follow_a_create_and_a_delete_within_a_second() {
    let dir = tempfile::tempdir().unwrap();
    let (url, store) = store_in(dir.path());
    let keep = store
        .create_rule(
            "d",
            RuleRecord::new("keep", "1/hour").key(["ip"]),
            None,
            "ops",
        )
        .unwrap();
    // Both readers at the default poll interval; one lives on another thread.
    let here = Policy::from_store(&url, "d").unwrap();
    let ip = [("ip", "192.0.2.1")];
    assert!(here.check(&ip).allowed());
    assert!(!here.check(&ip).allowed());
    const CHANGES: usize = 8;
    let (to_reader, changes) = mpsc::channel::<(String, bool, Instant)>();
    let (ack, acks) = mpsc::channel::<Option<Duration>>();
    let mut lat = Vec::new();
    std::thread::scope(|s| {
        let url = url.as_str();
        s.spawn(move || {
            let there = Policy::from_store(url, "d").unwrap();
            for (tenant, present, t0) in changes {
                let req = [("tenant", tenant.as_str())];
                let rule = format!("r-{tenant}");
                let seen = wait_for(Duration::from_secs(3), || {
                    in_force(&there, &req, &rule) == present
                });
                ack.send(seen.map(|_| t0.elapsed())).unwrap();
            }
        });
        for i in 0..CHANGES {
            let tenant = format!("t{i}");
            let req = [("tenant", tenant.as_str())];
            let rule = format!("r-{tenant}");
            let record = RuleRecord::new(&rule, "1/hour").matching("tenant", &tenant);
            let made = store.create_rule("d", record, None, "ops").unwrap();
            to_reader
                .send((tenant.clone(), true, Instant::now()))
                .unwrap();
            let mine = wait_for(Duration::from_secs(3), || in_force(&here, &req, &rule));
            lat.push((mine, acks.recv().unwrap()));
            store
                .delete_rule("d", &rule, made.meta.version, "ops")
                .unwrap();
            to_reader
                .send((tenant.clone(), false, Instant::now()))
                .unwrap();
            let mine = wait_for(Duration::from_secs(3), || !in_force(&here, &req, &rule));
            lat.push((mine, acks.recv().unwrap()));
        }
        drop(to_reader);
    });
    for (i, (mine, theirs)) in lat.iter().enumerate() {
        let (mine, theirs) = (
            mine.expect("seen"),
            theirs.expect("seen on the other thread"),
        );
        assert!(mine < Duration::from_secs(1), "change {i}: {mine:?}");
        assert!(theirs < Duration::from_secs(1), "change {i}: {theirs:?}");
    }
    // Sixteen reloads, and the unchanged rule kept its state all along.
    assert!(!here.check(&ip).allowed());
    assert_eq!(store.rule("d", "keep").unwrap().unwrap(), keep);
    assert_eq!(here.reload_count(), (2 * CHANGES as u64, 0));
    assert_eq!(here.last_error(), None);
}

#[test]
fn a_change_that_fails_validation_is_never_applied() {
    let dir = tempfile::tempdir().unwrap();
    let (url, store) = store_in(dir.path());
    store
        .create_rule("d", RuleRecord::new("a", "1/hour"), None, "ops")
        .unwrap();
    let p = Policy::builder().from_store(&url, "d", fast()).unwrap();
    assert!(p.check(&[("k", "v")]).allowed());
    // Written around the store's validation (by hand, or by a newer writer).
    let conn = rusqlite::Connection::open(dir.path().join("rules.db")).unwrap();
    conn.execute_batch(
        r#"UPDATE rules SET rule = '{"name":"a","limit":"1/fortnight"}' WHERE name = 'a';
           UPDATE domains SET version = version + 1;"#,
    )
    .unwrap();
    let seen = wait_for(Duration::from_secs(2), || p.last_error().is_some());
    assert!(seen.is_some());
    let e = p.last_error().unwrap();
    assert!(e.contains("rule `a`, field `limit`"), "{e}");
    assert_eq!(p.reload_count(), (0, 1));
    assert_eq!(p.definition().rules()[0].limit(), "1/hour");
    assert!(
        !p.check(&[("k", "v")]).allowed(),
        "the old rule, its state kept"
    );
    assert_eq!(p.store_reachable(), Some(true));
    // Not tried again until the next change; a good one is applied.
    std::thread::sleep(Duration::from_millis(100));
    assert_eq!(p.reload_count(), (0, 1));
    let v = store.rule("d", "a").unwrap().unwrap().meta.version;
    store
        .replace_rule("d", RuleRecord::new("a", "2/hour"), None, v, "ops")
        .unwrap();
    assert!(wait_for(Duration::from_secs(1), || p.last_error().is_none()).is_some());
    assert_eq!(p.definition().rules()[0].limit(), "2/hour");
}

/// Moves the database away (its WAL files stay: nothing writes meanwhile).
fn move_away(dir: &Path) -> PathBuf {
    let away = dir.join("away.db");
    std::fs::rename(dir.join("rules.db"), &away).unwrap();
    away
}

#[test]
fn an_outage_keeps_the_rules_and_is_reported_until_the_store_is_back() {
    let dir = tempfile::tempdir().unwrap();
    let (url, store) = store_in(dir.path());
    store
        .create_rule("d", RuleRecord::new("a", "2/hour").key(["ip"]), None, "ops")
        .unwrap();
    let p = Policy::builder().from_store(&url, "d", fast()).unwrap();
    let ip = [("ip", "192.0.2.1")];
    assert!(p.check(&ip).allowed());
    assert_eq!(p.store_reachable(), Some(true));
    assert!(p.metrics_text().contains("sluicegate_policy_store_up 1\n"));

    let away = move_away(dir.path());
    assert!(
        wait_for(Duration::from_secs(1), || p.store_reachable()
            == Some(false))
        .is_some()
    );
    let e = p.last_error().unwrap();
    assert!(e.contains("unavailable") && e.contains(&url), "{e}");
    let text = p.metrics_text();
    assert!(text.contains("sluicegate_policy_store_up 0\n"), "{text}");
    assert!(!text.contains("sluicegate_policy_store_errors_total 0\n"));
    // Still enforcing the last rules, state and all.
    assert!(p.check(&ip).allowed());
    assert!(!p.check(&ip).allowed());
    assert_eq!(p.definition().rules().len(), 1);

    std::fs::rename(&away, dir.path().join("rules.db")).unwrap();
    assert!(wait_for(Duration::from_secs(1), || p.store_reachable() == Some(true)).is_some());
    assert!(wait_for(Duration::from_secs(1), || p.last_error().is_none()).is_some());
    assert!(!p.check(&ip).allowed(), "the state survived the outage");
    // And it follows changes again.
    store
        .create_rule("d", RuleRecord::new("b", "1/s"), None, "ops")
        .unwrap();
    assert!(wait_for(Duration::from_secs(1), || p.definition().rules().len() == 2).is_some());
}

#[test]
fn a_snapshot_starts_a_reader_while_the_store_is_down() {
    let dir = tempfile::tempdir().unwrap();
    let (url, store) = store_in(dir.path());
    let snap = dir.path().join("d.json");
    store
        .create_rule("d", RuleRecord::new("a", "1/hour").key(["ip"]), None, "ops")
        .unwrap();
    let first = Policy::builder()
        .from_store(&url, "d", fast().snapshot(&snap))
        .unwrap();
    assert!(snap.exists(), "written after the first load");
    // Rewritten after every good load.
    store
        .create_rule("d", RuleRecord::new("b", "5/hour"), None, "ops")
        .unwrap();
    assert!(
        wait_for(Duration::from_secs(1), || {
            std::fs::read_to_string(&snap).is_ok_and(|t| t.contains("5/hour"))
        })
        .is_some()
    );
    drop(first);

    let away = move_away(dir.path());
    let e = Policy::from_store(&url, "d").unwrap_err();
    assert!(matches!(e, StoreError::Unavailable { .. }), "{e}");
    let other =
        Policy::builder().from_store(&url, "d", fast().snapshot(dir.path().join("none.json")));
    assert!(matches!(other, Err(StoreError::Snapshot(_))));
    let p = Policy::builder()
        .from_store(&url, "d", fast().snapshot(&snap))
        .unwrap();
    let names: Vec<_> = p
        .definition()
        .rules()
        .iter()
        .map(|r| r.name().to_owned())
        .collect();
    assert_eq!(names, ["a", "b"]);
    assert!(p.check(&[("ip", "192.0.2.1")]).allowed());
    assert!(!p.check(&[("ip", "192.0.2.1")]).allowed());
    assert_eq!(p.store_reachable(), Some(false));
    assert!(p.last_error().unwrap().contains("unavailable"));
    // A snapshot of another domain is not used for this one.
    let wrong = Policy::builder().from_store(&url, "e", fast().snapshot(&snap));
    assert!(matches!(wrong, Err(StoreError::Snapshot(m)) if m.contains("not `e`")));

    std::fs::rename(&away, dir.path().join("rules.db")).unwrap();
    assert!(wait_for(Duration::from_secs(1), || p.store_reachable() == Some(true)).is_some());
    assert!(wait_for(Duration::from_secs(1), || p.last_error().is_none()).is_some());
    assert!(!p.check(&[("ip", "192.0.2.1")]).allowed(), "state kept");
}

#[test]
fn a_reader_stopped_follows_no_more() {
    let dir = tempfile::tempdir().unwrap();
    let (url, store) = store_in(dir.path());
    store
        .create_rule("d", RuleRecord::new("a", "1/s"), None, "ops")
        .unwrap();
    let p = Policy::builder().from_store(&url, "d", fast()).unwrap();
    store
        .create_rule("d", RuleRecord::new("b", "1/s"), None, "ops")
        .unwrap();
    assert!(wait_for(Duration::from_secs(1), || p.definition().rules().len() == 2).is_some());
    p.stop_following();
    store
        .create_rule("d", RuleRecord::new("c", "1/s"), None, "ops")
        .unwrap();
    // Ten poll intervals: a running follower would have applied it.
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(p.definition().rules().len(), 2);
    assert_eq!(p.reload_count(), (1, 0));
}
