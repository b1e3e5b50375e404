//! The Lua sources and their invocation: `EVALSHA`, and `EVAL` only when the server
//! answers `NOSCRIPT` (its script cache was flushed, or it restarted or failed over).
//! `NOSCRIPT` means the script did not run, so sending it again cannot double-count;
//! any other error, and a timeout above all, is returned as it is and never replayed.

use redis::{Cmd, ErrorKind, RedisResult, ServerErrorKind, Value};

use sluicegate::{FixedParams, GcraParams, Kind, Quota};

use crate::conn::Conn;
use crate::direct::DirectConn;
use crate::error::{ConfigError, Error};
use crate::resp::{Args, Encoder};

/// The GCRA script: token bucket, leaky bucket meter, shaper reservation and lease.
pub const GCRA_LUA: &str = include_str!("../lua/gcra.lua");
/// The fixed-window script.
pub const FIXED_WINDOW_LUA: &str = include_str!("../lua/fixed_window.lua");
/// The sliding-window-counter script.
pub const SLIDING_WINDOW_LUA: &str = include_str!("../lua/sliding_window.lua");

/// Several costs on one key in one script run, in order: `script` (one of the
/// three above, unchanged) becomes the body of a function whose parameter
/// shadows `ARGV`, called once per cost with the single call's arguments and
/// that cost as `ARGV[3]`. Each run of the body is exactly one single call (its
/// own `TIME`, its own `GET`, the previous one's `SET` visible), so the replies
/// are those of the same calls sent one after another with nothing in between.
///
/// `ARGV[1]` = m, `ARGV[2 ..= m + 1]` the single call's arguments (its cost
/// ignored), `ARGV[m + 2 ..]` the costs. Reply: one single-call reply per cost.
pub fn multi_source(script: &str) -> String {
    format!(
        "local function one(ARGV)\n{script}\nend\n\
         local m = tonumber(ARGV[1])\n\
         local out = {{}}\n\
         for i = m + 2, #ARGV do\n\
         \x20 local a = {{}}\n\
         \x20 for j = 1, m do a[j] = ARGV[j + 1] end\n\
         \x20 a[3] = ARGV[i]\n\
         \x20 out[#out + 1] = one(a)\n\
         end\n\
         return out\n"
    )
}

/// Largest value the scripts may compute (2^52, leaving room for `now`, ~1.8·10^15 µs).
const LUA_MAX: u64 = 1 << 52;

/// The sliding window's bound on its window (µs) and limit: its sums (`now` plus
/// two windows, three times the limit) stay below 2^53 until the year 2112.
const SUM_MAX: u64 = 1 << 50;

/// The script registry: which Lua script decides each [`Kind`] on Redis. A kind
/// not listed has no Redis script (and [`sluicegate::Caps::redis`] says so: a
/// test checks the two agree). Adding an algorithm to Redis is one line here, its
/// script, and (for a new script) one [`Script`] below.
const REGISTRY: [(Kind, &Script); 5] = [
    (Kind::TokenBucket, &GCRA),
    (Kind::LeakyBucket, &GCRA),
    (Kind::Shaper, &GCRA),
    (Kind::FixedWindow, &FIXED),
    (Kind::SlidingWindow, &SLIDING),
];

/// The script of `kind`, if it has one.
pub(crate) fn for_kind(kind: Kind) -> Option<&'static Script> {
    REGISTRY.iter().find(|(k, _)| *k == kind).map(|(_, s)| *s)
}

/// The names of the kinds with a script, for error messages.
pub(crate) fn kinds() -> String {
    let names: Vec<&str> = REGISTRY.iter().map(|(k, _)| k.name()).collect();
    names.join(", ")
}

/// A limit's parameters as its script takes them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Params {
    /// `T` (GCRA) or `W` (windows), microseconds.
    pub(crate) unit_us: u64,
    /// The burst or the window limit.
    pub(crate) size: u64,
    /// GCRA only: the shaper's max delay in microseconds (0 for the buckets).
    pub(crate) slack_us: Option<u64>,
    /// The largest cost ever admitted.
    pub(crate) capacity: u64,
    /// The window in ns; 0 for the buckets (state on the local clock's terms).
    pub(crate) window_ns: u64,
}

/// One Lua script: its source, and how a spec becomes its arguments.
pub(crate) struct Script {
    /// The file under `lua/`.
    pub(crate) file: &'static str,
    pub(crate) source: &'static str,
    /// One quota's parameters (with the shaper's max delay in ns), within the
    /// script's exact-arithmetic bounds (its own: no local word layout).
    pub(crate) params: fn(&Quota, u64) -> Result<Params, Error>,
    /// After a lease granted `granted < n` units at Redis time `now_us`: a lower
    /// bound on when `n` fresh units can be there (ns from then).
    pub(crate) partial_retry_ns: fn(&Params, u64, u64, u64) -> u64,
}

impl PartialEq for Script {
    fn eq(&self, other: &Self) -> bool {
        self.file == other.file
    }
}

impl Eq for Script {}

impl core::fmt::Debug for Script {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(self.file)
    }
}

fn bound(field: &'static str, reason: &'static str) -> Error {
    Error::Config(ConfigError::new(field, reason))
}

const GCRA: Script = Script {
    file: "gcra.lua",
    source: GCRA_LUA,
    params: |quota, max_delay_ns| {
        let p = GcraParams::new(quota).map_err(invalid)?;
        let t_us = p.emission_interval_ns().div_ceil(1000);
        let slack_us = max_delay_ns / 1000;
        let size = p
            .burst()
            .checked_mul(t_us)
            .and_then(|tau| tau.checked_add(slack_us));
        if size.is_none_or(|s| s > LUA_MAX) {
            return Err(bound(
                "burst",
                "burst × emission interval + max delay must be under 2^52 µs (142 years)",
            ));
        }
        Ok(Params {
            unit_us: t_us,
            size: p.burst(),
            slack_us: Some(slack_us),
            capacity: p.burst().saturating_add(slack_us / t_us),
            window_ns: 0,
        })
    },
    partial_retry_ns: |p, n, granted, _| (n - granted).saturating_mul(p.unit_us * 1000),
};

/// A window in whole microseconds, or why not.
fn whole_us(window_ns: u64) -> Result<u64, Error> {
    if window_ns % 1000 != 0 {
        return Err(bound(
            "window",
            "a window on Redis must be a whole number of microseconds",
        ));
    }
    Ok(window_ns / 1000)
}

/// A window script's parameters.
fn window(window_ns: u64, limit: u64) -> Result<Params, Error> {
    let w_us = whole_us(window_ns)?;
    Ok(Params {
        unit_us: w_us,
        size: limit,
        slack_us: None,
        capacity: limit,
        window_ns,
    })
}

fn invalid(e: sluicegate::ConfigError) -> Error {
    Error::Config(ConfigError::caused_by("spec", "invalid quota", e))
}

const FIXED: Script = Script {
    file: "fixed_window.lua",
    source: FIXED_WINDOW_LUA,
    params: |quota, _| {
        let p = FixedParams::new(quota).map_err(invalid)?;
        let w_us = whole_us(p.window_ns())?;
        if (p.limit() as u128 + 1) * w_us as u128 > LUA_MAX as u128 {
            return Err(bound(
                "limit",
                "(limit + 1) × window must be under 2^52 µs for exact Lua arithmetic",
            ));
        }
        window(p.window_ns(), p.limit())
    },
    // Nothing frees up before the window ends.
    partial_retry_ns: |p, _, _, now_us| window_left_ns(now_us, p.window_ns).saturating_sub(1000),
};

const SLIDING: Script = Script {
    file: "sliding_window.lua",
    source: SLIDING_WINDOW_LUA,
    // No word layout on Redis, so no layout bound: the script compares its
    // products exactly (never as doubles), and only its sums must stay below 2^53.
    params: |quota, _| {
        let (window_ns, limit) = (quota.period_ns(), quota.amount());
        if window_ns == 0 {
            return Err(invalid(sluicegate::ConfigError::Zero { field: "window" }));
        }
        if limit == 0 {
            return Err(invalid(sluicegate::ConfigError::Zero { field: "limit" }));
        }
        if whole_us(window_ns)? > SUM_MAX {
            return Err(bound(
                "window",
                "a sliding window on Redis must be under 2^50 µs (35 years)",
            ));
        }
        if limit > SUM_MAX {
            return Err(bound(
                "limit",
                "a sliding window's limit on Redis must be under 2^50",
            ));
        }
        window(window_ns, limit)
    },
    // The estimate is now the limit and falls by at most limit/W per unit of
    // time (the previous window held at most the limit): n more units take
    // longer than (n − 1)·W/limit.
    partial_retry_ns: |p, n, _, _| {
        ((n - 1) as u128 * p.window_ns as u128 / p.capacity.max(1) as u128) as u64
    },
};

/// Nanoseconds from Redis time `now_us` to the end of its aligned window of
/// `window_ns`.
pub(crate) fn window_left_ns(now_us: u64, window_ns: u64) -> u64 {
    let w_us = (window_ns / 1000).max(1);
    (w_us - now_us % w_us).saturating_mul(1000)
}

/// A script's source and SHA-1.
#[derive(Debug)]
pub(crate) struct LuaScript {
    source: String,
    sha: String,
}

impl LuaScript {
    fn new(source: String) -> Self {
        Self {
            // redis-rs computes the SHA-1 that `SCRIPT LOAD` would return.
            sha: redis::Script::new(&source).get_hash().to_owned(),
            source,
        }
    }
}

/// A limiter's script and its multi-cost form, hashed once per limiter.
#[derive(Debug)]
pub(crate) struct Scripts {
    single: LuaScript,
    multi: LuaScript,
}

impl Scripts {
    pub(crate) fn new(script: &Script) -> Self {
        Self {
            single: LuaScript::new(script.source.to_owned()),
            multi: LuaScript::new(multi_source(script.source)),
        }
    }

    /// Runs the multi-cost form of the script on `key` (see [`multi_source`]).
    pub(crate) async fn invoke_multi(
        &self,
        conn: &mut Conn,
        key: &str,
        args: impl Fn(&mut Cmd),
    ) -> RedisResult<Value> {
        Self::invoke_script(conn, &self.multi, key, args).await
    }

    /// Runs the script on `key` with `args`.
    pub(crate) async fn invoke(
        &self,
        conn: &mut Conn,
        key: &str,
        args: impl Fn(&mut Cmd),
    ) -> RedisResult<Value> {
        Self::invoke_script(conn, &self.single, key, args).await
    }

    async fn invoke_script(
        conn: &mut Conn,
        s: &LuaScript,
        key: &str,
        args: impl Fn(&mut Cmd),
    ) -> RedisResult<Value> {
        let sha = build("EVALSHA", s.sha.as_bytes(), key, &args);
        match conn.query(&sha).await {
            Err(e) if no_script(&e) => {
                // EVAL also caches the script, so the next call is an EVALSHA again.
                let eval = build("EVAL", s.source.as_bytes(), key, &args);
                conn.query(&eval).await
            }
            other => other,
        }
    }

    /// [`Self::invoke`] on a pooled connection, driven by the calling thread
    /// ([`crate::direct`]): the same commands, `EVAL` only on `NOSCRIPT`.
    pub(crate) fn invoke_direct(
        &self,
        conn: &mut DirectConn,
        key: &str,
        args: impl Fn(&mut Encoder),
    ) -> RedisResult<Value> {
        let s = &self.single;
        let sha = conn.request(|e| {
            e.text(b"EVALSHA");
            script_call(e, s.sha.as_bytes(), key, &args);
        });
        match sha {
            Err(err) if no_script(&err) => conn.request(|e| {
                e.text(b"EVAL");
                script_call(e, s.source.as_bytes(), key, &args);
            }),
            other => other,
        }
    }

    /// The command for the script: `EVALSHA`, or `EVAL` with the source.
    pub(crate) fn command(&self, eval: bool, key: &str, args: impl Fn(&mut Cmd)) -> Cmd {
        let s = &self.single;
        if eval {
            build("EVAL", s.source.as_bytes(), key, &args)
        } else {
            build("EVALSHA", s.sha.as_bytes(), key, &args)
        }
    }
}

/// Whether the server answered `NOSCRIPT`: the script did not run, so sending
/// it as `EVAL` cannot charge twice.
pub(crate) fn no_script(e: &redis::RedisError) -> bool {
    e.kind() == ErrorKind::Server(ServerErrorKind::NoScript)
}

fn build(verb: &str, body: &[u8], key: &str, args: &impl Fn(&mut Cmd)) -> Cmd {
    let mut cmd = redis::cmd(verb);
    script_call(&mut cmd, body, key, args);
    cmd
}

/// A script call's arguments after its verb, for either path: the script
/// (`body`: its SHA-1 or its source), one key, then the limit's (`args`).
fn script_call<A: Args>(out: &mut A, body: &[u8], key: &str, args: &impl Fn(&mut A)) {
    out.text(body);
    out.int(1);
    out.text(key.as_bytes());
    args(out);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_registry_covers_exactly_the_kinds_core_says_run_on_redis() {
        for kind in Kind::ALL {
            assert_eq!(for_kind(kind).is_some(), kind.caps().redis, "{kind}");
        }
    }
}
