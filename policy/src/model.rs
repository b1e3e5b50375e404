//! The compiled model: the rules in force with their limiters, their conditions
//! by attribute index, and the index of which rules a request can match; built
//! from a validated [`PolicyDef`], reusing a previous generation's limiters.

use std::collections::HashMap;
use std::sync::Arc;

use sluicegate::keyed::Pool;

use crate::attrs::AttrName;
use crate::backend::{Limiter, RemoteFactory};
use crate::cond::Cond;
use crate::counters::RuleMetrics;
use crate::def::{Backend, PolicyDef, RuleDef};
use crate::diag::{Code, Diagnostic, Error, Severity};
use crate::index::RuleIndex;

/// The rules in force, with their limiters.
#[derive(Debug)]
pub(crate) struct Compiled {
    pub def: PolicyDef,
    pub rules: Box<[Rule]>,
    /// Every attribute a rule matches or keys on, once.
    pub names: Box<[AttrName]>,
    /// Which rules a request can match ([`RuleIndex`]).
    pub index: RuleIndex,
    /// Where the keyed rules keep their keys (`None`: no keyed rule yet).
    pub pool: Option<Pool>,
    /// Whether a rule's state lives on a shared backend: an async check of a
    /// policy without one decides on the calling thread, with no await.
    pub remote: bool,
}

/// One rule and its state; the state (`limiter`, `metrics`) is shared with the
/// next generation when a reload keeps the rule.
#[derive(Debug)]
pub(crate) struct Rule {
    pub def: RuleDef,
    /// The `match` entries, by index into [`Compiled::names`].
    pub conds: Box<[(u16, Cond)]>,
    /// The `key` attributes, by index into [`Compiled::names`].
    pub key: Box<[u16]>,
    pub limiter: Arc<Limiter>,
    /// Whether the limiter's admissions can be given back ([`Limiter::can_refund`]).
    pub refundable: bool,
    /// Whether the rule enforces (not shadow).
    pub enforce: bool,
    pub metrics: Arc<RuleMetrics>,
}

impl std::fmt::Debug for Limiter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Limiter")
    }
}

pub(crate) fn read(path: &std::path::Path) -> Result<(String, String), Error> {
    let name = path.display().to_string();
    match std::fs::read_to_string(path) {
        Ok(t) => Ok((t, name)),
        Err(e) => Err(Error::one(Diagnostic {
            severity: Severity::Error,
            code: Code::Io,
            file: name,
            line: 1,
            column: 1,
            rule: None,
            field: None,
            message: format!("cannot read the rule file: {e}"),
        })),
    }
}

/// Builds the limiters of `def`, reusing `old`'s for rules a reload keeps (see
/// [`crate::reload`]), and the rule index.
pub(crate) fn compile(
    def: PolicyDef,
    old: Option<&Compiled>,
    remote: Option<&dyn RemoteFactory>,
    given: Option<&Pool>,
    file: &str,
) -> Result<Compiled, Error> {
    let pool = crate::state::choose(
        &def,
        old.and_then(|o| o.pool.as_ref()),
        old.map(|o| &o.def),
        given,
        file,
    )?;
    let plan = plan(&def, old, remote, pool.as_ref(), file)?;
    let mut names: Vec<AttrName> = Vec::new();
    let mut seen: HashMap<AttrName, u16> = HashMap::new();
    let mut index = |name: &AttrName| -> u16 {
        *seen.entry(name.clone()).or_insert_with(|| {
            names.push(name.clone());
            // A rule file has far fewer than 65,536 distinct attributes (each is
            // a line of text); saturate rather than wrap if one ever had more.
            u16::try_from(names.len() - 1).unwrap_or(u16::MAX)
        })
    };
    let rules: Box<[Rule]> = def
        .rules
        .iter()
        .cloned()
        .zip(plan)
        .map(|(def, (limiter, metrics))| Rule {
            conds: def
                .matches
                .iter()
                .map(|(n, c)| (index(n), c.clone()))
                .collect(),
            key: def.key.iter().map(&mut index).collect(),
            refundable: limiter.can_refund(),
            enforce: def.mode() == crate::def::Mode::Enforce,
            def,
            limiter,
            metrics,
        })
        .collect();
    let conds: Vec<&[(u16, Cond)]> = rules.iter().map(|r| &*r.conds).collect();
    let index = RuleIndex::build(&conds);
    let remote = rules.iter().any(|r| r.limiter.is_remote());
    Ok(Compiled {
        index,
        def,
        rules,
        names: names.into(),
        pool,
        remote,
    })
}

type Parts = (Arc<Limiter>, Arc<RuleMetrics>);

/// The limiter and counters of each rule of `def`, from `old` where kept.
pub(crate) fn plan(
    def: &PolicyDef,
    old: Option<&Compiled>,
    remote: Option<&dyn RemoteFactory>,
    pool: Option<&Pool>,
    file: &str,
) -> Result<Vec<Parts>, Error> {
    let by_name: HashMap<&str, &Rule> = old
        .map(|o| o.rules.iter().map(|r| (r.def.name(), r)).collect())
        .unwrap_or_default();
    // A rule whose keys live in the pool keeps its limiter only in the same pool.
    let same_pool = match (old.and_then(|o| o.pool.as_ref()), pool) {
        (Some(a), Some(b)) => a.same(b),
        _ => false,
    };
    let previous = |name: &str| {
        by_name
            .get(name)
            .copied()
            .filter(|r| same_pool || !r.limiter.in_pool())
    };
    let mut out = Vec::with_capacity(def.rules.len());
    // (limiter, spec to restore) for limits changed in place, undone on failure.
    let mut changed = Vec::new();
    let mut fail = None;
    let redis_changed = old.is_some_and(|o| o.def.redis() != def.redis());
    for rule in &def.rules {
        let metrics = by_name
            .get(rule.name())
            .map_or_else(Arc::default, |p| p.metrics.clone());
        let prev = previous(rule.name());
        // Counters follow the name; a Redis rule under a changed `[redis]` table
        // keeps nothing else.
        let prev = prev.filter(|_| rule.backend() == Backend::Local || !redis_changed);
        if let Some(p) = prev.filter(|p| p.def.same_limiter(rule)) {
            out.push((p.limiter.clone(), metrics));
            continue;
        }
        let same_shape = prev.filter(|p| {
            p.def.key() == rule.key()
                && p.def.backend() == rule.backend()
                && p.def.capacity() == rule.capacity()
                && p.def.stripes() == rule.stripes()
                && (rule.backend() == Backend::Local || p.def.on_error() == rule.on_error())
        });
        if let Some(p) = same_shape {
            if p.limiter.set_spec(rule.spec()).is_ok() {
                changed.push((p.limiter.clone(), *p.def.spec()));
                out.push((p.limiter.clone(), metrics));
                continue;
            }
        }
        match Limiter::build(rule, def.redis(), remote, pool) {
            Ok(l) => out.push((Arc::new(l), metrics)),
            Err(message) => {
                fail = Some(Diagnostic {
                    severity: Severity::Error,
                    code: Code::Build,
                    file: file.to_owned(),
                    line: rule.line(),
                    column: 1,
                    rule: Some(rule.name().to_owned()),
                    field: None,
                    message,
                });
                break;
            }
        }
    }
    match fail {
        None => Ok(out),
        Some(d) => {
            for (l, spec) in changed {
                let _ = l.set_spec(&spec);
            }
            Err(Error::one(d))
        }
    }
}
