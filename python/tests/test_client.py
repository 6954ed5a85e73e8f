"""Client and AsyncClient against an in-process server with scripted
answers, over real gRPC on loopback."""

import asyncio
import hashlib
import logging
import socket
import unittest

import grpc

import ratelimitd
from ratelimitd import D, Descriptor, InvalidRequest, LimitOverride
from ratelimitd.v1 import ratelimit_pb2 as pb

from scripted import Block, Server, ok, over, status, wait_state


class ClientTest(unittest.TestCase):
    def setUp(self):
        self.server = Server().__enter__()
        self.addCleanup(self.server.__exit__)
        self.channel = grpc.insecure_channel(self.server.addr)
        self.addCleanup(self.channel.close)
        # A generous budget: the tests that need it to end say so.
        self.client = ratelimitd.Client(self.channel, timeout=30)
        self.addCleanup(wait_state, self.channel, grpc.ChannelConnectivity.READY)  # before closing

    def test_allowed(self):
        self.server.answer(ok(
            status(name="burst", requests=10, window=1, remaining=7, reset=(0, 300_000_000),
                   algorithm=pb.ALGORITHM_TOKEN_BUCKET, burst=20),
            status(unlimited=True, remaining=4294967295, limit=False),
            headers=[("RateLimit-Policy", '"burst";q=10;w=1'), ("RateLimit", '"burst";r=7;t=1')]))
        d = self.client.should_rate_limit("edge", D("api_key", "k"), D("path", "/healthz"))
        self.assertTrue(d.allowed)
        self.assertIsNone(d.error)
        self.assertEqual(d.retry_after, 0)
        self.assertEqual(d.statuses, (
            ratelimitd.Status(over_limit=False, limit=ratelimitd.Limit(
                name="burst", requests=10, window=1.0, algorithm=ratelimitd.Algorithm.TOKEN_BUCKET, burst=20),
                remaining=7, reset_after=0.3, retry_after=0.0),
            ratelimitd.Status(unlimited=True, remaining=4294967295),
        ))
        self.assertEqual(d.headers, (("RateLimit-Policy", '"burst";q=10;w=1'), ("RateLimit", '"burst";r=7;t=1')))
        req = self.server.requests[0]
        self.assertEqual(req.domain, "edge")
        self.assertEqual([[(e.key, e.value) for e in x.entries] for x in req.descriptors],
                         [[("api_key", "k")], [("path", "/healthz")]])
        self.assertFalse(req.descriptors[0].HasField("hits"))

    def test_refused_retry_after_is_the_longest_over_limit(self):
        self.server.answer(over(
            status(over_limit=True, name="a", requests=1, window=60, retry=(3, 0)),
            status(over_limit=True, name="b", requests=1, window=60, retry=(7, 500_000_000)),
            status(over_limit=False, name="c", requests=5, window=60, remaining=4, retry=(99, 0)),
        ))
        d = self.client.should_rate_limit("edge", D("a", "1"), D("b", "2"), D("c", "3"))
        self.assertFalse(d.allowed)
        self.assertIsNone(d.error)
        self.assertEqual(d.retry_after, 7.5)
        self.assertEqual([s.over_limit for s in d.statuses], [True, True, False])

    def test_request_encoding(self):
        self.server.answer(ok())
        long = "x" * 1025
        self.client.should_rate_limit(
            "edge",
            D("k", "v", hits=5),
            D("k", "v", check_only=True, hits=9),
            Descriptor([("k", b"\xff\xfe")]),
            Descriptor([("k", long)]),
            Descriptor([("k", b"abc")]),
            D("tenant", "acme", limit=LimitOverride(requests=3, window=0.25)),
        )
        ds = self.server.requests[0].descriptors
        self.assertEqual(ds[0].hits, 5)
        self.assertTrue(ds[1].HasField("hits"))
        self.assertEqual(ds[1].hits, 0)
        self.assertEqual(ds[2].entries[0].raw_value, b"\xff\xfe")
        self.assertEqual(ds[2].entries[0].value, "")
        self.assertEqual(ds[3].entries[0].value_sha256, hashlib.sha256(long.encode()).digest())
        self.assertEqual(ds[3].entries[0].value, "")
        self.assertEqual(ds[4].entries[0].value, "abc")  # valid UTF-8 bytes go as a string
        self.assertEqual(ds[5].limit.requests, 3)
        self.assertEqual((ds[5].limit.window.seconds, ds[5].limit.window.nanos), (0, 250_000_000))
        self.assertFalse(ds[0].HasField("limit"))

    def test_fail_open(self):
        self.server.answer((grpc.StatusCode.UNAVAILABLE, "redis down"))
        d = self.client.should_rate_limit("edge", D("k", "v"))
        self.assertTrue(d.allowed)
        self.assertEqual(d.error.code(), grpc.StatusCode.UNAVAILABLE)
        self.assertEqual((self.client.fail_opens, self.client.failures), (1, 1))
        self.assertEqual(d.statuses, ())

    def test_fail_closed(self):
        client = ratelimitd.Client(self.channel, timeout=30, fail_closed=True)
        self.server.answer((grpc.StatusCode.INTERNAL, "boom"))
        d = client.should_rate_limit("edge", D("k", "v"))
        self.assertFalse(d.allowed)
        self.assertEqual(d.retry_after, 0)
        self.assertEqual(d.error.code(), grpc.StatusCode.INTERNAL)
        self.assertEqual((client.fail_opens, client.failures), (0, 1))

    def test_budget_ends_the_call(self):
        client = ratelimitd.Client(self.channel)  # the default budget
        self.server.answer(Block())
        d = client.should_rate_limit("edge", D("k", "v"))
        self.assertTrue(d.allowed)
        self.assertEqual(d.error.code(), grpc.StatusCode.DEADLINE_EXCEEDED)
        self.assertEqual(client.fail_opens, 1)

    def test_unreachable(self):
        with socket.socket() as s:  # a port nobody listens on
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        with grpc.insecure_channel(f"127.0.0.1:{port}") as ch:
            d = ratelimitd.Client(ch, timeout=5).should_rate_limit("edge", D("k", "v"))
        self.assertTrue(d.allowed)
        self.assertEqual(d.error.code(), grpc.StatusCode.UNAVAILABLE)

    def test_invalid_argument_raises_whatever_the_policy(self):
        client = ratelimitd.Client(self.channel, timeout=30, fail_closed=True)
        self.server.answer((grpc.StatusCode.INVALID_ARGUMENT, "unknown domain"))
        with self.assertRaises(InvalidRequest) as cm:
            client.should_rate_limit("edge", D("k", "v"))
        self.assertEqual(cm.exception.rpc_error.code(), grpc.StatusCode.INVALID_ARGUMENT)
        self.assertEqual(client.failures, 0)

    def test_malformed_requests_are_not_sent(self):
        bad = [
            ("", [D("k", "v")]),
            ("d" * 257, [D("k", "v")]),
            ("\udcff", [D("k", "v")]),
            ("edge", []),
            ("edge", [D("k", "v")] * 65),
            ("edge", [Descriptor([])]),
            ("edge", [D(*(["k", "v"] * 33))]),
            ("edge", [D("", "v")]),
            ("edge", [D("k" * 1025, "v")]),
            ("edge", [D("\udcff", "v")]),
            ("edge", [D("k", "v", hits=2**32)]),
            ("edge", [D("k", "v", hits=-1)]),
            ("edge", [D("k", "v", limit=LimitOverride(requests=2**32, window=1))]),
            ("edge", [D("k", "v", limit=LimitOverride(requests=1, window=0))]),
            ("edge", [D("k", "v", limit=LimitOverride(requests=5, window=1e-7))]),  # under 1 ms
            ("edge", [D("k", "v", limit=LimitOverride(requests=5, window=0.000999))]),
            ("edge", [D("k", "v", limit=LimitOverride(requests=5, window=100 * 365 * 86400 + 1))]),
            ("edge", [D("k", "v", limit=LimitOverride(requests=5, window=float("inf")))]),
            ("edge", [D("k", "v", limit=LimitOverride(requests=5, window=float("nan")))]),
            ("edge", [D("k", "v", limit=LimitOverride(requests=5, window=0.0015001))]),  # not whole microseconds
            ("edge", [D("k", "v", limit=LimitOverride(requests=5, window="60"))]),
            ("edge", [D("k", "v", limit=LimitOverride(requests=1.5, window=60))]),
            ("edge", [D("k", "v", limit=LimitOverride(requests=True, window=60))]),
            ("edge", [D("k", "v", limit=LimitOverride(requests=-1, window=60))]),
            ("edge", [D("k", "v", limit=(5, 60))]),
            ("edge", [D("k", "v", hits=1.5)]),
            ("edge", [D("k", "v", hits="2")]),
            ("edge", [D("k", "v", hits=True)]),
            ("edge", [("k", "v")]),
            ("edge", [Descriptor([("k", 3)])]),
            ("edge", [Descriptor([("k" * 1000, "v")] * 32)] * 40),  # over 1 MiB
        ]
        for domain, ds in bad:
            with self.subTest(domain=domain[:20], ds=repr(ds)[:60]):
                with self.assertRaises(InvalidRequest):
                    self.client.should_rate_limit(domain, *ds)
        self.assertEqual(self.server.requests, [])
        # At the bounds, a request is sent.
        self.server.answer(ok())
        self.client.should_rate_limit("d" * 256, D("k" * 1024, "v" * 5000, hits=2**32 - 1))
        self.assertEqual(len(self.server.requests), 1)

    def test_limit_override_bounds(self):
        # The override windows ratelimitd accepts are sent, to the
        # microsecond.
        cases = [(0.001, (0, 1_000_000)), (1.1, (1, 100_000_000)), (0.0015, (0, 1_500_000)),
                 (100 * 365 * 86400, (100 * 365 * 86400, 0)), (60, (60, 0))]
        for window, want in cases:
            with self.subTest(window=window):
                n = len(self.server.requests)
                self.server.answer(ok())
                self.client.should_rate_limit("edge", D("k", "v", limit=LimitOverride(2**32 - 1, window)))
                w = self.server.requests[n].descriptors[0].limit.window
                self.assertEqual((w.seconds, w.nanos), want)

    def test_odd_D(self):
        with self.assertRaises(ValueError):
            D("k")

    def test_unimplemented_logged_once(self):
        self.server.answer((grpc.StatusCode.UNIMPLEMENTED, "unknown service ratelimit.v1.RateLimitService"),
                           (grpc.StatusCode.UNIMPLEMENTED, "unknown service ratelimit.v1.RateLimitService"))
        with self.assertLogs("ratelimitd", logging.ERROR) as logs:
            d1 = self.client.should_rate_limit("edge", D("k", "v"))
            d2 = self.client.should_rate_limit("edge", D("k", "v"))
        self.assertEqual(len(logs.records), 1)
        self.assertIn("envoyproxy/ratelimit", logs.output[0])
        self.assertTrue(d1.allowed and d2.allowed)
        self.assertEqual(self.client.fail_opens, 2)

    def test_hook_sees_every_decision(self):
        seen = []
        client = ratelimitd.Client(self.channel, timeout=30,
                                   on_decision=lambda dom, ds, d: seen.append((dom, ds, d.allowed, d.error is None)))
        self.server.answer(ok(), over(), (grpc.StatusCode.UNAVAILABLE, "down"))
        for _ in range(3):
            client.should_rate_limit("edge", D("k", "v"))
        self.assertEqual(seen, [("edge", (D("k", "v"),), True, True),
                                ("edge", (D("k", "v"),), False, True),
                                ("edge", (D("k", "v"),), True, False)])

    def test_hook_errors_are_logged_not_raised(self):
        def hook(*_):
            raise RuntimeError("hook bug")
        client = ratelimitd.Client(self.channel, timeout=30, on_decision=hook)
        self.server.answer(over())
        with self.assertLogs("ratelimitd", logging.ERROR):
            d = client.should_rate_limit("edge", D("k", "v"))
        self.assertFalse(d.allowed)


class AsyncClientTest(unittest.TestCase):
    def setUp(self):
        self.server = Server().__enter__()
        self.addCleanup(self.server.__exit__)

    def run_async(self, f, **opts):
        """Runs f(client) in a fresh event loop, with an AsyncClient over a
        channel of that loop."""
        async def main():
            async with grpc.aio.insecure_channel(self.server.addr) as ch:
                client = ratelimitd.AsyncClient(ch, **opts)
                return client, await f(client)
        return asyncio.run(main())

    def test_allowed_and_refused(self):
        self.server.answer(ok(status(name="n", requests=2, window=60, remaining=1)),
                           over(status(over_limit=True, name="n", requests=2, window=60, retry=(12, 1))))

        async def f(c):
            return [await c.should_rate_limit("edge", D("user", "u")) for _ in range(2)]
        _, (d1, d2) = self.run_async(f, timeout=30)
        self.assertTrue(d1.allowed)
        self.assertEqual(d1.statuses[0].remaining, 1)
        self.assertFalse(d2.allowed)
        self.assertAlmostEqual(d2.retry_after, 12.000000001)

    def test_failure_policy(self):
        self.server.answer((grpc.StatusCode.UNAVAILABLE, "down"), (grpc.StatusCode.UNAVAILABLE, "down"))

        async def f(c):
            return await c.should_rate_limit("edge", D("k", "v"))
        c, d = self.run_async(f, timeout=30)
        self.assertTrue(d.allowed)
        self.assertEqual(d.error.code(), grpc.StatusCode.UNAVAILABLE)
        self.assertEqual(c.fail_opens, 1)
        c, d = self.run_async(f, timeout=30, fail_closed=True)
        self.assertFalse(d.allowed)
        self.assertEqual((c.fail_opens, c.failures), (0, 1))

    def test_budget_ends_the_call(self):
        self.server.answer(Block())

        async def f(c):
            return await c.should_rate_limit("edge", D("k", "v"))
        c, d = self.run_async(f)
        self.assertTrue(d.allowed)
        self.assertEqual(d.error.code(), grpc.StatusCode.DEADLINE_EXCEEDED)

    def test_invalid(self):
        self.server.answer((grpc.StatusCode.INVALID_ARGUMENT, "bad"))

        async def f(c):
            out = []
            for ds in ([], [D("k", "v")]):
                try:
                    await c.should_rate_limit("edge", *ds)
                except InvalidRequest as e:
                    out.append(e)
            return out
        _, errs = self.run_async(f, timeout=30)
        self.assertEqual(len(errs), 2)
        self.assertIsNone(errs[0].rpc_error)
        self.assertEqual(errs[1].rpc_error.code(), grpc.StatusCode.INVALID_ARGUMENT)
        self.assertEqual(len(self.server.requests), 1)

    def test_unimplemented_and_hook(self):
        self.server.answer((grpc.StatusCode.UNIMPLEMENTED, "no"), (grpc.StatusCode.UNIMPLEMENTED, "no"))
        seen = []

        async def f(c):
            await c.should_rate_limit("edge", D("k", "v"))
            await c.should_rate_limit("edge", D("k", "v"))
        with self.assertLogs("ratelimitd", logging.ERROR) as logs:
            self.run_async(f, timeout=30, on_decision=lambda *a: seen.append(a[2].allowed))
        self.assertEqual(len(logs.records), 1)
        self.assertEqual(seen, [True, True])


if __name__ == "__main__":
    unittest.main()
