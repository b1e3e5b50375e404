"""The WSGI middleware in a real Flask app, through its test client."""

from __future__ import annotations

import json

from flask import Flask

from sluicegate import ManualClock
from sluicegate.wsgi import RateLimitMiddleware


def make_app(**options: object) -> Flask:
    app = Flask(__name__)

    @app.route("/")
    def index() -> str:
        return "hi"

    @app.route("/upload", methods=["POST"])
    def upload() -> str:
        return "stored"

    @app.route("/health")
    def health() -> str:
        return "ok"

    app.wsgi_app = RateLimitMiddleware(app.wsgi_app, **options)  # type: ignore[method-assign, arg-type]
    return app


def test_flask_headers_and_429() -> None:
    app = make_app(limits="2/minute", exempt=["/health"], legacy_headers=True, clock=ManualClock(10**12))
    client = app.test_client()
    env = {"REMOTE_ADDR": "192.0.2.10"}
    r = [client.get("/", environ_base=env) for _ in range(3)]
    assert [x.status_code for x in r] == [200, 200, 429]
    assert r[0].get_data(as_text=True) == "hi"
    assert r[0].headers["RateLimit-Policy"] == '"default";q=2;w=60'
    assert r[0].headers["RateLimit"] == '"default";r=1;t=30'
    assert r[1].headers["RateLimit"] == '"default";r=0;t=60'
    assert (r[0].headers["X-RateLimit-Limit"], r[0].headers["X-RateLimit-Remaining"], r[0].headers["X-RateLimit-Reset"]) == ("2", "1", "30")
    denied = r[2]
    assert denied.headers["Retry-After"] == "30"
    assert denied.headers["Content-Type"] == "application/problem+json"
    assert json.loads(denied.get_data()) == {
        "type": "about:blank",
        "title": "Too Many Requests",
        "status": 429,
        "detail": "Rate limit exceeded: 2 per minute. Try again in 30 seconds.",
    }
    # Another client has its own limit; exempt routes have none.
    assert client.get("/", environ_base={"REMOTE_ADDR": "192.0.2.11"}).status_code == 200
    h = client.get("/health", environ_base=env)
    assert h.status_code == 200 and "RateLimit" not in h.headers


def test_flask_route_limits_cost_and_proxies() -> None:
    app = make_app(
        limits=None,
        routes={"POST /upload": "10/minute"},
        cost_func=lambda environ: int(environ.get("CONTENT_LENGTH") or 0) // 100 or 1,
        trusted_proxies=["127.0.0.1"],
        clock=ManualClock(10**12),
    )
    client = app.test_client()
    via_proxy = {"REMOTE_ADDR": "127.0.0.1"}
    a = {"X-Forwarded-For": "198.51.100.1"}
    assert client.post("/upload", data=b"x" * 900, headers=a, environ_base=via_proxy).status_code == 200
    r = client.post("/upload", data=b"x" * 200, headers=a, environ_base=via_proxy)
    assert r.status_code == 429 and r.headers["RateLimit"] == '"POST /upload";r=1;t=54'
    b = {"X-Forwarded-For": "198.51.100.2"}
    assert client.post("/upload", data=b"x" * 200, headers=b, environ_base=via_proxy).status_code == 200
    # No default limit: other routes are not limited and carry no fields.
    g = client.get("/", environ_base=via_proxy)
    assert g.status_code == 200 and "RateLimit-Policy" not in g.headers
