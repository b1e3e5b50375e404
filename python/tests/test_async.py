"""asyncio: waiting never blocks the event loop."""

from __future__ import annotations

import asyncio
import time

import sluicegate


def test_waiting_does_not_block_other_tasks() -> None:
    tb = sluicegate.TokenBucket("5/second burst 1")
    tb.check()

    async def main() -> tuple[float, list[float]]:
        ticks: list[float] = []

        async def ticker() -> None:
            while True:
                ticks.append(time.monotonic())
                await asyncio.sleep(0.005)

        task = asyncio.create_task(ticker())
        start = time.monotonic()
        await tb.acquire_async(timeout=2)  # ~200 ms
        waited = time.monotonic() - start
        task.cancel()
        return waited, ticks

    waited, ticks = asyncio.run(main())
    assert 0.1 < waited < 1.5
    gaps = [b - a for a, b in zip(ticks, ticks[1:])]
    assert len(ticks) > 10 and max(gaps) < 0.05


def test_many_waiters_are_all_served_at_the_rate() -> None:
    tb = sluicegate.TokenBucket("50/second burst 1")

    async def main() -> list[float]:
        async def one() -> float:
            await tb.acquire_async(timeout=5)
            return time.monotonic()

        return list(await asyncio.gather(*(one() for _ in range(10))))

    start = time.monotonic()
    times = sorted(asyncio.run(main()))
    # 10 admissions at 50/s with a burst of 1 take at least 9 × 20 ms.
    assert times[-1] - start >= 0.17


def test_cancelled_shaper_wait_gives_its_slot_back() -> None:
    sh = sluicegate.Shaper("1/second burst 1", max_delay=10)
    sh.reserve()

    async def main() -> None:
        task = asyncio.create_task(sh.acquire_async())
        await asyncio.sleep(0.05)
        task.cancel()
        try:
            await task
        except asyncio.CancelledError:
            pass

    asyncio.run(main())
    # The cancelled reservation (1 s out) was the latest: freed, the next is 1 s out again.
    assert abs(sh.reserve().delay - 1.0) < 0.1
