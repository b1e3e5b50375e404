//! The demo's numbers obey each algorithm's guarantee, and its chart is written.

use sluicegate_demo::*;

fn outcome<'a>(sim: &'a Simulation, name: &str) -> &'a Outcome {
    match sim.outcomes.iter().find(|o| o.name == name) {
        Some(o) => o,
        None => panic!("no outcome named {name}"),
    }
}

fn sim() -> Simulation {
    match simulate() {
        Ok(s) => s,
        Err(e) => panic!("invalid demo quota: {e}"),
    }
}

#[test]
fn every_request_is_admitted_or_denied() {
    let sim = sim();
    assert_eq!(sim.outcomes.len(), 7);
    for o in &sim.outcomes {
        assert_eq!(o.offered, sim.arrivals.len(), "{}", o.name);
        assert_eq!(o.offered, o.admitted.len() + o.denied, "{}", o.name);
        // The traffic is bursty enough that every limiter has work to do.
        assert!(o.denied > 0 && !o.admitted.is_empty(), "{}", o.name);
    }
}

#[test]
fn token_bucket_admits_at_most_burst_plus_rate_in_any_window() {
    let sim = sim();
    let bound = usize::try_from(BURST + RATE).unwrap_or(usize::MAX);
    for name in ["token bucket (GCRA)", "leaky bucket meter"] {
        let o = outcome(&sim, name);
        assert!(max_in_any_window(&o.admitted, WINDOW_NS) <= bound, "{name}");
    }
}

#[test]
fn shaper_delays_stay_within_the_max_and_shaped_times_conform() {
    let sim = sim();
    let o = outcome(&sim, "leaky bucket shaper");
    assert_eq!(o.delays.len(), o.admitted.len());
    assert!(o.delays.iter().all(|&d| d <= MAX_DELAY_NS));
    assert!(o.delays.iter().any(|&d| d > 0));
    let bound = usize::try_from(BURST + RATE).unwrap_or(usize::MAX);
    assert!(max_in_any_window(&o.admitted, WINDOW_NS) <= bound);
    // Queueing instead of denying admits more than the bucket does.
    assert!(o.admitted.len() > outcome(&sim, "token bucket (GCRA)").admitted.len());
}

#[test]
fn windows_admit_at_most_the_limit_per_aligned_window() {
    let sim = sim();
    let limit = usize::try_from(RATE).unwrap_or(usize::MAX);
    for name in [
        "fixed window",
        "sliding window counter",
        "compound: 10/s + 300/min",
    ] {
        let o = outcome(&sim, name);
        assert!(
            max_in_aligned_window(&o.admitted, WINDOW_NS) <= limit,
            "{name}"
        );
    }
    // The fixed window's known weakness shows: more than the limit across a boundary.
    assert!(max_in_any_window(&outcome(&sim, "fixed window").admitted, WINDOW_NS) > limit);
}

#[test]
fn log_admits_at_most_the_limit_in_any_window() {
    let sim = sim();
    let o = outcome(&sim, "sliding window log");
    let limit = usize::try_from(RATE).unwrap_or(usize::MAX);
    assert_eq!(max_in_any_window(&o.admitted, WINDOW_NS), limit);
}

#[test]
fn compound_keeps_the_per_minute_limit() {
    let sim = sim();
    let o = outcome(&sim, "compound: 10/s + 300/min");
    let per_minute = usize::try_from(PER_MINUTE).unwrap_or(usize::MAX);
    assert!(max_in_aligned_window(&o.admitted, 60 * WINDOW_NS) <= per_minute);
    // It binds: the per-second limit alone admits more.
    assert!(outcome(&sim, "sliding window counter").admitted.len() > o.admitted.len());
}

#[test]
fn window_measures_are_exact() {
    // Across an aligned boundary: (1, 11] holds all four, each aligned window two.
    let t = [8, 9, 10, 11];
    assert_eq!(max_in_any_window(&t, 10), 4);
    assert_eq!(max_in_aligned_window(&t, 10), 2);
    // Half-open: 0 has left (0, 10] when 10 arrives.
    assert_eq!(max_in_any_window(&[0, 9, 10, 19], 10), 2);
    assert_eq!(max_in_any_window(&[5, 5, 5], 1), 3);
    assert_eq!(max_in_any_window(&[], 10), 0);
    // Against a brute force over every half-open interval ending at an admission.
    let mut rng = XorShift::new(3);
    let mut times: Vec<u64> = (0..300).map(|_| rng.between(0, 5_000)).collect();
    times.sort_unstable();
    let brute = times
        .iter()
        .map(|&end| times.iter().filter(|&&x| x <= end && x + 100 > end).count())
        .max()
        .unwrap_or(0);
    assert_eq!(max_in_any_window(&times, 100), brute);
}

#[test]
fn chart_is_an_svg_with_one_series_per_algorithm() {
    let sim = sim();
    let dir = std::env::temp_dir().join(format!("sluicegate-demo-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{e}"));
    let path = dir.join("chart.svg");
    write_chart(&sim, &path).unwrap_or_else(|e| panic!("{e}"));
    let svg = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{e}"));
    std::fs::remove_dir_all(&dir).unwrap_or_else(|e| panic!("{e}"));

    assert!(svg.starts_with("<svg"));
    assert!(svg.trim_end().ends_with("</svg>"));
    for o in &sim.outcomes {
        assert!(svg.contains(&format!("admitted: {}", o.name)), "{}", o.name);
    }
    // Each algorithm's colour draws its data line (in several polylines) and its
    // legend mark; the offered line is grey in every panel.
    assert_eq!(COLORS.len(), sim.outcomes.len());
    for (o, c) in sim.outcomes.iter().zip(COLORS) {
        let stroke = format!("stroke=\"#{:02X}{:02X}{:02X}\"", c.0, c.1, c.2);
        let lines = svg
            .lines()
            .filter(|l| l.starts_with("<polyline") && l.contains(&stroke));
        assert!(lines.count() >= 2, "{}", o.name);
    }
    assert!(svg.contains("simulated time (s)"));
    assert!(svg.contains("per 100 ms"));
}
