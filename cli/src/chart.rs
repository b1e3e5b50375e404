//! `--chart`: per rule, offered vs admitted requests per second over the log's
//! span, as SVG, or PNG when the path ends in `.png`.
//!
//! Text is laid out (and, in PNG, drawn) with DejaVu Sans, embedded in the binary
//! (the `dejavu` crate), so a chart needs no system font; `$SLUICEGATE_FONT` names
//! another TrueType/OpenType file to use instead.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use anyhow::{Context, Result, anyhow, bail};
use plotters::coord::Shift;
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
    let rules = replay.rules().len().max(1);
    let size = (1000, 60 + 240 * rules as u32);
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
    let start = span.map_or(0, |s| s.0 / 1_000_000_000);
    let end = span.map_or(1, |s| s.1 / 1_000_000_000 + 1).max(start + 1);
    let long = end - start > 3600;
    for (rule, area) in replay
        .rules()
        .iter()
        .zip(body.split_evenly((replay.rules().len(), 1)))
    {
        let w = rule.series.width() as f64;
        let points = rule.series.points();
        let peak = points.iter().map(|p| p.1 as f64 / w).fold(1.0f64, f64::max);
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
            .build_cartesian_2d(
                (start..end).with_key_points(ticks(start, end)),
                0f64..peak * 1.1,
            )
            .map_err(err)?;
        chart
            .configure_mesh()
            .x_labels(12)
            .y_labels(5)
            .x_label_formatter(&|s| clock(*s, long))
            .y_label_formatter(&|v| format!("{v:.0}"))
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
