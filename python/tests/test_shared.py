"""``shared=``: one limit across the worker processes of a host, through a
shared-memory region, with real processes and real servers (gunicorn -w 4,
uvicorn --workers 4) on loopback."""

from __future__ import annotations

import multiprocessing
import os
import pathlib
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator

import httpx
import pytest

import sluicegate
from sluicegate import KeyedLimiter, ManualClock, SharedMemoryError


@pytest.fixture
def region(tmp_path: pathlib.Path) -> Iterator[str]:
    """A region path unique to the test (the file is removed afterwards)."""
    path = str(tmp_path / f"region-{uuid.uuid4().hex}")
    yield path
    sluicegate.shared.unlink(path)


def test_two_limiters_on_one_region_are_one_limit(region: str) -> None:
    a = KeyedLimiter("3/hour", shared=region)
    b = KeyedLimiter("3/hour", shared=region)
    assert a.shared == b.shared == region
    assert KeyedLimiter("3/hour").shared is None
    assert a.check("10.0.0.1").allowed
    assert b.check("10.0.0.1").allowed
    assert a.check("10.0.0.1").allowed
    assert not b.check("10.0.0.1").allowed
    # In a region a key is its bytes: "7", b"7" and 7 are one key.
    assert a.check("7", 3).allowed
    assert not a.check(b"7").allowed
    assert not a.check(7).allowed
    # Another limit on the same region never mixes with the first.
    other = KeyedLimiter("5/hour", shared=region)
    assert other.check("10.0.0.1", 5).allowed
    assert len(a) == 2  # "10.0.0.1" and "7", counted over the region
    a.clear()
    assert b.check("10.0.0.1").allowed


def _worker(args: tuple[str, str, str, int]) -> int:
    region, algorithm, limit, checks = args
    t = KeyedLimiter(limit, algorithm=algorithm, shared=region)
    return sum(t.check(f"user-{i % 4}").allowed for i in range(checks))


@pytest.mark.parametrize("algorithm", ["token_bucket", "leaky_bucket", "fixed_window", "sliding_window"])
def test_eight_processes_admit_exactly_the_bound(region: str, algorithm: str) -> None:
    # Per hour: no refill lands within the test. 4 keys × 12 = 48 admissions in all.
    ctx = multiprocessing.get_context("fork")
    with ctx.Pool(8) as pool:
        admitted = pool.map(_worker, [(region, algorithm, "12/hour", 200)] * 8)
    assert sum(admitted) == 4 * 12, admitted


def test_bad_arguments_and_files_are_clear_errors(region: str, tmp_path: pathlib.Path) -> None:
    with pytest.raises(ValueError, match="clock= and shared="):
        KeyedLimiter("1/s", shared=region, clock=ManualClock())
    target = tmp_path / "target"
    target.write_bytes(b"")
    link = tmp_path / "link"
    link.symlink_to(target)
    with pytest.raises(SharedMemoryError, match="symbolic links are never followed"):
        KeyedLimiter("1/s", shared=str(link))
    not_a_region = tmp_path / "junk"
    not_a_region.write_bytes(os.urandom(8192))
    with pytest.raises(SharedMemoryError, match="not a sluicegate shared region|corrupt"):
        KeyedLimiter("1/s", shared=str(not_a_region))
    assert issubclass(SharedMemoryError, sluicegate.SluicegateError)
    with pytest.raises(ValueError):
        KeyedLimiter("1/s", shared=region, algorithm="sliding_log")


def test_unlink_makes_the_next_region_new(region: str) -> None:
    t = KeyedLimiter("1/hour", shared=region)
    assert t.check("k").allowed
    sluicegate.shared.unlink(region)
    assert not os.path.exists(region)
    fresh = KeyedLimiter("1/hour", shared=region)
    assert fresh.check("k").allowed
    sluicegate.shared.unlink(region)
    sluicegate.shared.unlink(region)  # absent: not an error


def _mappings(path: str) -> int:
    """How many of this process's mappings are of ``path`` (removed or not)."""
    with open("/proc/self/maps") as maps:
        return sum(line.rstrip("\n").removesuffix(" (deleted)").endswith(path) for line in maps)


def _remake(region: str) -> None:
    """Another process removes the region and makes it again."""
    sluicegate.shared.unlink(region)
    assert KeyedLimiter("1/hour", shared=region).check("c").allowed


def test_one_mapping_per_region_and_never_a_removed_one(region: str) -> None:
    limiters = [KeyedLimiter(f"{n}/hour", shared=region) for n in range(1, 30)]
    limiters += [sluicegate.TokenBucket("5/hour", shared=region) for _ in range(10)]
    assert _mappings(region) == 1
    assert limiters[0].check("k").allowed and not limiters[0].check("k").allowed
    # Removed and made again by another process: this one's next shared= maps
    # the new file, not its mapping of the old one.
    ctx = multiprocessing.get_context("fork")
    p = ctx.Process(target=_remake, args=(region,))
    p.start()
    p.join(30)
    assert p.exitcode == 0
    fresh = KeyedLimiter("1/hour", shared=region)
    assert not fresh.check("c").allowed  # the other process's admission, in the new region
    assert limiters[0].check("c").allowed  # the old limiters keep the old mapping
    assert _mappings(region) == 2


def test_open_sets_the_region_up_with_options(region: str) -> None:
    # Made by a "master" with a group mode and a size of its own...
    path = sluicegate.shared.open(region, memory=1 << 20, limits=8, mode=0o660)
    assert path == region
    assert os.stat(region).st_mode & 0o777 == 0o660
    # ...and used by every later shared= of the name in this process.
    t = KeyedLimiter("2/hour", shared=region)
    assert t.check("k").allowed and t.check("k").allowed and not t.check("k").allowed
    # Another size is another region: a clear error naming both.
    with pytest.raises(SharedMemoryError, match="1048576|1 MiB|bytes"):
        sluicegate.shared.open(region, memory=4 << 20, limits=8)
    # The same options again: the same region, its state kept.
    sluicegate.shared.open(region, memory=1 << 20, limits=8)
    assert not KeyedLimiter("2/hour", shared=region).check("k").allowed
    other = region + "-options"
    with pytest.raises(ValueError, match="permission bits"):
        sluicegate.shared.open(other, mode=0o1777)
    with pytest.raises(ValueError, match="from 1 to 65,535"):
        sluicegate.shared.open(other, limits=0)
    with pytest.raises(ValueError, match="hold no group"):
        sluicegate.shared.open(other, memory=0)
    with pytest.raises(ValueError, match="memory must be a whole number"):
        sluicegate.shared.open(other, memory=-1)
    with pytest.raises(ValueError, match="mode must be a whole number"):
        sluicegate.shared.open(other, mode=-1)
    assert not os.path.exists(other)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


WSGI_APP = """
from flask import Flask
from sluicegate.wsgi import RateLimitMiddleware

app = Flask(__name__)

@app.get("/ping")
def ping():
    return "pong"

app.wsgi_app = RateLimitMiddleware(app.wsgi_app, limits="10/hour", shared=REGION)
"""

ASGI_APP = """
from starlette.applications import Starlette
from starlette.responses import PlainTextResponse
from starlette.routing import Route
from sluicegate.asgi import RateLimitMiddleware

async def ping(request):
    return PlainTextResponse("pong")

app = Starlette(routes=[Route("/ping", ping)])
app.add_middleware(RateLimitMiddleware, limits="10/hour", shared=REGION)
"""


def _serve_and_count(cmd: list[str], app_dir: pathlib.Path, port: int) -> tuple[int, str]:
    """Starts the server, sends 200 requests (one client address), stops it by
    its pid; returns how many got 200 and the server's stderr."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(app_dir), os.environ.get("PYTHONPATH", "")]))
    proc = subprocess.Popen(cmd, cwd=app_dir, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                    break
            except OSError:
                pass
            assert proc.poll() is None, proc.communicate()[1]
            assert time.monotonic() < deadline, "the server did not start"
            time.sleep(0.1)
        time.sleep(1.5)  # every worker up and accepting
        ok = 0
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=10) as client:
            for _ in range(200):
                # A new connection each time, so the requests spread over the workers.
                r = client.get("/ping", headers={"Connection": "close"})
                assert r.status_code in (200, 429), r.text
                ok += r.status_code == 200
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=30)
    return ok, err


@pytest.mark.skipif(sys.platform != "linux", reason="pre-fork servers on Linux")
@pytest.mark.parametrize("preload", [False, True], ids=["fork-then-open", "preload"])
def test_gunicorn_four_workers_admit_ten_of_two_hundred(region: str, tmp_path: pathlib.Path, preload: bool) -> None:
    """Each worker opens the region, or (``--preload``) the master opens it
    before forking and the workers inherit the mapping."""
    pytest.importorskip("gunicorn")
    pytest.importorskip("flask")
    (tmp_path / "wsgi_app.py").write_text(f"REGION = {region!r}\n" + WSGI_APP)
    port = _free_port()
    cmd = [sys.executable, "-m", "gunicorn", "-w", "4", "-b", f"127.0.0.1:{port}", "wsgi_app:app"]
    if preload:
        cmd.insert(3, "--preload")
    ok, err = _serve_and_count(cmd, tmp_path, port)
    assert ok == 10, err
    assert "worker processes" not in err  # no multi-worker warning: the state is shared


@pytest.mark.skipif(sys.platform != "linux", reason="pre-fork servers on Linux")
def test_uvicorn_four_workers_admit_ten_of_two_hundred(region: str, tmp_path: pathlib.Path) -> None:
    (tmp_path / "asgi_app.py").write_text(f"REGION = {region!r}\n" + ASGI_APP)
    port = _free_port()
    cmd = [sys.executable, "-m", "uvicorn", "asgi_app:app", "--workers", "4", "--host", "127.0.0.1",
           "--port", str(port), "--log-level", "warning"]
    ok, err = _serve_and_count(cmd, tmp_path, port)
    assert ok == 10, err
    assert "worker processes" not in err


POLICY = """
[[rule]]
name = "per-ip"
limit = "6/hour"
key = ["ip"]

[[rule]]
name = "per-tenant"
limit = "4/hour"
key = ["tenant"]
"""


def _policy_worker(args: tuple[str, str, int]) -> int:
    region, how, checks = args
    if how == "table":
        policy = sluicegate.Policy.from_str(POLICY + f'\n[shared]\npath = "{region}"\n')
    else:
        policy = sluicegate.Policy.from_str(POLICY, shared=region)
    # One ip and one tenant: all-or-nothing across the two rules, so the tenant's
    # 4 bind first and the ip keeps 2 unused.
    return sum(bool(policy.check(ip="10.0.0.1", tenant="acme")) for _ in range(checks))


@pytest.mark.parametrize("how", ["table", "argument"])
def test_eight_processes_share_a_policy_all_or_nothing(region: str, how: str) -> None:
    ctx = multiprocessing.get_context("fork")
    with ctx.Pool(8) as pool:
        admitted = pool.map(_policy_worker, [(region, how, 20)] * 8)
    assert sum(admitted) == 4, admitted
    # The ip rule was charged only for the 4 admitted (no leaked charge from the
    # denials): 2 of its 6 remain, in any process.
    fresh = sluicegate.Policy.from_str(POLICY, shared=region)
    assert fresh.check(ip="10.0.0.1", tenant="other", cost=2)
    assert not fresh.check(ip="10.0.0.1", tenant="other2")


def _single_worker(args: tuple[str, str, int]) -> int:
    region, cls, checks = args
    limiter = getattr(sluicegate, cls)("7/hour", shared=region)
    return sum(limiter.check().allowed for _ in range(checks))


@pytest.mark.parametrize("cls", ["TokenBucket", "LeakyBucket", "FixedWindow", "SlidingWindow"])
def test_eight_processes_share_a_single_limiter(region: str, cls: str) -> None:
    ctx = multiprocessing.get_context("fork")
    with ctx.Pool(8) as pool:
        admitted = pool.map(_single_worker, [(region, cls, 20)] * 8)
    # Leaky bucket: burst 1 by default, so 1 at once; the others: the whole 7.
    expected = sluicegate.LeakyBucket("7/hour").limit if cls == "LeakyBucket" else 7
    assert sum(admitted) == expected, admitted


def test_single_limiters_refuse_what_cannot_be_shared(region: str) -> None:
    with pytest.raises(ValueError, match="clock= and shared="):
        sluicegate.TokenBucket("1/s", shared=region, clock=ManualClock())
    # The sliding log's writer lock lives in process memory: not offered shared.
    with pytest.raises(ValueError, match="sliding_log"):
        sluicegate.SlidingLog("5/s", shared=region)
    # A single limiter and a keyed one of the same spec are different limits.
    single = sluicegate.TokenBucket("2/hour", shared=region)
    keyed = KeyedLimiter("2/hour", shared=region)
    assert single.check(2).allowed
    assert keyed.check("k", 2).allowed


def test_a_striped_bucket_in_a_region_is_one_word(region: str) -> None:
    # Stripes are a process's threads' own: in a region the bucket is one word.
    a = sluicegate.StripedTokenBucket("4/hour", stripes=4, shared=region)
    b = sluicegate.StripedTokenBucket("4/hour", stripes=4, shared=region)
    assert a.stripes == 1
    assert [a.check().allowed, b.check().allowed, a.check().allowed, b.check().allowed] == [True] * 4
    assert not a.check().allowed and not b.check().allowed
    with pytest.raises(ValueError):
        sluicegate.StripedTokenBucket("4/hour", stripes=0, shared=region)


def _shaper_worker(args: tuple[str, int]) -> list[float]:
    region, reservations = args
    shaper = sluicegate.Shaper("10/hour", burst=1, max_delay=3600.0, shared=region)
    starts = []
    for _ in range(reservations):
        r = shaper.reserve()
        if r.granted:
            starts.append(time.monotonic() + r.delay)
    return starts


def test_eight_processes_share_one_shapers_schedule(region: str) -> None:
    # One schedule for every process: as many reservations granted as one shaper
    # grants, and no two starts closer than the spacing (6 minutes at 10/hour).
    ctx = multiprocessing.get_context("fork")
    with ctx.Pool(8) as pool:
        starts = sorted(s for ss in pool.map(_shaper_worker, [(region, 5)] * 8) for s in ss)
    model = sluicegate.Shaper("10/hour", burst=1, max_delay=3600.0)
    assert len(starts) == sum(model.reserve().granted for _ in range(40)) == model.limit
    gaps = [b - a for a, b in zip(starts, starts[1:])]
    assert min(gaps) > 360.0 - 5.0, gaps


def test_a_shared_shaper_cancels_only_the_latest_reservation(region: str) -> None:
    a = sluicegate.Shaper("1/s", max_delay=10.0, shared=region)
    b = sluicegate.Shaper("1/s", max_delay=10.0, shared=region)
    assert a.shared == b.shared == region and sluicegate.Shaper("1/s").shared is None
    first = a.reserve()
    second = b.reserve()
    assert first.granted and second.delay > 0.9
    assert not a.cancel(first)  # the second was promised a start after it
    assert not a.cancel(second)  # not a's reservation
    assert not b.cancel(sluicegate.Shaper("1/s").reserve())  # nor one of this process
    assert b.cancel(second)
    assert not b.cancel(second)  # spent
    third = a.reserve()
    assert abs(third.delay - second.delay) < 0.05  # the second's slot was free again
    assert a.peek().allowed == b.peek().allowed
    with pytest.raises(ValueError, match="clock= and shared="):
        sluicegate.Shaper("1/s", shared=region, clock=ManualClock())
    with pytest.raises(sluicegate.CapacityError):
        a.reserve(a.limit + 1)
