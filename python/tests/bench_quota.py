"""The cost of a quota-mode decision in CPython: Quota.allow under a token
bucket that always admits, assigned by a scripted RLQS server in this
process (see test_quota.py). Prints nanoseconds per decision (the median of
5 runs), and how many RPCs and reports the decisions made: none, the
stream being opened before. Not a test: no figure is asserted.

    cd python/tests && PYTHONPATH=.. /usr/bin/python3 bench_quota.py [calls]
"""

import statistics
import sys
import time
import unittest

import grpc
import google.protobuf as protobuf

from ratelimitd import D
from ratelimitd.quota import Quota
from test_quota import FakeRLQS, action, assigned, entries_of, serve


def main(n: int) -> None:
    fake = FakeRLQS(lambda u: action(entries_of(u), max_tokens=2**31, per_fill=2**31, fill=0.001, ttl=3600))
    case = unittest.TestCase()
    case.addCleanup = lambda *a, **k: None  # the process ends with the benchmark
    ch = grpc.insecure_channel(serve(case, fake))
    q = Quota(ch, "edge", reporting_interval=3600)
    d = D("tenant", "acme0", "path", "/search")
    q.allow(d)
    deadline = time.monotonic() + 30
    while not assigned(q, d):
        if time.monotonic() > deadline:
            sys.exit("no assignment in 30 s")
        time.sleep(0.001)
    while not fake.reports.empty():
        fake.reports.get()
    streams = fake.streams

    def run(f):
        runs = []
        for _ in range(5):
            t = time.perf_counter_ns()
            f()
            runs.append((time.perf_counter_ns() - t) / n)
        return statistics.median(runs)

    def same():
        allow = q.allow
        for _ in range(n):
            if not allow(d):
                raise SystemExit("refused")

    def built():  # the descriptor made per call, as a request handler would
        allow = q.allow
        for i in range(n):
            if not allow(D("tenant", "acme0", "path", "/search")):
                raise SystemExit("refused")

    ns, ns_built = run(same), run(built)
    rpcs = fake.streams - streams
    reports = fake.reports.qsize()
    print(f"Python {sys.version.split()[0]}, protobuf {protobuf.__version__}, grpcio {grpc.__version__}: {n} decisions x 5")
    print(f"quota allow, one descriptor of two entries: {ns:.0f} ns/decision")
    print(f"quota allow, descriptor built per call (D(...)): {ns_built:.0f} ns/decision")
    print(f"RPCs opened during the decisions: {rpcs}; reports sent: {reports}")
    q.close()
    ch.close()


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 200_000)
