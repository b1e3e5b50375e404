//! Log timestamps to nanoseconds since the Unix epoch (UTC).
//!
//! Three shapes are read, each without allocating:
//! - the common log format's `10/Oct/2000:13:55:36 -0700` (nginx `$time_local`,
//!   Apache `%t` without the brackets);
//! - RFC 3339 / ISO 8601 `2000-10-10T13:55:36-07:00` with an optional fraction and
//!   `Z` (nginx `$time_iso8601`);
//! - seconds since the epoch with an optional fraction, `971211336.123` (nginx
//!   `$msec`).
//!
//! A timestamp before 1970 is an error: the limiters' time is an unsigned count
//! of nanoseconds.

const NS: u64 = 1_000_000_000;

/// Parses any of the three shapes above, chosen by its look.
///
/// ```
/// use sluicegate_cli::time::parse_any;
/// let t = 971_211_336 * 1_000_000_000;
/// assert_eq!(parse_any("10/Oct/2000:13:55:36 -0700"), Some(t));
/// assert_eq!(parse_any("2000-10-10T13:55:36-07:00"), Some(t));
/// assert_eq!(parse_any("971211336.5"), Some(t + 500_000_000));
/// assert_eq!(parse_any("yesterday"), None);
/// ```
pub fn parse_any(s: &str) -> Option<u64> {
    let b = s.as_bytes();
    if b.len() > 2 && b[2] == b'/' {
        parse_clf(s)
    } else if b.len() > 4 && b[4] == b'-' {
        parse_rfc3339(s)
    } else {
        parse_epoch(s)
    }
}

/// `dd/Mon/yyyy:HH:MM:SS ±hhmm` (exactly 26 bytes).
///
/// ```
/// use sluicegate_cli::time::parse_clf;
/// assert_eq!(parse_clf("01/Jan/1970:00:00:01 +0000"), Some(1_000_000_000));
/// assert_eq!(parse_clf("01/Jan/1970:01:00:00 +0100"), Some(0));
/// assert_eq!(parse_clf("31/Foo/2000:00:00:00 +0000"), None);
/// ```
pub fn parse_clf(s: &str) -> Option<u64> {
    let b = s.as_bytes();
    if b.len() != 26 || b[2] != b'/' || b[6] != b'/' || b[11] != b':' || b[20] != b' ' {
        return None;
    }
    let day = num(&b[0..2])?;
    let month = month(&b[3..6])?;
    let year = num(&b[7..11])?;
    let secs = hms(&b[12..20])?;
    let offset = zone(&b[21..26])?;
    civil(year, month, day, secs, offset, 0)
}

/// `yyyy-mm-ddTHH:MM:SS[.fraction](Z|±hh:mm|±hhmm)`; a space may stand for `T`.
///
/// ```
/// use sluicegate_cli::time::parse_rfc3339;
/// assert_eq!(parse_rfc3339("1970-01-01T00:00:01.25Z"), Some(1_250_000_000));
/// assert_eq!(parse_rfc3339("1970-01-01 01:00:00+01:00"), Some(0));
/// assert_eq!(parse_rfc3339("1970-01-01T00:00:00"), None); // no zone: ambiguous
/// ```
pub fn parse_rfc3339(s: &str) -> Option<u64> {
    let b = s.as_bytes();
    if b.len() < 20 || b[4] != b'-' || b[7] != b'-' || !matches!(b[10], b'T' | b't' | b' ') {
        return None;
    }
    let year = num(&b[0..4])?;
    let month = num(&b[5..7])?;
    let day = num(&b[8..10])?;
    let secs = hms(&b[11..19])?;
    let mut rest = &b[19..];
    let mut frac = 0;
    if let Some((b'.', digits)) = rest.split_first() {
        let n = digits.iter().take_while(|c| c.is_ascii_digit()).count();
        frac = fraction(&digits[..n])?;
        rest = &digits[n..];
    }
    let offset = match rest {
        [b'Z' | b'z'] => 0,
        [sign, h1, h2, b':', m1, m2] | [sign, h1, h2, m1, m2] => {
            zone(&[*sign, *h1, *h2, *m1, *m2])?
        }
        _ => return None,
    };
    civil(year, month, day, secs, offset, frac)
}

/// Seconds since the epoch with an optional fraction (`1700000000.123`).
///
/// ```
/// use sluicegate_cli::time::parse_epoch;
/// assert_eq!(parse_epoch("2.000000001"), Some(2_000_000_001));
/// assert_eq!(parse_epoch("-1"), None);
/// ```
pub fn parse_epoch(s: &str) -> Option<u64> {
    let (whole, frac) = match s.split_once('.') {
        Some((w, f)) => (w, f),
        None => (s, ""),
    };
    if whole.is_empty() || whole.len() > 11 {
        return None;
    }
    let secs = num(whole.as_bytes())?;
    let frac = if frac.is_empty() {
        0
    } else {
        fraction(frac.as_bytes())?
    };
    secs.checked_mul(NS)?.checked_add(frac)
}

/// The fraction digits as nanoseconds (digits past the ninth are dropped).
fn fraction(d: &[u8]) -> Option<u64> {
    if d.is_empty() || !d.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let mut v = 0;
    for i in 0..9 {
        v = v * 10 + d.get(i).map_or(0, |c| u64::from(c - b'0'));
    }
    Some(v)
}

fn num(d: &[u8]) -> Option<u64> {
    if d.is_empty() {
        return None;
    }
    d.iter().try_fold(0u64, |acc, &c| {
        c.is_ascii_digit().then(|| acc * 10 + u64::from(c - b'0'))
    })
}

fn hms(b: &[u8]) -> Option<u64> {
    if b[2] != b':' || b[5] != b':' {
        return None;
    }
    let (h, m, s) = (num(&b[0..2])?, num(&b[3..5])?, num(&b[6..8])?);
    // 60 is a leap second, read as the next second's start.
    (h < 24 && m < 60 && s <= 60).then_some(h * 3600 + m * 60 + s)
}

/// `±hhmm` as signed seconds east of UTC.
fn zone(b: &[u8]) -> Option<i64> {
    let sign = match b[0] {
        b'+' => 1,
        b'-' => -1,
        _ => return None,
    };
    let (h, m) = (num(&b[1..3])?, num(&b[3..5])?);
    (h < 24 && m < 60).then_some(sign * (h * 3600 + m * 60) as i64)
}

fn month(b: &[u8]) -> Option<u64> {
    const NAMES: [&[u8; 3]; 12] = [
        b"Jan", b"Feb", b"Mar", b"Apr", b"May", b"Jun", b"Jul", b"Aug", b"Sep", b"Oct", b"Nov",
        b"Dec",
    ];
    NAMES.iter().position(|m| m[..] == *b).map(|i| i as u64 + 1)
}

/// Nanoseconds since the epoch of a civil date and time at a UTC offset.
fn civil(year: u64, month: u64, day: u64, secs: u64, offset: i64, frac: u64) -> Option<u64> {
    if !(1..=12).contains(&month) || day == 0 || day > days_in_month(year, month) {
        return None;
    }
    let days = days_from_civil(year as i64, month as i64, day as i64);
    let t = days * 86_400 + secs as i64 - offset;
    u64::try_from(t).ok()?.checked_mul(NS)?.checked_add(frac)
}

fn days_in_month(year: u64, month: u64) -> u64 {
    match month {
        2 if year % 4 == 0 && (year % 100 != 0 || year % 400 == 0) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's
/// `days_from_civil`).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// Formats nanoseconds since the epoch as `yyyy-mm-ddTHH:MM:SSZ` (for reports).
///
/// ```
/// use sluicegate_cli::time::format_utc;
/// assert_eq!(format_utc(971_190_936_000_000_000), "2000-10-10T15:15:36Z");
/// ```
pub fn format_utc(ns: u64) -> String {
    let (y, m, d, h, min, s) = civil_from_ns(ns);
    format!("{y:04}-{m:02}-{d:02}T{h:02}:{min:02}:{s:02}Z")
}

/// Formats nanoseconds since the epoch in the common log format, in UTC
/// (`10/Oct/2000:20:55:36 +0000`).
///
/// ```
/// use sluicegate_cli::time::{format_clf, parse_clf};
/// assert_eq!(format_clf(971_211_336_000_000_000), "10/Oct/2000:20:55:36 +0000");
/// assert_eq!(parse_clf(&format_clf(5_000_000_000)), Some(5_000_000_000));
/// ```
pub fn format_clf(ns: u64) -> String {
    const NAMES: [&str; 12] = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    let (y, m, d, h, min, s) = civil_from_ns(ns);
    let name = NAMES[(m as usize).clamp(1, 12) - 1];
    format!("{d:02}/{name}/{y:04}:{h:02}:{min:02}:{s:02} +0000")
}

/// (year, month, day, hour, minute, second) in UTC (inverse of `days_from_civil`).
fn civil_from_ns(ns: u64) -> (i64, i64, i64, i64, i64, i64) {
    let secs = (ns / NS) as i64;
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d, rem / 3600, rem / 60 % 60, rem % 60)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_over_many_days() {
        for day in (0..80_000u64).step_by(37) {
            let ns = (day * 86_400 + 3_723) * NS;
            let s = format_utc(ns);
            assert_eq!(parse_rfc3339(&s), Some(ns), "{s}");
        }
    }

    #[test]
    fn rejects_impossible_dates() {
        assert_eq!(parse_clf("29/Feb/2001:00:00:00 +0000"), None);
        assert!(parse_clf("29/Feb/2000:00:00:00 +0000").is_some());
        assert_eq!(parse_clf("10/Oct/2000:24:00:00 +0000"), None);
        assert_eq!(parse_clf("10/Oct/2000:13:55:36 0000"), None);
        assert_eq!(parse_rfc3339("2000-13-01T00:00:00Z"), None);
        assert_eq!(parse_rfc3339("1969-12-31T23:59:59Z"), None);
        assert_eq!(parse_epoch("12a"), None);
        assert_eq!(parse_epoch(""), None);
    }
}
