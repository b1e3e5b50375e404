"""sluicegate: lock-free rate limiters whose whole state is one 64-bit word.

>>> import sluicegate
>>> limiter = sluicegate.TokenBucket("100/minute")
>>> decision = limiter.check()
>>> bool(decision), decision.remaining, decision.limit
(True, 99, 100)

Classes: :class:`TokenBucket` (GCRA), :class:`LeakyBucket` (meter),
:class:`Shaper` (leaky bucket that delays), :class:`FixedWindow`,
:class:`SlidingWindow` (counter), :class:`SlidingLog` (exact),
:class:`StripedTokenBucket` (one hot limit, many threads) and
:class:`KeyedLimiter` (one state per client key, bounded memory);
:class:`RedisLimiter` and :class:`RedisKeyedLimiter` keep the same limits in
Redis, shared by every process (``redis=RedisOptions("redis://…")``; ``hybrid=True``
for a local lease front); :class:`Policy` reads every rule of a service from one file. Limits are
strings (``"100/minute"``, ``"10 per 2 hours"``, ``"100/s burst 200"``,
``"1/second; 100/hour"`` checked all-or-nothing), :class:`Quota` objects or
keyword arguments (``amount=``, ``period=`` in seconds, ``burst=``).
Middleware: :mod:`sluicegate.asgi` and :mod:`sluicegate.wsgi`.
"""

from . import shared
from ._decorator import rate_limit
from ._errors import (
    AcquireTimeout,
    BackendDataError,
    BackendError,
    BackendTimeout,
    CapacityError,
    CircuitOpen,
    RateLimited,
    SharedMemoryError,
    SluicegateError,
    StoreUnavailable,
)
from ._sluicegate import (
    Decision,
    FixedWindow,
    KeyedLimiter,
    KeyedStats,
    LeakyBucket,
    ManualClock,
    Policy,
    PolicyDecision,
    Quota,
    RedisKeyedLimiter,
    RedisLimiter,
    RedisOptions,
    Reservation,
    Rule,
    RuleDecision,
    Shaper,
    SlidingLog,
    SlidingWindow,
    StripedTokenBucket,
    TokenBucket,
    __version__,
)

__all__ = [
    "AcquireTimeout",
    "BackendDataError",
    "BackendError",
    "BackendTimeout",
    "CapacityError",
    "CircuitOpen",
    "Decision",
    "FixedWindow",
    "KeyedLimiter",
    "KeyedStats",
    "LeakyBucket",
    "ManualClock",
    "Policy",
    "PolicyDecision",
    "Quota",
    "RateLimited",
    "RedisKeyedLimiter",
    "RedisLimiter",
    "RedisOptions",
    "Reservation",
    "Rule",
    "RuleDecision",
    "SharedMemoryError",
    "Shaper",
    "SlidingLog",
    "SlidingWindow",
    "SluicegateError",
    "StoreUnavailable",
    "StripedTokenBucket",
    "TokenBucket",
    "__version__",
    "rate_limit",
]
