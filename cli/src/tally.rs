//! Bounded counters for a replay: the heaviest denied keys, per-second peaks and
//! a chart series. Each has a fixed size, so memory does not grow with the log.

use std::collections::HashMap;

/// The most frequent keys, by the Space-Saving algorithm (Metwally et al.) over
/// at most `capacity` counters. While no more than `capacity` distinct keys have
/// been seen, every count is exact; after that a new key takes the slot of the
/// least counted one and inherits its count as an upper bound of its error
/// (`overcount`).
///
/// ```
/// use sluicegate_cli::tally::TopKeys;
/// let mut t = TopKeys::new(2);
/// for k in ["a", "b", "a", "c"] { t.add(k); }
/// let top = t.top(2);
/// assert_eq!((top[0].0, top[0].1, top[0].2), ("a", 2, 0));
/// assert_eq!((top[1].0, top[1].1, top[1].2), ("c", 2, 1)); // c took b's slot
/// assert!(!t.exact());
/// ```
#[derive(Clone, Debug)]
pub struct TopKeys {
    capacity: usize,
    index: HashMap<Box<str>, usize>,
    slots: Vec<(Box<str>, u64, u64)>,
    evicted: bool,
}

impl TopKeys {
    /// Counters for at most `capacity` keys (at least 1).
    ///
    /// ```
    /// let mut t = sluicegate_cli::tally::TopKeys::new(8);
    /// assert!(t.top(1).is_empty() && t.exact());
    /// ```
    pub fn new(capacity: usize) -> Self {
        TopKeys {
            capacity: capacity.max(1),
            index: HashMap::new(),
            slots: Vec::new(),
            evicted: false,
        }
    }

    /// Counts one occurrence of `key` (allocates only for a key not held).
    ///
    /// ```
    /// let mut t = sluicegate_cli::tally::TopKeys::new(8);
    /// t.add("k");
    /// t.add("k");
    /// assert_eq!(t.top(1)[0], ("k", 2, 0));
    /// ```
    pub fn add(&mut self, key: &str) {
        if let Some(&i) = self.index.get(key) {
            self.slots[i].1 += 1;
            return;
        }
        if self.slots.len() < self.capacity {
            self.index.insert(key.into(), self.slots.len());
            self.slots.push((key.into(), 1, 0));
            return;
        }
        self.evicted = true;
        let (i, min) = self
            .slots
            .iter()
            .enumerate()
            .map(|(i, s)| (i, s.1))
            .min_by_key(|(_, c)| *c)
            .unwrap_or((0, 0));
        let old = std::mem::replace(&mut self.slots[i], (key.into(), min + 1, min));
        self.index.remove(&old.0);
        self.index.insert(key.into(), i);
    }

    /// Whether every count is exact (no key was ever displaced).
    ///
    /// ```
    /// let mut t = sluicegate_cli::tally::TopKeys::new(8);
    /// t.add("k");
    /// assert!(t.exact());
    /// ```
    pub fn exact(&self) -> bool {
        !self.evicted
    }

    /// The `n` most counted keys: (key, count, overcount), highest first, ties by key.
    ///
    /// ```
    /// let mut t = sluicegate_cli::tally::TopKeys::new(8);
    /// for k in ["b", "a", "b"] { t.add(k); }
    /// assert_eq!(t.top(5), vec![("b", 2, 0), ("a", 1, 0)]);
    /// ```
    pub fn top(&self, n: usize) -> Vec<(&str, u64, u64)> {
        let mut v: Vec<_> = self.slots.iter().map(|(k, c, e)| (&**k, *c, *e)).collect();
        v.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
        v.truncate(n);
        v
    }
}

/// Offered and admitted requests per second, over the whole log, in at most
/// `buckets` buckets: a longer span doubles the bucket width (merging
/// neighbours), so a day of log is drawn with buckets of a few minutes.
///
/// ```
/// use sluicegate_cli::tally::Series;
/// let mut s = Series::new(4);
/// for sec in [10, 10, 11, 17] { s.add(sec, 1, 1); }
/// assert_eq!(s.width(), 2); // 10..=17 does not fit four one-second buckets
/// assert_eq!(s.points(), vec![(10, 3, 3), (12, 0, 0), (14, 0, 0), (16, 1, 1)]);
/// ```
#[derive(Clone, Debug)]
pub struct Series {
    cap: usize,
    start: Option<u64>,
    width: u64,
    data: Vec<(u64, u64)>,
}

impl Series {
    /// A series of at most `buckets` buckets (at least 2).
    ///
    /// ```
    /// let mut s = sluicegate_cli::tally::Series::new(10);
    /// assert!(s.points().is_empty());
    /// ```
    pub fn new(buckets: usize) -> Self {
        Series {
            cap: buckets.max(2),
            start: None,
            width: 1,
            data: Vec::new(),
        }
    }

    /// Adds counts at second `sec` (seconds before the first one seen go to the
    /// first bucket).
    ///
    /// ```
    /// let mut s = sluicegate_cli::tally::Series::new(10);
    /// s.add(100, 3, 2);
    /// s.add(98, 1, 1); // before the first second: first bucket
    /// assert_eq!(s.points(), vec![(100, 4, 3)]);
    /// ```
    pub fn add(&mut self, sec: u64, offered: u64, admitted: u64) {
        let start = *self.start.get_or_insert(sec);
        let mut i = (sec.saturating_sub(start) / self.width) as usize;
        while i >= self.cap {
            self.width *= 2;
            let merged: Vec<_> = self
                .data
                .chunks(2)
                .map(|c| c.iter().fold((0, 0), |a, b| (a.0 + b.0, a.1 + b.1)))
                .collect();
            self.data = merged;
            i = (sec.saturating_sub(start) / self.width) as usize;
        }
        if self.data.len() <= i {
            self.data.resize(i + 1, (0, 0));
        }
        self.data[i].0 += offered;
        self.data[i].1 += admitted;
    }

    /// The bucket width in seconds.
    ///
    /// ```
    /// let mut s = sluicegate_cli::tally::Series::new(10);
    /// s.add(0, 1, 1);
    /// s.add(25, 1, 1);
    /// assert_eq!(s.width(), 4);
    /// ```
    pub fn width(&self) -> u64 {
        self.width
    }

    /// (bucket start second, offered, admitted) for every bucket.
    ///
    /// ```
    /// let mut s = sluicegate_cli::tally::Series::new(10);
    /// s.add(7, 1, 0);
    /// s.add(9, 2, 2);
    /// assert_eq!(s.points(), vec![(7, 1, 0), (8, 0, 0), (9, 2, 2)]);
    /// ```
    pub fn points(&self) -> Vec<(u64, u64, u64)> {
        let start = self.start.unwrap_or(0);
        self.data
            .iter()
            .enumerate()
            .map(|(i, (o, a))| (start + i as u64 * self.width, *o, *a))
            .collect()
    }
}

const RING: usize = 64;

/// The highest offered and admitted counts in any one second. Counts are kept
/// for the last 64 seconds seen, so lines up to a minute out of order still
/// land in their own second; a line older than that is left out of the peaks
/// (it is still counted everywhere else).
///
/// ```
/// use sluicegate_cli::tally::Peaks;
/// let mut p = Peaks::default();
/// for (sec, admitted) in [(5, true), (5, false), (6, true), (5, true)] { p.add(sec, admitted); }
/// assert_eq!(p.finish(), (3, 2));
/// ```
#[derive(Clone, Debug)]
pub struct Peaks {
    ring: [(u64, u64, u64); RING],
    peak: (u64, u64),
}

impl Default for Peaks {
    fn default() -> Self {
        Peaks {
            ring: [(u64::MAX, 0, 0); RING],
            peak: (0, 0),
        }
    }
}

impl Peaks {
    /// Counts one offered request at second `sec`.
    ///
    /// ```
    /// let mut p = sluicegate_cli::tally::Peaks::default();
    /// p.add(65, false);
    /// for _ in 0..3 {
    ///     p.add(1, true); // 64 s before a second already seen, in its slot: left out
    /// }
    /// assert_eq!(p.finish(), (1, 0));
    /// ```
    pub fn add(&mut self, sec: u64, admitted: bool) {
        let slot = &mut self.ring[(sec % RING as u64) as usize];
        if slot.0 != sec {
            if slot.0 != u64::MAX && slot.0 > sec {
                return; // older than the ring holds
            }
            self.peak.0 = self.peak.0.max(slot.1);
            self.peak.1 = self.peak.1.max(slot.2);
            *slot = (sec, 0, 0);
        }
        slot.1 += 1;
        slot.2 += u64::from(admitted);
    }

    /// (peak offered, peak admitted) per second.
    ///
    /// ```
    /// let p = sluicegate_cli::tally::Peaks::default();
    /// assert_eq!(p.finish(), (0, 0));
    /// ```
    pub fn finish(&self) -> (u64, u64) {
        self.ring
            .iter()
            .fold(self.peak, |p, s| (p.0.max(s.1), p.1.max(s.2)))
    }
}
