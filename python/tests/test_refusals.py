"""The clients' memory of refusals: refused requests are refused again
locally for min(retry-after, the cap), with durations and headers counted
down, on a fake clock."""

import asyncio
import unittest

import grpc

import ratelimitd
from ratelimitd import D, LimitOverride
from ratelimitd._refusals import count_down_t, local_headers

from scripted import Server, ok, over, status


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


class LocalHeadersTest(unittest.TestCase):
    """The Go client's cases."""

    IETF = (("RateLimit-Policy", '"a";q=2;w=60, "b";q=10;w=60, "c";q=5;w=3600'),
            ("RateLimit", '"a";r=0;t=60, "b";r=3;t=10, "c";r=4;t=3600'),
            ("Retry-After", "60"))
    LEGACY = (("RateLimit-Limit", "2"), ("RateLimit-Remaining", "0"), ("RateLimit-Reset", "60"))

    def test_local_headers(self):
        cases = [
            ("none", (), 20, 40, ()),
            ("ietf, at once", self.IETF, 0, 60, self.IETF),
            ("ietf, under a second", self.IETF, 0.999, 60 - 0.999, self.IETF),
            ("ietf, +20.3s", self.IETF, 20.3, 40 - 0.3, (
                ("RateLimit-Policy", '"a";q=2;w=60, "b";q=10;w=60, "c";q=5;w=3600'),
                ("RateLimit", '"a";r=0;t=40, "b";r=3;t=0, "c";r=4;t=3580'),
                ("Retry-After", "40"))),
            ("Retry-After at least 1", self.IETF, 59.9, 0.1, (
                ("RateLimit-Policy", '"a";q=2;w=60, "b";q=10;w=60, "c";q=5;w=3600'),
                ("RateLimit", '"a";r=0;t=1, "b";r=3;t=0, "c";r=4;t=3541'),
                ("Retry-After", "1"))),
            ("names in any case", (("ratelimit", '"a";r=0;t=60'), ("retry-after", "60")), 30, 30,
             (("ratelimit", '"a";r=0;t=30'), ("retry-after", "30"))),
            ("items without t", (("RateLimit", '"a";r=0, "b";r=1;t=30, "c", "d";t=5;r=2'),), 10, 0,
             (("RateLimit", '"a";r=0, "b";r=1;t=20, "c", "d";t=0;r=2'),)),
            ("legacy", self.LEGACY, 45, 15,
             (("RateLimit-Limit", "2"), ("RateLimit-Remaining", "0"), ("RateLimit-Reset", "15"))),
            ("Retry-After as a date", (("Retry-After", "Wed, 21 Oct 2015 07:28:00 GMT"),), 10, 10,
             (("Retry-After", "Wed, 21 Oct 2015 07:28:00 GMT"),)),
            ("other headers", (("X-Reset", "60"), ("RateLimit-Policy", '"a";q=2;w=60;t=60')), 10, 10,
             (("X-Reset", "60"), ("RateLimit-Policy", '"a";q=2;w=60;t=60'))),
        ]
        for name, hs, elapsed, retry, want in cases:
            with self.subTest(name):
                self.assertEqual(local_headers(hs, elapsed, retry), want)

    def test_count_down_t(self):
        cases = [
            ('"a";r=0;t=45', 5, '"a";r=0;t=40'),
            ('"a";r=0;t=45', 45, '"a";r=0;t=0'),
            ('"a";r=0;t=45', 100, '"a";r=0;t=0'),
            ('"a";r=0;t=45', 0, '"a";r=0;t=45'),
            ('"a";r=0;t=0', 10, '"a";r=0;t=0'),
            ('"a";r=0;t=100, "b";r=5, "c";t=7;r=1, "d"', 10, '"a";r=0;t=90, "b";r=5, "c";t=0;r=1, "d"'),
            ('"a";t=1000000000000000', 1, '"a";t=1000000000000000'),  # 16 digits: not an Integer
            ('"a";t=999999999999999', 1, '"a";t=999999999999998'),
            ('"a";t=050', 20, '"a";t=30'),
            ('"a"; t=50', 20, '"a"; t=30'),
            ('"a";t=50,"b";t=60', 20, '"a";t=30,"b";t=40'),
            ('"a";tt=50;at=50;t', 20, '"a";tt=50;at=50;t'),
            ('"a";t=-5;u=1', 20, '"a";t=-5;u=1'),
            ('"a";t=4.5', 20, '"a";t=4.5'),
            ('"a";t=?1', 20, '"a";t=?1'),
            ('"a";t="50"', 20, '"a";t="50"'),
            ('"a";t=t50', 20, '"a";t=t50'),
            ('"x;t=50";t=50', 20, '"x;t=50";t=30'),
            ('"x\\";t=50\\\\";t=50, "y\\\\";t=9', 5, '"x\\";t=50\\\\";t=45, "y\\\\";t=4'),
            ('"a";s="b;t=50";t=50', 20, '"a";s="b;t=50";t=30'),
            ('a/b:c;t=50', 20, 'a/b:c;t=30'),
            (':dDs1MA==:;t=50', 20, ':dDs1MA==:;t=30'),
            ('%"t;t=%22";t=50', 20, '%"t;t=%22";t=30'),
            ('("a";t=50 "b";t=60);t=70, "c";t=80', 20, '("a";t=50 "b";t=60);t=50, "c";t=60'),
        ]
        for v, secs, want in cases:
            with self.subTest(v=v, secs=secs):
                self.assertEqual(count_down_t(v, secs), want)


REFUSED_60 = over(
    status(over_limit=True, name="daily", requests=2, window=86400, reset=(60, 0), retry=(60, 0)),
    headers=[("RateLimit-Policy", '"daily";q=2;w=86400'), ("RateLimit", '"daily";r=0;t=60'),
             ("Retry-After", "60")])


class RefusalMemoryTest(unittest.TestCase):
    def setUp(self):
        self.server = Server().__enter__()
        self.addCleanup(self.server.__exit__)
        self.channel = grpc.insecure_channel(self.server.addr)
        self.addCleanup(self.channel.close)
        self.clock = Clock()
        self.seen = []
        self.client = ratelimitd.Client(self.channel, timeout=30, clock=self.clock,
                                        on_decision=lambda _, __, d: self.seen.append(d.local))

    def test_refusal_repeated_locally_until_the_cap(self):
        self.server.answer(REFUSED_60)
        d = self.client.should_rate_limit("api", D("api_key", "k1"))
        self.assertFalse(d.allowed or d.local)

        self.clock.now += 0.999
        d = self.client.should_rate_limit("api", D("api_key", "k1"))
        self.assertTrue(d.local)
        self.assertFalse(d.allowed)
        self.assertAlmostEqual(d.retry_after, 59.001)
        self.assertAlmostEqual(d.statuses[0].reset_after, 59.001)
        self.assertEqual(d.statuses[0].limit.name, "daily")
        self.assertEqual(d.headers, (("RateLimit-Policy", '"daily";q=2;w=86400'), ("RateLimit", '"daily";r=0;t=60'),
                                     ("Retry-After", "60")))
        self.assertEqual(len(self.server.requests), 1)
        self.assertEqual(self.client.local_refusals, 1)
        self.assertEqual(self.seen, [False, True])  # the hook sees local decisions too

        # Other requests are asked: another value, hits, override, domain, order.
        others = [("api", [D("api_key", "k2")]), ("api", [D("api_key", "k1", hits=2)]),
                  ("api", [D("api_key", "k1", check_only=True)]),
                  ("api", [D("api_key", "k1", limit=LimitOverride(5, 1))]),
                  ("other", [D("api_key", "k1")]), ("api", [D("x", "y"), D("api_key", "k1")])]
        for domain, ds in others:
            self.server.answer(ok())
            self.assertFalse(self.client.should_rate_limit(domain, *ds).local, (domain, ds))
        self.assertEqual(len(self.server.requests), 1 + len(others))

        # After the cap (1 s), ratelimitd is asked again.
        self.clock.now += 0.001
        self.server.answer(ok())
        d = self.client.should_rate_limit("api", D("api_key", "k1"))
        self.assertTrue(d.allowed)
        self.assertFalse(d.local)

    def test_shorter_retry_after_than_the_cap(self):
        self.server.answer(over(status(over_limit=True, name="n", requests=1, window=1, retry=(0, 400_000_000))),
                           ok())
        self.client.should_rate_limit("api", D("user", "u"))
        self.clock.now += 0.399
        self.assertTrue(self.client.should_rate_limit("api", D("user", "u")).local)
        self.clock.now += 0.001
        self.assertTrue(self.client.should_rate_limit("api", D("user", "u")).allowed)
        self.assertEqual(len(self.server.requests), 2)

    def test_headers_count_down(self):
        self.server.answer(REFUSED_60)
        self.client = ratelimitd.Client(self.channel, timeout=30, clock=self.clock, refusal_cache=100)
        self.client.should_rate_limit("api", D("api_key", "k1"))
        self.clock.now += 20.3
        d = self.client.should_rate_limit("api", D("api_key", "k1"))
        self.assertTrue(d.local)
        self.assertEqual(dict(d.headers)["RateLimit"], '"daily";r=0;t=40')
        self.assertEqual(dict(d.headers)["Retry-After"], "40")

    def test_not_remembered(self):
        # Failures, refusals without a retry-after, and a memory turned off.
        self.server.answer((grpc.StatusCode.UNAVAILABLE, "down"), (grpc.StatusCode.UNAVAILABLE, "down"))
        closed = ratelimitd.Client(self.channel, timeout=30, clock=self.clock, fail_closed=True)
        for _ in range(2):
            self.assertFalse(closed.should_rate_limit("api", D("k", "v")).local)
        self.server.answer(over(), over())
        for _ in range(2):
            self.assertFalse(self.client.should_rate_limit("api", D("k", "v")).local)
        off = ratelimitd.Client(self.channel, timeout=30, clock=self.clock, refusal_cache=0)
        self.server.answer(REFUSED_60, REFUSED_60)
        for _ in range(2):
            self.assertFalse(off.should_rate_limit("api", D("k", "v")).local)
        self.assertEqual(len(self.server.requests), 6)
        self.assertEqual(self.client.local_refusals + closed.local_refusals + off.local_refusals, 0)

    def test_size_bound(self):
        client = ratelimitd.Client(self.channel, timeout=30, clock=self.clock, refusal_cache_size=2)
        for k in ("a", "b", "c"):
            self.server.answer(REFUSED_60)
            client.should_rate_limit("api", D("k", k))
        self.assertEqual(len(client._refusals), 2)
        # The oldest went when full: none had expired.
        for k in ("c", "b"):
            self.assertTrue(client.should_rate_limit("api", D("k", k)).local, k)
        self.server.answer(REFUSED_60)
        self.assertFalse(client.should_rate_limit("api", D("k", "a")).local)
        self.assertEqual(len(self.server.requests), 4)
        # Expired ones go first.
        self.clock.now += 1
        self.server.answer(REFUSED_60)
        client.should_rate_limit("api", D("k", "d"))
        self.assertEqual(len(client._refusals), 1)

    def test_long_values_are_remembered_by_digest(self):
        self.server.answer(REFUSED_60)
        self.client.should_rate_limit("api", D("k", "v" * 5000))
        self.assertTrue(self.client.should_rate_limit("api", D("k", "v" * 5000)).local)
        self.server.answer(ok())
        self.assertFalse(self.client.should_rate_limit("api", D("k", "v" * 4999 + "w")).local)

    def test_async(self):
        self.server.answer(REFUSED_60)

        async def main():
            async with grpc.aio.insecure_channel(self.server.addr) as ch:
                c = ratelimitd.AsyncClient(ch, timeout=30, clock=self.clock)
                ds = [await c.should_rate_limit("api", D("k", "v")) for _ in range(2)]
                return c, ds
        c, (d1, d2) = asyncio.run(main())
        self.assertEqual((d1.local, d2.local, d2.allowed), (False, True, False))
        self.assertEqual(c.local_refusals, 1)


if __name__ == "__main__":
    unittest.main()
