"""The ASGI middleware under a real uvicorn server on a loopback port."""

from __future__ import annotations

import socket
import threading
import time

import httpx
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from sluicegate.asgi import RateLimitMiddleware


async def ping(request: Request) -> JSONResponse:
    return JSONResponse({"pong": True})


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_real_server() -> None:
    app = Starlette(routes=[Route("/ping", ping)])
    app.add_middleware(RateLimitMiddleware, limits="3/minute")
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="off"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 20
        while not server.started:
            assert time.monotonic() < deadline, "uvicorn did not start"
            assert thread.is_alive(), "uvicorn exited"
            time.sleep(0.02)
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=5) as client:
            r = [client.get("/ping") for _ in range(4)]
        assert [x.status_code for x in r] == [200, 200, 200, 429]
        assert r[0].json() == {"pong": True}
        assert r[0].headers["ratelimit-policy"] == '"default";q=3;w=60'
        assert r[0].headers["ratelimit"] == '"default";r=2;t=20'
        assert r[3].headers["content-type"] == "application/problem+json"
        assert 19 <= int(r[3].headers["retry-after"]) <= 20
    finally:
        server.should_exit = True
        thread.join(timeout=10)
    assert not thread.is_alive()
