"""Measures how long a rule created through the admin API takes to be enforced
by a sluicegate-server (over gRPC) and by a Python Policy.from_store reader:
median and max over N changes. Starts the server itself (loopback, free ports,
a token file of its own) on the store given, and stops it by its pid.

    .venv/bin/python server/tests/admin/propagation.py \
        --server target/debug/sluicegate-server --store sqlite:/tmp/rules.db [--changes 100]

The time runs from just before the admin PUT to the first request denied by
the new rule (a `1/hour` rule keyed by a user of its own: the second request
is the first denied), polled every 2 ms on each reader."""

import argparse
import json
import os
import re
import secrets
import shutil
import signal
import statistics
import subprocess
import tempfile
import time
import urllib.request
import uuid

import grpc
from envoy.extensions.common.ratelimit.v3 import ratelimit_pb2
from envoy.service.ratelimit.v3 import rls_pb2, rls_pb2_grpc

import sluicegate


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--server", required=True)
    ap.add_argument("--store", required=True)
    ap.add_argument("--changes", type=int, default=100)
    args = ap.parse_args()
    work = tempfile.mkdtemp()
    token = secrets.token_hex(16)
    with open(os.path.join(work, "tokens"), "w") as f:
        f.write(f"measure write {token}\n")
    log = open(os.path.join(work, "server.log"), "w+")
    server = subprocess.Popen(
        [args.server, "--store", args.store, "--admin", "0", "--admin-tokens", os.path.join(work, "tokens"),
         "--grpc", "127.0.0.1:0", "--http", "127.0.0.1:0"],
        stderr=log,
    )
    try:
        line = ""
        for _ in range(100):
            log.seek(0)
            line = log.read()
            if " serving " in line or server.poll() is not None:
                break
            time.sleep(0.1)
        if " serving " not in line:
            raise SystemExit(f"the server did not start:\n{line}")
        grpc_addr = re.search(r"grpc=(\S+)", line).group(1)
        admin = "http://" + re.search(r"admin=(\S+)", line).group(1)
        domain = "propagation-" + uuid.uuid4().hex[:8]

        def put(name, body):
            req = urllib.request.Request(
                f"{admin}/admin/v1/domains/{domain}/rules/{name}", data=json.dumps(body).encode(), method="PUT",
                headers={"Authorization": "Bearer " + token, "Content-Type": "application/json"},
            )
            with urllib.request.urlopen(req, timeout=5) as r:
                assert r.status == 201, r.status

        channel = grpc.insecure_channel(grpc_addr)
        rls = rls_pb2_grpc.RateLimitServiceStub(channel)
        over = rls_pb2.RateLimitResponse.Code.OVER_LIMIT

        def denied_by_server(user):
            d = ratelimit_pb2.RateLimitDescriptor(entries=[ratelimit_pb2.RateLimitDescriptor.Entry(key="user", value=user)])
            req = rls_pb2.RateLimitRequest(domain=domain, descriptors=[d])
            return rls.ShouldRateLimit(req, timeout=5).overall_code == over

        put("base", {"limit": "1000000/second"})
        reader = sluicegate.Policy.from_store(args.store, domain=domain)
        time.sleep(1.5)  # the server serves the new domain
        server_ms, reader_ms = [], []
        for i in range(args.changes):
            user = f"u{i}"
            start = time.monotonic()
            put(f"r{i}", {"match": {"user": user}, "key": ["user"], "limit": "1/hour", "algorithm": "fixed_window"})
            s = r = None
            while s is None or r is None:
                if time.monotonic() - start > 5:
                    raise SystemExit(f"change {i} not in force within 5 s")
                if s is None and denied_by_server(user):
                    s = time.monotonic() - start
                if r is None and not reader.check(user=user).allowed:
                    r = time.monotonic() - start
                time.sleep(0.002)
            server_ms.append(s * 1000)
            reader_ms.append(r * 1000)
        reader.close()
        channel.close()
        for name, xs in (("sluicegate-server", server_ms), ("Python Policy.from_store", reader_ms)):
            print(f"{name}: median {statistics.median(xs):.0f} ms, max {max(xs):.0f} ms over {len(xs)} changes")
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(timeout=10)
        log.close()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
