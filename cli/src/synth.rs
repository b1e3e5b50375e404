//! A seeded, realistic access log for tests, the demo and speed measurements:
//! steady users browsing, one scraper walking the catalogue about ten times a
//! second, one burst (a marketing mail: hundreds of new clients in twenty
//! seconds), and a few malformed lines. The same seed gives the same log on every
//! machine (a hand-written splitmix64, no `rand` version to drift with).
//!
//! [`generate`] gives the events themselves, so a test can compute what a policy
//! should decide without going through the parser.

use std::io::{self, Write};

use crate::input::Format;
use crate::time::{format_clf, format_utc};

/// What to generate.
///
/// ```
/// let c = sluicegate_cli::synth::Config::default();
/// assert_eq!((c.seed, c.lines, c.disorder), (1, 10_000, false));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Config {
    /// The seed: the same seed, the same log.
    pub seed: u64,
    /// How many lines (malformed ones included).
    pub lines: usize,
    /// Time of the first request, in nanoseconds since the Unix epoch.
    pub start_ns: u64,
    /// Malformed lines per 10,000.
    pub malformed_per_10k: u32,
    /// Whether some lines are written up to two seconds out of time order (as a
    /// server does when it logs each request as it completes).
    pub disorder: bool,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            seed: 1,
            lines: 10_000,
            // 2026-03-02T09:00:00Z
            start_ns: 1_772_442_000_000_000_000,
            malformed_per_10k: 20,
            disorder: false,
        }
    }
}

/// Who made a request (for tests that look at one population).
///
/// ```
/// use sluicegate_cli::synth::{generate, Config, Entry, Source};
/// let log = generate(&Config { lines: 2000, ..Config::default() });
/// assert!(log.iter().any(|e| matches!(e, Entry::Request(ev) if ev.source == Source::Scraper)));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Source {
    /// One of the steady users.
    User,
    /// The scraper.
    Scraper,
    /// A client of the burst.
    Burst,
}

/// One request, before it is written as a line.
///
/// ```
/// use sluicegate_cli::synth::{generate, Config, Entry};
/// let log = generate(&Config { lines: 100, malformed_per_10k: 0, ..Config::default() });
/// let Entry::Request(first) = &log[0] else { unreachable!() };
/// assert_eq!(first.time_ns % 1_000_000, 0); // millisecond precision
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Event {
    /// Time in nanoseconds since the epoch (millisecond precision).
    pub time_ns: u64,
    /// Client address.
    pub ip: String,
    /// Method.
    pub method: &'static str,
    /// Path, without query.
    pub path: String,
    /// Query string, without `?`.
    pub query: Option<String>,
    /// Response status.
    pub status: u16,
    /// Response size.
    pub bytes: u32,
    /// `Referer`.
    pub referer: Option<&'static str>,
    /// `User-Agent`.
    pub user_agent: &'static str,
    /// Who made it.
    pub source: Source,
}

/// A line of the log: a request, or a line no parser accepts.
///
/// ```
/// use sluicegate_cli::synth::{generate, Config, Entry};
/// let log = generate(&Config { lines: 100, malformed_per_10k: 10_000, ..Config::default() });
/// assert!(log.iter().all(|e| matches!(e, Entry::Malformed(_))));
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Entry {
    /// A request.
    Request(Event),
    /// A malformed line (it may hold bytes that are not UTF-8).
    Malformed(Vec<u8>),
}

/// splitmix64: small, fast, good enough for traffic shapes.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
    /// Exponential gap with the given mean, in milliseconds (at least 1 ms).
    fn gap_ms(&mut self, mean_ms: f64) -> u64 {
        ((-mean_ms * (1.0 - self.unit()).ln()) as u64).max(1)
    }
}

const STEADY_PER_S: f64 = 40.0;
const USERS: u64 = 400;
const BURST_SECONDS: u64 = 20;
const BURST_PER_S: u64 = 150;
const MS: u64 = 1_000_000;

const BROWSERS: [&str; 4] = [
    "Mozilla/5.0 (X11; Linux x86_64; rv:128.0) Gecko/20100101 Firefox/128.0",
    "Mozilla/5.0 (Macintosh; Intel Mac OS X 14_5) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/17.5 Safari/605.1.15",
    "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/126.0.0.0 Safari/537.36",
    "Mozilla/5.0 (iPhone; CPU iPhone OS 17_5 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) Mobile/15E148",
];
const SCRAPER_UA: &str = "python-requests/2.31.0";
/// The scraper's address.
///
/// ```
/// assert_eq!(sluicegate_cli::synth::SCRAPER_IP, "192.0.2.66");
/// ```
pub const SCRAPER_IP: &str = "192.0.2.66";

/// The log's entries, in the order they are written.
///
/// ```
/// use sluicegate_cli::synth::{generate, Config, Entry};
/// let cfg = Config { lines: 1000, ..Config::default() };
/// let a = generate(&cfg);
/// assert_eq!(a.len(), 1000);
/// assert_eq!(a, generate(&cfg)); // seeded
/// assert!(a.iter().any(|e| matches!(e, Entry::Malformed(_))));
/// ```
pub fn generate(cfg: &Config) -> Vec<Entry> {
    let mut rng = Rng(cfg.seed);
    // Expected span: steady users all along, the scraper over 60 % of it.
    let span_ms = (cfg.lines as f64 / (STEADY_PER_S + 0.6 * 10.0) * 1000.0) as u64;
    let scraper = (span_ms / 10, span_ms * 7 / 10);
    let burst_at = span_ms * 3 / 10;
    let (mut t_user, mut t_scraper, mut t_burst) = (0u64, scraper.0, burst_at);
    let mut burst_left = BURST_SECONDS * BURST_PER_S;
    let mut page = 0u64;
    let mut out: Vec<Entry> = Vec::with_capacity(cfg.lines);
    while out.len() < cfg.lines {
        if rng.below(10_000) < u64::from(cfg.malformed_per_10k) {
            out.push(Entry::Malformed(malformed(&mut rng)));
            continue;
        }
        let scraper_on = t_scraper < scraper.1;
        let burst_on = burst_left > 0;
        let (t, source) =
            if scraper_on && t_scraper <= t_user && (!burst_on || t_scraper <= t_burst) {
                (t_scraper, Source::Scraper)
            } else if burst_on && t_burst <= t_user {
                (t_burst, Source::Burst)
            } else {
                (t_user, Source::User)
            };
        let time_ns = cfg.start_ns + t * MS;
        let ev = match source {
            Source::Scraper => {
                t_scraper += 70 + rng.below(60);
                page += 1;
                Event {
                    time_ns,
                    ip: SCRAPER_IP.into(),
                    method: "GET",
                    path: format!("/products/{page}"),
                    query: None,
                    status: 200,
                    bytes: 9000 + rng.below(4000) as u32,
                    referer: None,
                    user_agent: SCRAPER_UA,
                    source,
                }
            }
            Source::Burst => {
                t_burst += rng.gap_ms(1000.0 / BURST_PER_S as f64);
                burst_left -= 1;
                let client = rng.below(1200);
                Event {
                    time_ns,
                    ip: format!("198.18.{}.{}", client / 250, client % 250 + 1),
                    method: "GET",
                    path: if rng.below(4) == 0 {
                        "/login".into()
                    } else {
                        "/promo/spring".into()
                    },
                    query: Some("utm_source=mail".into()),
                    status: 200,
                    bytes: 20_000 + rng.below(5000) as u32,
                    referer: None,
                    user_agent: BROWSERS[3],
                    source,
                }
            }
            Source::User => {
                t_user += rng.gap_ms(1000.0 / STEADY_PER_S);
                user_event(&mut rng, time_ns)
            }
        };
        out.push(Entry::Request(ev));
    }
    if cfg.disorder {
        // Swap a few neighbours: a slow request logged after a faster later one.
        let mut i = 1;
        while i < out.len() {
            if rng.below(100) < 3 {
                out.swap(i - 1, i);
                i += 1;
            }
            i += 1;
        }
    }
    out
}

fn user_event(rng: &mut Rng, time_ns: u64) -> Event {
    // A few heavy users: the square skews the pick toward low numbers.
    let u = {
        let x = rng.unit();
        (x * x * USERS as f64) as u64
    };
    let ip = if u % 10 == 9 {
        format!("2001:db8:{:x}::{:x}", u, 1 + u % 7)
    } else if u < 200 {
        format!("198.51.100.{}", u + 1)
    } else {
        format!("203.0.113.{}", u - 199)
    };
    let roll = rng.below(100);
    let (method, path, query, status) = match roll {
        0..=24 => ("GET", "/".to_string(), None, 200),
        25..=54 => ("GET", format!("/products/{}", rng.below(5000)), None, 200),
        55..=64 => (
            "GET",
            "/search".to_string(),
            Some(format!("q=item{}", rng.below(100))),
            200,
        ),
        65..=84 => (
            "GET",
            "/static/app.js".to_string(),
            None,
            if rng.below(3) == 0 { 304 } else { 200 },
        ),
        85..=92 => ("POST", "/api/cart".to_string(), None, 201),
        93..=96 => (
            "POST",
            "/login".to_string(),
            None,
            if rng.below(5) == 0 { 401 } else { 302 },
        ),
        _ => ("GET", "/account".to_string(), None, 200),
    };
    Event {
        time_ns,
        method,
        path,
        query,
        status,
        bytes: rng.below(30_000) as u32,
        referer: (roll > 20).then_some("https://shop.example/"),
        user_agent: BROWSERS[(u % 4) as usize],
        ip,
        source: Source::User,
    }
}

/// Lines no parser accepts: cut before the timestamp ends, an impossible date,
/// binary noise, a truncated JSON object.
fn malformed(rng: &mut Rng) -> Vec<u8> {
    match rng.below(4) {
        0 => b"198.51.100.9 - - [02/Mar/2026:09:00".to_vec(),
        1 => b"198.51.100.9 - - [31/Feb/2026:09:00:00 +0000] \"GET / HTTP/1.1\" 200 5 \"-\" \"-\""
            .to_vec(),
        2 => vec![0x16, 0x03, 0x01, 0x02, 0x00, 0x01, 0xff, 0xfe, b'x'],
        _ => b"{\"remote_addr\":\"198.51.100.9\",\"request\":\"GET /".to_vec(),
    }
}

/// The time a line in `format` records for an event: whole seconds in the
/// common log formats, milliseconds (nginx `$msec`) in JSON.
///
/// ```
/// use sluicegate_cli::{input::Format, synth::logged_time_ns};
/// assert_eq!(logged_time_ns(2_345_000_000, Format::Combined), 2_000_000_000);
/// assert_eq!(logged_time_ns(2_345_000_000, Format::Json), 2_345_000_000);
/// ```
pub fn logged_time_ns(time_ns: u64, format: Format) -> u64 {
    match format {
        Format::Json => time_ns,
        _ => time_ns / 1_000_000_000 * 1_000_000_000,
    }
}

/// Writes `entries` as a log in `format` (`Auto` writes combined).
///
/// ```
/// use sluicegate_cli::{input::Format, synth::{generate, write, Config}};
/// let mut out = Vec::new();
/// write(&generate(&Config { lines: 3, malformed_per_10k: 0, ..Config::default() }), Format::Combined, &mut out)?;
/// assert_eq!(out.iter().filter(|b| **b == b'\n').count(), 3);
/// # Ok::<(), std::io::Error>(())
/// ```
pub fn write(entries: &[Entry], format: Format, out: &mut impl Write) -> io::Result<()> {
    for e in entries {
        match e {
            Entry::Malformed(bytes) => out.write_all(bytes)?,
            Entry::Request(ev) => {
                let target = match &ev.query {
                    Some(q) => format!("{}?{q}", ev.path),
                    None => ev.path.clone(),
                };
                match format {
                    Format::Json => {
                        let line = serde_json::json!({
                            "msec": format!("{}.{:03}", ev.time_ns / 1_000_000_000, ev.time_ns / MS % 1000),
                            "time_iso8601": format_utc(ev.time_ns),
                            "remote_addr": ev.ip,
                            "request": format!("{} {target} HTTP/1.1", ev.method),
                            "status": ev.status,
                            "body_bytes_sent": ev.bytes,
                            "http_referer": ev.referer.unwrap_or("-"),
                            "http_user_agent": ev.user_agent,
                        });
                        serde_json::to_writer(&mut *out, &line)?;
                    }
                    _ => {
                        write!(
                            out,
                            "{} - - [{}] \"{} {target} HTTP/1.1\" {} {}",
                            ev.ip,
                            format_clf(ev.time_ns),
                            ev.method,
                            ev.status,
                            ev.bytes
                        )?;
                        if format != Format::Common {
                            write!(
                                out,
                                " \"{}\" \"{}\"",
                                ev.referer.unwrap_or("-"),
                                ev.user_agent
                            )?;
                        }
                    }
                }
            }
        }
        out.write_all(b"\n")?;
    }
    Ok(())
}
