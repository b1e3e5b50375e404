//! `--chart`: per rule, offered vs admitted requests per second over the log's
//! span, as SVG, or PNG when the path ends in `.png`.
//!
//! Text is laid out (and, in PNG, drawn) with DejaVu Sans, embedded in the binary
//! (the `dejavu` crate), so a chart needs no system font; `$SLUICEGATE_FONT` names
//! another TrueType/OpenType file to use instead.

use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use anyhow::{Context, Result, anyhow, bail};
use plotters::coord::Shift;
use plotters::coord::ranged1d::{DefaultFormatting, KeyPointHint};
use plotters::prelude::*;

use crate::replay::Replay;

/// Registers the chart font (once per process): `$SLUICEGATE_FONT` if set, else
/// the embedded DejaVu Sans.
fn font() -> Result<()> {
    static FONT: OnceLock<Result<(), String>> = OnceLock::new();
    let registered = FONT.get_or_init(|| {
        let (bytes, what): (&'static [u8], String) = match std::env::var_os("SLUICEGATE_FONT") {
            Some(p) => {
                let path = PathBuf::from(p);
                let bytes = std::fs::read(&path)
                    .map_err(|e| format!("SLUICEGATE_FONT={}: {e}", path.display()))?;
                // plotters keeps fonts for the whole process: the bytes live as long.
                (
                    Box::leak(bytes.into_boxed_slice()),
                    path.display().to_string(),
                )
            }
            None => (
                dejavu::sans::regular(),
                "the embedded DejaVu Sans".to_owned(),
            ),
        };
        plotters::style::register_font("sans-serif", FontStyle::Normal, bytes)
            .map_err(|_| format!("{what} is not a TrueType/OpenType font"))
    });
    registered.clone().map_err(|e| anyhow!("{e}"))
}

/// Draws the chart of `replay` to `path` (PNG if it ends in `.png`, else SVG).
///
/// ```
/// # let policy = sluicegate_policy::Policy::from_toml("[[rule]]\nname = \"g\"\nlimit = \"1/s\"\n").unwrap();
/// let mut replay = sluicegate_cli::replay::Replay::new(policy);
/// replay.check(&sluicegate_cli::record::Request { time_ns: 1_000_000_000, ..Default::default() });
/// let dir = tempfile::tempdir().unwrap();
/// let path = dir.path().join("replay.svg");
/// sluicegate_cli::chart::draw(&replay, &path).unwrap();
/// assert!(std::fs::read_to_string(&path).unwrap().contains("g (1/s, token_bucket, enforce)"));
/// ```
pub fn draw(replay: &Replay, path: &Path) -> Result<()> {
    font()?;
    let drawn = replay
        .rules()
        .iter()
        .filter(|r| r.matched > 0)
        .count()
        .max(1);
    let idle = replay.rules().iter().any(|r| r.matched == 0);
    let size = (
        1000,
        60 + 240 * drawn as u32 + if idle { IDLE_LINE } else { 0 },
    );
    let png = path
        .extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("png"));
    if png {
        let root = BitMapBackend::new(path, size).into_drawing_area();
        panels(replay, &root)?;
        root.present()
            .with_context(|| format!("writing {}", path.display()))?;
    } else {
        let root = SVGBackend::new(path, size).into_drawing_area();
        panels(replay, &root)?;
        root.present()
            .with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}

fn panels<DB: DrawingBackend>(replay: &Replay, root: &DrawingArea<DB, Shift>) -> Result<()>
where
    DB::ErrorType: 'static,
{
    let err = |e: DrawingAreaErrorKind<DB::ErrorType>| anyhow!("drawing the chart: {e}");
    root.fill(&WHITE).map_err(err)?;
    let span = replay.span();
    let title = match span {
        Some((a, b)) => format!(
            "sluicegate replay: offered vs admitted requests per second, {} .. {}",
            crate::time::format_utc(a),
            crate::time::format_utc(b)
        ),
        None => "sluicegate replay: no requests".to_owned(),
    };
    let (head, body) = root.split_vertically(50);
    head.titled(&title, ("sans-serif", 20)).map_err(err)?;
    if replay.rules().is_empty() {
        bail!("the policy has no rules to chart");
    }
    // A rule no request matched would be an empty panel: such rules are named
    // once, on a line under the chart, instead.
    let (drawn, idle): (Vec<_>, Vec<_>) = replay.rules().iter().partition(|r| r.matched > 0);
    let body = if idle.is_empty() {
        body
    } else {
        let (_, h) = body.dim_in_pixel();
        let (panels, foot) = body.split_vertically(h.saturating_sub(IDLE_LINE));
        let names: Vec<&str> = idle.iter().map(|r| r.def.name()).collect();
        let line = format!("No request matched: {}", names.join(", "));
        foot.draw(&Text::new(line, (12, 8), ("sans-serif", 15)))
            .map_err(err)?;
        panels
    };
    let start = span.map_or(0, |s| s.0 / 1_000_000_000);
    let end = span.map_or(1, |s| s.1 / 1_000_000_000 + 1).max(start + 1);
    let long = end - start > 3600;
    for (rule, area) in drawn.iter().zip(body.split_evenly((drawn.len(), 1))) {
        let w = rule.series.width() as f64;
        let points = rule.series.points();
        let peak = points.iter().map(|p| p.1 as f64 / w).fold(0.0f64, f64::max);
        let y = YAxis::new(peak);
        let caption = format!(
            "{} ({}, {}, {}){}",
            rule.def.name(),
            rule.def.limit(),
            rule.def.spec().kind(),
            rule.def.mode(),
            if w > 1.0 {
                format!(" - averages over {w} s")
            } else {
                String::new()
            }
        );
        let mut chart = ChartBuilder::on(&area)
            .caption(caption, ("sans-serif", 16))
            .margin(8)
            .x_label_area_size(28)
            .y_label_area_size(56)
            .build_cartesian_2d((start..end).with_key_points(ticks(start, end)), y)
            .map_err(err)?;
        chart
            .configure_mesh()
            .x_labels(12)
            .y_labels(5)
            .x_label_formatter(&|s| clock(*s, long))
            .y_label_formatter(&|v| y.label(*v))
            .y_desc("requests/s")
            .light_line_style(WHITE.mix(0.0))
            .draw()
            .map_err(err)?;
        let offered = RGBColor(214, 96, 77);
        let admitted = RGBColor(33, 102, 172);
        chart
            .draw_series(
                AreaSeries::new(
                    points.iter().map(|p| (p.0, p.2 as f64 / w)),
                    0.0,
                    admitted.mix(0.35),
                )
                .border_style(admitted.stroke_width(1)),
            )
            .map_err(err)?
            .label("admitted")
            .legend(move |(x, y)| {
                Rectangle::new([(x, y - 5), (x + 18, y + 5)], admitted.mix(0.5).filled())
            });
        chart
            .draw_series(LineSeries::new(
                points.iter().map(|p| (p.0, p.1 as f64 / w)),
                offered.stroke_width(1),
            ))
            .map_err(err)?
            .label("offered")
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 18, y)], offered.stroke_width(2))
            });
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperRight)
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK.mix(0.3))
            .draw()
            .map_err(err)?;
    }
    Ok(())
}

/// Height in pixels of the line naming the rules no request matched.
const IDLE_LINE: u32 = 30;

/// The y axis of one panel: from 0 to a whole number of round steps (1, 2, 2.5
/// or 5 times a power of ten) just above the peak, ticks at every step, labels
/// with as many decimals as the step needs, so no two labels read the same.
#[derive(Debug, Clone, Copy, PartialEq)]
struct YAxis {
    /// The distance between ticks.
    step: f64,
    /// How many ticks above 0 (the top of the axis is `steps * step`).
    steps: u32,
    /// Decimals in a label.
    decimals: usize,
}

impl YAxis {
    /// At most this many steps between 0 and the top.
    const MAX_STEPS: f64 = 5.0;

    /// The axis for values from 0 to `peak` (requests per second), with room
    /// above the peak; a peak of 0 (or not finite) gets the axis of 1.
    fn new(peak: f64) -> YAxis {
        let peak = if peak.is_finite() && peak > 0.0 {
            peak
        } else {
            1.0
        };
        let want = peak * 1.05 / Self::MAX_STEPS;
        let magnitude = 10f64.powi(want.log10().floor() as i32);
        let (mantissa, extra) = [(1.0, 0), (2.0, 0), (2.5, 1), (5.0, 0), (10.0, 0)]
            .into_iter()
            .find(|(m, _)| m * magnitude >= want * (1.0 - 1e-9))
            .unwrap_or((10.0, 0));
        let step = mantissa * magnitude;
        let steps = ((peak * 1.05 / step) - 1e-9).ceil().max(1.0) as u32;
        // Decimals of the step itself: 0 for 1, 2, 5 and up; 1 for 0.5 and 2.5; ...
        let power = (step.log10() + 1e-9).floor() as i32;
        let decimals = (-power).max(0) as usize + if power <= 0 { extra } else { 0 };
        YAxis {
            step,
            steps,
            decimals,
        }
    }

    /// The top of the axis.
    fn top(&self) -> f64 {
        self.step * f64::from(self.steps)
    }

    /// The tick values, 0 to the top.
    fn ticks(&self) -> Vec<f64> {
        (0..=self.steps).map(|i| self.step * f64::from(i)).collect()
    }

    /// A tick's label.
    fn label(&self, v: f64) -> String {
        format!("{v:.*}", self.decimals)
    }
}

/// The axis as plotters' coordinate: values map linearly from 0..top, and the
/// mesh's key points are exactly the axis's ticks (plotters' own choice for an
/// f64 range may put ticks between the labels' decimals).
impl Ranged for YAxis {
    type FormatOption = DefaultFormatting;
    type ValueType = f64;

    fn map(&self, value: &f64, limit: (i32, i32)) -> i32 {
        let share = value / self.top();
        limit.0 + (f64::from(limit.1 - limit.0) * share + 1e-3).floor() as i32
    }

    fn key_points<Hint: KeyPointHint>(&self, _hint: Hint) -> Vec<f64> {
        self.ticks()
    }

    fn range(&self) -> Range<f64> {
        0.0..self.top()
    }
}

/// Tick positions at whole multiples of a round time step (10 s, 5 min, 1 h,
/// ...), at most 8 over the span.
fn ticks(start: u64, end: u64) -> Vec<u64> {
    const STEPS: [u64; 17] = [
        1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10_800, 21_600, 43_200,
    ];
    let span = end.saturating_sub(start).max(1);
    let step = STEPS
        .iter()
        .copied()
        .find(|s| span / s <= 8)
        .unwrap_or_else(|| span.div_ceil(8 * 86_400) * 86_400);
    let first = start.div_ceil(step) * step;
    (0..)
        .map(|i| first + i * step)
        .take_while(|t| *t <= end)
        .collect()
}

/// `HH:MM` (spans over an hour) or `HH:MM:SS`, UTC, of a second since the epoch.
fn clock(sec: u64, long: bool) -> String {
    let (h, m, s) = (sec / 3600 % 24, sec / 60 % 60, sec % 60);
    if long {
        format!("{h:02}:{m:02}")
    } else {
        format!("{h:02}:{m:02}:{s:02}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::Request;

    fn labels(y: &YAxis) -> Vec<String> {
        y.ticks().iter().map(|v| y.label(*v)).collect()
    }

    #[test]
    fn a_small_axis_reads_in_halves() {
        // The axis that read "0, 0, 1, 1, 2, 2" before.
        let y = YAxis::new(2.3);
        assert_eq!(labels(&y), ["0.0", "0.5", "1.0", "1.5", "2.0", "2.5"]);
        assert_eq!(
            labels(&YAxis::new(220.0)),
            ["0", "50", "100", "150", "200", "250"]
        );
        // No peak (nothing offered): the axis of a peak of 1.
        assert_eq!(labels(&YAxis::new(0.0)), labels(&YAxis::new(1.0)));
        assert_eq!(
            labels(&YAxis::new(1.0)),
            ["0.00", "0.25", "0.50", "0.75", "1.00", "1.25"]
        );
    }

    #[test]
    fn tick_labels_are_distinct_round_and_cover_the_peak() {
        let mut peak = 0.01;
        while peak < 1e7 {
            let y = YAxis::new(peak);
            let l = labels(&y);
            let mut unique = l.clone();
            unique.dedup();
            assert_eq!(unique, l, "repeated labels for a peak of {peak}: {l:?}");
            assert!((2..=6).contains(&l.len()), "peak {peak}: {l:?}");
            assert!(y.top() >= peak, "peak {peak} above the axis {}", y.top());
            for (v, text) in y.ticks().iter().zip(&l) {
                let back: f64 = text.parse().unwrap();
                assert!((back - v).abs() <= v.abs() * 1e-9 + 1e-12, "{text} for {v}");
            }
            peak *= 1.013;
        }
    }

    /// The numbers printed in a chart with one panel: its y tick labels (the x
    /// labels are clock times and the title's dates do not parse as numbers).
    fn numbers_in(svg: &str) -> Vec<String> {
        svg.split("<text")
            .skip(1)
            .filter_map(|t| {
                t.split_once('>')
                    .and_then(|(_, rest)| rest.split_once("</text>"))
            })
            .map(|(text, _)| text.trim().to_owned())
            .filter(|t| t.parse::<f64>().is_ok())
            .collect()
    }

    #[test]
    fn idle_rules_are_listed_once_and_y_labels_never_repeat() {
        let policy = sluicegate_policy::Policy::from_toml(
            "[[rule]]\nname = \"quiet\"\nmatch = { path = \"/a\" }\nlimit = \"1/s burst 2\"\n\n\
             [[rule]]\nname = \"idle\"\nmatch = { path = \"/never\" }\nlimit = \"5/s\"\n\n\
             [[rule]]\nname = \"also-idle\"\nmatch = { path = \"/nor-this\" }\nlimit = \"5/s\"\n",
        )
        .unwrap();
        let mut replay = Replay::new(policy);
        // At most 2 requests a second for 30 s: an axis from 0 to about 2.
        for i in 0..60u64 {
            let time_ns = 1_700_000_000_000_000_000 + i * 500_000_000;
            replay.check(&Request {
                time_ns,
                path: Some("/a".into()),
                ..Request::default()
            });
        }
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("chart.svg");
        draw(&replay, &path).unwrap();
        let svg = std::fs::read_to_string(&path).unwrap();
        assert!(svg.contains("quiet (1/s burst 2, token_bucket, enforce)"));
        assert_eq!(
            svg.matches("No request matched: idle, also-idle").count(),
            1
        );
        assert!(
            !svg.contains("idle (5/s"),
            "an idle rule was drawn as a panel"
        );
        let numbers = numbers_in(&svg);
        let mut unique = numbers.clone();
        unique.sort();
        unique.dedup();
        assert!(numbers.len() >= 3, "no y labels found: {numbers:?}");
        assert_eq!(
            unique.len(),
            numbers.len(),
            "repeated y labels: {numbers:?}"
        );
    }
}
