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

/// The three scripts and their multi-cost forms, hashed once per limiter.
#[derive(Debug)]
pub(crate) struct Scripts {
    gcra: LuaScript,
    fixed: LuaScript,
    sliding: LuaScript,
    gcra_multi: LuaScript,
    fixed_multi: LuaScript,
    sliding_multi: LuaScript,
}

impl Scripts {
    pub(crate) fn new() -> Self {
        Self {
            gcra: LuaScript::new(GCRA_LUA.to_owned()),
            fixed: LuaScript::new(FIXED_WINDOW_LUA.to_owned()),
            sliding: LuaScript::new(SLIDING_WINDOW_LUA.to_owned()),
            gcra_multi: LuaScript::new(multi_source(GCRA_LUA)),
            fixed_multi: LuaScript::new(multi_source(FIXED_WINDOW_LUA)),
            sliding_multi: LuaScript::new(multi_source(SLIDING_WINDOW_LUA)),
        }
    }

    fn get(&self, kind: ScriptKind) -> &LuaScript {
        match kind {
            ScriptKind::Gcra => &self.gcra,
            ScriptKind::Fixed => &self.fixed,
            ScriptKind::Sliding => &self.sliding,
        }
    }

    fn get_multi(&self, kind: ScriptKind) -> &LuaScript {
        match kind {
            ScriptKind::Gcra => &self.gcra_multi,
            ScriptKind::Fixed => &self.fixed_multi,
            ScriptKind::Sliding => &self.sliding_multi,
        }
    }

    /// Runs the multi-cost form of script `kind` on `key` (see [`multi_source`]).
    pub(crate) async fn invoke_multi(
        &self,
        conn: &mut Conn,
        kind: ScriptKind,
        key: &str,
        args: impl Fn(&mut Cmd),
    ) -> RedisResult<Value> {
        Self::invoke_script(conn, self.get_multi(kind), key, args).await
    }

    /// Runs script `kind` on `key` with `args`.
    pub(crate) async fn invoke(
        &self,
        conn: &mut Conn,
        kind: ScriptKind,
        key: &str,
        args: impl Fn(&mut Cmd),
    ) -> RedisResult<Value> {
        Self::invoke_script(conn, self.get(kind), key, args).await
    }

    async fn invoke_script(
        conn: &mut Conn,
        s: &LuaScript,
        key: &str,
        args: impl Fn(&mut Cmd),
    ) -> RedisResult<Value> {
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
