"""sluicegate-server driven by grpcio with Envoy's own generated stubs (xds-protos).

Every test uses descriptor values of its own, so the tests share one server."""

import os
import time
import uuid

import grpc
import pytest
from envoy.extensions.common.ratelimit.v3 import ratelimit_pb2
from envoy.service.ratelimit.v3 import rls_pb2
from google.protobuf import wrappers_pb2
from grpc_health.v1 import health_pb2, health_pb2_grpc

from conftest import DEADLINE_S

OK = rls_pb2.RateLimitResponse.OK
OVER = rls_pb2.RateLimitResponse.OVER_LIMIT


def fresh(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


def descriptor(*entries, hits=None):
    d = ratelimit_pb2.RateLimitDescriptor(
        entries=[ratelimit_pb2.RateLimitDescriptor.Entry(key=k, value=v) for k, v in entries]
    )
    if hits is not None:
        d.hits_addend.CopyFrom(wrappers_pb2.UInt64Value(value=hits))
    return d


def ask(rls, *descriptors, domain="edge", hits=0):
    req = rls_pb2.RateLimitRequest(domain=domain, descriptors=descriptors, hits_addend=hits)
    return rls.ShouldRateLimit(req, timeout=DEADLINE_S)


def test_limit_per_descriptor_value(rls):
    ip, other = fresh("10.0.0"), fresh("10.0.1")
    codes = [ask(rls, descriptor(("remote_address", ip))).overall_code for _ in range(4)]
    assert codes == [OK, OK, OK, OVER]
    r = ask(rls, descriptor(("remote_address", ip)))
    status = r.statuses[0]
    assert status.code == OVER
    assert status.current_limit.requests_per_unit == 3
    assert status.current_limit.unit == rls_pb2.RateLimitResponse.RateLimit.DAY
    assert 0 < status.duration_until_reset.seconds <= 86_400
    assert ask(rls, descriptor(("remote_address", other))).overall_code == OK


def test_nested_descriptors(rls):
    user = fresh("user")
    nested = descriptor(("path", "/login"), ("user", user))
    assert ask(rls, nested).statuses[0].code == OK
    assert ask(rls, nested).statuses[0].code == OVER  # 1 per day for path+user
    # A value under no node: no limit, OK with no current_limit.
    r = ask(rls, descriptor(("path", "/elsewhere"), ("user", user)))
    assert r.overall_code == OK and not r.statuses[0].HasField("current_limit")
    # Several descriptors: one status each, overall OVER_LIMIT if any is over.
    r = ask(rls, descriptor(("remote_address", fresh("ip"))), nested)
    assert [s.code for s in r.statuses] == [OK, OVER]
    assert r.overall_code == OVER


def test_hits_addend(rls):
    key = fresh("bulk")
    assert ask(rls, descriptor(("bulk", key)), hits=7).statuses[0].limit_remaining == 3
    assert ask(rls, descriptor(("bulk", key)), hits=4).overall_code == OVER
    assert ask(rls, descriptor(("bulk", key)), hits=3).statuses[0].limit_remaining == 0
    # The per-descriptor hits_addend overrides the request's; 0 only looks.
    other = fresh("bulk")
    r = ask(rls, descriptor(("bulk", other), hits=0), hits=5)
    assert (r.overall_code, r.statuses[0].limit_remaining) == (OK, 10)
    assert ask(rls, descriptor(("bulk", other), hits=10)).statuses[0].limit_remaining == 0


def test_shadow_mode_counts_but_never_denies(rls, metrics):
    key = fresh("trial")
    before = shadow_denied(metrics())
    assert [ask(rls, descriptor(("trial", key))).overall_code for _ in range(3)] == [OK, OK, OK]
    assert shadow_denied(metrics()) == before + 2


def shadow_denied(text: str) -> int:
    line = 'sluicegate_server_rule_hits_total{rule="edge.trial",shadow="true",result="shadow_denied"} '
    for row in text.splitlines():
        if row.startswith(line):
            return int(row[len(line):])
    pytest.fail(f"no shadow_denied series in\n{text}")


def test_unlimited(rls):
    r = ask(rls, descriptor(("internal", fresh("svc"))), hits=1_000_000)
    assert r.overall_code == OK
    assert r.statuses[0].limit_remaining == 2**32 - 1


def test_unknown_domain_is_ok(rls):
    r = ask(rls, descriptor(("remote_address", "x")), domain="not-configured")
    assert r.overall_code == OK and len(r.statuses) == 1


def test_response_headers(rls):
    r = ask(rls, descriptor(("remote_address", fresh("h"))))
    headers = {h.key: h.value for h in r.response_headers_to_add}
    assert headers["RateLimit-Policy"] == '"edge.remote_address";q=3;w=86400'
    assert headers["RateLimit"].startswith('"edge.remote_address";r=2;t=')


@pytest.mark.parametrize(
    "request_args, message",
    [
        (dict(domain="", descriptors=[descriptor(("k", "v"))]), "rate limit domain must not be empty"),
        (dict(domain="edge", descriptors=[]), "rate limit descriptor list must not be empty"),
        (
            dict(domain="edge", descriptors=[descriptor(("k", "v"))], hits_addend=2**32 - 1),
            "hits_addend 4294967295 is larger than this server's maximum",
        ),
        (
            dict(domain="edge", descriptors=[descriptor(("k", "v"), hits=2**64 - 1)]),
            "descriptor 0: hits_addend 18446744073709551615 is larger",
        ),
        (dict(domain="edge", descriptors=[ratelimit_pb2.RateLimitDescriptor()]), "descriptor 0 has no entries"),
    ],
)
def test_malformed_requests(rls, request_args, message):
    with pytest.raises(grpc.RpcError) as err:
        rls.ShouldRateLimit(rls_pb2.RateLimitRequest(**request_args), timeout=DEADLINE_S)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert message in err.value.details()


def test_health(channel):
    health = health_pb2_grpc.HealthStub(channel)
    for service in ["", "envoy.service.ratelimit.v3.RateLimitService"]:
        r = health.Check(health_pb2.HealthCheckRequest(service=service), timeout=DEADLINE_S)
        assert r.status == health_pb2.HealthCheckResponse.SERVING


def test_metrics(rls, metrics):
    ask(rls, descriptor(("remote_address", fresh("m"))))
    with pytest.raises(grpc.RpcError):
        ask(rls, descriptor(("remote_address", "x")), domain="")
    text = metrics()
    assert "# TYPE sluicegate_server_rule_hits_total counter" in text
    assert 'sluicegate_server_rule_hits_total{rule="edge.remote_address",shadow="false",result="allowed"}' in text
    assert "# TYPE sluicegate_server_decision_seconds histogram" in text
    assert 'sluicegate_server_decision_seconds_bucket{le="+Inf"}' in text
    assert 'sluicegate_server_malformed_requests_total{reason="empty_domain"}' in text


def wait_for(predicate, what: str, seconds: float = 10.0):
    deadline = time.monotonic() + seconds
    while not predicate():
        if time.monotonic() > deadline:
            pytest.fail(f"{what} not seen within {seconds} s")
        time.sleep(0.1)


def test_reload(rls, config_dir, metrics):
    path = f"{config_dir}/reload.yaml"
    client = fresh("c")
    assert ask(rls, descriptor(("client", client)), domain="reload").overall_code == OK
    assert ask(rls, descriptor(("client", client)), domain="reload").overall_code == OVER

    replace(path, "domain: reload\ndescriptors:\n  - key: client\n    rate_limit: {unit: day, requests_per_unit: 3}\n")

    def limit() -> int:
        r = ask(rls, descriptor(("client", client), hits=0), domain="reload")
        return r.statuses[0].current_limit.requests_per_unit

    wait_for(lambda: limit() == 3, "the new limit")
    # The count carried over: 1 used of 3.
    r = ask(rls, descriptor(("client", client), hits=0), domain="reload")
    assert r.statuses[0].limit_remaining == 2

    errors_before = reload_errors(metrics())
    replace(path, "domain: reload\ndescriptors:\n  - key: client\n    rate_limit: {unit: fortnight, requests_per_unit: 1}\n")
    wait_for(lambda: reload_errors(metrics()) == errors_before + 1, "the failed reload")
    assert limit() == 3  # the old rules stay in force


def replace(path: str, text: str) -> None:
    """Writes `path` whole at once (a rename), as a deployment would: the server
    polls the directory and must never read a half-written file (an empty text
    between the truncation and the write was a second, spurious failed reload)."""
    tmp = os.path.join(os.path.dirname(path), ".writing")  # hidden: not a source
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, path)


def reload_errors(text: str) -> int:
    prefix = 'sluicegate_server_config_reloads_total{result="error"} '
    return next(int(r[len(prefix):]) for r in text.splitlines() if r.startswith(prefix))


def test_toml_policy_domain(rls):
    tenant = fresh("t")
    free = descriptor(("tenant", tenant), ("plan", "free"))
    codes = [ask(rls, free, domain="api").overall_code for _ in range(3)]
    assert codes == [OK, OK, OVER]
    status = ask(rls, free, domain="api").statuses[0]
    assert status.current_limit.name == "per-tenant"
    assert (status.current_limit.requests_per_unit, status.current_limit.unit) == (
        2,
        rls_pb2.RateLimitResponse.RateLimit.HOUR,
    )
    # Another plan: only the token bucket applies.
    paid = descriptor(("tenant", tenant), ("plan", "paid"))
    r = ask(rls, paid, domain="api")
    assert r.overall_code == OK and r.statuses[0].current_limit.name == "burst-guard"


def test_limit_override(rls):
    key = fresh("ov")
    d = descriptor(("remote_address", key))
    d.limit.CopyFrom(
        ratelimit_pb2.RateLimitDescriptor.RateLimitOverride(
            requests_per_unit=1, unit=rls_pb2.RateLimitResponse.RateLimit.HOUR
        )
    )
    first = ask(rls, d)
    assert first.overall_code == OK
    assert first.statuses[0].current_limit.requests_per_unit == 1
    assert ask(rls, d).overall_code == OVER
    # Without the override the configured 3 per day applies, on a counter of its own.
    plain = ask(rls, descriptor(("remote_address", key)))
    assert (plain.overall_code, plain.statuses[0].limit_remaining) == (OK, 2)
