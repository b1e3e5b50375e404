"""Policies at scale, from Python: ``Policy.check`` and ``Policy.from_str`` at
10, 100, 1,000 and 10,000 rules for three rule sets (exact attribute, path
prefix, CIDR block; a request matches at most 3 rules), and the resident set
of a policy of 5,000 keyed rules after 10,000 distinct keys (issue 25's
targets: check at 10,000 rules <= 1.5x at 10; compile 10,000 rules <= 2 s;
RSS <= 200 MiB for the whole process).

    .venv/bin/python python/bench_scale.py          # after scripts/test-python
    .venv/bin/python python/bench_scale.py --memory # the RSS case alone (run it in
                                                    # a fresh process: RSS is the
                                                    # process's whole)

Times are medians of several repeats of N checks, on this machine, in this run:
quote the ratios, not the absolute figures.
"""

from __future__ import annotations

import statistics
import sys
import time

import sluicegate

SIZES = (10, 100, 1_000, 10_000)
N = 50_000  # checks per repeat
REPEATS = 7


def exact(n: int) -> tuple[str, dict[str, str]]:
    rules = "".join(
        f'[[rule]]\nname = "t{i}"\nmatch = {{ tenant = "t{i}" }}\nkey = ["ip"]\nlimit = "1000000/second"\n'
        for i in range(n)
    )
    return rules, {"tenant": f"t{n // 2}", "ip": "192.0.2.1"}


def prefix(n: int) -> tuple[str, dict[str, str]]:
    rules = "".join(
        f'[[rule]]\nname = "p{i}"\nmatch = {{ path = "/p{i}/*" }}\nkey = ["ip"]\nlimit = "1000000/second"\n'
        for i in range(n)
    )
    return rules, {"path": f"/p{n // 2}/items/7", "ip": "192.0.2.1"}


def cidr(n: int) -> tuple[str, dict[str, str]]:
    rules = "".join(
        f'[[rule]]\nname = "c{i}"\nmatch = {{ ip = "10.{i // 256}.{i % 256}.0/24" }}\nlimit = "1000000/second"\n'
        for i in range(n)
    )
    k = n // 2
    return rules, {"ip": f"10.{k // 256}.{k % 256}.9"}


def median_ns(policy: sluicegate.Policy, attrs: dict[str, str]) -> float:
    check = policy.check
    times = []
    for _ in range(REPEATS):
        t0 = time.perf_counter_ns()
        for _ in range(N):
            check(**attrs)
        times.append((time.perf_counter_ns() - t0) / N)
    return statistics.median(times)


def rss_mib() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def memory(rules: int = 5_000, keys: int = 10_000) -> None:
    before = rss_mib()
    text = "".join(
        f'[[rule]]\nname = "tenant-{i}"\nmatch = {{ tenant = "t{i}" }}\nkey = ["ip"]\nlimit = "100/minute"\n'
        for i in range(rules)
    )
    t0 = time.perf_counter()
    policy = sluicegate.Policy.from_str(text)
    built = time.perf_counter() - t0
    for k in range(keys):
        policy.check(tenant=f"t{k % rules}", ip=f"10.{(k >> 16) & 255}.{(k >> 8) & 255}.{k & 255}")
    print("| rules | keys seen | build | RSS before | RSS after (whole process) |")
    print("|---:|---:|---:|---:|---:|")
    print(f"| {rules} | {keys} | {built * 1e3:.0f} ms | {before:.1f} MiB | {rss_mib():.1f} MiB |")


def main() -> None:
    if "--memory" in sys.argv:
        memory()
        return
    print("| rule set | " + " | ".join(f"{n:,} rules" for n in SIZES) + " | 10,000 / 10 |")
    print("|---|" + "---:|" * (len(SIZES) + 1))
    compile_rows = []
    for name, make in (("exact", exact), ("prefix", prefix), ("cidr", cidr)):
        checks, builds = [], []
        for n in SIZES:
            text, attrs = make(n)
            t0 = time.perf_counter()
            policy = sluicegate.Policy.from_str(text)
            builds.append(time.perf_counter() - t0)
            checks.append(median_ns(policy, attrs))
        print(
            f"| check, {name} | "
            + " | ".join(f"{c / 1000:.2f} µs" for c in checks)
            + f" | {checks[-1] / checks[0]:.2f}x |"
        )
        compile_rows.append((name, builds))
    for name, builds in compile_rows:
        print(f"| from_str, {name} | " + " | ".join(f"{b * 1e3:.0f} ms" for b in builds) + " | |")


if __name__ == "__main__":
    main()
