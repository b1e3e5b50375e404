//! The factory seam for Redis-backed rules and their `on_error`; shadow rules never
//! deny; striped keyless rules; IPv6 keys grouped by /64.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use sluicegate::{AnyLimiter, Outcome, Spec};
use sluicegate_policy::{
    BackendError, Code, Policy, RedisSettings, RemoteFactory, RemoteLimiter, RuleDef,
};

mod common;
use common::valid_policy;

/// A "remote" limiter in this process that fails while `down` is set.
struct Flaky {
    inner: AnyLimiter<()>,
    down: Arc<AtomicBool>,
}

impl RemoteLimiter for Flaky {
    fn check_n(&self, _key: &str, n: u64, consume: bool) -> Result<Outcome, BackendError> {
        if self.down.load(Ordering::SeqCst) {
            return Err(BackendError("connection refused".into()));
        }
        let r = if consume {
            self.inner.check_n_at(n, 0)
        } else {
            self.inner.peek_n_at(n, 0)
        };
        r.map_err(|e| BackendError(e.to_string()))
    }
    fn set_spec(&self, spec: &Spec) -> Result<(), BackendError> {
        self.inner
            .set_spec(spec)
            .map_err(|e| BackendError(e.to_string()))
    }
}

struct Factory(Arc<AtomicBool>);

impl RemoteFactory for Factory {
    fn build(
        &self,
        rule: &RuleDef,
        redis: &RedisSettings,
    ) -> Result<Box<dyn RemoteLimiter>, BackendError> {
        assert_eq!(redis.url, "redis://127.0.0.1:6379");
        let inner =
            AnyLimiter::with_clock(rule.spec(), ()).map_err(|e| BackendError(e.to_string()))?;
        Ok(Box::new(Flaky {
            inner,
            down: self.0.clone(),
        }))
    }
}

fn policy(on_error: &str, down: &Arc<AtomicBool>) -> Policy {
    let text = format!(
        "[redis]\nurl = \"redis://127.0.0.1:6379\"\n[[rule]]\nname = \"r\"\nlimit = \"2/minute\"\nbackend = \"hybrid\"\non_error = \"{on_error}\"\n"
    );
    Policy::builder()
        .remote(Factory(down.clone()))
        .from_toml(&text)
        .unwrap()
}

#[test]
fn on_error_open_closed_local() {
    let req = [("ip", "192.0.2.1")];
    let down = Arc::new(AtomicBool::new(false));
    let p = policy("closed", &down);
    assert!(p.check_n_at(&req, 1, 0).allowed());
    down.store(true, Ordering::SeqCst);
    let d = p.check_n_at(&req, 1, 0);
    assert!(!d.allowed());
    assert!(d.rules().next().unwrap().backend_error);
    assert_eq!(p.metrics_at(0)[0].backend_errors, 1);

    let p = policy("open", &down);
    for _ in 0..5 {
        assert!(p.check_n_at(&req, 1, 0).allowed());
    }
    // Local: the rule's own limit in this process.
    let p = policy("local", &down);
    assert!(p.check_n_at(&req, 2, 0).allowed());
    assert!(!p.check_n_at(&req, 1, 0).allowed());
    assert_eq!(p.metrics_at(0)[0].backend_errors, 2);
    // Back up: the remote decides again.
    down.store(false, Ordering::SeqCst);
    let d = p.check_n_at(&req, 2, 0);
    assert!(d.allowed() && !d.rules().next().unwrap().backend_error);
}

#[test]
fn redis_rules_need_a_factory() {
    let text = "[redis]\nurl = \"redis://127.0.0.1:6379\"\n\n[[rule]]\nname = \"r\"\nlimit = \"2/minute\"\nbackend = \"redis\"\n";
    let err = Policy::from_toml(text).unwrap_err();
    let d = &err.diagnostics()[0];
    assert_eq!(
        (d.code, d.line, d.rule.as_deref()),
        (Code::Build, 5, Some("r"))
    );
    assert!(d.message.contains("PolicyBuilder::remote"));
}

#[test]
fn shadow_never_denies_nor_blocks() {
    let p = valid_policy(
        "[[rule]]\nname = \"tight\"\nlimit = \"1/hour\"\nmode = \"shadow\"\n[[rule]]\nname = \"loose\"\nlimit = \"5/hour\"\n",
    );
    let req = [("ip", "192.0.2.1")];
    for i in 0..5 {
        let d = p.check_n_at(&req, 1, i);
        assert!(d.allowed(), "request {i}");
        assert_eq!(d.rules().next().unwrap().allowed, i == 0);
        assert_eq!(d.denying().count(), 0);
    }
    // The enforcing rule denies the sixth; the shadow rule did not block any.
    assert!(!p.check_n_at(&req, 1, 5).allowed());
    let m = p.metrics_at(5);
    assert_eq!((m[0].allowed, m[0].shadow_denied, m[0].denied), (1, 5, 0));
    assert_eq!((m[1].allowed, m[1].denied), (5, 1));
}

#[test]
fn denial_consumes_nothing_elsewhere() {
    // "outer" has room; "inner" (keyed) denies: outer must not be charged.
    let p = valid_policy(
        "[[rule]]\nname = \"outer\"\nlimit = \"3/hour\"\n[[rule]]\nname = \"inner\"\nkey = [\"ip\"]\nlimit = \"1/hour\"\n",
    );
    assert!(p.check_n_at(&[("ip", "192.0.2.1")], 1, 0).allowed());
    for _ in 0..10 {
        assert!(!p.check_n_at(&[("ip", "192.0.2.1")], 1, 0).allowed());
    }
    let d = p.check_n_at(&[("ip", "192.0.2.2")], 1, 0);
    assert!(d.allowed());
    assert_eq!(d.rules().next().unwrap().remaining, 1);
}

#[test]
fn striped_hot_rule_and_ipv6_grouping() {
    let p = valid_policy(
        "[[rule]]\nname = \"global\"\nlimit = \"8/hour\"\nstripes = 4\n[[rule]]\nname = \"per-ip\"\nkey = [\"ip\"]\nlimit = \"2/hour\"\n",
    );
    // Two addresses of one /64 share a limiter; another /64 does not.
    assert!(p.check_n_at(&[("ip", "2001:db8::1")], 1, 0).allowed());
    assert!(p.check_n_at(&[("ip", "2001:db8::2")], 1, 0).allowed());
    assert!(!p.check_n_at(&[("ip", "2001:db8::3")], 1, 0).allowed());
    assert!(p.check_n_at(&[("ip", "2001:db8:0:1::1")], 1, 0).allowed());
    // The striped rule admits exactly its quota across many threads.
    let p = Arc::new(p);
    let admitted: usize = (0..4)
        .map(|t| {
            let p = p.clone();
            std::thread::spawn(move || {
                (0..10)
                    .filter(|i| {
                        let ip = format!("192.0.{t}.{i}");
                        p.check_n_at(&[("ip", ip.as_str())], 1, 0).allowed()
                    })
                    .count()
            })
        })
        .map(|h| h.join().unwrap())
        .sum();
    assert_eq!(admitted, 8 - 3);
}

/// Builds in-process "remote" limiters and records the `[redis]` table of each.
struct Recording(Arc<Mutex<Vec<RedisSettings>>>);

impl RemoteFactory for Recording {
    fn build(
        &self,
        rule: &RuleDef,
        redis: &RedisSettings,
    ) -> Result<Box<dyn RemoteLimiter>, BackendError> {
        self.0.lock().unwrap().push(redis.clone());
        let inner =
            AnyLimiter::with_clock(rule.spec(), ()).map_err(|e| BackendError(e.to_string()))?;
        Ok(Box::new(Flaky {
            inner,
            down: Arc::default(),
        }))
    }
}

#[test]
fn a_changed_redis_table_rebuilds_the_redis_rules_and_only_them() {
    let text = |horizon_ms: u64| {
        format!(
            "[redis]\nurl = \"redis://127.0.0.1:6379\"\nlease_horizon_ms = {horizon_ms}\n\
             [[rule]]\nname = \"remote\"\nmatch = {{ path = \"/r\" }}\nlimit = \"2/minute\"\nbackend = \"hybrid\"\n\
             [[rule]]\nname = \"local\"\nkey = [\"ip\"]\nlimit = \"1/minute\"\n"
        )
    };
    let builds = Arc::new(Mutex::new(Vec::new()));
    let p = Policy::builder()
        .remote(Recording(builds.clone()))
        .from_toml(&text(1000))
        .unwrap();
    let horizons = || -> Vec<Option<Duration>> {
        builds
            .lock()
            .unwrap()
            .iter()
            .map(|r| r.lease_horizon)
            .collect()
    };
    assert_eq!(horizons(), [Some(Duration::from_secs(1))]);
    // The local rule's key spends its one a minute.
    assert!(p.check(&[("ip", "a")]).allowed());
    // The same table: nothing rebuilt.
    p.reload_from_toml(&text(1000)).unwrap();
    assert_eq!(horizons().len(), 1);
    // A new lease horizon: the hybrid rule is built again with it...
    p.reload_from_toml(&text(2000)).unwrap();
    assert_eq!(
        horizons(),
        [Some(Duration::from_secs(1)), Some(Duration::from_secs(2))]
    );
    // ...and the local rule kept its state and its counters.
    assert!(!p.check(&[("ip", "a")]).allowed());
    assert!(p.check(&[("ip", "b")]).allowed());
    let local = &p.metrics_at(0)[1];
    assert_eq!((local.allowed, local.denied), (2, 1));
}

/// A "remote" limiter in this process whose forecast is set by the test; it
/// records the keys it is asked about and counts its peeks (a peek of a shared
/// backend is a round trip).
struct Forecast {
    inner: AnyLimiter<()>,
    ready: Arc<AtomicBool>,
    peeks: Arc<Mutex<Vec<String>>>,
    asked: Arc<Mutex<Vec<String>>>,
}

impl RemoteLimiter for Forecast {
    fn check_n(&self, key: &str, n: u64, consume: bool) -> Result<Outcome, BackendError> {
        if !consume {
            self.peeks.lock().unwrap().push(key.to_owned());
            return self
                .inner
                .peek_n_at(n, 0)
                .map_err(|e| BackendError(e.to_string()));
        }
        self.inner
            .check_n_at(n, 0)
            .map_err(|e| BackendError(e.to_string()))
    }
    fn set_spec(&self, _spec: &Spec) -> Result<(), BackendError> {
        Err(BackendError("rebuild".into()))
    }
    #[allow(deprecated)]
    fn answers_locally(&self, key: &str, _n: u64) -> bool {
        self.asked.lock().unwrap().push(key.to_owned());
        self.ready.load(Ordering::SeqCst)
    }
}

#[derive(Clone, Default)]
struct ForecastFactory {
    ready: Arc<AtomicBool>,
    peeks: Arc<Mutex<Vec<String>>>,
    asked: Arc<Mutex<Vec<String>>>,
}

impl RemoteFactory for ForecastFactory {
    fn build(
        &self,
        rule: &RuleDef,
        _redis: &RedisSettings,
    ) -> Result<Box<dyn RemoteLimiter>, BackendError> {
        Ok(Box::new(Forecast {
            inner: AnyLimiter::with_clock(rule.spec(), ())
                .map_err(|e| BackendError(e.to_string()))?,
            ready: self.ready.clone(),
            peeks: self.peeks.clone(),
            asked: self.asked.clone(),
        }))
    }
}

/// The deprecated forecast still answers as before.
#[test]
#[allow(deprecated)]
fn may_wait_forecasts_every_round_trip_of_a_check() {
    let f = ForecastFactory::default();
    let text = "[redis]\nurl = \"redis://127.0.0.1:6379\"\n\
        [[rule]]\nname = \"per-user\"\nmatch = { path = \"/api\" }\nkey = [\"user\"]\nlimit = \"3/hour\"\nbackend = \"hybrid\"\n\
        [[rule]]\nname = \"per-ip\"\nmatch = { path = \"/login\" }\nkey = [\"ip\"]\nlimit = \"1/hour\"\n\
        [[rule]]\nname = \"watch\"\nmatch = { path = \"/login\" }\nkey = [\"user\"]\nlimit = \"1/hour\"\nbackend = \"hybrid\"\nmode = \"shadow\"\n\
        [[rule]]\nname = \"both\"\nmatch = { path = \"/both\" }\nkey = [\"user\"]\nlimit = \"5/hour\"\nbackend = \"hybrid\"\n\
        [[rule]]\nname = \"both-ip\"\nmatch = { path = \"/both\" }\nkey = [\"ip\"]\nlimit = \"1/hour\"\n";
    let p = Policy::builder().remote(f.clone()).from_toml(text).unwrap();
    let api = [("path", "/api"), ("user", "ann"), ("ip", "192.0.2.1")];
    let login = [("path", "/login"), ("user", "bob"), ("ip", "192.0.2.2")];
    let both = [("path", "/both"), ("user", "cy"), ("ip", "192.0.2.3")];
    let local_only = [("path", "/other"), ("user", "dee")];

    // No rule on a shared backend matches: never waits, asks no one.
    f.ready.store(false, Ordering::SeqCst);
    assert!(!p.may_wait_n(&local_only, 1));
    assert!(f.asked.lock().unwrap().is_empty());
    // The one enforcing rule is remote: waits unless it answers locally, and it
    // is asked with the key its check gets.
    assert!(p.may_wait_n(&api, 1));
    f.ready.store(true, Ordering::SeqCst);
    assert!(!p.may_wait_n(&api, 1));
    assert_eq!(*f.asked.lock().unwrap(), ["ann", "ann"]);
    // A remote shadow rule beside a local enforcing one: a denial by the local
    // rule peeks enforcing rules only, so nothing waits when the shadow rule
    // answers locally.
    assert!(!p.may_wait_n(&login, 1));
    assert!(p.check_n_at(&login, 1, 0).allowed());
    assert!(!p.check_n_at(&login, 1, 0).allowed());
    assert!(
        f.peeks.lock().unwrap().is_empty(),
        "no peek of a shadow rule"
    );
    f.ready.store(false, Ordering::SeqCst);
    assert!(p.may_wait_n(&login, 1), "the shadow rule's own check waits");
    // A remote enforcing rule beside a local enforcing one always may wait: when
    // the local rule denies, the remote one is peeked for the headers.
    f.ready.store(true, Ordering::SeqCst);
    assert!(p.may_wait_n(&both, 1));
    assert!(p.check_n_at(&both, 1, 0).allowed());
    assert!(!p.check_n_at(&both, 1, 0).allowed());
    assert_eq!(
        *f.peeks.lock().unwrap(),
        ["cy"],
        "the denial peeked the remote rule"
    );
}
