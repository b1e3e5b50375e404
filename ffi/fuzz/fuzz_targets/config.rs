//! Arbitrary bytes through every configuration entry point of the C ABI: the
//! rate-string parser (one limit and lists), and a `sluicegate_config` whose
//! every byte — `struct_size`, `algorithm`, amounts, periods, bursts — comes from
//! the fuzzer, into `_validate`, `_limiter_new` (one to five limits),
//! `_keyed_new` and `_striped_new`, then a few checks with fuzzed costs and
//! times. Any panic, abort or sanitizer report is a bug: bad input must only
//! ever produce a status code.
#![no_main]

use core::ffi::c_char;
use core::mem::size_of;
use core::ptr;

use libfuzzer_sys::fuzz_target;
use sluicegate_ffi::config::{
    sluicegate_config_parse, sluicegate_config_parse_list, sluicegate_config_validate,
};
use sluicegate_ffi::keyed::{
    sluicegate_keyed_check_n_at, sluicegate_keyed_free, sluicegate_keyed_new,
};
use sluicegate_ffi::limiter::{
    sluicegate_limiter_check_n_at, sluicegate_limiter_free, sluicegate_limiter_new,
    sluicegate_limiter_peek_n_at, sluicegate_limiter_set_config,
};
use sluicegate_ffi::status::sluicegate_status_str;
use sluicegate_ffi::striped::{
    sluicegate_striped_check_n_at, sluicegate_striped_free, sluicegate_striped_new,
};
use sluicegate_ffi::{
    sluicegate_config, sluicegate_decision, sluicegate_keyed, sluicegate_limiter,
    sluicegate_parse_error, sluicegate_status, sluicegate_striped,
};

const CFG: usize = size_of::<sluicegate_config>();

/// A buffer long enough for any `struct_size` the library accepts (4096), so
/// reading what the fuzzed size claims is always in bounds.
#[repr(C, align(8))]
struct Buf([u8; 4096 * 5]);

fn word(data: &[u8], at: usize) -> u64 {
    let mut w = [0u8; 8];
    for (i, b) in w.iter_mut().enumerate() {
        *b = data.get(at + i).copied().unwrap_or(0);
    }
    u64::from_le_bytes(w)
}

fn ok(s: sluicegate_status) -> bool {
    // Every status has a message.
    assert!(!sluicegate_status_str(s as u32).is_null());
    s == sluicegate_status::SLUICEGATE_OK
}

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    let mut d = sluicegate_decision::default();
    let mut err = sluicegate_parse_error {
        position: 0,
        message: ptr::null(),
    };

    // 1. The rate string, one limit and lists.
    let mut c = sluicegate_config {
        struct_size: CFG as u32,
        algorithm: u32::from(mode % 6),
        ..Default::default()
    };
    // SAFETY: `rest` is readable for its length; `c` and `err` are valid.
    let parsed = unsafe {
        sluicegate_config_parse(rest.as_ptr().cast::<c_char>(), rest.len(), &mut c, &mut err)
    };
    if !ok(parsed) {
        assert!(err.position <= rest.len());
    }
    let mut list = [c; 4];
    let mut n = 0usize;
    // SAFETY: as above; `list` holds 4 prepared configs.
    let s = unsafe {
        sluicegate_config_parse_list(
            rest.as_ptr().cast(),
            rest.len(),
            list.as_mut_ptr(),
            4,
            &mut n,
            &mut err,
        )
    };
    // Counting first (NULL, 0) agrees with parsing into the array: the same
    // verdict on the string, the same count; a too-small array reports it too.
    let mut counted = 0usize;
    // SAFETY: `rest` is readable for its length; NULL with capacity 0 counts.
    let cs = unsafe {
        sluicegate_config_parse_list(
            rest.as_ptr().cast(),
            rest.len(),
            ptr::null_mut(),
            0,
            &mut counted,
            &mut err,
        )
    };
    if s == sluicegate_status::SLUICEGATE_ERR_BUFFER_TOO_SMALL {
        assert!(
            ok(cs) && counted == n && n > 4,
            "{s:?} {cs:?} {n} {counted}"
        );
    } else {
        assert!(n <= 4);
        if ok(s) {
            assert!(ok(cs) && counted == n, "{cs:?} {n} {counted}");
        }
    }
    if ok(s) && n > 0 {
        let mut l: *mut sluicegate_limiter = ptr::null_mut();
        // SAFETY: `n` prepared configs; a valid out pointer.
        if ok(unsafe { sluicegate_limiter_new(list.as_ptr(), n, &mut l) }) {
            // SAFETY: a live handle.
            unsafe {
                sluicegate_limiter_check_n_at(l, word(rest, 0) % 8, word(rest, 8), &mut d);
                sluicegate_limiter_free(l);
            }
        }
    }

    // 2. Raw config bytes, with the fuzzer choosing struct_size and everything else.
    let mut buf = Box::new(Buf([0; 4096 * 5]));
    let count = usize::from(mode >> 5) % 6; // 0..=5 limits (5 is too many)
    for i in 0..count.max(1) {
        let src = rest.get(i * CFG..).unwrap_or(&[]);
        let take = src.len().min(CFG);
        buf.0[i * CFG..i * CFG + take].copy_from_slice(&src[..take]);
    }
    // Mostly a valid size (so the deeper checks run), sometimes the fuzzer's.
    if mode & 0x10 == 0 {
        for i in 0..count.max(1) {
            buf.0[i * CFG..i * CFG + 4].copy_from_slice(&(CFG as u32).to_le_bytes());
        }
    }
    let cfg = buf.0.as_ptr().cast::<sluicegate_config>();
    let mut msg = [0 as c_char; 64];
    // SAFETY: `cfg` is readable for 4096 bytes past every element; `msg` is valid.
    unsafe { sluicegate_config_validate(cfg, msg.as_mut_ptr(), msg.len()) };
    assert!(msg.contains(&0));

    let mut l: *mut sluicegate_limiter = ptr::null_mut();
    // SAFETY: `count` configs, each readable as far as its size claims.
    if ok(unsafe { sluicegate_limiter_new(cfg, count, &mut l) }) {
        for k in 0..4 {
            let n = word(rest, 200 + 16 * k) % 1024;
            let t = word(rest, 208 + 16 * k);
            // SAFETY: a live handle and a valid decision.
            unsafe {
                sluicegate_limiter_check_n_at(l, n, t, &mut d);
                sluicegate_limiter_peek_n_at(l, n, t, &mut d);
            }
        }
        // SAFETY: a live handle; `cfg` as above.
        unsafe {
            sluicegate_limiter_set_config(l, usize::from(mode & 3), cfg);
            sluicegate_limiter_free(l);
        }
    }

    let mut k: *mut sluicegate_keyed = ptr::null_mut();
    let capacity = word(rest, 300) % 4096; // bounded: the fuzzer's memory limit
                                           // SAFETY: `cfg` as above; a valid out pointer.
    if ok(unsafe { sluicegate_keyed_new(cfg, capacity, u32::from(mode & 3), &mut k) }) {
        // SAFETY: a live handle; `rest` is readable; a valid decision.
        unsafe {
            sluicegate_keyed_check_n_at(
                k,
                rest.as_ptr(),
                rest.len().min(16),
                word(rest, 308) % 64,
                word(rest, 316),
                &mut d,
            );
            sluicegate_keyed_free(k);
        }
    }

    let mut s: *mut sluicegate_striped = ptr::null_mut();
    // SAFETY: `cfg` as above; a valid out pointer.
    if ok(unsafe { sluicegate_striped_new(cfg, u32::from(mode) % 20, &mut s) }) {
        // SAFETY: a live handle and a valid decision.
        unsafe {
            sluicegate_striped_check_n_at(s, word(rest, 324) % 64, word(rest, 332), &mut d);
            sluicegate_striped_free(s);
        }
    }
});
