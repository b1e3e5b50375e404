//! The policy's local keyed state: one [`Pool`] for every keyed rule, sized by
//! what the rules can hold up to the `[state] memory` bound (see
//! [`crate::StateSettings`]).

use sluicegate::keyed::Pool;

use crate::def::{Backend, OnError, PolicyDef, RuleDef};
use crate::diag::{Code, Diagnostic, Error, Severity};

/// Bytes one live key of one limit costs in a pool: its 16-byte slot, a quarter
/// more so that two-choice placement finds room (a pool at 80 % load places
/// all but 0.02 % of new keys), and its share of the sketch.
const BYTES_PER_KEY: usize = 21;

/// The least a pool is given: more than one group of 8 slots and the sketch's
/// floor of cells (1,152 bytes, see `Pool::with_memory`).
const SMALLEST_POOL: usize = 2 << 10;

/// Whether `rule` keeps keys in the policy's pool: a keyed rule on the local
/// backend, or a keyed Redis rule falling back to a local limit.
pub(crate) fn uses_pool(rule: &RuleDef) -> bool {
    !rule.key().is_empty()
        && (rule.backend() == Backend::Local || rule.on_error() == OnError::Local)
}

/// Bytes the keyed rules of `def` can hold at most: each rule's `capacity` of
/// live keys per limit.
fn wanted(def: &PolicyDef) -> usize {
    def.rules()
        .iter()
        .filter(|r| uses_pool(r))
        .map(|r| {
            r.capacity()
                .saturating_mul(r.spec().quotas().len())
                .saturating_mul(BYTES_PER_KEY)
        })
        .fold(0usize, usize::saturating_add)
}

/// The pool for `def`'s keyed rules: `given` if the policy was built on one (a
/// server's pool, shared by its domains); else the previous generation's if it
/// still fits (`memory` unchanged, and at least half what the rules want); else a
/// new one of what the rules want, up to `memory`. `None`: no keyed rule.
pub(crate) fn choose(
    def: &PolicyDef,
    old: Option<&Pool>,
    old_def: Option<&PolicyDef>,
    given: Option<&Pool>,
    file: &str,
) -> Result<Option<Pool>, Error> {
    if let Some(p) = given {
        return Ok(Some(p.clone()));
    }
    if let Some(shared) = def.shared() {
        // The region is the pool: kept while the table names the same one.
        if let (Some(p), Some(o)) = (old, old_def) {
            if o.shared() == Some(shared) {
                return Ok(Some(p.clone()));
            }
        }
        return open_shared(&shared.path).map(Some).map_err(|message| {
            Error::one(Diagnostic {
                severity: Severity::Error,
                code: Code::Build,
                file: file.to_owned(),
                line: 1,
                column: 1,
                rule: None,
                field: Some("shared.path".into()),
                message,
            })
        });
    }
    let want = wanted(def);
    if want == 0 {
        return Ok(old.cloned());
    }
    // A few keys would ask for less than one group of slots and the sketch's
    // floor, which `Pool::with_memory` refuses.
    let want = want.max(SMALLEST_POOL).min(def.state().memory);
    if let (Some(p), Some(o)) = (old, old_def) {
        if o.state() == def.state() && p.memory().saturating_mul(2) >= want {
            return Ok(Some(p.clone()));
        }
    }
    Pool::with_memory(want).map(Some).map_err(|e| {
        Error::one(Diagnostic {
            severity: Severity::Error,
            code: Code::Build,
            file: file.to_owned(),
            line: 1,
            column: 1,
            rule: None,
            field: Some("state.memory".into()),
            message: format!("the keyed state ({want} bytes, [state] memory): {e}"),
        })
    })
}

/// The pool of the shared-memory region `path` (a path, or a bare name under
/// `/dev/shm`).
#[cfg(feature = "shared")]
fn open_shared(path: &str) -> Result<Pool, String> {
    // Cached: the process's other handles on the region (a C program's
    // `open_shared` limiters beside its policy) share this mapping.
    sluicegate_shm::Region::open_cached(path, &sluicegate_shm::Options::default())
        .map(|r| r.pool().clone())
        .map_err(|e| format!("the shared region: {e}"))
}

/// Without the `shared` feature a `[shared]` table cannot be honoured.
#[cfg(not(feature = "shared"))]
fn open_shared(path: &str) -> Result<Pool, String> {
    Err(format!(
        "[shared] path = {path:?}: this build has no shared-memory support (the \
         sluicegate-policy crate's `shared` feature)"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn def(text: &str) -> PolicyDef {
        PolicyDef::parse(text, None).unwrap()
    }

    #[test]
    fn sized_by_the_rules_up_to_the_bound() {
        let one = def("[[rule]]\nname = \"a\"\nkey = [\"ip\"]\nlimit = \"1/s\"\ncapacity = 1000\n");
        let p = choose(&one, None, None, None, "f").unwrap().unwrap();
        assert!(p.capacity() >= 1000 && p.memory() <= 1000 * BYTES_PER_KEY);
        let none = def("[[rule]]\nname = \"a\"\nlimit = \"1/s\"\n");
        assert!(choose(&none, None, None, None, "f").unwrap().is_none());
        let mut many = String::from("[state]\nmemory = \"1 MiB\"\n");
        for i in 0..100 {
            many += &format!("[[rule]]\nname = \"r{i}\"\nkey = [\"ip\"]\nlimit = \"1/s\"\n");
        }
        let p = choose(&def(&many), None, None, None, "f").unwrap().unwrap();
        assert!(p.memory() <= 1 << 20);
        // Kept while it fits and the bound is unchanged; a new bound, a new pool.
        let again = choose(&def(&many), Some(&p), Some(&def(&many)), None, "f")
            .unwrap()
            .unwrap();
        assert!(again.same(&p));
        let other = many.replace("1 MiB", "2 MiB");
        let moved = choose(&def(&other), Some(&p), Some(&def(&many)), None, "f")
            .unwrap()
            .unwrap();
        assert!(!moved.same(&p));
    }
}
