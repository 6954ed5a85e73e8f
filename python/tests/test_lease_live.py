"""acquire, renew, release and give_back against a live ratelimitd (its
own, started with the concurrency rules below). They run when
RATELIMITD_BIN names the daemon, and skip otherwise."""

import asyncio
import os
import shutil
import tempfile
import time
import unittest

import grpc

import ratelimitd
from ratelimitd import D, LeaseLost

from test_live import Daemon, fresh_user

DOMAIN = "pyjobs"
RULES = """
domain: pyjobs
descriptors:
  - key: job
    rate_limit: {name: jobs, algorithm: concurrency, window: 1m, requests_per_unit: 2}
  - key: tokens
    rate_limit: {name: tokens, algorithm: sliding_log, unit: minute, requests_per_unit: 10}
"""

daemon = None


def setUpModule():
    global daemon
    binary = os.environ.get("RATELIMITD_BIN")
    if not binary:
        raise unittest.SkipTest("RATELIMITD_BIN is not set: no live ratelimitd to test against")
    rules = tempfile.mkdtemp(prefix="ratelimitd-pytest-lease-rules-")
    try:
        with open(os.path.join(rules, "pyjobs.yaml"), "w") as f:
            f.write(RULES)
        daemon = Daemon(binary, rules)
    finally:
        shutil.rmtree(rules, ignore_errors=True)


def tearDownModule():
    if daemon is not None:
        daemon.stop()


class LeaseLiveTest(unittest.TestCase):
    def setUp(self):
        self.channel = grpc.insecure_channel(daemon.addr)
        self.addCleanup(self.channel.close)
        grpc.channel_ready_future(self.channel).result(timeout=10)
        self.rl = ratelimitd.Client(self.channel, timeout=5, fail_closed=True)

    def test_slots(self):
        job = D("job", fresh_user("slots"))
        with self.rl.acquire(DOMAIN, job) as first:
            self.assertTrue(first.allowed, first.decision)
            self.assertIsNone(first.decision.error)
            self.assertGreater(first.expires_at, time.time() + 30)
            with self.rl.acquire(DOMAIN, job) as second:
                self.assertTrue(second.allowed)
                with self.rl.acquire(DOMAIN, job) as third:
                    self.assertFalse(third.allowed)
                    st = third.decision.statuses[0]
                    self.assertEqual((st.limit.name, st.limit.algorithm, st.limit.requests),
                                     ("jobs", ratelimitd.Algorithm.CONCURRENCY, 2))
                before = second.expires_at
                second.renew()
                self.assertGreaterEqual(second.expires_at, before)
            # second's slot is free again, first's is held
            with self.rl.acquire(DOMAIN, job) as again:
                self.assertTrue(again.allowed)
                with self.rl.acquire(DOMAIN, job) as none:
                    self.assertFalse(none.allowed)
        with self.assertRaises(LeaseLost):
            first.renew()
        for _ in range(2):
            held = self.rl.acquire(DOMAIN, job)
            self.assertTrue(held.allowed)  # both freed; these two leak until they expire

    def test_async(self):
        job = D("job", fresh_user("async"))

        async def main():
            async with grpc.aio.insecure_channel(daemon.addr) as ch:
                rl = ratelimitd.AsyncClient(ch, timeout=5, fail_closed=True)
                for _ in range(3):  # each releases on exit: the slot is free again
                    async with rl.acquire(DOMAIN, job) as held:
                        self.assertTrue(held.allowed, held.decision)
                        await held.renew()
        asyncio.run(main())

    def test_give_back(self):
        user = fresh_user("tokens")
        d = self.rl.should_rate_limit(DOMAIN, D("tokens", user, hits=10))
        self.assertTrue(d.allowed)
        self.assertFalse(self.rl.should_rate_limit(DOMAIN, D("tokens", user)).allowed)
        d = self.rl.should_rate_limit(DOMAIN, D("tokens", user, hits=4, give_back=True))
        self.assertEqual(d.statuses[0].remaining, 4)
        self.assertTrue(self.rl.should_rate_limit(DOMAIN, D("tokens", user, hits=4)).allowed)
        self.assertFalse(self.rl.should_rate_limit(DOMAIN, D("tokens", user)).allowed)


if __name__ == "__main__":
    unittest.main()
