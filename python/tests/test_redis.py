"""RedisLimiter and RedisKeyedLimiter against a real redis-server: the one that
scripts/test-redis started (``SLUICEGATE_REDIS_URL``), or one this module starts
on a free loopback port. Without a redis-server binary on PATH the module is
skipped with that reason (and only then)."""

from __future__ import annotations

import asyncio
import os
import shutil
import socket
import subprocess
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator

import httpx
import pytest
from flask import Flask
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Route

import sluicegate
from sluicegate import CapacityError, KeyedLimiter, Quota, RedisKeyedLimiter, RedisLimiter


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _ping(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.2) as s:
            s.sendall(b"PING\r\n")
            return s.recv(16).startswith(b"+PONG")
    except OSError:
        return False


@pytest.fixture(scope="module")
def url() -> Iterator[str]:
    env = os.environ.get("SLUICEGATE_REDIS_URL")
    if env:
        yield env
        return
    server = shutil.which("redis-server")
    if server is None:
        pytest.skip("redis-server is not installed (scripts/test-redis installs it)")
    port = _free_port()
    with tempfile.TemporaryDirectory() as d:
        proc = subprocess.Popen(
            [server, "--bind", "127.0.0.1", "--port", str(port), "--save", "", "--appendonly", "no", "--dir", d],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            deadline = time.monotonic() + 5
            while not _ping(port):
                assert time.monotonic() < deadline, "redis-server did not start"
                time.sleep(0.02)
            yield f"redis://127.0.0.1:{port}"
        finally:
            proc.terminate()
            proc.wait(timeout=5)


def _name() -> str:
    return "py-" + uuid.uuid4().hex


def test_keyed_decides_like_the_local_keyed_limiter(url: str) -> None:
    for algorithm in ("token_bucket", "leaky_bucket", "fixed_window", "sliding_window"):
        remote = RedisKeyedLimiter("5/hour", url=url, name=_name(), algorithm=algorithm, timeout=0.5)
        local = KeyedLimiter("5/hour", algorithm=algorithm)  # type: ignore[arg-type]
        for key in ("a", b"b", 7):
            for n in (1, 2, 0, 1, 1, 3, 1):
                r, lo = remote.check(key, n), local.check(key, n)
                assert (bool(r), r.remaining, r.limit) == (bool(lo), lo.remaining, lo.limit), (algorithm, key, n)
        assert remote.limit == 5
        assert remote.quota == Quota.parse("5/hour")
    assert RedisKeyedLimiter("1/s", url=url, name="n").redis_key("k") == "sluicegate:n:{k}"


def test_single_limiter_check_peek_try_acquire(url: str) -> None:
    rl = RedisLimiter("3/minute", url=url, name=_name(), timeout=0.5)
    assert rl.peek(3)
    assert rl.peek(0).remaining == 3  # a peek takes nothing
    assert rl.peek(1).remaining == 2  # (what would remain after one)
    assert rl.peek(0).remaining == 3
    assert rl.try_acquire(2)
    d = rl.check()
    assert d and d.remaining == 0
    denied = rl.check()
    assert not denied and 0 < denied.retry_after <= 20.0
    with pytest.raises(CapacityError):
        rl.check(4)
    with pytest.raises(ValueError):
        RedisLimiter("3/minute", url=url, name="x", algorithm="nope")  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        RedisLimiter("3/minute", url="http://x", name="x")


def test_threads_share_one_limit_without_over_admission(url: str) -> None:
    rl = RedisKeyedLimiter("50/hour", url=url, name=_name(), timeout=1.0)
    admitted = []
    lock = threading.Lock()

    def work() -> None:
        mine = sum(1 for _ in range(20) if rl.check("hot"))
        with lock:
            admitted.append(mine)

    threads = [threading.Thread(target=work) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sum(admitted) == 50


def test_async_checks_do_not_block_the_loop_and_do_not_over_admit(url: str) -> None:
    rl = RedisKeyedLimiter("20/hour", url=url, name=_name(), timeout=1.0)
    single = RedisLimiter("2/hour", url=url, name=_name(), timeout=1.0)

    async def main() -> tuple[int, int, bool]:
        decisions = await asyncio.gather(*(rl.check_async("k") for _ in range(50)))
        peek = await rl.peek_async("k")
        ones = [await single.check_async() for _ in range(3)]
        assert (await single.peek_async()).remaining == 0
        return sum(1 for d in decisions if d), peek.remaining, [bool(d) for d in ones] == [True, True, False]

    admitted, remaining, single_ok = asyncio.run(main())
    assert (admitted, remaining, single_ok) == (20, 0, True)


def test_failure_policies_answer_at_once_when_redis_is_down() -> None:
    dead = f"redis://127.0.0.1:{_free_port()}"
    closed = RedisKeyedLimiter("10/hour", url=dead, name="d", failure_policy="closed")
    opened = RedisKeyedLimiter("10/hour", url=dead, name="d", failure_policy="open")
    local = RedisKeyedLimiter("10/hour", url=dead, name="d", failure_policy="local", local_share=50)
    start = time.monotonic()
    assert not any(closed.check("k") for _ in range(50))
    assert all(opened.check("k") for _ in range(50))
    # The local fallback holds half the quota: 5 of the 10.
    assert sum(1 for _ in range(50) if local.check("k")) == 5
    assert local.check_with_source("k")[1] == "local_fallback"
    # 150 checks, and the breaker keeps a dead Redis from costing a timeout each.
    assert time.monotonic() - start < 1.0


async def _hello(request: Request) -> PlainTextResponse:
    return PlainTextResponse("hello")


def test_asgi_middleware_with_redis_tables(url: str) -> None:
    from sluicegate.asgi import RateLimitMiddleware

    name = _name()
    app = Starlette(routes=[Route("/", _hello)])
    app.add_middleware(
        RateLimitMiddleware,
        limits="3/minute",
        table_factory=lambda q: RedisKeyedLimiter(q, url=url, name=name, timeout=0.5),
    )

    async def main() -> list[int]:
        transport = httpx.ASGITransport(app=app, client=("203.0.113.9", 5000))
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as c:
            return [(await c.get("/")).status_code for _ in range(5)]

    assert asyncio.run(main()) == [200, 200, 200, 429, 429]
    # A second app (another process, in effect) shares the same limit in Redis.
    other = RedisKeyedLimiter("3/minute", url=url, name=name, timeout=0.5)
    assert not other.peek("203.0.113.9")


def test_wsgi_middleware_with_redis_tables(url: str) -> None:
    from sluicegate.wsgi import RateLimitMiddleware

    name = _name()
    flask_app = Flask(__name__)

    @flask_app.route("/")
    def index() -> str:
        return "hi"

    flask_app.wsgi_app = RateLimitMiddleware(  # type: ignore[method-assign]
        flask_app.wsgi_app,
        "2/minute",
        table_factory=lambda q: RedisKeyedLimiter(q, url=url, name=name, timeout=0.5),
    )
    client = flask_app.test_client()
    codes = [client.get("/", environ_base={"REMOTE_ADDR": "198.51.100.4"}).status_code for _ in range(3)]
    assert codes == [200, 200, 429]


def test_exported() -> None:
    assert "RedisLimiter" in sluicegate.__all__ and "RedisKeyedLimiter" in sluicegate.__all__
