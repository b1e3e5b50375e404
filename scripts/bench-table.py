#!/usr/bin/env python3
"""Prints the benchmark table (markdown) from criterion's JSON output.

Reads <criterion dir>/<group>/<bench>/new/{benchmark,estimates}.json for the groups
`direct` (one thread) and `contended_2t` (two threads on one limiter), takes each
benchmark's median, and prints the medians, the ratios the project targets, and
whether each target is met. Every ratio is between two benchmarks of the same run:
with --since, results older than that time (an earlier run) are ignored.

Usage: bench-table.py [--since EPOCH_SECONDS] CRITERION_DIR
Python 3 standard library only.
"""

import argparse
import json
import os
import sys

DIRECT = "direct"
CONTENDED = "contended_2t"

GOVERNOR = "governor check"
TOKEN_BUCKET = "token_bucket check_at"

# (row, what it is) in table order.
ANCHOR_ROWS = [
    ("sluicegate check_at", "ours, time passed in"),
    ("sluicegate check", "ours, default clock (quanta)"),
    ("sluicegate check_n(4)", "ours, cost 4, default clock"),
    ("governor check", "governor 0.10 direct, quanta clock"),
    ("governor check_n(4)", "governor, cost 4"),
    ("ratelimit try_wait", "ratelimit 2.0, Instant clock"),
    ("mutex_bucket allow", "Mutex token bucket like Go's x/time/rate"),
    ("floor cas", "reference: one uncontended AtomicU64 CAS"),
    ("floor quanta_now", "reference: one quanta clock read"),
]
CONTENDED_ROWS = [
    "sluicegate check_at",
    "sluicegate check",
    "governor check",
    "ratelimit try_wait",
    "mutex_bucket allow",
]
ALGORITHM_ROWS = [
    ("token_bucket check_at", "GCRA (the baseline)"),
    ("leaky_bucket check_at", "leaky bucket meter"),
    ("fixed_window check_at", "fixed window"),
    ("sliding_window check_at", "sliding window counter"),
    ("sliding_log check_at", "sliding window log (exact)"),
    ("shaper reserve_at", "leaky bucket shaper"),
    ("compound2 check_at", "2 GCRA limits, all-or-nothing"),
]
WINDOWS = ["fixed_window check_at", "sliding_window check_at", "sliding_log check_at"]

# (numerator group, numerator, denominator group, denominator, target).
TARGETS = [
    (DIRECT, "sluicegate check_at", DIRECT, GOVERNOR, 0.6),
    (DIRECT, "sluicegate check", DIRECT, GOVERNOR, 1.0),
] + [(DIRECT, w, DIRECT, TOKEN_BUCKET, 1.3) for w in WINDOWS]


def load(root, since):
    """{group: {function_id: median_ns}} for results written at or after `since`."""
    results = {}
    for group in (DIRECT, CONTENDED):
        gdir = os.path.join(root, group)
        if not os.path.isdir(gdir):
            continue
        for bench in sorted(os.listdir(gdir)):
            new = os.path.join(gdir, bench, "new")
            est_path = os.path.join(new, "estimates.json")
            meta_path = os.path.join(new, "benchmark.json")
            if not (os.path.isfile(est_path) and os.path.isfile(meta_path)):
                continue
            if since is not None and os.path.getmtime(est_path) < since:
                continue
            with open(meta_path, encoding="utf-8") as f:
                name = json.load(f)["function_id"]
            with open(est_path, encoding="utf-8") as f:
                median = json.load(f)["median"]["point_estimate"]
            results.setdefault(group, {})[name] = median
    return results


def ns(v):
    return "—" if v is None else f"{v:.2f}"


def ratio(a, b):
    return None if a is None or b is None or b == 0 else a / b


def fmt_ratio(r):
    return "—" if r is None else f"{r:.2f}×"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("criterion_dir")
    ap.add_argument("--since", type=float, default=None)
    args = ap.parse_args()

    res = load(args.criterion_dir, args.since)
    if not res:
        sys.exit(f"bench-table: no criterion results in {args.criterion_dir}")
    one = res.get(DIRECT, {})
    two = res.get(CONTENDED, {})
    gov = one.get(GOVERNOR)
    tb = one.get(TOKEN_BUCKET)

    out = []
    out.append("#### One thread (criterion group `direct`), token-bucket contenders")
    out.append("")
    out.append("| benchmark | what | median (ns) | vs `governor check` |")
    out.append("|---|---|---:|---:|")
    for row, what in ANCHOR_ROWS:
        v = one.get(row)
        out.append(f"| `{row}` | {what} | {ns(v)} | {fmt_ratio(ratio(v, gov))} |")
    out.append("")
    out.append("#### One thread, every sluicegate algorithm (same quota, time passed in)")
    out.append("")
    out.append("| benchmark | algorithm | median (ns) | vs `token_bucket check_at` |")
    out.append("|---|---|---:|---:|")
    for row, what in ALGORITHM_ROWS:
        v = one.get(row)
        out.append(f"| `{row}` | {what} | {ns(v)} | {fmt_ratio(ratio(v, tb))} |")
    out.append("")
    out.append("#### Two threads on one limiter (group `contended_2t`), wall time per call")
    out.append("")
    out.append("| benchmark | 1 thread (ns) | 2 threads (ns/call) | 2 threads / 1 thread |")
    out.append("|---|---:|---:|---:|")
    for row in CONTENDED_ROWS:
        a, b = one.get(row), two.get(row)
        out.append(f"| `{row}` | {ns(a)} | {ns(b)} | {fmt_ratio(ratio(b, a))} |")
    out.append("")
    out.append("(0.50× would be perfect scaling over two cores; above 1.00× the two")
    out.append("threads slow each other down.)")
    out.append("")
    out.append("#### Targets (ratios of medians from this one run)")
    out.append("")
    out.append("| ratio | value | target | result |")
    out.append("|---|---:|---:|---|")
    missed = 0
    for ng, num, dg, den, target in TARGETS:
        r = ratio(res.get(ng, {}).get(num), res.get(dg, {}).get(den))
        if r is None:
            result = "not measured"
        elif r <= target:
            result = "met"
        else:
            result = "**missed**"
            missed += 1
        out.append(f"| `{num}` / `{den}` | {fmt_ratio(r)} | ≤ {target:.1f}× | {result} |")
    print("\n".join(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
