"""Every algorithm against its exact reference model, on an injected clock."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

import sluicegate
from models import FixedWindowModel, SlidingLogModel, SlidingWindowModel, TokenBucketModel

SEC = 1_000_000_000

# (nanoseconds to advance, cost, peek instead of check)
steps = st.lists(
    st.tuples(
        st.one_of(st.just(0), st.integers(0, 3 * SEC), st.integers(0, 50_000_000)),
        st.integers(0, 6),
        st.booleans(),
    ),
    min_size=1,
    max_size=60,
)


def run(limiter: object, model: object, clock: sluicegate.ManualClock, ops: list[tuple[int, int, bool]]) -> None:
    for dt, n, peek in ops:
        clock.advance_ns(dt)
        now = clock.now_ns()
        cap = limiter.limit  # type: ignore[attr-defined]
        if n > cap:
            try:
                limiter.check(n)  # type: ignore[attr-defined]
            except sluicegate.CapacityError as e:
                assert (e.requested, e.capacity) == (n, cap)
            else:
                raise AssertionError("a cost above the limit must raise CapacityError")
            continue
        got = limiter.peek(n) if peek else limiter.check(n)  # type: ignore[attr-defined]
        want = model.check(now, n, consume=not peek)  # type: ignore[attr-defined]
        assert bool(got) == want.allowed, (now, n, got, want)
        assert got.remaining == want.remaining, (now, n, got, want)
        if want.retry_after_ns is not None and not want.allowed:
            assert got.retry_after_ns == want.retry_after_ns, (now, n, got, want)
        if got:
            assert got.retry_after == 0.0


# Periods that the amount divides: the emission interval is then exact and the
# core must agree with the rational model to the nanosecond.
exact_rates = st.tuples(st.integers(1, 10), st.sampled_from([1, 2, 5, 10])).map(
    lambda ap: (ap[0], ap[0] * ap[1] * 100_000_000)
)


# The meter is the token bucket seen from the other side: level = burst − tokens,
# so both answer as the token bucket's model.
@pytest.mark.parametrize(("cls", "start"), [(sluicegate.TokenBucket, 7 * SEC), (sluicegate.LeakyBucket, 3 * SEC)])
@given(exact_rates, st.integers(1, 8), steps)
def test_bucket_matches_model(
    cls: type, start: int, rate: tuple[int, int], burst: int, ops: list[tuple[int, int, bool]]
) -> None:
    amount, period = rate
    clock = sluicegate.ManualClock(start)
    run(cls(amount=amount, period=period / SEC, burst=burst, clock=clock), TokenBucketModel(amount, period, burst), clock, ops)


@pytest.mark.parametrize(
    ("cls", "model", "start"),
    [
        (sluicegate.FixedWindow, FixedWindowModel, 11 * SEC + 123),
        (sluicegate.SlidingWindow, SlidingWindowModel, 5 * SEC + 77),
        (sluicegate.SlidingLog, SlidingLogModel, 2 * SEC),
    ],
)
@given(st.integers(1, 10), st.sampled_from([SEC // 2, SEC, 3 * SEC]), steps)
def test_window_matches_model(
    cls: type, model: type, start: int, limit: int, window: int, ops: list[tuple[int, int, bool]]
) -> None:
    clock = sluicegate.ManualClock(start)
    run(cls(amount=limit, period=window / SEC, clock=clock), model(limit, window), clock, ops)


@given(st.integers(1, 8), st.integers(1, 8), steps)
def test_keyed_token_bucket_matches_one_model_per_key(a: int, b: int, ops: list[tuple[int, int, bool]]) -> None:
    clock = sluicegate.ManualClock(SEC)
    keyed = sluicegate.KeyedLimiter(amount=a, period=a * 0.1, burst=b, capacity=64, clock=clock)
    models = {k: TokenBucketModel(a, a * 100_000_000, b) for k in ("x", b"x", 1)}
    for i, (dt, n, peek) in enumerate(ops):
        clock.advance_ns(dt)
        key = list(models)[i % 3]
        if n > b:
            continue
        got = keyed.peek(key, n) if peek else keyed.check(key, n)
        want = models[key].check(clock.now_ns(), n, consume=not peek)
        assert (bool(got), got.remaining) == (want.allowed, want.remaining)


@given(st.sampled_from([1, 2, 4, 5]), st.integers(1, 5), steps)
def test_compound_is_all_or_nothing(a: int, b: int, ops: list[tuple[int, int, bool]]) -> None:
    # "a per second; b per 3 seconds" (bursts a and b) against two models at once:
    # admitted iff both models admit, and then both are charged.
    clock = sluicegate.ManualClock(SEC)
    tb = sluicegate.TokenBucket(f"{a}/second; {b} per 3 seconds", clock=clock)
    m1, m2 = TokenBucketModel(a, SEC, a), TokenBucketModel(b, 3 * SEC, b)
    for dt, n, _ in ops:
        clock.advance_ns(dt)
        now = clock.now_ns()
        if n > min(a, b):
            continue
        want = m1.check(now, n, consume=False).allowed and m2.check(now, n, consume=False).allowed
        got = tb.check(n)
        assert bool(got) == want
        if want:
            m1.check(now, n)
            m2.check(now, n)
