"""Sends RLS requests to a TLS gRPC listener for a while, to move the admin
page's counters: python drive.py ADDR CA DOMAIN USER SECONDS RATE."""

import sys
import time

import grpc
from envoy.extensions.common.ratelimit.v3 import ratelimit_pb2
from envoy.service.ratelimit.v3 import rls_pb2, rls_pb2_grpc


def main() -> None:
    addr, ca, domain, user, seconds, rate = sys.argv[1:7]
    with open(ca, "rb") as f:
        creds = grpc.ssl_channel_credentials(root_certificates=f.read())
    with grpc.secure_channel(addr, creds) as ch:
        rls = rls_pb2_grpc.RateLimitServiceStub(ch)
        d = ratelimit_pb2.RateLimitDescriptor(
            entries=[
                ratelimit_pb2.RateLimitDescriptor.Entry(key="user", value=user),
                ratelimit_pb2.RateLimitDescriptor.Entry(key="path", value="/api"),
            ]
        )
        req = rls_pb2.RateLimitRequest(domain=domain, descriptors=[d], hits_addend=1)
        end = time.monotonic() + float(seconds)
        while time.monotonic() < end:
            rls.ShouldRateLimit(req, timeout=5)
            time.sleep(1 / float(rate))


if __name__ == "__main__":
    main()
