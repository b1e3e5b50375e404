"""The exception hierarchy. Bad configuration is a plain ``ValueError``; every
other failure is a :class:`SluicegateError`."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ._sluicegate import Decision

__all__ = [
    "AcquireTimeout",
    "BackendDataError",
    "BackendError",
    "BackendTimeout",
    "CapacityError",
    "CircuitOpen",
    "RateLimited",
    "SharedMemoryError",
    "SluicegateError",
]


class SluicegateError(Exception):
    """Base class of every sluicegate error (configuration errors are ``ValueError``)."""


class CapacityError(SluicegateError):
    """A request costs more than the limiter can ever admit at once (its burst or
    limit): it can never succeed, so it is an error rather than a denial."""

    requested: int
    capacity: int

    def __init__(self, message: str, requested: int, capacity: int) -> None:
        super().__init__(message)
        self.requested = requested
        self.capacity = capacity


class RateLimited(SluicegateError):
    """Raised by :func:`sluicegate.rate_limit` when a call is denied; ``decision``
    says when to retry (``decision.retry_after`` seconds)."""

    decision: Decision

    def __init__(self, decision: Decision, message: str | None = None) -> None:
        if message is None:
            message = f"rate limit exceeded; retry in {decision.retry_after:.3f} s"
        super().__init__(message)
        self.decision = decision


class AcquireTimeout(SluicegateError, TimeoutError):
    """``acquire``/``acquire_async`` gave up: the request would not be admitted
    before the timeout. ``decision`` is the last denial."""

    decision: Decision

    def __init__(self, message: str, decision: Decision) -> None:
        # One argument only: OSError (TimeoutError's base) would read two as errno/strerror.
        super().__init__(message)
        self.decision = decision

    def __str__(self) -> str:
        return str(self.args[0])


class BackendError(SluicegateError):
    """The shared store (Redis) failed a call that its failure policy does not
    answer: a connection error, a per-key data error (e.g. ``WRONGTYPE``), or an
    unexpected reply. Never a ``ValueError``: that is kept for bad configuration."""


class BackendTimeout(BackendError, TimeoutError):
    """Redis did not answer within the limiter's ``timeout``; the call is never
    replayed (it may or may not have run on the server)."""


class BackendDataError(BackendError):
    """Redis refused this key's call because of the key's own data (a value of
    another type at the key, ``WRONGTYPE``, or a script error over its value):
    this check failed, the other keys go on, and the circuit breaker does not
    count it. No failure policy answers it: fix or delete the key."""


class StoreUnavailable(BackendError):
    """``Policy.from_store`` could not read its rule store (missing, not a
    database, locked past the busy timeout, a newer schema) and no snapshot
    could stand in. Once a policy is running, an outage is not raised: it keeps
    its rules and reports it (``last_error``, ``store_reachable``)."""


class CircuitOpen(BackendError):
    """The circuit breaker is open after repeated failures: Redis was not asked."""


class SharedMemoryError(SluicegateError):
    """A shared-memory region (``shared=``) could not be used: a symbolic link, a
    file another user owns, a file that is not a region, another layout version,
    a truncated region, another size, or a CPU without lock-free 16-byte
    compare-and-swap. The message names the file and what is wrong."""
