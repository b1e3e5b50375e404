"""Fixtures: a channel to the sluicegate-server that scripts/test-server started.

The script passes the server's addresses and its config directory in
SLUICEGATE_SERVER_GRPC, SLUICEGATE_SERVER_HTTP and SLUICEGATE_SERVER_CONFIG."""

import os
import urllib.request

import grpc
import pytest
from envoy.service.ratelimit.v3 import rls_pb2_grpc

DEADLINE_S = 5.0


def _env(name: str) -> str:
    value = os.environ.get(name)
    if not value:
        pytest.fail(f"{name} is not set: run these tests through scripts/test-server")
    return value


@pytest.fixture(scope="session")
def channel():
    ch = grpc.insecure_channel(_env("SLUICEGATE_SERVER_GRPC"))
    grpc.channel_ready_future(ch).result(timeout=DEADLINE_S)
    yield ch
    ch.close()


@pytest.fixture(scope="session")
def rls(channel):
    return rls_pb2_grpc.RateLimitServiceStub(channel)


@pytest.fixture(scope="session")
def config_dir() -> str:
    return _env("SLUICEGATE_SERVER_CONFIG")


@pytest.fixture(scope="session")
def metrics():
    url = f"http://{_env('SLUICEGATE_SERVER_HTTP')}/metrics"

    def fetch() -> str:
        with urllib.request.urlopen(url, timeout=DEADLINE_S) as resp:
            assert resp.status == 200
            assert resp.headers["content-type"].startswith("text/plain")
            return resp.read().decode()

    return fetch
