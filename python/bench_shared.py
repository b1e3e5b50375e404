"""``shared=`` from Python: ``KeyedLimiter.check(key)`` and ``TokenBucket.check()``
on a shared-memory region against the same limiter in process memory (issue 26's
target: keyed <= 1.3x).

    .venv/bin/python python/bench_shared.py        # after scripts/test-python

Times are medians of interleaved repeats in this run: quote the ratios.
"""

from __future__ import annotations

import statistics
import time
import uuid

import sluicegate

KEYS = 100_000
N = 200_000  # checks per repeat
REPEATS = 7
LIMIT = "1000000/second"  # every check admitted, every key live


def per_check(f, keys: list[str]) -> float:
    t = time.perf_counter_ns()
    n = len(keys)
    for i in range(N):
        f(keys[i % n])
    return (time.perf_counter_ns() - t) / N


def main() -> None:
    region = f"/dev/shm/sluicegate-bench-{uuid.uuid4().hex}"
    keys = [f"client-{(i * 2654435761) % (1 << 32):010d}" for i in range(KEYS)]
    try:
        slots = KEYS * 5 // 4
        # The region the size of the in-process table (16 bytes a slot, and its
        # sketch), as the Rust benchmark compares them: the default 16 MiB
        # region spreads the same keys over 8 times the memory (and the TLB).
        sluicegate.shared.open(region, memory=slots * 16 + slots // 2)
        local = sluicegate.KeyedLimiter(LIMIT, capacity=KEYS * 5 // 4)
        shared = sluicegate.KeyedLimiter(LIMIT, capacity=KEYS * 5 // 4, shared=region)
        single_local = sluicegate.TokenBucket(LIMIT)
        single_shared = sluicegate.TokenBucket(LIMIT, shared=region)
        for k in keys:  # place every key first
            local.check(k)
            shared.check(k)
        rows: dict[str, list[float]] = {}
        for _ in range(REPEATS):
            for name, f, ks in (
                ("keyed 100k, in-process", local.check, keys),
                ("keyed 100k, shared", shared.check, keys),
                ("single, in-process", lambda _k: single_local.check(), keys[:1]),
                ("single, shared", lambda _k: single_shared.check(), keys[:1]),
            ):
                rows.setdefault(name, []).append(per_check(f, ks))
        med = {k: statistics.median(v) for k, v in rows.items()}
        for name, ns in med.items():
            print(f"{name:28} {ns:8.1f} ns/check")
        print(f"keyed ratio  shared/in-process: {med['keyed 100k, shared'] / med['keyed 100k, in-process']:.2f}x")
        print(f"single ratio shared/in-process: {med['single, shared'] / med['single, in-process']:.2f}x")
    finally:
        sluicegate.shared.unlink(region)


if __name__ == "__main__":
    main()
