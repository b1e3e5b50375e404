//! `sluicegate_config`: what a limiter is built from, and the rate-string parser.

use core::ffi::c_char;
use core::fmt::Write as _;

use sluicegate::parse::{parse_quotas, ParseError, ParseErrorKind};
use sluicegate::{Kind, Quota, Spec, SpecError};

use crate::boundary::guard;
use crate::handle::{bytes, write};
use crate::status::sluicegate_status::{self, *};

/// The most limits one compound limiter holds (e.g. per second, per minute,
/// per hour, per day). All of them use the same algorithm.
///
/// The Rust core accepts up to 8 limits; the C ABI keeps its published 4: a
/// program compiled against this header sizes its arrays with it, and a count
/// above it is `SLUICEGATE_ERR_LIMIT_COUNT` by contract.
pub const SLUICEGATE_MAX_LIMITS: usize = 4;
const _: () = assert!(SLUICEGATE_MAX_LIMITS <= Spec::MAX_LIMITS);

/// The algorithms. Passed as a `uint32_t` (`sluicegate_config.algorithm`) and
/// checked: any other value is `SLUICEGATE_ERR_BAD_ALGORITHM`.
///
/// | value | meaning of amount / period_ns / burst |
/// |---|---|
/// | `SLUICEGATE_TOKEN_BUCKET` | refills `amount` per `period_ns`, holds `burst` |
/// | `SLUICEGATE_LEAKY_BUCKET` | leaks `amount` per `period_ns`, holds `burst` |
/// | `SLUICEGATE_SHAPER` | spaces requests `period_ns / amount` apart, `burst` back-to-back, waits up to `max_delay_ns` |
/// | `SLUICEGATE_FIXED_WINDOW` | `amount` per aligned window of `period_ns` |
/// | `SLUICEGATE_SLIDING_WINDOW` | `amount` per sliding window of `period_ns` (counter estimate) |
/// | `SLUICEGATE_SLIDING_LOG` | exactly `amount` per any `period_ns` (8 bytes per unit of `amount`) |
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum sluicegate_algorithm {
    /// Token bucket (GCRA). The value 0: a zeroed config is a token bucket.
    SLUICEGATE_TOKEN_BUCKET = 0,
    /// Leaky bucket meter (the same function as the token bucket, its vocabulary).
    SLUICEGATE_LEAKY_BUCKET = 1,
    /// Leaky bucket shaper: the decision's `delay_ns` is how long to wait.
    SLUICEGATE_SHAPER = 2,
    /// Fixed window counter.
    SLUICEGATE_FIXED_WINDOW = 3,
    /// Sliding window counter.
    SLUICEGATE_SLIDING_WINDOW = 4,
    /// Sliding window log (exact; not keyed, not compound).
    SLUICEGATE_SLIDING_LOG = 5,
}

impl sluicegate_algorithm {
    /// The core [`Kind`] of this C value: its number is the kind's index in
    /// [`Kind::ALL`] (a unit test checks every name). The one place the C enum
    /// meets the list of algorithms.
    pub fn kind(self) -> Kind {
        Kind::ALL[self as usize]
    }
}

/// The C value of a core [`Kind`]: the inverse of [`sluicegate_algorithm::kind`].
///
/// ```
/// use sluicegate::Kind;
/// use sluicegate_ffi::config::sluicegate_algorithm;
/// let c = sluicegate_algorithm::from(Kind::SlidingWindow);
/// assert_eq!(c, sluicegate_algorithm::SLUICEGATE_SLIDING_WINDOW);
/// assert_eq!(c.kind(), Kind::SlidingWindow);
/// ```
impl From<Kind> for sluicegate_algorithm {
    fn from(kind: Kind) -> Self {
        use sluicegate_algorithm::*;
        match kind {
            Kind::TokenBucket => SLUICEGATE_TOKEN_BUCKET,
            Kind::LeakyBucket => SLUICEGATE_LEAKY_BUCKET,
            Kind::Shaper => SLUICEGATE_SHAPER,
            Kind::FixedWindow => SLUICEGATE_FIXED_WINDOW,
            Kind::SlidingWindow => SLUICEGATE_SLIDING_WINDOW,
            Kind::SlidingLog => SLUICEGATE_SLIDING_LOG,
        }
    }
}

/// One limit. Set `struct_size = sizeof(sluicegate_config)` and zero what you do
/// not use:
///
/// ```c
/// sluicegate_config c = { .struct_size = sizeof c, .algorithm = SLUICEGATE_TOKEN_BUCKET,
///                         .amount = 100, .period_ns = 1000000000, .burst = 20 };
/// ```
///
/// Or fill `amount`, `period_ns` and `burst` from a string with
/// `sluicegate_config_parse`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct sluicegate_config {
    /// `sizeof(sluicegate_config)` as the caller was compiled (see the crate docs
    /// on versioned structs).
    pub struct_size: u32,
    /// A `sluicegate_algorithm` value.
    pub algorithm: u32,
    /// Units per period (the limit, for windows and the log). Must be positive.
    pub amount: u64,
    /// The period (the window length) in nanoseconds. Must be positive.
    pub period_ns: u64,
    /// Bucket algorithms: units admitted at once; 0 means "equal to `amount`".
    /// Windows and the log: must be 0 or equal to `amount`.
    pub burst: u64,
    /// The shaper only: the longest wait granted (0: only requests that conform
    /// now). Must be 0 for other algorithms.
    pub max_delay_ns: u64,
    /// The sliding log only: ring slots, so the limit can later be raised up to it
    /// (0: exactly `amount`; at most 2^20). Must be 0 for other algorithms.
    pub log_capacity: u64,
}

/// Where and why a rate string was rejected.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct sluicegate_parse_error {
    /// Byte offset into the string of the first character that was not accepted.
    pub position: usize,
    /// A static NUL-terminated message saying what was expected (never freed);
    /// NULL when there was no parse error.
    pub message: *const c_char,
}

/// Reads a caller's config honouring its `struct_size` (see
/// [`crate::handle::read_versioned`]).
///
/// # Safety
/// `p` is NULL or points to at least `4` readable bytes, and to `struct_size`
/// readable bytes when that value is in range.
pub(crate) unsafe fn read_config(
    p: *const sluicegate_config,
) -> Result<sluicegate_config, sluicegate_status> {
    // SAFETY: the caller's contract; a config is integers only.
    unsafe { crate::handle::read_versioned(p) }
}

const NOT_UTF8: &core::ffi::CStr = c"the rate string is not valid UTF-8";

/// Reads the caller's string as UTF-8, reporting the first bad byte.
///
/// # Safety
/// As [`bytes`].
unsafe fn rate_str<'a>(
    s: *const c_char,
    len: usize,
    err: *mut sluicegate_parse_error,
) -> Result<&'a str, sluicegate_status> {
    // SAFETY: forwarded contract.
    let b = unsafe { bytes(s.cast(), len) }?;
    core::str::from_utf8(b).map_err(|e| {
        // SAFETY: `err` is NULL or valid for a write (the export's contract).
        let _ = unsafe {
            write(
                err,
                sluicegate_parse_error {
                    position: e.valid_up_to(),
                    message: NOT_UTF8.as_ptr(),
                },
            )
        };
        SLUICEGATE_ERR_PARSE
    })
}

fn report(err: *mut sluicegate_parse_error, e: ParseError) -> sluicegate_status {
    // SAFETY: `err` is NULL or valid for a write (the export's contract).
    let _ = unsafe {
        write(
            err,
            sluicegate_parse_error {
                position: e.position,
                message: e.kind.message_cstr().as_ptr(),
            },
        )
    };
    match e.kind {
        ParseErrorKind::TooManyLimits => SLUICEGATE_ERR_BUFFER_TOO_SMALL,
        _ => SLUICEGATE_ERR_PARSE,
    }
}

/// Writes a parsed quota's amount, period and burst into a caller's config,
/// leaving every other field as it was.
///
/// # Safety
/// `p` is valid for writes of a `sluicegate_config` (its size was checked).
unsafe fn store_quota(p: *mut sluicegate_config, q: &Quota) {
    // SAFETY: in bounds of the caller's struct, aligned, plain integers.
    unsafe {
        (*p).amount = q.amount();
        (*p).period_ns = q.period_ns();
        (*p).burst = q.burst_size();
    }
}

/// Parses one limit (`"100/s"`, `"100 per minute"`, `"10 per 2 hours"`,
/// `"100/s burst 200"`) into `config`'s `amount`, `period_ns` and `burst`; every
/// other field (`struct_size`, `algorithm`, ...) is the caller's and is kept.
/// Months and years are rejected as ambiguous. A string with several limits
/// (`"1/s; 100/h"`) is a parse error here: use `sluicegate_config_parse_list`.
///
/// `s` need not be NUL-terminated: exactly `len` bytes are read, which must be
/// UTF-8. On `SLUICEGATE_ERR_PARSE`, `*err` (when `err` is not NULL) says where
/// and what was expected, and `config` is unchanged.
///
/// # Safety
/// `s` points to `len` readable bytes; `config` to a `sluicegate_config` whose
/// `struct_size` is set; `err` is NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn sluicegate_config_parse(
    s: *const c_char,
    len: usize,
    config: *mut sluicegate_config,
    err: *mut sluicegate_parse_error,
) -> sluicegate_status {
    guard(|| {
        // SAFETY: the export's contract.
        unsafe { clear(err) };
        // SAFETY: the export's contract.
        unsafe { read_config(config) }?;
        // SAFETY: the export's contract.
        let text = unsafe { rate_str(s, len, err) }?;
        let q = sluicegate::parse_quota(text).map_err(|e| report(err, e))?;
        // SAFETY: `config` was checked non-NULL with a size covering our layout.
        unsafe { store_quota(config, &q) };
        Ok(())
    })
}

/// Parses a `;`-separated list of limits (`"1/second; 100/hour"`), for a compound
/// limiter, into `out[0..*out_count]`, all-or-nothing.
///
/// `out` is an array of `out_cap` configs the caller prepared (`struct_size` and
/// `algorithm` set, as for `sluicegate_config_parse`): the library takes
/// `out[0].struct_size` as the size of each element, and each element's own
/// `struct_size` must equal it.
///
/// **Counting first** (the `snprintf` convention): with `out == NULL` and
/// `out_cap == 0` the whole string is parsed and validated, nothing is written
/// but `*out_count`, and the result is `SLUICEGATE_OK` with the number of limits
/// the string holds, so a caller can size its array before parsing into it:
///
/// ```c
/// size_t n;
/// if (sluicegate_config_parse_list(s, len, NULL, 0, &n, &err) == SLUICEGATE_OK)
///     ... allocate n configs, then call again with them ...
/// ```
///
/// More limits than a non-zero `out_cap` is `SLUICEGATE_ERR_BUFFER_TOO_SMALL`:
/// `*err` points at the first extra limit and `*out_count` is the number of
/// limits the string holds (when the rest of it parses; a later parse error is
/// `SLUICEGATE_ERR_PARSE` instead). On every other error `*out_count` is 0. On
/// any error the contents of `out` are unspecified. `out == NULL` with a
/// non-zero `out_cap` is `SLUICEGATE_ERR_NULL`.
///
/// # Safety
/// `s` points to `len` readable bytes; `out` is NULL when `out_cap` is 0, or
/// points to `out_cap` prepared configs; `out_count` is valid for a write; `err`
/// is NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn sluicegate_config_parse_list(
    s: *const c_char,
    len: usize,
    out: *mut sluicegate_config,
    out_cap: usize,
    out_count: *mut usize,
    err: *mut sluicegate_parse_error,
) -> sluicegate_status {
    guard(|| {
        // SAFETY: the export's contract.
        unsafe { clear(err) };
        // SAFETY: the export's contract.
        unsafe { write(out_count, 0) }?;
        if out.is_null() && out_cap != 0 {
            return Err(SLUICEGATE_ERR_NULL);
        }
        // SAFETY: the export's contract.
        let text = unsafe { rate_str(s, len, err) }?;
        let mut stride = 0usize;
        let mut n = 0usize;
        let mut quotas = parse_quotas(text);
        for item in quotas.by_ref() {
            let q = item.map_err(|e| report(err, e))?;
            if out_cap == 0 && out.is_null() {
                // Counting only.
                n += 1;
                continue;
            }
            if n >= out_cap {
                let mut total = n + 1;
                for rest in quotas.by_ref() {
                    rest.map_err(|e| report(err, e))?;
                    total += 1;
                }
                // SAFETY: checked non-NULL above.
                unsafe { write(out_count, total) }?;
                return Err(report(err, too_many(text, n)));
            }
            if n == 0 {
                // SAFETY: `out_cap >= 1`, so `out[0]` exists.
                stride = unsafe { read_config(out) }?.struct_size as usize;
            }
            let Some(offset) = n.checked_mul(stride) else {
                return Err(SLUICEGATE_ERR_STRUCT_SIZE);
            };
            // SAFETY: element `n < out_cap` of an array of `stride`-byte elements.
            let elem = unsafe { out.cast::<u8>().add(offset) }.cast::<sluicegate_config>();
            // SAFETY: as above; the element is a prepared config.
            let c = unsafe { read_config(elem) }?;
            if c.struct_size as usize != stride {
                return Err(SLUICEGATE_ERR_STRUCT_SIZE);
            }
            // SAFETY: `elem` is a config of at least our size (checked).
            unsafe { store_quota(elem, &q) };
            n += 1;
        }
        // SAFETY: checked non-NULL above.
        unsafe { write(out_count, n) }
    })
}

/// The `TooManyLimits` error at the start of limit number `n` (0-based).
fn too_many(text: &str, n: usize) -> ParseError {
    let mut pos = 0;
    let mut seen = 0;
    for (i, b) in text.bytes().enumerate() {
        if seen == n {
            break;
        }
        if b == b';' {
            seen += 1;
            pos = i + 1;
        }
    }
    while matches!(text.as_bytes().get(pos), Some(b' ' | b'\t')) {
        pos += 1;
    }
    ParseError {
        position: pos,
        kind: ParseErrorKind::TooManyLimits,
    }
}

/// # Safety
/// `err` is NULL or valid for a write.
unsafe fn clear(err: *mut sluicegate_parse_error) {
    // SAFETY: forwarded contract; a NULL `err` is simply not written.
    let _ = unsafe {
        write(
            err,
            sluicegate_parse_error {
                position: 0,
                message: core::ptr::null(),
            },
        )
    };
}

/// A `fmt::Write` into a caller's fixed buffer, truncating, always leaving room
/// for the NUL.
struct Msg<'a> {
    buf: &'a mut [u8],
    len: usize,
}

impl core::fmt::Write for Msg<'_> {
    fn write_str(&mut self, s: &str) -> core::fmt::Result {
        let room = self.buf.len().saturating_sub(1).saturating_sub(self.len);
        let take = s.len().min(room);
        self.buf[self.len..self.len + take].copy_from_slice(&s.as_bytes()[..take]);
        self.len += take;
        Ok(())
    }
}

/// Checks `config` exactly as `sluicegate_limiter_new` does (without building
/// anything), and writes a NUL-terminated English explanation into
/// `msg` (at most `msg_len` bytes including the NUL, truncated): `"ok"`, or what
/// is wrong and the largest accepted value, e.g. `"burst is too large for this
/// limiter: the maximum is 213503"`. `msg` may be NULL (or `msg_len` 0) for the
/// status alone.
///
/// # Safety
/// `config` is a `sluicegate_config` with `struct_size` set; `msg` is NULL or
/// valid for writes of `msg_len` bytes.
#[no_mangle]
pub unsafe extern "C" fn sluicegate_config_validate(
    config: *const sluicegate_config,
    msg: *mut c_char,
    msg_len: usize,
) -> sluicegate_status {
    guard(|| {
        let mut text = Msg {
            buf: if msg.is_null() || msg_len == 0 {
                &mut []
            } else {
                // SAFETY: non-NULL and valid for `msg_len` bytes by the contract.
                unsafe { core::slice::from_raw_parts_mut(msg.cast::<u8>(), msg_len) }
            },
            len: 0,
        };
        // SAFETY: the export's contract.
        let result = unsafe { crate::limit::LimitConfig::read(config) }.and_then(|limit| {
            limit.spec().map(drop).map_err(|e| {
                if let crate::limit::Rejected::Spec(SpecError::Config { error, .. }) = e {
                    let _ = write!(text, "{error}");
                }
                sluicegate_status::from(e)
            })
        });
        if text.len == 0 {
            let status = result.err().unwrap_or(SLUICEGATE_OK);
            let _ = text.write_str(status.message().to_str().unwrap_or("error"));
        }
        if let Some(nul) = text.buf.get_mut(text.len) {
            *nul = 0;
        }
        result
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_c_algorithm_is_the_kind_of_its_name() {
        for k in Kind::ALL {
            let a = sluicegate_algorithm::from(k);
            let name = format!("SLUICEGATE_{}", k.name().to_uppercase());
            assert_eq!(format!("{a:?}"), name);
            assert_eq!(a.kind(), k);
            assert_eq!(crate::limit::kind_of(a as u32), Some(k));
        }
        assert_eq!(crate::limit::kind_of(Kind::ALL.len() as u32), None);
        assert_eq!(crate::limit::kind_of(u32::MAX), None);
    }

    #[test]
    fn too_many_points_at_the_extra_limit() {
        assert_eq!(too_many("1/s; 2/m;  3/h", 2).position, 11);
        assert_eq!(too_many("1/s", 0).position, 0);
    }
}
