"""Rate limiting for ASGI apps (Starlette, FastAPI, …), as a pure ASGI middleware.

>>> from fastapi import FastAPI
>>> from sluicegate.asgi import RateLimitMiddleware
>>> app = FastAPI()
>>> app.add_middleware(RateLimitMiddleware, limits="100/minute", routes={"POST /login": "5/minute"})

Requests are keyed by client address (the socket peer; ``X-Forwarded-For`` or
``Forwarded`` only from ``trusted_proxies``; IPv6 by /64). Every limited response
carries ``RateLimit-Policy`` and ``RateLimit``; a denied one is a 429 with
``Retry-After`` and an ``application/problem+json`` body. Only ``http`` scopes are
limited; websocket and lifespan pass through.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from ._http import METRICS_CONTENT_TYPE, Outcome
from ._middleware import Middleware
from ._sluicegate import Policy

__all__ = ["RateLimitMiddleware", "metrics_app"]

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


class RateLimitMiddleware(Middleware[ASGIApp, Scope]):
    """Limits an ASGI app.

    ``limits``: the default for every route without its own (``None``: none);
    one client's requests to all such routes count together. ``routes``: pattern →
    limits, a pattern being ``"/path"``, ``"/prefix/*"`` or either after a method
    (``"POST /login"``); each route counts on its own; ``None`` exempts it.
    ``exempt``: patterns never limited. ``key_func(scope)``: the client key
    (``None`` exempts the request). ``cost_func(scope)``: units the request costs
    (default 1). ``capacity``: keys each table holds; ``policy``: what happens when
    it is full of live keys. ``legacy_headers``: also send ``X-RateLimit-*``.
    ``table_factory(quota)``: builds each limit's table instead of a local
    ``KeyedLimiter``, e.g. ``lambda q: RedisKeyedLimiter(q, name=..., redis=RedisOptions(url))``
    to share the limits through Redis. ``policy=Policy.from_file("rules.toml")``:
    the rules of a policy file instead of ``limits``/``routes`` (attributes ``ip``,
    ``path``, ``method``, ``host`` and ``header:<name>``; one ``RateLimit`` item per
    enforcing rule); a string ``policy`` is, as before, what a full table does.
    """

    def client_address(self, scope: Scope) -> str | None:
        """The client address: the socket peer, or from ``trusted_proxies``."""
        client = scope.get("client")
        peer = client[0] if client else None
        forwarded = None
        if self.limiter.trusted:
            name = self.limiter.forwarded_header.encode()
            values = [v.decode("latin-1") for k, v in scope.get("headers", ()) if k.lower() == name]
            forwarded = ", ".join(values) if values else None
        return self.limiter.client_address(peer, forwarded)

    async def _policy_outcome(self, scope: Scope) -> Outcome | None:
        method, path = scope["method"], scope["path"]
        if self.limiter.is_exempt(method, path):
            return None
        headers = [(k.decode("latin-1"), v.decode("latin-1")) for k, v in scope.get("headers", ())]
        host = next((v for k, v in headers if k == "host"), None)
        cost = self._cost(scope)
        # Rules on Redis are awaited (Policy.check_async); local ones decide at once.
        return await self.limiter.decide_policy_async(
            ip=self.client_address(scope), method=method, path=path, host=host, headers=headers, cost=cost
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        outcome: Outcome | None
        if self.limiter.rules is not None:
            outcome = await self._policy_outcome(scope)
        else:
            outcome = await self._limits_outcome(scope)
        if outcome is None:
            await self.app(scope, receive, send)
            return
        if not outcome.allowed:
            await _deny(outcome, send)
            return
        extra = [(_name_bytes(k), v.encode()) for k, v in outcome.headers]

        async def send_with_fields(message: Message) -> None:
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", ()), *extra]}
            await send(message)

        await self.app(scope, receive, send_with_fields)


    async def _limits_outcome(self, scope: Scope) -> Outcome | None:
        rule = self.limiter.rule_for(scope["method"], scope["path"])
        if rule is None:
            return None
        key = self.key_func(scope)
        if key is None:
            return None
        cost = self._cost(scope)
        if rule.local:  # nothing to await: no coroutine of decide_async's
            return self.limiter.decide(rule, key, cost)
        return await self.limiter.decide_async(rule, key, cost)


class _Metrics:
    def __init__(self, policy: Policy) -> None:
        self.policy = policy

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        method = scope["method"]
        body = self.policy.metrics_text().encode() if method in ("GET", "HEAD") else b""
        status = 200 if method in ("GET", "HEAD") else 405
        headers = [(b"content-type", METRICS_CONTENT_TYPE.encode()), (b"content-length", str(len(body)).encode())]
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body if method != "HEAD" else b""})


def metrics_app(policy: Policy) -> ASGIApp:
    """An ASGI app answering ``GET /metrics`` with ``policy.metrics_text()``
    (Prometheus text format), e.g. ``Route("/metrics", metrics_app(policy))`` in
    Starlette or ``app.mount("/metrics", metrics_app(policy))`` in FastAPI."""
    return _Metrics(policy)


_NAME_BYTES: dict[str, bytes] = {}


def _name_bytes(name: str) -> bytes:
    """A header name as ASGI sends it (lower case bytes). The names are the few
    this package writes, so each is encoded once (and at most 64 are kept)."""
    b = _NAME_BYTES.get(name)
    if b is None:
        b = name.lower().encode()
        if len(_NAME_BYTES) < 64:
            _NAME_BYTES[name] = b
    return b


async def _deny(outcome: Outcome, send: Send) -> None:
    body = outcome.problem_body()
    headers = [(_name_bytes(k), v.encode()) for k, v in outcome.denial_headers()]
    headers.append((b"content-length", str(len(body)).encode()))
    await send({"type": "http.response.start", "status": 429, "headers": headers})
    await send({"type": "http.response.body", "body": body})
