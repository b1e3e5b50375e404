//! The Redis handle through the C ABI: bad input on every function gives its
//! status code, and the failure policies answer for an unreachable server (a
//! closed loopback port: no server needed). With `SLUICEGATE_REDIS_URL` set (as
//! scripts/test-ffi does, against a redis-server of its own), exact decisions
//! from the real scripts too; without it those tests say so and pass.
#![cfg(feature = "redis")]

use std::ffi::CString;
use std::mem::size_of;
use std::ptr;
use std::time::Instant;

use sluicegate_ffi::config::*;
use sluicegate_ffi::limiter::*;
use sluicegate_ffi::redis::*;
use sluicegate_ffi::status::sluicegate_status::{self, *};

mod common;
use common::{algorithms, cfg, SEC};

fn bucket() -> sluicegate_config {
    // 1 per minute, burst 5: nothing refills during a test.
    cfg(
        sluicegate_algorithm::SLUICEGATE_TOKEN_BUCKET,
        1,
        60 * SEC,
        5,
    )
}

/// Owns a handle for a test.
struct Handle(*mut sluicegate_redis);

// SAFETY: `sluicegate_redis` is `Send + Sync` (lib.rs asserts it) and every
// call may run on any thread at once; the wrapper only holds the pointer.
unsafe impl Sync for Handle {}

impl Drop for Handle {
    fn drop(&mut self) {
        // SAFETY: a handle from `new`, freed once, no other user.
        unsafe { sluicegate_redis_free(self.0) };
    }
}

impl Handle {
    fn check(&self, key: &str, n: u64) -> (sluicegate_status, sluicegate_decision, u32) {
        self.call(key, n, true)
    }

    fn peek(&self, key: &str, n: u64) -> (sluicegate_status, sluicegate_decision, u32) {
        self.call(key, n, false)
    }

    fn call(
        &self,
        key: &str,
        n: u64,
        consume: bool,
    ) -> (sluicegate_status, sluicegate_decision, u32) {
        let mut d = sluicegate_decision::default();
        let mut source = u32::MAX;
        let f = if consume {
            sluicegate_redis_check
        } else {
            sluicegate_redis_peek
        };
        // SAFETY: a live handle, a valid key and out pointers.
        let s = unsafe { f(self.0, key.as_ptr(), key.len(), n, &mut d, &mut source) };
        (s, d, source)
    }

    fn circuit_open(&self) -> bool {
        let mut open = false;
        // SAFETY: a live handle.
        assert_eq!(
            unsafe { sluicegate_redis_circuit_open(self.0, &mut open) },
            SLUICEGATE_OK
        );
        open
    }
}

fn new(
    url: &str,
    name: &str,
    limit: &sluicegate_config,
    rc: Option<&sluicegate_redis_config>,
) -> Result<Handle, sluicegate_status> {
    let url = CString::new(url).unwrap();
    let name = CString::new(name).unwrap();
    let mut out = ptr::null_mut();
    let rc = rc.map_or(ptr::null(), |c| c as *const _);
    // SAFETY: NUL-terminated strings, a valid config, NULL or a valid struct.
    match unsafe { sluicegate_redis_new(url.as_ptr(), name.as_ptr(), limit, rc, &mut out) } {
        SLUICEGATE_OK => {
            assert!(!out.is_null());
            Ok(Handle(out))
        }
        e => {
            assert!(out.is_null(), "out written on error");
            Err(e)
        }
    }
}

/// A loopback URL nobody listens on: a port the kernel just handed out and
/// that was closed again.
fn closed_url() -> String {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    drop(l);
    format!("redis://127.0.0.1:{port}")
}

fn unique(name: &str) -> String {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    format!("ffi-{name}-{}-{t}", std::process::id())
}

fn server() -> Option<String> {
    let url = std::env::var("SLUICEGATE_REDIS_URL").ok();
    if url.is_none() {
        eprintln!("SLUICEGATE_REDIS_URL is not set: skipped (scripts/test-ffi sets it)");
    }
    url
}

fn policy(p: sluicegate_failure_policy) -> sluicegate_redis_config {
    sluicegate_redis_config {
        failure_policy: p as u32,
        timeout_ns: 20_000_000,
        connect_timeout_ns: 20_000_000,
        breaker_failure_threshold: 2,
        breaker_cooldown_ns: 2 * SEC,
        ..Default::default()
    }
}

#[test]
fn new_rejects_bad_input() {
    use sluicegate_algorithm::*;
    let good = bucket();
    let url = c"redis://127.0.0.1:6379";
    let mut out = ptr::null_mut();
    // SAFETY (this block): every pointer is NULL or valid.
    unsafe {
        for (u, n, l, o) in [
            (
                ptr::null(),
                c"n".as_ptr(),
                &good as *const _,
                &mut out as *mut _,
            ),
            (url.as_ptr(), ptr::null(), &good, &mut out),
            (url.as_ptr(), c"n".as_ptr(), ptr::null(), &mut out),
            (url.as_ptr(), c"n".as_ptr(), &good, ptr::null_mut()),
        ] {
            assert_eq!(
                sluicegate_redis_new(u, n, l, ptr::null(), o),
                SLUICEGATE_ERR_NULL
            );
        }
        assert!(out.is_null());
    }
    let ok = |s: Option<&sluicegate_redis_config>| new("redis://127.0.0.1:6379", "n", &good, s);
    // struct_size: too small, garbage, and a bigger struct with non-zero tail bytes.
    for size in [
        0,
        4,
        size_of::<sluicegate_redis_config>() as u32 - 1,
        1 << 20,
    ] {
        let rc = sluicegate_redis_config {
            struct_size: size,
            ..Default::default()
        };
        assert_eq!(
            ok(Some(&rc)).err(),
            Some(SLUICEGATE_ERR_STRUCT_SIZE),
            "{size}"
        );
    }
    #[repr(C)]
    struct Newer {
        base: sluicegate_redis_config,
        extra: u64,
    }
    let mut newer = Newer {
        base: sluicegate_redis_config {
            struct_size: size_of::<Newer>() as u32,
            ..Default::default()
        },
        extra: 0,
    };
    assert!(ok(Some(&newer.base)).is_ok(), "zero tail accepted");
    newer.extra = 1;
    assert_eq!(
        ok(Some(&newer.base)).err(),
        Some(SLUICEGATE_ERR_STRUCT_SIZE)
    );
    // Enums and fields.
    type Edit = fn(&mut sluicegate_redis_config);
    let with = |f: Edit| {
        let mut rc = sluicegate_redis_config::default();
        f(&mut rc);
        ok(Some(&rc)).err()
    };
    let refused: [(Edit, sluicegate_status); 8] = [
        (|c| c.failure_policy = 3, SLUICEGATE_ERR_BAD_FAILURE_POLICY),
        (
            |c| c.failure_policy = u32::MAX,
            SLUICEGATE_ERR_BAD_FAILURE_POLICY,
        ),
        (
            |c| c.local_share_percent = 101,
            SLUICEGATE_ERR_CONFIG_TOO_LARGE,
        ),
        (
            |c| c.fallback_keys = u64::MAX,
            SLUICEGATE_ERR_CONFIG_TOO_LARGE,
        ),
        (
            |c| {
                c.failure_policy = sluicegate_failure_policy::SLUICEGATE_FAIL_OPEN as u32;
                c.local_share_percent = 50;
            },
            SLUICEGATE_ERR_CONFIG_INVALID,
        ),
        (
            |c| {
                c.failure_policy = sluicegate_failure_policy::SLUICEGATE_FAIL_CLOSED as u32;
                c.fallback_keys = 100;
            },
            SLUICEGATE_ERR_CONFIG_INVALID,
        ),
        (
            |c| c.prefix = c"a{b".as_ptr(),
            SLUICEGATE_ERR_CONFIG_INVALID,
        ),
        (|c| c.prefix = c"\xff\xfe".as_ptr(), SLUICEGATE_ERR_NOT_UTF8),
    ];
    for (i, (f, want)) in refused.into_iter().enumerate() {
        assert_eq!(with(f), Some(want), "case {i}");
    }
    assert_eq!(
        with(|c| c.prefix = c"".as_ptr()),
        None,
        "an empty prefix is valid"
    );
    // URLs.
    for bad in [
        "",
        "http://127.0.0.1",
        "127.0.0.1:6379",
        "redis://",
        "redis://127.0.0.1:notaport",
        "redis://127.0.0.1:99999",
        "redis://127.0.0.1:6379/notadb",
        "redis+cluster://",
        "redis+cluster://127.0.0.1:7000,127.0.0.1:x",
    ] {
        assert_eq!(
            new(bad, "n", &good, None).err(),
            Some(SLUICEGATE_ERR_BAD_URL),
            "{bad:?}"
        );
    }
    for fine in [
        "redis://127.0.0.1",
        "redis://user:pass@localhost:6380/2",
        "unix:///tmp/redis.sock",
        "redis+cluster://127.0.0.1:7000,127.0.0.1:7001",
    ] {
        assert!(new(fine, "n", &good, None).is_ok(), "{fine:?}");
    }
    let tls = new("rediss://127.0.0.1:6380", "n", &good, None).err();
    if cfg!(feature = "redis-tls") {
        assert_eq!(tls, None);
    } else {
        assert_eq!(tls, Some(SLUICEGATE_ERR_UNSUPPORTED));
    }
    // SAFETY: NUL-terminated strings, valid config and out.
    let s = unsafe {
        sluicegate_redis_new(
            c"redis://\xff".as_ptr(),
            c"n".as_ptr(),
            &good,
            ptr::null(),
            &mut out,
        )
    };
    assert_eq!(s, SLUICEGATE_ERR_NOT_UTF8);
    // SAFETY: as above.
    let s = unsafe {
        sluicegate_redis_new(
            url.as_ptr(),
            c"\xc3(".as_ptr(),
            &good,
            ptr::null(),
            &mut out,
        )
    };
    assert_eq!(s, SLUICEGATE_ERR_NOT_UTF8);
    assert_eq!(
        new("redis://127.0.0.1", "a{b", &good, None).err(),
        Some(SLUICEGATE_ERR_CONFIG_INVALID)
    );
    // The limit: every local check, then Redis' own.
    for (limit, want) in [
        (
            sluicegate_config {
                algorithm: 6,
                ..good
            },
            SLUICEGATE_ERR_BAD_ALGORITHM,
        ),
        (
            sluicegate_config {
                struct_size: 8,
                ..good
            },
            SLUICEGATE_ERR_STRUCT_SIZE,
        ),
        (
            cfg(SLUICEGATE_TOKEN_BUCKET, 0, SEC, 0),
            SLUICEGATE_ERR_CONFIG_ZERO,
        ),
        (
            cfg(SLUICEGATE_TOKEN_BUCKET, 5, 1, 0),
            SLUICEGATE_ERR_CONFIG_TOO_FAST,
        ),
        (
            cfg(SLUICEGATE_SLIDING_LOG, 5, SEC, 0),
            SLUICEGATE_ERR_UNSUPPORTED,
        ),
        (
            cfg(SLUICEGATE_FIXED_WINDOW, 5, 1_500, 0),
            SLUICEGATE_ERR_CONFIG_RESOLUTION,
        ),
        // No word layout on Redis: only the script's exact-arithmetic bound
        // (a limit under 2^50) applies to a sliding window there.
        (
            cfg(SLUICEGATE_SLIDING_WINDOW, (1 << 50) + 1, 86_400 * SEC, 0),
            SLUICEGATE_ERR_CONFIG_RESOLUTION,
        ),
        (
            sluicegate_config {
                max_delay_ns: SEC,
                ..bucket()
            },
            SLUICEGATE_ERR_CONFIG_INVALID,
        ),
    ] {
        assert_eq!(
            new("redis://127.0.0.1", "n", &limit, None).err(),
            Some(want),
            "{limit:?}"
        );
    }
    // The sliding window's Redis script compares exactly, with no bound on the
    // limit (issue 11): a day's window of 500,000 is a valid Redis limit.
    let day = cfg(SLUICEGATE_SLIDING_WINDOW, 500_000, 86_400 * SEC, 0);
    assert!(new("redis://127.0.0.1", "n", &day, None).is_ok());
    // Every algorithm Redis has: all but the sliding log.
    for alg in algorithms().filter(|&a| a != SLUICEGATE_SLIDING_LOG) {
        assert!(new("redis://127.0.0.1", "n", &cfg(alg, 5, SEC, 0), None).is_ok());
    }
}

#[test]
fn checks_reject_bad_input() {
    let h = new(&closed_url(), "n", &bucket(), None).unwrap();
    let mut d = sluicegate_decision::default();
    let mut src = 77u32;
    // SAFETY (this block): every pointer is NULL or valid.
    unsafe {
        for f in [sluicegate_redis_check, sluicegate_redis_peek] {
            assert_eq!(
                f(ptr::null(), b"k".as_ptr(), 1, 1, &mut d, &mut src),
                SLUICEGATE_ERR_NULL
            );
            assert_eq!(
                f(h.0, ptr::null(), 1, 1, &mut d, &mut src),
                SLUICEGATE_ERR_NULL
            );
            assert_eq!(
                f(h.0, ptr::null(), 0, 1, &mut d, &mut src),
                SLUICEGATE_ERR_NULL
            );
            assert_eq!(
                f(h.0, b"k".as_ptr(), 1, 1, ptr::null_mut(), &mut src),
                SLUICEGATE_ERR_NULL
            );
            assert_eq!(
                f(h.0, b"k".as_ptr(), 0, 1, &mut d, &mut src),
                SLUICEGATE_ERR_EMPTY_KEY
            );
            for bad in [&b"\xff"[..], b"user\xc3(", b"\xed\xa0\x80"] {
                assert_eq!(
                    f(h.0, bad.as_ptr(), bad.len(), 1, &mut d, &mut src),
                    SLUICEGATE_ERR_NOT_UTF8
                );
            }
            // n above the capacity (5): a status, never sent, with a denial.
            for n in [6, u64::MAX] {
                d = sluicegate_decision::default();
                assert_eq!(
                    f(h.0, b"k".as_ptr(), 1, n, &mut d, &mut src),
                    SLUICEGATE_ERR_INSUFFICIENT_CAPACITY
                );
                assert!(!d.allowed);
                assert_eq!((d.limit, d.retry_after_ns), (5, u64::MAX));
            }
            assert_eq!(src, 77, "source is written only with SLUICEGATE_OK");
            // A NULL source is fine.
            assert_eq!(
                f(h.0, b"k".as_ptr(), 1, 1, &mut d, ptr::null_mut()),
                SLUICEGATE_OK
            );
        }
        let mut open = false;
        assert_eq!(
            sluicegate_redis_circuit_open(ptr::null(), &mut open),
            SLUICEGATE_ERR_NULL
        );
        assert_eq!(
            sluicegate_redis_circuit_open(h.0, ptr::null_mut()),
            SLUICEGATE_ERR_NULL
        );
        sluicegate_redis_free(ptr::null_mut());
    }
}

#[test]
fn an_unreachable_server_gets_the_failure_policy() {
    use sluicegate_failure_policy::*;
    use sluicegate_source::*;
    let url = closed_url();

    // Closed: denied at once, retry after the cooldown; the breaker opens after
    // two failures, and then no call touches the network.
    let h = new(
        &url,
        "closed",
        &bucket(),
        Some(&policy(SLUICEGATE_FAIL_CLOSED)),
    )
    .unwrap();
    assert!(!h.circuit_open());
    let t = Instant::now();
    for i in 0..10 {
        let (s, d, src) = h.check("k", 1);
        assert_eq!(s, SLUICEGATE_OK);
        assert_eq!(src, SLUICEGATE_SOURCE_FAIL_CLOSED as u32);
        assert!(!d.allowed && d.remaining == 0);
        assert_eq!((d.retry_after_ns, d.limit), (2 * SEC, 5));
        if i >= 1 {
            assert!(h.circuit_open(), "open after 2 failures");
        }
    }
    let (s, d, src) = h.peek("k", 1);
    assert_eq!(
        (s, d.allowed, src),
        (SLUICEGATE_OK, false, SLUICEGATE_SOURCE_FAIL_CLOSED as u32)
    );
    assert!(t.elapsed().as_secs_f64() < 2.0, "{:?}", t.elapsed());

    // Open: admitted, remaining 0.
    let h = new(&url, "open", &bucket(), Some(&policy(SLUICEGATE_FAIL_OPEN))).unwrap();
    for _ in 0..10 {
        let (s, d, src) = h.check("k", 1);
        assert_eq!(
            (s, src),
            (SLUICEGATE_OK, SLUICEGATE_SOURCE_FAIL_OPEN as u32)
        );
        assert!(d.allowed && d.remaining == 0 && d.retry_after_ns == 0 && d.limit == 5);
    }

    // Local at 40% of a burst of 5: 2 per key, each key on its own.
    let local = sluicegate_redis_config {
        local_share_percent: 40,
        ..policy(SLUICEGATE_FAIL_LOCAL)
    };
    let h = new(&url, "local", &bucket(), Some(&local)).unwrap();
    let admitted: Vec<bool> = (0..4).map(|_| h.check("a", 1).1.allowed).collect();
    assert_eq!(admitted, [true, true, false, false]);
    let (s, d, src) = h.check("b", 1);
    assert_eq!(
        (s, d.allowed, d.remaining, d.limit),
        (SLUICEGATE_OK, true, 1, 2)
    );
    assert_eq!(src, SLUICEGATE_SOURCE_LOCAL_FALLBACK as u32);
    let (_, d, _) = h.peek("b", 1);
    assert_eq!(
        (d.allowed, d.remaining),
        (true, 0),
        "a peek charges nothing"
    );
    assert!(h.check("b", 1).1.allowed);
    // The default policy is the local one, at 10% (at least 1).
    let h = new(&url, "default", &bucket(), None).unwrap();
    let (s, d, src) = h.check("a", 1);
    assert_eq!((s, d.allowed, d.limit), (SLUICEGATE_OK, true, 1));
    assert_eq!(src, SLUICEGATE_SOURCE_LOCAL_FALLBACK as u32);
    assert!(!h.check("a", 1).1.allowed);
}

#[test]
fn a_live_server_decides_exactly() {
    use sluicegate_algorithm::*;
    use sluicegate_source::*;
    let Some(url) = server() else { return };
    let name = unique("rust");
    let h = new(&url, &name, &bucket(), None).unwrap();
    // A fresh key: a peek shows the whole burst and charges nothing.
    for _ in 0..3 {
        let (s, d, src) = h.peek("k", 1);
        assert_eq!((s, src), (SLUICEGATE_OK, SLUICEGATE_SOURCE_REDIS as u32));
        assert_eq!((d.allowed, d.remaining, d.limit), (true, 4, 5));
    }
    for left in (0..5).rev() {
        let (s, d, src) = h.check("k", 1);
        assert_eq!((s, src), (SLUICEGATE_OK, SLUICEGATE_SOURCE_REDIS as u32));
        assert_eq!((d.allowed, d.remaining, d.retry_after_ns), (true, left, 0));
    }
    let (_, d, _) = h.check("k", 1);
    assert!(!d.allowed && d.remaining == 0);
    // One unit per minute: the next one is less than a minute away.
    assert!(
        d.retry_after_ns > 55 * SEC && d.retry_after_ns <= 60 * SEC,
        "{d:?}"
    );
    assert!(d.reset_after_ns > 4 * 60 * SEC && d.reset_after_ns <= 5 * 60 * SEC);
    let (_, p, _) = h.peek("k", 1);
    assert!(!p.allowed);
    // n = 0 is a peek; another key is untouched; costs are all-or-nothing.
    assert!(h.check("k", 0).1.remaining == 0);
    let (_, d, _) = h.check("other", 3);
    assert_eq!((d.allowed, d.remaining), (true, 2));
    let (_, d, _) = h.check("other", 3);
    assert_eq!((d.allowed, d.remaining), (false, 2));
    assert!(!h.circuit_open());
    // UTF-8 keys are keys like any other.
    assert!(h.check("ключ", 5).1.allowed);
    assert!(!h.check("ключ", 1).1.allowed);

    // The shaper's wait is the decision's delay_ns, as locally.
    let shaper = sluicegate_config {
        max_delay_ns: SEC,
        ..cfg(SLUICEGATE_SHAPER, 10, SEC, 1)
    };
    let h = new(&url, &unique("shaper"), &shaper, None).unwrap();
    let (_, first, _) = h.check("k", 1);
    let (_, second, _) = h.check("k", 1);
    assert!(first.allowed && first.delay_ns == 0, "{first:?}");
    assert!(
        second.allowed && second.delay_ns > 0 && second.delay_ns <= SEC / 10,
        "{second:?}"
    );

    // A fixed window on Redis: the limit per window.
    let fixed = cfg(SLUICEGATE_FIXED_WINDOW, 3, 3_600 * SEC, 0);
    let h = new(&url, &unique("fixed"), &fixed, None).unwrap();
    let admitted = (0..5).filter(|_| h.check("k", 1).1.allowed).count();
    assert_eq!(admitted, 3);

    // Four threads on one handle and one key: exactly the burst is admitted.
    let h = new(&url, &unique("threads"), &bucket(), None).unwrap();
    let admitted: usize = std::thread::scope(|s| {
        let threads: Vec<_> = (0..4)
            .map(|_| s.spawn(|| (0..5).filter(|_| h.check("k", 1).1.allowed).count()))
            .collect();
        threads.into_iter().map(|t| t.join().unwrap()).sum()
    });
    assert_eq!(admitted, 5);
}

#[test]
fn a_wrongtype_key_is_a_data_status_for_that_key_only() {
    use sluicegate_source::*;
    let Some(url) = server() else { return };
    let name = unique("wrongtype");
    let h = new(
        &url,
        &name,
        &bucket(),
        Some(&policy(sluicegate_failure_policy::SLUICEGATE_FAIL_OPEN)),
    )
    .unwrap();
    // Another type of value at the key the limit would use.
    let mut c = redis::Client::open(url.as_str())
        .unwrap()
        .get_connection()
        .unwrap();
    let key = format!("sluicegate:{name}:token_bucket:{{bad}}");
    redis::cmd("LPUSH")
        .arg(&key)
        .arg("x")
        .query::<i64>(&mut c)
        .unwrap();
    // More failures than the breaker's threshold (2): each fails alone.
    for _ in 0..5 {
        assert_eq!(h.check("bad", 1).0, SLUICEGATE_ERR_REDIS_DATA);
    }
    assert!(!h.circuit_open());
    let (s, d, src) = h.check("good", 1);
    assert_eq!((s, src), (SLUICEGATE_OK, SLUICEGATE_SOURCE_REDIS as u32));
    assert!(d.allowed);
}
