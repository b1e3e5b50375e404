//! Store outages, per backend: readers (`Policy::from_store`) keep enforcing
//! the last good rules, state and all, while the store is down, report it
//! (`store_reachable`, `last_error`, the `sluicegate_policy_store_up` metric),
//! and follow changes again once it is back; a snapshot starts a reader while
//! the store is down. SQLite's outage is its file moved away; PostgreSQL's is
//! the server stopped (`SLUICEGATE_TEST_POSTGRES_CTL stop`) and started again,
//! so this binary runs alone (cargo runs test binaries one after another) and
//! its PostgreSQL tests one at a time.

mod store_support;

use std::path::PathBuf;
use std::time::Duration;

use sluicegate_policy::Policy;
use sluicegate_policy::store::{RuleRecord, StoreError};
use store_support::{Fixture, Kind, Server, fast, wait_for};

per_backend!(
    an_outage_keeps_the_rules_and_is_reported_until_the_store_is_back,
    a_snapshot_starts_a_reader_while_the_store_is_down,
);

/// Takes the store down; `up` brings it back.
struct Outage<'a> {
    f: &'a Fixture,
    server: Option<Server>,
    away: Option<PathBuf>,
}

impl<'a> Outage<'a> {
    fn new(f: &'a Fixture) -> Outage<'a> {
        Outage {
            f,
            server: (f.kind == Kind::Postgres).then(Server::take),
            away: None,
        }
    }

    fn down(&mut self) {
        match &self.server {
            Some(s) => s.stop(),
            None => {
                // Moved away (its WAL files stay: nothing writes meanwhile).
                let away = self.f.path("away.db");
                std::fs::rename(self.f.path("rules.db"), &away).unwrap();
                self.away = Some(away);
            }
        }
    }

    fn up(&mut self) {
        match &self.server {
            Some(s) => s.start(),
            None => {
                let away = self.away.take().unwrap();
                std::fs::rename(away, self.f.path("rules.db")).unwrap();
            }
        }
    }
}

/// How long a reader may take to see the store down or back: a poll (20 ms)
/// plus, for PostgreSQL, a connection attempt or the server's start.
const NOTICE: Duration = Duration::from_secs(5);

fn an_outage_keeps_the_rules_and_is_reported_until_the_store_is_back(f: &Fixture) {
    let mut outage = Outage::new(f);
    let store = f.store();
    store
        .create_rule("d", RuleRecord::new("a", "2/hour").key(["ip"]), None, "ops")
        .unwrap();
    let p = Policy::builder().from_store(&f.url, "d", fast()).unwrap();
    let ip = [("ip", "192.0.2.1")];
    assert!(p.check(&ip).allowed());
    assert_eq!(p.store_reachable(), Some(true));
    assert!(p.metrics_text().contains("sluicegate_policy_store_up 1\n"));

    outage.down();
    assert!(wait_for(NOTICE, || p.store_reachable() == Some(false)).is_some());
    let e = p.last_error().unwrap();
    let shown = sluicegate_policy::store::redact(&f.url);
    assert!(e.contains("unavailable") && e.contains(&shown), "{e}");
    let text = p.metrics_text();
    assert!(text.contains("sluicegate_policy_store_up 0\n"), "{text}");
    assert!(!text.contains("sluicegate_policy_store_errors_total 0\n"));
    // Still enforcing the last rules, state and all.
    assert!(p.check(&ip).allowed());
    assert!(!p.check(&ip).allowed());
    assert_eq!(p.definition().rules().len(), 1);
    // A write fails while the server is down, and says why (a SQLite store
    // open before the move still writes to the moved file).
    if f.kind == Kind::Postgres {
        let w = store.create_rule("d", RuleRecord::new("x", "1/s"), None, "ops");
        assert!(matches!(w, Err(StoreError::Unavailable { .. })), "{w:?}");
    }

    outage.up();
    assert!(wait_for(NOTICE, || p.store_reachable() == Some(true)).is_some());
    assert!(wait_for(NOTICE, || p.last_error().is_none()).is_some());
    assert!(!p.check(&ip).allowed(), "the state survived the outage");
    // And it follows changes again (the writer's connection made anew too),
    // within a second.
    store
        .create_rule("d", RuleRecord::new("b", "1/s"), None, "ops")
        .unwrap();
    let seen = wait_for(Duration::from_secs(1), || p.definition().rules().len() == 2);
    assert!(
        seen.is_some(),
        "the change after the outage was not followed"
    );
    assert_eq!(p.reload_count().1, 0);
}

fn a_snapshot_starts_a_reader_while_the_store_is_down(f: &Fixture) {
    let mut outage = Outage::new(f);
    let store = f.store();
    let snap = f.path("d.json");
    store
        .create_rule("d", RuleRecord::new("a", "1/hour").key(["ip"]), None, "ops")
        .unwrap();
    let first = Policy::builder()
        .from_store(&f.url, "d", fast().snapshot(&snap))
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

    outage.down();
    let e = Policy::from_store(&f.url, "d").unwrap_err();
    assert!(matches!(e, StoreError::Unavailable { .. }), "{e}");
    let other = Policy::builder().from_store(&f.url, "d", fast().snapshot(f.path("none.json")));
    assert!(matches!(other, Err(StoreError::Snapshot(_))));
    let p = Policy::builder()
        .from_store(&f.url, "d", fast().snapshot(&snap))
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
    let wrong = Policy::builder().from_store(&f.url, "e", fast().snapshot(&snap));
    assert!(matches!(wrong, Err(StoreError::Snapshot(m)) if m.contains("not `e`")));

    outage.up();
    assert!(wait_for(NOTICE, || p.store_reachable() == Some(true)).is_some());
    assert!(wait_for(NOTICE, || p.last_error().is_none()).is_some());
    assert!(!p.check(&[("ip", "192.0.2.1")]).allowed(), "state kept");
    store
        .create_rule("d", RuleRecord::new("c", "5/hour"), None, "ops")
        .unwrap();
    assert!(wait_for(Duration::from_secs(1), || p.definition().rules().len() == 3).is_some());
}
