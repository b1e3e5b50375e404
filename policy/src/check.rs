//! The check of one request: which rules match, and the charge across them.
//!
//! # All-or-nothing across rules: charge in turn, give back on a denial
//! A request is admitted only if every enforcing rule that matches admits it, and
//! a denial by one rule consumes nothing from the others. The check runs each
//! matching enforcing rule's own atomic check once, in file order, keeping a
//! receipt of what each took (core's `check_n_at_receipt`). When one denies, the
//! rules already charged are refunded (`refund`): each gets back exactly what
//! this request took, never more, whatever other requests did in between.
//!
//! * *Never over-admits:* every unit a rule admits is admitted by that rule's own
//!   atomic check, so no rule, under any interleaving of threads, admits beyond
//!   its quota.
//! * *A denial consumes nothing*, under any interleaving: the only units a denied
//!   request ever held are given back. Two documented exceptions, both
//!   conservative (early to limit, never late): a keyed rule whose key was
//!   evicted from its full table in between gets nothing back (its state went to
//!   the table's sketch with the charge in it), and rules that cannot give back
//!   (below) keep theirs.
//!
//! Rules whose limiter cannot give back — `redis`/`hybrid` rules (the shared
//! backend keeps no receipts), striped rules and sliding logs — run after the
//! others, by peek-then-commit: all but the last are peeked, the last is
//! checked, then the peeked ones are charged. With at most one such rule per
//! request the whole check is exact; with several, a request that passed a
//! peek and then lost the rule's last units to a concurrent request is denied,
//! and such rules it already committed keep that charge.
//!
//! Shadow rules are checked on their own (charged when they would admit), counted,
//! and never deny or block the others. Denied requests peek the enforcing rules
//! they never reached, for their headers.
//!
//! # Sync and async: one check
//! The check is one async function ([`decide_with`]). The async API awaits each
//! shared backend's answer; the sync API calls the backend on its own thread, so
//! nothing in the future waits and its first poll completes it. A check cut
//! short — its future dropped at an await (a timeout, a client gone) — gives
//! back every receipt it holds when it is dropped (the [`Refund`] guard): its
//! local rules are exactly as if it never ran. A call already sent to a shared
//! backend cannot be recalled and may be charged there, like the charges of
//! rules that cannot give back above: early to limit, never late. A shadow
//! rule's charge stays, as it always does.

use std::cell::RefCell;
use std::future::Future;
use std::pin::pin;
use std::sync::Arc;
use std::task::{Context, Waker};

use sluicegate::{Decision as Verdict, Outcome, Receipt};

use crate::attrs::AttrName;
use crate::backend::Answer;
use crate::counters::bump;
use crate::decision::{Decision, Item, Pending, Stage};
use crate::def::Mode;
use crate::index::{Candidates, Id};
use crate::key::{KeyRef, Lookup};
use crate::model::{Compiled, Rule};

/// One rule run for one request.
struct Ctx<'a, L: ?Sized> {
    lookup: &'a L,
    names: &'a [AttrName],
    v6: u8,
    n: u64,
    now: u64,
    /// Whether a shared backend's check is awaited (the async check) or called
    /// on this thread (the sync check, whose future is then ready at once).
    wait: bool,
}

impl<L: Lookup + ?Sized> Ctx<'_, L> {
    fn matches(&self, rule: &Rule) -> bool {
        rule.conds.iter().all(|(i, c)| {
            let name = &self.names[usize::from(*i)];
            c.matches_with(self.lookup.value(*i, name), || self.lookup.ip(*i, name))
        })
    }

    /// The rule's key for this request.
    fn key<'r>(&'r self, rule: &'r Rule) -> KeyRef<'r, L> {
        KeyRef {
            lookup: self.lookup,
            names: self.names,
            idx: &rule.key,
            ipv6_prefix: self.v6,
        }
    }

    /// Checks (`consume`, writing `receipt`) or peeks at the rule: the outcome and
    /// whether its shared backend failed.
    async fn run(&self, rule: &Rule, consume: bool, receipt: &mut Receipt) -> (Outcome, bool) {
        let key = self.key(rule);
        let (l, n, now) = (&rule.limiter, self.n, self.now);
        let answer = if self.wait {
            l.run_async(&key, |out| key.write_text(out), n, now, consume, receipt)
                .await
        } else {
            l.run(&key, |out| key.write_text(out), n, now, consume, receipt)
        };
        match answer {
            Ok(Answer::Decided(o)) => (o, false),
            Ok(Answer::Fallback(o)) => {
                bump(&rule.metrics.backend_errors);
                (o, true)
            }
            Err(_) => (plain(Verdict::never(rule.def.spec().capacity())), false),
        }
    }

    /// Runs `out.items[i]` and records its outcome; a check of a rule that can
    /// give back keeps its receipt. Whether the rule admitted.
    async fn set(
        &self,
        snap: &Compiled,
        out: &mut Decision,
        pending: &mut Pending,
        i: usize,
        consume: bool,
    ) -> bool {
        let rule = &snap.rules[out.items[i].rule as usize];
        let (o, e) = self.run(rule, consume, pending.next()).await;
        let it = &mut out.items[i];
        it.outcome = o;
        it.backend_error |= e;
        it.stage = if consume {
            Stage::Checked
        } else {
            Stage::Peeked
        };
        if consume && o.decision.allowed && rule.refundable {
            pending.keep(it.rule);
        }
        o.decision.allowed
    }
}

/// An outcome without a wait.
fn plain(decision: Verdict) -> Outcome {
    Outcome {
        decision,
        delay_ns: 0,
    }
}

/// What a check reuses from one request to the next: the receipts of the rules
/// charged so far, and the index's hits.
#[derive(Default)]
struct Scratch {
    pending: Pending,
    hits: Vec<Id>,
}

thread_local! {
    /// This thread's lists for the check in progress (no allocation once warm).
    static SCRATCH: RefCell<Scratch> = RefCell::new(Scratch::default());
}

/// Runs `f` with this thread's scratch lists, or fresh ones for a check inside
/// a check on this thread (a remote limiter calling back into a policy).
fn with_scratch<R>(f: impl FnOnce(&mut Pending, &mut Vec<Id>) -> R) -> R {
    SCRATCH.with(|s| match s.try_borrow_mut() {
        Ok(mut s) => {
            let Scratch { pending, hits } = &mut *s;
            f(pending, hits)
        }
        Err(_) => f(&mut Pending::default(), &mut Vec::new()),
    })
}

/// Decides on this thread (shared backends called, not awaited): nothing in
/// the check's future waits, so its first poll completes it.
pub(crate) fn decide<L: Lookup + ?Sized>(
    snap: Arc<Compiled>,
    lookup: &L,
    n: u64,
    now: u64,
    out: &mut Decision,
) {
    with_scratch(|pending, hits| {
        let mut check = pin!(decide_with(
            snap,
            lookup,
            (n, now),
            false,
            out,
            pending,
            hits
        ));
        let mut cx = Context::from_waker(Waker::noop());
        // Ready at the first poll (a loop only so that no path can leave the
        // check half done).
        while check.as_mut().poll(&mut cx).is_pending() {}
    });
}

/// Decides, awaiting each shared backend ([`crate::RemoteLimiter::check_n_async`]).
/// Dropped at an await, the check gives back what its local rules took (the
/// drop guard in [`decide_with`]).
pub(crate) async fn decide_async<L: Lookup + Sync + ?Sized>(
    snap: Arc<Compiled>,
    lookup: &L,
    n: u64,
    now: u64,
    out: &mut Decision,
) {
    // Its own lists: the future may move between threads, and other checks run
    // on this thread while it waits.
    let Scratch {
        mut pending,
        mut hits,
    } = Scratch::default();
    decide_with(snap, lookup, (n, now), true, out, &mut pending, &mut hits).await;
}

/// The request's context and the rules it may match (the index's candidates,
/// listed into `hits`), in file order.
fn context<'a, L: Lookup + ?Sized>(
    snap: &'a Compiled,
    lookup: &'a L,
    (n, now): (u64, u64),
    wait: bool,
    hits: &'a mut Vec<Id>,
) -> (Ctx<'a, L>, Candidates<'a>) {
    let cx = Ctx {
        lookup,
        names: &snap.names,
        v6: snap.def.ipv6_prefix,
        n,
        now,
        wait,
    };
    (cx, snap.index.candidates(lookup, &snap.names, hits))
}

/// Whether [`decide`] may wait for a shared backend. It answers `false` only
/// when no step of the check can: every matching rule on a shared backend
/// answers `n` units from this process now, and no such rule is ever peeked — the
/// only rule it can be peeked by is another enforcing rule (a denial peeks the
/// rules it did not reach; several deferred rules peek all but the last), so a
/// remote rule must be the one enforcing rule that matches.
pub(crate) fn may_wait<L: Lookup + ?Sized>(snap: &Compiled, lookup: &L, n: u64) -> bool {
    with_scratch(|_, hits| may_wait_with(snap, lookup, n, hits))
}

fn may_wait_with<L: Lookup + ?Sized>(
    snap: &Compiled,
    lookup: &L,
    n: u64,
    hits: &mut Vec<Id>,
) -> bool {
    let (cx, candidates) = context(snap, lookup, (n, 0), false, hits);
    let (mut enforcing, mut remote_enforcing) = (0, 0);
    for i in candidates {
        let rule = &snap.rules[i];
        if !cx.matches(rule) {
            continue;
        }
        let remote = rule.limiter.is_remote();
        if remote && rule.limiter.may_wait(|out| cx.key(rule).write_text(out), n) {
            return true;
        }
        if rule.enforce {
            enforcing += 1;
            remote_enforcing += usize::from(remote);
        }
    }
    remote_enforcing > 0 && enforcing > 1
}

/// Gives back, when dropped, every charge still kept in `pending`. A check that
/// runs to its end has emptied `pending` (given back on a denial, kept on an
/// admission), so this does nothing then; a check cut short — its future
/// dropped at an await, or a panic — is refunded exactly what it took.
struct Refund<'a> {
    rules: &'a [Rule],
    pending: &'a mut Pending,
    now: u64,
}

impl Drop for Refund<'_> {
    fn drop(&mut self) {
        for (rule, receipt) in self.pending.drain() {
            if let Some(rule) = self.rules.get(*rule as usize) {
                rule.limiter.refund(receipt, self.now);
            }
        }
    }
}

/// The check, written once: `wait` says whether shared backends are awaited
/// ([`decide_async`]) or called ([`decide`]).
async fn decide_with<L: Lookup + ?Sized>(
    snap: Arc<Compiled>,
    lookup: &L,
    (n, now): (u64, u64),
    wait: bool,
    out: &mut Decision,
    pending: &mut Pending,
    hits: &mut Vec<Id>,
) {
    // Until the check ends, `out` says denied (and, its snapshot taken, lists no
    // rule): what a check cut short leaves there.
    out.items.clear();
    out.allowed = false;
    pending.clear();
    let denied = {
        let guard = Refund {
            rules: &snap.rules,
            pending,
            now,
        };
        let pending = &mut *guard.pending;
        let (cx, candidates) = context(&snap, lookup, (n, now), wait, hits);
        // 1. In file order: shadow rules on their own; enforcing rules that can give
        // back are charged until one denies; the others wait.
        let mut denied = false;
        let mut deferred = false;
        for i in candidates {
            let rule = &snap.rules[i];
            if !cx.matches(rule) {
                continue;
            }
            let idx = out.items.len();
            out.items.push(Item {
                rule: i as u32,
                outcome: plain(Verdict::never(0)),
                backend_error: false,
                stage: Stage::Todo,
            });
            match rule.def.mode() {
                Mode::Shadow => {
                    // Shadow charges stay: the slot is reused, not kept.
                    let (o, e) = cx.run(rule, true, pending.next()).await;
                    let it = &mut out.items[idx];
                    (it.outcome, it.backend_error, it.stage) = (o, e, Stage::Checked);
                    bump(if o.decision.allowed {
                        &rule.metrics.allowed
                    } else {
                        &rule.metrics.shadow_denied
                    });
                }
                Mode::Enforce if denied => {}
                Mode::Enforce if rule.refundable => {
                    denied = !cx.set(&snap, out, pending, idx, true).await;
                }
                Mode::Enforce => deferred = true,
            }
        }
        // 2. The rules that cannot give back: peek all but the last, check the last,
        // then charge the peeked ones.
        let waiting = |it: &Item| it.stage == Stage::Todo && snap.rules[it.rule as usize].enforce;
        if deferred && !denied {
            let last = out.items.iter().rposition(waiting);
            for i in 0..out.items.len() {
                if !denied && Some(i) != last && waiting(&out.items[i]) {
                    denied = !cx.set(&snap, out, pending, i, false).await;
                }
            }
            if let Some(last) = last.filter(|_| !denied) {
                denied = !cx.set(&snap, out, pending, last, true).await;
            }
            for i in 0..out.items.len() {
                if !denied && out.items[i].stage == Stage::Peeked {
                    denied = !cx.set(&snap, out, pending, i, true).await;
                }
            }
        }
        // 3. A denial gives back every charge this request made, and peeks the
        // enforcing rules it never reached (for their headers).
        if denied {
            for (rule, receipt) in pending.drain() {
                snap.rules[*rule as usize].limiter.refund(receipt, now);
            }
            for i in 0..out.items.len() {
                if waiting(&out.items[i]) {
                    cx.set(&snap, out, pending, i, false).await;
                }
            }
        }
        // Admitted: the charges stay (the guard finds nothing to give back).
        pending.clear();
        for it in out.items.iter() {
            let rule = &snap.rules[it.rule as usize];
            if !rule.enforce {
                continue;
            }
            if !it.outcome.decision.allowed {
                bump(&rule.metrics.denied);
            } else if !denied {
                bump(&rule.metrics.allowed);
            }
        }
        denied
    };
    out.allowed = !denied;
    out.snapshot = Some(snap);
}

/// What a check of `n` units would answer now, changing nothing: every
/// matching rule is peeked (nothing charged, no rule's counters bumped but a
/// shared backend's failure, which is counted as any failure is), shadow rules
/// included, in file order. `wait`: as in [`decide_with`].
pub(crate) async fn peek_with<L: Lookup + ?Sized>(
    snap: Arc<Compiled>,
    lookup: &L,
    (n, now): (u64, u64),
    wait: bool,
    out: &mut Decision,
) {
    out.items.clear();
    out.allowed = false;
    let mut hits = Vec::new();
    let mut receipt = Receipt::empty();
    let mut allowed = true;
    {
        let (cx, candidates) = context(&snap, lookup, (n, now), wait, &mut hits);
        for i in candidates {
            let rule = &snap.rules[i];
            if !cx.matches(rule) {
                continue;
            }
            let (outcome, backend_error) = cx.run(rule, false, &mut receipt).await;
            allowed &= !rule.enforce || outcome.decision.allowed;
            out.items.push(Item {
                rule: i as u32,
                outcome,
                backend_error,
                stage: Stage::Peeked,
            });
        }
    }
    out.allowed = allowed;
    out.snapshot = Some(snap);
}

/// [`peek_with`] on this thread (a shared backend called, not awaited).
pub(crate) fn peek<L: Lookup + ?Sized>(
    snap: Arc<Compiled>,
    lookup: &L,
    n: u64,
    now: u64,
    out: &mut Decision,
) {
    let mut check = pin!(peek_with(snap, lookup, (n, now), false, out));
    let mut cx = Context::from_waker(Waker::noop());
    while check.as_mut().poll(&mut cx).is_pending() {}
}
