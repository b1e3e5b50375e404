# Hand-written stubs for the Rust extension module; checked against the installed
# package by `python -m mypy.stubtest sluicegate` (scripts/test-python).
from collections.abc import Coroutine, Sequence
from datetime import timedelta
from os import PathLike
from typing import Any, Literal, final

__all__ = [
    "__version__",
    "Decision",
    "FixedWindow",
    "KeyedLimiter",
    "KeyedStats",
    "LeakyBucket",
    "ManualClock",
    "Quota",
    "RedisKeyedLimiter",
    "RedisLimiter",
    "Reservation",
    "Shaper",
    "SlidingLog",
    "SlidingWindow",
    "StripedTokenBucket",
    "TokenBucket",
]

__version__: str

# Private aliases (stub-only): a limit argument, a period, a key.
_Limit = str | Quota | Sequence[str | Quota]
_Period = float | timedelta
_Key = str | bytes | int

@final
class ManualClock:
    def __new__(cls, now_ns: int = 0) -> ManualClock: ...
    def now_ns(self) -> int: ...
    def set_ns(self, now_ns: int) -> None: ...
    def advance_ns(self, ns: int) -> None: ...
    def advance(self, seconds: float) -> None: ...

@final
class Decision:
    def __new__(
        cls, *, allowed: bool, remaining: int, retry_after_ns: int, reset_after_ns: int, limit: int
    ) -> Decision: ...
    @property
    def allowed(self) -> bool: ...
    @property
    def remaining(self) -> int: ...
    @property
    def retry_after_ns(self) -> int: ...
    @property
    def reset_after_ns(self) -> int: ...
    @property
    def limit(self) -> int: ...
    @property
    def retry_after(self) -> float: ...
    @property
    def reset_after(self) -> float: ...
    def __bool__(self) -> bool: ...
    def __eq__(self, value: object, /) -> bool: ...
    def __hash__(self) -> int: ...

@final
class Reservation:
    @property
    def granted(self) -> bool: ...
    @property
    def delay(self) -> float: ...
    @property
    def delay_ns(self) -> int: ...
    @property
    def decision(self) -> Decision: ...
    def __bool__(self) -> bool: ...

@final
class Quota:
    def __new__(cls, amount: int, period: _Period | None = None, burst: int | None = None) -> Quota: ...
    @staticmethod
    def parse(s: str) -> Quota: ...
    @staticmethod
    def parse_many(s: str) -> tuple[Quota, ...]: ...
    @property
    def amount(self) -> int: ...
    @property
    def period(self) -> float: ...
    @property
    def period_ns(self) -> int: ...
    @property
    def burst(self) -> int: ...
    def __eq__(self, value: object, /) -> bool: ...
    def __hash__(self) -> int: ...

class _Limiter:
    # Not a runtime class: the methods every unkeyed limiter has.
    def check(self, n: int = 1) -> Decision: ...
    def try_acquire(self, n: int = 1) -> bool: ...
    def acquire(self, n: int = 1, timeout: float | None = None) -> Decision: ...
    def acquire_async(self, n: int = 1, timeout: float | None = None) -> Coroutine[Any, Any, Decision]: ...
    @property
    def limit(self) -> int: ...
    @property
    def quotas(self) -> tuple[Quota, ...]: ...

@final
class TokenBucket(_Limiter):
    def __new__(
        cls,
        limit: _Limit | None = None,
        *,
        amount: int | None = None,
        period: _Period | None = None,
        burst: int | None = None,
        clock: ManualClock | None = None,
    ) -> TokenBucket: ...
    def peek(self, n: int = 1) -> Decision: ...

@final
class LeakyBucket(_Limiter):
    def __new__(
        cls,
        limit: _Limit | None = None,
        *,
        amount: int | None = None,
        period: _Period | None = None,
        burst: int | None = None,
        clock: ManualClock | None = None,
    ) -> LeakyBucket: ...
    def peek(self, n: int = 1) -> Decision: ...

@final
class FixedWindow(_Limiter):
    def __new__(
        cls,
        limit: _Limit | None = None,
        *,
        amount: int | None = None,
        period: _Period | None = None,
        burst: int | None = None,
        clock: ManualClock | None = None,
    ) -> FixedWindow: ...
    def peek(self, n: int = 1) -> Decision: ...

@final
class SlidingWindow(_Limiter):
    def __new__(
        cls,
        limit: _Limit | None = None,
        *,
        amount: int | None = None,
        period: _Period | None = None,
        burst: int | None = None,
        clock: ManualClock | None = None,
    ) -> SlidingWindow: ...
    def peek(self, n: int = 1) -> Decision: ...

@final
class SlidingLog(_Limiter):
    def __new__(
        cls,
        limit: _Limit | None = None,
        *,
        amount: int | None = None,
        period: _Period | None = None,
        clock: ManualClock | None = None,
    ) -> SlidingLog: ...
    def peek(self, n: int = 1) -> Decision: ...

@final
class StripedTokenBucket(_Limiter):
    def __new__(
        cls,
        limit: _Limit | None = None,
        *,
        stripes: int | None = None,
        amount: int | None = None,
        period: _Period | None = None,
        burst: int | None = None,
        clock: ManualClock | None = None,
    ) -> StripedTokenBucket: ...
    @property
    def stripes(self) -> int: ...

@final
class Shaper:
    def __new__(
        cls,
        limit: _Limit | None = None,
        *,
        max_delay: float = 1.0,
        amount: int | None = None,
        period: _Period | None = None,
        burst: int | None = None,
        clock: ManualClock | None = None,
    ) -> Shaper: ...
    def reserve(self, n: int = 1) -> Reservation: ...
    def cancel(self, reservation: Reservation) -> bool: ...
    def peek(self, n: int = 1) -> Decision: ...
    def acquire(self, n: int = 1, timeout: float | None = None) -> Decision: ...
    def acquire_async(self, n: int = 1, timeout: float | None = None) -> Coroutine[Any, Any, Decision]: ...
    @property
    def max_delay(self) -> float: ...
    @property
    def limit(self) -> int: ...
    @property
    def quotas(self) -> tuple[Quota, ...]: ...

@final
class KeyedStats:
    @property
    def inserted(self) -> int: ...
    @property
    def reused(self) -> int: ...
    @property
    def evicted(self) -> int: ...
    @property
    def rejected(self) -> int: ...
    @property
    def unlimited(self) -> int: ...
    def __eq__(self, value: object, /) -> bool: ...

@final
class KeyedLimiter:
    def __new__(
        cls,
        limit: _Limit | None = None,
        *,
        capacity: int = 100_000,
        algorithm: Literal["token_bucket", "leaky_bucket", "fixed_window", "sliding_window"] = "token_bucket",
        policy: Literal["evict_stalest", "reject", "allow_unlimited"] = "evict_stalest",
        amount: int | None = None,
        period: _Period | None = None,
        burst: int | None = None,
        clock: ManualClock | None = None,
    ) -> KeyedLimiter: ...
    def check(self, key: _Key, n: int = 1) -> Decision: ...
    def peek(self, key: _Key, n: int = 1) -> Decision: ...
    def try_acquire(self, key: _Key, n: int = 1) -> bool: ...
    def acquire(self, key: _Key, n: int = 1, timeout: float | None = None) -> Decision: ...
    def acquire_async(
        self, key: _Key, n: int = 1, timeout: float | None = None
    ) -> Coroutine[Any, Any, Decision]: ...
    def clear(self) -> None: ...
    def __len__(self) -> int: ...
    @property
    def stats(self) -> KeyedStats: ...
    @property
    def capacity(self) -> int: ...
    @property
    def policy(self) -> Literal["evict_stalest", "reject", "allow_unlimited"]: ...
    @property
    def algorithm(self) -> Literal["token_bucket", "leaky_bucket", "fixed_window", "sliding_window"]: ...
    @property
    def limit(self) -> int: ...
    @property
    def quotas(self) -> tuple[Quota, ...]: ...

_RedisAlgorithm = Literal["token_bucket", "leaky_bucket", "fixed_window", "sliding_window", "shaper"]
_FailurePolicy = Literal["open", "closed", "local"]

@final
class RedisKeyedLimiter:
    def __new__(
        cls,
        limit: _Limit | None = None,
        *,
        url: str,
        name: str,
        algorithm: _RedisAlgorithm = "token_bucket",
        prefix: str = "sluicegate:",
        timeout: float = 0.025,
        failure_policy: _FailurePolicy = "local",
        local_share: int = 10,
        max_delay: float | None = None,
        amount: int | None = None,
        period: _Period | None = None,
        burst: int | None = None,
        ssl_ca_certs: str | PathLike[str] | None = None,
        ssl_certfile: str | PathLike[str] | None = None,
        ssl_keyfile: str | PathLike[str] | None = None,
    ) -> RedisKeyedLimiter: ...
    def check(self, key: _Key, n: int = 1) -> Decision: ...
    def peek(self, key: _Key, n: int = 1) -> Decision: ...
    def check_with_source(self, key: _Key, n: int = 1) -> tuple[Decision, str]: ...
    def try_acquire(self, key: _Key, n: int = 1) -> bool: ...
    def check_async(self, key: _Key, n: int = 1) -> Coroutine[Any, Any, Decision]: ...
    def peek_async(self, key: _Key, n: int = 1) -> Coroutine[Any, Any, Decision]: ...
    def redis_key(self, key: _Key) -> str: ...
    @property
    def quota(self) -> Quota: ...
    @property
    def limit(self) -> int: ...

@final
class RedisLimiter:
    def __new__(
        cls,
        limit: _Limit | None = None,
        *,
        url: str,
        name: str,
        algorithm: _RedisAlgorithm = "token_bucket",
        prefix: str = "sluicegate:",
        timeout: float = 0.025,
        failure_policy: _FailurePolicy = "local",
        local_share: int = 10,
        max_delay: float | None = None,
        amount: int | None = None,
        period: _Period | None = None,
        burst: int | None = None,
        ssl_ca_certs: str | PathLike[str] | None = None,
        ssl_certfile: str | PathLike[str] | None = None,
        ssl_keyfile: str | PathLike[str] | None = None,
    ) -> RedisLimiter: ...
    def check(self, n: int = 1) -> Decision: ...
    def peek(self, n: int = 1) -> Decision: ...
    def try_acquire(self, n: int = 1) -> bool: ...
    def check_async(self, n: int = 1) -> Coroutine[Any, Any, Decision]: ...
    def peek_async(self, n: int = 1) -> Coroutine[Any, Any, Decision]: ...
    @property
    def quota(self) -> Quota: ...
    @property
    def limit(self) -> int: ...
