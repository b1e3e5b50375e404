//! The C ABI called from Rust: bad input of every kind gives its status code
//! (never a panic), and good input gives exact decisions. The C and C++
//! programs in tests/c and tests/cpp repeat this from C under sanitizers.

use std::ptr;

use sluicegate_ffi::config::*;
use sluicegate_ffi::keyed::*;
use sluicegate_ffi::limiter::*;
use sluicegate_ffi::status::sluicegate_status::{self, *};
use sluicegate_ffi::striped::*;

mod common;
use common::{algorithms, cfg, SEC};

fn new(c: &[sluicegate_config]) -> Result<*mut sluicegate_limiter, sluicegate_status> {
    let mut out = ptr::null_mut();
    // SAFETY: a valid array and out pointer.
    match unsafe { sluicegate_limiter_new(c.as_ptr(), c.len(), &mut out) } {
        SLUICEGATE_OK => Ok(out),
        e => {
            assert!(out.is_null());
            Err(e)
        }
    }
}

#[test]
fn every_algorithm_admits_exactly_its_quota() {
    for alg in algorithms() {
        let l = new(&[cfg(alg, 7, SEC, 0)]).unwrap();
        let mut d = sluicegate_decision::default();
        let mut admitted = 0;
        for _ in 0..20 {
            // SAFETY: a live handle.
            assert_eq!(
                unsafe { sluicegate_limiter_check_at(l, 3 * SEC, &mut d) },
                SLUICEGATE_OK
            );
            admitted += u64::from(d.allowed);
        }
        assert_eq!(admitted, 7, "{alg:?}");
        assert_eq!(d.limit, 7);
        // SAFETY: a live handle.
        let s = unsafe { sluicegate_limiter_check_n_at(l, u64::MAX, 3 * SEC, &mut d) };
        assert_eq!(s, SLUICEGATE_ERR_INSUFFICIENT_CAPACITY);
        assert!(!d.allowed);
        // SAFETY: freed once.
        unsafe { sluicegate_limiter_free(l) };
    }
}

#[test]
fn bad_input_gives_status_codes() {
    use sluicegate_algorithm::*;
    let mut d = sluicegate_decision::default();
    let good = cfg(SLUICEGATE_TOKEN_BUCKET, 5, SEC, 0);
    let mut out = ptr::null_mut();
    // SAFETY (this block): every pointer is NULL or valid.
    unsafe {
        assert_eq!(
            sluicegate_limiter_new(ptr::null(), 1, &mut out),
            SLUICEGATE_ERR_NULL
        );
        assert_eq!(
            sluicegate_limiter_new(&good, 1, ptr::null_mut()),
            SLUICEGATE_ERR_NULL
        );
        assert_eq!(
            sluicegate_limiter_check(ptr::null(), &mut d),
            SLUICEGATE_ERR_NULL
        );
        assert_eq!(
            sluicegate_limiter_peek_n_at(ptr::null(), 1, 0, &mut d),
            SLUICEGATE_ERR_NULL
        );
        assert_eq!(
            sluicegate_keyed_check(ptr::null(), b"k".as_ptr(), 1, &mut d),
            SLUICEGATE_ERR_NULL
        );
        assert_eq!(
            sluicegate_striped_check(ptr::null(), &mut d),
            SLUICEGATE_ERR_NULL
        );
        sluicegate_limiter_free(ptr::null_mut());
        sluicegate_keyed_free(ptr::null_mut());
        sluicegate_striped_free(ptr::null_mut());
    }
    let bad_alg = sluicegate_config {
        algorithm: 6,
        ..good
    };
    assert_eq!(new(&[bad_alg]).unwrap_err(), SLUICEGATE_ERR_BAD_ALGORITHM);
    let bad_size = sluicegate_config {
        struct_size: 4,
        ..good
    };
    assert_eq!(new(&[bad_size]).unwrap_err(), SLUICEGATE_ERR_STRUCT_SIZE);
    assert_eq!(new(&[]).unwrap_err(), SLUICEGATE_ERR_LIMIT_COUNT);
    assert_eq!(new(&[good; 5]).unwrap_err(), SLUICEGATE_ERR_LIMIT_COUNT);
    let other = cfg(SLUICEGATE_FIXED_WINDOW, 5, SEC, 0);
    assert_eq!(
        new(&[good, other]).unwrap_err(),
        SLUICEGATE_ERR_MIXED_ALGORITHMS
    );
    assert_eq!(
        new(&[cfg(SLUICEGATE_TOKEN_BUCKET, 0, SEC, 0)]).unwrap_err(),
        SLUICEGATE_ERR_CONFIG_ZERO
    );
    assert_eq!(
        new(&[cfg(SLUICEGATE_TOKEN_BUCKET, 5, 1, 0)]).unwrap_err(),
        SLUICEGATE_ERR_CONFIG_TOO_FAST
    );
    assert_eq!(
        new(&[cfg(SLUICEGATE_SLIDING_WINDOW, u64::MAX, SEC, 0)]).unwrap_err(),
        SLUICEGATE_ERR_CONFIG_TOO_LARGE
    );

    let mut k = ptr::null_mut();
    // SAFETY (this block): valid pointers.
    unsafe {
        assert_eq!(
            sluicegate_keyed_new(&good, 8, 9, &mut k),
            SLUICEGATE_ERR_BAD_POLICY
        );
        assert_eq!(
            sluicegate_keyed_new(&good, u64::MAX, 0, &mut k),
            SLUICEGATE_ERR_CONFIG_TOO_LARGE
        );
        assert_eq!(sluicegate_keyed_new(&good, 8, 0, &mut k), SLUICEGATE_OK);
        assert_eq!(
            sluicegate_keyed_check_at(k, b"k".as_ptr(), 0, 0, &mut d),
            SLUICEGATE_ERR_EMPTY_KEY
        );
        assert_eq!(
            sluicegate_keyed_check_at(k, ptr::null(), 1, 0, &mut d),
            SLUICEGATE_ERR_NULL
        );
        assert_eq!(
            sluicegate_keyed_check_at(k, b"k".as_ptr(), 1, 0, ptr::null_mut()),
            SLUICEGATE_ERR_NULL
        );
        assert_eq!(
            sluicegate_keyed_check_n_at(k, b"k".as_ptr(), 1, 6, 0, &mut d),
            SLUICEGATE_ERR_INSUFFICIENT_CAPACITY
        );
        assert_eq!(
            sluicegate_keyed_check_n_at(k, b"k".as_ptr(), 1, 5, 0, &mut d),
            SLUICEGATE_OK
        );
        assert!(d.allowed && d.remaining == 0);
        sluicegate_keyed_free(k);
        let mut s = ptr::null_mut();
        assert_eq!(
            sluicegate_striped_new(&good, 3, &mut s),
            SLUICEGATE_ERR_BAD_STRIPES
        );
        assert_eq!(
            sluicegate_striped_new(&other, 1, &mut s),
            SLUICEGATE_ERR_UNSUPPORTED
        );
        assert!(s.is_null());
    }
}

#[test]
fn parse_fills_a_config() {
    let mut c = cfg(sluicegate_algorithm::SLUICEGATE_TOKEN_BUCKET, 0, 0, 0);
    let mut e = sluicegate_parse_error {
        position: 0,
        message: ptr::null(),
    };
    let s = "100/s burst 20";
    // SAFETY: valid pointers and lengths.
    unsafe {
        assert_eq!(
            sluicegate_config_parse(s.as_ptr().cast(), s.len(), &mut c, &mut e),
            SLUICEGATE_OK
        );
        assert_eq!((c.amount, c.period_ns, c.burst), (100, SEC, 20));
        let s = "5/year";
        assert_eq!(
            sluicegate_config_parse(s.as_ptr().cast(), s.len(), &mut c, &mut e),
            SLUICEGATE_ERR_PARSE
        );
        assert_eq!(e.position, 2);
        let msg = std::ffi::CStr::from_ptr(e.message).to_str().unwrap();
        assert!(msg.contains("ambiguous"), "{msg}");
    }
}
