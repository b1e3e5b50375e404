"""Rate limiting for WSGI apps (Flask, Django, …).

>>> from flask import Flask
>>> from sluicegate.wsgi import RateLimitMiddleware
>>> app = Flask(__name__)
>>> app.wsgi_app = RateLimitMiddleware(app.wsgi_app, limits="100/minute")

The same options and responses as :class:`sluicegate.asgi.RateLimitMiddleware`;
``key_func`` and ``cost_func`` take the WSGI ``environ``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING

from ._http import (
    DEFAULT_LIMITS,
    METRICS_CONTENT_TYPE,
    HttpLimiter,
    Outcome,
    TableFactory,
    _Algorithm,
    _ForwardedHeader,
    _LimitSpec,
    _Policy,
)
from ._sluicegate import ManualClock, Policy

if TYPE_CHECKING:
    # typeshed's WSGI types (PEP 3333), the ones Flask and Django annotate with.
    from _typeshed import OptExcInfo
    from _typeshed.wsgi import StartResponse, WSGIApplication, WSGIEnvironment

__all__ = ["RateLimitMiddleware", "metrics_app"]


class RateLimitMiddleware:
    """Limits a WSGI app; see :class:`sluicegate.asgi.RateLimitMiddleware`."""

    def __init__(
        self,
        app: WSGIApplication,
        limits: _LimitSpec | None = DEFAULT_LIMITS,
        *,
        routes: Mapping[str, _LimitSpec | None] | None = None,
        exempt: Iterable[str] = (),
        key_func: Callable[[WSGIEnvironment], str | bytes | int | None] | None = None,
        cost_func: Callable[[WSGIEnvironment], int] | None = None,
        trusted_proxies: Iterable[str] = (),
        forwarded_header: _ForwardedHeader = "x-forwarded-for",
        ipv6_prefix: int = 64,
        capacity: int = 100_000,
        algorithm: _Algorithm = "token_bucket",
        policy: _Policy | Policy = "evict_stalest",
        legacy_headers: bool = False,
        clock: ManualClock | None = None,
        table_factory: TableFactory | None = None,
    ) -> None:
        self.app = app
        self.limiter = HttpLimiter(
            limits,
            routes=routes,
            exempt=exempt,
            trusted_proxies=trusted_proxies,
            forwarded_header=forwarded_header,
            ipv6_prefix=ipv6_prefix,
            capacity=capacity,
            algorithm=algorithm,
            policy=policy,
            legacy_headers=legacy_headers,
            clock=clock,
            table_factory=table_factory,
        )
        self.key_func = key_func or self.client_key
        self.cost_func = cost_func
        self._forwarded = "HTTP_" + forwarded_header.upper().replace("-", "_")

    def client_address(self, environ: WSGIEnvironment) -> str | None:
        """The client address: the socket peer, or from ``trusted_proxies``."""
        forwarded = environ.get(self._forwarded) if self.limiter.trusted else None
        peer = environ.get("REMOTE_ADDR") or None
        return self.limiter.client_address(peer, forwarded)

    def client_key(self, environ: WSGIEnvironment) -> str:
        """The default key: the client address, grouped as configured."""
        return self.limiter.client_key(self.client_address(environ))

    def _outcome(self, environ: WSGIEnvironment) -> Outcome | None:
        method = environ.get("REQUEST_METHOD", "GET")
        path = environ.get("PATH_INFO", "") or "/"
        cost = 1
        if self.limiter.rules is not None:
            if self.limiter.is_exempt(method, path):
                return None
            headers = [(k[5:].lower().replace("_", "-"), v) for k, v in environ.items() if k.startswith("HTTP_")]
            for k in ("CONTENT_TYPE", "CONTENT_LENGTH"):
                if environ.get(k):
                    headers.append((k.lower().replace("_", "-"), environ[k]))
            if self.cost_func is not None:
                cost = self.cost_func(environ)
            return self.limiter.decide_policy(
                ip=self.client_address(environ),
                method=method,
                path=path,
                host=environ.get("HTTP_HOST"),
                headers=headers,
                cost=cost,
            )
        rule = self.limiter.rule_for(method, path)
        if rule is None:
            return None
        key = self.key_func(environ)
        if key is None:
            return None
        if self.cost_func is not None:
            cost = self.cost_func(environ)
        return self.limiter.decide(rule, key, cost)

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
