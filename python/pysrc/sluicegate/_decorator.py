"""``@rate_limit``: a limiter in front of a function or a coroutine function."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, ParamSpec, TypeVar, cast

from ._errors import RateLimited
from ._sluicegate import (
    Decision,
    FixedWindow,
    KeyedLimiter,
    LeakyBucket,
    Quota,
    SlidingLog,
    SlidingWindow,
    StripedTokenBucket,
    TokenBucket,
)

__all__ = ["rate_limit"]

P = ParamSpec("P")
R = TypeVar("R")

Limiter = TokenBucket | LeakyBucket | FixedWindow | SlidingWindow | SlidingLog | StripedTokenBucket


def rate_limit(
    limiter: Limiter | KeyedLimiter | str | Quota | Sequence[str | Quota],
    *,
    cost: int | Callable[..., int] = 1,
    key: Callable[..., str | bytes | int] | None = None,
    wait: bool = False,
    timeout: float | None = None,
) -> Callable[[Callable[P, R]], Callable[P, R]]:
    """Limits calls of the decorated function or coroutine function.

    ``limiter`` is a limiter (shared with other code if you like) or a limit such
    as ``"10/second"`` (a token bucket is made for it). ``cost`` is a number or a
    function of the call's arguments; ``key`` (with a :class:`KeyedLimiter`) maps
    the arguments to a key. A denied call raises :class:`RateLimited` with the
    decision, or with ``wait=True`` waits for its turn (``acquire`` for a function,
    ``acquire_async`` for a coroutine function; ``AcquireTimeout`` after
    ``timeout`` seconds).

    >>> @rate_limit("2/second")
    ... def ping() -> str:
    ...     return "pong"
    >>> ping(), ping()
    ('pong', 'pong')
    >>> ping()
    Traceback (most recent call last):
    ...
    sluicegate._errors.RateLimited: rate limit exceeded; retry in 0.500 s
    """
    lim: Limiter | KeyedLimiter
    if isinstance(limiter, (TokenBucket, LeakyBucket, FixedWindow, SlidingWindow, SlidingLog, StripedTokenBucket)):
        lim = limiter
    elif isinstance(limiter, KeyedLimiter):
        lim = limiter
    else:
        lim = TokenBucket(limiter)
    if isinstance(lim, KeyedLimiter) and key is None:
        raise TypeError("a KeyedLimiter needs key=, a function of the call's arguments")
    if key is not None and not isinstance(lim, KeyedLimiter):
        raise TypeError("key= needs a KeyedLimiter")
    if timeout is not None and not wait:
        raise TypeError("timeout= applies with wait=True")

    def units(args: tuple[Any, ...], kwargs: dict[str, Any]) -> int:
        return cost(*args, **kwargs) if callable(cost) else cost

    def check(args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        n = units(args, kwargs)
        if isinstance(lim, KeyedLimiter):
            assert key is not None
            k = key(*args, **kwargs)
            if wait:
                lim.acquire(k, n, timeout)
                return
            decision: Decision = lim.check(k, n)
        else:
            if wait:
                lim.acquire(n, timeout)
                return
            decision = lim.check(n)
        if not decision:
            raise RateLimited(decision)

    async def check_async(args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        if not wait:
            check(args, kwargs)
            return
        n = units(args, kwargs)
        if isinstance(lim, KeyedLimiter):
            assert key is not None
            await lim.acquire_async(key(*args, **kwargs), n, timeout)
        else:
            await lim.acquire_async(n, timeout)

    def decorate(fn: Callable[P, R]) -> Callable[P, R]:
        if inspect.iscoroutinefunction(fn):
            afn = cast(Callable[P, Awaitable[Any]], fn)

            @functools.wraps(fn)
            async def async_wrapper(*args: P.args, **kwargs: P.kwargs) -> Any:
                await check_async(args, kwargs)
                return await afn(*args, **kwargs)

            return cast(Callable[P, R], async_wrapper)

        @functools.wraps(fn)
        def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
            check(args, kwargs)
            return fn(*args, **kwargs)

        return wrapper

    return decorate
