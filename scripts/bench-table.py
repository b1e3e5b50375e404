#!/usr/bin/env python3
"""Prints the benchmark tables (markdown) from criterion's JSON output.

Reads <criterion dir>/<group>/<bench>/new/{benchmark,estimates}.json for the groups
`direct` (one thread), `contended_2t` (two threads on one limiter), `striped_1t` /
`striped_2t` (the striped limiter, one and two threads) and `keyed_1` /
`keyed_100k` / `keyed_1m` (keyed limiters), takes each benchmark's median, and
prints the medians, the ratios the project targets, and whether each target is
met. Every ratio is between two benchmarks of the same run: with --since, results
older than that time (an earlier run) are ignored.

--log FILE: the bench run's output; its `keyed-stats:` lines give how many keys
our keyed tables tracked and how many evictions the timed calls made.
--memory FILE: the output of the keyed_memory example (resident bytes per key);
its table is reprinted, with the bytes per slot of the 1M-slot table.

Usage: bench-table.py [--since EPOCH_SECONDS] [--log FILE] [--memory FILE] CRITERION_DIR
Python 3 standard library only.
"""

import argparse
import json
import os
import sys

DIRECT = "direct"
CONTENDED = "contended_2t"
STRIPED_1T = "striped_1t"
STRIPED_2T = "striped_2t"
# (group, column title) in table order.
KEYED_GROUPS = [("keyed_1", "1 hot key"), ("keyed_100k", "100k keys"), ("keyed_1m", "1M keys")]
GROUPS = [DIRECT, CONTENDED, STRIPED_1T, STRIPED_2T] + [g for g, _ in KEYED_GROUPS]

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

KEYED_GOVERNOR = "governor check_key"
KEYED_ROWS = [
    ("sluicegate check_at", "ours, `u64` keys, time passed in"),
    ("sluicegate check", "ours, `u64` keys, default clock"),
    ("sluicegate check (String)", "ours, `String` keys, default clock"),
    ("governor check_key", "governor 0.10 keyed (DashMap), `u64` keys"),
    ("governor check_key (String)", "governor keyed, `String` keys"),
    ("rwlock_hashmap allow (String)", "seeds' `RwLock<HashMap<String, Mutex<bucket>>>`"),
    ("floor slot add", "reference: one atomic add on the key's slot of an array our table's size"),
    ("floor quanta_now + slot add", "reference: the same after a quanta clock read"),
    ("floor dependent miss", "reference: one load that waits for the previous one (a miss's latency)"),
]
# (row, what, group of the 1-thread time, group of the 2-thread time).
STRIPED_ROWS = [
    ("striped2 check_at_stripe", "`Striped<2>`, own stripe, time passed in", STRIPED_1T, STRIPED_2T),
    ("striped2 check", "`Striped<2>`, thread-local stripe, default clock", STRIPED_1T, STRIPED_2T),
    ("striped4 check_at_stripe", "`Striped<4>`, own stripe, time passed in", STRIPED_1T, STRIPED_2T),
    ("striped4 check", "`Striped<4>`, thread-local stripe, default clock", STRIPED_1T, STRIPED_2T),
    ("sluicegate check_at", "one `TokenBucket`, time passed in", DIRECT, CONTENDED),
    ("sluicegate check", "one `TokenBucket`, default clock", DIRECT, CONTENDED),
    ("governor check", "governor direct", DIRECT, CONTENDED),
]
# (numerator group, numerator, denominator group, denominator, target): issue 16's
# goals, each a ratio of two medians from this one run. `check_at` was at 0.54×
# when the goals were set: "keep" is held to 0.6×.
TARGETS = [
    (DIRECT, "sluicegate check", DIRECT, GOVERNOR, 0.9),
    (DIRECT, "sluicegate check_n(4)", DIRECT, "governor check_n(4)", 0.9),
    (DIRECT, "sluicegate check_at", DIRECT, GOVERNOR, 0.6),
    ("keyed_1m", "sluicegate check", "keyed_1m", KEYED_GOVERNOR, 0.45),
    (DIRECT, "sliding_log check_at", DIRECT, TOKEN_BUCKET, 2.0),
    (DIRECT, "compound2 check_at", DIRECT, TOKEN_BUCKET, 2.0),
]
# Measured outside criterion (python/bench.py and the ASGI middleware benchmark);
# printed so the table lists every goal of issue 16.
OTHER_TARGETS = [
    ("ASGI middleware per request", "≤ 5 µs", "python/bench.py --asgi"),
    ("Python `check()` / an empty Python call", "≤ 2.0×", "python/bench.py"),
]

def load(root, since):
    """{group: {function_id: median_ns}} for results written at or after `since`."""
    results = {}
    for group in GROUPS:
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


def keyed_stats(path):
    """{"group/id": {field: int}} from the `keyed-stats:` lines of a bench log."""
    stats = {}
    if not path or not os.path.isfile(path):
        return stats
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            if not line.startswith("keyed-stats: "):
                continue
            fields = line[len("keyed-stats: "):].rstrip("\n").split("\t")
            stats[fields[0]] = {
                k: int(v) for k, v in (x.split("=", 1) for x in fields[1:] if "=" in x)
            }
    return stats


def memory_table(path):
    """(markdown lines, bytes per slot of the 1M-slot full table or None)."""
    if not path or not os.path.isfile(path):
        return [], None
    lines, per_slot = [], None
    with open(path, encoding="utf-8") as f:
        for line in f:
            if not line.startswith("|"):
                continue
            lines.append(line.rstrip("\n"))
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if len(cells) >= 7 and cells[0] == "sluicegate-full" and cells[5] == "1000000":
                per_slot = int(cells[3]) / int(cells[5])
    return lines, per_slot


def verdict(value, target, at_most):
    if value is None:
        return "not measured", 0
    if (value <= target) if at_most else (value >= target):
        return "met", 0
    return "**missed**", 1


def median_table(out, title, kind, rows, results, base):
    """A section of `out`: each of `rows` (name, description) with its median and
    its ratio to the `base` row of the same `results`."""
    out += [title, "", f"| benchmark | {kind} | median (ns) | vs `{base}` |", "|---|---|---:|---:|"]
    for row, what in rows:
        v = results.get(row)
        out.append(f"| `{row}` | {what} | {ns(v)} | {fmt_ratio(ratio(v, results.get(base)))} |")
    out.append("")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("criterion_dir")
    ap.add_argument("--since", type=float, default=None)
    ap.add_argument("--log", default=None)
    ap.add_argument("--memory", default=None)
    args = ap.parse_args()

    res = load(args.criterion_dir, args.since)
    if not res:
        sys.exit(f"bench-table: no criterion results in {args.criterion_dir}")
    one = res.get(DIRECT, {})
    two = res.get(CONTENDED, {})
    kstats = keyed_stats(args.log)
    mem_lines, per_slot = memory_table(args.memory)

    out = []
    median_table(
        out, "#### One thread (criterion group `direct`), token-bucket contenders", "what", ANCHOR_ROWS, one, GOVERNOR
    )
    median_table(
        out,
        "#### One thread, every sluicegate algorithm (same quota, time passed in)",
        "algorithm",
        ALGORITHM_ROWS,
        one,
        TOKEN_BUCKET,
    )
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
    if any(res.get(g) for g, _ in KEYED_GROUPS):
        out.append("#### Keyed limiters, one thread (groups `keyed_1`, `keyed_100k`, `keyed_1m`)")
        out.append("")
        out.append("Median ns per check; ratios vs `governor check_key` (`u64` keys) in the same")
        out.append("group. Our tables: 1.25 slots per key.")
        out.append("")
        head = "| benchmark | what |"
        rule = "|---|---|"
        for _, title in KEYED_GROUPS:
            head += f" {title} (ns) | vs governor |"
            rule += "---:|---:|"
        out.append(head)
        out.append(rule)
        for row, what in KEYED_ROWS:
            line = f"| `{row}` | {what} |"
            for g, _ in KEYED_GROUPS:
                grp = res.get(g, {})
                v = grp.get(row)
                line += f" {ns(v)} | {fmt_ratio(ratio(v, grp.get(KEYED_GOVERNOR)))} |"
            out.append(line)
        out.append("")
        if kstats:
            out.append("Our tables with every key live (one entry per key, 16 candidate slots each):")
            out.append("")
            out.append("| table | keys | slots | keys tracked | evictions per 1,000 timed calls |")
            out.append("|---|---:|---:|---:|---:|")
            for g, _ in KEYED_GROUPS[1:]:
                for row, _ in KEYED_ROWS[:3]:
                    st = kstats.get(f"{g}/{row}")
                    if not st:
                        continue
                    calls = st.get("calls_timed", 0)
                    per_k = 1000 * st.get("evicted_timed", 0) / calls if calls else None
                    out.append(
                        f"| `{g}/{row}` | {st.get('keys')} | {st.get('slots')} | "
                        f"{st.get('tracked')} | {'—' if per_k is None else f'{per_k:.1f}'} |"
                    )
            out.append("")
    if res.get(STRIPED_1T) or res.get(STRIPED_2T):
        out.append(
            "#### One hot key, 1 and 2 threads (groups `striped_1t`/`striped_2t`, "
            "`direct`/`contended_2t`)"
        )
        out.append("")
        out.append("| benchmark | what | 1 thread (ns) | 2 threads (ns/call) | throughput, 2 threads / 1 |")
        out.append("|---|---|---:|---:|---:|")
        for row, what, g1, g2 in STRIPED_ROWS:
            a, b = res.get(g1, {}).get(row), res.get(g2, {}).get(row)
            out.append(f"| `{row}` | {what} | {ns(a)} | {ns(b)} | {fmt_ratio(ratio(a, b))} |")
        out.append("")
        out.append("(2.00× would be perfect scaling over two cores; below 1.00× the second")
        out.append("thread costs throughput.)")
        out.append("")
    if mem_lines:
        out.append("#### Keyed memory, resident set (`keyed_memory` example)")
        out.append("")
        out.extend(mem_lines)
        out.append("")
    out.append("#### Targets (ratios of medians from this one run)")
    out.append("")
    out.append("| ratio | value | target | result |")
    out.append("|---|---:|---:|---|")
    missed = 0
    for ng, num, dg, den, target in TARGETS:
        r = ratio(res.get(ng, {}).get(num), res.get(dg, {}).get(den))
        result, m = verdict(r, target, True)
        missed += m
        den_name = den if ng == dg == DIRECT else f"{dg}/{den}"
        num_name = num if ng == DIRECT else f"{ng}/{num}"
        out.append(f"| `{num_name}` / `{den_name}` | {fmt_ratio(r)} | ≤ {target:.2f}× | {result} |")
    for what, target, command in OTHER_TARGETS:
        out.append(f"| {what} | — | {target} | measured by `{command}` |")
    if per_slot is not None:
        out.append("")
        out.append(f"Resident bytes per slot, 1M-slot table: {per_slot:.3f} B.")
    print("\n".join(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
