//! `sluicegate_policy`: rate-limit policies (rules by scope in one TOML file,
//! checked all-or-nothing across rules, shadow rules, hot reload, Prometheus
//! metrics) from C, over the `sluicegate-policy` crate.
//!
//! * A policy is built from TOML text (`sluicegate_policy_new`) or a file
//!   (`sluicegate_policy_new_from_file`); a rejected one reports every error with
//!   its file, line, column and rule into the caller's message buffer.
//! * A request is an array of `sluicegate_attr` (name and value bytes, UTF-8,
//!   not NUL-terminated): `ip`, `path`, `method`, `host`, `header:<lower-case
//!   name>` and any the application adds (`tenant`, `channel`, ...).
//! * `sluicegate_policy_check[_at]` writes the verdict into a caller's
//!   `sluicegate_policy_result` and, when given one, the per-rule answers into a
//!   reusable `sluicegate_policy_decision`, read with
//!   `sluicegate_policy_decision_rule` and the `RateLimit` header helpers.
//! * `sluicegate_policy_reload[_from_file]` validates first: a rejected policy
//!   leaves the one in force running, with its state.
//! * Text out (metrics, headers, messages) follows `snprintf`: the buffer gets
//!   as much as fits, NUL-terminated, and `*len` the full length.

use core::ffi::c_char;

use ::sluicegate_policy as rules;
use rules::{Attrs, Code, Decision, Diagnostic, Mode, Policy};

use crate::boundary::{guard, guard_void};
use crate::handle::{borrow, bytes, free, publish, write};
use crate::limiter::clock;
use crate::status::sluicegate_status::{self, *};
use sluicegate::Clock as _;

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

/// An opaque policy: the rules of a rule file and their limiters. Thread-safe:
/// any number of threads may check it, and reload it, at once. Created by
/// `sluicegate_policy_new` or `sluicegate_policy_new_from_file`, owned by the
/// caller, released by `sluicegate_policy_free`.
pub struct sluicegate_policy {
    inner: Policy,
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

/// Copies `text` into a caller's buffer, `snprintf`-style: as many bytes as fit
/// with a NUL after them, and the full length (without the NUL) into `*len`.
///
/// # Safety
/// `buf` is NULL or valid for writes of `cap` bytes; `len` is NULL or valid for
/// a write.
pub(crate) unsafe fn put_text(
    text: &str,
    buf: *mut c_char,
    cap: usize,
    len: *mut usize,
) -> Result<(), sluicegate_status> {
    if buf.is_null() && cap != 0 {
        return Err(SLUICEGATE_ERR_NULL);
    }
    if cap != 0 {
        let n = text.len().min(cap - 1);
        // SAFETY: `buf` is non-NULL and valid for `cap > n` bytes (the contract);
        // the source is a live `&str`, which cannot overlap the caller's buffer.
        unsafe {
            core::ptr::copy_nonoverlapping(text.as_ptr(), buf.cast::<u8>(), n);
            buf.add(n).write(0);
        }
    }
    // SAFETY: NULL or valid for a write (the contract); NULL is not written.
    let _ = unsafe { write(len, text.len()) };
    Ok(())
}

/// The status of a rejected policy: the first error's kind.
fn status_of(e: &rules::Error) -> sluicegate_status {
    match e.diagnostics().first().map(|d| d.code) {
        Some(Code::Io) => SLUICEGATE_ERR_IO,
        _ => SLUICEGATE_ERR_POLICY,
    }
}

/// The text of a policy's warnings, one a line ("" without any).
fn warnings_text(w: &[Diagnostic]) -> String {
    let lines: Vec<String> = w.iter().map(ToString::to_string).collect();
    lines.join("\n")
}

/// Where a policy comes from.
enum Source<'a> {
    Text(&'a str),
    File(std::path::PathBuf),
}

/// Reads the caller's TOML text (UTF-8) or file path.
///
/// # Safety
/// `p` is NULL or valid for reads of `len` bytes.
unsafe fn source<'a>(
    p: *const c_char,
    len: usize,
    file: bool,
) -> Result<Source<'a>, sluicegate_status> {
    // SAFETY: forwarded contract.
    let b = unsafe { bytes(p.cast(), len) }?;
    if file {
        #[cfg(unix)]
        {
            use std::os::unix::ffi::OsStrExt;
            return Ok(Source::File(std::ffi::OsStr::from_bytes(b).into()));
        }
        #[cfg(not(unix))]
        {
            let s = core::str::from_utf8(b).map_err(|_| SLUICEGATE_ERR_NOT_UTF8)?;
            return Ok(Source::File(s.into()));
        }
    }
    core::str::from_utf8(b)
        .map(Source::Text)
        .map_err(|_| SLUICEGATE_ERR_NOT_UTF8)
}

/// Writes `message` to the caller's message buffer (if any) and passes `r` on.
///
/// # Safety
/// `err` is NULL or valid for writes of `err_cap` bytes.
unsafe fn report<T>(
    r: Result<T, rules::Error>,
    err: *mut c_char,
    err_cap: usize,
    ok_text: impl FnOnce(&T) -> String,
) -> Result<T, sluicegate_status> {
    let (text, r) = match r {
        Ok(v) => (ok_text(&v), Ok(v)),
        Err(e) => (e.to_string(), Err(status_of(&e))),
    };
    // A NULL buffer with any capacity is "no message" here (the message is
    // optional), not an error.
    if !err.is_null() {
        // SAFETY: non-NULL and valid for `err_cap` bytes (forwarded contract).
        unsafe { put_text(&text, err, err_cap, core::ptr::null_mut()) }?;
    }
    r
}

/// Clears the caller's message buffer, so it reads "" unless a call writes it.
///
/// # Safety
/// `err` is NULL or valid for writes of `err_cap` bytes.
unsafe fn clear_message(err: *mut c_char, err_cap: usize) {
    if !err.is_null() && err_cap != 0 {
        // SAFETY: non-NULL, at least one byte (the contract).
        unsafe { err.write(0) };
    }
}

/// # Safety
/// As [`sluicegate_policy_new`].
unsafe fn create(
    p: *const c_char,
    len: usize,
    file: bool,
    err: *mut c_char,
    err_cap: usize,
    out: *mut *mut sluicegate_policy,
) -> sluicegate_status {
    guard(|| {
        // SAFETY: the export's contract.
        unsafe { clear_message(err, err_cap) };
        if out.is_null() {
            return Err(SLUICEGATE_ERR_NULL);
        }
        // SAFETY: the export's contract.
        let built = match unsafe { source(p, len, file) }? {
            Source::Text(t) => Policy::from_toml(t),
            Source::File(f) => Policy::from_path(f),
        };
        // SAFETY: the export's contract.
        let policy = unsafe {
            report(built, err, err_cap, |p| {
                warnings_text(p.definition().warnings())
            })
        }?;
        // SAFETY: `out` is non-NULL and valid for a write.
        unsafe { publish(out, sluicegate_policy { inner: policy }) }
    })
}

/// Builds a policy from rule-file text (TOML, `len` bytes of UTF-8, not
/// NUL-terminated). On success `*out` is the new handle and `err` holds the
/// file's warnings (a rule that can never match, a rule identical to an earlier
/// one), one a line, or `""`. On error `*out` is unchanged and `err` holds every
/// error, one a line, each as `<policy>:<line>:<column>: error: rule `<name>`:
/// <what is wrong>`: `SLUICEGATE_ERR_POLICY` for an invalid policy,
/// `SLUICEGATE_ERR_NOT_UTF8` for text that is not UTF-8.
///
/// `err` receives at most `err_cap` bytes including the NUL (truncated); it may
/// be NULL (or `err_cap` 0) for the status alone. Rules on `redis` or `hybrid`
/// backends are rejected (`SLUICEGATE_ERR_POLICY`, naming the rule): this
/// library builds local rules only.
///
/// # Safety
/// `text` points to `len` readable bytes; `err` is NULL or valid for writes of
/// `err_cap` bytes; `out` is valid for a write.
#[no_mangle]
pub unsafe extern "C" fn sluicegate_policy_new(
    text: *const c_char,
    len: usize,
    err: *mut c_char,
    err_cap: usize,
    out: *mut *mut sluicegate_policy,
) -> sluicegate_status {
    // SAFETY: the export's contract.
    unsafe { create(text, len, false, err, err_cap, out) }
}

/// Builds a policy from the rule file at `path` (`path_len` bytes, not
/// NUL-terminated), as `sluicegate_policy_new`; the messages name the file. A
/// file that cannot be read is `SLUICEGATE_ERR_IO` (the message says why).
///
/// # Safety
/// `path` points to `path_len` readable bytes; `err` is NULL or valid for writes
/// of `err_cap` bytes; `out` is valid for a write.
#[no_mangle]
pub unsafe extern "C" fn sluicegate_policy_new_from_file(
    path: *const c_char,
    path_len: usize,
    err: *mut c_char,
    err_cap: usize,
    out: *mut *mut sluicegate_policy,
) -> sluicegate_status {
    // SAFETY: the export's contract.
    unsafe { create(path, path_len, true, err, err_cap, out) }
}

/// Releases a policy. NULL does nothing. Decisions filled by it stay valid.
///
/// # Safety
/// `policy` is NULL or a handle from `sluicegate_policy_new*` that has not been
/// freed, and no other thread is using it.
#[no_mangle]
pub unsafe extern "C" fn sluicegate_policy_free(policy: *mut sluicegate_policy) {
    // SAFETY: the export's contract.
    guard_void(|| unsafe { free(policy) })
}

/// # Safety
/// As [`sluicegate_policy_reload`].
unsafe fn reload(
    policy: *const sluicegate_policy,
    p: *const c_char,
    len: usize,
    file: bool,
    err: *mut c_char,
    err_cap: usize,
) -> sluicegate_status {
    guard(|| {
        // SAFETY: the export's contract.
        unsafe { clear_message(err, err_cap) };
        // SAFETY: the export's contract.
        let pol = &unsafe { borrow(policy) }?.inner;
        // SAFETY: the export's contract.
        let r = match unsafe { source(p, len, file) }? {
            Source::Text(t) => pol.reload_from_toml(t),
            Source::File(f) => pol.reload_from_path(f),
        };
        // SAFETY: the export's contract.
        unsafe { report(r, err, err_cap, |r| warnings_text(&r.warnings)) }.map(drop)
    })
}

/// Replaces the policy's rules with those in `text`, if they are valid. Rules
/// whose name and limits are unchanged keep their state; a changed limit carries
/// the state over; removed rules free their memory. On any error (reported as by
/// `sluicegate_policy_new`) the policy in force is **unchanged**, keeps running
/// with its state, and the failure is counted in the metrics
/// (`sluicegate_policy_reloads_total{result="error"}`, and the message in
/// `sluicegate_policy_last_reload_error`). Safe while other threads check.
///
/// # Safety
/// `policy` is a live handle; `text` points to `len` readable bytes; `err` is
/// NULL or valid for writes of `err_cap` bytes.
#[no_mangle]
pub unsafe extern "C" fn sluicegate_policy_reload(
    policy: *const sluicegate_policy,
    text: *const c_char,
    len: usize,
    err: *mut c_char,
    err_cap: usize,
) -> sluicegate_status {
    // SAFETY: the export's contract.
    unsafe { reload(policy, text, len, false, err, err_cap) }
}

/// `sluicegate_policy_reload` with the rule file at `path` (`path_len` bytes).
///
/// # Safety
/// `policy` is a live handle; `path` points to `path_len` readable bytes; `err`
/// is NULL or valid for writes of `err_cap` bytes.
#[no_mangle]
pub unsafe extern "C" fn sluicegate_policy_reload_from_file(
    policy: *const sluicegate_policy,
    path: *const c_char,
    path_len: usize,
    err: *mut c_char,
    err_cap: usize,
) -> sluicegate_status {
    // SAFETY: the export's contract.
    unsafe { reload(policy, path, path_len, true, err, err_cap) }
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
        let pol = &unsafe { borrow(policy) }?.inner;
        if out.is_null() {
            return Err(SLUICEGATE_ERR_NULL);
        }
        // SAFETY: the export's contract.
        let attrs = unsafe { CAttrs::new(attrs, attr_count) }?;
        let now = now.unwrap_or_else(|| clock().now());
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
/// (`sluicegate_now_ns`): admitted only if every enforcing rule that matches
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
/// (`SLUICEGATE_ERR_TOO_MANY_ATTRS`); then nothing is charged.
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
/// event-loop turn).
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

/// The policy's metrics in the Prometheus text format (0.0.4) at the library
/// clock's now: per rule, requests allowed / denied / shadow-denied, backend
/// errors, keys tracked, evictions, new keys turned away; the reload count and
/// the last reload error. `snprintf`-style: at most `cap` bytes including the NUL
/// into `buf` (NULL with `cap` 0 to measure), the full length (without the NUL)
/// into `*len`; the text may grow between two calls (counters gain digits), so
/// size the buffer with some room and check `*len < cap`.
///
/// # Safety
/// `policy` is a live handle; `buf` is NULL or valid for writes of `cap` bytes;
/// `len` is NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn sluicegate_policy_metrics_text(
    policy: *const sluicegate_policy,
    buf: *mut c_char,
    cap: usize,
    len: *mut usize,
) -> sluicegate_status {
    // SAFETY: the export's contract.
    unsafe { sluicegate_policy_metrics_text_at(policy, clock().now(), buf, cap, len) }
}

/// `sluicegate_policy_metrics_text` at the caller's time `now_ns` (the keys
/// gauge counts the keys not back to full at that time).
///
/// # Safety
/// As `sluicegate_policy_metrics_text`.
#[no_mangle]
pub unsafe extern "C" fn sluicegate_policy_metrics_text_at(
    policy: *const sluicegate_policy,
    now_ns: u64,
    buf: *mut c_char,
    cap: usize,
    len: *mut usize,
) -> sluicegate_status {
    guard(|| {
        // SAFETY: the export's contract.
        let pol = &unsafe { borrow(policy) }?.inner;
        if buf.is_null() && cap != 0 {
            return Err(SLUICEGATE_ERR_NULL);
        }
        // SAFETY: the export's contract.
        unsafe { put_text(&pol.metrics_text_at(now_ns), buf, cap, len) }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_out_follows_snprintf() {
        let mut buf = [0x55 as c_char; 4];
        let mut len = 0usize;
        // SAFETY: a 4-byte buffer and a live length.
        unsafe { put_text("hello", buf.as_mut_ptr(), buf.len(), &mut len) }.unwrap();
        assert_eq!(len, 5);
        assert_eq!(buf.map(|c| c as u8), *b"hel\0");
        // SAFETY: NULL with capacity 0 measures.
        unsafe { put_text("hello", core::ptr::null_mut(), 0, &mut len) }.unwrap();
        assert_eq!(len, 5);
        // SAFETY: as above; NULL with a capacity is refused before any write.
        let r = unsafe { put_text("x", core::ptr::null_mut(), 1, &mut len) };
        assert_eq!(r, Err(SLUICEGATE_ERR_NULL));
    }

    #[test]
    fn a_policy_from_rust_through_the_c_calls() {
        let text = "[[rule]]\nname = \"one\"\nkey = [\"user\"]\nlimit = \"1/minute\"\n";
        let mut p = core::ptr::null_mut();
        let mut err = [0 as c_char; 128];
        // SAFETY: live buffers of the given lengths.
        let s = unsafe {
            sluicegate_policy_new(
                text.as_ptr().cast(),
                text.len(),
                err.as_mut_ptr(),
                err.len(),
                &mut p,
            )
        };
        assert_eq!(s, SLUICEGATE_OK);
        let attrs = [sluicegate_attr {
            name: c"user".as_ptr(),
            name_len: 4,
            value: c"ann".as_ptr(),
            value_len: 3,
        }];
        let mut r = sluicegate_policy_result {
            allowed: false,
            retry_after_ns: 0,
            delay_ns: 0,
            rule_count: 0,
            denying_rule: 0,
        };
        for allowed in [true, false] {
            // SAFETY: a live policy, one attribute, a live result.
            let s = unsafe {
                sluicegate_policy_check_at(
                    p,
                    attrs.as_ptr(),
                    1,
                    1,
                    0,
                    core::ptr::null_mut(),
                    &mut r,
                )
            };
            assert_eq!((s, r.allowed, r.rule_count), (SLUICEGATE_OK, allowed, 1));
        }
        assert_eq!(r.denying_rule, 0);
        assert_eq!(r.retry_after_ns, 60_000_000_000);
        // SAFETY: the handle from `sluicegate_policy_new`, freed once.
        unsafe { sluicegate_policy_free(p) };
    }
}
