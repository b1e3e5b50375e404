//! The rule store's conformance suite (feature `store`; `postgres` adds the
//! PostgreSQL runs): every test body below runs once per backend, on a real
//! SQLite file and on a real PostgreSQL schema (`per_backend!`), so both keep
//! one behaviour: every field round trips and means what the same TOML means;
//! optimistic concurrency; invalid writes save nothing; the audit trail;
//! migrations (concurrent starts, a newer schema refused); import and export;
//! readers (`Policy::from_store`) follow a create and a delete within 1 s and
//! never apply an invalid change. The outages are in `store_outage.rs`.
//! PostgreSQL's own (URLs, TLS, passwords never shown, LISTEN/NOTIFY) are in
//! `mod postgres_only` below. A few seconds in all.

mod store_support;

use std::sync::mpsc;
use std::time::{Duration, Instant, SystemTime};

use sluicegate_policy::store::{
    Action, Defaults, DomainSettings, MatchValue, Record, RedisTable, RuleRecord, SharedTable,
    StateTable, Store, StoreError,
};
use sluicegate_policy::{Policy, PolicyDef};
use store_support::{Fixture, Kind, fast, in_force, wait_for};

per_backend!(
    every_field_round_trips_and_means_what_the_toml_means,
    a_stale_version_is_refused_and_changes_nothing,
    an_invalid_write_saves_nothing_and_names_the_field,
    the_audit_trail_keeps_who_when_before_and_after,
    rules_sort_by_position_then_name_bytewise,
    a_newer_schema_is_refused,
    concurrent_starts_make_the_schema_once,
    two_readers_follow_a_create_and_a_delete_within_a_second,
    a_change_that_fails_validation_is_never_applied,
    a_reader_stopped_follows_no_more,
    export_then_import_gives_the_same_rules,
    an_import_replaces_the_domain_in_one_audited_write,
    an_invalid_import_saves_nothing_and_names_file_line_and_rule,
);

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
        shared: Some(SharedTable {
            path: "sluicegate-store-test".into(),
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

[shared]
path = "sluicegate-store-test"

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

fn every_field_round_trips_and_means_what_the_toml_means(f: &Fixture) {
    let store = f.store();
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
    let again = f.store();
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
    assert_eq!(from_store.shared(), from_toml.shared());
    assert_eq!(from_store.ipv6_prefix(), from_toml.ipv6_prefix());
}

fn a_stale_version_is_refused_and_changes_nothing(f: &Fixture) {
    let store = f.store();
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

fn an_invalid_write_saves_nothing_and_names_the_field(f: &Fixture) {
    let store = f.store();
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

fn the_audit_trail_keeps_who_when_before_and_after(f: &Fixture) {
    let store = f.store();
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

/// Rules sort by position, then by name as bytes (PostgreSQL's collation
/// would put `B` after `a`; the store sorts as SQLite and Rust do).
fn rules_sort_by_position_then_name_bytewise(f: &Fixture) {
    let store = f.store();
    for name in ["b", "a", "B", "_", "é"] {
        store
            .create_rule("d", RuleRecord::new(name, "1/s"), Some(1), "ops")
            .unwrap();
    }
    store
        .create_rule("d", RuleRecord::new("z", "1/s"), Some(0), "ops")
        .unwrap();
    let names: Vec<String> = store
        .rules("d")
        .unwrap()
        .into_iter()
        .map(|r| r.rule.name)
        .collect();
    assert_eq!(names, ["z", "B", "_", "a", "b", "é"]);
    let p = Policy::from_store(&f.url, "d").unwrap();
    let def = p.definition();
    let in_policy: Vec<&str> = def.rules().iter().map(|r| r.name()).collect();
    assert_eq!(in_policy, names);
    for d in ["b", "B", "a"] {
        store
            .put_settings(d, DomainSettings::default(), None, "ops")
            .ok();
    }
    assert_eq!(store.domains().unwrap(), ["B", "a", "b", "d"]);
}

/// A store written by a newer version is refused, not misread.
fn a_newer_schema_is_refused(f: &Fixture) {
    let store = f.store();
    store
        .create_rule("d", RuleRecord::new("a", "1/s"), None, "ops")
        .unwrap();
    drop(store);
    f.raw(
        "PRAGMA user_version = 99",
        "UPDATE sluicegate_schema SET version = 99",
    );
    let e = Store::open(&f.url).unwrap_err();
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
    assert!(matches!(
        Policy::from_store(&f.url, "d"),
        Err(StoreError::Schema { .. })
    ));
}

/// Eight processes' worth of connections open a new store at once: one makes
/// the schema, the others wait for it (no error, no table made twice), and
/// all write through it.
fn concurrent_starts_make_the_schema_once(f: &Fixture) {
    let barrier = std::sync::Barrier::new(8);
    let stores: Vec<Store> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..8)
            .map(|_| {
                s.spawn(|| {
                    barrier.wait();
                    Store::open(&f.url)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap().unwrap_or_else(|e| panic!("{e}")))
            .collect()
    });
    for (i, store) in stores.iter().enumerate() {
        store
            .create_rule("d", RuleRecord::new(format!("r{i}"), "1/s"), None, "ops")
            .unwrap();
    }
    assert_eq!(stores[0].rules("d").unwrap().len(), 8);
    assert_eq!(stores[7].version("d").unwrap(), Some(8));
}

fn two_readers_follow_a_create_and_a_delete_within_a_second(f: &Fixture) {
    let (url, store) = (&f.url, f.store());
    let keep = store
        .create_rule(
            "d",
            RuleRecord::new("keep", "1/hour").key(["ip"]),
            None,
            "ops",
        )
        .unwrap();
    // Both readers at the default poll interval; one lives on another thread.
    let here = Policy::from_store(url, "d").unwrap();
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
    let mut all = Vec::new();
    for (i, (mine, theirs)) in lat.iter().enumerate() {
        let (mine, theirs) = (
            mine.expect("seen"),
            theirs.expect("seen on the other thread"),
        );
        assert!(mine < Duration::from_secs(1), "change {i}: {mine:?}");
        assert!(theirs < Duration::from_secs(1), "change {i}: {theirs:?}");
        all.extend([mine, theirs]);
    }
    // PostgreSQL notifies the readers: a change is in force well before the
    // next poll (every 200 ms) would have found it.
    if f.kind == Kind::Postgres {
        all.sort_unstable();
        let median = all[all.len() / 2];
        assert!(
            median < Duration::from_millis(100),
            "median {median:?}: {all:?}"
        );
    }
    // Sixteen reloads, and the unchanged rule kept its state all along.
    assert!(!here.check(&ip).allowed());
    assert_eq!(store.rule("d", "keep").unwrap().unwrap(), keep);
    assert_eq!(here.reload_count(), (2 * CHANGES as u64, 0));
    assert_eq!(here.last_error(), None);
}

fn a_change_that_fails_validation_is_never_applied(f: &Fixture) {
    let (url, store) = (&f.url, f.store());
    store
        .create_rule("d", RuleRecord::new("a", "1/hour"), None, "ops")
        .unwrap();
    let p = Policy::builder().from_store(url, "d", fast()).unwrap();
    assert!(p.check(&[("k", "v")]).allowed());
    // Written around the store's validation (by hand, or by a newer writer);
    // on PostgreSQL without a NOTIFY, so the poll finds it.
    f.raw(
        r#"UPDATE rules SET rule = '{"name":"a","limit":"1/fortnight"}' WHERE name = 'a';
           UPDATE domains SET version = version + 1;"#,
        r#"UPDATE sluicegate_rules SET rule = '{"name":"a","limit":"1/fortnight"}' WHERE name = 'a';
           UPDATE sluicegate_domains SET version = version + 1;"#,
    );
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

fn a_reader_stopped_follows_no_more(f: &Fixture) {
    let (url, store) = (&f.url, f.store());
    store
        .create_rule("d", RuleRecord::new("a", "1/s"), None, "ops")
        .unwrap();
    let p = Policy::builder().from_store(url, "d", fast()).unwrap();
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

/// The domain exported as TOML and imported into another domain (and into
/// itself) gives the same records: settings, every rule field, order.
fn export_then_import_gives_the_same_rules(f: &Fixture) {
    let store = f.store();
    store
        .put_settings("d", every_setting(), None, "alice")
        .unwrap();
    for (i, r) in every_rule_field().into_iter().enumerate() {
        store
            .create_rule("d", r, Some(10 * i as i64), "bob")
            .unwrap();
    }
    let mut odd = RuleRecord::new("quote \" back\\slash\ttab é 名", "3/minute")
        .matching("header:x-api-key", "k \"1\"")
        .matching_any("path", ["/a b", "/c\\d"]);
    odd.key = Some(vec!["header:x-forwarded-for".into()]);
    store.create_rule("d", odd, Some(5), "bob").unwrap();
    let before = store.domain("d").unwrap().unwrap();

    let text = store.export_toml("d").unwrap();
    assert!(
        text.starts_with("# Domain \"d\" of a sluicegate rule store, at version 5."),
        "{text}"
    );
    // The text is a rule file: the policy loader reads it as the store's rules.
    let def = PolicyDef::parse(&text, Some("export.toml")).unwrap();
    let names: Vec<&str> = def.rules().iter().map(|r| r.name()).collect();
    let stored: Vec<&str> = before.rules.iter().map(|r| r.rule.name.as_str()).collect();
    assert_eq!(names, stored);

    // Into another domain: the same records.
    let s = store
        .import_toml("e", &text, Some("export.toml"), "carol")
        .unwrap();
    assert_eq!((s.settings, s.created.len(), s.deleted.len()), (true, 4, 0));
    let e = store.domain("e").unwrap().unwrap();
    assert_eq!(e.to_file(), before.to_file());
    assert_eq!(e.settings.settings, every_setting());
    assert!(
        e.rules
            .iter()
            .all(|r| r.meta.updated_by == "carol" && r.meta.version == 1)
    );
    assert_eq!(
        store
            .export_toml("e")
            .unwrap()
            .replace("\"e\"", "\"d\"")
            .replace("version 1.", "version 5."),
        text
    );
    // Into itself: nothing changes, nothing is written.
    let trail = store.audit(None, None, 1000).unwrap().entries.len();
    let s = store.import_toml("d", &text, None, "dave").unwrap();
    assert!(s.is_unchanged(), "{s:?}");
    assert_eq!((s.version, s.unchanged.len()), (5, 4));
    assert_eq!(store.domain("d").unwrap().unwrap(), before);
    assert_eq!(store.audit(None, None, 1000).unwrap().entries.len(), trail);
    // Through another store of the other backend's kind: the file is the file.
    let other = Fixture::sqlite();
    let other_store = other.store();
    other_store.import_toml("d", &text, None, "erin").unwrap();
    assert_eq!(
        other_store
            .export_toml("d")
            .unwrap()
            .replace("version 1.", "version 5."),
        text
    );
}

/// An import: rules made, replaced (fields or place), deleted and left alone,
/// the settings replaced, in one write (one version) audited as `import`; a
/// reader applies it at once, whole.
fn an_import_replaces_the_domain_in_one_audited_write(f: &Fixture) {
    let store = f.store();
    let keep = store
        .create_rule(
            "d",
            RuleRecord::new("keep", "1/hour").key(["ip"]),
            None,
            "ops",
        )
        .unwrap();
    store
        .create_rule("d", RuleRecord::new("change", "1/s"), None, "ops")
        .unwrap();
    store
        .create_rule("d", RuleRecord::new("drop", "1/s"), None, "ops")
        .unwrap();
    store
        .create_rule("d", RuleRecord::new("move", "1/s"), None, "ops")
        .unwrap();
    let p = Policy::builder().from_store(&f.url, "d", fast()).unwrap();
    let ip = [("ip", "192.0.2.1")];
    assert!(p.check(&ip).allowed());
    let cursor = store
        .audit(None, None, 1000)
        .unwrap()
        .entries
        .last()
        .unwrap()
        .cursor;

    // `backend = "local"` is the default: the settings change, no rule's meaning.
    let text = r#"
[defaults]
backend = "local"

[[rule]]
name = "move"
limit = "1/s"

[[rule]]
name = "keep"
key = ["ip"]
limit = "1/hour"

[[rule]]
name = "change"
limit = "2/s"

[[rule]]
name = "new"
limit = "3/s"
"#;
    let s = store
        .import_toml("d", text, Some("rules.toml"), "importer")
        .unwrap();
    assert!(s.settings);
    assert_eq!(s.created, ["new"]);
    // `move` keeps its place (it still sorts first); `keep` takes a new one.
    assert_eq!(s.replaced, ["keep", "change"]);
    assert_eq!(s.unchanged, ["move"]);
    assert_eq!(s.deleted, ["drop"]);
    assert_eq!(s.version, 5);
    let d = store.domain("d").unwrap().unwrap();
    let names: Vec<&str> = d.rules.iter().map(|r| r.rule.name.as_str()).collect();
    assert_eq!(names, ["move", "keep", "change", "new"]);
    let versions: Vec<u64> = d.rules.iter().map(|r| r.meta.version).collect();
    assert_eq!(versions, [4, 5, 5, 5]);
    let kept = &d.rules[1];
    assert_eq!(
        (kept.rule.clone(), kept.meta.created_at),
        (keep.rule, keep.meta.created_at)
    );
    let trail = store.audit(None, Some(cursor), 1000).unwrap().entries;
    assert_eq!(trail.len(), 5, "{trail:?}");
    assert!(
        trail
            .iter()
            .all(|e| e.action == Action::Import && e.by == "importer")
    );
    let rules: Vec<Option<&str>> = trail.iter().map(|e| e.rule.as_deref()).collect();
    assert_eq!(
        rules,
        [
            None,
            Some("drop"),
            Some("keep"),
            Some("change"),
            Some("new")
        ]
    );
    assert!(trail[1].after.is_none() && trail[4].before.is_none());

    // One reload, and the rule whose place alone changed kept its state.
    let new = [("path", "/")];
    assert!(wait_for(Duration::from_secs(1), || in_force(&p, &new, "new")).is_some());
    assert_eq!(p.reload_count(), (1, 0));
    assert!(!p.check(&ip).allowed(), "`keep` kept its state");

    // The same file again: nothing to do.
    let again = store
        .import_toml("d", text, Some("rules.toml"), "importer")
        .unwrap();
    assert!(again.is_unchanged());
    assert_eq!(again.unchanged, ["move", "keep", "change", "new"]);
    // An empty file empties the domain (its settings too).
    let s = store.import_toml("d", "", None, "importer").unwrap();
    assert_eq!((s.deleted.len(), s.settings), (4, true));
    let d = store.domain("d").unwrap().unwrap();
    assert!(d.rules.is_empty() && d.settings.settings == DomainSettings::default());
}

fn an_invalid_import_saves_nothing_and_names_file_line_and_rule(f: &Fixture) {
    let store = f.store();
    store
        .create_rule("d", RuleRecord::new("a", "1/s"), None, "ops")
        .unwrap();
    let before = (
        store.domain("d").unwrap(),
        store.audit(None, None, 100).unwrap(),
    );
    let cases = [
        (
            "[[rule]]\nname = \"b\"\nlimit = \"5/fortnight\"\n",
            "rules.toml:3:12: error: rule `b`: bad limit",
        ),
        ("[[rule]]\nname = \"b\"\n", "rules.toml:1:1: error:"),
        ("[[rule]\nname = \"b\"\n", "rules.toml:1:"),
        (
            "[[rule]]\nname = \"b\"\nlimit = \"1/s\"\nbackend = \"redis\"\n",
            "rules.toml:4:11: error: rule `b`: backend `redis` needs a [redis] table",
        ),
        (
            "[[rule]]\nname = \"b\"\nlimit = \"1/s\"\nshape = 1\n",
            "rules.toml:4:1: error:",
        ),
        (
            "[[rule]]\nname = \"b\"\nlimit = \"1/s\"\n[[rule]]\nname = \"b\"\nlimit = \"2/s\"\n",
            "rules.toml:5:",
        ),
    ];
    for (text, shown) in cases {
        let e = store
            .import_toml("d", text, Some("rules.toml"), "ops")
            .unwrap_err();
        assert!(e.invalid().is_some(), "{e}");
        assert!(e.to_string().contains(shown), "{text:?}: {e}");
    }
    assert!(
        store
            .import_toml("new", "[[rule]]\nname = \"x\"\n", None, "ops")
            .is_err()
    );
    assert_eq!(store.domains().unwrap(), ["d"]);
    assert_eq!(
        (
            store.domain("d").unwrap(),
            store.audit(None, None, 100).unwrap()
        ),
        before
    );
}

mod sqlite_only {
    use super::*;

    #[test]
    fn urls() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("u.db");
        let a = Store::open(&format!("sqlite:{}", path.display())).unwrap();
        a.create_rule("d", RuleRecord::new("a", "1/s"), None, "ops")
            .unwrap();
        let b = Store::open(&format!("sqlite://{}", path.display())).unwrap();
        assert_eq!(b.domains().unwrap(), ["d"]);
        let e = Store::open("mysql://admin:s3cret@db.example:3306/rules").unwrap_err();
        assert_eq!(
            e.to_string(),
            "`mysql://admin:***@db.example:3306/rules` is not a store URL: write sqlite:PATH, sqlite://PATH or postgres://USER@HOST/DATABASE"
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
    }

    #[cfg(not(feature = "postgres"))]
    #[test]
    fn postgres_urls_need_the_feature() {
        for (url, scheme) in [
            ("postgres://u:p@h/db", "postgres"),
            ("postgresql://h/db", "postgresql"),
        ] {
            let e = Store::open(url).unwrap_err();
            assert!(matches!(&e, StoreError::Unsupported { scheme: s } if s == scheme));
            assert!(e.to_string().contains("`postgres` feature"), "{e}");
            assert!(!e.to_string().contains("u:p"), "no password in the message");
        }
    }
}

/// PostgreSQL's own: URLs and their parameters, `sslmode` against a server
/// with TLS (a throwaway CA; its certificate names 127.0.0.1 only), passwords
/// never shown, the Unix socket, and changes pushed by NOTIFY.
#[cfg(feature = "postgres")]
mod postgres_only {
    use super::*;
    use store_support::{env, postgres_url, with_param};

    /// `url` reaches the test database: a store opens and answers.
    fn opens(url: &str) -> Result<(), StoreError> {
        Store::open(url)?.domains().map(drop)
    }

    #[test]
    fn sslmode_is_honoured() {
        if postgres_url().is_none() {
            return;
        }
        // The role `sluicegate_tls` may only connect with TLS.
        let base = env("SLUICEGATE_TEST_POSTGRES_TLS_URL");
        let ca = env("SLUICEGATE_TEST_POSTGRES_CA");
        let other = env("SLUICEGATE_TEST_POSTGRES_OTHER_CA");
        let url = |params: &str| with_param(&base, params);
        // Without TLS: refused by the server, so the others did use TLS.
        let e = opens(&url("sslmode=disable")).unwrap_err();
        assert!(e.to_string().contains("no encryption"), "{e}");
        // prefer (also the default) and require: TLS, the certificate not checked.
        opens(&base).unwrap();
        opens(&url("sslmode=prefer")).unwrap();
        opens(&url("sslmode=require")).unwrap();
        // verify-ca: the chain checked, not the name (`localhost` is not in
        // the certificate).
        opens(&url(&format!("sslmode=verify-ca&sslrootcert={ca}"))).unwrap();
        let localhost = base.replace("127.0.0.1", "localhost");
        opens(&with_param(
            &localhost,
            &format!("sslmode=verify-ca&sslrootcert={ca}"),
        ))
        .unwrap();
        let e = opens(&url(&format!("sslmode=verify-ca&sslrootcert={other}"))).unwrap_err();
        assert!(matches!(e, StoreError::Unavailable { .. }), "{e}");
        assert!(
            format!("{e:?}").to_lowercase().contains("unknownissuer"),
            "{e:?}"
        );
        // require with a root certificate given is verify-ca, as in libpq.
        assert!(opens(&url(&format!("sslmode=require&sslrootcert={other}"))).is_err());
        opens(&url(&format!("sslmode=require&sslrootcert={ca}"))).unwrap();
        // verify-full: the name too.
        opens(&url(&format!("sslmode=verify-full&sslrootcert={ca}"))).unwrap();
        let e = opens(&with_param(
            &localhost,
            &format!("sslmode=verify-full&sslrootcert={ca}"),
        ))
        .unwrap_err();
        assert!(
            e.to_string().contains("certificate not valid for name"),
            "{e}"
        );
        // The system's roots do not know the throwaway CA.
        assert!(opens(&url("sslmode=verify-full")).is_err());
        // A reader over TLS follows changes as any other.
        let full = url(&format!("sslmode=verify-full&sslrootcert={ca}"));
        let store = Store::open(&full).unwrap();
        let domain = format!("tls-{}", std::process::id());
        store
            .create_rule(&domain, RuleRecord::new("a", "1/s"), None, "ops")
            .unwrap();
        let p = Policy::builder()
            .from_store(&full, &domain, fast())
            .unwrap();
        store
            .create_rule(&domain, RuleRecord::new("b", "1/s"), None, "ops")
            .unwrap();
        assert!(wait_for(Duration::from_secs(1), || p.definition().rules().len() == 2).is_some());
    }

    #[test]
    fn bad_parameters_are_named_and_passwords_never_shown() {
        let cases = [
            (
                "postgres://u:pw@h/db?sslmode=sometimes",
                "sslmode `sometimes`",
            ),
            (
                "postgres://u:pw@h/db?sslmode=verify-ca&sslrootcert=/nonexistent.pem",
                "sslrootcert `/nonexistent.pem`",
            ),
            (
                "postgres://u:pw@h/db?sslmode=require&sslcert=/a.pem",
                "sslcert and sslkey go together",
            ),
            ("postgres://u:pw@h/db?frobnicate=1", "frobnicate"),
            ("postgresql://u:pw@h:notaport/db", "port"),
        ];
        for (url, shown) in cases {
            let e = Store::open(url).unwrap_err();
            assert!(matches!(e, StoreError::UrlParam { .. }), "{url}: {e:?}");
            let text = e.to_string();
            assert!(text.contains(shown), "{url}: {text}");
            assert!(
                !text.contains("pw@") && text.contains("u:***@"),
                "{url}: {text}"
            );
            assert!(!format!("{e:?}").contains(":pw@"), "{e:?}");
        }
        // Refused by the server: the wrong password is not in the message.
        let Some(_) = postgres_url() else { return };
        let good = env("SLUICEGATE_TEST_POSTGRES_PASSWORD_URL");
        opens(&good).unwrap();
        let password = good.split(':').nth(2).unwrap().split('@').next().unwrap();
        let wrong = good.replace(password, "not-the-password");
        let e = opens(&wrong).unwrap_err();
        let text = format!("{e} {e:?}");
        assert!(text.contains("password authentication failed"), "{text}");
        assert!(!text.contains("not-the-password"), "{text}");
        let e = Policy::from_store(&wrong, "d").unwrap_err();
        assert!(!e.to_string().contains("not-the-password"), "{e}");
        let store = Store::open(&good).unwrap();
        assert!(!format!("{store:?}").contains(password));
    }

    #[test]
    fn a_unix_socket_and_a_reader_that_is_not_a_writer() {
        let Some(base) = postgres_url() else { return };
        let socket = env("SLUICEGATE_TEST_POSTGRES_SOCKET_URL");
        let domain = format!("socket-{}", std::process::id());
        let store = Store::open(&socket).unwrap();
        store
            .create_rule(&domain, RuleRecord::new("a", "1/s"), None, "ops")
            .unwrap();
        // The same database over TCP.
        assert!(
            Store::open(&base)
                .unwrap()
                .domain(&domain)
                .unwrap()
                .is_some()
        );
        // A reader makes no store where there is none (a schema without the
        // store's tables).
        let empty = Fixture::postgres().unwrap();
        let e = Policy::from_store(&empty.url, "d").unwrap_err();
        assert!(e.to_string().contains("holds no rule store"), "{e}");
        assert!(matches!(e, StoreError::Unavailable { .. }));
    }

    /// A reader polling once an hour still follows within a second: the
    /// writer's NOTIFY wakes it. A change written without NOTIFY waits for
    /// the poll.
    #[test]
    fn notify_wakes_a_reader_at_once() {
        let Some(f) = Fixture::postgres() else { return };
        let store = f.store();
        store
            .create_rule("d", RuleRecord::new("a", "1/s"), None, "ops")
            .unwrap();
        let hourly =
            sluicegate_policy::store::FollowOptions::new().poll_interval(Duration::from_secs(3600));
        let p = Policy::builder().from_store(&f.url, "d", hourly).unwrap();
        let other = Policy::builder()
            .from_store(
                &f.url,
                "d",
                sluicegate_policy::store::FollowOptions::new()
                    .poll_interval(Duration::from_secs(3600)),
            )
            .unwrap();
        // Let both reach their LISTEN (done at the reader's start).
        std::thread::sleep(Duration::from_millis(200));
        for i in 0..5 {
            let name = format!("r{i}");
            let start = Instant::now();
            store
                .create_rule("d", RuleRecord::new(&name, "1/s"), None, "ops")
                .unwrap();
            let n = i + 2;
            let seen = wait_for(Duration::from_secs(1), || {
                p.definition().rules().len() == n && other.definition().rules().len() == n
            });
            assert!(seen.is_some(), "change {i} not seen within 1 s");
            assert!(
                start.elapsed() < Duration::from_millis(500),
                "{:?}",
                start.elapsed()
            );
        }
        // A change in another domain wakes nobody here; no reload.
        store
            .create_rule("elsewhere", RuleRecord::new("z", "1/s"), None, "ops")
            .unwrap();
        std::thread::sleep(Duration::from_millis(100));
        assert_eq!(p.reload_count(), (5, 0));
        // Without NOTIFY (a hand's UPDATE): not seen before the next poll.
        f.raw(
            "",
            r#"UPDATE sluicegate_rules SET rule = '{"name":"a","limit":"2/s"}' WHERE name = 'a';
               UPDATE sluicegate_domains SET version = version + 1 WHERE name = 'd';"#,
        );
        std::thread::sleep(Duration::from_millis(300));
        assert_eq!(p.definition().rules()[0].limit(), "1/s");
    }
}
