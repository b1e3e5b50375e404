"""Two sluicegate-servers on one redis-server (scripts/test-server's Redis-backed
run): a `backend = "redis"` rule counts once for both, its state is in Redis, and
a `backend = "hybrid"` rule answers from leases.

The script passes server A in SLUICEGATE_SERVER_GRPC / SLUICEGATE_SERVER_HTTP,
server B in SLUICEGATE_SERVER_GRPC_B and Redis's port in SLUICEGATE_REDIS_PORT;
the domain is the file `shared.toml` it wrote (rules `per-user`, 3 per hour per
user on Redis, and `hot`, 1000 per second on the hybrid backend)."""

import socket
import uuid

import grpc
import pytest
from envoy.service.ratelimit.v3 import rls_pb2_grpc

from conftest import DEADLINE_S, _env
from test_rls import OK, OVER, ask, descriptor


@pytest.fixture(scope="module")
def rls_b():
    ch = grpc.insecure_channel(_env("SLUICEGATE_SERVER_GRPC_B"))
    grpc.channel_ready_future(ch).result(timeout=DEADLINE_S)
    yield rls_pb2_grpc.RateLimitServiceStub(ch)
    ch.close()


def redis_keys(pattern: str) -> list[str]:
    """KEYS over a raw RESP exchange (no client library needed)."""
    port = int(_env("SLUICEGATE_REDIS_PORT"))
    with socket.create_connection(("127.0.0.1", port), timeout=DEADLINE_S) as s:
        p = pattern.encode()
        s.sendall(b"*2\r\n$4\r\nKEYS\r\n$%d\r\n%s\r\n" % (len(p), p))
        data = b""
        while True:
            data += s.recv(65536)
            lines = data.split(b"\r\n")
            count = int(lines[0][1:])
            if len(lines) >= 2 * count + 2:
                return [lines[2 + 2 * i].decode() for i in range(count)]


def redis_script_calls() -> int:
    """EVALSHA and EVAL calls the Redis server has run (INFO commandstats)."""
    port = int(_env("SLUICEGATE_REDIS_PORT"))
    with socket.create_connection(("127.0.0.1", port), timeout=DEADLINE_S) as s:
        s.sendall(b"*2\r\n$4\r\nINFO\r\n$12\r\ncommandstats\r\n")
        data = b""
        while True:
            data += s.recv(65536)
            head, _, body = data.partition(b"\r\n")
            if head.startswith(b"$") and len(body) >= int(head[1:]):
                text = body[: int(head[1:])].decode()
                break
    calls = 0
    for line in text.splitlines():
        for cmd in ("evalsha", "eval"):
            if line.startswith(f"cmdstat_{cmd}:"):
                calls += int(line.split("calls=")[1].split(",")[0])
    return calls


def test_a_redis_rule_counts_once_for_two_servers(rls, rls_b):
    user = f"u-{uuid.uuid4().hex[:12]}"
    d = descriptor(("user", user))
    codes = [ask(srv, d, domain="shared").overall_code for srv in (rls, rls_b, rls, rls_b)]
    assert codes == [OK, OK, OK, OVER]
    status = ask(rls, d, domain="shared").statuses[0]
    assert status.current_limit.name == "per-user" and status.limit_remaining == 0
    # The count lives in Redis, under the rule's namespaced key.
    keys = redis_keys(f"rls:policy:per-user:*{user}*")
    assert len(keys) == 1, keys


def test_a_hybrid_rule_answers_both_servers(rls, rls_b, metrics):
    d = descriptor(("path", "/hot"))
    before = redis_script_calls()
    codes = [ask(srv, d, domain="shared").overall_code for _ in range(100) for srv in (rls, rls_b)]
    assert codes.count(OK) == len(codes)
    # Each server leased from Redis (at least once: a front starts with nothing),
    # and answered most checks from its leases. Counted on the server, not by
    # its keys: a lease's key expires once the bucket would be full again, which
    # can come before the last of 200 checks on a slow machine.
    leases = redis_script_calls() - before
    assert 2 <= leases < len(codes) // 2, f"{leases} script calls for {len(codes)} checks"
    prefix = "sluicegate_server_rule_backend_errors_total{"
    errors = [line for line in metrics().splitlines() if line.startswith(prefix)]
    assert errors and all(line.endswith(" 0") for line in errors), errors
