# Hand-written stubs for the Rust extension module; checked against the installed
# package by `python -m mypy.stubtest sluicegate` (scripts/test-python).
from collections.abc import Awaitable, Coroutine, Iterable, Mapping, Sequence
from datetime import timedelta
from os import PathLike
from typing import Any, Literal, TypedDict, final

from typing_extensions import disjoint_base

from ._errors import BackendError

__all__ = [
    "__version__",
    "_Limiter",
    "_PendingCheck",
    "_RedisLimiter",
    "_shared_open",
    "_shared_unlink",
    "Decision",
    "FixedWindow",
    "KeyedLimiter",
    "KeyedStats",
    "LeakyBucket",
    "ManualClock",
    "Policy",
    "PolicyDecision",
    "Quota",
    "RedisKeyedLimiter",
    "RedisLimiter",
    "RedisOptions",
    "Reservation",
    "Rule",
    "RuleDecision",
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
    def __new__(cls, now_ns: int | None = None) -> ManualClock: ...
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

@disjoint_base
class _Limiter:
    # The base of every local limiter but the shaper: these methods are written once.
    def check(self, n: int = ...) -> Decision: ...
    def peek(self, n: int = ...) -> Decision: ...
    def try_acquire(self, n: int = ...) -> bool: ...
    def acquire(self, n: int = ..., timeout: float | None = None) -> Decision: ...
    def acquire_async(self, n: int = ..., timeout: float | None = None) -> Coroutine[Any, Any, Decision]: ...
    @property
    def limit(self) -> int: ...
    @property
    def quotas(self) -> tuple[Quota, ...]: ...
    @property
    def algorithm(self) -> str: ...

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
        shared: str | PathLike[str] | None = None,
    ) -> TokenBucket: ...

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
        shared: str | PathLike[str] | None = None,
    ) -> LeakyBucket: ...

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
        shared: str | PathLike[str] | None = None,
    ) -> FixedWindow: ...

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
        shared: str | PathLike[str] | None = None,
    ) -> SlidingWindow: ...

@final
class SlidingLog(_Limiter):
    def __new__(
        cls,
        limit: _Limit | None = None,
        *,
        amount: int | None = None,
        period: _Period | None = None,
        burst: int | None = None,
        clock: ManualClock | None = None,
        shared: str | PathLike[str] | None = None,
    ) -> SlidingLog: ...

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
        shared: str | PathLike[str] | None = None,
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
        shared: str | PathLike[str] | None = None,
    ) -> Shaper: ...
    def reserve(self, n: int = ...) -> Reservation: ...
    def cancel(self, reservation: Reservation) -> bool: ...
    def peek(self, n: int = ...) -> Decision: ...
    def acquire(self, n: int = ..., timeout: float | None = None) -> Decision: ...
    def acquire_async(self, n: int = ..., timeout: float | None = None) -> Coroutine[Any, Any, Decision]: ...
    @property
    def max_delay(self) -> float: ...
    @property
    def limit(self) -> int: ...
    @property
    def quotas(self) -> tuple[Quota, ...]: ...
    @property
    def algorithm(self) -> str: ...
    @property
    def shared(self) -> str | None: ...

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
        capacity: int | None = None,
        algorithm: Literal["token_bucket", "leaky_bucket", "shaper", "fixed_window", "sliding_window"] = "token_bucket",
        policy: Literal["evict_stalest", "reject", "allow_unlimited"] = "evict_stalest",
        amount: int | None = None,
        period: _Period | None = None,
        burst: int | None = None,
        clock: ManualClock | None = None,
        shared: str | PathLike[str] | None = None,
    ) -> KeyedLimiter: ...
    def check(self, key: _Key, n: int = ...) -> Decision: ...
    def peek(self, key: _Key, n: int = ...) -> Decision: ...
    def try_acquire(self, key: _Key, n: int = ...) -> bool: ...
    def acquire(self, key: _Key, n: int = ..., timeout: float | None = None) -> Decision: ...
    def acquire_async(
        self, key: _Key, n: int = ..., timeout: float | None = None
    ) -> Coroutine[Any, Any, Decision]: ...
    def clear(self) -> None: ...
    def __len__(self) -> int: ...
    @property
    def stats(self) -> KeyedStats: ...
    @property
    def capacity(self) -> int: ...
    @property
    def shared(self) -> str | None: ...
    @property
    def policy(self) -> Literal["evict_stalest", "reject", "allow_unlimited"]: ...
    @property
    def algorithm(self) -> Literal["token_bucket", "leaky_bucket", "shaper", "fixed_window", "sliding_window"]: ...
    @property
    def limit(self) -> int: ...
    @property
    def quotas(self) -> tuple[Quota, ...]: ...

_RedisAlgorithm = Literal["token_bucket", "leaky_bucket", "fixed_window", "sliding_window", "shaper"]
_FailurePolicy = Literal["open", "closed", "local"]
_Source = Literal["redis", "fail_open", "fail_closed", "local_fallback", "lease", "local_denial"]

@final
class RedisOptions:
    def __new__(
        cls,
        url: str,
        *,
        prefix: str = "sluicegate:",
        timeout: float = 0.025,
        connect_timeout: float | None = None,
        failure_policy: _FailurePolicy = "local",
        local_share: int = 10,
        ssl_ca_certs: str | PathLike[str] | None = None,
        ssl_certfile: str | PathLike[str] | None = None,
        ssl_keyfile: str | PathLike[str] | None = None,
        max_connections: int = 8,
    ) -> RedisOptions: ...
    @property
    def url(self) -> str: ...
    @property
    def prefix(self) -> str: ...
    @property
    def timeout(self) -> float: ...
    @property
    def failure_policy(self) -> _FailurePolicy: ...
    @property
    def max_connections(self) -> int: ...

@disjoint_base
class _RedisLimiter:
    # The base of both Redis limiters.
    @property
    def quota(self) -> Quota: ...
    @property
    def limit(self) -> int: ...
    @property
    def algorithm(self) -> str: ...
    @property
    def hybrid_stats(self) -> dict[str, int] | None: ...
    @property
    def last_error(self) -> BackendError | None: ...
    def connect(self) -> None: ...
    def stats(self) -> dict[str, int]: ...

@final
class RedisKeyedLimiter(_RedisLimiter):
    def __new__(
        cls,
        limit: _Limit | None = None,
        *,
        name: str,
        redis: RedisOptions | None = None,
        algorithm: _RedisAlgorithm = "token_bucket",
        max_delay: float | None = None,
        hybrid: bool = False,
        lease_horizon: float | None = None,
        lease_ttl: float | None = None,
        amount: int | None = None,
        period: _Period | None = None,
        burst: int | None = None,
        **legacy: Any,
    ) -> RedisKeyedLimiter: ...
    def check(self, key: _Key, n: int = ...) -> Decision: ...
    def peek(self, key: _Key, n: int = ...) -> Decision: ...
    def check_with_source(self, key: _Key, n: int = ...) -> tuple[Decision, _Source]: ...
    def try_check(self, key: _Key, n: int = ...) -> Decision: ...
    def check_many(self, items: Iterable[_Key | tuple[_Key, int]]) -> list[Decision]: ...
    def check_many_with_source(self, items: Iterable[_Key | tuple[_Key, int]]) -> list[tuple[Decision, _Source]]: ...
    def try_acquire(self, key: _Key, n: int = ...) -> bool: ...
    def check_async(self, key: _Key, n: int = ...) -> Coroutine[Any, Any, Decision]: ...
    def peek_async(self, key: _Key, n: int = ...) -> Coroutine[Any, Any, Decision]: ...
    def redis_key(self, key: _Key) -> str: ...

@final
class RedisLimiter(_RedisLimiter):
    def __new__(
        cls,
        limit: _Limit | None = None,
        *,
        name: str,
        redis: RedisOptions | None = None,
        algorithm: _RedisAlgorithm = "token_bucket",
        max_delay: float | None = None,
        hybrid: bool = False,
        lease_horizon: float | None = None,
        lease_ttl: float | None = None,
        amount: int | None = None,
        period: _Period | None = None,
        burst: int | None = None,
        **legacy: Any,
    ) -> RedisLimiter: ...
    def check(self, n: int = ...) -> Decision: ...
    def peek(self, n: int = ...) -> Decision: ...
    def check_with_source(self, n: int = ...) -> tuple[Decision, _Source]: ...
    def try_check(self, n: int = ...) -> Decision: ...
    def try_acquire(self, n: int = ...) -> bool: ...
    def check_async(self, n: int = ...) -> Coroutine[Any, Any, Decision]: ...
    def peek_async(self, n: int = ...) -> Coroutine[Any, Any, Decision]: ...

@final
class RuleDecision:
    @property
    def name(self) -> str: ...
    @property
    def mode(self) -> Literal["enforce", "shadow"]: ...
    @property
    def allowed(self) -> bool: ...
    @property
    def remaining(self) -> int: ...
    @property
    def limit(self) -> int: ...
    @property
    def window(self) -> float: ...
    @property
    def retry_after(self) -> float: ...
    @property
    def reset_after(self) -> float: ...
    @property
    def delay(self) -> float: ...
    @property
    def backend_error(self) -> bool: ...
    def __bool__(self) -> bool: ...

@final
class PolicyDecision:
    @property
    def allowed(self) -> bool: ...
    @property
    def rules(self) -> tuple[RuleDecision, ...]: ...
    @property
    def denying(self) -> tuple[RuleDecision, ...]: ...
    @property
    def retry_after(self) -> float: ...
    @property
    def delay(self) -> float: ...
    def headers(self) -> list[tuple[str, str]]: ...
    def __bool__(self) -> bool: ...

@final
class Rule:
    def __new__(
        cls,
        name: str,
        *,
        limit: str,
        match: Mapping[str, str | Sequence[str]] | None = None,
        key: Sequence[str] | None = None,
        algorithm: str | None = None,
        backend: Literal["local", "redis", "hybrid"] | None = None,
        on_error: _FailurePolicy | None = None,
        mode: Literal["enforce", "shadow"] | None = None,
        capacity: int | None = None,
        stripes: int | None = None,
        max_delay_ms: int | None = None,
    ) -> Rule: ...
    @property
    def name(self) -> str: ...
    @property
    def limit(self) -> str: ...

class _Defaults(TypedDict, total=False):
    algorithm: str
    backend: Literal["local", "redis", "hybrid"]
    on_error: _FailurePolicy
    mode: Literal["enforce", "shadow"]
    capacity: int
    ipv6_prefix: int

class _RedisRequired(TypedDict):
    url: str

class _State(TypedDict):
    memory: str | int

class _Redis(_RedisRequired, total=False):
    prefix: str
    lease_horizon_ms: int
    lease_ttl_ms: int

@final
class Policy:
    @staticmethod
    def from_file(
        path: str | PathLike[str],
        *,
        watch: bool = False,
        interval: float = 1.0,
        shared: str | PathLike[str] | None = None,
    ) -> Policy: ...
    @staticmethod
    def from_str(text: str, *, shared: str | PathLike[str] | None = None) -> Policy: ...
    @staticmethod
    def from_store(
        url: str,
        *,
        domain: str,
        snapshot: str | PathLike[str] | None = None,
        interval: float = 0.2,
    ) -> Policy: ...
    @staticmethod
    def from_rules(
        rules: Iterable[Rule],
        *,
        defaults: _Defaults | None = None,
        redis: _Redis | None = None,
        state: _State | None = None,
        shared: str | PathLike[str] | None = None,
    ) -> Policy: ...
    def check(
        self,
        *,
        ip: str | None = None,
        path: str | None = None,
        method: str | None = None,
        host: str | None = None,
        headers: Mapping[str, str] | Iterable[tuple[str, str]] | None = None,
        cost: int = ...,
        **attrs: str,
    ) -> PolicyDecision: ...
    def check_async(
        self,
        *,
        ip: str | None = None,
        path: str | None = None,
        method: str | None = None,
        host: str | None = None,
        headers: Mapping[str, str] | Iterable[tuple[str, str]] | None = None,
        cost: int = ...,
        **attrs: str,
    ) -> Coroutine[Any, Any, PolicyDecision]: ...
    @property
    def has_remote_rules(self) -> bool: ...
    def reload(self, text: str | None = None) -> None: ...
    def metrics_text(self) -> str: ...
    @property
    def last_error(self) -> str | None: ...
    @property
    def store_reachable(self) -> bool | None: ...
    @property
    def reload_count(self) -> tuple[int, int]: ...
    @property
    def rules(self) -> tuple[str, ...]: ...
    def close(self) -> None: ...

@final
class _PendingCheck:
    def start(self) -> PolicyDecision | Awaitable[PolicyDecision]: ...

def _shared_open(
    name: str | PathLike[str],
    memory: int | None,
    limits: int | None,
    mode: int,
    allow_other_owner: bool,
) -> str: ...
def _shared_unlink(name: str | PathLike[str]) -> None: ...
