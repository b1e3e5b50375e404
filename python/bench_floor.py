"""The Python client against the round-trip floor (issue 28, item 3): a
sequential ``RedisKeyedLimiter.check`` from one thread against one ``PING``
over a plain socket from the same thread plus the script's own server time
(``usec_per_call`` of ``EVALSHA`` in ``INFO commandstats``, over the checks
measured). In one run, on the machine as it is ("idle") and then with the other
core kept busy (a ``yes > /dev/null`` of the bench's own); each latency the
median of per-call times, the three kinds taken one after another in turn. Beside it the same check
through the limiter's runtime thread (``max_connections=0``: the path every
check took before), from the same run.

    .venv/bin/python python/bench_floor.py redis://127.0.0.1:6379

Target: the check at most 1.1 x (PING + script time).
"""

from __future__ import annotations

import socket
import statistics
import subprocess
import sys
import time
import urllib.parse
import uuid

import sluicegate

ROUNDS = 20
PER_ROUND = 500


class Raw:
    """A plain socket from this thread: PING, and INFO / CONFIG for the stats."""

    def __init__(self, url: str) -> None:
        u = urllib.parse.urlsplit(url)
        self.sock = socket.create_connection((u.hostname or "127.0.0.1", u.port or 6379))
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.file = self.sock.makefile("rb")

    def ping(self) -> None:
        self.sock.sendall(b"PING\r\n")
        if self.sock.recv(64) != b"+PONG\r\n":
            raise RuntimeError("PING: unexpected reply")

    def command(self, line: bytes) -> bytes:
        self.sock.sendall(line + b"\r\n")
        header = self.file.readline()
        if header.startswith(b"$"):
            return self.file.read(int(header[1:]) + 2)
        return header

    def evalsha(self) -> tuple[int, int]:
        """EVALSHA's calls and microseconds so far."""
        for line in self.command(b"INFO commandstats").decode().splitlines():
            if line.startswith("cmdstat_evalsha:"):
                fields = dict(kv.split("=") for kv in line.split(":", 1)[1].split(","))
                return int(fields["calls"]), int(fields["usec"])
        return 0, 0

    def reset(self) -> None:
        assert self.command(b"CONFIG RESETSTAT").startswith(b"+OK")


def measure(url: str) -> dict[str, float]:
    name = f"bench-floor-{uuid.uuid4().hex}"
    opts = sluicegate.RedisOptions(url, timeout=1.0)
    direct = sluicegate.RedisKeyedLimiter("1000000/second burst 1000000", name=name, redis=opts)
    runtime = sluicegate.RedisKeyedLimiter(
        "1000000/second burst 1000000", name=name,
        redis=sluicegate.RedisOptions(url, timeout=1.0, max_connections=0),
    )
    raw = Raw(url)
    check_direct = lambda: direct.check("k")  # noqa: E731
    check_runtime = lambda: runtime.check("k")  # noqa: E731
    for _ in range(2000):
        raw.ping()
        check_direct()
        check_runtime()
    pings: list[int] = []
    directs: list[int] = []
    runtimes: list[int] = []
    calls = usec = 0
    clock = time.perf_counter_ns
    ping = raw.ping
    for _ in range(ROUNDS):
        # One of each in turn, so that the machine's drift falls on the three
        # alike; the script's time over both kinds of check (the same script).
        raw.reset()
        for _ in range(PER_ROUND):
            t0 = clock()
            ping()
            t1 = clock()
            check_direct()
            t2 = clock()
            check_runtime()
            t3 = clock()
            pings.append(t1 - t0)
            directs.append(t2 - t1)
            runtimes.append(t3 - t2)
        c, u = raw.evalsha()
        calls, usec = calls + c, usec + u
    assert direct.stats()["direct_calls"] >= ROUNDS * PER_ROUND
    assert runtime.stats()["direct_calls"] == 0
    return {
        "anchor": statistics.median(pings) / 1000,
        "script": usec / max(calls, 1),
        "calls": calls // 2,
        "direct": statistics.median(directs) / 1000,
        "runtime": statistics.median(runtimes) / 1000,
    }


def load() -> str:
    try:
        return " ".join(open("/proc/loadavg").read().split()[:3])
    except OSError:
        return "?"


def main() -> None:
    url = sys.argv[1] if len(sys.argv) > 1 else "redis://127.0.0.1:6379"
    print()
    print("| Python client, sequential | machine | anchor: PING, plain socket | EVALSHA server time | floor "
          "| `RedisKeyedLimiter.check`, calling thread (after) | ratio | through the runtime (before) | ratio "
          "| target ≤ 1.1× |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---|")
    for busy in (False, True):
        yes = subprocess.Popen(["yes"], stdout=subprocess.DEVNULL) if busy else None
        try:
            if busy:
                time.sleep(0.2)
            machine = f"{'other core busy (`yes`)' if busy else 'idle'} (load {load()})"
            r = measure(url)
        finally:
            if yes is not None:
                yes.kill()
                yes.wait()
        floor = r["anchor"] + r["script"]
        after, before = r["direct"] / floor, r["runtime"] / floor
        print(f"| Python `check` | {machine} | {r['anchor']:.1f} µs | {r['script']:.2f} µs ({r['calls']:.0f} calls) "
              f"| {floor:.1f} µs | {r['direct']:.1f} µs | {after:.2f}× | {r['runtime']:.1f} µs | {before:.2f}× "
              f"| {'met' if after <= 1.1 else 'MISSED'} |")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
