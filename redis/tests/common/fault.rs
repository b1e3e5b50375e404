//! The fault tests' timings (tests/faults.rs, tests/cluster_faults.rs,
//! tests/isolation.rs): short timeouts, so that a dead server is found out fast.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use sluicegate_redis::{BreakerConfig, Config, FailurePolicy, RedisLimiter, Verdict};

pub const TIMEOUT: Duration = Duration::from_millis(25);
pub const CONNECT: Duration = Duration::from_millis(25);
pub const COOLDOWN: Duration = Duration::from_millis(200);
/// Scheduling slack on a loaded 2-core machine.
pub const SLACK: Duration = Duration::from_millis(50);

/// A limiter's config with these timings: the breaker opens after 3 failures and
/// cools down for [`COOLDOWN`]; `policy` answers meanwhile.
pub fn cfg(policy: FailurePolicy) -> Config {
    Config {
        timeout: TIMEOUT,
        connect_timeout: CONNECT,
        breaker: BreakerConfig {
            failure_threshold: 3,
            cooldown: COOLDOWN,
        },
        policy,
        ..Config::default()
    }
}

/// The slowest check of `outage` and how many took over 5 ms; fails (naming
/// `what`) if one waited past the timeout plus one connect attempt.
#[track_caller]
pub fn outage_latency(outage: &[Sample], what: &str) -> (Duration, usize) {
    let bound = TIMEOUT + CONNECT + SLACK;
    let max = outage.iter().map(|s| s.latency).max().unwrap();
    assert!(
        max <= bound,
        "{what}: a check took {max:?} (bound {bound:?})"
    );
    let slow = outage
        .iter()
        .filter(|s| s.latency > Duration::from_millis(5))
        .count();
    (max, slow)
}

/// Awaits the scenarios' report lines, failing if they take over `limit`, and
/// prints them.
pub async fn report_within(
    limit: Duration,
    scenarios: impl std::future::Future<Output = Vec<String>>,
) {
    let lines = tokio::time::timeout(limit, scenarios)
        .await
        .unwrap_or_else(|_| panic!("the fault scenarios took over {limit:?}"));
    for l in lines {
        println!("{l}");
    }
}

/// One check made under [`load`].
pub struct Sample {
    /// The index of the key checked in `load`'s `keys`.
    pub key: usize,
    /// When the check started, from `load`'s `t0`.
    pub at: Duration,
    /// How long the check took.
    pub latency: Duration,
    pub verdict: Verdict,
}

/// 8 tasks, task `i` checking `keys[i % keys.len()]` once a millisecond for
/// `for_` (at most 2,000 checks each); every check's sample, in no set order.
pub async fn load(rl: &RedisLimiter, keys: &[&str], t0: Instant, for_: Duration) -> Vec<Sample> {
    let out = Arc::new(Mutex::new(Vec::new()));
    let end = Instant::now() + for_;
    let mut tasks = Vec::new();
    for i in 0..8 {
        let (rl, out) = (rl.clone(), Arc::clone(&out));
        let key = i % keys.len();
        let name = keys[key].to_owned();
        tasks.push(tokio::spawn(async move {
            let mut mine = Vec::new();
            while Instant::now() < end && mine.len() < 2000 {
                let t = Instant::now();
                let verdict = rl.check(&name).await.unwrap();
                mine.push(Sample {
                    key,
                    at: t - t0,
                    latency: t.elapsed(),
                    verdict,
                });
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            out.lock().unwrap().extend(mine);
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    Arc::try_unwrap(out).ok().unwrap().into_inner().unwrap()
}
