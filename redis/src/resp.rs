//! The wire format (RESP2) as the blocking API's own connections speak it
//! ([`crate::direct`]): a command written straight into a reused buffer, and a
//! reply read into redis-rs's [`Value`], the type the async path's replies are,
//! so that everything after (error extraction and classification, [`crate::Reply`]
//! parsing) is the same code. An error reply is handed to redis-rs's own parser,
//! so its [`redis::RedisError`] (kind, code, message) is exactly redis-rs's.
//!
//! Why not redis-rs's synchronous connection: it builds each command through
//! `Cmd` (allocations, formatting) and parses each reply with a general parser
//! combinator, together about 3 µs of CPU per call on this project's VM, a
//! fifth of a loopback round trip plus the script. This is what a caller's
//! thread does instead: one buffer written, one frame read, no allocation but
//! the reply's.

use redis::{ErrorKind, RedisError, RedisResult, Value};

/// Where a command's arguments go: a redis-rs [`redis::Cmd`] (the async path)
/// or an [`Encoder`] (the blocking API's own connections). The limit's
/// arguments are written once, for both ([`crate::Limit`]'s `push_args`).
pub(crate) trait Args {
    /// An integer argument.
    fn int(&mut self, v: u64);
    /// A string argument.
    fn text(&mut self, v: &[u8]);
}

impl Args for redis::Cmd {
    fn int(&mut self, v: u64) {
        self.arg(v);
    }
    fn text(&mut self, v: &[u8]) {
        self.arg(v);
    }
}

/// A command being written: its arguments as RESP bulk strings after
/// [`HEADROOM`] bytes, counted; the array header goes into the headroom when
/// it is sent ([`Encoder::packed`]), so the command is never copied.
#[derive(Debug)]
pub(crate) struct Encoder {
    buf: Vec<u8>,
    count: usize,
}

/// Room for the array header (`*<count>\r\n`) in front of the arguments.
const HEADROOM: usize = 24;

impl Default for Encoder {
    fn default() -> Self {
        let mut buf = Vec::with_capacity(256);
        buf.resize(HEADROOM, 0);
        Self { buf, count: 0 }
    }
}

impl Args for Encoder {
    fn int(&mut self, v: u64) {
        let mut digits = [0u8; 20];
        self.text(decimal(v, &mut digits));
    }

    fn text(&mut self, v: &[u8]) {
        let mut digits = [0u8; 20];
        self.buf.push(b'$');
        self.buf
            .extend_from_slice(decimal(v.len() as u64, &mut digits));
        self.buf.extend_from_slice(b"\r\n");
        self.buf.extend_from_slice(v);
        self.buf.extend_from_slice(b"\r\n");
        self.count += 1;
    }
}

impl Encoder {
    /// Starts a new command (the buffer is kept).
    pub(crate) fn clear(&mut self) {
        self.buf.truncate(HEADROOM);
        self.count = 0;
    }

    /// The command as it goes on the wire: `*<count>\r\n`, then the arguments.
    pub(crate) fn packed(&mut self) -> &[u8] {
        let mut digits = [0u8; 20];
        let count = decimal(self.count as u64, &mut digits);
        // At most 20 digits: the header fits the headroom.
        let start = HEADROOM - count.len() - 3;
        self.buf[start] = b'*';
        self.buf[start + 1..HEADROOM - 2].copy_from_slice(count);
        self.buf[HEADROOM - 2..HEADROOM].copy_from_slice(b"\r\n");
        &self.buf[start..]
    }
}

/// `v` in decimal, in the tail of `buf`.
fn decimal(mut v: u64, buf: &mut [u8; 20]) -> &[u8] {
    let mut at = buf.len();
    loop {
        at -= 1;
        buf[at] = b'0' + (v % 10) as u8;
        v /= 10;
        if v == 0 {
            break;
        }
    }
    &buf[at..]
}

/// Nesting past this is not a reply of this crate's commands.
const MAX_DEPTH: usize = 8;

fn protocol(detail: impl Into<String>) -> RedisError {
    RedisError::from((ErrorKind::Parse, "invalid reply", detail.into()))
}

/// The first reply in `buf` and the bytes it took, or `None` if `buf` holds
/// only part of one. An error reply is a [`Value::ServerError`], as redis-rs
/// reads it.
pub(crate) fn parse(buf: &[u8]) -> RedisResult<Option<(Value, usize)>> {
    parse_at(buf, 0, 0)
}

/// The line starting at `at` (without its CRLF) and where the next begins;
/// `None` while its end has not arrived.
fn line(buf: &[u8], at: usize) -> RedisResult<Option<(&[u8], usize)>> {
    let Some(rest) = buf.get(at..) else {
        return Ok(None);
    };
    let Some(lf) = rest.iter().position(|&b| b == b'\n') else {
        return Ok(None);
    };
    let line = rest[..lf]
        .strip_suffix(b"\r")
        .ok_or_else(|| protocol("a line not ended by CRLF"))?;
    Ok(Some((line, at + lf + 1)))
}

/// A line's integer: an optional `-` and 1 to 18 digits (what a reply of
/// this crate's commands holds; anything else is not parsed here).
fn integer(line: &[u8]) -> RedisResult<i64> {
    let (negative, digits) = match line.split_first() {
        Some((b'-', rest)) => (true, rest),
        _ => (false, line),
    };
    if digits.is_empty() || digits.len() > 18 || !digits.iter().all(u8::is_ascii_digit) {
        return Err(protocol(format!(
            "not an integer: {:?}",
            String::from_utf8_lossy(line)
        )));
    }
    let v = digits
        .iter()
        .fold(0i64, |v, &d| v * 10 + i64::from(d - b'0'));
    Ok(if negative { -v } else { v })
}

fn parse_at(buf: &[u8], at: usize, depth: usize) -> RedisResult<Option<(Value, usize)>> {
    let Some(&kind) = buf.get(at) else {
        return Ok(None);
    };
    let Some((text, next)) = line(buf, at + 1)? else {
        return Ok(None);
    };
    let value = match kind {
        b'+' if text == b"OK" => Value::Okay,
        b'+' => Value::SimpleString(
            String::from_utf8(text.to_vec()).map_err(|_| protocol("a status that is not UTF-8"))?,
        ),
        // redis-rs's own parser makes the error (its kind and code are its).
        b'-' => redis::parse_redis_value(&buf[at..next])?,
        b':' => Value::Int(integer(text)?),
        b'$' => match integer(text)? {
            n if n < 0 => Value::Nil,
            n => {
                let len = usize::try_from(n).map_err(|_| protocol("a bulk length"))?;
                let end = next + len;
                if buf.len() < end + 2 {
                    return Ok(None);
                }
                if &buf[end..end + 2] != b"\r\n" {
                    return Err(protocol("a bulk string not ended by CRLF"));
                }
                return Ok(Some((Value::BulkString(buf[next..end].to_vec()), end + 2)));
            }
        },
        b'*' => match integer(text)? {
            n if n < 0 => Value::Nil,
            n => {
                if depth >= MAX_DEPTH {
                    return Err(protocol("arrays nested too deep"));
                }
                let n = usize::try_from(n).map_err(|_| protocol("an array length"))?;
                // Each item takes at least 3 bytes: no allocation past what the
                // buffer can hold.
                let mut items = Vec::with_capacity(n.min((buf.len() - next) / 3 + 1));
                let mut at = next;
                for _ in 0..n {
                    // An integer (every item of a script's reply) read here,
                    // without a call that returns a whole `Value` by value.
                    if buf.get(at) == Some(&b':') {
                        let Some((text, after)) = line(buf, at + 1)? else {
                            return Ok(None);
                        };
                        items.push(Value::Int(integer(text)?));
                        at = after;
                        continue;
                    }
                    let Some((item, after)) = parse_at(buf, at, depth + 1)? else {
                        return Ok(None);
                    };
                    items.push(item);
                    at = after;
                }
                return Ok(Some((Value::Array(items), at)));
            }
        },
        other => {
            return Err(protocol(format!(
                "a reply of unknown type {:?}",
                char::from(other)
            )))
        }
    };
    Ok(Some((value, next)))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every reply shape the crate's commands get, read as redis-rs reads it,
    /// whole and cut anywhere (a partial reply is `None`, never an error).
    #[test]
    fn replies_read_as_redis_rs_reads_them() {
        let replies: [&[u8]; 13] = [
            b"+OK\r\n",
            b"+PONG\r\n",
            b":0\r\n",
            b":-42\r\n",
            b"$5\r\nhello\r\n",
            b"$0\r\n\r\n",
            b"$-1\r\n",
            b"*-1\r\n",
            b"*0\r\n",
            b"*8\r\n:1\r\n:999999\r\n:0\r\n:1\r\n:1000000\r\n:1760000000123456\r\n:0\r\n:1\r\n",
            b"*2\r\n*2\r\n:1\r\n$1\r\na\r\n*1\r\n+x\r\n",
            b"-NOSCRIPT No matching script. Please use EVAL.\r\n",
            b"-WRONGTYPE Operation against a key holding the wrong kind of value\r\n",
        ];
        for r in replies {
            let want = redis::parse_redis_value(r).unwrap();
            let (got, used) = parse(r).unwrap().unwrap();
            assert_eq!(used, r.len(), "{r:?}");
            assert_eq!(got, want, "{r:?}");
            assert_eq!(
                format!("{:?}", got.extract_error()),
                format!("{:?}", want.extract_error()),
            );
            for cut in 0..r.len() {
                assert!(parse(&r[..cut]).unwrap().is_none(), "{r:?} cut at {cut}");
            }
        }
        // Two replies back to back: the first, and where it ends.
        let (v, used) = parse(b":1\r\n:2\r\n").unwrap().unwrap();
        assert_eq!((v, used), (Value::Int(1), 4));
        for bad in [
            &b"?x\r\n"[..],
            b":x\r\n",
            b"$2\r\nabcd\r\n",
            b"$x\r\n",
            b":1\n",
        ] {
            let e = parse(bad).unwrap_err();
            assert_eq!(e.kind(), ErrorKind::Parse, "{bad:?}");
        }
        assert_eq!(
            parse(b":-999999999999999999\r\n").unwrap().unwrap().0,
            Value::Int(-999_999_999_999_999_999)
        );
        let deep = "*1\r\n".repeat(MAX_DEPTH + 1) + ":1\r\n";
        assert!(parse(deep.as_bytes()).is_err());
    }

    #[test]
    fn commands_encode_as_redis_rs_packs_them() {
        let mut e = Encoder::default();
        for round in 0..2 {
            e.clear();
            e.text(b"EVALSHA");
            e.text(b"0123456789abcdef");
            e.int(1);
            e.text("sluicegate:x:token_bucket:{k é}".as_bytes());
            for v in [0, 9, 10, 1_000_000, u64::MAX] {
                e.int(v);
            }
            e.text(b"");
            let mut cmd = redis::cmd("EVALSHA");
            cmd.arg("0123456789abcdef")
                .arg(1)
                .arg("sluicegate:x:token_bucket:{k é}");
            for v in [0u64, 9, 10, 1_000_000, u64::MAX] {
                cmd.arg(v);
            }
            cmd.arg("");
            assert_eq!(e.packed(), cmd.get_packed_command().as_slice(), "{round}");
        }
        // A command of more than 9 arguments: a two-digit count.
        e.clear();
        let mut cmd = redis::cmd("X");
        e.text(b"X");
        for i in 0..120u64 {
            e.int(i);
            cmd.arg(i);
        }
        assert_eq!(e.packed(), cmd.get_packed_command().as_slice());
    }
}
