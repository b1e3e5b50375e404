//! The demo's simulation: one bursty, seeded traffic pattern through every
//! sluicegate algorithm under the same nominal quota (10 per second, burst 10), in
//! simulated time (every call is an `_at(now)` call, nothing sleeps), then a
//! table and an SVG chart of what each admitted.
//!
//! ```
//! let sim = sluicegate_demo::simulate().unwrap();
//! assert_eq!(sim.outcomes.len(), 7);
//! for o in &sim.outcomes {
//!     assert_eq!(o.offered, o.admitted.len() + o.denied);
//! }
//! ```

/// The repository README's Rust snippets, compiled and run as doctests (this crate
/// is the quick start's and is not published, so the README outside any published
/// crate's folder can be read from here).
#[cfg(doctest)]
#[doc = include_str!("../../README.md")]
struct ReadmeDoctests;

use std::error::Error;
use std::path::Path;

use plotters::prelude::*;
use sluicegate::{Compound, FixedWindow, LeakyBucket, Quota, Shaper, Sliding, SlidingLog};
use sluicegate::{SlidingWindow, TokenBucket};

/// One second in nanoseconds: the quota's period and the window of every
/// "in any window" measure.
pub const WINDOW_NS: u64 = 1_000_000_000;
/// The nominal rate: units per [`WINDOW_NS`].
pub const RATE: u64 = 10;
/// The burst of the bucket algorithms.
pub const BURST: u64 = 10;
/// The longest delay the shaper grants.
pub const MAX_DELAY_NS: u64 = WINDOW_NS;
/// The compound limiter's second limit, per minute.
pub const PER_MINUTE: u64 = 300;
/// How long the traffic runs.
pub const DURATION_NS: u64 = 60 * WINDOW_NS;
/// The chart's time resolution.
pub const BUCKET_NS: u64 = 100_000_000;
/// The traffic generator's seed.
pub const SEED: u64 = 0x5EED_CAFE_F00D_0001;

/// A xorshift64* generator: a few lines, and the same numbers on every machine and
/// after every dependency upgrade, so the table is reproducible.
///
/// ```
/// let mut a = sluicegate_demo::XorShift::new(7);
/// let mut b = sluicegate_demo::XorShift::new(7);
/// assert_eq!(a.next_u64(), b.next_u64());
/// assert!((0.0..1.0).contains(&a.unit()));
/// ```
#[derive(Clone, Debug)]
pub struct XorShift(u64);

impl XorShift {
    /// A generator from `seed` (0 is replaced: xorshift's state must be non-zero).
    pub fn new(seed: u64) -> Self {
        Self(if seed == 0 {
            0x9E37_79B9_7F4A_7C15
        } else {
            seed
        })
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Uniform in `[0, 1)`.
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Uniform in `lo..=hi`.
    pub fn between(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next_u64() % (hi - lo + 1)
    }

    /// An exponential gap for a Poisson process of `per_second` events, in ns.
    pub fn gap_ns(&mut self, per_second: f64) -> u64 {
        (-(1.0 - self.unit()).ln() / per_second * WINDOW_NS as f64) as u64
    }
}

/// The arrival times (ns, sorted) of the demo's traffic over [`DURATION_NS`]: a
/// Poisson background of 4/s; every 4–8 s a burst of 20–50 requests within 300 ms;
/// and from 30 s to 40 s a flash crowd adding 20/s.
///
/// ```
/// let t = sluicegate_demo::bursty_traffic(1);
/// assert!(t.windows(2).all(|w| w[0] <= w[1]));
/// assert_eq!(t, sluicegate_demo::bursty_traffic(1));
/// ```
pub fn bursty_traffic(seed: u64) -> Vec<u64> {
    let mut rng = XorShift::new(seed);
    let mut arrivals = Vec::new();
    let mut poisson = |rng: &mut XorShift, from: u64, to: u64, per_second: f64| {
        let mut t = from + rng.gap_ns(per_second);
        while t < to {
            arrivals.push(t);
            t += rng.gap_ns(per_second);
        }
    };
    poisson(&mut rng, 0, DURATION_NS, 4.0);
    poisson(&mut rng, 30 * WINDOW_NS, 40 * WINDOW_NS, 20.0);
    let mut start = 2 * WINDOW_NS;
    while start < DURATION_NS {
        for _ in 0..rng.between(20, 50) {
            let t = start + rng.between(0, 300_000_000);
            if t < DURATION_NS {
                arrivals.push(t);
            }
        }
        start += rng.between(4 * WINDOW_NS, 8 * WINDOW_NS);
    }
    arrivals.sort_unstable();
    arrivals
}

/// What one algorithm did with the traffic.
#[derive(Clone, Debug, PartialEq)]
pub struct Outcome {
    /// The algorithm, as the table and the chart name it.
    pub name: &'static str,
    /// Requests offered.
    pub offered: usize,
    /// Requests denied.
    pub denied: usize,
    /// When each admitted request runs (sorted): its arrival, plus the shaper's
    /// delay for the shaper.
    pub admitted: Vec<u64>,
    /// The shaper's delay for each admitted request; empty for the others.
    pub delays: Vec<u64>,
}

impl Outcome {
    /// The mean delay of the admitted requests, if the algorithm delays.
    ///
    /// ```
    /// let sim = sluicegate_demo::simulate().unwrap();
    /// assert!(sim.outcomes[0].mean_delay_ns().is_none()); // the token bucket
    /// assert!(sim.outcomes[2].mean_delay_ns().unwrap() > 0.0); // the shaper
    /// ```
    pub fn mean_delay_ns(&self) -> Option<f64> {
        if self.delays.is_empty() {
            return None;
        }
        Some(self.delays.iter().map(|&d| d as f64).sum::<f64>() / self.delays.len() as f64)
    }
}

/// The traffic and every algorithm's outcome, in a fixed order.
#[derive(Clone, Debug, PartialEq)]
pub struct Simulation {
    /// The arrival times offered to every algorithm.
    pub arrivals: Vec<u64>,
    /// One per algorithm.
    pub outcomes: Vec<Outcome>,
}

/// Runs `admit` (the delay if admitted, `None` if denied) on every arrival;
/// `delays` says whether the algorithm delays (and so has a mean delay).
fn run(
    name: &'static str,
    arrivals: &[u64],
    delays: bool,
    mut admit: impl FnMut(u64) -> Option<u64>,
) -> Outcome {
    let mut admitted = Vec::new();
    let mut delay_log = Vec::new();
    for &t in arrivals {
        if let Some(delay) = admit(t) {
            admitted.push(t + delay);
            if delays {
                delay_log.push(delay);
            }
        }
    }
    admitted.sort_unstable();
    Outcome {
        name,
        offered: arrivals.len(),
        denied: arrivals.len() - admitted.len(),
        admitted,
        delays: delay_log,
    }
}

/// Runs the demo's traffic ([`bursty_traffic`] with [`SEED`]) through every
/// algorithm. Fails only if a quota is invalid.
///
/// ```
/// let sim = sluicegate_demo::simulate().unwrap();
/// assert_eq!(sim, sluicegate_demo::simulate().unwrap()); // deterministic
/// ```
pub fn simulate() -> Result<Simulation, sluicegate::ConfigError> {
    simulate_traffic(bursty_traffic(SEED))
}

/// Runs `arrivals` (sorted ns) through every algorithm.
///
/// ```
/// let sim = sluicegate_demo::simulate_traffic(vec![0; 15]).unwrap();
/// assert_eq!(sim.outcomes[0].admitted.len(), 10); // the burst
/// ```
pub fn simulate_traffic(arrivals: Vec<u64>) -> Result<Simulation, sluicegate::ConfigError> {
    let quota = Quota::new(RATE, core::time::Duration::from_nanos(WINDOW_NS)).burst(BURST);
    let admitted = |d: sluicegate::Decision| d.allowed.then_some(0);

    let token = TokenBucket::with_clock(quota, ())?;
    let leaky = LeakyBucket::with_clock(quota, ())?;
    let shaper = Shaper::with_clock(quota, MAX_DELAY_NS, ())?;
    let fixed = FixedWindow::with_clock(quota, ())?;
    let sliding = SlidingWindow::with_clock(quota, ())?;
    let log = SlidingLog::with_clock(quota, ())?;
    let compound =
        Compound::<Sliding, 2, ()>::with_clock([quota, Quota::per_minute(PER_MINUTE)], ())?;

    let a = &arrivals;
    let outcomes = vec![
        run("token bucket (GCRA)", a, false, |t| {
            admitted(token.check_at(t))
        }),
        run("leaky bucket meter", a, false, |t| {
            admitted(leaky.check_at(t))
        }),
        run("leaky bucket shaper", a, true, |t| {
            let r = shaper.reserve_at(t);
            r.granted().then_some(r.delay_ns())
        }),
        run("fixed window", a, false, |t| admitted(fixed.check_at(t))),
        run("sliding window counter", a, false, |t| {
            admitted(sliding.check_at(t))
        }),
        run("sliding window log", a, false, |t| {
            admitted(log.check_at(t))
        }),
        run("compound: 10/s + 300/min", a, false, |t| {
            admitted(compound.check_at(t))
        }),
    ];
    Ok(Simulation { arrivals, outcomes })
}

/// The most of `times` (sorted) in any interval `(t − window, t]`: exact, over
/// every interval, not only aligned ones.
///
/// ```
/// use sluicegate_demo::max_in_any_window;
/// // (4, 14] holds 5, 9, 10 and 14; no aligned window holds more than 3.
/// assert_eq!(max_in_any_window(&[0, 5, 9, 10, 14], 10), 4);
/// ```
pub fn max_in_any_window(times: &[u64], window: u64) -> usize {
    let mut best = 0;
    let mut first = 0;
    for (i, &t) in times.iter().enumerate() {
        while t - times[first] >= window {
            first += 1;
        }
        best = best.max(i + 1 - first);
    }
    best
}

/// The most of `times` in one aligned window `[k·window, (k+1)·window)`.
///
/// ```
/// use sluicegate_demo::max_in_aligned_window;
/// assert_eq!(max_in_aligned_window(&[0, 5, 9, 10, 14], 10), 3);
/// ```
pub fn max_in_aligned_window(times: &[u64], window: u64) -> usize {
    let mut counts = std::collections::BTreeMap::new();
    for &t in times {
        *counts.entry(t / window).or_insert(0usize) += 1;
    }
    counts.into_values().max().unwrap_or(0)
}

/// How many of `times` fall in each `bucket`-long interval, for `buckets` of them
/// (later times are left out).
///
/// ```
/// assert_eq!(sluicegate_demo::per_bucket(&[0, 1, 12, 35], 10, 3), [2, 1, 0]);
/// ```
pub fn per_bucket(times: &[u64], bucket: u64, buckets: usize) -> Vec<u32> {
    let mut counts = vec![0; buckets];
    for &t in times {
        if let Some(c) = usize::try_from(t / bucket)
            .ok()
            .and_then(|i| counts.get_mut(i))
        {
            *c += 1;
        }
    }
    counts
}

/// The table: one row per algorithm.
///
/// ```
/// let sim = sluicegate_demo::simulate().unwrap();
/// let table = sluicegate_demo::table(&sim);
/// assert_eq!(table.lines().count(), 2 + sim.outcomes.len());
/// assert!(table.contains("sliding window log"));
/// ```
pub fn table(sim: &Simulation) -> String {
    let mut out = format!(
        "{:<26} {:>7} {:>8} {:>6} {:>10} {:>14} {:>10}\n",
        "algorithm", "offered", "admitted", "denied", "max in any", "max in aligned", "mean delay"
    );
    out += &format!(
        "{:<26} {:>7} {:>8} {:>6} {:>10} {:>14} {:>10}\n",
        "", "", "", "", "1 s window", "1 s window", ""
    );
    for o in &sim.outcomes {
        let delay = match o.mean_delay_ns() {
            Some(ns) => format!("{:.0} ms", ns / 1e6),
            None => "-".to_owned(),
        };
        out += &format!(
            "{:<26} {:>7} {:>8} {:>6} {:>10} {:>14} {:>10}\n",
            o.name,
            o.offered,
            o.admitted.len(),
            o.denied,
            max_in_any_window(&o.admitted, WINDOW_NS),
            max_in_aligned_window(&o.admitted, WINDOW_NS),
            delay
        );
    }
    out
}

/// The chart's colour for each algorithm, in [`Simulation::outcomes`] order.
///
/// ```
/// assert_eq!(sluicegate_demo::COLORS.len(), 7);
/// ```
pub const COLORS: [RGBColor; 7] = [
    RGBColor(31, 119, 180),
    RGBColor(23, 190, 207),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(255, 127, 14),
    RGBColor(140, 86, 75),
];

/// Writes the chart to `path`: one panel per algorithm with the requests admitted
/// per 100 ms over time (the shaper's at the time they run), over the offered
/// traffic in grey.
///
/// ```
/// let sim = sluicegate_demo::simulate().unwrap();
/// let path = std::env::temp_dir().join(format!("sluicegate-doc-{}.svg", std::process::id()));
/// sluicegate_demo::write_chart(&sim, &path).unwrap();
/// assert!(std::fs::read_to_string(&path).unwrap().contains("<svg"));
/// # std::fs::remove_file(&path).unwrap();
/// ```
pub fn write_chart(sim: &Simulation, path: &Path) -> Result<(), Box<dyn Error>> {
    register_font()?;
    let end = sim
        .outcomes
        .iter()
        .filter_map(|o| o.admitted.last())
        .chain(sim.arrivals.last())
        .copied()
        .max()
        .unwrap_or(0)
        .max(DURATION_NS);
    let buckets = usize::try_from(end.div_ceil(BUCKET_NS))?;
    let x = |i: usize| i as f64 * BUCKET_NS as f64 / WINDOW_NS as f64;
    let x_max = x(buckets);
    let offered = per_bucket(&sim.arrivals, BUCKET_NS, buckets);
    // Headroom above the highest offered peak keeps each panel's legend off the data.
    let y_max = (offered.iter().copied().max().unwrap_or(0) * 5 / 3).max(12);
    let grey = RGBColor(170, 170, 170);

    let panel_height = 190;
    let title_height = 60;
    let height = title_height + panel_height * u32::try_from(sim.outcomes.len())?;
    let root = SVGBackend::new(path, (1200, height)).into_drawing_area();
    root.fill(&WHITE)?;
    let (title, body) = root.split_vertically(title_height);
    title.titled(
        &format!(
            "Admitted per 100 ms, same bursty traffic, quota {RATE}/s (burst {BURST}; shaper max delay 1 s)"
        ),
        ("sans-serif", 24),
    )?;
    let panels = body.split_evenly((sim.outcomes.len(), 1));
    let last = panels.len().saturating_sub(1);
    for (i, ((panel, outcome), color)) in panels.iter().zip(&sim.outcomes).zip(COLORS).enumerate() {
        let mut chart = ChartBuilder::on(panel)
            .caption(outcome.name, ("sans-serif", 18))
            .margin_left(10)
            .margin_right(20)
            .x_label_area_size(if i == last { 45 } else { 25 })
            .y_label_area_size(60)
            .build_cartesian_2d(0f64..x_max, 0u32..y_max)?;
        let mut mesh = chart.configure_mesh();
        mesh.y_desc("per 100 ms")
            .x_labels(13)
            .y_labels(5)
            .light_line_style(RGBColor(238, 238, 238));
        if i == last {
            mesh.x_desc("simulated time (s)");
        }
        mesh.draw()?;
        chart
            .draw_series(LineSeries::new(
                offered.iter().enumerate().map(|(i, &n)| (x(i), n)),
                grey,
            ))?
            .label("offered")
            .legend(move |(x, y)| PathElement::new([(x, y), (x + 20, y)], grey));
        let admitted = per_bucket(&outcome.admitted, BUCKET_NS, buckets);
        chart
            .draw_series(LineSeries::new(
                admitted.iter().enumerate().map(|(i, &n)| (x(i), n)),
                color.stroke_width(2),
            ))?
            .label(format!("admitted: {}", outcome.name))
            .legend(move |(x, y)| PathElement::new([(x, y), (x + 20, y)], color.stroke_width(2)));
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperRight)
            .background_style(WHITE.mix(0.85))
            .border_style(RGBColor(200, 200, 200))
            .label_font(("sans-serif", 14))
            .draw()?;
    }
    root.present()?;
    Ok(())
}

/// Registers the embedded DejaVu Sans as plotters' `sans-serif` (once per process):
/// text is measured with the real font, whatever features other crates of a
/// workspace build turn on in plotters.
fn register_font() -> Result<(), Box<dyn Error>> {
    static DONE: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    let ok = *DONE.get_or_init(|| {
        plotters::style::register_font(
            "sans-serif",
            plotters::style::FontStyle::Normal,
            dejavu::sans::regular(),
        )
        .is_ok()
    });
    if ok {
        Ok(())
    } else {
        Err("the embedded DejaVu Sans could not be loaded".into())
    }
}
