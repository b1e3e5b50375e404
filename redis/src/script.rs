//! The Lua sources and their invocation: `EVALSHA`, and `EVAL` only when the server
//! answers `NOSCRIPT` (its script cache was flushed, or it restarted or failed over).
//! `NOSCRIPT` means the script did not run, so sending it again cannot double-count;
//! any other error, and a timeout above all, is returned as it is and never replayed.

use redis::{Cmd, ErrorKind, RedisResult, ServerErrorKind, Value};

use crate::conn::Conn;
use crate::limit::ScriptKind;

/// The GCRA script: token bucket, leaky bucket meter, shaper reservation and lease.
pub const GCRA_LUA: &str = include_str!("../lua/gcra.lua");
/// The fixed-window script.
pub const FIXED_WINDOW_LUA: &str = include_str!("../lua/fixed_window.lua");
/// The sliding-window-counter script.
pub const SLIDING_WINDOW_LUA: &str = include_str!("../lua/sliding_window.lua");

/// A script's source and SHA-1.
#[derive(Debug)]
pub(crate) struct LuaScript {
    source: &'static str,
    sha: String,
}

impl LuaScript {
    fn new(source: &'static str) -> Self {
        Self {
            source,
            // redis-rs computes the SHA-1 that `SCRIPT LOAD` would return.
            sha: redis::Script::new(source).get_hash().to_owned(),
        }
    }
}

/// The three scripts, hashed once per limiter.
#[derive(Debug)]
pub(crate) struct Scripts {
    gcra: LuaScript,
    fixed: LuaScript,
    sliding: LuaScript,
}

impl Scripts {
    pub(crate) fn new() -> Self {
        Self {
            gcra: LuaScript::new(GCRA_LUA),
            fixed: LuaScript::new(FIXED_WINDOW_LUA),
            sliding: LuaScript::new(SLIDING_WINDOW_LUA),
        }
    }

    fn get(&self, kind: ScriptKind) -> &LuaScript {
        match kind {
            ScriptKind::Gcra => &self.gcra,
            ScriptKind::Fixed => &self.fixed,
            ScriptKind::Sliding => &self.sliding,
        }
    }

    /// Runs script `kind` on `key` with `args`.
    pub(crate) async fn invoke(
        &self,
        conn: &mut Conn,
        kind: ScriptKind,
        key: &str,
        args: impl Fn(&mut Cmd),
    ) -> RedisResult<Value> {
        let s = self.get(kind);
        let sha = build("EVALSHA", s.sha.as_bytes(), key, &args);
        match conn.query(&sha).await {
            Err(e) if e.kind() == ErrorKind::Server(ServerErrorKind::NoScript) => {
                // EVAL also caches the script, so the next call is an EVALSHA again.
                let eval = build("EVAL", s.source.as_bytes(), key, &args);
                conn.query(&eval).await
            }
            other => other,
        }
    }
}

impl Scripts {
    /// The command for script `kind`: `EVALSHA`, or `EVAL` with the source.
    pub(crate) fn command(
        &self,
        kind: ScriptKind,
        eval: bool,
        key: &str,
        args: impl Fn(&mut Cmd),
    ) -> Cmd {
        let s = self.get(kind);
        if eval {
            build("EVAL", s.source.as_bytes(), key, &args)
        } else {
            build("EVALSHA", s.sha.as_bytes(), key, &args)
        }
    }
}

fn build(verb: &str, body: &[u8], key: &str, args: &impl Fn(&mut Cmd)) -> Cmd {
    let mut cmd = redis::cmd(verb);
    cmd.arg(body).arg(1).arg(key);
    args(&mut cmd);
    cmd
}
