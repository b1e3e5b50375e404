"""One run, side by side: sluicegate against the Python rate limiters, each on an
always-allowing limit in memory, ns per check (median of several repeats).

    .venv/bin/python python/bench.py        # after scripts/test-python, with
    .venv/bin/pip install -r python/requirements-bench.txt

With ``--redis-async URL`` (a running redis-server) it measures instead the Redis
limiters' ``check_async``: native (the Rust future) against the ``asyncio.to_thread``
path it replaced, 1000 checks in flight at once and 1000 one after another:

    .venv/bin/python python/bench.py --redis-async redis://127.0.0.1:6379

With ``--asgi`` it measures the ASGI middleware's cost per request, in-process (no
server, no network): a minimal ASGI app called directly, bare and behind
``RateLimitMiddleware``, on requests from 1,000 IPv4 and 1,000 IPv6 clients:

    .venv/bin/python python/bench.py --asgi
"""

from __future__ import annotations

import asyncio
import gc
import os
import statistics
import sys
import time
import uuid
from collections.abc import Awaitable, Callable

import limits
import limits.storage
import limits.strategies
import pyrate_limiter
import throttled
import token_bucket

import sluicegate

N = 200_000  # calls per repeat
REPEATS = 7
KEYS = 100_000
HUGE = 10**9  # per hour: never runs out during the benchmark


Make = Callable[[], Callable[[], object]]


def one_run(make: Make, n: int, warmup: int) -> float:
    """ns per call over n calls of the call make() returns, after warmup untimed
    calls (loop overhead included, the same for every contender)."""
    call = make()
    for _ in range(warmup):
        call()
    gc.disable()
    t0 = time.perf_counter_ns()
    for _ in range(n):
        call()
    ns = (time.perf_counter_ns() - t0) / n
    gc.enable()
    return ns


def interleaved(contenders: list[tuple[str, Make, int]]) -> list[tuple[str, float]]:
    """Median ns per call of each contender over REPEATS rounds; each round runs
    every contender once, in order, so a slow spell of this shared machine falls
    on all of them instead of on whichever ran then."""
    runs: dict[str, list[float]] = {name: [] for name, _, _ in contenders}
    for _ in range(REPEATS):
        for name, make, n in contenders:
            runs[name].append(one_run(make, n, 1000))
    return [(name, statistics.median(runs[name])) for name, _, _ in contenders]


def steady(call: Callable[[], object], n: int = N) -> tuple[Make, int]:
    """One limiter for every round."""
    return (lambda: call), n


def measure_keyed(call: Callable[[str], object], keys: list[str]) -> float:
    for k in keys:
        call(k)
    runs = []
    for _ in range(max(3, REPEATS // 2)):
        gc.disable()
        t0 = time.perf_counter_ns()
        for k in keys:
            call(k)
        runs.append((time.perf_counter_ns() - t0) / len(keys))
        gc.enable()
    return statistics.median(runs)


def main() -> None:
    plan: list[tuple[str, Make, int]] = []

    ours = sluicegate.TokenBucket(f"{HUGE}/hour")
    plan.append(("sluicegate TokenBucket.check()", *steady(ours.check)))
    plan.append(("sluicegate TokenBucket.try_acquire()", *steady(ours.try_acquire)))
    # Refilled between calls (one unit per ns): full at every call, so check()
    # answers the same decision each time and hands out its cached object.
    at_rest = sluicegate.TokenBucket(f"{HUGE}/second")
    plan.append(("sluicegate TokenBucket.check(), at rest", *steady(at_rest.check)))
    fw = sluicegate.FixedWindow(f"{HUGE}/hour")
    plan.append(("sluicegate FixedWindow.check()", *steady(fw.check)))
    # The sliding window's word holds two counts (at most 16383 per hour here), so
    # each round gets a fresh limiter and stays below its limit.
    plan.append(("sluicegate SlidingWindow.check()", lambda: sluicegate.SlidingWindow("16000/hour").check, 14_000))
    gcra_multi = sluicegate.TokenBucket(f"{HUGE}/second; {HUGE}/hour")
    plan.append(("sluicegate TokenBucket 2 limits .check()", *steady(gcra_multi.check)))

    mem = limits.storage.MemoryStorage()
    item = limits.parse(f"{HUGE}/hour")
    fixed = limits.strategies.FixedWindowRateLimiter(mem)
    plan.append(("limits fixed window .hit()", *steady(lambda: fixed.hit(item, "k"))))
    moving = limits.strategies.MovingWindowRateLimiter(limits.storage.MemoryStorage())
    moving_item = limits.parse("1000000/hour")  # the moving window keeps every hit
    plan.append(("limits moving window .hit()", *steady(lambda: moving.hit(moving_item, "k"), 50_000)))
    sliding = limits.strategies.SlidingWindowCounterRateLimiter(limits.storage.MemoryStorage())
    plan.append(("limits sliding window counter .hit()", *steady(lambda: sliding.hit(item, "k"))))

    pyrate = pyrate_limiter.Limiter(pyrate_limiter.Rate(HUGE, pyrate_limiter.Duration.HOUR))
    plan.append(("pyrate-limiter in memory .try_acquire()", *steady(lambda: pyrate.try_acquire("k", blocking=False), 50_000)))

    tb = token_bucket.Limiter(HUGE, HUGE, token_bucket.MemoryStorage())
    plan.append(("token-bucket .consume()", *steady(lambda: tb.consume(b"k"))))

    th = throttled.Throttled(
        key="k", using="token_bucket", quota=throttled.rate_limiter.per_hour(HUGE, burst=HUGE), store=throttled.MemoryStore()
    )
    plan.append(("throttled-py token bucket .limit()", *steady(th.limit)))

    def noop() -> None:
        pass

    empty = "loop + call overhead of an empty Python function"
    rows = interleaved([*plan, (empty, *steady(noop))])
    overhead = dict(rows)[empty]
    rows = [r for r in rows if r[0] != empty]

    keys = [f"10.{i >> 16 & 255}.{i >> 8 & 255}.{i & 255}" for i in range(KEYS)]
    keyed = sluicegate.KeyedLimiter(f"{HUGE}/hour", capacity=KEYS * 2)
    keyed_rows = [("sluicegate KeyedLimiter.check(key), 100k keys", measure_keyed(keyed.check, keys))]
    kfixed = limits.strategies.FixedWindowRateLimiter(limits.storage.MemoryStorage())
    keyed_rows.append(("limits fixed window .hit(key), 100k keys", measure_keyed(lambda k: kfixed.hit(item, k), keys)))
    ktb = token_bucket.Limiter(HUGE, HUGE, token_bucket.MemoryStorage())
    keyed_rows.append(("token-bucket .consume(key), 100k keys", measure_keyed(lambda k: ktb.consume(k.encode()), keys)))

    base = dict(rows)["limits fixed window .hit()"]
    ours_ns = dict(rows)["sluicegate TokenBucket.check()"]
    print(f"Python {sys.version.split()[0]}, sluicegate {sluicegate.__version__}; median of {REPEATS} interleaved rounds;")
    print(f"loop + call overhead of an empty Python function: {overhead:.0f} ns (included below)\n")
    print("| contender | ns per call | vs limits fixed window |")
    print("|---|---:|---:|")
    for name, ns in rows:
        print(f"| {name} | {ns:,.0f} | {base / ns:.1f}× |")
    kbase = keyed_rows[1][1]
    for name, ns in keyed_rows:
        print(f"| {name} | {ns:,.0f} | {kbase / ns:.1f}× (vs limits keyed) |")
    print()
    print(f"target ≤ 150 ns per check(): {'met' if ours_ns <= 150 else 'missed'} ({ours_ns:.0f} ns)")
    for what, ns in (("busy", ours_ns), ("at rest", dict(rows)["sluicegate TokenBucket.check(), at rest"])):
        ratio = ns / overhead
        print(f"target check() ≤ 2.0× an empty call, {what}: {'met' if ratio <= 2.0 else 'missed'} ({ratio:.2f}×)")
    print(f"target ≥ 20× limits fixed window: {'met' if base / ours_ns >= 20 else 'missed'} ({base / ours_ns:.1f}×)")


def redis_async(url: str, tasks: int = 1000, repeats: int = REPEATS) -> None:
    """check_async against asyncio.to_thread(check) (what check_async was before it
    went native) on one RedisKeyedLimiter, in one process and one event loop:
    checks per second over `tasks` checks, concurrent (asyncio.gather) and one
    after another; the two alternate within each repeat; median of `repeats`."""
    rl = sluicegate.RedisKeyedLimiter(
        f"{HUGE}/hour", url=url, name=f"bench-{uuid.uuid4().hex}", timeout=1.0, failure_policy="closed"
    )

    async def gathered(one: Callable[[], Awaitable[sluicegate.Decision]]) -> tuple[float, int]:
        t0 = time.perf_counter()
        ds = await asyncio.gather(*(one() for _ in range(tasks)))
        return time.perf_counter() - t0, sum(1 for d in ds if not d)

    async def sequential(one: Callable[[], Awaitable[sluicegate.Decision]]) -> tuple[float, int]:
        t0 = time.perf_counter()
        denied = 0
        for _ in range(tasks):
            denied += not await one()
        return time.perf_counter() - t0, denied

    def native() -> Awaitable[sluicegate.Decision]:
        return rl.check_async("k")

    def threaded() -> Awaitable[sluicegate.Decision]:
        return asyncio.to_thread(rl.check, "k")

    contenders = {"check_async (native)": native, "asyncio.to_thread(check) (before)": threaded}
    shapes = {f"{tasks} concurrent (gather)": gathered, f"{tasks} sequential awaits": sequential}

    async def run() -> dict[tuple[str, str], list[float]]:
        for one in contenders.values():  # connect, warm the thread pool
            await gathered(one)
        runs: dict[tuple[str, str], list[float]] = {(s, c): [] for s in shapes for c in contenders}
        denied = 0
        for _ in range(repeats):
            for shape, measure_ in shapes.items():
                for name, one in contenders.items():
                    secs, d = await measure_(one)
                    denied += d
                    runs[(shape, name)].append(tasks / secs)
        # failure_policy closed: a timed-out call is a denial, and would skew the figures.
        assert denied == 0, f"{denied} checks were denied (Redis timeouts?)"
        return runs

    runs = asyncio.run(run())
    print(f"Python {sys.version.split()[0]}, sluicegate {sluicegate.__version__}; {url}; median of {repeats} runs;")
    print(f"default thread pool: {min(32, (os.cpu_count() or 1) + 4)} workers\n")
    print("| shape | contender | checks/s | µs per check | vs before |")
    print("|---|---|---:|---:|---:|")
    for shape in shapes:
        base = statistics.median(runs[(shape, "asyncio.to_thread(check) (before)")])
        for name in contenders:
            rate = statistics.median(runs[(shape, name)])
            print(f"| {shape} | {name} | {rate:,.0f} | {1e6 / rate:.1f} | {rate / base:.2f}× |")


def asgi(requests: int = 20_000, repeats: int = REPEATS) -> None:
    """The ASGI middleware's cost per request: a minimal app (response start and
    body) awaited directly, bare and behind ``RateLimitMiddleware`` (one
    always-allowing limit, the default client key), on the same requests from
    1,000 IPv4 and 1,000 IPv6 clients; the difference is the middleware's. The
    two alternate within each repeat; median of `repeats`."""
    from sluicegate.asgi import RateLimitMiddleware

    async def app(scope: dict[str, object], receive: object, send: Callable[[dict[str, object]], Awaitable[None]]) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]})
        await send({"type": "http.response.body", "body": b"ok"})

    async def receive() -> dict[str, object]:
        return {"type": "http.request", "body": b"", "more_body": False}

    sent = 0

    async def send(message: dict[str, object]) -> None:
        nonlocal sent
        sent += 1

    clients = [f"10.1.{i >> 8}.{i & 255}" for i in range(1000)] + [f"2001:db8:{i:x}::1" for i in range(1000)]
    scopes = [
        {
            "type": "http",
            "method": "GET",
            "path": "/items",
            "headers": [(b"host", b"example.com"), (b"user-agent", b"bench")],
            "client": (clients[i % len(clients)], 50_000),
        }
        for i in range(requests)
    ]
    limited = RateLimitMiddleware(app, limits=f"{HUGE}/hour")

    async def run(handler: Callable[..., Awaitable[None]]) -> float:
        t0 = time.perf_counter_ns()
        for scope in scopes:
            await handler(scope, receive, send)
        return (time.perf_counter_ns() - t0) / len(scopes)

    async def main_() -> tuple[list[float], list[float]]:
        await run(app)
        await run(limited)
        bare: list[float] = []
        mw: list[float] = []
        for _ in range(repeats):
            gc.disable()
            bare.append(await run(app))
            mw.append(await run(limited))
            gc.enable()
        return bare, mw

    bare, mw = asyncio.run(main_())
    assert sent == 4 * requests * (repeats + 1), sent  # every request answered (start + body)
    b, m = statistics.median(bare), statistics.median(mw)
    cost = (m - b) / 1000
    print(f"Python {sys.version.split()[0]}, sluicegate {sluicegate.__version__}; {requests:,} requests per run;")
    print(f"median of {repeats} runs; 1,000 IPv4 + 1,000 IPv6 clients\n")
    print("| what | µs per request |")
    print("|---|---:|")
    print(f"| bare app | {b / 1000:.2f} |")
    print(f"| app behind RateLimitMiddleware | {m / 1000:.2f} |")
    print(f"| the middleware's cost | {cost:.2f} |")
    print()
    print(f"target ASGI middleware ≤ 5 µs per request: {'met' if cost <= 5 else 'missed'} ({cost:.2f} µs)")


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--redis-async":
        redis_async(sys.argv[2])
    elif len(sys.argv) == 2 and sys.argv[1] == "--asgi":
        asgi()
    else:
        main()
