"""acquire, Lease and AsyncLease, and give_back, against the scripted
server over real gRPC on loopback."""

import asyncio
import logging
import time
import unittest
from unittest import mock

import grpc

import ratelimitd
from ratelimitd import D, Descriptor, InvalidRequest, LeaseLost
from ratelimitd.v1 import ratelimit_pb2 as pb

from scripted import Block, Server, lease, over, ok, status, wait_state


def admitted(lease_id=b"L1", expires_at=1_800_000_000.5):
    return pb.AcquireResponse(code=pb.CODE_OK, lease=lease(lease_id, expires_at), statuses=[
        status(name="jobs", requests=2, window=60, remaining=1, algorithm=pb.ALGORITHM_CONCURRENCY)])


def busy():
    return pb.AcquireResponse(code=pb.CODE_OVER_LIMIT, statuses=[
        status(over_limit=True, name="jobs", requests=2, window=60, retry=(1, 0),
               algorithm=pb.ALGORITHM_CONCURRENCY)])


class LeaseTest(unittest.TestCase):
    def setUp(self):
        self.server = Server().__enter__()
        self.addCleanup(self.server.__exit__)
        self.channel = grpc.insecure_channel(self.server.addr)
        self.addCleanup(self.channel.close)
        self.client = ratelimitd.Client(self.channel, timeout=30)
        self.addCleanup(wait_state, self.channel, grpc.ChannelConnectivity.READY)

    def releases(self):
        return [r.lease_id for r in self.server.requests if isinstance(r, pb.ReleaseRequest)]

    def test_released_once_on_exit_even_on_exception(self):
        self.server.answer(admitted(), pb.ReleaseResponse())
        with self.assertRaises(ZeroDivisionError):
            with self.client.acquire("jobs", D("job", "export", hits=2)) as held:
                self.assertTrue(held.allowed)
                self.assertEqual(held.decision.statuses[0].limit.algorithm, ratelimitd.Algorithm.CONCURRENCY)
                self.assertEqual(held.expires_at, 1_800_000_000.5)
                1 / 0
        held.release()  # once only
        self.assertEqual(self.releases(), [b"L1"])
        acq, rel = self.server.requests
        self.assertEqual(rel.domain, "jobs")
        self.assertEqual(rel.descriptors, acq.descriptors)
        self.assertEqual(acq.descriptors[0].hits, 2)
        self.assertIsNone(held.expires_at)

    def test_refused_holds_nothing(self):
        self.server.answer(busy())
        with self.client.acquire("jobs", D("job", "export")) as held:
            self.assertFalse(held.allowed)
            self.assertEqual(held.decision.retry_after, 1.0)
            held.renew()  # nothing held: nothing asked
        self.assertEqual(len(self.server.requests), 1)
        self.assertEqual(self.client.local_refusals, 0)

    def test_renew(self):
        self.server.answer(admitted(b"L1"), pb.RenewResponse(code=pb.CODE_OK, lease=lease(b"L2", 1_800_000_060)),
                           pb.ReleaseResponse())
        held = self.client.acquire("jobs", D("job", "export"))
        held.renew()
        self.assertEqual(held.expires_at, 1_800_000_060)
        self.assertEqual(self.server.requests[1].lease_id, b"L1")
        held.release()
        self.assertEqual(self.releases(), [b"L2"])
        with self.assertRaises(LeaseLost):
            held.renew()

    def test_renew_lapsed(self):
        self.server.answer(admitted(), pb.RenewResponse(code=pb.CODE_OVER_LIMIT))
        held = self.client.acquire("jobs", D("job", "export"))
        with self.assertRaises(LeaseLost):
            held.renew()
        held.release()  # lost: nothing to give back
        self.assertEqual(self.releases(), [])

    def test_renew_failure_keeps_the_lease(self):
        self.server.answer(admitted(), (grpc.StatusCode.UNAVAILABLE, "down"), pb.ReleaseResponse())
        held = self.client.acquire("jobs", D("job", "export"))
        with self.assertRaises(grpc.RpcError) as cm:
            held.renew()
        self.assertEqual(cm.exception.code(), grpc.StatusCode.UNAVAILABLE)
        self.assertIsNotNone(held.expires_at)
        held.release()
        self.assertEqual(self.releases(), [b"L1"])

    def test_release_failure_is_logged_on_exit(self):
        self.server.answer(admitted(), (grpc.StatusCode.UNAVAILABLE, "down"))
        with self.assertLogs("ratelimitd", logging.WARNING) as logs:
            with self.client.acquire("jobs", D("job", "export")):
                pass
        self.assertIn("release failed", logs.output[0])

    def test_release_is_bounded(self):
        block = Block()
        self.server.answer(admitted(), block)
        held = self.client.acquire("jobs", D("job", "export"))
        with mock.patch.object(ratelimitd.client, "RELEASE_TIMEOUT", 0.05):
            with self.assertRaises(grpc.RpcError) as cm:
                held.release()
        block.release()
        self.assertEqual(cm.exception.code(), grpc.StatusCode.DEADLINE_EXCEEDED)
        # Again: the first release's error, without asking again.
        with self.assertRaises(grpc.RpcError) as again:
            held.release()
        self.assertIs(again.exception, cm.exception)
        self.assertEqual(self.releases(), [b"L1"])

    def test_failure_policy(self):
        self.server.answer((grpc.StatusCode.UNAVAILABLE, "down"), (grpc.StatusCode.UNAVAILABLE, "down"))
        with self.client.acquire("jobs", D("job", "export")) as held:
            self.assertTrue(held.allowed)
            self.assertIsNotNone(held.decision.error)
        closed = ratelimitd.Client(self.channel, timeout=30, fail_closed=True)
        with closed.acquire("jobs", D("job", "export")) as held:
            self.assertFalse(held.allowed)
        self.assertEqual(self.releases(), [])
        self.assertEqual(self.client.fail_opens, 1)

    def test_invalid(self):
        with self.assertRaises(InvalidRequest):
            self.client.acquire("jobs", D("job", "export", give_back=True))
        with self.assertRaises(InvalidRequest):
            self.client.should_rate_limit("jobs", D("t", "u", give_back=True, check_only=True))
        self.assertEqual(self.server.requests, [])

    def test_give_back(self):
        refused = over(status(over_limit=True, name="tokens", requests=1, window=60, retry=(60, 0)))
        self.server.answer(refused, ok(), ok())
        self.assertFalse(self.client.should_rate_limit("d", D("tokens", "u")).allowed)
        # The refusal is remembered, under the key a give-back of the same
        # descriptor has too: a request giving back is sent all the same.
        self.client.should_rate_limit("d", D("tokens", "u", give_back=True))
        self.client.should_rate_limit("d", D("tokens", "u"), D("tokens", "u", hits=3, give_back=True))
        self.assertEqual(len(self.server.requests), 3)
        ds = self.server.requests[2].descriptors
        self.assertEqual([d.give_back for d in ds], [False, True])
        self.assertEqual(ds[1].hits, 3)
        self.assertEqual(Descriptor([("k", "v")], give_back=True).give_back, True)


class AsyncLeaseTest(unittest.TestCase):
    def setUp(self):
        self.server = Server().__enter__()
        self.addCleanup(self.server.__exit__)

    def releases(self):
        return [r.lease_id for r in self.server.requests if isinstance(r, pb.ReleaseRequest)]

    def run_async(self, f):
        async def main():
            async with grpc.aio.insecure_channel(self.server.addr) as ch:
                await f(ratelimitd.AsyncClient(ch, timeout=30))
        asyncio.run(main())

    def test_async_with_releases_on_exception(self):
        self.server.answer(admitted(), pb.RenewResponse(code=pb.CODE_OK, lease=lease(b"L2", 1_800_000_060)),
                           pb.ReleaseResponse())

        async def f(client):
            with self.assertRaises(ZeroDivisionError):
                async with client.acquire("jobs", D("job", "export")) as held:
                    self.assertTrue(held.allowed)
                    await held.renew()
                    self.assertEqual(held.expires_at, 1_800_000_060)
                    1 / 0
            await held.release()  # once only
        self.run_async(f)
        self.assertEqual(self.releases(), [b"L2"])

    def test_release_survives_cancellation(self):
        self.server.answer(admitted(), pb.ReleaseResponse())

        async def f(client):
            entered = asyncio.Event()

            async def work():
                async with client.acquire("jobs", D("job", "export")):
                    entered.set()
                    await asyncio.sleep(60)
            task = asyncio.ensure_future(work())
            await entered.wait()
            task.cancel()
            with self.assertRaises(asyncio.CancelledError):
                await task
        self.run_async(f)
        self.assertEqual(self.releases(), [b"L1"])

    def test_await_and_refusal(self):
        self.server.answer(busy())

        async def f(client):
            held = await client.acquire("jobs", D("job", "export"))
            self.assertFalse(held.allowed)
            await held.release()
            with self.assertRaises(LeaseLost):
                await held.renew()
        self.run_async(f)
        self.assertEqual(self.releases(), [])


if __name__ == "__main__":
    unittest.main()


class AutoRenewTest(unittest.TestCase):
    """auto_renew, its timers replaced by the test's."""

    def setUp(self):
        self.server = Server().__enter__()
        self.addCleanup(self.server.__exit__)
        self.timers = []

    def start_timer(self, delay, f):
        self.timers.append((delay, f))
        return lambda: self.timers.append("cancelled")

    def script(self):
        far = time.time() + 60
        self.server.answer(admitted(b"L1", far), pb.RenewResponse(code=pb.CODE_OK, lease=lease(b"L2", far + 60)),
                           pb.ReleaseResponse(), admitted(b"L3", far), pb.RenewResponse(code=pb.CODE_OVER_LIMIT))
        return far

    def methods(self):
        return [type(r).__name__ for r in self.server.requests]

    def test_sync(self):
        far = self.script()
        channel = grpc.insecure_channel(self.server.addr)
        self.addCleanup(channel.close)
        self.addCleanup(wait_state, channel, grpc.ChannelConnectivity.READY)
        client = ratelimitd.Client(channel, timeout=30, auto_renew=True)
        client._start_timer = self.start_timer
        with client.acquire("jobs", D("job", "export")) as held:
            delay, renew = self.timers[0]
            self.assertAlmostEqual(delay, (far - time.time()) / 2, delta=5)
            renew()
            self.assertEqual(held.expires_at, far + 60)
            self.assertEqual(len(self.timers), 2)
        self.assertEqual(self.timers[2], "cancelled")
        self.assertEqual(self.server.requests[2].lease_id, b"L2")
        held = client.acquire("jobs", D("job", "export"))
        with self.assertLogs("ratelimitd", logging.WARNING) as logs:
            self.timers[3][1]()
        self.assertIn("lost", logs.output[0])
        self.assertEqual(len(self.timers), 4)
        self.assertEqual(self.methods(), ["AcquireRequest", "RenewRequest", "ReleaseRequest", "AcquireRequest",
                                          "RenewRequest"])

    def test_async(self):
        far = self.script()

        async def main():
            async with grpc.aio.insecure_channel(self.server.addr) as ch:
                client = ratelimitd.AsyncClient(ch, timeout=30, auto_renew=True)
                client._start_timer = self.start_timer
                async with client.acquire("jobs", D("job", "export")) as held:
                    self.timers[0][1]()
                    for _ in range(1000):
                        if len(self.timers) == 2:
                            break
                        await asyncio.sleep(0.001)
                    self.assertEqual(held.expires_at, far + 60)
                self.assertEqual(self.timers[2], "cancelled")
                await client.acquire("jobs", D("job", "export"))
                with self.assertLogs("ratelimitd", logging.WARNING) as logs:
                    self.timers[3][1]()
                    for _ in range(1000):
                        if logs.output:
                            break
                        await asyncio.sleep(0.001)
                self.assertIn("lost", logs.output[0])
        asyncio.run(main())
        self.assertEqual(self.server.requests[2].lease_id, b"L2")
