"""Hybrid mode at many keys from Python (issue 28's target): a
``RedisKeyedLimiter("20/second", hybrid=True, lease_horizon=1.0, lease_ttl=2.0)``
with 1,000 keys, each checked 10 times a second (half its rate) for 5 s, from
one thread: the share answered locally (``hybrid_stats``) and Redis script
calls per check (``INFO commandstats``), for each algorithm, beside the default
lease settings and plain Redis in the same run. Every key's admissions are
checked against the bound (all of them: the keys stay under their rate).

    .venv/bin/python python/bench_hybrid.py redis://127.0.0.1:6379

Target: >= 90 % local with the settings above.
"""

from __future__ import annotations

import socket
import sys
import time
import urllib.parse
import uuid
from typing import Any

import sluicegate

KEYS = 1000
PER_SECOND = 10  # checks of each key a second
SECONDS = 5.0


def script_calls(url: str) -> int:
    """EVALSHA, EVAL and FCALL calls so far (``INFO commandstats``)."""
    u = urllib.parse.urlsplit(url)
    with socket.create_connection((u.hostname or "127.0.0.1", u.port or 6379)) as s:
        s.sendall(b"INFO commandstats\r\n")
        f = s.makefile("rb")
        header = f.readline()
        assert header.startswith(b"$"), header
        body = f.read(int(header[1:]) + 2).decode()
    calls = 0
    for line in body.splitlines():
        for cmd in ("evalsha", "eval", "fcall"):
            if line.startswith(f"cmdstat_{cmd}:"):
                calls += int(line.split("calls=")[1].split(",")[0])
    return calls


def run(url: str, algorithm: str, **kw: Any) -> str:
    lim = sluicegate.RedisKeyedLimiter(
        "20/second",
        name=f"bench-hybrid-{uuid.uuid4().hex}",
        redis=sluicegate.RedisOptions(url, timeout=0.5),
        algorithm=algorithm,  # type: ignore[arg-type]
        **kw,
    )
    keys = [f"user-{i}" for i in range(KEYS)]
    admitted = dict.fromkeys(keys, 0)
    before = script_calls(url)
    start = time.monotonic()
    tick = 1.0 / PER_SECOND
    checks = 0
    late = 0.0
    for t in range(int(SECONDS * PER_SECOND)):
        # Each key once per tick, spread over the tick.
        for i, k in enumerate(keys):
            at = start + t * tick + tick * i / KEYS
            wait = at - time.monotonic()
            if wait > 0.0005:
                time.sleep(wait)
            else:
                late = max(late, -wait)
            if lim.check(k):
                admitted[k] += 1
            checks += 1
    elapsed = time.monotonic() - start
    calls = script_calls(url) - before
    stats = lim.hybrid_stats
    local = f"{100 * stats['local'] / checks:.1f} % local" if stats else "plain redis"
    denied = checks - sum(admitted.values())
    # The bound: every key is under its rate, so all are admitted, and never more
    # than b + r·(Δ + L) (trivially, as no key asks for more than half its rate).
    most = max(admitted.values())
    assert most <= 20 + 20 * (elapsed + kw.get("lease_ttl", 0.5)), most
    return (
        f"{algorithm:>14} {str(kw or 'defaults'):>55}: {local}, "
        f"{calls / checks:.3f} script calls per check ({calls} calls, {checks} checks in {elapsed:.1f} s, "
        f"worst lag {1000 * late:.1f} ms), {denied} denied, at most {most} admitted per key"
    )


def main() -> None:
    url = sys.argv[1] if len(sys.argv) > 1 else "redis://127.0.0.1:6379"
    target = {"hybrid": True, "lease_horizon": 1.0, "lease_ttl": 2.0}
    for algorithm in ("token_bucket", "fixed_window", "sliding_window"):
        print(run(url, algorithm, **target), flush=True)
        print(run(url, algorithm, hybrid=True), flush=True)
    print(run(url, "token_bucket"), flush=True)


if __name__ == "__main__":
    main()
