//! Reading logs: files or standard input, plain or gzip (recognised by its magic
//! bytes, so `-` and any file name work), split into lines and parsed in the
//! chosen format. Lines that do not parse are counted and the first few kept as
//! samples; they never stop the run.

use std::fs::File;
use std::io::{self, BufRead, BufReader, Read};

use flate2::read::MultiGzDecoder;
use indicatif::ProgressBar;
use memchr::memchr;

use crate::json::JsonFields;
use crate::record::Request;

/// Lines longer than this are skipped as malformed (and not kept in memory).
///
/// ```
/// assert_eq!(sluicegate_cli::input::MAX_LINE, 65_536);
/// ```
pub const MAX_LINE: usize = 64 * 1024;
/// How many malformed lines are kept as samples.
///
/// ```
/// assert_eq!(sluicegate_cli::input::MAX_SAMPLES, 10);
/// ```
pub const MAX_SAMPLES: usize = 10;
const BUF: usize = 256 * 1024;

/// A log format.
///
/// ```
/// assert_eq!(sluicegate_cli::input::Format::default(), sluicegate_cli::input::Format::Auto);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Format {
    /// Decided per input by the first line that parses as JSON, combined or
    /// common (in that order of preference).
    #[default]
    Auto,
    /// nginx / Apache `combined`.
    Combined,
    /// nginx / Apache `common`.
    Common,
    /// One JSON object per line.
    Json,
}

/// A line that did not parse.
///
/// ```
/// use sluicegate_cli::input::{Format, LogReader};
/// let mut r = LogReader::new(Format::Json, Default::default());
/// r.read("a.log", &b"{oops\n"[..], |_| {})?;
/// let s = &r.stats().samples[0];
/// assert_eq!((s.source.as_str(), s.line, s.reason, s.text.as_str()), ("a.log", 1, "not a JSON object", "{oops"));
/// # Ok::<(), std::io::Error>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Sample {
    /// The input it came from (`-` for standard input).
    pub source: String,
    /// Its line number, from 1.
    pub line: u64,
    /// Why it was skipped.
    pub reason: &'static str,
    /// Its first 200 bytes.
    pub text: String,
}

/// Line counts over every input read so far.
///
/// ```
/// let s = sluicegate_cli::input::LineStats::default();
/// assert_eq!((s.lines, s.parsed, s.skipped), (0, 0, 0));
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LineStats {
    /// Lines read.
    pub lines: u64,
    /// Lines parsed into requests.
    pub parsed: u64,
    /// Lines skipped (empty, too long or malformed).
    pub skipped: u64,
    /// The first [`MAX_SAMPLES`] skipped lines that were not empty.
    pub samples: Vec<Sample>,
}

/// Opens a log for reading: `-` is standard input; gzip is decompressed.
/// `progress` advances by the bytes read from the file (compressed bytes for
/// gzip); pass `ProgressBar::hidden()` for none.
///
/// ```
/// use std::io::Read;
/// let dir = tempfile::tempdir()?;
/// let p = dir.path().join("a.log");
/// std::fs::write(&p, "hello\n")?;
/// let mut s = String::new();
/// sluicegate_cli::input::open(p.to_str().unwrap(), &indicatif::ProgressBar::hidden())?.read_to_string(&mut s)?;
/// assert_eq!(s, "hello\n");
/// # Ok::<(), std::io::Error>(())
/// ```
pub fn open(path: &str, progress: &ProgressBar) -> io::Result<Box<dyn BufRead>> {
    let raw: Box<dyn Read> = if path == "-" {
        Box::new(io::stdin())
    } else {
        Box::new(File::open(path)?)
    };
    let mut reader = BufReader::with_capacity(BUF, progress.wrap_read(raw));
    let head = reader.fill_buf()?;
    if head.starts_with(&[0x1f, 0x8b]) {
        Ok(Box::new(BufReader::with_capacity(
            BUF,
            MultiGzDecoder::new(reader),
        )))
    } else {
        Ok(Box::new(reader))
    }
}

/// Splits inputs into lines and parses them, keeping [`LineStats`].
///
/// ```
/// use sluicegate_cli::input::{Format, LogReader};
/// let mut r = LogReader::new(Format::Auto, Default::default());
/// r.read("-", &b"\n"[..], |_| {})?;
/// assert_eq!(r.stats().skipped, 1); // an empty line
/// # Ok::<(), std::io::Error>(())
/// ```
#[derive(Debug, Default)]
pub struct LogReader {
    format: Format,
    fields: JsonFields,
    stats: LineStats,
}

impl LogReader {
    /// A reader for `format`; `fields` names the JSON fields.
    ///
    /// ```
    /// let r = sluicegate_cli::input::LogReader::new(sluicegate_cli::input::Format::Common, Default::default());
    /// assert_eq!(r.stats().lines, 0);
    /// ```
    pub fn new(format: Format, fields: JsonFields) -> Self {
        LogReader {
            format,
            fields,
            stats: LineStats::default(),
        }
    }

    /// The counts so far.
    ///
    /// ```
    /// let r = sluicegate_cli::input::LogReader::default();
    /// assert!(r.stats().samples.is_empty());
    /// ```
    pub fn stats(&self) -> &LineStats {
        &self.stats
    }

    /// Reads `input` (named `source` in samples) to its end, calling `on` with
    /// every request parsed, in line order.
    ///
    /// ```
    /// use sluicegate_cli::input::{Format, LogReader};
    /// let log = "1.2.3.4 - - [10/Oct/2000:13:55:36 -0700] \"GET / HTTP/1.1\" 200 5\n\nnot a line\n";
    /// let mut r = LogReader::new(Format::Common, Default::default());
    /// let mut ips = Vec::new();
    /// r.read("x.log", log.as_bytes(), |req| ips.push(req.ip.to_string()))?;
    /// assert_eq!(ips, ["1.2.3.4"]);
    /// let s = r.stats();
    /// assert_eq!((s.lines, s.parsed, s.skipped), (3, 1, 2));
    /// assert_eq!((s.samples.len(), s.samples[0].line, s.samples[0].reason), (1, 3, "no [timestamp]"));
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn read<R: BufRead>(
        &mut self,
        source: &str,
        mut input: R,
        mut on: impl FnMut(&Request<'_>),
    ) -> io::Result<()> {
        let mut format = self.format;
        let mut line_no = 0u64;
        let mut long = Vec::new();
        let mut too_long = false;
        loop {
            let avail = input.fill_buf()?;
            if avail.is_empty() {
                if !long.is_empty() || too_long {
                    line_no += 1;
                    self.line(source, line_no, &long, too_long, &mut format, &mut on);
                }
                return Ok(());
            }
            let (take, end) = match memchr(b'\n', avail) {
                Some(i) => (i, true),
                None => (avail.len(), false),
            };
            if end && long.is_empty() && !too_long && take <= MAX_LINE {
                line_no += 1;
                self.line(source, line_no, &avail[..take], false, &mut format, &mut on);
            } else {
                if long.len() + take > MAX_LINE {
                    too_long = true;
                    long.clear();
                } else if !too_long {
                    long.extend_from_slice(&avail[..take]);
                }
                if end {
                    line_no += 1;
                    self.line(source, line_no, &long, too_long, &mut format, &mut on);
                    long.clear();
                    too_long = false;
                }
            }
            input.consume(take + usize::from(end));
        }
    }

    fn line(
        &mut self,
        source: &str,
        line_no: u64,
        bytes: &[u8],
        too_long: bool,
        format: &mut Format,
        on: &mut impl FnMut(&Request<'_>),
    ) {
        self.stats.lines += 1;
        let bytes = bytes.strip_suffix(b"\r").unwrap_or(bytes);
        let text = match std::str::from_utf8(bytes) {
            Ok(t) => std::borrow::Cow::Borrowed(t),
            Err(_) => String::from_utf8_lossy(bytes),
        };
        let result = if too_long {
            Err("line longer than 64 KiB")
        } else if text.trim().is_empty() {
            self.stats.skipped += 1;
            return;
        } else {
            if *format == Format::Auto {
                *format = detect(&text, &self.fields).unwrap_or(Format::Auto);
            }
            match *format {
                Format::Json => crate::json::parse(&text, &self.fields),
                Format::Common => crate::clf::parse(&text, false),
                Format::Combined => crate::clf::parse(&text, true),
                Format::Auto => Err("not a combined, common or JSON log line"),
            }
        };
        match result {
            Ok(req) => {
                self.stats.parsed += 1;
                on(&req);
            }
            Err(reason) => {
                self.stats.skipped += 1;
                if self.stats.samples.len() < MAX_SAMPLES {
                    let cut = (0..=text.len().min(200))
                        .rev()
                        .find(|i| text.is_char_boundary(*i))
                        .unwrap_or(0);
                    self.stats.samples.push(Sample {
                        source: source.to_owned(),
                        line: line_no,
                        reason,
                        text: text[..cut].to_owned(),
                    });
                }
            }
        }
    }
}

/// The format `line` is written in, if it parses in one (JSON, then combined,
/// then common).
///
/// ```
/// use sluicegate_cli::input::{detect, Format};
/// let f = Default::default();
/// assert_eq!(detect(r#"{"msec":"1.5","remote_addr":"::1"}"#, &f), Some(Format::Json));
/// assert_eq!(detect(r#"1.2.3.4 - - [10/Oct/2000:13:55:36 -0700] "GET / HTTP/1.1" 200 5"#, &f), Some(Format::Common));
/// assert_eq!(detect("{ truncated", &f), None);
/// ```
pub fn detect(line: &str, fields: &JsonFields) -> Option<Format> {
    if crate::json::parse(line, fields).is_ok() {
        Some(Format::Json)
    } else if crate::clf::parse(line, true).is_ok() {
        Some(Format::Combined)
    } else if crate::clf::parse(line, false).is_ok() {
        Some(Format::Common)
    } else {
        None
    }
}
