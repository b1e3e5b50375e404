//! The one status enum and its messages.

use core::ffi::c_char;

use sluicegate::{ConfigError, InsufficientCapacity, SpecError};

/// The result of every fallible call. `SLUICEGATE_OK` (0) is success; each other
/// value names one kind of error. Values are grouped — 1xx: an argument, 2xx: a
/// configuration, 3xx: a request, 9xx: internal — and a number, once published,
/// is never given another meaning (retired numbers stay reserved).
///
/// Received as a plain integer by `sluicegate_status_str`, so an unknown value
/// from a newer library still gets a message.
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum sluicegate_status {
    /// Success.
    SLUICEGATE_OK = 0,
    /// A required pointer argument was NULL.
    SLUICEGATE_ERR_NULL = 100,
    /// A struct's `struct_size` is smaller than the first published layout, or it
    /// is larger and the bytes this library does not know are not zero.
    SLUICEGATE_ERR_STRUCT_SIZE = 101,
    /// `algorithm` is not a `sluicegate_algorithm` value.
    SLUICEGATE_ERR_BAD_ALGORITHM = 102,
    /// `full_policy` is not a `sluicegate_full_policy` value.
    SLUICEGATE_ERR_BAD_POLICY = 103,
    /// A key of length 0.
    SLUICEGATE_ERR_EMPTY_KEY = 104,
    /// Zero configs, or more than `SLUICEGATE_MAX_LIMITS`.
    SLUICEGATE_ERR_LIMIT_COUNT = 105,
    /// The configs of one compound limiter name different algorithms.
    SLUICEGATE_ERR_MIXED_ALGORITHMS = 106,
    /// A limit index past the last limit.
    SLUICEGATE_ERR_INDEX = 107,
    /// The output array is too small for every limit in the string.
    SLUICEGATE_ERR_BUFFER_TOO_SMALL = 108,
    /// The algorithm or feature is not available for this kind of handle,
    /// operation or build (e.g. a keyed sliding log, a compound shaper, `reset` of
    /// a compound, a sliding log on Redis, a `rediss://` URL in a library built
    /// without the `redis-tls` feature).
    SLUICEGATE_ERR_UNSUPPORTED = 109,
    /// The stripe count is not 1, 2, 4, 8 or 16.
    SLUICEGATE_ERR_BAD_STRIPES = 110,
    /// A string argument is not valid UTF-8: a Redis limiter's key, or the URL,
    /// name or prefix given to `sluicegate_redis_new` (Redis keys are text, shared
    /// with the Rust and Python clients of the same limit).
    SLUICEGATE_ERR_NOT_UTF8 = 111,
    /// `failure_policy` is not a `sluicegate_failure_policy` value.
    SLUICEGATE_ERR_BAD_FAILURE_POLICY = 112,
    /// More request attributes than `SLUICEGATE_POLICY_MAX_ATTRS` in one policy
    /// check.
    SLUICEGATE_ERR_TOO_MANY_ATTRS = 113,
    /// A shared region's name or path is empty, longer than
    /// `SLUICEGATE_SHARED_MAX_NAME` bytes, or contains a NUL byte.
    SLUICEGATE_ERR_BAD_NAME = 114,
    /// A field that must be positive is zero (amount, period, capacity, ...).
    SLUICEGATE_ERR_CONFIG_ZERO = 200,
    /// A value is above what the limiter's state can represent.
    SLUICEGATE_ERR_CONFIG_TOO_LARGE = 201,
    /// The rate is faster than one unit per nanosecond.
    SLUICEGATE_ERR_CONFIG_TOO_FAST = 202,
    /// The field cannot change on a live limiter (a window length, the
    /// algorithm, a shaper's max delay, a log's capacity).
    SLUICEGATE_ERR_CONFIG_IMMUTABLE = 203,
    /// Any other invalid configuration: a field set that this algorithm does not
    /// use (`max_delay_ns` outside the shaper, `log_capacity` outside the log).
    SLUICEGATE_ERR_CONFIG_INVALID = 204,
    /// The rate string could not be parsed; `sluicegate_parse_error` says where.
    SLUICEGATE_ERR_PARSE = 205,
    /// The Redis URL is malformed: not `redis://host[:port][/db]`,
    /// `rediss://…`, `unix:///path` or `redis+cluster://host:port[,host:port…]`,
    /// or a part of it (host, port, database) does not parse. Only the form is
    /// checked: an unreachable server is not an error (the failure policy answers).
    SLUICEGATE_ERR_BAD_URL = 206,
    /// The limit is valid for a local limiter but not on Redis, whose scripts
    /// compute in whole microseconds: a window that is not a whole number of
    /// microseconds, burst × emission interval (+ max delay) or a fixed window's
    /// (limit + 1) × window past 2^52 µs, a sliding window or its limit past
    /// 2^50, or a local fallback share of the quota that is no valid limit.
    SLUICEGATE_ERR_CONFIG_RESOLUTION = 207,
    /// The policy (rule file) is invalid: the error message names the file, line,
    /// column and rule of every error. A reload that fails this way keeps the
    /// policy in force.
    SLUICEGATE_ERR_POLICY = 208,
    /// 22x: shared regions (`sluicegate_*_open_shared`). The path is a symbolic
    /// link (never followed) or not a regular file (a directory, a device).
    SLUICEGATE_ERR_SHARED_NOT_A_FILE = 220,
    /// The region's file is owned by another user; the options'
    /// `allow_other_owner` accepts it (a master running as root that made it
    /// for its workers).
    SLUICEGATE_ERR_SHARED_OTHER_OWNER = 221,
    /// The file is not a sluicegate region (another magic number): it is left
    /// as it was.
    SLUICEGATE_ERR_SHARED_NOT_A_REGION = 222,
    /// The region was made with another layout version (a newer or older
    /// library): never reinterpreted; remove it (`sluicegate_shared_unlink`) to
    /// make a new one.
    SLUICEGATE_ERR_SHARED_VERSION = 223,
    /// The region's header describes parts its file does not hold (a
    /// truncated file), or parts this library lays out differently.
    SLUICEGATE_ERR_SHARED_CORRUPT = 224,
    /// The region exists with another size than the options ask for (the
    /// message names both): resizing is a new region.
    SLUICEGATE_ERR_SHARED_MISMATCH = 225,
    /// The device has no room for the region (a full tmpfs: Docker's default
    /// `/dev/shm` is 64 MB); reported at open, never as a crash later.
    SLUICEGATE_ERR_SHARED_NO_SPACE = 226,
    /// The options describe no region: memory for not one group of 8 keys, or
    /// more than 65,535 limits.
    SLUICEGATE_ERR_SHARED_OPTIONS = 227,
    /// This CPU has no lock-free 16-byte compare-and-swap: a region shared
    /// through a lock in one process's memory would not be shared at all.
    SLUICEGATE_ERR_SHARED_NOT_LOCK_FREE = 228,
    /// Permission denied on the region's file or its directory (a read-only
    /// file, a directory this user cannot write, a read-only file system).
    SLUICEGATE_ERR_SHARED_ACCESS = 229,
    /// Any other system call on the region's file failed (a missing directory,
    /// a failed `mmap`); the message names the file, the call and the reason.
    SLUICEGATE_ERR_SHARED_IO = 230,
    /// The region's registry of limits is full (the options' `limits`): this
    /// limit cannot be added; the limits already in it keep working.
    SLUICEGATE_ERR_SHARED_FULL = 231,
    /// Refused on a shared handle: its parameters are fixed in the region for
    /// every process (`set_config`: open a handle of the new spec instead,
    /// which is another limit), and a shared single limiter has no `reset`.
    SLUICEGATE_ERR_SHARED_FIXED = 232,
    /// The cost `n` exceeds the limiter's capacity: it can never be admitted (not
    /// a denial; the decision is filled with `allowed = false`).
    SLUICEGATE_ERR_INSUFFICIENT_CAPACITY = 300,
    /// Redis refused this key's call because of the key's own data (a value of
    /// another type at the key, `WRONGTYPE`, or a script error over its value):
    /// this check failed, the other keys go on, and the circuit breaker does not
    /// count it (not an unavailable server, so no failure policy answers).
    SLUICEGATE_ERR_REDIS_DATA = 301,
    /// Memory for a new handle could not be allocated (a keyed table's slots, a
    /// sliding log's ring, a policy's tables), or its size overflows. Nothing
    /// was allocated.
    SLUICEGATE_ERR_ALLOC = 900,
    /// A bug: a panic was caught at the ABI boundary. Please report it.
    SLUICEGATE_ERR_PANIC = 901,
    /// The Redis client failed in a way no failure policy answers for (not an
    /// unavailable server: that is the policy's to answer, with `SLUICEGATE_OK`).
    SLUICEGATE_ERR_SYSTEM = 902,
    /// A file could not be read (a rule file: missing, unreadable); the error
    /// message says which and why.
    SLUICEGATE_ERR_IO = 903,
}

use sluicegate_status::*;

impl sluicegate_status {
    /// The static, NUL-terminated message of this status.
    pub fn message(self) -> &'static core::ffi::CStr {
        match self {
            SLUICEGATE_OK => c"ok",
            SLUICEGATE_ERR_NULL => c"a required pointer argument was NULL",
            SLUICEGATE_ERR_STRUCT_SIZE => {
                c"struct_size is wrong: set it to sizeof the struct (unknown trailing bytes must be zero)"
            }
            SLUICEGATE_ERR_BAD_ALGORITHM => c"algorithm is not a sluicegate_algorithm value",
            SLUICEGATE_ERR_BAD_POLICY => c"full_policy is not a sluicegate_full_policy value",
            SLUICEGATE_ERR_EMPTY_KEY => c"the key is empty (length 0)",
            SLUICEGATE_ERR_LIMIT_COUNT => c"the number of limits must be between 1 and SLUICEGATE_MAX_LIMITS",
            SLUICEGATE_ERR_MIXED_ALGORITHMS => c"every limit of a compound limiter must use the same algorithm",
            SLUICEGATE_ERR_INDEX => c"the limit index is out of range",
            SLUICEGATE_ERR_BUFFER_TOO_SMALL => c"the output array is too small for every limit in the string",
            SLUICEGATE_ERR_UNSUPPORTED => {
                c"the algorithm or feature is not supported by this kind of limiter, operation or build"
            }
            SLUICEGATE_ERR_BAD_STRIPES => c"the stripe count must be 1, 2, 4, 8 or 16",
            SLUICEGATE_ERR_NOT_UTF8 => c"a key, URL, name or prefix is not valid UTF-8",
            SLUICEGATE_ERR_BAD_FAILURE_POLICY => {
                c"failure_policy is not a sluicegate_failure_policy value"
            }
            SLUICEGATE_ERR_TOO_MANY_ATTRS => {
                c"more request attributes than SLUICEGATE_POLICY_MAX_ATTRS"
            }
            SLUICEGATE_ERR_BAD_NAME => {
                c"the shared region's name is empty, longer than SLUICEGATE_SHARED_MAX_NAME bytes or contains a NUL"
            }
            SLUICEGATE_ERR_CONFIG_ZERO => c"a configuration field that must be positive is zero",
            SLUICEGATE_ERR_CONFIG_TOO_LARGE => c"a configuration value is too large for this limiter",
            SLUICEGATE_ERR_CONFIG_TOO_FAST => c"the rate is faster than one unit per nanosecond",
            SLUICEGATE_ERR_CONFIG_IMMUTABLE => c"this configuration field cannot change on a live limiter",
            SLUICEGATE_ERR_CONFIG_INVALID => c"the configuration is invalid for this algorithm",
            SLUICEGATE_ERR_PARSE => c"the rate string could not be parsed",
            SLUICEGATE_ERR_BAD_URL => {
                c"the Redis URL is malformed: expected redis://host[:port][/db], rediss://..., unix:///path or redis+cluster://host:port[,host:port...]"
            }
            SLUICEGATE_ERR_CONFIG_RESOLUTION => {
                c"the limit cannot be computed exactly on Redis (whole microseconds, below 2^52)"
            }
            SLUICEGATE_ERR_POLICY => {
                c"the policy is invalid (the error message names the file, line, column and rule)"
            }
            SLUICEGATE_ERR_SHARED_NOT_A_FILE => {
                c"the shared region's path is a symbolic link (never followed) or not a regular file"
            }
            SLUICEGATE_ERR_SHARED_OTHER_OWNER => {
                c"the shared region's file is owned by another user (allow_other_owner accepts it)"
            }
            SLUICEGATE_ERR_SHARED_NOT_A_REGION => c"the file is not a sluicegate shared region",
            SLUICEGATE_ERR_SHARED_VERSION => {
                c"the shared region has another layout version (remove it to make a new one)"
            }
            SLUICEGATE_ERR_SHARED_CORRUPT => {
                c"the shared region is corrupt: its header describes parts its file does not hold (truncated?)"
            }
            SLUICEGATE_ERR_SHARED_MISMATCH => {
                c"the shared region exists with another size than asked for (resizing is a new region)"
            }
            SLUICEGATE_ERR_SHARED_NO_SPACE => {
                c"no room for the shared region on its device (Docker's default /dev/shm is 64 MB)"
            }
            SLUICEGATE_ERR_SHARED_OPTIONS => {
                c"the shared region options describe no region (too little memory, or over 65535 limits)"
            }
            SLUICEGATE_ERR_SHARED_NOT_LOCK_FREE => {
                c"this CPU has no lock-free 16-byte compare-and-swap: shared regions are unavailable"
            }
            SLUICEGATE_ERR_SHARED_ACCESS => {
                c"permission denied on the shared region's file or directory (read-only?)"
            }
            SLUICEGATE_ERR_SHARED_IO => c"a system call on the shared region's file failed",
            SLUICEGATE_ERR_SHARED_FULL => {
                c"the shared region's registry of limits is full (the options' limits)"
            }
            SLUICEGATE_ERR_SHARED_FIXED => {
                c"refused on a shared handle: its parameters are fixed in the region (open one of the new spec)"
            }
            SLUICEGATE_ERR_INSUFFICIENT_CAPACITY => {
                c"the request exceeds the limiter's capacity and can never be admitted"
            }
            SLUICEGATE_ERR_REDIS_DATA => {
                c"Redis refused this key's call because of the key's data (e.g. WRONGTYPE)"
            }
            SLUICEGATE_ERR_ALLOC => c"out of memory",
            SLUICEGATE_ERR_PANIC => c"internal error (a caught panic): please report it",
            SLUICEGATE_ERR_SYSTEM => c"the Redis client failed in a way no failure policy covers",
            SLUICEGATE_ERR_IO => c"a file could not be read",
        }
    }

    /// Every status (for `sluicegate_status_str` and tests).
    pub(crate) const ALL: [sluicegate_status; 43] = [
        SLUICEGATE_OK,
        SLUICEGATE_ERR_NULL,
        SLUICEGATE_ERR_STRUCT_SIZE,
        SLUICEGATE_ERR_BAD_ALGORITHM,
        SLUICEGATE_ERR_BAD_POLICY,
        SLUICEGATE_ERR_EMPTY_KEY,
        SLUICEGATE_ERR_LIMIT_COUNT,
        SLUICEGATE_ERR_MIXED_ALGORITHMS,
        SLUICEGATE_ERR_INDEX,
        SLUICEGATE_ERR_BUFFER_TOO_SMALL,
        SLUICEGATE_ERR_UNSUPPORTED,
        SLUICEGATE_ERR_BAD_STRIPES,
        SLUICEGATE_ERR_NOT_UTF8,
        SLUICEGATE_ERR_BAD_FAILURE_POLICY,
        SLUICEGATE_ERR_TOO_MANY_ATTRS,
        SLUICEGATE_ERR_BAD_NAME,
        SLUICEGATE_ERR_CONFIG_ZERO,
        SLUICEGATE_ERR_CONFIG_TOO_LARGE,
        SLUICEGATE_ERR_CONFIG_TOO_FAST,
        SLUICEGATE_ERR_CONFIG_IMMUTABLE,
        SLUICEGATE_ERR_CONFIG_INVALID,
        SLUICEGATE_ERR_PARSE,
        SLUICEGATE_ERR_BAD_URL,
        SLUICEGATE_ERR_CONFIG_RESOLUTION,
        SLUICEGATE_ERR_POLICY,
        SLUICEGATE_ERR_SHARED_NOT_A_FILE,
        SLUICEGATE_ERR_SHARED_OTHER_OWNER,
        SLUICEGATE_ERR_SHARED_NOT_A_REGION,
        SLUICEGATE_ERR_SHARED_VERSION,
        SLUICEGATE_ERR_SHARED_CORRUPT,
        SLUICEGATE_ERR_SHARED_MISMATCH,
        SLUICEGATE_ERR_SHARED_NO_SPACE,
        SLUICEGATE_ERR_SHARED_OPTIONS,
        SLUICEGATE_ERR_SHARED_NOT_LOCK_FREE,
        SLUICEGATE_ERR_SHARED_ACCESS,
        SLUICEGATE_ERR_SHARED_IO,
        SLUICEGATE_ERR_SHARED_FULL,
        SLUICEGATE_ERR_SHARED_FIXED,
        SLUICEGATE_ERR_INSUFFICIENT_CAPACITY,
        SLUICEGATE_ERR_ALLOC,
        SLUICEGATE_ERR_PANIC,
        SLUICEGATE_ERR_SYSTEM,
        SLUICEGATE_ERR_IO,
    ];
}

impl From<ConfigError> for sluicegate_status {
    fn from(e: ConfigError) -> Self {
        match e {
            ConfigError::Zero { .. } => SLUICEGATE_ERR_CONFIG_ZERO,
            ConfigError::TooLarge { .. } => SLUICEGATE_ERR_CONFIG_TOO_LARGE,
            ConfigError::TooFast { .. } => SLUICEGATE_ERR_CONFIG_TOO_FAST,
            ConfigError::Immutable { .. } => SLUICEGATE_ERR_CONFIG_IMMUTABLE,
            // A keyed table's slots or a sliding log's ring that the system
            // would not give (or whose size overflows): memory, not a bad config.
            ConfigError::Alloc { .. } => SLUICEGATE_ERR_ALLOC,
            _ => SLUICEGATE_ERR_CONFIG_INVALID,
        }
    }
}

impl From<SpecError> for sluicegate_status {
    fn from(e: SpecError) -> Self {
        match e {
            SpecError::Config { error, .. } => error.into(),
            SpecError::Parse(_) => SLUICEGATE_ERR_PARSE,
            SpecError::NoLimits | SpecError::TooManyLimits { .. } => SLUICEGATE_ERR_LIMIT_COUNT,
            SpecError::Unsupported { .. } => SLUICEGATE_ERR_UNSUPPORTED,
            SpecError::Stripes { .. } => SLUICEGATE_ERR_BAD_STRIPES,
            SpecError::Immutable { .. } => SLUICEGATE_ERR_CONFIG_IMMUTABLE,
            SpecError::Alloc { .. } => SLUICEGATE_ERR_ALLOC,
            // Only a pool's registry fills up, and the C ABI's pools are
            // shared regions.
            SpecError::PoolFull { .. } => SLUICEGATE_ERR_SHARED_FULL,
            _ => SLUICEGATE_ERR_CONFIG_INVALID,
        }
    }
}

impl From<InsufficientCapacity> for sluicegate_status {
    fn from(_: InsufficientCapacity) -> Self {
        SLUICEGATE_ERR_INSUFFICIENT_CAPACITY
    }
}

/// The static, NUL-terminated English message for `status`; an unknown value
/// gets `"unknown status"`. The string must not be freed.
///
/// Takes the status as a plain integer so that any value, known or not, is safe.
///
/// # Safety
/// None: any value may be passed; the result is valid for the life of the process.
#[no_mangle]
pub extern "C" fn sluicegate_status_str(status: u32) -> *const c_char {
    crate::boundary::guard_ptr(|| {
        sluicegate_status::ALL
            .iter()
            .find(|s| **s as u32 == status)
            .map_or(c"unknown status", |s| s.message())
            .as_ptr()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_code_has_a_distinct_message() {
        let mut seen = std::collections::HashSet::new();
        for s in sluicegate_status::ALL {
            assert!(seen.insert(s.message()), "{s:?}");
        }
        // SAFETY: the function returns a static NUL-terminated string.
        let unknown = unsafe { core::ffi::CStr::from_ptr(sluicegate_status_str(12345)) };
        assert_eq!(unknown, c"unknown status");
    }

    #[test]
    fn allocation_failures_are_alloc_however_they_arrive() {
        let alloc = ConfigError::Alloc { bytes: 1 << 40 };
        assert_eq!(sluicegate_status::from(alloc), SLUICEGATE_ERR_ALLOC);
        let nested = SpecError::Config {
            index: 0,
            error: alloc,
        };
        assert_eq!(sluicegate_status::from(nested), SLUICEGATE_ERR_ALLOC);
        assert_eq!(
            sluicegate_status::from(SpecError::Alloc { bytes: 1 << 40 }),
            SLUICEGATE_ERR_ALLOC
        );
        // The other configuration errors keep their own codes.
        assert_eq!(
            sluicegate_status::from(ConfigError::Zero { field: "amount" }),
            SLUICEGATE_ERR_CONFIG_ZERO
        );
    }
}
