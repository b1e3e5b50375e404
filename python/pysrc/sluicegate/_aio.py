"""The asyncio side of ``acquire_async``: the Rust methods hand their waiting to
these coroutines, which sleep with ``asyncio.sleep`` and so never block the loop."""

from __future__ import annotations

import asyncio
import math
import time
from typing import TYPE_CHECKING, Any, Callable, TypeVar

from ._errors import AcquireTimeout

if TYPE_CHECKING:
    from ._sluicegate import Decision, Shaper

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


async def in_thread(f: Callable[..., _T], *args: Any) -> _T:
    """A blocking call (a Redis round trip, GIL released) on a worker thread, so the
    event loop goes on meanwhile."""
    return await asyncio.to_thread(f, *args)
