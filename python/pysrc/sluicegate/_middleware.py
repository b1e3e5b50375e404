"""What :mod:`sluicegate.asgi` and :mod:`sluicegate.wsgi` share beyond
:mod:`._http`: the options, the default client key and the cost of a request.
Each protocol's middleware only says how to read its request (``Env``: the ASGI
scope or the WSGI environ) and how to answer."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping
from typing import Generic, TypeVar

from ._http import DEFAULT_LIMITS, HttpLimiter, TableFactory, _Algorithm, _ForwardedHeader, _LimitSpec, _Policy
from ._sluicegate import ManualClock, Policy

App = TypeVar("App")
Env = TypeVar("Env")


class Middleware(Generic[App, Env]):
    """The options of both middlewares; see :class:`sluicegate.asgi.RateLimitMiddleware`."""

    def __init__(
        self,
        app: App,
        limits: _LimitSpec | None = DEFAULT_LIMITS,
        *,
        routes: Mapping[str, _LimitSpec | None] | None = None,
        exempt: Iterable[str] = (),
        key_func: Callable[[Env], str | bytes | int | None] | None = None,
        cost_func: Callable[[Env], int] | None = None,
        trusted_proxies: Iterable[str] = (),
        forwarded_header: _ForwardedHeader = "x-forwarded-for",
        ipv6_prefix: int = 64,
        capacity: int = 100_000,
        algorithm: _Algorithm = "token_bucket",
        policy: _Policy | Policy = "evict_stalest",
        legacy_headers: bool = False,
        clock: ManualClock | None = None,
        table_factory: TableFactory | None = None,
        shared: str | os.PathLike[str] | None = None,
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
            shared=shared,
        )
        self.key_func = key_func or self.client_key
        self.cost_func = cost_func

    def client_address(self, env: Env) -> str | None:
        """The client address: the socket peer, or from ``trusted_proxies``."""
        raise NotImplementedError

    def client_key(self, env: Env) -> str:
        """The default key: the client address, grouped as configured."""
        return self.limiter.client_key(self.client_address(env))

    def _cost(self, env: Env) -> int:
        return self.cost_func(env) if self.cost_func is not None else 1
