"""What the installed wheel must do on every supported CPython, with nothing but the
standard library beside it: scripts/test-python runs this file in a fresh
virtualenv of each interpreter it finds (the full pytest suite runs on one).

Checks the package is the installed one (not a source tree), a limiter from a rate
string, a policy, and one request through each of the ASGI and WSGI middlewares,
called directly (no framework installed): the first admitted with the `RateLimit`
fields, the second a 429 with `Retry-After`.
"""

from __future__ import annotations

import asyncio
import sys
import sysconfig
from pathlib import Path
from typing import Any

import sluicegate
from sluicegate import _sluicegate
from sluicegate.asgi import RateLimitMiddleware as AsgiMiddleware
from sluicegate.wsgi import RateLimitMiddleware as WsgiMiddleware

site = Path(sysconfig.get_paths()["purelib"]).resolve()
for module in (sluicegate, _sluicegate):
    where = Path(module.__file__ or "").resolve()
    assert site in where.parents, f"{module.__name__} comes from {where}, not {site}"

d = sluicegate.TokenBucket("10/s").check()
assert d and d.remaining == 9 and d.limit == 10, d

policy = sluicegate.Policy.from_str(
    '[[rule]]\nname = "login"\nmatch = { path = "/login" }\nkey = ["ip"]\nlimit = "1/minute"\n'
)
assert policy.check(ip="192.0.2.1", path="/login")
assert not policy.check(ip="192.0.2.1", path="/login")
assert policy.check(ip="192.0.2.2", path="/login")
assert policy.check(ip="192.0.2.1", path="/")


def wsgi_app(environ: dict[str, Any], start_response: Any) -> list[bytes]:
    start_response("200 OK", [("Content-Type", "text/plain")])
    return [b"ok"]


wsgi = WsgiMiddleware(wsgi_app, "1/minute")
statuses: list[tuple[str, dict[str, str]]] = []
for _ in range(2):
    environ = {"REQUEST_METHOD": "GET", "PATH_INFO": "/", "REMOTE_ADDR": "203.0.113.7", "wsgi.url_scheme": "http"}
    b"".join(wsgi(environ, lambda status, headers, exc=None: statuses.append((status, dict(headers)))))
assert statuses[0][0] == "200 OK" and "RateLimit" in statuses[0][1], statuses[0]
assert statuses[1][0].startswith("429") and int(statuses[1][1]["Retry-After"]) > 0, statuses[1]


async def asgi_app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]})
    await send({"type": "http.response.body", "body": b"ok"})


async def asgi_requests() -> list[tuple[int, dict[bytes, bytes]]]:
    app = AsgiMiddleware(asgi_app, "1/minute")
    answers: list[tuple[int, dict[bytes, bytes]]] = []
    for _ in range(2):
        scope = {
            "type": "http",
            "method": "GET",
            "path": "/",
            "headers": [],
            "client": ("203.0.113.7", 50000),
            "query_string": b"",
        }

        async def receive() -> dict[str, Any]:
            return {"type": "http.request", "body": b"", "more_body": False}

        async def send(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                answers.append((message["status"], dict(message["headers"])))

        await app(scope, receive, send)
    return answers


answers = asyncio.run(asgi_requests())
assert answers[0][0] == 200 and b"ratelimit" in {k.lower() for k in answers[0][1]}, answers[0]
assert answers[1][0] == 429 and int(answers[1][1][b"retry-after"]) > 0, answers[1]

print(f"smoke: CPython {sys.version.split()[0]}: limiter, policy, ASGI and WSGI middleware ok")
