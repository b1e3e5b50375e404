"""The ASGI middleware in real Starlette and FastAPI apps, through httpx."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

import httpx
from fastapi import FastAPI
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Route

from sluicegate import Decision, KeyedLimiter, ManualClock, Quota
from sluicegate.asgi import RateLimitMiddleware


async def hello(request: Request) -> PlainTextResponse:
    return PlainTextResponse("hello", headers={"x-app": "1"})


def starlette_app(**options: Any) -> Starlette:
    app = Starlette(routes=[Route(p, hello, methods=["GET", "POST"]) for p in ("/", "/login", "/health", "/api/x")])
    app.add_middleware(RateLimitMiddleware, **options)
    return app


def run(app: Any, requests: Callable[[httpx.AsyncClient], Any], client: tuple[str, int] = ("203.0.113.7", 5000)) -> Any:
    async def main() -> Any:
        transport = httpx.ASGITransport(app=app, client=client)
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as c:
            return await requests(c)

    return asyncio.run(main())


def gets(path: str, n: int, method: str = "GET", **kw: Any) -> Callable[[httpx.AsyncClient], Any]:
    async def go(c: httpx.AsyncClient) -> list[httpx.Response]:
        return [await c.request(method, path, **kw) for _ in range(n)]

    return go


def test_headers_and_429() -> None:
    clock = ManualClock(10**12)
    app = starlette_app(limits="3/minute", clock=clock)
    r = run(app, gets("/", 4))
    assert [x.status_code for x in r] == [200, 200, 200, 429]
    assert r[0].text == "hello" and r[0].headers["x-app"] == "1"
    assert r[0].headers["ratelimit-policy"] == '"default";q=3;w=60'
    assert [x.headers["ratelimit"] for x in r] == [
        '"default";r=2;t=20',
        '"default";r=1;t=40',
        '"default";r=0;t=60',
        '"default";r=0;t=60',
    ]
    denied = r[3]
    assert denied.headers["retry-after"] == "20"
    assert denied.headers["content-type"] == "application/problem+json"
    assert "x-ratelimit-limit" not in denied.headers
    body = json.loads(denied.content)
    assert body == {
        "type": "about:blank",
        "title": "Too Many Requests",
        "status": 429,
        "detail": "Rate limit exceeded: 3 per minute. Try again in 20 seconds.",
    }
    assert denied.headers["content-length"] == str(len(denied.content))


def test_retry_after_rounds_up() -> None:
    clock = ManualClock(10**12)
    app = starlette_app(limits="1/minute", clock=clock)

    async def go(c: httpx.AsyncClient) -> httpx.Response:
        await c.get("/")
        clock.advance(0.5)
        return await c.get("/")

    r = run(app, go)
    assert r.status_code == 429
    assert r.headers["retry-after"] == "60"  # 59.5 s rounded up
    assert r.headers["ratelimit"] == '"default";r=0;t=60'


def test_per_route_limits_exemptions_and_legacy_headers() -> None:
    clock = ManualClock(10**12)
    app = starlette_app(
        limits="100/hour",
        routes={"POST /login": "2/minute; 5/hour", "/api/*": "10/second"},
        exempt=["/health"],
        legacy_headers=True,
        clock=clock,
    )

    async def go(c: httpx.AsyncClient) -> dict[str, list[httpx.Response]]:
        return {
            "login": [await c.post("/login") for _ in range(3)],
            "get_login": [await c.get("/login")],
            "health": [await c.get("/health") for _ in range(3)],
            "api": [await c.get("/api/x")],
        }

    r = run(app, go)
    login = r["login"]
    assert [x.status_code for x in login] == [200, 200, 429]
    assert login[0].headers["ratelimit-policy"] == '"POST /login-0";q=2;w=60, "POST /login-1";q=5;w=3600'
    assert login[0].headers["ratelimit"] == '"POST /login-0";r=1;t=30, "POST /login-1";r=4;t=720'
    assert login[2].headers["retry-after"] == "30"
    assert (login[1].headers["x-ratelimit-limit"], login[1].headers["x-ratelimit-remaining"]) == ("2", "0")
    assert login[1].headers["x-ratelimit-reset"] == "60"
    # GET /login is not the POST route: it counts against the default.
    assert r["get_login"][0].headers["ratelimit"] == '"default";r=99;t=36'
    assert all(x.status_code == 200 and "ratelimit" not in x.headers for x in r["health"])
    assert r["api"][0].headers["ratelimit-policy"] == '"/api/*";q=10;w=1'


def test_clients_are_keyed_by_address() -> None:
    app = starlette_app(limits="1/minute", clock=ManualClock(10**12))
    assert run(app, gets("/", 1), client=("198.51.100.1", 1))[0].status_code == 200
    assert run(app, gets("/", 1), client=("198.51.100.2", 1))[0].status_code == 200
    assert run(app, gets("/", 1), client=("198.51.100.1", 2))[0].status_code == 429
    # IPv6 by /64: another address of the same /64 is the same client.
    assert run(app, gets("/", 1), client=("2001:db8::1", 1))[0].status_code == 200
    assert run(app, gets("/", 1), client=("2001:db8::ffff:2", 1))[0].status_code == 429
    assert run(app, gets("/", 1), client=("2001:db8:0:1::1", 1))[0].status_code == 200


def test_client_keys_are_remembered_within_a_bound() -> None:
    # The key of an address is cached (parsing costs microseconds): a flood of new
    # addresses keeps the cache at its bound, and every answer, cached, evicted or
    # fresh, is the key the address has without the cache.
    mw = RateLimitMiddleware(hello, limits="1/minute", ipv6_prefix=48)
    limiter = mw.limiter
    addresses = [f"2001:db8:{i:x}::{i % 7:x}" for i in range(6000)] + [f"192.0.2.{i % 256}" for i in range(300)]
    for _ in range(2):
        for a in addresses:
            assert limiter.client_key(a) == limiter._key_of_address(a)
    assert limiter.client_key("2001:db8:1:2::3") == "2001:db8:1::/48"
    assert limiter.client_key(None) == "unknown"
    info = limiter._key_of.cache_info()
    assert info.maxsize == 4096 and info.currsize == 4096, info
    assert info.hits > 0 and info.misses > len(addresses), info


def test_forwarded_for_only_from_trusted_proxies() -> None:
    clock = ManualClock(10**12)
    spoof = {"headers": {"x-forwarded-for": "192.0.2.99"}}
    # Untrusted peer: the header is ignored, so changing it does not help.
    app = starlette_app(limits="1/minute", clock=clock)
    assert run(app, gets("/", 1, **spoof))[0].status_code == 200
    assert run(app, gets("/", 1, headers={"x-forwarded-for": "192.0.2.100"}))[0].status_code == 429
    # Behind a trusted proxy: the client is the last untrusted hop.
    app = starlette_app(limits="1/minute", trusted_proxies=["10.0.0.0/8"], clock=clock)
    proxy = ("10.1.2.3", 1)
    chain = {"headers": {"x-forwarded-for": "198.51.100.5, 192.0.2.7, 10.9.9.9"}}
    assert run(app, gets("/", 1, **chain), client=proxy)[0].status_code == 200
    # 192.0.2.7 is the client; the spoofable left part does not matter.
    other = {"headers": {"x-forwarded-for": "203.0.113.1, 192.0.2.7"}}
    assert run(app, gets("/", 1, **other), client=proxy)[0].status_code == 429
    fresh = {"headers": {"x-forwarded-for": "192.0.2.8"}}
    assert run(app, gets("/", 1, **fresh), client=proxy)[0].status_code == 200
    # RFC 7239 Forwarded, when configured.
    app = starlette_app(limits="1/minute", trusted_proxies=["10.0.0.0/8"], forwarded_header="forwarded", clock=clock)
    fwd = {"headers": {"forwarded": 'for="[2001:db8:cafe::17]:4711";proto=https, for=10.0.0.2'}}
    assert run(app, gets("/", 1, **fwd), client=proxy)[0].status_code == 200
    same64 = {"headers": {"forwarded": "for=\"[2001:db8:cafe::99]\""}}
    assert run(app, gets("/", 1, **same64), client=proxy)[0].status_code == 429


class _Recording:
    """A table that records its calls (not a KeyedLimiter: the middleware treats it
    as it treats a Redis table)."""

    def __init__(self, quota: Quota, calls: list[str]) -> None:
        self.table = KeyedLimiter(quota, clock=ManualClock(10**12))
        self.calls = calls

    def check(self, key: str | bytes | int, n: int = 1, /) -> Decision:
        self.calls.append("check")
        return self.table.check(key, n)

    def peek(self, key: str | bytes | int, n: int = 1, /) -> Decision:
        self.calls.append("peek")
        return self.table.peek(key, n)


def test_a_one_limit_rule_is_one_check_per_request() -> None:
    # One check is all-or-nothing already: no peek before it (for a Redis table,
    # one round trip instead of two). Two limits: peek both, then check both.
    calls: list[str] = []
    app = starlette_app(limits="2/minute", table_factory=lambda q: _Recording(q, calls))
    assert [r.status_code for r in run(app, gets("/", 3))] == [200, 200, 429]
    assert calls == ["check"] * 3
    calls.clear()
    app = starlette_app(limits="5/minute; 2/hour", table_factory=lambda q: _Recording(q, calls))
    assert [r.status_code for r in run(app, gets("/", 3))] == [200, 200, 429]
    assert calls == ["peek", "peek", "check", "check"] * 2 + ["peek", "peek"]


def test_key_and_cost_functions() -> None:
    def by_token(scope: Any) -> str | None:
        headers = dict(scope["headers"])
        token = headers.get(b"authorization")
        return token.decode() if token else None  # no token: not limited

    def cost(scope: Any) -> int:
        return 5 if scope["method"] == "POST" else 1

    app = starlette_app(limits="10/minute", key_func=by_token, cost_func=cost, clock=ManualClock(10**12))

    async def go(c: httpx.AsyncClient) -> list[httpx.Response]:
        a = {"authorization": "a"}
        return [
            await c.post("/", headers=a),
            await c.post("/", headers=a),
            await c.get("/", headers=a),
            await c.get("/", headers={"authorization": "b"}),
            await c.get("/"),
        ]

    r = run(app, go)
    assert [x.status_code for x in r] == [200, 200, 429, 200, 200]
    assert r[1].headers["ratelimit"] == '"default";r=0;t=60'
    assert "ratelimit" not in r[4].headers


def test_cost_above_the_limit_is_a_429_without_retry_after() -> None:
    app = starlette_app(limits="3/minute", cost_func=lambda scope: 4, clock=ManualClock(10**12))
    r = run(app, gets("/", 1))[0]
    assert r.status_code == 429 and "retry-after" not in r.headers
    assert "more than the limit of 3" in r.json()["detail"]


def test_fastapi_app() -> None:
    app = FastAPI()

    @app.get("/items/{item}")
    async def item(item: int) -> dict[str, int]:
        return {"item": item}

    @app.get("/free")
    async def free() -> dict[str, bool]:
        return {"free": True}

    app.add_middleware(
        RateLimitMiddleware,
        limits="2/second",
        routes={"/free": None},
        algorithm="fixed_window",
        clock=ManualClock(10**12),
    )
    r = run(app, gets("/items/1", 3))
    assert [x.status_code for x in r] == [200, 200, 429]
    assert r[0].json() == {"item": 1}
    assert r[0].headers["ratelimit-policy"] == '"default";q=2;w=1'
    assert r[0].headers["ratelimit"] == '"default";r=1;t=1'
    assert r[2].headers["retry-after"] == "1"
    free_r = run(app, gets("/free", 5))
    assert all(x.status_code == 200 and "ratelimit" not in x.headers for x in free_r)


def test_non_http_scopes_pass_through() -> None:
    seen: list[str] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        seen.append(scope["type"])

    mw = RateLimitMiddleware(app, "1/minute")

    async def main() -> None:
        async def receive() -> dict[str, Any]:
            return {}

        async def send(message: Any) -> None:
            pass

        for _ in range(3):
            await mw({"type": "lifespan"}, receive, send)
            await mw({"type": "websocket", "path": "/"}, receive, send)

    asyncio.run(main())
    assert seen == ["lifespan", "websocket"] * 3
