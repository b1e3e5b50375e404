//! The rate-string parser: every spelling, every error with its position, and
//! properties over generated strings (round trips, never a panic).

use proptest::prelude::*;
use sluicegate::Quota;
use sluicegate::parse::{ParseError, ParseErrorKind, parse_quota, parse_quotas, parse_quotas_into};

const SEC: u64 = 1_000_000_000;

fn err(s: &str) -> (ParseErrorKind, usize) {
    let e = parse_quota(s).unwrap_err();
    (e.kind, e.position)
}

/// Every spelling of every unit, by the unit's length in nanoseconds.
const UNITS: &[(u64, &[&str])] = &[
    (1, &["ns", "nanosecond", "nanoseconds"]),
    (1_000, &["us", "µs", "μs", "microsecond", "microseconds"]),
    (1_000_000, &["ms", "millisecond", "milliseconds"]),
    (SEC, &["s", "sec", "secs", "second", "seconds"]),
    (60 * SEC, &["m", "min", "mins", "minute", "minutes"]),
    (3_600 * SEC, &["h", "hr", "hrs", "hour", "hours"]),
    (86_400 * SEC, &["d", "day", "days"]),
];

/// Each spelling with its unit's length.
fn spellings() -> impl Iterator<Item = (&'static str, u64)> {
    UNITS
        .iter()
        .flat_map(|&(ns, names)| names.iter().map(move |&name| (name, ns)))
}

#[test]
fn every_unit_spelling() {
    for (unit, ns) in spellings() {
        for s in [
            format!("7/{unit}"),
            format!("7 per {unit}"),
            format!("7 / 1 {}", unit.to_ascii_uppercase()),
            format!("\t7 PER 1{unit}\t"),
        ] {
            assert_eq!(parse_quota(&s), Ok(Quota::from_nanos(7, ns)), "{s:?}");
        }
        let s = format!("7 per 3 {unit} burst 9");
        assert_eq!(
            parse_quota(&s),
            Ok(Quota::from_nanos(7, 3 * ns).burst(9)),
            "{s:?}"
        );
    }
}

#[test]
fn the_documented_examples() {
    assert_eq!(parse_quota("100/s"), Ok(Quota::per_second(100)));
    assert_eq!(parse_quota("100/minute"), Ok(Quota::per_minute(100)));
    assert_eq!(
        parse_quota("10 per 2 hours"),
        Ok(Quota::from_nanos(10, 7_200 * SEC))
    );
    assert_eq!(
        parse_quota("100/s burst 200"),
        Ok(Quota::per_second(100).burst(200))
    );
    assert_eq!(
        parse_quota("100/s BURST 20"),
        Ok(Quota::per_second(100).burst(20))
    );
    assert_eq!(parse_quota("10/2h"), Ok(Quota::from_nanos(10, 7_200 * SEC)));
    assert_eq!("5/d".parse::<Quota>(), Ok(Quota::per_day(5)));
    let list: Vec<_> = parse_quotas("1/second; 100/hour").collect();
    assert_eq!(list, [Ok(Quota::per_second(1)), Ok(Quota::per_hour(100))]);
}

#[test]
fn months_and_years_are_ambiguous() {
    for unit in [
        "month", "months", "Month", "mo", "year", "years", "YEAR", "y", "yr",
    ] {
        let s = format!("1000/{unit}");
        assert_eq!(err(&s), (ParseErrorKind::AmbiguousUnit, 5), "{s:?}");
    }
    let e = parse_quota("1 per month").unwrap_err();
    assert!(e.to_string().contains("ambiguous"), "{e}");
    assert!(e.to_string().contains("byte 6"), "{e}");
}

#[test]
fn every_error_has_its_kind_and_position() {
    use ParseErrorKind::*;
    let cases: &[(&str, ParseErrorKind, usize)] = &[
        ("", Empty, 0),
        ("   ", Empty, 3),
        ("/s", ExpectedNumber, 0),
        ("abc", ExpectedNumber, 0),
        ("-1/s", ExpectedNumber, 0),
        ("0.5/s", Fraction, 0),
        ("1/0.5s", Fraction, 2),
        ("0/s", Zero, 0),
        ("1/0s", Zero, 2),
        ("1/s burst 0", Zero, 10),
        ("18446744073709551616/s", NumberTooLarge, 0),
        ("18446744073709551615/s", ExpectedSeparator, usize::MAX), // valid: sentinel below
        ("100 s", ExpectedSeparator, 4),
        ("100 pre s", ExpectedSeparator, 4),
        ("100", ExpectedSeparator, 3),
        ("100/", ExpectedUnit, 4),
        ("100/ 5", ExpectedUnit, 6),
        ("100/€", ExpectedUnit, 4),
        ("100/fortnight", UnknownUnit, 4),
        ("100 per 2 weeks", UnknownUnit, 10),
        ("1/100000000000d", PeriodTooLong, 2),
        ("1/s x", Trailing, 4),
        ("1/s burst", ExpectedNumber, 9),
        ("1/s burst 2 3", Trailing, 12),
        ("1/s; 2/s", Trailing, 3),
        ("1/s2", Trailing, 3),
    ];
    for &(s, kind, pos) in cases {
        if pos == usize::MAX {
            assert_eq!(parse_quota(s), Ok(Quota::per_second(u64::MAX)), "{s:?}");
            continue;
        }
        assert_eq!(err(s), (kind, pos), "{s:?}");
        // The message says what was expected, and names the position.
        let e = parse_quota(s).unwrap_err();
        assert!(e.to_string().contains(&format!("byte {pos}:")), "{e}");
        assert!(!kind.message().is_empty());
    }
}

#[test]
fn lists() {
    let mut buf = [Quota::per_second(1); 4];
    assert_eq!(parse_quotas_into("1/s;2/m ; 3/h;4/d", &mut buf), Ok(4));
    assert_eq!(
        buf,
        [
            Quota::per_second(1),
            Quota::per_minute(2),
            Quota::per_hour(3),
            Quota::per_day(4)
        ]
    );
    assert_eq!(parse_quotas_into("5/s", &mut buf), Ok(1));
    assert_eq!(buf[0], Quota::per_second(5));
    let e = |s: &str| parse_quotas_into(s, &mut [Quota::per_second(1); 2]).unwrap_err();
    assert_eq!(
        e("1/s;;2/s"),
        ParseError {
            position: 4,
            kind: ParseErrorKind::Empty
        }
    );
    assert_eq!(
        e("1/s; "),
        ParseError {
            position: 5,
            kind: ParseErrorKind::Empty
        }
    );
    assert_eq!(
        e(""),
        ParseError {
            position: 0,
            kind: ParseErrorKind::Empty
        }
    );
    assert_eq!(
        e("1/s; 2/month"),
        ParseError {
            position: 7,
            kind: ParseErrorKind::AmbiguousUnit
        }
    );
    assert_eq!(
        e("1/s; 2/m;  3/h"),
        ParseError {
            position: 11,
            kind: ParseErrorKind::TooManyLimits
        }
    );
    assert_eq!(
        e("1/s x; 2/m"),
        ParseError {
            position: 4,
            kind: ParseErrorKind::Trailing
        }
    );
    // The iterator stops after the first error.
    let items: Vec<_> = parse_quotas("1/s; bad; 2/s").collect();
    assert_eq!(items.len(), 2);
    assert!(items[1].is_err());
    assert_eq!(
        parse_quotas_into("1/s", &mut []).unwrap_err().kind,
        ParseErrorKind::TooManyLimits
    );
}

fn unit_strategy() -> impl Strategy<Value = (&'static str, u64)> {
    prop::sample::select(spellings().collect::<Vec<_>>())
}

proptest! {
    /// Any string at all: an answer, never a panic; an error points inside it.
    #[test]
    fn arbitrary_strings_never_panic(s in ".{0,40}") {
        match parse_quota(&s) {
            Ok(q) => {
                prop_assert!(q.amount() > 0 && q.period_ns() > 0 && q.burst_size() > 0);
            }
            Err(e) => prop_assert!(e.position <= s.len()),
        }
        for item in parse_quotas(&s) {
            if let Err(e) = item {
                prop_assert!(e.position <= s.len());
            }
        }
    }

    /// Strings built from the grammar's own alphabet hit the deeper paths.
    #[test]
    fn grammar_soup_never_panics(parts in prop::collection::vec(
        prop::sample::select(vec!["1", "0", "99999999999999999999", "/", " ", "per", "s", "m",
            "month", "burst", ";", ".", "5", "µ", "h", "d", "x"]), 0..12)) {
        let s: String = parts.concat();
        if let Err(e) = parse_quota(&s) {
            prop_assert!(e.position <= s.len());
        }
        let mut buf = [Quota::per_second(1); 3];
        if let Ok(n) = parse_quotas_into(&s, &mut buf) {
            prop_assert!(n <= 3);
        }
    }

    /// A written quota parses back to itself, in every form.
    #[test]
    fn round_trip(amount in 1u64..1_000_000, count in 1u64..10_000, (unit, ns) in unit_strategy(),
                  burst in prop::option::of(1u64..1_000_000), per_word in any::<bool>()) {
        let sep = if per_word { " per " } else { "/" };
        let mut s = format!("{amount}{sep}{count}{unit}");
        let mut want = Quota::from_nanos(amount, count * ns);
        if let Some(b) = burst {
            s.push_str(&format!(" burst {b}"));
            want = want.burst(b);
        }
        prop_assert_eq!(parse_quota(&s), Ok(want));
        let twice = format!("{s}; {s}");
        let all: Result<Vec<_>, _> = parse_quotas(&twice).collect();
        prop_assert_eq!(all, Ok(vec![want, want]));
    }
}
