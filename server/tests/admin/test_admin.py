"""The admin API against real servers (scripts/test-admin): authentication,
bodies, optimistic concurrency, propagation to every reader of one SQLite
store, TLS on every listener, and the store's outage. Every test uses a domain
of its own."""

import json
import os
import shutil
import signal
import subprocess
import time
import urllib.request
import uuid

import grpc
import pytest
from envoy.extensions.common.ratelimit.v3 import ratelimit_pb2
from envoy.service.ratelimit.v3 import rls_pb2, rls_pb2_grpc

import sluicegate
from conftest import DEADLINE_S, env, read

OK = rls_pb2.RateLimitResponse.Code.OK
OVER = rls_pb2.RateLimitResponse.Code.OVER_LIMIT
PROPAGATION_S = 1.0


def fresh(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def ask(rls, domain, user, path="/api"):
    d = ratelimit_pb2.RateLimitDescriptor(
        entries=[
            ratelimit_pb2.RateLimitDescriptor.Entry(key="user", value=user),
            ratelimit_pb2.RateLimitDescriptor.Entry(key="path", value=path),
        ]
    )
    req = rls_pb2.RateLimitRequest(domain=domain, descriptors=[d], hits_addend=1)
    return rls.ShouldRateLimit(req, timeout=DEADLINE_S).overall_code


def until(cond, within, what):
    """Polls cond every 10 ms; returns the seconds it took, fails after `within`."""
    start = time.monotonic()
    while True:
        if cond():
            return time.monotonic() - start
        if time.monotonic() - start > within:
            pytest.fail(f"{what}: not within {within} s")
        time.sleep(0.01)


def seed(admin, domain):
    """A domain with one harmless rule (a Python reader needs the domain to exist)."""
    status, _, body = admin.call("PUT", f"/admin/v1/domains/{domain}/rules/base", {"limit": "1000/second"})
    assert status == 201, body


def test_auth_and_bad_bodies_save_nothing(admin):
    domain = fresh("auth")
    path = f"/admin/v1/domains/{domain}/rules/r"
    before = admin.audit_len()
    cases = [
        ("no token", dict(token=None, body={"limit": "1/s"}), 401, None),
        ("wrong token", dict(token="x" * 32, body={"limit": "1/s"}), 401, None),
        ("read token writing", dict(token="read", body={"limit": "1/s"}), 403, None),
        ("malformed JSON", dict(raw=b'{"limit": ', headers={"Content-Type": "application/json"}), 400, None),
        ("invalid limit", dict(body={"limit": "5/fortnight"}), 422, "limit"),
        ("unknown field", dict(body={"limit": "1/s", "limt": "x"}), 422, "limt"),
        ("wrong type", dict(body={"limit": "1/s", "capacity": "many"}), 422, "capacity"),
        ("bad algorithm", dict(body={"limit": "1/s", "algorithm": "gcra"}), 422, "algorithm"),
    ]
    for what, kw, want, field in cases:
        status, headers, body = admin.call("PUT", path, **kw)
        assert status == want, (what, status, body)
        assert body["errors"] and body["errors"][0]["message"], what
        if field:
            assert body["errors"][0]["field"] == field, (what, body)
        if want == 401:
            assert headers["WWW-Authenticate"] == "Bearer"
    # A body over the bound (1 MiB) is refused before it is read.
    status, body = admin.declare_only("PUT", path, 2 << 20)
    assert status == 413 and body["errors"][0]["message"], (status, body)
    # Deletes too.
    assert admin.call("DELETE", path, token=None)[0] == 401
    assert admin.call("DELETE", path, token="read", if_match=1)[0] == 403
    # Nothing was saved: no domain, no rule, and the audit trail did not grow.
    assert admin.call("GET", path, token="read")[0] == 404
    assert admin.audit_len() == before
    # A GET with a read token works; with none it does not.
    assert admin.call("GET", "/admin/v1/domains", token="read")[0] == 200
    assert admin.call("GET", "/admin/v1/domains", token=None)[0] == 401


def test_etag_and_if_match(admin):
    domain = fresh("etag")
    path = f"/admin/v1/domains/{domain}/rules/login"
    status, headers, body = admin.call("PUT", path, {"limit": "5/minute", "key": ["user"]})
    assert status == 201, body
    v1 = body["version"]
    assert headers["ETag"] == f'"{v1}"' and body["updated_by"] == "ops"
    # Replacing without If-Match: 428; with a stale version: 412; right: 200.
    status, _, body = admin.call("PUT", path, {"limit": "6/minute", "key": ["user"]})
    assert status == 428, body
    status, _, body = admin.call("PUT", path, {"limit": "6/minute"}, if_match=v1 + 100)
    assert status == 412, body
    status, headers, body = admin.call("PUT", path, {"limit": "6/minute", "key": ["user"]}, if_match=v1)
    assert status == 200, body
    v2 = body["version"]
    assert v2 > v1 and headers["ETag"] == f'"{v2}"'
    # The first version is stale now: a second operator's write based on it loses.
    status, _, body = admin.call("PUT", path, {"limit": "1/minute"}, if_match=v1)
    assert status == 412, body
    status, headers, body = admin.call("GET", path, token="read")
    assert (status, body["limit"], headers["ETag"]) == (200, "6/minute", f'"{v2}"')
    # Delete: 428 without If-Match, 412 stale, 204, then 404.
    assert admin.call("DELETE", path)[0] == 428
    assert admin.call("DELETE", path, if_match=v1)[0] == 412
    assert admin.call("DELETE", path, if_match=v2)[0] == 204
    assert admin.call("GET", path, token="read")[0] == 404
    # The trail: create, replace, delete, by the write token's name.
    status, _, body = admin.call("GET", "/admin/v1/audit?limit=1000&domain=" + domain, token="read")
    actions = [(e["action"], e["by"], e["rule"]) for e in body["entries"]]
    assert actions == [("create", "ops", "login"), ("replace", "ops", "login"), ("delete", "ops", "login")]
    assert body["entries"][1]["before"]["limit"] == "5/minute" and body["entries"][1]["after"]["limit"] == "6/minute"


def test_audit_pages(admin):
    domain = fresh("pages")
    for i in range(5):
        assert admin.call("PUT", f"/admin/v1/domains/{domain}/rules/r{i}", {"limit": "1/s"})[0] == 201
    seen, after = [], None
    for _ in range(10):
        q = f"/admin/v1/audit?limit=2&domain={domain}" + (f"&after={after}" if after else "")
        status, _, body = admin.call("GET", q, token="read")
        assert status == 200 and len(body["entries"]) <= 2
        seen += [e["rule"] for e in body["entries"]]
        after = body["next"]
        if after is None:
            break
    assert seen == [f"r{i}" for i in range(5)]
    assert admin.call("GET", "/admin/v1/audit?limit=zero", token="read")[0] == 400


def test_defaults_redact_passwords(admin):
    domain = fresh("defaults")
    path = f"/admin/v1/domains/{domain}/defaults"
    settings = {"defaults": {"mode": "shadow"}, "redis": {"url": "redis://app:s3cret@127.0.0.1:1/0"}}
    status, headers, body = admin.call("PUT", path, settings)
    assert status == 201, body
    assert body["redis"]["url"] == "redis://app:***@127.0.0.1:1/0"
    v = body["version"]
    assert admin.call("PUT", path, settings)[0] == 428
    # Sent back as shown, the stored password is kept (the audit shows *** too).
    body["defaults"] = {"mode": "enforce"}
    status, _, body = admin.call("PUT", path, body, if_match=v)
    assert status == 200, body
    status, _, trail = admin.call("GET", "/admin/v1/audit?limit=1000&domain=" + domain, token="read")
    text = str(trail)
    assert "s3cret" not in text and "***" in text
    status, _, got = admin.call("GET", path, token="read")
    assert got["defaults"] == {"mode": "enforce"} and "s3cret" not in str(got)
    assert admin.call("PUT", path, {"defaults": {"mode": "sometimes"}}, if_match=got["version"])[0] == 422


def test_validate_json_and_toml(admin):
    domain = fresh("validate")
    seed(admin, domain)
    before = admin.audit_len()
    url = f"/admin/v1/domains/{domain}/validate"
    status, _, body = admin.call("POST", url, {"name": "x", "limit": "3/minute"}, token="read")
    assert (status, body["valid"]) == (200, True), body
    status, _, body = admin.call("POST", url, {"name": "x", "limit": "3/fortnight"}, token="read")
    assert status == 422 and body["errors"][0]["field"] == "limit" and body["errors"][0]["line"] is None
    toml = b'[[rule]]\nname = "a"\nlimit = "5/minute"\n\n[[rule]]\nname = "b"\nlimit = "5/fortnight"\n'
    status, _, body = admin.call("POST", url, token="read", raw=toml, headers={"Content-Type": "application/toml"})
    assert status == 422, body
    e = body["errors"][0]
    assert (e["field"], e["line"], e["column"], e["rule"]) == ("limit", 7, 12, "b"), e
    status, _, body = admin.call("POST", url, token="read", raw=toml[:38], headers={"Content-Type": "application/toml"})
    assert status == 200, body
    assert admin.audit_len() == before  # validating saves nothing


def test_a_change_reaches_every_reader_within_a_second(admin, rls):
    """One server (gRPC over TLS) and one Python Policy.from_store on one store
    (SQLite, or PostgreSQL in the --postgres pass): a rule created through the
    admin API is enforced by both within 1 s, and its deletion likewise."""
    domain = fresh("prop")
    seed(admin, domain)
    reader = sluicegate.Policy.from_store(env("SLUICEGATE_STORE"), domain=domain, interval=0.1)
    try:
        explain = f"/admin/v1/domains/{domain}/explain?path=%2Fapi"
        until(lambda: admin.call("GET", explain, token="read")[0] == 200, 2.0, "the server serves the new domain")
        user = fresh("u")
        status, _, body = admin.call(
            "PUT", f"/admin/v1/domains/{domain}/rules/per-user",
            {"match": {"path": "/api"}, "key": ["user"], "limit": "1/hour", "algorithm": "fixed_window"},
        )
        assert status == 201, body
        version = body["version"]
        took_server = until(lambda: ask(rls, domain, user) == OVER, PROPAGATION_S, "the server enforces the new rule")
        took_reader = until(
            lambda: not reader.check(path="/api", user=user).allowed, PROPAGATION_S, "the Python reader enforces the new rule"
        )
        # explain on the server: the rule, its key, nothing left.
        status, _, ex = admin.call("GET", f"/admin/v1/domains/{domain}/explain?path=%2Fapi&user={user}", token="read")
        assert status == 200, ex
        rule = next(r for r in ex["rules"] if r["name"] == "per-user")
        assert (rule["key"], rule["remaining"], rule["allowed"], ex["allowed"]) == (user, 0, False, False)
        # stats count this process's hits.
        status, _, st = admin.call("GET", f"/admin/v1/domains/{domain}/stats", token="read")
        counts = next(r for r in st["rules"] if r["name"] == "per-user")
        assert counts["allowed"] >= 1 and counts["denied"] >= 1 and st["scope"] == "process"
        # Deletion likewise.
        assert admin.call("DELETE", f"/admin/v1/domains/{domain}/rules/per-user", if_match=version)[0] == 204
        until(lambda: ask(rls, domain, user) == OK, PROPAGATION_S, "the server drops the deleted rule")
        until(lambda: reader.check(path="/api", user=user).allowed, PROPAGATION_S, "the Python reader drops the deleted rule")
        print(f"propagation: server {took_server * 1000:.0f} ms, Python reader {took_reader * 1000:.0f} ms")
    finally:
        reader.close()


def test_mtls_refuses_a_client_without_certificate():
    ca = read(env("SLUICEGATE_TLS_CA"))
    addr = env("SLUICEGATE_GRPC_MTLS")
    domain = fresh("mtls")

    def call(creds):
        ch = grpc.secure_channel(addr, creds)
        try:
            return ask(rls_pb2_grpc.RateLimitServiceStub(ch), domain, "u")
        finally:
            ch.close()

    with pytest.raises(grpc.RpcError) as refused:
        call(grpc.ssl_channel_credentials(root_certificates=ca))
    assert refused.value.code() == grpc.StatusCode.UNAVAILABLE
    cert = read(env("SLUICEGATE_CLIENT_CERT"))
    key = read(env("SLUICEGATE_CLIENT_KEY"))
    assert call(grpc.ssl_channel_credentials(root_certificates=ca, private_key=key, certificate_chain=cert)) == OK
    # A plain-text client gets nothing from a TLS listener.
    with pytest.raises(grpc.RpcError):
        _plain(addr, domain)


def _plain(addr, domain):
    ch = grpc.insecure_channel(addr)
    try:
        return ask(rls_pb2_grpc.RateLimitServiceStub(ch), domain, "u")
    finally:
        ch.close()


def healthz():
    with urllib.request.urlopen(f"http://{env('SLUICEGATE_HTTP_A')}/healthz", timeout=DEADLINE_S) as r:
        assert r.status == 200
        return json.loads(r.read())


def test_store_outage_keeps_the_rules_and_reports_degraded(admin, rls):
    """The store taken away (the SQLite file moved, or PostgreSQL stopped): the
    server and a Python reader keep enforcing
    the last rules and say so; put back, they follow changes again. Last: it
    takes the store away from every other test."""
    domain = fresh("outage")
    seed(admin, domain)
    status, _, body = admin.call(
        "PUT", f"/admin/v1/domains/{domain}/rules/per-user", {"key": ["user"], "limit": "1/hour", "algorithm": "fixed_window"}
    )
    assert status == 201
    reader = sluicegate.Policy.from_store(env("SLUICEGATE_STORE"), domain=domain, interval=0.1)
    store = env("SLUICEGATE_STORE")
    if store.startswith("sqlite:"):
        path = store.split(":", 1)[1]
        aside = path + ".away"

        def take_away() -> None:
            os.rename(path, aside)

        def put_back() -> None:
            if os.path.exists(aside):
                shutil.move(aside, path)
    else:
        # PostgreSQL: stopped and started again (scripts/test-store's control).
        ctl = env("SLUICEGATE_STORE_CTL")
        stopped = []

        def take_away() -> None:
            subprocess.run([ctl, "stop"], check=True, timeout=60)
            stopped.append(True)

        def put_back() -> None:
            if stopped:
                subprocess.run([ctl, "start"], check=True, timeout=60)
                stopped.clear()
    try:
        until(lambda: ask(rls, domain, "first") == OVER, 2.0, "the server enforces the rule")
        assert healthz()["status"] == "ok"
        take_away()
        until(lambda: healthz()["status"] == "degraded", 2.0, "/healthz says degraded")
        h = healthz()
        assert "unavailable" in h["last_error"], h
        until(lambda: reader.store_reachable is False, 2.0, "the Python reader notices")
        assert reader.last_error
        # The last rules still decide, in both.
        user = fresh("u")
        assert ask(rls, domain, user) == OK and ask(rls, domain, user) == OVER
        assert reader.check(user=user).allowed and not reader.check(user=user).allowed
        with urllib.request.urlopen(f"http://{env('SLUICEGATE_HTTP_A')}/metrics", timeout=DEADLINE_S) as r:
            assert "\nsluicegate_server_store_up 0\n" in r.read().decode()
        put_back()
        until(lambda: healthz()["status"] == "ok", 5.0, "/healthz ok again")
        until(lambda: reader.store_reachable is True, 2.0, "the Python reader reaches the store again")
        # And they follow changes again.
        status, _, rule = admin.call("GET", f"/admin/v1/domains/{domain}/rules/per-user", token="read")
        assert admin.call("DELETE", f"/admin/v1/domains/{domain}/rules/per-user", if_match=rule["version"])[0] == 204
        until(lambda: ask(rls, domain, user) == OK, PROPAGATION_S, "the server follows again")
        until(lambda: reader.check(user=user).allowed, PROPAGATION_S, "the reader follows again")
    finally:
        put_back()
        reader.close()


def test_token_file_reloads_on_change_and_sighup(admin):
    path = env("SLUICEGATE_TOKENS_FILE")
    original = read(path)
    token = "carol-" + uuid.uuid4().hex
    try:
        with open(path, "ab") as f:
            f.write(f"carol write {token}\n".encode())
        until(lambda: admin.call("GET", "/admin/v1/domains", token=token)[0] == 200, 3.0, "a token added is accepted")
        # Removed again, and SIGHUP: refused.
        with open(path, "wb") as f:
            f.write(original)
        os.kill(int(env("SLUICEGATE_PID_A")), signal.SIGHUP)
        until(lambda: admin.call("GET", "/admin/v1/domains", token=token)[0] == 401, 3.0, "a token removed is refused")
        # A file that does not parse keeps the tokens in force.
        with open(path, "wb") as f:
            f.write(b"carol sudo " + token.encode() + b"\n")
        os.kill(int(env("SLUICEGATE_PID_A")), signal.SIGHUP)
        time.sleep(1.5)
        assert admin.call("GET", "/admin/v1/domains", token="read")[0] == 200
        assert admin.call("GET", "/admin/v1/domains", token=token)[0] == 401
    finally:
        with open(path, "wb") as f:
            f.write(original)
