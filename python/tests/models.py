"""Pure-Python reference models of each algorithm, in exact arithmetic, driven by
the same integer-nanosecond clock the tests give the limiters."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from fractions import Fraction


@dataclass
class Verdict:
    allowed: bool
    remaining: int
    retry_after_ns: int | None = None


@dataclass
class TokenBucketModel:
    """Tokens as an exact fraction: capacity `burst`, refilled at amount/period."""

    amount: int
    period_ns: int
    burst: int
    tokens: Fraction = field(init=False)
    last: int | None = None

    def __post_init__(self) -> None:
        self.tokens = Fraction(self.burst)

    def check(self, now: int, n: int, consume: bool = True) -> Verdict:
        tokens = self.tokens
        if self.last is not None and now > self.last:
            tokens = min(Fraction(self.burst), tokens + Fraction((now - self.last) * self.amount, self.period_ns))
        self.tokens, self.last = tokens, max(now, self.last or 0)
        if tokens >= n:
            if consume:
                self.tokens = tokens - n
            return Verdict(True, int(tokens - n) if consume else int(tokens - n))
        retry = (n - tokens) * Fraction(self.period_ns, self.amount)
        return Verdict(False, int(tokens), int(retry))


@dataclass
class FixedWindowModel:
    limit: int
    window_ns: int
    counts: dict[int, int] = field(default_factory=lambda: defaultdict(int))

    def check(self, now: int, n: int, consume: bool = True) -> Verdict:
        index = now // self.window_ns
        count = self.counts[index]
        if count + n <= self.limit:
            if consume:
                self.counts[index] += n
            return Verdict(True, self.limit - count - n, 0)
        end = (index + 1) * self.window_ns
        return Verdict(False, self.limit - count, end - now)


@dataclass
class SlidingWindowModel:
    """The counter approximation, exactly as specified: the real-valued
    prev·(W − elapsed)/W + cur + n ≤ limit, i.e. ⌈prev·(W − elapsed)/W⌉ + cur + n ≤ limit."""

    limit: int
    window_ns: int
    counts: dict[int, int] = field(default_factory=lambda: defaultdict(int))

    def check(self, now: int, n: int, consume: bool = True) -> Verdict:
        index = now // self.window_ns
        elapsed = now - index * self.window_ns
        weighted = -(-self.counts[index - 1] * (self.window_ns - elapsed) // self.window_ns)  # rounded up
        estimate = weighted + self.counts[index]
        if estimate + n <= self.limit:
            if consume:
                self.counts[index] += n
            return Verdict(True, self.limit - estimate - n)
        return Verdict(False, max(0, self.limit - estimate))


@dataclass
class SlidingLogModel:
    """Exact: admitted iff the units admitted in (now − W, now] plus n fit."""

    limit: int
    window_ns: int
    log: list[int] = field(default_factory=list)

    def check(self, now: int, n: int, consume: bool = True) -> Verdict:
        inside = sum(1 for t in self.log if t > now - self.window_ns)
        if inside + n <= self.limit:
            if consume:
                self.log.extend([now] * n)
            return Verdict(True, self.limit - inside - n)
        return Verdict(False, self.limit - inside)
