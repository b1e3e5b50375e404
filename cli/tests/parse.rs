//! The log reader against the generator: every request of a seeded log comes back
//! with its attributes and time, in every format, plain or gzip; malformed lines
//! are counted and sampled.

use std::io::Write;

use flate2::{Compression, write::GzEncoder};
use indicatif::ProgressBar;
use sluicegate_cli::input::{Format, LogReader, open};
use sluicegate_cli::synth::{Config, Entry, Event, generate, logged_time_ns, write};

fn expected(entries: &[Entry]) -> (Vec<&Event>, usize) {
    let events: Vec<&Event> = entries
        .iter()
        .filter_map(|e| match e {
            Entry::Request(ev) => Some(ev),
            Entry::Malformed(_) => None,
        })
        .collect();
    let malformed = entries.len() - events.len();
    (events, malformed)
}

type Row = (
    u64,
    String,
    Option<String>,
    Option<String>,
    Option<String>,
    Option<String>,
    Option<String>,
);

fn read_back(bytes: &[u8], format: Format) -> (Vec<Row>, LogReader) {
    let mut reader = LogReader::new(format, Default::default());
    let mut rows = Vec::new();
    reader
        .read("test.log", bytes, |r| {
            let s = |n: &str| r.get(n).map(str::to_owned);
            rows.push((
                r.time_ns,
                r.ip.to_string(),
                s("method"),
                s("path"),
                s("status"),
                s("header:user-agent"),
                s("header:referer"),
            ));
        })
        .unwrap();
    (rows, reader)
}

#[test]
fn every_format_reads_back_what_was_generated() {
    let cfg = Config {
        lines: 5_000,
        seed: 7,
        malformed_per_10k: 50,
        ..Config::default()
    };
    let entries = generate(&cfg);
    let (events, malformed) = expected(&entries);
    assert!(malformed > 5, "the log has malformed lines");
    for format in [Format::Combined, Format::Common, Format::Json] {
        let mut log = Vec::new();
        write(&entries, format, &mut log).unwrap();
        for read_as in [format, Format::Auto] {
            let (rows, reader) = read_back(&log, read_as);
            let stats = reader.stats();
            assert_eq!(stats.lines, entries.len() as u64, "{format:?}");
            assert_eq!(
                stats.parsed,
                events.len() as u64,
                "{format:?} as {read_as:?}"
            );
            assert_eq!(stats.skipped, malformed as u64);
            assert_eq!(stats.samples.len(), 10);
            assert!(
                stats
                    .samples
                    .iter()
                    .all(|s| s.source == "test.log" && !s.reason.is_empty())
            );
            for (row, ev) in rows.iter().zip(&events) {
                let combined = format != Format::Common;
                let want: Row = (
                    logged_time_ns(ev.time_ns, format),
                    ev.ip.clone(),
                    Some(ev.method.to_owned()),
                    Some(ev.path.clone()),
                    Some(ev.status.to_string()),
                    combined.then(|| ev.user_agent.to_owned()),
                    ev.referer.filter(|_| combined).map(str::to_owned),
                );
                assert_eq!(row, &want, "{format:?}");
            }
        }
    }
}

#[test]
fn gzip_and_crlf_and_a_missing_final_newline() {
    let entries = generate(&Config {
        lines: 2_000,
        ..Config::default()
    });
    let mut log = Vec::new();
    write(&entries, Format::Combined, &mut log).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let gz_path = dir.path().join("access.log.1.gz");
    // Two gzip members, as `cat a.gz b.gz` or a rotated log gives.
    let (first, second) = log.split_at(log.len() / 2);
    let mut file = std::fs::File::create(&gz_path).unwrap();
    for part in [first, second] {
        let mut gz = GzEncoder::new(Vec::new(), Compression::fast());
        gz.write_all(part).unwrap();
        file.write_all(&gz.finish().unwrap()).unwrap();
    }
    drop(file);
    let plain = read_back(&log, Format::Combined).0;
    let mut reader = LogReader::new(Format::Combined, Default::default());
    let mut n = 0;
    let input = open(gz_path.to_str().unwrap(), &ProgressBar::hidden()).unwrap();
    reader.read("gz", input, |_| n += 1).unwrap();
    assert_eq!(n, plain.len());
    // CRLF line ends and no newline after the last line.
    let crlf: Vec<u8> = String::from_utf8_lossy(&log)
        .replace('\n', "\r\n")
        .trim_end()
        .into();
    let (rows, _) = read_back(&crlf, Format::Combined);
    assert_eq!(rows, plain);
}

#[test]
fn long_and_non_utf8_lines_are_skipped_not_fatal() {
    let good =
        "203.0.113.9 - - [02/Mar/2026:09:00:00 +0000] \"GET / HTTP/1.1\" 200 1 \"-\" \"ua\"\n";
    let mut log = Vec::new();
    log.extend_from_slice(good.as_bytes());
    log.extend(std::iter::repeat_n(b'a', 200_000));
    log.push(b'\n');
    log.extend_from_slice(b"\xff\xfe\x00 [nope\n");
    log.extend_from_slice(good.replace("\"ua\"", "\"café\"").as_bytes());
    let (rows, reader) = read_back(&log, Format::Combined);
    assert_eq!(rows.len(), 2);
    assert_eq!(rows[1].5.as_deref(), Some("café"));
    let s = reader.stats();
    assert_eq!((s.lines, s.parsed, s.skipped), (4, 2, 2));
    assert_eq!(s.samples[0].reason, "line longer than 64 KiB");
    assert_eq!(s.samples[0].line, 2);
    assert_eq!(s.samples[1].line, 3);
}
