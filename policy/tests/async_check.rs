//! The async check (`Policy::check_n_at_async` and its forms) with rules on a
//! shared backend played in this process: a remote whose answer takes a poll (or
//! a timer) to arrive, and which charges when the call is sent, as Redis does.
//! Dropped at each of its await points, a check gives back exactly what its
//! local rules took; on both Tokio runtimes concurrent checks admit exactly the
//! quota; a policy without remote rules decides at the first poll.

use std::collections::HashMap;
use std::future::Future;
use std::pin::{Pin, pin};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use sluicegate::{AnyLimiter, Outcome, Spec};
use sluicegate_policy::{
    BackendError, Policy, RedisSettings, RemoteFactory, RemoteFuture, RemoteLimiter, RuleDef,
};

/// How a remote call's answer arrives.
#[derive(Clone, Copy)]
enum Delay {
    /// After one `Pending` (woken at once): an await point a test can stop at.
    OnePoll,
    /// After a Tokio timer of this long.
    Timer(Duration),
}

/// A "remote" limiter in this process: charged when the call is sent (the first
/// poll), answered after `delay`.
struct Slow {
    inner: Arc<AnyLimiter<()>>,
    delay: Delay,
    calls: Arc<AtomicUsize>,
}

/// Pending once, then ready.
struct YieldOnce(bool);

impl Future for YieldOnce {
    type Output = ();
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if self.0 {
            return Poll::Ready(());
        }
        self.0 = true;
        cx.waker().wake_by_ref();
        Poll::Pending
    }
}

fn run(l: &AnyLimiter<()>, n: u64, consume: bool) -> Result<Outcome, BackendError> {
    let r = if consume {
        l.check_n_at(n, 0)
    } else {
        l.peek_n_at(n, 0)
    };
    r.map_err(|e| BackendError(e.to_string()))
}

impl RemoteLimiter for Slow {
    fn check_n(&self, _key: &str, n: u64, consume: bool) -> Result<Outcome, BackendError> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        run(&self.inner, n, consume)
    }
    fn set_spec(&self, _spec: &Spec) -> Result<(), BackendError> {
        Err(BackendError("rebuild".into()))
    }
    fn check_n_async(&self, _key: &str, n: u64, consume: bool) -> RemoteFuture {
        let (inner, delay, calls) = (self.inner.clone(), self.delay, self.calls.clone());
        Box::pin(async move {
            // Sent: the backend decides (and charges) whether or not anyone
            // waits for the answer.
            calls.fetch_add(1, Ordering::SeqCst);
            let answer = run(&inner, n, consume);
            match delay {
                Delay::OnePoll => YieldOnce(false).await,
                Delay::Timer(d) => tokio::time::sleep(d).await,
            }
            answer
        })
    }
}

/// Builds [`Slow`] limiters and keeps a handle on each, by rule name.
#[derive(Clone)]
struct SlowFactory {
    delay: Delay,
    built: Arc<Mutex<HashMap<String, Arc<AnyLimiter<()>>>>>,
    calls: Arc<AtomicUsize>,
}

impl SlowFactory {
    fn new(delay: Delay) -> Self {
        Self {
            delay,
            built: Arc::default(),
            calls: Arc::default(),
        }
    }

    /// Units the remote rule `name` could admit now.
    fn remaining(&self, name: &str) -> u64 {
        let l = self.built.lock().unwrap()[name].clone();
        l.peek_n_at(0, 0).unwrap().decision.remaining
    }
}

impl RemoteFactory for SlowFactory {
    fn build(
        &self,
        rule: &RuleDef,
        _redis: &RedisSettings,
    ) -> Result<Box<dyn RemoteLimiter>, BackendError> {
        let l = Arc::new(
            AnyLimiter::with_clock(rule.spec(), ()).map_err(|e| BackendError(e.to_string()))?,
        );
        self.built
            .lock()
            .unwrap()
            .insert(rule.name().to_owned(), l.clone());
        Ok(Box::new(Slow {
            inner: l,
            delay: self.delay,
            calls: self.calls.clone(),
        }))
    }
}

/// Two local rules (keyed, keyless) that can give back, then two remote ones:
/// a check charges both local rules, peeks `shared-a`, checks `shared-b`, then
/// charges `shared-a` — three await points.
const RULES: &str = "[redis]\nurl = \"redis://127.0.0.1:1\"\n\
    [[rule]]\nname = \"per-ip\"\nkey = [\"ip\"]\nlimit = \"10/hour\"\n\
    [[rule]]\nname = \"global\"\nlimit = \"100/hour\"\n\
    [[rule]]\nname = \"shared-a\"\nlimit = \"5/hour\"\nbackend = \"redis\"\n\
    [[rule]]\nname = \"shared-b\"\nlimit = \"7/hour\"\nbackend = \"redis\"\n";

const REQ: [(&str, &str); 1] = [("ip", "192.0.2.1")];

/// Each rule's remaining units for `REQ`, by a peek (`n = 0`).
fn remaining(p: &Policy) -> Vec<(String, u64)> {
    let d = p.check_n_at(&REQ, 0, 0);
    d.rules()
        .map(|r| (r.name.to_owned(), r.remaining))
        .collect()
}

fn polls_to_finish(p: &Policy) -> usize {
    let mut check = pin!(p.check_n_at_async(&REQ, 1, 0));
    let mut cx = Context::from_waker(Waker::noop());
    let mut polls = 1;
    while check.as_mut().poll(&mut cx).is_pending() {
        polls += 1;
    }
    polls
}

#[test]
fn a_check_dropped_at_any_await_gives_back_what_its_local_rules_took() {
    // One check to completion: how many polls a check takes, and what it charges.
    let f = SlowFactory::new(Delay::OnePoll);
    let p = Policy::builder()
        .remote(f.clone())
        .from_toml(RULES)
        .unwrap();
    assert_eq!(
        polls_to_finish(&p),
        4,
        "three awaits: peek a, check b, charge a"
    );
    assert_eq!(
        remaining(&p),
        [
            ("per-ip".to_owned(), 9),
            ("global".to_owned(), 99),
            ("shared-a".to_owned(), 4),
            ("shared-b".to_owned(), 6)
        ]
    );

    // Dropped after `polls` polls (each left it waiting at an await).
    for polls in 1..=3 {
        let f = SlowFactory::new(Delay::OnePoll);
        let p = Policy::builder()
            .remote(f.clone())
            .from_toml(RULES)
            .unwrap();
        // A reused decision, admitted by a check of another policy.
        let mut d = Policy::from_toml("[[rule]]\nname = \"x\"\nlimit = \"1/s\"\n")
            .unwrap()
            .check_n_at(&REQ, 1, 0);
        assert!(d.allowed());
        {
            let mut check = pin!(p.check_n_at_into_async(&REQ, 1, 0, &mut d));
            let mut cx = Context::from_waker(Waker::noop());
            for _ in 0..polls {
                assert!(check.as_mut().poll(&mut cx).is_pending());
            }
        }
        // What the cut-short check left: a denial naming no rule.
        assert!(!d.allowed());
        assert_eq!(d.rules().count(), 0);
        assert_eq!(f.calls.load(Ordering::SeqCst), polls, "calls sent");
        // A cut-short check is counted neither as allowed nor as denied.
        assert!(p.metrics_at(0).iter().all(|m| m.allowed + m.denied == 0));
        // Local rules: exactly back where they were.
        let r = remaining(&p);
        assert_eq!(r[0], ("per-ip".to_owned(), 10), "after {polls} polls");
        assert_eq!(r[1], ("global".to_owned(), 100), "after {polls} polls");
        // Remote rules keep what was sent to them (no receipts): the check of b
        // went out at the second poll, the charge of a at the third. Nothing
        // beyond what was sent, so nothing over-admitted.
        assert_eq!(f.remaining("shared-b"), if polls >= 2 { 6 } else { 7 });
        assert_eq!(f.remaining("shared-a"), if polls >= 3 { 4 } else { 5 });
        // And the key's full quota is still there: 5 more checks pass (shared-a's
        // 5, less what a cancelled check sent it), the next is denied.
        let passes = (0..20)
            .filter(|_| p.check_n_at(&REQ, 1, 0).allowed())
            .count();
        assert_eq!(passes, if polls >= 3 { 4 } else { 5 });
        assert_eq!(remaining(&p)[0].1, 10 - passes as u64);
    }
}

#[test]
fn a_denied_check_dropped_while_peeking_gives_back_too() {
    // shared-b is spent: a check charges the local rules, peeks a, is denied by b,
    // gives back, then peeks nothing more. Dropped after the first poll (at the
    // peek of a) or the second (at the check of b), the locals are whole.
    for polls in 1..=2 {
        let f = SlowFactory::new(Delay::OnePoll);
        let p = Policy::builder()
            .remote(f.clone())
            .from_toml(RULES)
            .unwrap();
        let b = f.built.lock().unwrap()["shared-b"].clone();
        assert!(b.check_n_at(7, 0).unwrap().decision.allowed);
        {
            let mut check = pin!(p.check_n_at_async(&REQ, 1, 0));
            let mut cx = Context::from_waker(Waker::noop());
            for _ in 0..polls {
                assert!(check.as_mut().poll(&mut cx).is_pending());
            }
        }
        let r = remaining(&p);
        assert_eq!((r[0].1, r[1].1), (10, 100), "after {polls} polls");
        assert_eq!(f.remaining("shared-a"), 5, "only ever peeked");
    }
}

#[test]
fn a_policy_without_remote_rules_decides_at_the_first_poll() {
    let p =
        Policy::from_toml("[[rule]]\nname = \"a\"\nkey = [\"ip\"]\nlimit = \"1/hour\"\n").unwrap();
    let mut cx = Context::from_waker(Waker::noop());
    let mut d = sluicegate_policy::Decision::new();
    for allowed in [true, false] {
        {
            let mut check = pin!(p.check_n_at_into_async(&REQ, 1, 0, &mut d));
            assert!(check.as_mut().poll(&mut cx).is_ready());
        }
        assert_eq!(d.allowed(), allowed);
    }
}

/// Many concurrent checks on `rt`'s flavour: each remote answer waits on a
/// timer, so the checks overlap; exactly the quota is admitted. Then checks cut
/// short by a timeout (mid-round-trip) give their local charges back.
async fn concurrent_checks_admit_exactly_the_quota() {
    let f = SlowFactory::new(Delay::Timer(Duration::from_millis(2)));
    let text = "[redis]\nurl = \"redis://127.0.0.1:1\"\n\
        [[rule]]\nname = \"local\"\nlimit = \"1000/hour\"\n\
        [[rule]]\nname = \"shared\"\nlimit = \"50/hour\"\nbackend = \"redis\"\n";
    let p = Arc::new(Policy::builder().remote(f.clone()).from_toml(text).unwrap());
    let tasks: Vec<_> = (0..200)
        .map(|i| {
            let p = p.clone();
            tokio::spawn(async move {
                let ip = format!("10.0.0.{}", i % 250);
                p.check_n_at_async(&[("ip", ip.as_str())], 1, 0)
                    .await
                    .allowed()
            })
        })
        .collect();
    let mut admitted = 0;
    for t in tasks {
        admitted += usize::from(t.await.unwrap());
    }
    assert_eq!(admitted, 50);
    assert_eq!(f.remaining("shared"), 0);
    // Denied checks gave the local rule back its units: it holds the 50 admitted.
    let peek = p.check_n_at(&REQ, 0, 0);
    assert_eq!(peek.rules().next().unwrap().remaining, 1000 - 50);

    // A timeout shorter than the round trip drops each check at its await.
    let f = SlowFactory::new(Delay::Timer(Duration::from_secs(5)));
    let p = Policy::builder().remote(f.clone()).from_toml(text).unwrap();
    for _ in 0..10 {
        let t = tokio::time::timeout(Duration::from_millis(1), p.check_n_at_async(&REQ, 1, 0));
        assert!(t.await.is_err(), "timed out");
    }
    let peek = p.check_n_at(&REQ, 0, 0);
    assert_eq!(
        peek.rules().next().unwrap().remaining,
        1000,
        "local: all back"
    );
    assert_eq!(f.remaining("shared"), 40, "remote: the 10 checks sent stay");
}

#[tokio::test(flavor = "current_thread")]
async fn concurrent_checks_on_a_current_thread_runtime() {
    concurrent_checks_admit_exactly_the_quota().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_checks_on_a_multi_thread_runtime() {
    concurrent_checks_admit_exactly_the_quota().await;
}
