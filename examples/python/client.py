#!/usr/bin/python3
"""Asks a live ratelimitd, from Python, through both of its gRPC APIs.

It calls ratelimit.v1.RateLimitService/ShouldRateLimit (the native API) and
envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit (Envoy's) three
times each for a fresh user of the domain "polyglot" (rules.yaml: 2 a
minute), and checks the answers: OK, OK, then OVER_LIMIT. It exits 1 on any
mismatch.

The stubs are generated at run time, into a temporary directory, by protoc
and grpc_python_plugin from a FileDescriptorSet written by
`go run ./internal/cmd/rlsdescriptors -o FILE` (Envoy's Go module ships no
.proto files). Run it with Debian's python3-grpcio and python3-protobuf and
Debian's protoc (protobuf-compiler, protobuf-compiler-grpc): stubs from a
newer protoc do not load on that runtime.

    /usr/bin/python3 client.py --descriptors rls.binpb 127.0.0.1:8081

The address may also come from RATELIMITD_ADDR, the set from
RLS_DESCRIPTORS.
"""

import argparse
import importlib
import os
import shutil
import subprocess
import sys
import tempfile
import time

from google.protobuf import descriptor_pb2

NATIVE = "ratelimit/v1/ratelimit.proto"
ENVOY = "envoy/service/ratelimit/v3/rls.proto"
DOMAIN = "polyglot"
LIMIT = 2


def generate(descriptors, out):
    """Generates Python modules for every file of the set (but the
    well-known types, which the runtime has) and gRPC stubs for the two
    services into out."""
    fds = descriptor_pb2.FileDescriptorSet()
    with open(descriptors, "rb") as f:
        fds.ParseFromString(f.read())
    names = [f.name for f in fds.file if not f.name.startswith("google/protobuf/")]
    for want in (NATIVE, ENVOY):
        if want not in names:
            raise SystemExit(f"client.py: {descriptors} has no {want}")
    protoc = os.environ.get("PROTOC", "/usr/bin/protoc")
    plugin = os.environ.get("GRPC_PYTHON_PLUGIN", "/usr/bin/grpc_python_plugin")
    subprocess.run([protoc, "--descriptor_set_in=" + descriptors, "--python_out=" + out, *names], check=True)
    subprocess.run([protoc, "--descriptor_set_in=" + descriptors, "--grpc_python_out=" + out,
                    "--plugin=protoc-gen-grpc_python=" + plugin, NATIVE, ENVOY], check=True)


def module(proto, suffix):
    return importlib.import_module(proto[: -len(".proto")].replace("/", ".") + suffix)


class Checker:
    def __init__(self):
        self.failures = 0

    def check(self, what, got, want):
        if got != want:
            print(f"FAIL {what}: got {got!r}, want {want!r}", file=sys.stderr)
            self.failures += 1
        else:
            print(f"ok   {what}: {got!r}")


def native(channel, user, c):
    pb = module(NATIVE, "_pb2")
    stub = module(NATIVE, "_pb2_grpc").RateLimitServiceStub(channel)
    req = pb.ShouldRateLimitRequest(
        domain=DOMAIN,
        descriptors=[pb.Descriptor(entries=[pb.Entry(key="user", value=user)])],
    )
    for i in range(LIMIT + 1):
        resp = stub.ShouldRateLimit(req, timeout=5)
        what = f"native call {i + 1}"
        if i < LIMIT:
            c.check(what + " code", pb.Code.Name(resp.code), "CODE_OK")
            c.check(what + " remaining", resp.statuses[0].remaining if resp.statuses else None, LIMIT - 1 - i)
        else:
            c.check(what + " code", pb.Code.Name(resp.code), "CODE_OVER_LIMIT")
            st = resp.statuses[0] if resp.statuses else pb.DescriptorStatus()
            c.check(what + " status code", pb.Code.Name(st.code), "CODE_OVER_LIMIT")
            c.check(what + " limit", (st.limit.requests, st.limit.window.ToSeconds()), (LIMIT, 60))
            c.check(what + " retry_after > 0", st.retry_after.ToNanoseconds() > 0, True)
            c.check(what + " Retry-After header", any(h.name.lower() == "retry-after" for h in resp.headers), True)


def envoy(channel, user, c):
    pb = module(ENVOY, "_pb2")
    stub = module(ENVOY, "_pb2_grpc").RateLimitServiceStub(channel)
    common = importlib.import_module("envoy.extensions.common.ratelimit.v3.ratelimit_pb2")
    req = pb.RateLimitRequest(
        domain=DOMAIN,
        descriptors=[common.RateLimitDescriptor(entries=[common.RateLimitDescriptor.Entry(key="user", value=user)])],
    )
    Code = pb.RateLimitResponse.Code
    for i in range(LIMIT + 1):
        resp = stub.ShouldRateLimit(req, timeout=5)
        what = f"envoy call {i + 1}"
        want = "OK" if i < LIMIT else "OVER_LIMIT"
        c.check(what + " overall_code", Code.Name(resp.overall_code), want)
        st = resp.statuses[0] if resp.statuses else pb.RateLimitResponse.DescriptorStatus()
        c.check(what + " status code", Code.Name(st.code), want)
        c.check(what + " current_limit", (st.current_limit.requests_per_unit,
                                           pb.RateLimitResponse.RateLimit.Unit.Name(st.current_limit.unit)), (LIMIT, "MINUTE"))
        if i < LIMIT:
            c.check(what + " limit_remaining", st.limit_remaining, LIMIT - 1 - i)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("addr", nargs="?", default=os.environ.get("RATELIMITD_ADDR", "127.0.0.1:8081"),
                    help="ratelimitd's gRPC address (default $RATELIMITD_ADDR or 127.0.0.1:8081)")
    ap.add_argument("--descriptors", default=os.environ.get("RLS_DESCRIPTORS"),
                    help="FileDescriptorSet from go run ./internal/cmd/rlsdescriptors (default $RLS_DESCRIPTORS)")
    args = ap.parse_args()
    if not args.descriptors:
        ap.error("no descriptor set: give --descriptors or RLS_DESCRIPTORS")

    import grpc  # after argument errors, so that --help works without grpcio

    out = tempfile.mkdtemp(prefix="ratelimitd-py-")
    try:
        generate(args.descriptors, out)
        sys.path.insert(0, out)
        c = Checker()
        run = f"{os.getpid()}-{time.time_ns()}"
        with grpc.insecure_channel(args.addr) as channel:
            try:
                grpc.channel_ready_future(channel).result(timeout=10)
            except grpc.FutureTimeoutError:
                print(f"python: no connection to {args.addr} within 10s", file=sys.stderr)
                return 1
            try:
                native(channel, f"py-native-{run}", c)
                envoy(channel, f"py-envoy-{run}", c)
            except grpc.RpcError as e:
                print(f"python: {e.code().name}: {e.details()}", file=sys.stderr)
                return 1
    finally:
        shutil.rmtree(out, ignore_errors=True)
    if c.failures:
        print(f"python: {c.failures} check(s) failed", file=sys.stderr)
        return 1
    print(f"python: both APIs answered as expected (grpcio {grpc.__version__})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
