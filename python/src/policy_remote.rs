//! The `redis` and `hybrid` rules of a `Policy`: the policy crate's
//! `RemoteFactory`, over the same blocking Redis limiters as `RedisKeyedLimiter`.
//! A rule's own `on_error` decides when Redis fails, so the Redis limiter itself
//! is built fail-closed and any answer that did not come from Redis (or, in hybrid
//! mode, from a lease) is handed back as a `BackendError`.

use sluicegate::{Decision, Outcome, Spec};
use sluicegate_policy::{
    Backend as RuleBackend, BackendError, RedisSettings, RemoteFactory, RemoteLimiter, RuleDef,
};
use sluicegate_redis::{blocking, Backend, Config, FailurePolicy, HybridConfig, Source};

use crate::redis::{redis_limit, LimitError};

/// Builds one Redis limiter (plus its lease front for `hybrid`) per rule.
pub struct Factory;

struct Remote {
    remote: blocking::RedisLimiter,
    hybrid: Option<blocking::HybridLimiter>,
}

fn failed(e: impl ToString) -> BackendError {
    BackendError(e.to_string())
}

impl RemoteFactory for Factory {
    fn build(
        &self,
        rule: &RuleDef,
        redis: &RedisSettings,
    ) -> Result<Box<dyn RemoteLimiter>, BackendError> {
        let limit = redis_limit(rule.spec()).map_err(|e| match e {
            LimitError::Kind(msg) => BackendError(msg),
            LimitError::Redis(e) => failed(e),
        })?;
        let cfg = Config {
            prefix: redis.prefix.clone(),
            policy: FailurePolicy::Closed,
            ..Config::default()
        };
        let backend = Backend::from_url(&redis.url).map_err(failed)?;
        let name = format!("policy:{}", rule.name());
        let remote = blocking::RedisLimiter::new(backend, &name, limit, cfg).map_err(failed)?;
        let hybrid = match rule.backend() {
            RuleBackend::Hybrid => Some(
                blocking::HybridLimiter::new(remote.clone(), HybridConfig::default())
                    .map_err(failed)?,
            ),
            _ => None,
        };
        Ok(Box::new(Remote { remote, hybrid }))
    }
}

impl RemoteLimiter for Remote {
    fn check_n(&self, key: &str, n: u64, consume: bool) -> Result<Outcome, BackendError> {
        if consume && self.hybrid.is_none() {
            // Straight to Redis: a failure is an error, never a policy's answer.
            return match self.remote.try_check_n(key, n) {
                Ok(r) => Ok(Outcome {
                    decision: r.decision,
                    delay_ns: r.delay_ns,
                }),
                Err(sluicegate_redis::Error::Capacity(c)) => Ok(Outcome {
                    decision: Decision::never(c.capacity),
                    delay_ns: 0,
                }),
                Err(e) => Err(failed(e)),
            };
        }
        let verdict = match &self.hybrid {
            Some(h) if consume => h.check_n(key, n),
            _ => self.remote.peek_n(key, n),
        };
        match verdict {
            Ok(v)
                if matches!(
                    v.source,
                    Source::Redis | Source::Lease | Source::LocalDenial
                ) =>
            {
                Ok(Outcome {
                    decision: v.decision,
                    delay_ns: if consume { v.delay_ns } else { 0 },
                })
            }
            Ok(_) => Err(BackendError("Redis is unavailable".into())),
            Err(sluicegate_redis::Error::Capacity(c)) => Ok(Outcome {
                decision: Decision::never(c.capacity),
                delay_ns: 0,
            }),
            Err(e) => Err(failed(e)),
        }
    }

    fn set_spec(&self, _spec: &Spec) -> Result<(), BackendError> {
        Err(BackendError(
            "a Redis rule's limit cannot change in place: the rule is rebuilt".into(),
        ))
    }
}
