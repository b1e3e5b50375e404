//! One C config checked into a core [`Spec`]: what the C struct allows that the
//! core does not see (the algorithm number, unused fields), then the core's own
//! validation.

use sluicegate::{Kind, Quota, Spec, SpecError};

use crate::config::{read_config, sluicegate_config, SLUICEGATE_MAX_LIMITS};
use crate::status::sluicegate_status::{self, *};

/// The kind a C `algorithm` integer names, if any.
pub(crate) fn kind_of(algorithm: u32) -> Option<Kind> {
    usize::try_from(algorithm)
        .ok()
        .and_then(|i| Kind::ALL.get(i).copied())
}

/// One checked C config: the kind and the quota it describes, and the kind's
/// parameters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct LimitConfig {
    pub kind: Kind,
    pub quota: Quota,
    pub max_delay_ns: u64,
    pub log_capacity: u64,
}

impl LimitConfig {
    /// Checks what the C struct allows and the core spec does not see: the
    /// algorithm number, fields the kind does not use, and a window's burst.
    pub(crate) fn new(c: &sluicegate_config) -> Result<Self, sluicegate_status> {
        let kind = kind_of(c.algorithm).ok_or(SLUICEGATE_ERR_BAD_ALGORITHM)?;
        let caps = kind.caps();
        if c.max_delay_ns != 0 && !caps.max_delay {
            return Err(SLUICEGATE_ERR_CONFIG_INVALID);
        }
        if c.log_capacity != 0 && !caps.log_capacity {
            return Err(SLUICEGATE_ERR_CONFIG_INVALID);
        }
        if !caps.burst && c.burst != 0 && c.burst != c.amount {
            return Err(SLUICEGATE_ERR_CONFIG_INVALID);
        }
        let burst = if c.burst == 0 { c.amount } else { c.burst };
        Ok(Self {
            kind,
            quota: Quota::from_nanos(c.amount, c.period_ns).burst(burst),
            max_delay_ns: c.max_delay_ns,
            log_capacity: c.log_capacity,
        })
    }

    /// Reads and checks a caller's config.
    ///
    /// # Safety
    /// As [`read_config`].
    pub(crate) unsafe fn read(p: *const sluicegate_config) -> Result<Self, sluicegate_status> {
        // SAFETY: forwarded contract.
        Self::new(&unsafe { read_config(p) }?)
    }

    /// The core spec of this config alone.
    pub(crate) fn spec(&self) -> Result<Spec, Rejected> {
        spec_of(core::slice::from_ref(self))
    }
}

/// Why configs make no limiter.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Rejected {
    /// The core rejected the spec (its error names the field and the bound).
    Spec(SpecError),
    /// The C ABI's own rule (count, mixed algorithms).
    Status(sluicegate_status),
}

impl From<Rejected> for sluicegate_status {
    fn from(e: Rejected) -> Self {
        match e {
            Rejected::Spec(s) => s.into(),
            Rejected::Status(s) => s,
        }
    }
}

impl From<SpecError> for Rejected {
    fn from(e: SpecError) -> Self {
        Self::Spec(e)
    }
}

/// The core spec of `limits` (1 to `SLUICEGATE_MAX_LIMITS` of one algorithm,
/// admitted all-or-nothing).
pub(crate) fn spec_of(limits: &[LimitConfig]) -> Result<Spec, Rejected> {
    let Some(first) = limits.first() else {
        return Err(Rejected::Status(SLUICEGATE_ERR_LIMIT_COUNT));
    };
    if limits.len() > SLUICEGATE_MAX_LIMITS {
        return Err(Rejected::Status(SLUICEGATE_ERR_LIMIT_COUNT));
    }
    if limits.iter().any(|l| l.kind != first.kind) {
        return Err(Rejected::Status(SLUICEGATE_ERR_MIXED_ALGORITHMS));
    }
    let mut quotas = [first.quota; SLUICEGATE_MAX_LIMITS];
    for (q, l) in quotas.iter_mut().zip(limits) {
        *q = l.quota;
    }
    Ok(Spec::new(first.kind, &quotas[..limits.len()])?
        .with_max_delay_ns(first.max_delay_ns)?
        .with_log_capacity(first.log_capacity)?)
}
