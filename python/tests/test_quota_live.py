"""Quota mode against live ratelimitd replicas sharing one Redis: the
Python counterpart of the Go daemon's TestRLQSReplicasShareLimit, shorter.
It runs when RATELIMITD_BIN names the daemon and redis-server is on the
PATH (or REDIS_SERVER names it), and skips otherwise."""

import os
import shutil
import subprocess
import tempfile
import threading
import time
import unittest

import grpc

from ratelimitd import D
from ratelimitd.quota import Quota
from test_live import Daemon

# Tenant acme may make 200 requests a second, a burst of 40 (a token
# bucket: RLQS assigns each client its share of the burst).
RULES = """domain: quota
descriptors:
  - key: tenant
    rate_limit: {algorithm: token_bucket, unit: second, requests_per_unit: 200, burst: 40}
"""
LIMIT, BURST = 200, 40
CLIENTS, PER_SEC = 8, 100  # 4 times the limit in all
PERIOD = 10.0  # seconds of traffic counted
WARMUP = 1.0  # seconds of traffic before: the first reports and assignments (two intervals)
SYNC, INTERVAL = "250ms", 0.5


class Redis:
    """redis-server on a Unix socket of a temporary directory (no port to
    race for), without persistence."""

    def __init__(self, binary):
        self.dir = tempfile.mkdtemp(prefix="ratelimitd-pytest-redis-")
        self.sock = os.path.join(self.dir, "redis.sock")
        self.proc = subprocess.Popen([binary, "--port", "0", "--unixsocket", self.sock, "--save", "",
                                      "--appendonly", "no", "--dir", self.dir],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
        for _ in range(300):
            if os.path.exists(self.sock):
                return
            if self.proc.poll() is not None:
                break
            time.sleep(0.02)
        self.stop()
        raise RuntimeError("redis-server did not start")

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(10)
        shutil.rmtree(self.dir, ignore_errors=True)


class ReplicasTest(unittest.TestCase):
    def setUp(self):
        binary = os.environ.get("RATELIMITD_BIN")
        if not binary:
            self.skipTest("RATELIMITD_BIN is not set: no live ratelimitd to test against")
        redis = os.environ.get("REDIS_SERVER") or shutil.which("redis-server")
        if not redis:
            self.skipTest("no redis-server")
        self.redis = Redis(redis)
        self.addCleanup(self.redis.stop)
        rules = tempfile.mkdtemp(prefix="ratelimitd-pytest-rules-")
        self.addCleanup(shutil.rmtree, rules, True)
        with open(os.path.join(rules, "quota.yaml"), "w") as f:
            f.write(RULES)
        self.replicas = []
        for _ in range(3):
            d = Daemon(binary, rules, "--backend", "unix://" + self.redis.sock, "--rlqs-sync-interval", SYNC,
                       "--failure-mode", "deny")
            self.addCleanup(d.stop)
            self.replicas.append(d)

    def test_replicas_share_limit(self):
        # 8 Python clients in quota mode over 3 ratelimitd processes sharing
        # one Redis, each asking 100 times a second under a limit of 200 (4
        # times the limit in all): they admit, in all, the limit over the
        # period within -5% and +1%, plus at most one burst per client (a
        # client's token bucket starts full), the Go test's bounds.
        quotas = []
        for i in range(CLIENTS):
            ch = grpc.insecure_channel(self.replicas[i % 3].addr)
            self.addCleanup(ch.close)
            q = Quota(ch, "quota", reporting_interval=INTERVAL, fail_closed=True)
            self.addCleanup(q.close)
            quotas.append(q)
        admitted = [0] * CLIENTS
        refused = [0] * CLIENTS
        d = D("tenant", "acme")
        stop = threading.Event()

        def drive(i):
            # PER_SEC calls a second, paced as Go's ticker: late ticks are
            # dropped, not made up.
            q, step = quotas[i], 1 / PER_SEC
            nxt = time.monotonic()
            while not stop.is_set():
                nxt += step
                left = nxt - time.monotonic()
                if left > 0:
                    time.sleep(left)
                else:
                    nxt = time.monotonic()
                if q.allow(d):
                    admitted[i] += 1
                else:
                    refused[i] += 1

        threads = [threading.Thread(target=drive, args=(i,)) for i in range(CLIENTS)]
        for t in threads:
            t.start()
        # Counted from the end of a warm-up, as the Go test counts a long
        # period: until the first assignments arrive, a client that fails
        # closed admits nothing, a loss the bounds leave no room for.
        time.sleep(WARMUP)
        start, base = time.monotonic(), sum(admitted)
        time.sleep(PERIOD)
        stop.set()
        for t in threads:
            t.join()
        elapsed = time.monotonic() - start
        total = sum(admitted) - base
        want = LIMIT * elapsed
        lo, hi = 0.95 * want, 1.01 * want + CLIENTS * BURST
        print(f"\nquota live: {total} admitted, {sum(refused)} refused in {elapsed:.2f} s: "
              f"{total / want:.3f} of the limit's {want:.0f} (bounds {lo:.0f} to {hi:.0f}); per client "
              f"{admitted}")
        self.assertGreater(sum(refused), 0, "nothing refused at 4 times the limit")
        self.assertTrue(lo <= total <= hi, f"admitted {total} over {elapsed:.2f} s, want {lo:.0f} to {hi:.0f}")
        self.assertEqual(sum(q.fail_opens for q in quotas), 0)


if __name__ == "__main__":
    unittest.main()
