"""Typed usage of the public API, checked with `mypy --strict` against the
installed package (scripts/test-python). Not run; only type-checked."""

from __future__ import annotations

import asyncio
import datetime

from fastapi import FastAPI
from flask import Flask

import sluicegate
from sluicegate import Decision, KeyedLimiter, KeyedStats, Quota, TokenBucket, rate_limit
from sluicegate.asgi import RateLimitMiddleware as AsgiLimit
from sluicegate.wsgi import RateLimitMiddleware as WsgiLimit

tb: TokenBucket = TokenBucket("100/minute")
d: Decision = tb.check()
ok: bool = bool(d) and tb.try_acquire(2)
seconds: float = d.retry_after + d.reset_after
units: int = d.remaining + d.limit + tb.limit
quotas: tuple[Quota, ...] = tb.quotas
q: Quota = Quota(10, datetime.timedelta(seconds=2), burst=3)
many: tuple[Quota, ...] = Quota.parse_many("1/second; 100/hour")
compound = sluicegate.FixedWindow(["1/second", q])
waited: Decision = tb.acquire(1, timeout=0.5)

keyed = KeyedLimiter("10/second", capacity=1_000, algorithm="sliding_window", policy="reject")
kd: Decision = keyed.check("10.0.0.1", 2)
stats: KeyedStats = keyed.stats
evicted: int = stats.evicted + len(keyed)

shaper = sluicegate.Shaper("5/second", max_delay=2.0)
reservation = shaper.reserve()
delay: float = reservation.delay if reservation.granted else reservation.decision.retry_after
cancelled: bool = shaper.cancel(reservation)


async def main() -> Decision:
    first = await tb.acquire_async(timeout=1.0)
    await keyed.acquire_async(b"user", 1, None)
    await shaper.acquire_async()
    return first


result: Decision = asyncio.run(main())


@rate_limit("2/second")
def ping(host: str) -> str:
    return host


@rate_limit(keyed, key=lambda user: user, wait=True, timeout=1.0)
async def fetch(user: str) -> int:
    return len(user)


pong: str = ping("x")
count: int = asyncio.run(fetch("ann"))

try:
    tb.check(10_000)
except sluicegate.CapacityError as e:
    needed: int = e.requested - e.capacity
except sluicegate.SluicegateError:
    pass

try:
    ping("y")
except sluicegate.RateLimited as e:
    retry: float = e.decision.retry_after

api = FastAPI()
api.add_middleware(AsgiLimit, limits="100/minute", routes={"POST /login": "5/minute"}, trusted_proxies=["10.0.0.0/8"])
app = Flask(__name__)
app.wsgi_app = WsgiLimit(app.wsgi_app, "100/minute", legacy_headers=True)  # type: ignore[method-assign]

# The Redis tier: the same Decision, sync and async, and the middleware's tables.
remote = sluicegate.RedisKeyedLimiter(
    "100/minute", name="api", redis=sluicegate.RedisOptions("redis://127.0.0.1:6379", failure_policy="closed")
)
shared = sluicegate.RedisLimiter(amount=10, period=1.0, url="redis://127.0.0.1:6379", name="one", algorithm="sliding_window")


def redis_calls() -> None:
    d: sluicegate.Decision = remote.check("203.0.113.7", 2)
    source: str = remote.check_with_source(b"k")[1]
    ok: bool = shared.try_acquire() and remote.peek(7).allowed


async def redis_async() -> float:
    d = await remote.check_async("k")
    e = await shared.peek_async(0)
    return d.retry_after + e.reset_after


api.add_middleware(
    AsgiLimit,
    limits="100/minute",
    table_factory=lambda q: sluicegate.RedisKeyedLimiter(q, url="redis://127.0.0.1:6379", name="http"),
)

redis_opts = sluicegate.RedisOptions("redis://127.0.0.1:6379", timeout=0.05, failure_policy="closed")
hot = sluicegate.RedisKeyedLimiter("10/second", name="api", redis=redis_opts, hybrid=True)
leased = sluicegate.RedisKeyedLimiter("20/second", name="per-user", redis=redis_opts, hybrid=True, lease_horizon=1.0, lease_ttl=2.0)
batch: list[Decision] = hot.check_many(["a", ("b", 2)])
sourced: tuple[Decision, str] = sluicegate.RedisLimiter("1/s", name="one", redis=redis_opts).check_with_source()
hybrid_counts: dict[str, int] | None = hot.hybrid_stats
try:
    hot.try_check("a")
except sluicegate.BackendTimeout:
    pass
except sluicegate.BackendError:
    pass

rules = sluicegate.Policy.from_str('[[rule]]\nname = "g"\nlimit = "10/s"\n')
verdict: sluicegate.PolicyDecision = rules.check(ip="192.0.2.1", path="/", headers={"x-api-key": "k"}, tenant="acme")
waits_for_redis: bool = rules.has_remote_rules


async def policy_async() -> bool:
    d: sluicegate.PolicyDecision = await rules.check_async(ip="192.0.2.1", headers=[("x-api-key", "k")], cost=2)
    return bool(d)


from_values: sluicegate.Policy = sluicegate.Policy.from_rules(
    [sluicegate.Rule("g", match={"path": ["/a", "/b"]}, key=["ip"], limit="10/s", mode="shadow", capacity=100)],
    defaults={"algorithm": "fixed_window", "ipv6_prefix": 56},
    redis={"url": "redis://127.0.0.1:6379", "lease_ttl_ms": 250},
    state={"memory": "64 MiB"},
)
rule_name: str = sluicegate.Rule("h", limit="1/s").name
per_rule: list[str] = [r.name for r in verdict.rules if r.mode == "enforce" and r.remaining >= 0]
fields: list[tuple[str, str]] = verdict.headers()
prom: str = rules.metrics_text()
api.add_middleware(AsgiLimit, policy=rules)
