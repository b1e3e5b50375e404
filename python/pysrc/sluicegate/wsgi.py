"""Rate limiting for WSGI apps (Flask, Django, …).

>>> from flask import Flask
>>> from sluicegate.wsgi import RateLimitMiddleware
>>> app = Flask(__name__)
>>> app.wsgi_app = RateLimitMiddleware(app.wsgi_app, limits="100/minute")

The same options and responses as :class:`sluicegate.asgi.RateLimitMiddleware`;
``key_func`` and ``cost_func`` take the WSGI ``environ``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from ._http import METRICS_CONTENT_TYPE, Outcome
from ._middleware import Middleware
from ._sluicegate import Policy

if TYPE_CHECKING:
    # typeshed's WSGI types (PEP 3333), the ones Flask and Django annotate with.
    from _typeshed import OptExcInfo
    from _typeshed.wsgi import StartResponse, WSGIApplication, WSGIEnvironment

__all__ = ["RateLimitMiddleware", "metrics_app"]


class RateLimitMiddleware(Middleware["WSGIApplication", "WSGIEnvironment"]):
    """Limits a WSGI app; see :class:`sluicegate.asgi.RateLimitMiddleware`."""

    def client_address(self, environ: WSGIEnvironment) -> str | None:
        """The client address: the socket peer, or from ``trusted_proxies``."""
        forwarded = None
        if self.limiter.trusted:
            forwarded = environ.get("HTTP_" + self.limiter.forwarded_header.upper().replace("-", "_"))
        peer = environ.get("REMOTE_ADDR") or None
        return self.limiter.client_address(peer, forwarded)

    def _outcome(self, environ: WSGIEnvironment) -> Outcome | None:
        method = environ.get("REQUEST_METHOD", "GET")
        path = environ.get("PATH_INFO", "") or "/"
        if self.limiter.rules is not None:
            if self.limiter.is_exempt(method, path):
                return None
            headers = [(k[5:].lower().replace("_", "-"), v) for k, v in environ.items() if k.startswith("HTTP_")]
            for k in ("CONTENT_TYPE", "CONTENT_LENGTH"):
                if environ.get(k):
                    headers.append((k.lower().replace("_", "-"), environ[k]))
            return self.limiter.decide_policy(
                ip=self.client_address(environ),
                method=method,
                path=path,
                host=environ.get("HTTP_HOST"),
                headers=headers,
                cost=self._cost(environ),
            )
        rule = self.limiter.rule_for(method, path)
        if rule is None:
            return None
        key = self.key_func(environ)
        if key is None:
            return None
        return self.limiter.decide(rule, key, self._cost(environ))

    def __call__(self, environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
        outcome = self._outcome(environ)
        if outcome is None:
            return self.app(environ, start_response)
        if not outcome.allowed:
            body = outcome.problem_body()
            headers = [*outcome.denial_headers(), ("Content-Length", str(len(body)))]
            start_response("429 Too Many Requests", headers)
            return [body]
        extra = outcome.headers

        def start_with_fields(
            status: str, headers: list[tuple[str, str]], exc_info: OptExcInfo | None = None, /
        ) -> Callable[[bytes], object]:
            return start_response(status, [*headers, *extra], exc_info)

        return self.app(environ, start_with_fields)


def metrics_app(policy: Policy) -> WSGIApplication:
    """A WSGI app answering ``GET`` with ``policy.metrics_text()`` (Prometheus text
    format), to serve at ``/metrics`` (e.g. with werkzeug's ``DispatcherMiddleware``)."""

    def app(environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
        body = policy.metrics_text().encode()
        method = environ.get("REQUEST_METHOD", "GET")
        status = "200 OK" if method in ("GET", "HEAD") else "405 Method Not Allowed"
        start_response(status, [("Content-Type", METRICS_CONTENT_TYPE), ("Content-Length", str(len(body)))])
        return [body if method != "HEAD" else b""]

    return app
