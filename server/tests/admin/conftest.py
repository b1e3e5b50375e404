"""Fixtures for the admin API tests: the servers scripts/test-admin started.

The script passes (environment):
  SLUICEGATE_ADMIN_URL     https://127.0.0.1:PORT of server A's admin listener (TLS)
  SLUICEGATE_TLS_CA        the test CA (PEM) every listener's certificate chains to
  SLUICEGATE_GRPC_A        server A's gRPC address (TLS, no client certificate asked)
  SLUICEGATE_GRPC_MTLS     server B's gRPC address (TLS, client certificates required)
  SLUICEGATE_HTTP_A        server A's HTTP address (/healthz, /metrics; plain)
  SLUICEGATE_CLIENT_CERT, SLUICEGATE_CLIENT_KEY   a client certificate the CA signed
  SLUICEGATE_STORE         the store both servers serve (sqlite:PATH, or postgres://…)
  SLUICEGATE_STORE_CTL     for PostgreSQL: a command taking `stop` / `start`
  SLUICEGATE_TOKEN_WRITE, SLUICEGATE_TOKEN_READ    tokens from the token file
"""

import http.client
import json
import os
import ssl
import urllib.error
import urllib.parse
import urllib.request

import grpc
import pytest
from envoy.service.ratelimit.v3 import rls_pb2_grpc

DEADLINE_S = 5.0


def env(name: str) -> str:
    value = os.environ.get(name)
    if not value:
        pytest.fail(f"{name} is not set: run these tests through scripts/test-admin")
    return value


def read(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


class Admin:
    """A small client of the admin API over TLS, verifying the server."""

    def __init__(self) -> None:
        self.base = env("SLUICEGATE_ADMIN_URL")
        self.ctx = ssl.create_default_context(cafile=env("SLUICEGATE_TLS_CA"))
        self.write = env("SLUICEGATE_TOKEN_WRITE")
        self.read = env("SLUICEGATE_TOKEN_READ")

    def call(self, method, path, body=None, token="write", if_match=None, headers=None, raw=None):
        """(status, headers, JSON body or None). token: "write", "read", None, or a literal."""
        h = dict(headers or {})
        if token == "write":
            h["Authorization"] = f"Bearer {self.write}"
        elif token == "read":
            h["Authorization"] = f"Bearer {self.read}"
        elif token is not None:
            h["Authorization"] = f"Bearer {token}"
        data = raw
        if body is not None:
            data = json.dumps(body).encode()
            h.setdefault("Content-Type", "application/json")
        if if_match is not None:
            h["If-Match"] = f'"{if_match}"'
        req = urllib.request.Request(self.base + path, data=data, method=method, headers=h)
        try:
            with urllib.request.urlopen(req, timeout=DEADLINE_S, context=self.ctx) as resp:
                text = resp.read()
                return resp.status, resp.headers, (json.loads(text) if text else None)
        except urllib.error.HTTPError as e:
            text = e.read()
            return e.code, e.headers, (json.loads(text) if text else None)

    def declare_only(self, method, path, length):
        """(status, JSON body): a request that declares a `length`-byte body
        and sends none, as a client is refused a large body before sending it.
        (Sending one races the server's early 413: the connection closes while
        the client still writes, and the client sees a TLS EOF, not the 413.)"""
        url = urllib.parse.urlsplit(self.base)
        conn = http.client.HTTPSConnection(url.hostname, url.port, timeout=DEADLINE_S, context=self.ctx)
        try:
            conn.putrequest(method, path)
            conn.putheader("Authorization", f"Bearer {self.write}")
            conn.putheader("Content-Type", "application/json")
            conn.putheader("Content-Length", str(length))
            conn.endheaders()
            resp = conn.getresponse()
            text = resp.read()
            return resp.status, (json.loads(text) if text else None)
        finally:
            conn.close()

    def audit_len(self) -> int:
        """Entries in the whole audit trail."""
        n, after = 0, None
        while True:
            q = "/admin/v1/audit?limit=1000" + (f"&after={after}" if after else "")
            status, _, body = self.call("GET", q, token="read")
            assert status == 200, body
            n += len(body["entries"])
            after = body["next"]
            if after is None:
                return n


@pytest.fixture(scope="session")
def admin() -> Admin:
    return Admin()


@pytest.fixture(scope="session")
def rls():
    creds = grpc.ssl_channel_credentials(root_certificates=read(env("SLUICEGATE_TLS_CA")))
    ch = grpc.secure_channel(env("SLUICEGATE_GRPC_A"), creds)
    grpc.channel_ready_future(ch).result(timeout=DEADLINE_S)
    yield rls_pb2_grpc.RateLimitServiceStub(ch)
    ch.close()
