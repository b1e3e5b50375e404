//! A fault on a 3-master Redis Cluster of the test's own (no replicas,
//! `cluster-require-full-coverage no`): one master killed with SIGKILL mid-run,
//! under the `Closed` and `Local` policies. Checks that the policy answers the keys
//! in the dead master's slot range with bounded latency and no over-admission,
//! that keys on the surviving masters are never over-admitted either, and that
//! checks of the dead range go back to Redis once the master is restarted (from
//! its nodes.conf: same node id and slots, empty data).
//!
//! Each master has its own breaker: while the dead master's is open, keys on the
//! live masters are still answered by Redis (at most 1% by the policy, for a
//! check caught in the cluster connection's own reaction to the kill; the test
//! prints how many were).
// Written against the deprecated `Algorithm` names, which must keep working;
// tests/isolation.rs and tests/operations.rs use `Spec` and `Kind`.
#![allow(deprecated)]

mod common;

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use sluicegate::Quota;
use sluicegate_redis::{Algorithm, Backend, FailurePolicy, Limit, RedisLimiter, Source};

use common::fault::{cfg, load, outage_latency, Sample, COOLDOWN, SLACK};

fn server_bin() -> String {
    std::env::var("SLUICEGATE_REDIS_SERVER").unwrap_or_else(|_| "redis-server".into())
}

fn cli_bin() -> PathBuf {
    // SLUICEGATE_REDIS_CLI (scripts/test-redis sets it: valkey-cli for Valkey),
    // else redis-cli next to the server, else on PATH.
    if let Ok(cli) = std::env::var("SLUICEGATE_REDIS_CLI") {
        return PathBuf::from(cli);
    }
    let s = PathBuf::from(server_bin());
    match s.parent() {
        Some(dir) if dir.join("redis-cli").exists() => dir.join("redis-cli"),
        _ => PathBuf::from("redis-cli"),
    }
}

/// A port P with P + 10000 (the cluster bus) free too.
fn cluster_port() -> u16 {
    loop {
        let p = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        if !(1024..=55000).contains(&p) {
            continue;
        }
        let a = TcpListener::bind(("127.0.0.1", p));
        let b = TcpListener::bind(("127.0.0.1", p + 10000));
        if a.is_ok() && b.is_ok() {
            return p;
        }
    }
}

/// A cluster node: a server of the test's own in cluster mode.
type Node = common::Server;

fn start_node() -> Node {
    Node::start_with(
        cluster_port(),
        &[
            "--cluster-enabled",
            "yes",
            "--cluster-node-timeout",
            "1000",
            "--cluster-require-full-coverage",
            "no",
            "--cluster-config-file",
            "nodes.conf",
        ],
    )
}

fn info_ok(n: &Node) -> bool {
    match n.cmd(&["CLUSTER", "INFO"]) {
        Some(redis::Value::BulkString(b)) => {
            String::from_utf8_lossy(&b).contains("cluster_state:ok")
        }
        Some(redis::Value::VerbatimString { text, .. }) => text.contains("cluster_state:ok"),
        _ => false,
    }
}

struct Cluster {
    nodes: Vec<Node>,
}

impl Cluster {
    fn start() -> Self {
        let nodes: Vec<Node> = (0..3).map(|_| start_node()).collect();
        let addrs: Vec<String> = nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port))
            .collect();
        let ok = Command::new(cli_bin())
            .args(["--cluster", "create"])
            .args(&addrs)
            .args(["--cluster-replicas", "0", "--cluster-yes"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .expect("redis-cli")
            .success();
        assert!(ok, "redis-cli --cluster create");
        let c = Self { nodes };
        c.wait_ok();
        c
    }

    fn wait_ok(&self) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while !self.nodes.iter().all(info_ok) {
            assert!(Instant::now() < deadline, "cluster not ok");
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn backend(&self) -> Backend {
        Backend::Cluster(self.nodes.iter().map(Node::url).collect())
    }

    /// The index of the node that serves `slot` (asked of every live node: after
    /// a restart they agree).
    fn owner(&self, slot: i64) -> usize {
        let Some(redis::Value::Array(ranges)) = self.nodes[0].cmd(&["CLUSTER", "SLOTS"]) else {
            panic!("CLUSTER SLOTS")
        };
        for r in ranges {
            let redis::Value::Array(r) = r else { continue };
            let (redis::Value::Int(lo), redis::Value::Int(hi)) = (&r[0], &r[1]) else {
                continue;
            };
            if (*lo..=*hi).contains(&slot) {
                let redis::Value::Array(master) = &r[2] else {
                    panic!()
                };
                let redis::Value::Int(port) = master[1] else {
                    panic!()
                };
                return self
                    .nodes
                    .iter()
                    .position(|n| i64::from(n.port) == port)
                    .unwrap();
            }
        }
        panic!("slot {slot} unserved")
    }

    fn slot(&self, redis_key: &str) -> i64 {
        match self.nodes[0].cmd(&["CLUSTER", "KEYSLOT", redis_key]) {
            Some(redis::Value::Int(s)) => s,
            other => panic!("CLUSTER KEYSLOT: {other:?}"),
        }
    }
}

/// The index of key `dead` (on the master that is killed) in `load`'s keys.
const DEAD: usize = 0;

fn admitted(s: &[Sample], dead: bool, by_redis: bool) -> usize {
    s.iter()
        .filter(|x| (x.key == DEAD) == dead && x.verdict.decision.allowed)
        .filter(|x| (x.verdict.source == Source::Redis) == by_redis)
        .count()
}

async fn scenario(cluster: &mut Cluster, policy: FailurePolicy, name: &str) -> String {
    // 100 per second, bursts of 20; the local share (50%) is 50/s, bursts of 10.
    let limit = Limit::new(Algorithm::TokenBucket, Quota::per_second(100).burst(20)).unwrap();
    let cfg = cfg(policy);
    let rl = RedisLimiter::new(cluster.backend(), name, limit, cfg).unwrap();
    // Key `dead` on the master to be killed, key `live` on another one.
    let victim = cluster.owner(cluster.slot(&rl.redis_key("dead")));
    let live = (0..1000)
        .map(|i| format!("live{i}"))
        .find(|k| cluster.owner(cluster.slot(&rl.redis_key(k))) != victim)
        .unwrap();
    let keys = ["dead", live.as_str()];
    let t0 = Instant::now();

    let healthy = load(&rl, &keys, t0, Duration::from_millis(150)).await;
    assert!(
        healthy.iter().all(|s| s.verdict.source == Source::Redis),
        "{policy:?}: healthy cluster"
    );

    cluster.nodes[victim].kill();
    let t_kill = t0.elapsed();
    let outage_len = Duration::from_millis(500);
    let outage = load(&rl, &keys, t0, outage_len).await;
    let t_outage_end = t0.elapsed();
    // The dead master's breaker is open, the live one's is not.
    assert!(rl.circuit_open_for("dead") && rl.circuit_open());
    assert!(
        !rl.circuit_open_for(&live),
        "{policy:?}: the live master's breaker"
    );
    cluster.nodes[victim].restart();
    let t_back = Instant::now();

    // Latency: no check waits past the timeout plus one connect attempt.
    let (max, slow) = outage_latency(&outage, &format!("{policy:?}"));
    assert!(
        slow * 10 < outage.len(),
        "{policy:?}: {slow} of {} checks slow",
        outage.len()
    );

    // The dead range: every check answered by the policy once the kill is seen
    // (a check in flight at the kill may still have been answered by Redis).
    let dead: Vec<&Sample> = outage.iter().filter(|s| s.key == DEAD).collect();
    let dead_redis = dead
        .iter()
        .filter(|s| s.verdict.source == Source::Redis)
        .count();
    assert!(
        dead_redis <= 4,
        "{policy:?}: {dead_redis} checks of the dead range answered by Redis"
    );
    let want = match policy {
        FailurePolicy::Closed => Source::FailClosed,
        _ => Source::LocalFallback,
    };
    assert!(dead
        .iter()
        .all(|s| s.verdict.source == Source::Redis || s.verdict.source == want));

    // No over-admission, per key, over the whole run (healthy and outage): what
    // Redis admitted within its quota, plus the policy's bound on the rest.
    let policy_bound = |span: Duration| match policy {
        FailurePolicy::Closed => 0,
        _ => 10 + (50.0 * (span + SLACK).as_secs_f64()).ceil() as usize,
    };
    let redis_bound = 20 + (100.0 * (t_outage_end + SLACK).as_secs_f64()).ceil() as usize;
    let dead_checks = dead.len();
    let all: Vec<Sample> = healthy.into_iter().chain(outage).collect();
    for dead in [true, false] {
        let by_redis = admitted(&all, dead, true);
        let by_policy = admitted(&all, dead, false);
        assert!(
            by_redis <= redis_bound,
            "{policy:?} dead={dead}: Redis admitted {by_redis} > {redis_bound}"
        );
        let pb = policy_bound(t_outage_end - t_kill);
        assert!(
            by_policy <= pb,
            "{policy:?} dead={dead}: the policy admitted {by_policy} > {pb}"
        );
    }
    let live_degraded = all
        .iter()
        .filter(|s| s.key != DEAD && s.at >= t_kill && s.verdict.source != Source::Redis)
        .count();
    let live_total = all
        .iter()
        .filter(|s| s.key != DEAD && s.at >= t_kill)
        .count();
    assert!(
        live_degraded * 100 <= live_total,
        "{policy:?}: {live_degraded} of {live_total} checks on live masters answered by the policy"
    );

    // Recovery: a restarted master answers CLUSTERDOWN until it has rejoined
    // (Redis waits about the node timeout, here 1 s, before it serves again); from
    // then on, the dead range is back on Redis within a cooldown plus a probe.
    let deadline = Instant::now() + Duration::from_secs(10);
    while !tokio::task::block_in_place(|| info_ok(&cluster.nodes[victim])) {
        assert!(
            Instant::now() < deadline,
            "the restarted master did not rejoin"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let rejoined = t_back.elapsed();
    let t_ok = Instant::now();
    let deadline = Instant::now() + Duration::from_secs(5);
    let recovered = loop {
        let v = rl.check("dead").await.unwrap();
        if v.source == Source::Redis {
            break t_ok.elapsed();
        }
        assert!(Instant::now() < deadline, "{policy:?}: no recovery in 5 s");
        tokio::time::sleep(Duration::from_millis(5)).await;
    };
    assert!(
        recovered <= COOLDOWN + Duration::from_secs(1),
        "{policy:?}: recovered {recovered:?} after the master rejoined"
    );
    cluster.wait_ok();
    let after = load(&rl, &keys, t0, Duration::from_millis(100)).await;
    assert!(
        after.iter().all(|s| s.verdict.source == Source::Redis),
        "{policy:?}: after recovery"
    );
    format!(
        "cluster {:<24} kill -9 of 1 of 3 masters: dead-range checks {:>4} (policy-admitted {:>3}), \
         live-range checks {:>4} ({:>4} answered by the policy), \
         max {:>9.3?}, slow(>5ms) {:>2}, master serving again {:>9.3?} after its restart, \
         dead range back on Redis {:>9.3?} after that",
        format!("{policy:?}"),
        dead_checks,
        admitted(&all, true, false),
        live_total,
        live_degraded,
        max,
        slow,
        rejoined,
        recovered
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_master_killed() {
    let mut cluster = tokio::task::block_in_place(Cluster::start);
    let run = async {
        let mut lines = Vec::new();
        for (i, policy) in [
            FailurePolicy::Closed,
            FailurePolicy::Local { share_percent: 50 },
        ]
        .into_iter()
        .enumerate()
        {
            lines.push(scenario(&mut cluster, policy, &format!("cf{i}")).await);
        }
        lines
    };
    common::fault::report_within(Duration::from_secs(60), run).await;
}
