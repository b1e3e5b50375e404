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


def test_server_workers_is_read_from_the_command_line_or_environment() -> None:
    from sluicegate._http import server_workers

    assert server_workers({}, ["/v/bin/python", "/v/bin/uvicorn", "app:app", "--workers", "4"]) == 4
    assert server_workers({}, ["python", "-m", "uvicorn", "app:app", "--workers=3"]) == 3
    assert server_workers({}, ["gunicorn", "-w", "2", "app:app"]) == 2
    assert server_workers({}, ["gunicorn", "-w8", "app:app"]) == 8
    assert server_workers({"GUNICORN_CMD_ARGS": "--workers 5"}, ["gunicorn", "app:app"]) == 5
    assert server_workers({"WEB_CONCURRENCY": "6"}, ["bash"]) == 6
    # Not a server, or no worker count: nothing to say.
    assert server_workers({}, ["bash"]) is None
    assert server_workers({}, ["python", "myscript.py", "--workers", "4"]) is None
    assert server_workers({}, ["uvicorn", "app:app"]) is None


APP = '''
from starlette.applications import Starlette
from starlette.responses import PlainTextResponse
from starlette.routing import Route
from sluicegate.asgi import RateLimitMiddleware

async def ping(request):
    return PlainTextResponse("pong")

app = Starlette(routes=[Route("/ping", ping)])
app.add_middleware(RateLimitMiddleware, limits="10/minute")
# A second middleware in the same worker: the warning is still given once.
app.add_middleware(RateLimitMiddleware, limits="20/minute")
'''


def test_multi_worker_uvicorn_warns_once_per_worker_at_start_up(tmp_path: "os.PathLike[str]") -> None:
    import os
    import pathlib
    import subprocess
    import sys

    pathlib.Path(tmp_path, "multi_app.py").write_text(APP)
    port = free_port()
    env = dict(os.environ, PYTHONPATH=str(tmp_path), PYTHONWARNINGS="default")
    proc = subprocess.Popen(
        [sys.executable, "-m", "uvicorn", "multi_app:app", "--workers", "2", "--host", "127.0.0.1",
         "--port", str(port), "--log-level", "warning"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/ping", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, "uvicorn --workers 2 did not start"
            assert proc.poll() is None, proc.communicate()[1]
            time.sleep(0.1)
        time.sleep(1.0)  # both workers up
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=20)
    warnings = [line for line in err.splitlines() if "RuntimeWarning" in line and "2 worker processes" in line]
    # One warning per worker (two workers), not one per middleware.
    assert len(warnings) == 2, err


def test_single_process_server_does_not_warn() -> None:
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        app = Starlette(routes=[Route("/ping", ping)])
        RateLimitMiddleware(app, limits="3/minute")
