"""The clients over a cold connection: they connect at construction, and a
call waits for the handshake within the connect budget, not its own; a
call while ratelimitd is down still fails open at once. Over real gRPC on
loopback, through a proxy that delays the handshake."""

import asyncio
import os
import subprocess
import sys
import threading
import time
import unittest

import grpc

import ratelimitd
from ratelimitd import D

from scripted import Server, SlowProxy, closed_addr, hung_listener, ok, status, wait_state

HERE = os.path.dirname(os.path.abspath(__file__))

# A handshake takes this long: more than these tests' call budget
# (BUDGET, long enough for an answer on a loaded machine), less than the
# default connect budget (1 s).
DELAY = 0.5
BUDGET = 0.25


class ClientConnectTest(unittest.TestCase):
    def setUp(self):
        self.server = Server().__enter__()
        self.addCleanup(self.server.__exit__)

    def proxy(self, delay):
        p = SlowProxy(self.server.addr, delay).__enter__()
        self.addCleanup(p.__exit__)
        return p

    def channel(self, addr):
        ch = grpc.insecure_channel(addr)
        self.addCleanup(ch.close)
        return ch

    def test_cold_connection(self):
        # The first call gets ratelimitd's decision although the handshake
        # takes longer than its budget.
        ch = self.channel(self.proxy(DELAY).addr)
        rl = ratelimitd.Client(ch, timeout=BUDGET)
        self.server.answer(ok(status(name="n", requests=3, window=60, remaining=2)))
        d = rl.should_rate_limit("edge", D("k", "v"))
        self.assertIsNone(d.error)
        self.assertEqual([s.remaining for s in d.statuses], [2])
        self.assertEqual(rl.fail_opens, 0)

    def test_connects_at_construction(self):
        p = self.proxy(0)
        ch = self.channel(p.addr)
        self.assertFalse(p.accepted.wait(0.05))  # a new channel is idle
        ratelimitd.Client(ch)
        self.assertTrue(p.accepted.wait(10), "no connection 10 s after Client()")
        self.assertTrue(wait_state(ch, grpc.ChannelConnectivity.READY))  # before closing: see wait_state

    def test_restart_slow_handshake(self):
        # After ratelimitd restarts (a deploy), the channel, which was
        # ready, is idle; the next call reconnects and gets the decision
        # although the new handshake takes longer than its budget.
        p = self.proxy(0)
        ch = self.channel(p.addr)
        grpc.channel_ready_future(ch).result(timeout=10)  # not about the first connection
        rl = ratelimitd.Client(ch, timeout=BUDGET, refusal_cache=0)
        self.server.answer(ok())
        self.assertIsNone(rl.should_rate_limit("edge", D("k", "v"), timeout=30).error)
        p.drop(delay=DELAY)
        # grpc leaves the channel idle once it has seen it close, or
        # (sometimes) reconnects at once.
        self.assertTrue(wait_state(ch, grpc.ChannelConnectivity.IDLE, grpc.ChannelConnectivity.CONNECTING),
                        "the channel stayed ready")
        self.server.answer(ok(status(name="n", requests=3, window=60, remaining=2)))
        d = rl.should_rate_limit("edge", D("k", "v"))
        self.assertIsNone(d.error)
        self.assertEqual([s.remaining for s in d.statuses], [2])


    def test_refused(self):
        # ratelimitd down (connections refused): calls fail open at once,
        # without waiting for the connect budget.
        rl = ratelimitd.Client(self.channel(closed_addr()), connect_timeout=60)
        for i in range(3):
            start = time.monotonic()
            d = rl.should_rate_limit("edge", D("k", "v"))
            took = time.monotonic() - start
            self.assertTrue(d.allowed)
            self.assertEqual(d.error.code(), grpc.StatusCode.UNAVAILABLE)
            self.assertLess(took, 10, f"call {i} waited for the connect budget (60 s)")

    def test_connect_budget_bounds(self):
        # A host that accepts connections but never answers keeps the
        # channel connecting: calls wait until the connect budget, counted
        # from the client's making, is spent, and then no more: they go
        # ahead with their own budget and fail open.
        hung = hung_listener()
        self.addCleanup(hung.close)
        connect = 1.0
        rl = ratelimitd.Client(self.channel("127.0.0.1:%d" % hung.getsockname()[1]),
                               timeout=BUDGET, connect_timeout=connect)
        for i in range(3):
            start = time.monotonic()
            d = rl.should_rate_limit("edge", D("k", "v"))
            took = time.monotonic() - start
            self.assertTrue(d.allowed)
            self.assertEqual(d.error.code(), grpc.StatusCode.DEADLINE_EXCEEDED)
            if i == 0:
                self.assertGreaterEqual(took, connect)
                self.assertLess(took, 10)
            else:
                self.assertLess(took, connect, f"call {i} waited for the connect budget again")

    def test_down_after_ready(self):
        # ratelimitd goes away after the channel was ready: calls fail open
        # at once (grpc reconnects with backoff), and get its decisions
        # again once it is back, never waiting for the connect budget.
        p = self.proxy(0)
        ch = self.channel(p.addr)
        rl = ratelimitd.Client(ch, timeout=BUDGET, connect_timeout=60)
        self.server.answer(ok())
        self.assertIsNone(rl.should_rate_limit("edge", D("k", "v"), timeout=30).error)
        p.__exit__(None, None, None)
        C = grpc.ChannelConnectivity
        self.assertTrue(wait_state(ch, C.IDLE, C.CONNECTING, C.TRANSIENT_FAILURE), "the channel stayed ready")
        for i in range(3):
            start = time.monotonic()
            d = rl.should_rate_limit("edge", D("k", "v"))
            self.assertTrue(d.allowed)
            self.assertEqual(d.error.code(), grpc.StatusCode.UNAVAILABLE)
            self.assertLess(time.monotonic() - start, 10, f"call {i} while down waited for the connect budget (60 s)")

        back = SlowProxy(self.server.addr, 0, port=int(p.addr.rsplit(":", 1)[1])).__enter__()
        self.addCleanup(back.__exit__)
        deadline = time.monotonic() + 30
        while True:
            self.server.answer(ok())
            start = time.monotonic()
            d = rl.should_rate_limit("edge", D("k", "v"))
            self.assertLess(time.monotonic() - start, 10, "a call while reconnecting waited for the connect budget")
            if d.error is None:
                break
            self.assertLess(time.monotonic(), deadline, f"no decision 30 s after ratelimitd came back: {d.error}")
            wait_state(ch, C.READY)  # grpc's backoff: about a second

    def test_clients_share_one_subscription(self):
        ch = self.channel(self.server.addr)
        clients = [ratelimitd.Client(ch) for _ in range(100)]
        self.assertTrue(all(c._conn is clients[0]._conn for c in clients))
        self.assertTrue(wait_state(ch, grpc.ChannelConnectivity.READY))  # before closing: see wait_state

    def test_example_program_with_ratelimitd_down(self):
        # The example prints the failure policy's decision, and succeeds.
        example = os.path.join(HERE, "..", "..", "examples", "python", "client.py")
        if not os.path.exists(example):
            self.skipTest("examples/ not found beside the tests")
        out = subprocess.run([sys.executable, example, closed_addr(), "k"], capture_output=True, text=True,
                             timeout=60)
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertEqual(out.stdout, "ratelimitd failed (UNAVAILABLE): allowed by the failure policy\n")
        self.assertEqual(out.stderr, "")


class AsyncClientConnectTest(unittest.TestCase):
    def setUp(self):
        self.server = Server().__enter__()
        self.addCleanup(self.server.__exit__)

    def test_cold_connection(self):
        p = SlowProxy(self.server.addr, DELAY).__enter__()
        self.addCleanup(p.__exit__)
        self.server.answer(ok(status(name="n", requests=3, window=60, remaining=2)))

        async def main():
            async with grpc.aio.insecure_channel(p.addr) as ch:
                rl = ratelimitd.AsyncClient(ch, timeout=BUDGET)
                return rl, await rl.should_rate_limit("edge", D("k", "v"))
        rl, d = asyncio.run(main())
        self.assertIsNone(d.error)
        self.assertEqual([s.remaining for s in d.statuses], [2])
        self.assertEqual(rl.fail_opens, 0)

    def test_refused_and_bounds(self):
        # Refused: no wait. Hung: one wait of the connect budget, then
        # none; a cancelled call waiting for the connection is cancelled.
        hung = hung_listener()
        self.addCleanup(hung.close)
        connect = 1.0

        async def calls(addr, **opts):
            async with grpc.aio.insecure_channel(addr) as ch:
                rl = ratelimitd.AsyncClient(ch, timeout=BUDGET, **opts)
                out = []
                for _ in range(3):
                    start = time.monotonic()
                    d = await rl.should_rate_limit("edge", D("k", "v"))
                    out.append((d, time.monotonic() - start))
                return out

        for i, (d, took) in enumerate(asyncio.run(calls(closed_addr(), connect_timeout=60))):
            self.assertTrue(d.allowed)
            self.assertEqual(d.error.code(), grpc.StatusCode.UNAVAILABLE)
            self.assertLess(took, 10, f"refused: call {i} waited for the connect budget (60 s)")
        addr = "127.0.0.1:%d" % hung.getsockname()[1]
        for i, (d, took) in enumerate(asyncio.run(calls(addr, connect_timeout=connect))):
            self.assertTrue(d.allowed)
            self.assertEqual(d.error.code(), grpc.StatusCode.DEADLINE_EXCEEDED)
            if i == 0:
                self.assertGreaterEqual(took, connect)
                self.assertLess(took, 10)
            else:
                self.assertLess(took, connect, f"hung: call {i} waited for the connect budget again")

        async def cancelled():
            async with grpc.aio.insecure_channel(addr) as ch:
                rl = ratelimitd.AsyncClient(ch, connect_timeout=60)
                task = asyncio.ensure_future(rl.should_rate_limit("edge", D("k", "v")))
                await asyncio.sleep(0.05)
                task.cancel()
                with self.assertRaises(asyncio.CancelledError):
                    await task
        asyncio.run(asyncio.wait_for(cancelled(), 10))


if __name__ == "__main__":
    unittest.main()
