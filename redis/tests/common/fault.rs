//! The fault tests' timings (tests/faults.rs, tests/cluster_faults.rs,
//! tests/isolation.rs): short timeouts, so that a dead server is found out fast.

use std::time::Duration;

use sluicegate_redis::{BreakerConfig, Config, FailurePolicy};

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
