"""RedisLimiter and RedisKeyedLimiter against a real redis-server: the one that
scripts/test-redis started (``SLUICEGATE_REDIS_URL``), or one this module starts
on a free loopback port. Without a redis-server binary on PATH the module is
skipped with that reason (and only then)."""

from __future__ import annotations

import asyncio
import gc
import os
import pathlib
import shutil
import socket
import subprocess
import tempfile
import threading
import time
import urllib.parse
import uuid
import warnings
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from flask import Flask
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Route

import sluicegate
from sluicegate import CapacityError, KeyedLimiter, Quota, RedisKeyedLimiter, RedisLimiter, RedisOptions


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _ping(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.2) as s:
            s.sendall(b"PING\r\n")
            return s.recv(16).startswith(b"+PONG")
    except OSError:
        return False


@pytest.fixture(scope="module")
def url() -> Iterator[str]:
    env = os.environ.get("SLUICEGATE_REDIS_URL")
    if env:
        yield env
        return
    server = shutil.which("redis-server")
    if server is None:
        pytest.skip("redis-server is not installed (scripts/test-redis installs it)")
    port = _free_port()
    with tempfile.TemporaryDirectory() as d:
        proc = subprocess.Popen(
            [server, "--bind", "127.0.0.1", "--port", str(port), "--save", "", "--appendonly", "no", "--dir", d],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            deadline = time.monotonic() + 5
            while not _ping(port):
                assert time.monotonic() < deadline, "redis-server did not start"
                time.sleep(0.02)
            yield f"redis://127.0.0.1:{port}"
        finally:
            proc.terminate()
            proc.wait(timeout=5)


def _name() -> str:
    return "py-" + uuid.uuid4().hex


def test_keyed_decides_like_the_local_keyed_limiter(url: str) -> None:
    for algorithm in ("token_bucket", "leaky_bucket", "fixed_window", "sliding_window"):
        remote = RedisKeyedLimiter('5/hour', name=_name(), algorithm=algorithm, redis=RedisOptions(url, timeout=0.5))
        local = KeyedLimiter("5/hour", algorithm=algorithm)  # type: ignore[arg-type]
        for key in ("a", b"b", 7):
            for n in (1, 2, 0, 1, 1, 3, 1):
                r, lo = remote.check(key, n), local.check(key, n)
                assert (bool(r), r.remaining, r.limit) == (bool(lo), lo.remaining, lo.limit), (algorithm, key, n)
        assert remote.limit == 5
        assert remote.quota == Quota.parse("5/hour")
    assert RedisKeyedLimiter('1/s', name='n', redis=RedisOptions(url)).redis_key("k") == "sluicegate:n:token_bucket:{k}"


def test_single_limiter_check_peek_try_acquire(url: str) -> None:
    rl = RedisLimiter('3/minute', name=_name(), redis=RedisOptions(url, timeout=0.5))
    assert rl.peek(3)
    assert rl.peek(0).remaining == 3  # a peek takes nothing
    assert rl.peek(1).remaining == 2  # (what would remain after one)
    assert rl.peek(0).remaining == 3
    assert rl.try_acquire(2)
    d = rl.check()
    assert d and d.remaining == 0
    denied = rl.check()
    assert not denied and 0 < denied.retry_after <= 20.0
    with pytest.raises(CapacityError):
        rl.check(4)
    with pytest.raises(ValueError):
        RedisLimiter('3/minute', name='x', algorithm='nope', redis=RedisOptions(url))  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        RedisLimiter('3/minute', name='x', redis=RedisOptions('http://x'))


def test_threads_share_one_limit_without_over_admission(url: str) -> None:
    rl = RedisKeyedLimiter('50/hour', name=_name(), redis=RedisOptions(url, timeout=1.0))
    admitted = []
    lock = threading.Lock()

    def work() -> None:
        mine = sum(1 for _ in range(20) if rl.check("hot"))
        with lock:
            admitted.append(mine)

    threads = [threading.Thread(target=work) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sum(admitted) == 50


def test_async_checks_do_not_block_the_loop_and_do_not_over_admit(url: str) -> None:
    rl = RedisKeyedLimiter('20/hour', name=_name(), redis=RedisOptions(url, timeout=1.0))
    single = RedisLimiter('2/hour', name=_name(), redis=RedisOptions(url, timeout=1.0))

    async def main() -> tuple[int, int, bool]:
        decisions = await asyncio.gather(*(rl.check_async("k") for _ in range(50)))
        peek = await rl.peek_async("k")
        ones = [await single.check_async() for _ in range(3)]
        assert (await single.peek_async()).remaining == 0
        return sum(1 for d in decisions if d), peek.remaining, [bool(d) for d in ones] == [True, True, False]

    admitted, remaining, single_ok = asyncio.run(main())
    assert (admitted, remaining, single_ok) == (20, 0, True)


def _redis(url: str, command: str) -> bytes:
    """One inline command on a connection of its own; the first line of the reply."""
    u = urllib.parse.urlsplit(url)
    with socket.create_connection((u.hostname or "127.0.0.1", u.port or 6379), timeout=2) as s:
        s.sendall(command.encode() + b"\r\n")
        return s.recv(256).split(b"\r\n")[0]


def _pause(url: str, ms: int) -> None:
    """CLIENT PAUSE ... ALL: the server holds every other client's commands for ms
    milliseconds, so checks sent meanwhile are in flight until it ends."""
    assert _redis(url, f"CLIENT PAUSE {ms} ALL") == b"+OK"


def _runtime_tasks() -> list[str] | None:
    """The ids of this process's sluicegate-redis runtime threads (one per Redis
    limiter); None where /proc does not say."""
    try:
        tasks = os.listdir("/proc/self/task")
    except OSError:
        return None
    found = []
    for t in tasks:
        try:
            with open(f"/proc/self/task/{t}/comm") as f:
                # The runtime names them "sluicegate-redis"; Linux keeps 15 bytes of it.
                if f.read().strip() == "sluicegate-redis"[:15]:
                    found.append(t)
        except OSError:
            pass
    return found


def _runtime_threads() -> int | None:
    """How many sluicegate-redis runtime threads this process has now; None where
    /proc does not say."""
    tasks = _runtime_tasks()
    return None if tasks is None else len(tasks)


def _wait_threads(n: int | None) -> None:
    """Until the runtime threads are back to n (a dropped runtime joins its thread
    before the drop returns, so this is at once; the wait only absorbs /proc lag)."""
    if n is None:
        return
    deadline = time.monotonic() + 2
    while _runtime_threads() != n:
        assert time.monotonic() < deadline, f"{_runtime_threads()} runtime threads, expected {n}"
        time.sleep(0.01)


def test_async_checks_concurrent_on_one_key_admit_exactly_the_burst(url: str) -> None:
    # 1000 checks in flight at once on one key: every one is a script call decided
    # atomically by Redis, so exactly the burst is admitted. failure_policy closed
    # and a generous timeout: a call that failed would show as a missing admission.
    keyed = RedisKeyedLimiter('37/hour', name=_name(), redis=RedisOptions(url, timeout=5.0, failure_policy='closed'))
    single = RedisLimiter('25/hour', name=_name(), redis=RedisOptions(url, timeout=5.0, failure_policy='closed'))

    async def main() -> tuple[list[sluicegate.Decision], list[sluicegate.Decision], list[sluicegate.Decision]]:
        a = await asyncio.gather(*(keyed.check_async("hot") for _ in range(1000)))
        b = await asyncio.gather(*(single.check_async() for _ in range(1000)))
        peeks = await asyncio.gather(*(keyed.peek_async("hot") for _ in range(200)))
        return list(a), list(b), list(peeks)

    a, b, peeks = asyncio.run(main())
    assert sum(1 for d in a if d) == 37 and all(d.limit == 37 for d in a)
    assert sum(1 for d in b if d) == 25
    assert not any(peeks) and all(p.remaining == 0 for p in peeks)
    # The sync view agrees: nothing left.
    assert not keyed.peek("hot") and not single.peek()


def test_async_decisions_match_the_sync_ones(url: str) -> None:
    for algorithm in ("token_bucket", "leaky_bucket", "fixed_window", "sliding_window"):
        kw: dict[str, Any] = dict(
            algorithm=algorithm, redis=RedisOptions(url, timeout=2.0, failure_policy="closed")
        )
        sync_keyed, async_keyed = RedisKeyedLimiter("5/hour", name=_name(), **kw), RedisKeyedLimiter("5/hour", name=_name(), **kw)
        sync_one, async_one = RedisLimiter("4/hour", name=_name(), **kw), RedisLimiter("4/hour", name=_name(), **kw)
        steps = [(True, 1), (False, 2), (True, 2), (False, 0), (True, 0), (True, 3), (True, 1), (False, 1), (True, 1)]

        async def main(
            keyed: RedisKeyedLimiter = async_keyed, one: RedisLimiter = async_one
        ) -> list[sluicegate.Decision]:
            out = []
            for key in ("a", b"b", 7):
                for consume, n in steps:
                    out.append(await (keyed.check_async(key, n) if consume else keyed.peek_async(key, n)))
            for consume, n in steps:
                out.append(await (one.check_async(n) if consume else one.peek_async(n)))
            return out

        got = asyncio.run(main())
        want = [
            (sync_keyed.check(key, n) if consume else sync_keyed.peek(key, n))
            for key in ("a", b"b", 7)
            for consume, n in steps
        ] + [(sync_one.check(n) if consume else sync_one.peek(n)) for consume, n in steps]
        assert len(got) == len(want)
        for i, (g, w) in enumerate(zip(got, want)):
            assert (bool(g), g.remaining, g.limit) == (bool(w), w.remaining, w.limit), (algorithm, i)
            # The same quota a moment apart: the hints agree to the time between them.
            assert abs(g.retry_after - w.retry_after) < 5.0 and abs(g.reset_after - w.reset_after) < 5.0, (algorithm, i)


def _raised(call: Any) -> BaseException:
    try:
        call()
    except BaseException as e:  # noqa: BLE001 - the point is which type
        return e
    raise AssertionError("did not raise")


def test_async_argument_errors_are_the_sync_ones_and_eager(url: str) -> None:
    keyed = RedisKeyedLimiter('5/hour', name=_name(), redis=RedisOptions(url, timeout=2.0))
    one = RedisLimiter('5/hour', name=_name(), redis=RedisOptions(url, timeout=2.0))
    # Raised by the call itself, before any coroutine exists (so none is left
    # un-awaited), with the sync call's type and message.
    for args in (("k", -1), (object(), 1), ("k", 1.5)):
        for sync, aio in ((keyed.check, keyed.check_async), (keyed.peek, keyed.peek_async)):
            s, a = _raised(lambda: sync(*args)), _raised(lambda: aio(*args))
            assert type(s) is type(a) and str(s) == str(a), args
    for n in (-1, 1.5):
        for sync1, aio1 in ((one.check, one.check_async), (one.peek, one.peek_async)):
            s, a = _raised(lambda: sync1(n)), _raised(lambda: aio1(n))
            assert type(s) is type(a) and str(s) == str(a), n
    assert isinstance(_raised(lambda: keyed.check_async("k", -1)), ValueError)
    assert isinstance(_raised(lambda: keyed.check_async(object())), TypeError)

    # A cost above the burst: CapacityError, from the await, exactly as the sync call.
    async def capacity() -> list[BaseException]:
        out: list[BaseException] = []
        # (2**63 too: a cost beyond 64 bits is a cost above the limit, not an argument error.)
        for coroutine in (keyed.check_async("k", 6), keyed.peek_async("k", 6), one.check_async(6), one.peek_async(6),
                          keyed.check_async("k", 2**63), one.check_async(2**64 + 1)):
            try:
                await coroutine
            except CapacityError as e:
                out.append(e)
        return out

    got = asyncio.run(capacity())
    want = [_raised(lambda: keyed.check("k", 6)), _raised(lambda: keyed.peek("k", 6))]
    want += [_raised(lambda: one.check(6)), _raised(lambda: one.peek(6))]
    assert len(got) == 6
    for g, w in zip(got, want):
        assert isinstance(g, CapacityError) and isinstance(w, CapacityError)
        assert (type(g), str(g), g.requested, g.capacity) == (type(w), str(w), w.requested, w.capacity) == (
            CapacityError,
            str(w),
            6,
            5,
        )
    # Nothing was charged by any of that.
    assert keyed.peek("k", 0).remaining == 5 and one.peek(0).remaining == 5
    # A coroutine made outside a running loop is fine (asyncio.run of it): the call
    # starts when it is awaited.
    assert asyncio.run(one.check_async()).remaining == 4


def test_cancelling_async_checks_in_flight(url: str) -> None:
    gc.collect()  # earlier tests' limiters (and so runtime threads) gone first
    before = _runtime_threads()
    rl = RedisKeyedLimiter('1000/hour', name=_name(), redis=RedisOptions(url, timeout=5.0, failure_policy='closed'))
    problems: list[dict[str, Any]] = []

    async def main() -> tuple[float, int]:
        asyncio.get_running_loop().set_exception_handler(lambda _loop, ctx: problems.append(ctx))
        assert await rl.check_async("k")  # connected before the pause
        _pause(url, 500)
        try:
            tasks = [asyncio.create_task(rl.check_async("k")) for _ in range(200)]
            await asyncio.sleep(0.05)
            assert not any(t.done() for t in tasks)  # held by the pause
            t0 = time.monotonic()
            for t in tasks:
                t.cancel()
            results = await asyncio.gather(*tasks, return_exceptions=True)
            cancel_s = time.monotonic() - t0
            assert all(isinstance(r, asyncio.CancelledError) for r in results)
            with pytest.raises(asyncio.TimeoutError):
                await asyncio.wait_for(rl.check_async("k"), 0.05)
        finally:
            _redis(url, "CLIENT UNPAUSE")
        # The abandoned calls were sent: they run to their end and are charged (a
        # cancelled wait, not a cancelled call, like a cancelled asyncio.to_thread
        # one). In order on the one connection: 1000 - 1 - 200 - 1 remain.
        remaining = (await rl.peek_async("k", 0)).remaining
        await asyncio.sleep(0.05)  # room for any stray completion to misbehave
        return cancel_s, remaining

    cancel_s, remaining = asyncio.run(main())
    assert cancel_s < 0.3, cancel_s  # at once, not when the 500 ms pause ends
    assert remaining == 798
    assert problems == []
    # The limiter still decides, sync and async alike.
    assert rl.check("k").remaining == 797
    assert asyncio.run(rl.check_async("k", 797)).remaining == 0
    # Dropped, it takes its runtime (and thread) with it.
    del rl
    gc.collect()
    _wait_threads(before)


def test_dropping_a_limiter_with_checks_in_flight(url: str) -> None:
    gc.collect()
    before = _runtime_threads()

    async def main() -> None:
        rl = RedisLimiter('100/hour', name=_name(), redis=RedisOptions(url, timeout=5.0))
        assert await rl.check_async()
        if before is not None:
            assert _runtime_threads() == before + 1
        _pause(url, 400)
        try:
            tasks = [asyncio.create_task(rl.check_async()) for _ in range(50)]
            await asyncio.sleep(0.05)
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            # The coroutines are done, so nothing holds the limiter: it goes now,
            # its runtime with it, while its 50 calls are still held by the server.
            del tasks, task, rl
            gc.collect()
            t0 = time.monotonic()
            _wait_threads(before)
            assert time.monotonic() - t0 < 0.3
        finally:
            _redis(url, "CLIENT UNPAUSE")
        await asyncio.sleep(0.05)

    asyncio.run(main())


def test_async_check_in_flight_leaves_the_loop_and_the_gil_free(url: str) -> None:
    rl = RedisLimiter('10/hour', name=_name(), redis=RedisOptions(url, timeout=5.0))
    spins = 0
    stop = threading.Event()

    def spin() -> None:
        nonlocal spins
        while not stop.is_set():
            spins += 1

    async def main() -> tuple[int, int, sluicegate.Decision]:
        await rl.check_async()
        _pause(url, 300)
        th = threading.Thread(target=spin)
        th.start()
        try:
            task = asyncio.create_task(rl.check_async())
            ticks = 0
            while not task.done():
                await asyncio.sleep(0.01)
                ticks += 1
            spun = spins
        finally:
            stop.set()
            th.join()
            _redis(url, "CLIENT UNPAUSE")
        return ticks, spun, task.result()

    ticks, spun, d = asyncio.run(main())
    # ~300 ms in flight: the loop kept ticking, and another Python thread ran.
    assert ticks >= 10 and spun > 0 and d and d.remaining == 8


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no os.fork")
def test_async_checks_in_a_forked_child(url: str) -> None:
    # The parent's async checks started the thread that hands results to asyncio;
    # a forked child has none of its parent's threads and must start its own.
    rl = RedisLimiter('10/hour', name=_name(), redis=RedisOptions(url, timeout=2.0))
    assert asyncio.run(rl.check_async())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # 3.12+: fork with threads
        pid = os.fork()
    if pid == 0:  # the child: a limiter of its own (the parent's runtime thread is gone)
        code = 3
        try:
            child = RedisLimiter('10/hour', name=_name(), redis=RedisOptions(url, timeout=2.0))

            async def main() -> sluicegate.Decision:
                return await asyncio.wait_for(child.check_async(), 5)

            code = 0 if asyncio.run(main()).remaining == 9 else 2
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0


def test_connect_reports_misconfiguration_and_stats_count_policy_answers() -> None:
    dead = f"redis://127.0.0.1:{_free_port()}"
    rl = RedisKeyedLimiter("10/hour", name="c", redis=RedisOptions(dead, failure_policy="open", timeout=0.05))
    assert rl.last_error is None
    with pytest.raises(sluicegate.BackendError):
        rl.connect()
    assert rl.check("k")  # fail-open answers
    stats = rl.stats()
    assert stats["fail_open"] >= 1 and stats["redis"] == 0
    assert stats["policy_answers"] == stats["fail_open"]
    assert isinstance(rl.last_error, sluicegate.BackendError)
    # A bad port is refused when the options are built, as a ValueError.
    with pytest.raises(ValueError, match="port"):
        RedisOptions("redis://127.0.0.1:99999")


def test_a_wrongtype_key_raises_backend_data_error_for_that_key_only(url: str) -> None:
    rl = RedisKeyedLimiter("10/hour", name=_name(), redis=RedisOptions(url, timeout=0.5, failure_policy="open"))
    rl.connect()
    host, port = urllib.parse.urlsplit(url).hostname, urllib.parse.urlsplit(url).port
    assert host is not None and port is not None
    key = rl.redis_key("bad").encode()
    with socket.create_connection((host, port), timeout=2) as s:
        s.sendall(b"*3\r\n$5\r\nLPUSH\r\n$%d\r\n%s\r\n$1\r\nx\r\n" % (len(key), key))
        assert s.recv(16).startswith(b":1")
    for _ in range(5):
        e = _raised(lambda: rl.check("bad"))
        assert isinstance(e, sluicegate.BackendDataError) and "WRONGTYPE" in str(e), repr(e)
    # The other keys go on with Redis deciding: the breaker never opened.
    assert rl.check_with_source("good")[1] == "redis"
    stats = rl.stats()
    assert stats["data_errors"] == 5 and stats["circuit_opened"] == 0


def test_a_sliding_window_past_the_local_layout_runs_on_redis(url: str) -> None:
    rl = RedisKeyedLimiter("1000000000/day", name=_name(), algorithm="sliding_window",
                           redis=RedisOptions(url, timeout=0.5, failure_policy="closed"))
    assert rl.limit == 1_000_000_000
    assert rl.check("k", 999_999_999).remaining == 1
    with pytest.raises(ValueError):
        sluicegate.KeyedLimiter("1000000000/day", algorithm="sliding_window")


def test_failure_policies_answer_at_once_when_redis_is_down() -> None:
    dead = f"redis://127.0.0.1:{_free_port()}"
    closed = RedisKeyedLimiter('10/hour', name='d', redis=RedisOptions(dead, failure_policy='closed'))
    opened = RedisKeyedLimiter('10/hour', name='d', redis=RedisOptions(dead, failure_policy='open'))
    local = RedisKeyedLimiter('10/hour', name='d', redis=RedisOptions(dead, failure_policy='local', local_share=50))
    start = time.monotonic()
    assert not any(closed.check("k") for _ in range(50))
    assert all(opened.check("k") for _ in range(50))
    # The local fallback holds half the quota: 5 of the 10.
    assert sum(1 for _ in range(50) if local.check("k")) == 5
    assert local.check_with_source("k")[1] == "local_fallback"
    # 150 checks, and the breaker keeps a dead Redis from costing a timeout each.
    assert time.monotonic() - start < 1.0


def test_backend_failures_are_sluicegate_errors_never_value_errors() -> None:
    dead = f"redis://127.0.0.1:{_free_port()}"
    keyed = RedisKeyedLimiter("10/hour", name="d", redis=RedisOptions(dead, timeout=0.05))
    one = RedisLimiter("10/hour", name="d", redis=RedisOptions(dead, timeout=0.05))
    seen: list[type[BaseException]] = []
    for _ in range(8):
        for call in (lambda: keyed.try_check("k"), lambda: one.try_check()):
            e = _raised(call)
            assert isinstance(e, sluicegate.BackendError) and not isinstance(e, ValueError), repr(e)
            seen.append(type(e))
    # Repeated failures open the breaker: then Redis is not even asked.
    assert sluicegate.CircuitOpen in seen
    assert issubclass(sluicegate.BackendTimeout, TimeoutError)
    # Configuration stays a ValueError.
    with pytest.raises(ValueError, match="failure_policy"):
        RedisOptions(dead, failure_policy="maybe")  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        RedisOptions("http://x")
    with pytest.raises(ValueError, match="local_share"):
        RedisOptions(dead, local_share=-1)


def test_old_keyword_arguments_still_work_and_are_deprecated(url: str) -> None:
    with pytest.warns(DeprecationWarning, match="RedisOptions"):
        keyed = RedisKeyedLimiter("2/hour", url=url, name=_name(), timeout=1.0, failure_policy="closed")
    assert keyed.check("k") and keyed.check("k") and not keyed.check("k")
    with pytest.warns(DeprecationWarning, match="RedisOptions"):
        one = RedisLimiter("1/hour", url=url, name=_name())
    assert one.check() and not one.check()
    with pytest.raises(TypeError, match="not both"):
        RedisLimiter("1/hour", name="x", redis=RedisOptions(url), timeout=1.0)
    with pytest.raises(TypeError, match="RedisOptions"):
        RedisLimiter("1/hour", name="x")
    opts = RedisOptions(url, timeout=0.5, failure_policy="open")
    assert (opts.url, opts.timeout, opts.failure_policy, opts.prefix) == (url, 0.5, "open", "sluicegate:")


def test_single_limiter_has_check_with_source_and_huge_costs_are_capacity_errors(url: str) -> None:
    one = RedisLimiter("5/hour", name=_name(), redis=RedisOptions(url, timeout=2.0))
    decision, source = one.check_with_source()
    assert decision and decision.remaining == 4 and source == "redis"
    keyed = RedisKeyedLimiter("5/hour", name=_name(), redis=RedisOptions(url, timeout=2.0))
    for big in (6, 2**63, 2**64, 2**100):
        for call in (lambda: one.check(big), lambda: keyed.check("k", big), lambda: keyed.try_check("k", big)):
            e = _raised(call)
            assert isinstance(e, CapacityError), repr(e)
    with pytest.raises(ValueError, match="n must be a whole number"):
        one.check(-1)


def test_check_many_is_one_pipeline_in_order(url: str) -> None:
    keyed = RedisKeyedLimiter("3/hour", name=_name(), redis=RedisOptions(url, timeout=2.0))
    out = keyed.check_many(["a", "a", ("a", 2), ("b", 3), b"b"])
    assert [bool(d) for d in out] == [True, True, False, True, False]
    assert [d.remaining for d in out] == [2, 1, 1, 0, 0]
    # A cost that can never pass fails the batch before anything is sent.
    with pytest.raises(CapacityError):
        keyed.check_many(["c", ("c", 4)])
    assert keyed.peek("c") == keyed.peek("never-charged")  # "c" untouched
    with pytest.raises(TypeError, match="pair"):
        keyed.check_many([("c", 1, 2)])
    many = keyed.check_many_with_source([f"k{i}" for i in range(2000)])
    assert len(many) == 2000 and all(d and s == "redis" for d, s in many)
    assert keyed.check_many([]) == []


def test_hybrid_mode_is_one_argument_away(url: str) -> None:
    opts = RedisOptions(url, timeout=2.0)
    h = RedisKeyedLimiter("1000/second", name=_name(), redis=opts, hybrid=True)
    results = [h.check_with_source("k") for _ in range(300)]
    assert all(d for d, _ in results)
    assert "lease" in {s for _, s in results}
    stats = h.hybrid_stats
    assert stats is not None and stats["local"] > 0 and stats["local"] + stats["round_trips"] == 300
    assert "hybrid=True" in repr(h)
    assert RedisKeyedLimiter("1/s", name="x", redis=opts).hybrid_stats is None
    # Leases are charged in Redis: a hybrid and a plain limiter on one name never
    # admit more than the quota together.
    name = _name()
    a = RedisKeyedLimiter("20/hour", name=name, redis=opts, hybrid=True)
    b = RedisKeyedLimiter("20/hour", name=name, redis=opts)
    one = RedisLimiter("20/hour", name=_name(), redis=opts, hybrid=True)
    admitted = sum(1 for _ in range(30) if a.check("k")) + sum(1 for _ in range(30) if b.check("k"))
    assert admitted <= 20
    assert 18 <= sum(1 for _ in range(30) if one.check()) <= 20


async def _hello(request: Request) -> PlainTextResponse:
    return PlainTextResponse("hello")


def test_asgi_middleware_with_redis_tables(url: str) -> None:
    from sluicegate.asgi import RateLimitMiddleware

    name = _name()
    app = Starlette(routes=[Route("/", _hello)])
    app.add_middleware(
        RateLimitMiddleware,
        limits="3/minute",
        table_factory=lambda q: RedisKeyedLimiter(q, name=name, redis=RedisOptions(url, timeout=0.5)),
    )

    async def main() -> list[int]:
        transport = httpx.ASGITransport(app=app, client=("203.0.113.9", 5000))
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as c:
            return [(await c.get("/")).status_code for _ in range(5)]

    assert asyncio.run(main()) == [200, 200, 200, 429, 429]
    # A second app (another process, in effect) shares the same limit in Redis.
    other = RedisKeyedLimiter('3/minute', name=name, redis=RedisOptions(url, timeout=0.5))
    assert not other.peek("203.0.113.9")


def test_wsgi_middleware_with_redis_tables(url: str) -> None:
    from sluicegate.wsgi import RateLimitMiddleware

    name = _name()
    flask_app = Flask(__name__)

    @flask_app.route("/")
    def index() -> str:
        return "hi"

    flask_app.wsgi_app = RateLimitMiddleware(  # type: ignore[method-assign]
        flask_app.wsgi_app,
        "2/minute",
        table_factory=lambda q: RedisKeyedLimiter(q, name=name, redis=RedisOptions(url, timeout=0.5)),
    )
    client = flask_app.test_client()
    codes = [client.get("/", environ_base={"REMOTE_ADDR": "198.51.100.4"}).status_code for _ in range(3)]
    assert codes == [200, 200, 429]


def test_exported() -> None:
    assert "RedisLimiter" in sluicegate.__all__ and "RedisKeyedLimiter" in sluicegate.__all__


def _make_certs(d: str) -> None:
    """A throwaway CA, a server certificate for 127.0.0.1 and a client certificate."""

    def run(*args: str) -> None:
        subprocess.run(["openssl", *args], check=True, capture_output=True, cwd=d)

    run("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=py test CA",
        "-keyout", "ca.key", "-out", "ca.crt")
    with open(os.path.join(d, "server.cnf"), "w") as f:
        f.write("subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\n")
    with open(os.path.join(d, "client.cnf"), "w") as f:
        f.write("extendedKeyUsage=clientAuth\n")
    for who in ("server", "client"):
        run("req", "-newkey", "rsa:2048", "-nodes", "-subj", f"/CN=py test {who}",
            "-keyout", f"{who}.key", "-out", f"{who}.csr")
        run("x509", "-req", "-in", f"{who}.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial",
            "-days", "1", "-extfile", f"{who}.cnf", "-out", f"{who}.crt")


@pytest.fixture(scope="module")
def mtls() -> Iterator[tuple[str, str]]:
    """A TLS-only redis-server of this module's own that requires client
    certificates: its ``rediss://`` URL and the certificates' directory."""
    server, openssl = shutil.which("redis-server"), shutil.which("openssl")
    if server is None or openssl is None:
        pytest.skip("redis-server and openssl are needed (scripts/test-redis installs redis-server)")
    with tempfile.TemporaryDirectory() as d:
        _make_certs(d)
        port = _free_port()
        proc = subprocess.Popen(
            [server, "--bind", "127.0.0.1", "--port", "0", "--tls-port", str(port), "--save", "",
             "--appendonly", "no", "--dir", d, "--tls-cert-file", f"{d}/server.crt",
             "--tls-key-file", f"{d}/server.key", "--tls-ca-cert-file", f"{d}/ca.crt",
             "--tls-auth-clients", "yes"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            deadline = time.monotonic() + 5
            while True:
                try:
                    socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                    break
                except OSError:
                    assert time.monotonic() < deadline, "the TLS redis-server did not start"
                    time.sleep(0.02)
            yield f"rediss://127.0.0.1:{port}", d
        finally:
            proc.terminate()
            proc.wait(timeout=5)


def test_tls_with_a_private_ca_and_a_client_certificate(mtls: tuple[str, str]) -> None:
    tls_url, d = mtls
    ssl = {"ssl_ca_certs": f"{d}/ca.crt", "ssl_certfile": f"{d}/client.crt", "ssl_keyfile": f"{d}/client.key"}
    rl = RedisKeyedLimiter('2/minute', name=_name(), redis=RedisOptions(tls_url, timeout=2.0, failure_policy='closed', **ssl))
    assert [rl.check_with_source("k")[1] for _ in range(2)] == ["redis", "redis"]
    denied, source = rl.check_with_source("k")
    assert not denied and source == "redis"
    one = RedisLimiter('1/minute', name=_name(), redis=RedisOptions(tls_url, timeout=2.0, failure_policy='closed', ssl_ca_certs=pathlib.Path(d, 'ca.crt'), ssl_certfile=pathlib.Path(d, 'client.crt'), ssl_keyfile=pathlib.Path(d, 'client.key')))
    assert asyncio.run(one.check_async()) and not one.check()

    # Without the client certificate the server ends the handshake: the policy answers.
    no_cert = RedisKeyedLimiter('2/minute', name=_name(), redis=RedisOptions(tls_url, timeout=0.5, failure_policy='closed', ssl_ca_certs=f'{d}/ca.crt'))
    assert no_cert.check_with_source("k")[1] == "fail_closed"
    # Without the private CA the server is not trusted.
    untrusted = RedisKeyedLimiter('2/minute', name=_name(), redis=RedisOptions(tls_url, timeout=0.5, failure_policy='closed', ssl_certfile=f'{d}/client.crt', ssl_keyfile=f'{d}/client.key'))
    assert untrusted.check_with_source("k")[1] == "fail_closed"


def test_tls_argument_errors(mtls: tuple[str, str]) -> None:
    tls_url, d = mtls
    with pytest.raises(ValueError, match="go together"):
        RedisKeyedLimiter('1/s', name='x', redis=RedisOptions(tls_url, ssl_certfile=f'{d}/client.crt'))
    with pytest.raises(OSError, match="nope.pem"):
        RedisKeyedLimiter('1/s', name='x', redis=RedisOptions(tls_url, ssl_ca_certs=f'{d}/nope.pem'))
    with pytest.raises(ValueError, match="rediss://"):
        RedisLimiter('1/s', name='x', redis=RedisOptions('redis://127.0.0.1:1', ssl_ca_certs=f'{d}/ca.crt'))


def test_policy_rules_on_redis_and_hybrid_share_state_across_instances(url: str) -> None:
    name = _name()
    text = f"""
[redis]
url = "{url}"
prefix = "{name}:"

[[rule]]
name = "shared"
key = ["tenant"]
limit = "3/hour"
backend = "redis"
on_error = "closed"

[[rule]]
name = "leased"
match = {{ path = "/hot" }}
limit = "1000/second"
backend = "hybrid"
"""
    a, b = sluicegate.Policy.from_str(text), sluicegate.Policy.from_str(text)
    # Two processes' worth of policies: one count in Redis.
    got = [bool(p.check(tenant="acme")) for p in (a, b, a, b)]
    assert got == [True, True, True, False]
    assert b.check(tenant="globex")  # another key
    hot = [a.check(path="/hot", tenant="t2") for _ in range(2)]
    assert all(hot) and [r.name for r in hot[0].rules] == ["shared", "leased"]
    # Redis down: each rule's on_error answers, flagged as a backend error.
    dead = text.replace(url, f"redis://127.0.0.1:{_free_port()}")
    d = sluicegate.Policy.from_str(dead).check(tenant="acme")
    assert not d and d.rules[0].backend_error


def _policy_text(url: str, name: str, backend: str = "redis") -> str:
    # A local rule (per tenant, 3 an hour: its charge is what a cancelled check
    # must give back) and a rule on Redis, answered by on_error = "open" when
    # Redis does not answer in time (so a timed-out check keeps the local charge).
    return f"""
[redis]
url = "{url}"
prefix = "{name}:"

[[rule]]
name = "local"
key = ["tenant"]
limit = "3/hour"

[[rule]]
name = "shared"
key = ["tenant"]
limit = "1000/hour"
backend = "{backend}"
on_error = "open"
"""


def test_policy_check_async_decides_like_check(url: str) -> None:
    name = _name()
    a, b = sluicegate.Policy.from_str(_policy_text(url, name)), sluicegate.Policy.from_str(_policy_text(url, name))
    assert a.has_remote_rules and not sluicegate.Policy.from_str('[[rule]]\nname = "x"\nlimit = "1/s"\n').has_remote_rules

    async def main() -> list[tuple[bool, int, int]]:
        out = []
        for _ in range(4):
            d = await a.check_async(tenant="t", headers={"X-Ignored": "1"})
            out.append((bool(d), d.rules[0].remaining, d.rules[1].remaining))
        # Concurrent checks of other tenants pipeline; each is admitted once.
        got = await asyncio.gather(*(a.check_async(tenant=f"c{i}") for i in range(50)))
        assert all(got)
        return out

    got = asyncio.run(main())
    # Local 3/hour admits three; the fourth is denied (its Redis rule only
    # peeked: what a unit would leave) and charges Redis nothing.
    assert got == [(True, 2, 999), (True, 1, 998), (True, 0, 997), (False, 0, 996)]
    # The Redis rule's count is shared with another policy on the same prefix:
    # three units charged, so this fourth leaves 996.
    assert b.check(tenant="t").rules[1].remaining == 996
    # Arguments are checked at the call, not when awaited.
    with pytest.raises(TypeError):
        a.check_async(tenant=3)  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        a.check_async(cost=-1)
    # A coroutine never awaited charges nothing.
    c = a.check_async(tenant="u")
    c.close()
    assert b.check(tenant="u").rules[0].remaining == 2


def test_cancelling_policy_check_async_gives_back_the_local_charge(url: str) -> None:
    # Redis paused: the check has charged its local rule and waits for the Redis
    # rule's round trip; cancelled then (well inside the rule's 25 ms timeout),
    # the dropped check gives the local unit back. A run whose cancel came late
    # (a starved machine) is repeated, at most 3 times.
    for _attempt in range(3):
        p = sluicegate.Policy.from_str(_policy_text(url, _name()))
        assert p.check(tenant="warm")  # connected, script loaded

        async def main() -> float:
            _pause(url, 300)
            try:
                task = asyncio.create_task(p.check_async(tenant="t"))
                t0 = time.monotonic()
                await asyncio.sleep(0.003)
                task.cancel()
                late = time.monotonic() - t0
                with pytest.raises(asyncio.CancelledError):
                    await task
                return late
            finally:
                _redis(url, "CLIENT UNPAUSE")

        late = asyncio.run(main())
        if late > 0.015:
            continue
        time.sleep(0.05)
        # Given back: the local rule still has all 3 (this check takes one).
        d = p.check(tenant="t")
        assert d and d.rules[0].remaining == 2, d.rules
        return
    pytest.fail("the cancel never came within 15 ms of the check (machine too busy)")


def test_policy_check_async_leaves_the_loop_free_while_redis_waits(url: str) -> None:
    p = sluicegate.Policy.from_str(_policy_text(url, _name()).replace('on_error = "open"', 'on_error = "closed"'))
    assert p.check(tenant="warm")

    async def main() -> tuple[int, bool]:
        ticks = 0

        async def tick() -> None:
            nonlocal ticks
            while True:
                await asyncio.sleep(0.001)
                ticks += 1

        ticker = asyncio.create_task(tick())
        await asyncio.sleep(0.005)
        _pause(url, 100)
        try:
            d = await p.check_async(tenant="t")
        finally:
            _redis(url, "CLIENT UNPAUSE")
        ticker.cancel()
        return ticks, bool(d)

    ticks, allowed = asyncio.run(main())
    # The check waited for the rule's timeout (on_error closed denies) while the
    # loop ran on.
    assert not allowed
    assert ticks >= 5, ticks


def test_asgi_middleware_awaits_policy_rules_on_redis(url: str) -> None:
    from sluicegate.asgi import RateLimitMiddleware

    p = sluicegate.Policy.from_str(_policy_text(url, _name(), backend="hybrid").replace('key = ["tenant"]', 'key = ["ip"]'))
    app = RateLimitMiddleware(Starlette(routes=[Route("/", _hello)]), policy=p)

    async def main() -> list[int]:
        transport = httpx.ASGITransport(app=app, client=("192.0.2.7", 1234))
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
            return [(await client.get("/")).status_code for _ in range(4)]

    assert asyncio.run(main()) == [200, 200, 200, 429]


def test_hybrid_lease_settings_are_the_rule_files_in_seconds(url: str) -> None:
    opts = RedisOptions(url, timeout=0.5)
    with pytest.raises(ValueError, match="hybrid=True"):
        RedisKeyedLimiter("20/second", name=_name(), redis=opts, lease_ttl=2.0)
    for bad in (0.0, -1.0, 3601.0, float("nan")):
        with pytest.raises(ValueError, match="lease_horizon"):
            RedisKeyedLimiter("20/second", name=_name(), redis=opts, hybrid=True, lease_horizon=bad)
    # 50 keys, each checked 10 times a second (half its rate) for a second: a
    # key's first two checks make round trips (its rate is not known before),
    # then its lease holds what it spends in lease_ttl.
    h = RedisKeyedLimiter("20/second", name=_name(), redis=opts, hybrid=True, lease_horizon=1.0, lease_ttl=2.0)
    start = time.monotonic()
    admitted = 0
    for t in range(10):
        for i in range(50):
            delay = start + t / 10 + i / 500 - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            admitted += bool(h.check(f"user-{i}"))
    stats = h.hybrid_stats
    assert stats is not None and admitted == 500
    assert stats["local"] >= 0.7 * 500, stats
    # In hybrid mode the coroutine goes through the lease front too.
    got = asyncio.run(h.check_async("user-0"))
    assert got and h.hybrid_stats is not None and h.hybrid_stats["local"] == stats["local"] + 1


def _runtime_switches() -> int | None:
    """Context switches so far of this process's sluicegate-redis runtime threads
    (each wake-up of one is at least one); None where /proc does not say."""
    tasks = _runtime_tasks()
    if tasks is None:
        return None
    total = 0
    for t in tasks:
        try:
            with open(f"/proc/self/task/{t}/status") as f:
                for line in f:
                    if line.startswith(("voluntary_ctxt_switches", "nonvoluntary_ctxt_switches")):
                        total += int(line.split()[1])
        except OSError:
            pass
    return total


def test_sequential_checks_run_on_the_calling_thread(url: str) -> None:
    # The calling thread writes the command and reads the reply on a connection
    # of the limiter's own: the runtime threads stay asleep (the same loop through
    # the runtime, max_connections=0, wakes one per check).
    assert RedisOptions(url).max_connections == 8
    with pytest.raises(ValueError, match="max_connections"):
        RedisOptions(url, max_connections=-1)
    rl = RedisKeyedLimiter('100/hour', name=_name(), redis=RedisOptions(url, timeout=1.0))
    one = RedisLimiter('100/hour', name=_name(), redis=RedisOptions(url, timeout=1.0))
    old = RedisKeyedLimiter('100/hour', name=_name(), redis=RedisOptions(url, timeout=1.0, max_connections=0))
    rl.connect()
    old.connect()
    gc.collect()

    def woken(f: Any) -> int | None:
        before = _runtime_switches()
        f()
        after = _runtime_switches()
        return None if before is None or after is None else after - before

    def direct() -> None:
        for want in range(99, 49, -1):
            d = rl.check("k")
            assert d and d.remaining == want
        assert rl.try_check("k").remaining == 49
        assert rl.peek("k").remaining == 48
        for _ in range(10):
            assert one.check()

    def runtime() -> None:
        for want in range(99, 49, -1):
            assert old.check("k").remaining == want

    quiet, busy = woken(direct), woken(runtime)
    if quiet is not None and busy is not None:
        assert busy >= 50, busy  # the measure sees wake-ups
        assert quiet <= 5, quiet
    assert rl.stats()["direct_calls"] == 52
    assert one.stats()["direct_calls"] == 10
    assert old.stats()["direct_calls"] == 0


def test_a_sync_check_waiting_for_redis_leaves_the_gil_free(url: str) -> None:
    rl = RedisLimiter('10/hour', name=_name(), redis=RedisOptions(url, timeout=5.0))
    rl.connect()
    out: list[sluicegate.Decision] = []
    th = threading.Thread(target=lambda: out.append(rl.check()))
    _pause(url, 300)
    try:
        t0 = time.monotonic()
        th.start()
        spins = 0
        while th.is_alive():
            spins += 1
        elapsed = time.monotonic() - t0
    finally:
        _redis(url, "CLIENT UNPAUSE")
    th.join()
    # ~300 ms held by the server, on the calling thread's connection, while this
    # thread kept running Python.
    assert elapsed >= 0.2 and spins > 10_000, (elapsed, spins)
    assert out[0] and out[0].remaining == 9
    assert rl.stats()["direct_calls"] == 1


def test_threads_past_the_pool_share_one_limit_exactly(url: str) -> None:
    # 16 threads, 2 pooled connections: the calls past them go through the
    # multiplexed connection; every decision is Redis's and the quota exact.
    for pool in (2, 8):
        rl = RedisKeyedLimiter('60/hour', name=_name(), redis=RedisOptions(url, timeout=2.0, max_connections=pool,
                                                                          failure_policy="closed"))
        admitted = [0, 0, 0]
        lock = threading.Lock()

        def work(i: int) -> None:
            for j in range(60):
                k = (i + j) % 3
                d, source = rl.check_with_source(f"k{k}")
                assert source == "redis"
                if d:
                    with lock:
                        admitted[k] += 1

        threads = [threading.Thread(target=work, args=(i,)) for i in range(16)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert admitted == [60, 60, 60], (pool, admitted)
        stats = rl.stats()
        assert stats["redis"] == 16 * 60 and 0 < stats["direct_calls"] <= stats["redis"], stats


def test_a_restarted_server_is_used_again(tmp_path: pathlib.Path) -> None:
    server = shutil.which("redis-server")
    if server is None:
        pytest.skip("redis-server is not installed (scripts/test-redis installs it)")
    port = _free_port()

    def start() -> subprocess.Popen[bytes]:
        proc = subprocess.Popen(
            [server, "--bind", "127.0.0.1", "--port", str(port), "--save", "", "--appendonly", "no",
             "--dir", str(tmp_path)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 5
        while not _ping(port):
            assert time.monotonic() < deadline, "redis-server did not start"
            time.sleep(0.02)
        return proc

    def until(source: str) -> float:
        """Checks until one is answered by source; the slowest check on the way."""
        deadline, slowest = time.monotonic() + 5, 0.0
        while True:
            t = time.monotonic()
            got = rl.check_with_source("k")[1]
            slowest = max(slowest, time.monotonic() - t)
            if got == source:
                return slowest
            assert time.monotonic() < deadline, f"no {source} answer (last {got})"
            time.sleep(0.005)

    proc = start()
    try:
        rl = RedisKeyedLimiter("1000/second", name=_name(), redis=RedisOptions(
            f"redis://127.0.0.1:{port}", timeout=0.05, connect_timeout=0.2, failure_policy="local", local_share=50))
        rl.connect()
        assert rl.check_with_source("k")[1] == "redis"
        proc.kill()
        proc.wait()
        assert until("local_fallback") < 0.5
        assert all(rl.check_with_source("k")[1] == "local_fallback" for _ in range(5))
        assert rl.stats()["circuit_opened"] >= 1  # the breaker counts these failures too
        assert isinstance(rl.last_error, sluicegate.BackendError)
        # Empty again (its script cache too: NOSCRIPT, then EVAL).
        proc = start()
        assert until("redis") < 0.5
        before = rl.stats()["direct_calls"]
        assert all(rl.check_with_source("k")[1] == "redis" for _ in range(10))
        assert rl.stats()["direct_calls"] == before + 10
    finally:
        proc.kill()
        proc.wait()


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no os.fork")
def test_a_limiter_used_before_fork_checks_in_the_child(url: str) -> None:
    # A preloading master (gunicorn --preload) that checked before forking: the
    # child opens connections of its own (never writes to the parent's socket),
    # and both go on deciding on one count.
    rl = RedisLimiter('10/hour', name=_name(), redis=RedisOptions(url, timeout=2.0))
    assert rl.check().remaining == 9
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # 3.12+: fork with threads
        pid = os.fork()
    if pid == 0:
        code = 3
        try:
            ok = [rl.check().remaining for _ in range(3)] == [8, 7, 6]
            code = 0 if ok and rl.stats()["direct_calls"] >= 4 else 2
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert rl.check().remaining == 5
