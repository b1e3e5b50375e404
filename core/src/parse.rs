//! Rate strings: `"100/minute"`, `"10 per 2 hours"`, `"100/s burst 200"`, and
//! lists such as `"1/second; 100/hour"`.
//!
//! One parser for every front end (the C ABI's `sluicegate_config_parse`, the
//! Python package's string quotas), so a string means the same thing everywhere.
//! It needs no heap: it reads the string once and returns [`Quota`]s.
//!
//! # Grammar
//! ```text
//! list   = limit *( ";" limit )
//! limit  = amount ( "/" | "per" ) [ count ] unit [ "burst" burst ]
//! amount, count, burst = decimal digits, greater than zero
//! unit   = ns | nanosecond(s)             | us | µs | microsecond(s)
//!        | ms | millisecond(s)            | s | sec | secs | second(s)
//!        | m | min | mins | minute(s)     | h | hr | hrs | hour(s)
//!        | d | day(s)
//! ```
//! Whitespace (spaces and tabs) may stand between any two tokens; words are
//! case-insensitive; `"10/2h"` and `"10 per 2 hours"` are the same. `m` is the
//! minute. Months and years are rejected ([`ParseErrorKind::AmbiguousUnit`]):
//! their length varies (28–31 days, 365–366), so a limit "per month" would not say
//! how many requests a client may make in a given 30 days; write `"1000 per 30
//! days"` instead. Fractions (`"0.5/s"`) are rejected as well: write `"1 per 2
//! seconds"`.
//!
//! A list is checked all-or-nothing by the compound limiter; here it is just
//! several quotas, parsed left to right, each error pointing at the byte where the
//! whole string went wrong.
//!
//! ```
//! use sluicegate::parse::parse_quota;
//! use sluicegate::Quota;
//! assert_eq!(parse_quota("100/minute")?, Quota::per_minute(100));
//! assert_eq!(parse_quota("10 per 2 hours")?, Quota::from_nanos(10, 7_200_000_000_000));
//! assert_eq!(parse_quota("100/s burst 200")?, Quota::per_second(100).burst(200));
//! # Ok::<(), sluicegate::parse::ParseError>(())
//! ```

use core::fmt;
use core::str::FromStr;

use crate::quota::Quota;

/// Why a rate string was rejected, and where.
///
/// `position` is a byte offset into the string that was passed in (for a list,
/// into the whole list).
///
/// ```
/// use sluicegate::parse::{parse_quota, ParseError, ParseErrorKind};
/// let err = parse_quota("100/fortnight").unwrap_err();
/// assert_eq!(err, ParseError { position: 4, kind: ParseErrorKind::UnknownUnit });
/// assert_eq!(
///     err.to_string(),
///     "invalid rate at byte 4: unknown time unit; expected ns, us, ms, s, m, h or d (or a long form such as \"minute\")"
/// );
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ParseError {
    /// Byte offset of the first character that could not be accepted.
    pub position: usize,
    /// What was wrong there.
    pub kind: ParseErrorKind,
}

/// The kinds of [`ParseError`].
///
/// ```
/// use sluicegate::parse::ParseErrorKind;
/// assert!(ParseErrorKind::AmbiguousUnit.message().contains("days"));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ParseErrorKind {
    /// The string (or one `;`-separated part of it) is empty.
    Empty,
    /// Expected a whole decimal number (amount, count or burst).
    ExpectedNumber,
    /// A number with a fractional part; quotas are whole units per period.
    Fraction,
    /// A number was zero; amount, count and burst must be positive.
    Zero,
    /// A number does not fit in 64 bits.
    NumberTooLarge,
    /// Expected `/` or `per` after the amount.
    ExpectedSeparator,
    /// Expected a time unit.
    ExpectedUnit,
    /// A word that is not a time unit.
    UnknownUnit,
    /// `month` or `year`: a unit without a fixed length.
    AmbiguousUnit,
    /// `count × unit` is longer than `u64::MAX` nanoseconds (about 584 years).
    PeriodTooLong,
    /// Something follows a complete limit other than `burst N` or `;`.
    Trailing,
    /// More limits than the caller's buffer holds ([`parse_quotas_into`]).
    TooManyLimits,
}

impl ParseErrorKind {
    /// What went wrong, and what was expected instead.
    ///
    /// ```
    /// use sluicegate::parse::ParseErrorKind;
    /// assert_eq!(ParseErrorKind::ExpectedSeparator.message(), "expected \"/\" or \"per\" after the amount");
    /// ```
    pub const fn message(&self) -> &'static str {
        match self.message_cstr().to_str() {
            Ok(s) => s,
            Err(_) => "invalid rate string", // unreachable: every message is ASCII
        }
    }

    /// [`Self::message`] as a NUL-terminated C string with a static lifetime
    /// (what the C ABI hands out).
    ///
    /// ```
    /// use sluicegate::parse::ParseErrorKind;
    /// let k = ParseErrorKind::Zero;
    /// assert_eq!(k.message_cstr().to_str(), Ok(k.message()));
    /// ```
    pub const fn message_cstr(&self) -> &'static core::ffi::CStr {
        match self {
            Self::Empty => c"empty rate; expected a limit such as \"100/minute\"",
            Self::ExpectedNumber => c"expected a whole number",
            Self::Fraction => {
                c"fractions are not accepted; write a whole number per a longer period (\"1 per 2 seconds\")"
            }
            Self::Zero => c"expected a number greater than zero",
            Self::NumberTooLarge => c"number too large; the maximum is 18446744073709551615",
            Self::ExpectedSeparator => c"expected \"/\" or \"per\" after the amount",
            Self::ExpectedUnit => {
                c"expected a time unit: ns, us, ms, s, m, h or d (or a long form such as \"minute\")"
            }
            Self::UnknownUnit => {
                c"unknown time unit; expected ns, us, ms, s, m, h or d (or a long form such as \"minute\")"
            }
            Self::AmbiguousUnit => {
                c"months and years have no fixed length and are ambiguous; use days (\"1000 per 30 days\")"
            }
            Self::PeriodTooLong => c"period too long; the maximum is about 584 years",
            Self::Trailing => c"unexpected text; expected \"burst N\", \";\" or the end",
            Self::TooManyLimits => c"too many limits for the space provided",
        }
    }
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "invalid rate at byte {}: {}",
            self.position,
            self.kind.message()
        )
    }
}

#[cfg(feature = "std")]
impl std::error::Error for ParseError {}

/// Parses one limit, e.g. `"100/s"`, `"100 per minute"`, `"10 per 2 hours"`,
/// `"100/s burst 200"`. Without `burst` the burst equals the amount.
///
/// A string with a `;` (several limits) is rejected with
/// [`ParseErrorKind::Trailing`] at the `;`: use [`parse_quotas`].
///
/// ```
/// use sluicegate::parse::{parse_quota, ParseErrorKind};
/// use sluicegate::Quota;
/// assert_eq!(parse_quota(" 5 / Second ").unwrap(), Quota::per_second(5));
/// assert_eq!(parse_quota("3/250ms").unwrap(), Quota::from_nanos(3, 250_000_000));
/// assert_eq!(parse_quota("1/month").unwrap_err().kind, ParseErrorKind::AmbiguousUnit);
/// assert_eq!(parse_quota("1/s; 2/m").unwrap_err().position, 3);
/// ```
pub fn parse_quota(s: &str) -> Result<Quota, ParseError> {
    let mut p = Parser::new(s, 0);
    let q = p.limit()?;
    p.end()?;
    Ok(q)
}

/// The limits of a `;`-separated list, in order (see [`parse_quotas`]).
///
/// After the first error it yields nothing more.
///
/// ```
/// use sluicegate::parse::parse_quotas;
/// let mut it = parse_quotas("1/s; x");
/// assert!(it.next().unwrap().is_ok());
/// assert!(it.next().unwrap().is_err());
/// assert!(it.next().is_none());
/// ```
#[derive(Clone, Debug)]
pub struct Quotas<'a> {
    s: &'a str,
    pos: usize,
    done: bool,
}

impl Iterator for Quotas<'_> {
    type Item = Result<Quota, ParseError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        let mut p = Parser::new(self.s, self.pos);
        let item = p.limit().and_then(|q| {
            p.skip_ws();
            match p.peek() {
                None => {
                    self.done = true;
                    Ok(q)
                }
                Some(b';') => {
                    self.pos = p.pos + 1;
                    Ok(q)
                }
                Some(_) => Err(p.err(ParseErrorKind::Trailing)),
            }
        });
        if item.is_err() {
            self.done = true;
        }
        Some(item)
    }
}

/// Parses a list of limits separated by `;`, e.g. `"1/second; 100/hour"`.
///
/// Each item is a [`parse_quota`] limit; an empty item (`"1/s;;2/s"`, or a
/// trailing `;`) is an [`ParseErrorKind::Empty`] error. To take a list
/// all-or-nothing, collect into a `Result`, or use [`parse_quotas_into`] without
/// a heap.
///
/// ```
/// use sluicegate::parse::parse_quotas;
/// use sluicegate::Quota;
/// let all: Result<Vec<Quota>, _> = parse_quotas("1/second; 100/hour").collect();
/// assert_eq!(all.unwrap(), [Quota::per_second(1), Quota::per_hour(100)]);
/// assert!(parse_quotas("1/s;").collect::<Result<Vec<_>, _>>().is_err());
/// ```
pub fn parse_quotas(s: &str) -> Quotas<'_> {
    Quotas {
        s,
        pos: 0,
        done: false,
    }
}

/// Parses a `;`-separated list into `out`, all-or-nothing: returns how many
/// limits were written, or the first error (then the contents of `out` are
/// unspecified). More limits than `out.len()` is a
/// [`ParseErrorKind::TooManyLimits`] error at the first one that does not fit.
///
/// ```
/// use sluicegate::parse::{parse_quotas_into, ParseErrorKind};
/// use sluicegate::Quota;
/// let mut buf = [Quota::per_second(1); 2];
/// assert_eq!(parse_quotas_into("10/s; 500/h", &mut buf), Ok(2));
/// assert_eq!(buf, [Quota::per_second(10), Quota::per_hour(500)]);
/// let err = parse_quotas_into("1/s; 2/m; 3/h", &mut buf).unwrap_err();
/// assert_eq!((err.kind, err.position), (ParseErrorKind::TooManyLimits, 10));
/// ```
pub fn parse_quotas_into(s: &str, out: &mut [Quota]) -> Result<usize, ParseError> {
    let mut it = parse_quotas(s);
    let mut n = 0;
    loop {
        let start = it.pos;
        let Some(item) = it.next() else {
            return Ok(n);
        };
        let q = item?;
        match out.get_mut(n) {
            Some(slot) => *slot = q,
            None => {
                let skipped = s[start..].len() - s[start..].trim_start_matches([' ', '\t']).len();
                return Err(ParseError {
                    position: start + skipped,
                    kind: ParseErrorKind::TooManyLimits,
                });
            }
        }
        n += 1;
    }
}

/// `"100/minute".parse::<Quota>()`: the same as [`parse_quota`].
///
/// ```
/// use sluicegate::Quota;
/// let q: Quota = "100/s burst 200".parse().unwrap();
/// assert_eq!(q, Quota::per_second(100).burst(200));
/// assert!("100/year".parse::<Quota>().is_err());
/// ```
impl FromStr for Quota {
    type Err = ParseError;
    fn from_str(s: &str) -> Result<Self, ParseError> {
        parse_quota(s)
    }
}

const NS: u64 = 1;
const US: u64 = 1_000;
const MS: u64 = 1_000_000;
const SEC: u64 = 1_000_000_000;
const MIN: u64 = 60 * SEC;
const HOUR: u64 = 60 * MIN;
const DAY: u64 = 24 * HOUR;

/// Nanoseconds per unit for every accepted spelling (compared ignoring ASCII case).
const UNITS: &[(&str, u64)] = &[
    ("ns", NS),
    ("nanosecond", NS),
    ("nanoseconds", NS),
    ("us", US),
    ("µs", US), // U+00B5 MICRO SIGN
    ("μs", US), // U+03BC GREEK SMALL LETTER MU
    ("microsecond", US),
    ("microseconds", US),
    ("ms", MS),
    ("millisecond", MS),
    ("milliseconds", MS),
    ("s", SEC),
    ("sec", SEC),
    ("secs", SEC),
    ("second", SEC),
    ("seconds", SEC),
    ("m", MIN),
    ("min", MIN),
    ("mins", MIN),
    ("minute", MIN),
    ("minutes", MIN),
    ("h", HOUR),
    ("hr", HOUR),
    ("hrs", HOUR),
    ("hour", HOUR),
    ("hours", HOUR),
    ("d", DAY),
    ("day", DAY),
    ("days", DAY),
];

/// Spellings rejected as ambiguous rather than unknown.
const AMBIGUOUS: &[&str] = &[
    "mo", "mon", "month", "months", "y", "yr", "yrs", "year", "years",
];

struct Parser<'a> {
    b: &'a [u8],
    s: &'a str,
    pos: usize,
}

impl<'a> Parser<'a> {
    fn new(s: &'a str, pos: usize) -> Self {
        Self {
            b: s.as_bytes(),
            s,
            pos,
        }
    }

    fn err(&self, kind: ParseErrorKind) -> ParseError {
        ParseError {
            position: self.pos,
            kind,
        }
    }

    fn peek(&self) -> Option<u8> {
        self.b.get(self.pos).copied()
    }

    fn skip_ws(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t')) {
            self.pos += 1;
        }
    }

    /// At the end of one limit in a single-limit parse.
    fn end(&mut self) -> Result<(), ParseError> {
        self.skip_ws();
        match self.peek() {
            None => Ok(()),
            Some(_) => Err(self.err(ParseErrorKind::Trailing)),
        }
    }

    fn at_end_of_item(&self) -> bool {
        matches!(self.peek(), None | Some(b';'))
    }

    /// A positive decimal integer.
    fn number(&mut self) -> Result<u64, ParseError> {
        self.skip_ws();
        let start = self.pos;
        let mut v: u64 = 0;
        let mut overflow = false;
        while let Some(c @ b'0'..=b'9') = self.peek() {
            match v
                .checked_mul(10)
                .and_then(|v| v.checked_add(u64::from(c - b'0')))
            {
                Some(n) => v = n,
                None => overflow = true,
            }
            self.pos += 1;
        }
        if self.pos == start {
            return Err(self.err(ParseErrorKind::ExpectedNumber));
        }
        if self.peek() == Some(b'.') && self.b.get(self.pos + 1).is_some_and(u8::is_ascii_digit) {
            return Err(ParseError {
                position: start,
                kind: ParseErrorKind::Fraction,
            });
        }
        if overflow {
            return Err(ParseError {
                position: start,
                kind: ParseErrorKind::NumberTooLarge,
            });
        }
        if v == 0 {
            return Err(ParseError {
                position: start,
                kind: ParseErrorKind::Zero,
            });
        }
        Ok(v)
    }

    /// A run of letters (including `µ`), returned with its start.
    fn word(&mut self) -> (usize, &'a str) {
        self.skip_ws();
        let start = self.pos;
        while let Some(c) = self.s[self.pos..].chars().next() {
            if c.is_ascii_alphabetic() || c == 'µ' || c == 'μ' {
                self.pos += c.len_utf8();
            } else {
                break;
            }
        }
        (start, &self.s[start..self.pos])
    }

    fn limit(&mut self) -> Result<Quota, ParseError> {
        self.skip_ws();
        if self.at_end_of_item() {
            return Err(self.err(ParseErrorKind::Empty));
        }
        let amount = self.number()?;
        self.skip_ws();
        if self.peek() == Some(b'/') {
            self.pos += 1;
        } else {
            let before = self.pos;
            let (_, w) = self.word();
            if !w.eq_ignore_ascii_case("per") {
                self.pos = before;
                return Err(self.err(ParseErrorKind::ExpectedSeparator));
            }
        }
        self.skip_ws();
        let count_at = self.pos;
        let count = if matches!(self.peek(), Some(b'0'..=b'9')) {
            self.number()?
        } else {
            1
        };
        let (unit_at, w) = self.word();
        let unit = if w.is_empty() {
            self.pos = unit_at;
            return Err(self.err(ParseErrorKind::ExpectedUnit));
        } else if let Some(&(_, ns)) = UNITS.iter().find(|(u, _)| u.eq_ignore_ascii_case(w)) {
            ns
        } else {
            let kind = if AMBIGUOUS.iter().any(|u| u.eq_ignore_ascii_case(w)) {
                ParseErrorKind::AmbiguousUnit
            } else {
                ParseErrorKind::UnknownUnit
            };
            return Err(ParseError {
                position: unit_at,
                kind,
            });
        };
        let period_ns = count.checked_mul(unit).ok_or(ParseError {
            position: count_at,
            kind: ParseErrorKind::PeriodTooLong,
        })?;
        let mut quota = Quota::from_nanos(amount, period_ns);
        self.skip_ws();
        if !self.at_end_of_item() {
            let before = self.pos;
            let (_, w) = self.word();
            if !w.eq_ignore_ascii_case("burst") {
                self.pos = before;
                return Err(self.err(ParseErrorKind::Trailing));
            }
            quota = quota.burst(self.number()?);
        }
        Ok(quota)
    }
}
