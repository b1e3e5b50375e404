"""The asyncio side of ``acquire_async``: the Rust methods hand their waiting to
these coroutines, which sleep with ``asyncio.sleep`` and so never block the loop;
the coroutine of the Redis limiters' ``check_async`` / ``peek_async``; and
``Policy.check_async``'s."""

from __future__ import annotations

import asyncio
import math
import time
from typing import TYPE_CHECKING, Any, Awaitable, Callable, TypeVar

from ._errors import AcquireTimeout
from ._sluicegate import PolicyDecision

if TYPE_CHECKING:
    from ._sluicegate import Decision, Shaper, _PendingCheck

_T = TypeVar("_T")

# A denial that can never turn into an admission still gets looked at again now
# and then, rather than handing asyncio an infinite sleep.
_LONGEST_SLEEP = 3600.0


def _deadline(timeout: float | None) -> float | None:
    if timeout is None or math.isinf(timeout):
        return None
    return time.monotonic() + timeout


def _pause(decision: Decision, deadline: float | None) -> float:
    # Never spin: a lost race (retry_after 0) still waits a microsecond.
    pause = min(max(decision.retry_after, 1e-6), _LONGEST_SLEEP)
    if deadline is not None and time.monotonic() + pause > deadline:
        raise AcquireTimeout(
            f"timed out waiting for rate-limit capacity (next chance in {decision.retry_after:.3f} s)",
            decision,
        )
    return pause


async def acquire(check: Callable[[int], Decision], n: int, timeout: float | None) -> Decision:
    deadline = _deadline(timeout)
    while True:
        decision = check(n)
        if decision:
            return decision
        await asyncio.sleep(_pause(decision, deadline))


async def acquire_keyed(
    check: Callable[[object, int], Decision], key: object, n: int, timeout: float | None
) -> Decision:
    deadline = _deadline(timeout)
    while True:
        decision = check(key, n)
        if decision:
            return decision
        await asyncio.sleep(_pause(decision, deadline))


async def reserve(shaper: Shaper, n: int, timeout: float | None) -> Decision:
    deadline = _deadline(timeout)
    while True:
        reservation = shaper.reserve(n)
        if reservation:
            try:
                await asyncio.sleep(reservation.delay)
            except asyncio.CancelledError:
                # The caller gave up before its turn: free the slot if no one is behind it.
                shaper.cancel(reservation)
                raise
            return reservation.decision
        await asyncio.sleep(_pause(reservation.decision, deadline))


async def native(start: Callable[..., Awaitable[_T]], *args: Any) -> _T:
    """A Redis limiter's ``check_async`` / ``peek_async``: ``start`` (the limiter's
    bound ``_start``) spawns the check on the limiter's Tokio runtime and returns an
    asyncio future that Rust completes; no thread waits for the round trip, and the
    event loop goes on meanwhile. This frame keeps the limiter (and so its runtime)
    alive while the check is in flight, and lets go of it however the await ends:
    an exception's traceback (a CancelledError kept by the future, which Rust may
    still hold for a moment) must not keep the limiter."""
    try:
        return await start(*args)
    finally:
        del start, args


async def policy_check(pending: _PendingCheck) -> PolicyDecision:
    """``Policy.check_async``: ``pending.start()`` decides what the process can
    decide alone at once (local rules, a hybrid rule's lease) and returns the
    decision; a check that waits for Redis returns an asyncio future that Rust
    completes. Cancelling this coroutine cancels that future, which drops the
    Rust check: its drop guard gives back what its local rules had charged."""
    try:
        started = pending.start()
        if isinstance(started, PolicyDecision):
            return started
        decision: PolicyDecision = await started
        return decision
    finally:
        del pending
