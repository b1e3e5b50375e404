"""Issue 11 (items 2 and 7): no input aborts the interpreter or leaks a
``PanicException``; negative numbers are the package's own ``ValueError`` naming
the field; every class raises ``CapacityError`` exactly above its ``limit``."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from typing import Any, Callable

import pytest

import sluicegate
from sluicegate import (
    CapacityError,
    FixedWindow,
    KeyedLimiter,
    LeakyBucket,
    ManualClock,
    Quota,
    Shaper,
    SlidingLog,
    SlidingWindow,
    StripedTokenBucket,
    TokenBucket,
)

UNKEYED = [TokenBucket, LeakyBucket, FixedWindow, SlidingWindow, SlidingLog, StripedTokenBucket]


def _run_limited(code: str, limit_bytes: int = 1 << 30) -> subprocess.CompletedProcess[str]:
    """Runs `code` in a fresh interpreter under an address-space limit, so a huge
    allocation fails for certain instead of depending on overcommit."""
    prelude = f"import resource\nresource.setrlimit(resource.RLIMIT_AS, ({limit_bytes}, {limit_bytes}))\n"
    return subprocess.run(
        [sys.executable, "-W", "error", "-c", prelude + textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_huge_keyed_capacity_is_memory_error_not_abort() -> None:
    proc = _run_limited(
        """
        import sluicegate
        for cap in (10**10, 2**40, 2**50):
            try:
                sluicegate.KeyedLimiter("10/s", capacity=cap)
            except MemoryError as e:
                assert str(cap) in str(e), e
            else:
                raise SystemExit(f"capacity={cap} did not raise")
        # The interpreter is still fine afterwards, and a sane table works.
        t = sluicegate.KeyedLimiter("1/s", capacity=1000)
        assert t.check("a") and not t.check("a")
        print("ok")
        """
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "ok"


@pytest.mark.parametrize("cap", [2**64 - 1, 2**63, 2**62])
def test_unaddressable_keyed_capacity_is_value_error(cap: int) -> None:
    with pytest.raises(ValueError, match="capacity"):
        KeyedLimiter("10/s", capacity=cap)


def test_no_panic_exception_reaches_python_from_public_calls() -> None:
    # Extreme values at every public entry point, under an address-space limit:
    # each raises an ordinary Exception subclass (or succeeds), never a
    # BaseException-only PanicException, and the process never aborts.
    proc = _run_limited(
        """
        import datetime, sluicegate as sg
        BIG = [0, 1, 2**32, 2**63 - 1, 2**63, 2**64 - 1, 2**64, 2**100, -1, -(2**70)]
        def attempt(f):
            try:
                f()
            except Exception:
                pass
        classes = [sg.TokenBucket, sg.LeakyBucket, sg.FixedWindow, sg.SlidingWindow, sg.SlidingLog,
                   sg.StripedTokenBucket, sg.Shaper]
        for a in BIG:
            for b in BIG:
                attempt(lambda: sg.Quota(a, 1, b))
                for cls in classes:
                    attempt(lambda: cls(amount=a, burst=b))
                    attempt(lambda: cls(amount=a, period=1e-9, burst=b))
                    attempt(lambda: cls(amount=a, period=datetime.timedelta(days=10**8)))
                attempt(lambda: sg.KeyedLimiter(amount=a, burst=b, capacity=a))
                attempt(lambda: sg.StripedTokenBucket("10/s", stripes=a))
            attempt(lambda: sg.ManualClock(a))
            attempt(lambda: sg.Shaper("10/s", max_delay=float(a)))
            for cls in classes:
                lim = cls("5/s", clock=sg.ManualClock(2**64 - 1))
                for name in ("check", "peek", "try_acquire", "reserve"):
                    if hasattr(lim, name):
                        attempt(lambda: getattr(lim, name)(a))
                attempt(lambda: lim.acquire(a, timeout=0))
            k = sg.KeyedLimiter("5/s", capacity=64, clock=sg.ManualClock(2**64 - 1))
            attempt(lambda: k.check(a, a))
            attempt(lambda: k.check("x" * 10_000, a))
            attempt(lambda: sg.RedisKeyedLimiter(amount=a, burst=b, name="x", redis=sg.RedisOptions("redis://127.0.0.1:1")))
            attempt(lambda: sg.RedisOptions("redis://127.0.0.1:1", timeout=float(a), local_share=a))
            attempt(lambda: sg.Policy.from_str(f'[[rule]]\\nname = "r"\\nlimit = "{a}/s burst {b}"\\ncapacity = {a}\\n'))
        dead = sg.RedisKeyedLimiter("5/s", name="x", redis=sg.RedisOptions("redis://127.0.0.1:1", timeout=0.01))
        for a in BIG:
            attempt(lambda: dead.check("k", a))
            attempt(lambda: dead.check_many([("k", a)]))
            attempt(lambda: sg.Policy.from_str('[[rule]]\\nname = "g"\\nlimit = "5/s"\\n').check(path="/", cost=a))
        for url in ["redis://127.0.0.1:notaport", "redis://127.0.0.1:99999", "redis://", "", "redis+cluster://", "rediss://x:1"]:
            attempt(lambda: sg.RedisOptions(url))
        for text in ["1/ns", "18446744073709551615/s", "1 per 18446744073709551615 days",
                     "1/s burst 18446744073709551615", "; ".join(["1/s"] * 100)]:
            for cls in classes:
                attempt(lambda: cls(text))
            attempt(lambda: sg.KeyedLimiter(text))
        print("ok")
        """
    )
    assert "PanicException" not in proc.stderr, proc.stderr
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "ok"


@pytest.mark.parametrize(
    ("make", "field"),
    [
        (lambda: TokenBucket(amount=-1), "amount"),
        (lambda: TokenBucket(amount=10, burst=-1), "burst"),
        (lambda: Quota(-1), "amount"),
        (lambda: Quota(10, 1, burst=-1), "burst"),
        (lambda: KeyedLimiter("10/s", capacity=-1), "capacity"),
        (lambda: StripedTokenBucket("10/s", stripes=-1), "stripes"),
        (lambda: ManualClock(-1), "now_ns"),
        (lambda: ManualClock().set_ns(-5), "now_ns"),
        (lambda: ManualClock().advance_ns(-5), "ns"),
        (lambda: TokenBucket("1/s").check(-1), "n"),
        (lambda: KeyedLimiter("1/s").check("k", -1), "n"),
        (lambda: Shaper("1/s").reserve(-1), "n"),
    ],
)
def test_negative_integers_are_value_errors_naming_the_field(make: Callable[[], Any], field: str) -> None:
    with pytest.raises(ValueError, match=rf"\b{field}\b") as err:
        make()
    assert not isinstance(err.value, OverflowError)


@pytest.mark.parametrize("cls", [*UNKEYED, Shaper])
def test_every_class_raises_capacity_error_exactly_above_its_limit(cls: Any) -> None:
    lim = cls("10/s", clock=ManualClock(0))
    take = lim.reserve if cls is Shaper else lim.check
    with pytest.raises(CapacityError) as err:
        take(lim.limit + 1)
    assert (err.value.requested, err.value.capacity) == (lim.limit + 1, lim.limit)
    assert take(lim.limit)  # the limit itself is admissible from a fresh limiter
    for big in (2**63, 2**64, 2**200):
        with pytest.raises(CapacityError):
            take(big)


def test_shaper_limit_is_its_burst_plus_what_fits_in_the_delay() -> None:
    # Why Shaper("10/s").reserve(11) is granted: the shaper's limit is 20, not 10
    # (10 at once, then 10 more within the default max_delay of 1 s). Above it,
    # CapacityError, as everywhere.
    s = Shaper("10/s", clock=ManualClock(0))
    assert s.limit == 20
    r = s.reserve(11)
    assert r and 0 < r.delay <= s.max_delay
    assert Shaper("10/s", max_delay=0, clock=ManualClock(0)).limit == 10
    with pytest.raises(CapacityError):
        Shaper("10/s", max_delay=0).reserve(11)


def test_algorithm_names_come_from_the_core() -> None:
    assert TokenBucket("1/s").algorithm == "token_bucket"
    assert SlidingLog("1/s").algorithm == "sliding_log"
    assert Shaper("1/s").algorithm == "shaper"
    assert StripedTokenBucket("1/s").algorithm == "token_bucket"
    with pytest.raises(ValueError, match="token_bucket") as err:
        KeyedLimiter("1/s", algorithm="gcra")  # type: ignore[arg-type]
    assert "sliding_log" in str(err.value)  # the core's list of valid names
    with pytest.raises(ValueError, match="does not support keyed"):
        KeyedLimiter("1/s", algorithm="sliding_log")  # type: ignore[arg-type]
    assert isinstance(TokenBucket("1/s"), sluicegate._sluicegate._Limiter)
