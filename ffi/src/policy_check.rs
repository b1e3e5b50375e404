//! The policy check from C: a request as `sluicegate_attr` pairs, the verdict in
//! a caller's `sluicegate_policy_result`, the per-rule answers in a reusable
//! `sluicegate_policy_decision` (see [`crate::policy`] for the handle itself).

use core::ffi::c_char;

use ::sluicegate_policy as rules;
use rules::{Attrs, Decision, Mode};

use crate::boundary::{guard, guard_void};
use crate::handle::put_text;
use crate::handle::{borrow, bytes, free, publish, write};
use crate::policy::sluicegate_policy;
use crate::status::sluicegate_status::{self, *};

/// The most attributes one check takes. A policy looks each attribute it names
/// up in the caller's array, so the bound keeps a check's cost bounded whatever a
/// client sends (e.g. an HTTP server passing every header). More is
/// `SLUICEGATE_ERR_TOO_MANY_ATTRS`.
pub const SLUICEGATE_POLICY_MAX_ATTRS: usize = 1024;

/// `sluicegate_policy_result.denying_rule` when no enforcing rule denied.
pub const SLUICEGATE_POLICY_NO_RULE: u32 = 0xFFFF_FFFF;

/// One request attribute: `name_len` bytes at `name` and `value_len` bytes at
/// `value`, both UTF-8 and not NUL-terminated. Neither pointer may be NULL (an
/// empty value is a non-NULL pointer with length 0).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct sluicegate_attr {
    /// The attribute's name, e.g. `"path"` or `"header:x-api-key"`.
    pub name: *const c_char,
    /// Bytes at `name`.
    pub name_len: usize,
    /// The attribute's value, e.g. `"/login"`.
    pub value: *const c_char,
    /// Bytes at `value`.
    pub value_len: usize,
}

/// An opaque, reusable buffer for a check's per-rule answers. A check into it
/// allocates nothing once it has held as many rules as match. Unlike the other
/// handles it is **not** shared: one thread uses it at a time (one per thread,
/// or per connection). The names it hands out stay valid until its next check or
/// its `_free`, across reloads of the policy. Created by
/// `sluicegate_policy_decision_new`, released by `sluicegate_policy_decision_free`.
pub struct sluicegate_policy_decision {
    inner: Decision,
}

/// What a policy check answered.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct sluicegate_policy_result {
    /// Whether the request is admitted: every enforcing rule that matched admitted
    /// it (and was charged). A denial charges no rule.
    pub allowed: bool,
    /// Nanoseconds until a retry could pass every denying rule (the longest of
    /// their waits); 0 when admitted; `UINT64_MAX` when a rule can never admit a
    /// request of this cost.
    pub retry_after_ns: u64,
    /// The longest shaper wait among the enforcing rules: how long an admitted
    /// request must wait before it runs (0 without shapers).
    pub delay_ns: u64,
    /// Rules that matched (enforcing and shadow): the indices
    /// `sluicegate_policy_decision_rule` accepts.
    pub rule_count: u32,
    /// The index (for `sluicegate_policy_decision_rule`) of the first enforcing
    /// rule that denied, or `SLUICEGATE_POLICY_NO_RULE` when admitted.
    pub denying_rule: u32,
}

/// One matching rule's answer, from `sluicegate_policy_decision_rule`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct sluicegate_policy_rule {
    /// The rule's name: `name_len` bytes of UTF-8, not NUL-terminated, owned by
    /// the decision (valid until its next check or its `_free`). Print it with
    /// `printf("%.*s", (int)r.name_len, r.name)`.
    pub name: *const c_char,
    /// Bytes at `name`.
    pub name_len: usize,
    /// A shadow rule: counted, never denies (its `allowed` false denied nothing).
    pub shadow: bool,
    /// Whether this rule admitted the request.
    pub allowed: bool,
    /// The rule's shared backend (Redis) failed and its `on_error` decided.
    pub backend_error: bool,
    /// Units this rule could still admit now, for this request's key.
    pub remaining: u64,
    /// The binding limit: the most units the rule admits at once.
    pub limit: u64,
    /// The window of the binding limit (`RateLimit-Policy`'s `w`), nanoseconds.
    pub window_ns: u64,
    /// Nanoseconds until a request of the same cost would pass this rule; 0 when
    /// allowed.
    pub retry_after_ns: u64,
    /// Nanoseconds until this rule's limiter is back to full for this key.
    pub reset_after_ns: u64,
    /// The shaper's wait; 0 for other algorithms.
    pub delay_ns: u64,
}

/// The caller's attributes, checked (non-NULL, UTF-8, at most
/// [`SLUICEGATE_POLICY_MAX_ATTRS`]), as the policy's attribute lookup.
struct CAttrs<'a>(&'a [sluicegate_attr]);

impl CAttrs<'_> {
    /// # Safety
    /// `p` is NULL (then `count` must be 0) or points to `count` attributes whose
    /// pointers are valid for their lengths, for the returned lifetime.
    unsafe fn new<'a>(
        p: *const sluicegate_attr,
        count: usize,
    ) -> Result<CAttrs<'a>, sluicegate_status> {
        if count == 0 {
            return Ok(CAttrs(&[]));
        }
        if p.is_null() {
            return Err(SLUICEGATE_ERR_NULL);
        }
        if count > SLUICEGATE_POLICY_MAX_ATTRS {
            return Err(SLUICEGATE_ERR_TOO_MANY_ATTRS);
        }
        // SAFETY: non-NULL, `count` attributes (the contract), and `count` is
        // small enough that the slice's size cannot overflow.
        let attrs = unsafe { core::slice::from_raw_parts(p, count) };
        for a in attrs {
            // SAFETY: each pointer is valid for its length (the contract).
            let (n, v) = unsafe {
                (
                    bytes(a.name.cast(), a.name_len)?,
                    bytes(a.value.cast(), a.value_len)?,
                )
            };
            if core::str::from_utf8(n).is_err() || core::str::from_utf8(v).is_err() {
                return Err(SLUICEGATE_ERR_NOT_UTF8);
            }
        }
        Ok(CAttrs(attrs))
    }

    /// # Safety
    /// `ptr` is valid for `len` bytes for `'a` (checked by [`Self::new`]).
    unsafe fn text<'a>(ptr: *const c_char, len: usize) -> &'a str {
        // SAFETY: non-NULL and valid (checked in `new`); invalid UTF-8 was
        // rejected there, so the fallback is never taken.
        core::str::from_utf8(unsafe { core::slice::from_raw_parts(ptr.cast::<u8>(), len) })
            .unwrap_or_default()
    }
}

impl Attrs for CAttrs<'_> {
    fn get(&self, name: &str) -> Option<&str> {
        self.0.iter().find_map(|a| {
            // SAFETY: every attribute was checked by `CAttrs::new`.
            let n = unsafe { Self::text(a.name, a.name_len) };
            // SAFETY: as above.
            (n == name).then(|| unsafe { Self::text(a.value, a.value_len) })
        })
    }
}

/// # Safety
/// As [`sluicegate_policy_check_at`].
#[allow(clippy::too_many_arguments)]
unsafe fn check(
    policy: *const sluicegate_policy,
    attrs: *const sluicegate_attr,
    attr_count: usize,
    n: u64,
    now: Option<u64>,
    decision: *mut sluicegate_policy_decision,
    out: *mut sluicegate_policy_result,
) -> sluicegate_status {
    guard(|| {
        // SAFETY: the export's contract.
        let handle = unsafe { borrow(policy) }?;
        let pol = &handle.inner;
        if out.is_null() {
            return Err(SLUICEGATE_ERR_NULL);
        }
        // SAFETY: the export's contract.
        let attrs = unsafe { CAttrs::new(attrs, attr_count) }?;
        let now = now.unwrap_or_else(|| handle.now());
        let mut local;
        // SAFETY: NULL or a live decision that no other thread uses (the contract).
        let d = match unsafe { decision.as_mut() } {
            Some(d) => &mut d.inner,
            None => {
                local = Decision::new();
                &mut local
            }
        };
        pol.check_n_at_into(&attrs, n, now, d);
        let result = sluicegate_policy_result {
            allowed: d.allowed(),
            retry_after_ns: d.retry_after_ns(),
            delay_ns: d.delay_ns(),
            // A policy has far fewer than 2^32 rules (each is lines of a file).
            rule_count: u32::try_from(d.rules().count()).unwrap_or(u32::MAX),
            denying_rule: d
                .rules()
                .position(|r| r.mode == Mode::Enforce && !r.allowed)
                .and_then(|i| u32::try_from(i).ok())
                .unwrap_or(SLUICEGATE_POLICY_NO_RULE),
        };
        // SAFETY: checked non-NULL; valid by the contract.
        unsafe { write(out, result) }
    })
}

/// Checks a request of cost `n` (usually 1; 0 peeks) now, on the library clock
/// (`sluicegate_now_ns`; for a policy with a `[shared]` table, the region's
/// clock, `sluicegate_shared_now_ns`): admitted only if every enforcing rule that matches
/// admits it, and a denial charges no rule. Shadow rules are checked and counted
/// but never deny. A cost above a rule's capacity is a denial by that rule with
/// `retry_after_ns = UINT64_MAX`.
///
/// `attrs` holds `attr_count` attributes (NULL when `attr_count` is 0; at most
/// `SLUICEGATE_POLICY_MAX_ATTRS`); a name given twice takes its first value.
/// The verdict goes to `*out`; the per-rule answers go to `decision` when it is
/// not NULL (reuse one per thread: no allocation once it has grown; without one
/// the check allocates a small buffer and frees it). Bad input: NULL pointers
/// (`SLUICEGATE_ERR_NULL`), a name or value that is not UTF-8
/// (`SLUICEGATE_ERR_NOT_UTF8`), too many attributes
/// (`SLUICEGATE_ERR_TOO_MANY_ATTRS`); then nothing is charged. A matching
/// `redis` rule makes the call block for a round trip to its server (see
/// `sluicegate_policy_new`).
///
/// # Safety
/// `policy` is a live handle; `attrs` is NULL or points to `attr_count`
/// attributes whose pointers are valid for their lengths; `decision` is NULL or
/// a live decision no other thread is using; `out` is valid for a write.
#[no_mangle]
pub unsafe extern "C" fn sluicegate_policy_check(
    policy: *const sluicegate_policy,
    attrs: *const sluicegate_attr,
    attr_count: usize,
    n: u64,
    decision: *mut sluicegate_policy_decision,
    out: *mut sluicegate_policy_result,
) -> sluicegate_status {
    // SAFETY: the export's contract.
    unsafe { check(policy, attrs, attr_count, n, None, decision, out) }
}

/// `sluicegate_policy_check` at the caller's time `now_ns` (one monotonic clock
/// for every call on this policy, e.g. `sluicegate_now_ns` read once per
/// event-loop turn; `sluicegate_shared_now_ns` for a policy with a `[shared]`
/// table, whose keyed state every process reads on that one clock). Rules on `redis` or `hybrid` backends decide on the Redis
/// server's clock whatever `now_ns` is.
///
/// # Safety
/// As `sluicegate_policy_check`.
#[no_mangle]
pub unsafe extern "C" fn sluicegate_policy_check_at(
    policy: *const sluicegate_policy,
    attrs: *const sluicegate_attr,
    attr_count: usize,
    n: u64,
    now_ns: u64,
    decision: *mut sluicegate_policy_decision,
    out: *mut sluicegate_policy_result,
) -> sluicegate_status {
    // SAFETY: the export's contract.
    unsafe { check(policy, attrs, attr_count, n, Some(now_ns), decision, out) }
}

/// Creates an empty decision buffer for `sluicegate_policy_check*`.
///
/// # Safety
/// `out` is valid for a write.
#[no_mangle]
pub unsafe extern "C" fn sluicegate_policy_decision_new(
    out: *mut *mut sluicegate_policy_decision,
) -> sluicegate_status {
    guard(|| {
        // SAFETY: the export's contract.
        unsafe {
            publish(
                out,
                sluicegate_policy_decision {
                    inner: Decision::new(),
                },
            )
        }
    })
}

/// Releases a decision buffer. NULL does nothing.
///
/// # Safety
/// `decision` is NULL or a handle from `sluicegate_policy_decision_new` that has
/// not been freed, and no other thread is using it.
#[no_mangle]
pub unsafe extern "C" fn sluicegate_policy_decision_free(
    decision: *mut sluicegate_policy_decision,
) {
    // SAFETY: the export's contract.
    guard_void(|| unsafe { free(decision) })
}

/// Writes matching rule number `index` (0 to `rule_count - 1`, in file order) of
/// the decision's last check to `*out`; a larger index is `SLUICEGATE_ERR_INDEX`.
///
/// # Safety
/// `decision` is a live decision no other thread is using; `out` is valid for a
/// write.
#[no_mangle]
pub unsafe extern "C" fn sluicegate_policy_decision_rule(
    decision: *const sluicegate_policy_decision,
    index: u32,
    out: *mut sluicegate_policy_rule,
) -> sluicegate_status {
    guard(|| {
        // SAFETY: the export's contract.
        let d = &unsafe { borrow(decision) }?.inner;
        if out.is_null() {
            return Err(SLUICEGATE_ERR_NULL);
        }
        let r = usize::try_from(index)
            .ok()
            .and_then(|i| d.rules().nth(i))
            .ok_or(SLUICEGATE_ERR_INDEX)?;
        let rule = sluicegate_policy_rule {
            name: r.name.as_ptr().cast(),
            name_len: r.name.len(),
            shadow: r.mode == Mode::Shadow,
            allowed: r.allowed,
            backend_error: r.backend_error,
            remaining: r.remaining,
            limit: r.limit,
            window_ns: r.window_ns,
            retry_after_ns: r.retry_after_ns,
            reset_after_ns: r.reset_after_ns,
            delay_ns: r.delay_ns,
        };
        // SAFETY: checked non-NULL; valid by the contract.
        unsafe { write(out, rule) }
    })
}

/// The `RateLimit` field value of the decision's last check (IETF httpapi
/// draft; one item per enforcing rule that matched, e.g.
/// `"login";r=0;t=60`), `snprintf`-style: at most `cap` bytes including the NUL
/// into `buf` (NULL with `cap` 0 to measure), the full length into `*len` (may
/// be NULL).
///
/// # Safety
/// `decision` is a live decision no other thread is using; `buf` is NULL or
/// valid for writes of `cap` bytes; `len` is NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn sluicegate_policy_decision_ratelimit(
    decision: *const sluicegate_policy_decision,
    buf: *mut c_char,
    cap: usize,
    len: *mut usize,
) -> sluicegate_status {
    guard(|| {
        // SAFETY: the export's contract.
        let d = &unsafe { borrow(decision) }?.inner;
        // SAFETY: the export's contract.
        unsafe { put_text(&d.ratelimit_header(), buf, cap, len) }
    })
}

/// The `RateLimit-Policy` field value of the decision's last check (one item per
/// enforcing rule that matched, e.g. `"login";q=5;w=60`), as
/// `sluicegate_policy_decision_ratelimit`.
///
/// # Safety
/// As `sluicegate_policy_decision_ratelimit`.
#[no_mangle]
pub unsafe extern "C" fn sluicegate_policy_decision_ratelimit_policy(
    decision: *const sluicegate_policy_decision,
    buf: *mut c_char,
    cap: usize,
    len: *mut usize,
) -> sluicegate_status {
    guard(|| {
        // SAFETY: the export's contract.
        let d = &unsafe { borrow(decision) }?.inner;
        // SAFETY: the export's contract.
        unsafe { put_text(&d.ratelimit_policy_header(), buf, cap, len) }
    })
}
