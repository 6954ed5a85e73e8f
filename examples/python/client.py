#!/usr/bin/python3
"""Asks ratelimitd whether an API key may make one request, and prints the
decision. Start ratelimitd with `make run` (examples/config.yaml, gRPC on
127.0.0.1:8081), install the package (python/README.md), then:

    python3 examples/python/client.py [ADDRESS] [API_KEY]
"""
import sys

import grpc

import ratelimitd

addr = sys.argv[1] if len(sys.argv) > 1 else "127.0.0.1:8081"
key = sys.argv[2] if len(sys.argv) > 2 else "demo-key"

with grpc.insecure_channel(addr) as channel:
    # Connects now; a call waits up to 1 s for the connection, then has
    # 50 ms; it fails open.
    rl = ratelimitd.Client(channel)
    d = rl.should_rate_limit("edge", ratelimitd.D("api_key", key))
    if d.error is not None:
        # ratelimitd could not be asked (down, or too slow): the failure
        # policy decided, and there are no statuses nor headers.
        verdict = "allowed" if d.allowed else "refused"
        print(f"ratelimitd failed ({d.error.code().name}): {verdict} by the failure policy")
        sys.exit(0)
    print("allowed" if d.allowed else f"refused: retry in {d.retry_after:.3f} s")
    for s in d.statuses:
        if s.limit:
            print(f"  limit {s.limit.name} ({s.limit.requests} per {s.limit.window:g} s): {s.remaining} remaining")
    for name, value in d.headers:
        print(f"  {name}: {value}")
