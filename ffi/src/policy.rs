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
//!   `sluicegate_policy_decision_rule` and the `RateLimit` header helpers (all
//!   in [`crate::policy_check`]).
//! * `sluicegate_policy_reload[_from_file]` validates first: a rejected policy
//!   leaves the one in force running, with its state.
//! * Text out (metrics, headers, messages) follows `snprintf`: the buffer gets
//!   as much as fits, NUL-terminated, and `*len` the full length.

use core::ffi::c_char;
use core::sync::atomic::{AtomicBool, Ordering};

use ::sluicegate_policy as rules;
use rules::{Code, Diagnostic, Policy};

use crate::boundary::{guard, guard_void};
use crate::handle::{borrow, bytes, clear_message, free, publish, put_text};
use crate::limiter::clock;
use crate::status::sluicegate_status::{self, *};
use sluicegate::Clock as _;

/// An opaque policy: the rules of a rule file and their limiters. Thread-safe:
/// any number of threads may check it, and reload it, at once. Created by
/// `sluicegate_policy_new` or `sluicegate_policy_new_from_file`, owned by the
/// caller, released by `sluicegate_policy_free`.
pub struct sluicegate_policy {
    pub(crate) inner: Policy,
    /// Whether the rules in force keep their state in a shared region (a
    /// `[shared]` table): then "now" is the region's time base, the same in
    /// every process, not the library clock. Set at creation and by each
    /// reload that takes effect.
    shared: AtomicBool,
}

impl sluicegate_policy {
    fn new(inner: Policy) -> Self {
        let shared = AtomicBool::new(inner.definition().shared().is_some());
        Self { inner, shared }
    }

    /// The time of a call without `_at`: the region's clock for a policy with
    /// a `[shared]` table, the library clock otherwise.
    pub(crate) fn now(&self) -> u64 {
        #[cfg(feature = "shared")]
        if self.shared.load(Ordering::Relaxed) {
            return sluicegate_shm::now();
        }
        clock().now()
    }
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

/// The policy builder of this library: with the `redis` feature, `redis` and
/// `hybrid` rules are built by sluicegate-policy's Redis factory (a
/// `RedisLimiter` per rule, a lease front for `hybrid`; the rule's `on_error`
/// answers when Redis fails); without it such rules are rejected.
fn builder() -> rules::PolicyBuilder {
    let b = Policy::builder();
    #[cfg(feature = "redis")]
    let b = b.remote(rules::redis::RedisFactory::default());
    b
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
            Source::Text(t) => builder().from_toml(t),
            Source::File(f) => builder().from_path(f),
        };
        // SAFETY: the export's contract.
        let policy = unsafe {
            report(built, err, err_cap, |p| {
                warnings_text(p.definition().warnings())
            })
        }?;
        // SAFETY: `out` is non-NULL and valid for a write.
        unsafe { publish(out, sluicegate_policy::new(policy)) }
    })
}

/// Builds a policy from rule-file text (TOML, `len` bytes of UTF-8, not
/// NUL-terminated). On success `*out` is the new handle and `err` holds the
/// file's warnings (a rule that can never match, a rule identical to an earlier
/// one), one a line, or `""`. On error `*out` is unchanged and `err` holds every
/// error, one a line, each as
/// ``<policy>:<line>:<column>: error: rule `<name>`: <what is wrong>``:
/// `SLUICEGATE_ERR_POLICY` for an invalid policy,
/// `SLUICEGATE_ERR_NOT_UTF8` for text that is not UTF-8.
///
/// `err` receives at most `err_cap` bytes including the NUL (truncated); it may
/// be NULL (or `err_cap` 0) for the status alone.
///
/// Rules on `redis` or `hybrid` backends use the `[redis]` section's server
/// (connected on first use, not here): their checks block for one round trip
/// to it, bounded by its timeout (a `hybrid` rule answers most checks from its
/// local leases), decide on the server's clock (the `now` of
/// `sluicegate_policy_check_at` applies to local rules and to an
/// `on_error = "local"` fallback only), and share their
/// counts with every process using the same server, prefix and rule name. When
/// Redis fails, the rule's `on_error` answers and the rule's
/// `backend_error` says so. A library built without its `redis` feature
/// rejects such rules (`SLUICEGATE_ERR_POLICY`, naming the rule).
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
        let handle = unsafe { borrow(policy) }?;
        let pol = &handle.inner;
        // SAFETY: the export's contract.
        let r = match unsafe { source(p, len, file) }? {
            Source::Text(t) => pol.reload_from_toml(t),
            Source::File(f) => pol.reload_from_path(f),
        };
        if r.is_ok() {
            let shared = pol.definition().shared().is_some();
            handle.shared.store(shared, Ordering::Relaxed);
        }
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

/// The policy's metrics in the Prometheus text format (0.0.4) at the library
/// clock's now (the region's, for a policy with a `[shared]` table): per rule, requests allowed / denied / shadow-denied, backend
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
    guard(|| {
        // SAFETY: the export's contract.
        let now = unsafe { borrow(policy) }?.now();
        // SAFETY: the export's contract.
        match unsafe { sluicegate_policy_metrics_text_at(policy, now, buf, cap, len) } {
            SLUICEGATE_OK => Ok(()),
            s => Err(s),
        }
    })
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
    use crate::policy_check::*;

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
