"""What the ASGI and WSGI middleware share: rules (default and per-route limits,
exemptions), the client key (socket peer, trusted proxies, IPv6 /64 grouping),
the decision, and the response fields:

* ``RateLimit-Policy`` and ``RateLimit`` as in the IETF httpapi draft
  (``"default";q=100;w=60`` and ``"default";r=99;t=60``): ``q`` is the limit's
  amount, ``w`` its period and ``t`` the seconds until the client's limit is full
  again, both rounded up to whole seconds; one item per limit of the rule;
* on a denial, status 429 with ``Retry-After`` (whole seconds, rounded up, so a
  client that obeys it is never early) and an ``application/problem+json`` body;
* optionally the legacy ``X-RateLimit-Limit``/``-Remaining``/``-Reset`` (``Reset``
  in seconds from now, for the limit closest to running out).
"""

from __future__ import annotations

import functools
import ipaddress
import json
import math
import os
import warnings
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Callable, Coroutine, Literal, NamedTuple, Protocol, Union

from ._errors import CapacityError
from ._sluicegate import Decision, KeyedLimiter, ManualClock, Policy, PolicyDecision, Quota

_LimitSpec = Union[str, Quota, Sequence[Union[str, Quota]]]
# Unions of one-value Literals (not Literal["a", "b"]) so that the runtime object is
# a Union too, as mypy.stubtest expects of an alias that mypy sees as one.
_Algorithm = Union[Literal["token_bucket"], Literal["leaky_bucket"], Literal["fixed_window"], Literal["sliding_window"]]
_Policy = Union[Literal["evict_stalest"], Literal["reject"], Literal["allow_unlimited"]]

# The middleware's default limit; a policy= replaces it (other limits= with a
# policy are an error).
DEFAULT_LIMITS = "100/minute"

METRICS_CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
_ForwardedHeader = Union[Literal["x-forwarded-for"], Literal["forwarded"]]

_NS = 1_000_000_000
# Client addresses whose keys HttpLimiter remembers (an LRU: a flood of new
# addresses only evicts, it never grows the cache).
_KEY_CACHE = 4096
IPNetwork = Union[ipaddress.IPv4Network, ipaddress.IPv6Network]


def _sf_string(s: str) -> str:
    """A structured-field string (RFC 8941): printable ASCII, `\\` and `"` escaped."""
    if any(not (0x20 <= ord(c) <= 0x7E) for c in s):
        raise ValueError(f"a limit name must be printable ASCII: {s!r}")
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _ceil_secs(ns: int) -> int:
    return -(-ns // _NS)


class Table(Protocol):
    """What a rule's per-quota table must do: a :class:`KeyedLimiter`, a
    :class:`RedisKeyedLimiter`, or anything with the same two calls."""

    def check(self, key: str | bytes | int, n: int = 1, /) -> Decision: ...

    def peek(self, key: str | bytes | int, n: int = 1, /) -> Decision: ...


TableFactory = Callable[[Quota], Table]


@dataclass(frozen=True)
class Rule:
    """One set of limits: a name for the headers, its quotas, one keyed table per quota."""

    name: str
    quotas: tuple[Quota, ...]
    tables: tuple[Table, ...]
    item_names: tuple[str, ...]
    policy_field: str
    # The item names as structured-field strings, quoted once here rather than
    # per response.
    item_fields: tuple[str, ...]
    # Every table is an in-process KeyedLimiter: decided without awaiting.
    local: bool


class Outcome(NamedTuple):
    """The answer for one request: admitted or not, and the fields to add. (A
    named tuple: built on every request, and a frozen dataclass's constructor
    costs several times as much.)"""

    allowed: bool
    headers: list[tuple[str, str]]
    retry_after: int | None = None
    detail: str = ""

    def problem_body(self) -> bytes:
        return json.dumps(
            {
                "type": "about:blank",
                "title": "Too Many Requests",
                "status": 429,
                "detail": self.detail,
            },
            separators=(",", ":"),
        ).encode()

    def denial_headers(self) -> list[tuple[str, str]]:
        headers = [("Content-Type", "application/problem+json")]
        if self.retry_after is not None:
            headers.append(("Retry-After", str(self.retry_after)))
        return headers + self.headers


class _Pattern:
    """``"/path"`` (exact), ``"/prefix/*"`` (prefix), optionally after a method:
    ``"POST /login"``."""

    __slots__ = ("method", "path", "prefix", "text")

    def __init__(self, text: str) -> None:
        method, _, path = text.strip().rpartition(" ")
        if not path.startswith("/"):
            raise ValueError(f"a route pattern is a path starting with '/', optionally after a method: {text!r}")
        self.text = text
        self.method = method.strip().upper() or None
        self.prefix = path.endswith("*")
        self.path = path[:-1] if self.prefix else path

    def matches(self, method: str, path: str) -> bool:
        if self.method is not None and self.method != method:
            return False
        return path.startswith(self.path) if self.prefix else path == self.path

    def rank(self) -> tuple[int, int, int]:
        # Exact before prefix, longer prefix first, a method before any method.
        return (0 if not self.prefix else 1, -len(self.path), 0 if self.method else 1)


class HttpLimiter:
    """The framework-independent part of the middleware."""

    def __init__(
        self,
        limits: _LimitSpec | None,
        *,
        routes: Mapping[str, _LimitSpec | None] | None,
        exempt: Iterable[str],
        trusted_proxies: Iterable[str],
        forwarded_header: _ForwardedHeader,
        ipv6_prefix: int,
        capacity: int,
        algorithm: _Algorithm,
        policy: _Policy | Policy,
        legacy_headers: bool,
        clock: ManualClock | None,
        table_factory: TableFactory | None = None,
        shared: str | os.PathLike[str] | None = None,
    ) -> None:
        if not 0 <= ipv6_prefix <= 128:
            raise ValueError("ipv6_prefix must be between 0 and 128")
        if forwarded_header not in ("x-forwarded-for", "forwarded"):
            raise ValueError('forwarded_header must be "x-forwarded-for" or "forwarded"')
        # policy=: a Policy (rules from a file) or, as before, the full-table policy.
        self.rules: Policy | None = policy if isinstance(policy, Policy) else None
        if self.rules is not None:
            if routes or (limits is not None and limits is not DEFAULT_LIMITS):
                raise ValueError("give the limits either as limits=/routes= or as policy=Policy(...), not both")
            limits, routes, policy = None, None, "evict_stalest"
        assert not isinstance(policy, Policy)
        self._capacity = capacity
        self._algorithm = algorithm
        self._policy = policy
        self._clock = clock
        if shared is not None and table_factory is not None:
            raise ValueError("give either shared= or table_factory=, not both")
        self._table_factory = table_factory
        self._shared = shared
        self.legacy_headers = legacy_headers
        self.ipv6_prefix = ipv6_prefix
        self.forwarded_header = forwarded_header
        self.trusted: tuple[IPNetwork, ...] = tuple(
            ipaddress.ip_network(p, strict=False) for p in trusted_proxies
        )
        self.default = self._rule("default", limits) if limits is not None else None
        self.routes: list[tuple[_Pattern, Rule | None]] = sorted(
            (
                (_Pattern(p), self._rule(p, spec) if spec is not None else None)
                for p, spec in (routes or {}).items()
            ),
            key=lambda pr: pr[0].rank(),
        )
        self.exempt = [_Pattern(p) for p in exempt]
        # The key of an address is a pure function of it (and of ipv6_prefix):
        # remembered for the most recent clients, as parsing it costs microseconds.
        self._key_of = functools.lru_cache(maxsize=_KEY_CACHE)(self._key_of_address)
        if (
            table_factory is None
            and shared is None
            and (self.default is not None or any(r for _, r in self.routes))
        ):
            warn_if_multi_worker()

    def _rule(self, name: str, spec: _LimitSpec) -> Rule:
        if isinstance(spec, (str, Quota)):
            spec = [spec]
        quotas: list[Quota] = []
        for item in spec:
            quotas.extend(Quota.parse_many(item) if isinstance(item, str) else [item])
        if not quotas:
            raise ValueError(f"no limits given for {name!r}")
        tables: tuple[Table, ...] = tuple(
            self._table_factory(q)
            if self._table_factory is not None
            else KeyedLimiter(
                q,
                capacity=self._capacity,
                algorithm=self._algorithm,
                policy=self._policy,
                clock=self._clock,
                shared=self._shared,
            )
            for q in quotas
        )
        item_names = (name,) if len(quotas) == 1 else tuple(f"{name}-{i}" for i in range(len(quotas)))
        policy_field = ", ".join(
            f"{_sf_string(n)};q={q.amount};w={_ceil_secs(q.period_ns)}" for n, q in zip(item_names, quotas)
        )
        return Rule(
            name,
            tuple(quotas),
            tables,
            item_names,
            policy_field,
            tuple(_sf_string(n) for n in item_names),
            all(isinstance(t, KeyedLimiter) for t in tables),
        )

    def rule_for(self, method: str, path: str) -> Rule | None:
        """The rule that limits a request, or None when it is not limited."""
        if self.exempt and any(p.matches(method, path) for p in self.exempt):
            return None
        for pattern, rule in self.routes:
            if pattern.matches(method, path):
                return rule
        return self.default

    # -- the client key -------------------------------------------------------

    def _is_trusted(self, addr: str) -> bool:
        ip = _parse_ip(addr)
        return ip is not None and any(ip in net for net in self.trusted)

    def client_address(self, peer: str | None, forwarded: str | None) -> str | None:
        """The client's address: the socket peer, unless it is a trusted proxy;
        then the forwarding header is read right to left, skipping trusted hops."""
        if peer is None or not self.trusted or forwarded is None or not self._is_trusted(peer):
            return peer
        hops = _forwarded_for(forwarded) if self.forwarded_header == "forwarded" else _x_forwarded_for(forwarded)
        for hop in reversed(hops):
            if not self._is_trusted(hop):
                return hop
        return hops[0] if hops else peer

    def client_key(self, address: str | None) -> str:
        """The table key of an address: IPv4 as it is, IPv6 by its /ipv6_prefix
        network (one end site usually holds a whole /64)."""
        if address is None:
            return "unknown"
        return self._key_of(address)

    def _key_of_address(self, address: str) -> str:
        ip = _parse_ip(address)
        if ip is None:
            return address
        if isinstance(ip, ipaddress.IPv6Address):
            if ip.ipv4_mapped is not None:
                return str(ip.ipv4_mapped)
            return str(ipaddress.IPv6Network((ip, self.ipv6_prefix), strict=False))
        return str(ip)

    # -- the decision ---------------------------------------------------------

    def is_exempt(self, method: str, path: str) -> bool:
        return bool(self.exempt) and any(p.matches(method, path) for p in self.exempt)

    def decide_policy(
        self,
        *,
        ip: str | None,
        method: str,
        path: str,
        host: str | None,
        headers: list[tuple[str, str]],
        cost: int,
    ) -> Outcome:
        """Checks the request against the policy's rules (``policy=``): the
        ``RateLimit``/``RateLimit-Policy`` fields carry one item per enforcing rule."""
        assert self.rules is not None
        d = self.rules.check(ip=ip, path=path, method=method, host=host, headers=headers, cost=cost)
        return _policy_outcome(d)

    async def decide_policy_async(
        self,
        *,
        ip: str | None,
        method: str,
        path: str,
        host: str | None,
        headers: list[tuple[str, str]],
        cost: int,
    ) -> Outcome:
        """:meth:`decide_policy` for the ASGI middleware: a policy with rules on
        Redis is awaited (``Policy.check_async``), so the event loop never waits
        on a round trip; one without is checked directly (nothing to await)."""
        assert self.rules is not None
        if not self.rules.has_remote_rules:
            d = self.rules.check(ip=ip, path=path, method=method, host=host, headers=headers, cost=cost)
        else:
            d = await self.rules.check_async(ip=ip, path=path, method=method, host=host, headers=headers, cost=cost)
        return _policy_outcome(d)

    def decide(self, rule: Rule, key: str | bytes | int, cost: int) -> Outcome:
        """Checks every limit of the rule all-or-nothing: all are peeked first and
        charged only if all allow. (Two racing requests of one client may both
        pass the peek and then one be denied by a later limit after an earlier
        one charged it: the error is towards denying, never over-admitting.)
        A rule of one limit is just checked: one check is all-or-nothing already."""
        try:
            if len(rule.tables) == 1:
                decisions = [rule.tables[0].check(key, cost)]
            else:
                decisions = [t.peek(key, cost) for t in rule.tables]
                if all(decisions):
                    decisions = [t.check(key, cost) for t in rule.tables]
        except CapacityError as e:
            return _too_costly(rule, e)
        return self._outcome(rule, decisions)

    async def decide_async(self, rule: Rule, key: str | bytes | int, cost: int) -> Outcome:
        """:meth:`decide` for the ASGI middleware: tables with ``peek_async`` and
        ``check_async`` (the Redis ones) are awaited, so the event loop never
        waits on a round trip; local tables are called directly. A rule of one
        limit is checked without a peek, as in :meth:`decide`: one round trip to a
        Redis table instead of two."""
        try:
            if len(rule.tables) == 1:
                decisions = [await _call(rule.tables[0], "check", key, cost)]
            else:
                decisions = [await _call(t, "peek", key, cost) for t in rule.tables]
                if all(decisions):
                    decisions = [await _call(t, "check", key, cost) for t in rule.tables]
        except CapacityError as e:
            return _too_costly(rule, e)
        return self._outcome(rule, decisions)

    def _outcome(self, rule: Rule, decisions: list[Decision]) -> Outcome:
        headers = [("RateLimit-Policy", rule.policy_field), ("RateLimit", _ratelimit_field(rule, decisions))]
        if self.legacy_headers:
            i = min(range(len(decisions)), key=lambda j: decisions[j].remaining)
            headers += [
                ("X-RateLimit-Limit", str(rule.quotas[i].amount)),
                ("X-RateLimit-Remaining", str(decisions[i].remaining)),
                ("X-RateLimit-Reset", str(_ceil_secs(decisions[i].reset_after_ns))),
            ]
        if all(decisions):
            return Outcome(True, headers)
        retry = max(1, max(_ceil_secs(d.retry_after_ns) for d in decisions if not d))
        denied = [q for q, d in zip(rule.quotas, decisions) if not d]
        detail = (
            "Rate limit exceeded: "
            + "; ".join(f"{q.amount} per {_human(q.period_ns)}" for q in denied)
            + f". Try again in {retry} second{'s' if retry != 1 else ''}."
        )
        return Outcome(False, headers, retry, detail)


def _policy_outcome(d: PolicyDecision) -> Outcome:
    fields = d.headers()
    retry = next((int(v) for k, v in fields if k == "Retry-After"), None)
    extra = [(k, v) for k, v in fields if k != "Retry-After"]
    detail = ""
    if not d:
        names = ", ".join(repr(r.name) for r in d.denying)
        detail = f"rate limit exceeded ({names}); retry in {retry} s"
    return Outcome(bool(d), extra, retry, detail)


async def _call(table: Table, what: str, key: str | bytes | int, cost: int) -> Decision:
    coroutine: Callable[[str | bytes | int, int], Coroutine[Any, Any, Decision]] | None = getattr(
        table, what + "_async", None
    )
    if coroutine is not None and not isinstance(table, KeyedLimiter):
        return await coroutine(key, cost)
    call: Callable[[str | bytes | int, int], Decision] = getattr(table, what)
    return call(key, cost)


def _too_costly(rule: Rule, e: CapacityError) -> Outcome:
    return Outcome(
        False,
        [("RateLimit-Policy", rule.policy_field)],
        None,
        f"This request costs {e.requested} units, more than the limit of {e.capacity} ever allows.",
    )


def _ratelimit_field(rule: Rule, decisions: list[Decision]) -> str:
    return ", ".join(map(_ratelimit_item, rule.item_fields, decisions))


def _ratelimit_item(name: str, d: Decision) -> str:
    return f"{name};r={d.remaining};t={-(-d.reset_after_ns // _NS)}"


def _human(ns: int) -> str:
    for unit_ns, name in ((86_400 * _NS, "day"), (3_600 * _NS, "hour"), (60 * _NS, "minute"), (_NS, "second")):
        if ns % unit_ns == 0:
            k = ns // unit_ns
            return name if k == 1 else f"{k} {name}s"
    return f"{ns / _NS:g} seconds"


def _parse_ip(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    text = text.strip().strip('"')
    if text.startswith("["):  # [v6]:port or [v6]
        text = text[1:].split("]", 1)[0]
    elif text.count(":") == 1:  # v4:port
        text = text.split(":", 1)[0]
    text = text.split("%", 1)[0]  # zone index
    try:
        return ipaddress.ip_address(text)
    except ValueError:
        return None


def _x_forwarded_for(value: str) -> list[str]:
    return [h.strip() for h in value.split(",") if h.strip()]


def _forwarded_for(value: str) -> list[str]:
    """The ``for=`` of each element of a ``Forwarded`` field (RFC 7239)."""
    hops = []
    for element in value.split(","):
        for pair in element.split(";"):
            name, _, val = pair.strip().partition("=")
            if name.strip().lower() == "for" and val:
                hops.append(val.strip().strip('"'))
    return hops


# --- several worker processes -------------------------------------------------

_warned_multi_worker = False


def _flag_value(args: list[str], flags: tuple[str, ...]) -> int | None:
    """The integer after one of ``flags`` (``--workers 4``, ``--workers=4``,
    ``-w 4``, ``-w4``) in a command line, or None."""
    for i, arg in enumerate(args):
        for flag in flags:
            value: str | None = None
            if arg == flag and i + 1 < len(args):
                value = args[i + 1]
            elif arg.startswith(flag + "="):
                value = arg[len(flag) + 1 :]
            elif len(flag) == 2 and arg.startswith(flag) and arg[2:].isdigit():
                value = arg[2:]
            if value is not None and value.isdigit():
                return int(value)
    return None


def _parent_cmdline() -> list[str]:
    try:
        with open(f"/proc/{os.getppid()}/cmdline", "rb") as f:
            return [a.decode(errors="replace") for a in f.read().split(b"\0") if a]
    except OSError:
        return []


def server_workers(environ: Mapping[str, str] | None = None, parent: list[str] | None = None) -> int | None:
    """How many worker processes the server running this process has, when that
    can be told: ``uvicorn --workers N`` or ``gunicorn -w N`` in the parent's
    command line (a worker is a child of the server's main process), gunicorn's
    ``GUNICORN_CMD_ARGS``, or ``WEB_CONCURRENCY`` (read by uvicorn and gunicorn).
    None when nothing says."""
    env = os.environ if environ is None else environ
    args = _parent_cmdline() if parent is None else parent
    servers = ("uvicorn", "gunicorn", "hypercorn")
    if any(os.path.basename(a).startswith(servers) or a in servers for a in args[:3]):
        found = _flag_value(args, ("--workers", "-w"))
        if found is not None:
            return found
        gunicorn_args = env.get("GUNICORN_CMD_ARGS", "").split()
        found = _flag_value(gunicorn_args, ("--workers", "-w"))
        if found is not None:
            return found
    concurrency = env.get("WEB_CONCURRENCY", "")
    return int(concurrency) if concurrency.isdigit() else None


def warn_if_multi_worker() -> None:
    """Warns once per process (a ``RuntimeWarning``) when an in-process table runs
    inside a server with several workers: each worker would keep its own count,
    so a limit would admit up to workers × the limit."""
    global _warned_multi_worker
    if _warned_multi_worker:
        return
    workers = server_workers()
    if workers is None or workers <= 1:
        return
    _warned_multi_worker = True
    warnings.warn(
        f"sluicegate: this server runs {workers} worker processes and the rate-limit "
        "middleware keeps its counts in this process, so each worker limits on its own "
        f"(up to {workers}x the limit in all). Share the state between the workers "
        'of this host with shared="<name>" (a shared-memory region), or between '
        "hosts with table_factory=lambda q: sluicegate.RedisKeyedLimiter(q, name=..., "
        "redis=sluicegate.RedisOptions(url), hybrid=True)",
        RuntimeWarning,
        stacklevel=4,
    )
