"""Quota mode (ratelimitd.quota) against a scripted RLQS server: a real
gRPC server in this process, on a loopback port, answering each report as
a test says. Token buckets and times to live run on a clock the tests
drive."""

import asyncio
import logging
import queue
import threading
import time
import unittest
from concurrent import futures

import grpc

from ratelimitd import D, Descriptor, InvalidRequest, LimitOverride
from ratelimitd.proto.envoy.service.rate_limit_quota.v3 import rlqs_pb2 as pb
from ratelimitd.proto.envoy.service.rate_limit_quota.v3 import rlqs_pb2_grpc as pb_grpc
from ratelimitd.quota import AsyncQuota, NoAssignment, Quota

WAIT = 30  # seconds: the most a test waits for something to happen


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


def action(entries, *, abandon=False, blanket=None, max_tokens=0, per_fill=None, fill=0.0, ttl=0.0, rpu=None):
    """A BucketAction for the bucket of entries (key, value pairs)."""
    a = pb.RateLimitQuotaResponse.BucketAction()
    a.bucket_id.bucket.update(dict(entries))
    if abandon:
        a.abandon_action.SetInParent()
        return a
    qa = a.quota_assignment_action
    if ttl:
        qa.assignment_time_to_live.FromNanoseconds(int(ttl * 1e9))
    s = qa.rate_limit_strategy
    if blanket is not None:
        s.blanket_rule = blanket
    elif rpu is not None:
        s.requests_per_time_unit.requests_per_time_unit, s.requests_per_time_unit.time_unit = rpu
    else:
        s.token_bucket.max_tokens = max_tokens
        if per_fill is not None:
            s.token_bucket.tokens_per_fill.value = per_fill
        s.token_bucket.fill_interval.FromNanoseconds(int(fill * 1e9))
    return a


def entries_of(usage):
    return sorted(usage.bucket_id.bucket.items())


class FakeRLQS(pb_grpc.RateLimitQuotaServiceServicer):
    """Records every report (stream number, message), answers each usage
    with answer(usage) (a BucketAction or None), fails the first `fail`
    streams at once, and sends what is put in push on the latest stream."""

    def __init__(self, answer=None, fail=0):
        self.answer = answer
        self.fail = fail
        self.reports = queue.Queue()
        self.streams = 0
        self.ended = threading.Event()
        self.push = queue.Queue()
        self._lock = threading.Lock()

    def StreamRateLimitQuotas(self, request_iterator, context):
        with self._lock:
            self.streams += 1
            n = self.streams
        if n <= self.fail:
            context.abort(grpc.StatusCode.UNAVAILABLE, "scripted failure")
        out = queue.Queue()

        def read():
            try:
                for msg in request_iterator:
                    self.reports.put((n, msg))
                    acts = [a for a in (self.answer(u) if self.answer else None
                                        for u in msg.bucket_quota_usages) if a is not None]
                    if acts:
                        out.put(pb.RateLimitQuotaResponse(bucket_action=acts))
            except grpc.RpcError:
                pass
            finally:
                out.put(None)

        threading.Thread(target=read, daemon=True).start()
        try:
            while context.is_active():
                try:
                    m = out.get(timeout=0.01)
                except queue.Empty:
                    try:
                        m = self.push.get_nowait()
                    except queue.Empty:
                        continue
                    m = pb.RateLimitQuotaResponse(bucket_action=[m])
                if m is None:
                    return
                yield m
        finally:
            self.ended.set()

    def next(self, test):
        try:
            return self.reports.get(timeout=WAIT)
        except queue.Empty:
            test.fail("no report in time")


def serve(test, fake):
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
    pb_grpc.add_RateLimitQuotaServiceServicer_to_server(fake, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    test.addCleanup(server.stop, None)
    return f"127.0.0.1:{port}"


def wait_for(test, what, cond):
    deadline = time.monotonic() + WAIT
    while not cond():
        if time.monotonic() > deadline:
            test.fail(f"{what}: not in {WAIT} s")
        time.sleep(0.002)


def assigned(q, d):
    b = q._buckets.get(frozenset((e.key, e.value) for e in d.entries))
    return b is not None and b.kind is not None


def held(q, d):
    return frozenset((e.key, e.value) for e in d.entries) in q._buckets


class QuotaTest(unittest.TestCase):
    def quota(self, fake, **kw):
        ch = grpc.insecure_channel(serve(self, fake))
        self.addCleanup(ch.close)
        kw.setdefault("reporting_interval", 3600)
        q = Quota(ch, "edge", **kw)
        self.addCleanup(q.close)
        return q

    def test_token_bucket_and_ttl(self):
        # A bucket's first use is reported at once, naming the domain, and
        # decided by the failure policy until its assignment comes; its
        # token bucket then decides on the Quota's clock until the
        # assignment's time to live ends, and the failure policy again.
        for fail_closed in (False, True):
            with self.subTest(fail_closed=fail_closed):
                clk = Clock()
                fake = FakeRLQS(lambda u: action(entries_of(u), max_tokens=2, per_fill=1, fill=1, ttl=10))
                q = self.quota(fake, fail_closed=fail_closed, clock=clk)
                d = D("k", "v\u00e9")
                got = q.should_rate_limit("edge", d)
                self.assertEqual(got.allowed, not fail_closed)
                self.assertIsInstance(got.error, NoAssignment)
                _, r = fake.next(self)
                self.assertEqual(r.domain, "edge")
                while not r.bucket_quota_usages:
                    _, r = fake.next(self)
                wait_for(self, "the assignment", lambda: assigned(q, d))
                got = [q.allow(d) for _ in range(3)]
                clk.now += 1
                got += [q.allow(d), q.allow(d)]
                self.assertEqual(got, [True, True, False, True, False])
                refused = q.should_rate_limit("edge", d)
                self.assertFalse(refused.allowed)
                self.assertAlmostEqual(refused.retry_after, 1.0)
                self.assertIsNone(refused.error)
                self.assertTrue(refused.statuses[0].over_limit)
                clk.now += 10
                self.assertEqual(q.allow(d), not fail_closed, "after the time to live: the failure policy")
                self.assertEqual(q.fail_opens, 0 if fail_closed else 2)

    def test_blanket_and_all_or_nothing(self):
        # A call is allowed only when every bucket admits it, and a refused
        # call takes no token.
        def answer(u):
            k = entries_of(u)[0][0]
            if k == "deny":
                return action(entries_of(u), blanket=1, ttl=60)
            if k == "allow":
                return action(entries_of(u), blanket=0, ttl=60)
            return action(entries_of(u), max_tokens=1, per_fill=1, fill=3600, ttl=60)

        q = self.quota(FakeRLQS(answer), fail_closed=True)
        one, deny, every = D("one", "x"), D("deny", "x"), D("allow", "x")
        self.assertFalse(q.allow(one, deny, every))
        for d in (one, deny, every):
            wait_for(self, f"the assignment of {d}", lambda d=d: assigned(q, d))
        got = [q.allow(one, deny), q.allow(every, one), q.allow(one), q.allow(every), q.allow(deny)]
        self.assertEqual(got, [False, True, False, True, False])

    def test_requests_per_time_unit_and_unknown(self):
        # requests_per_time_unit is a token bucket of that many a unit; a
        # strategy the client cannot apply is no assignment.
        clk = Clock()

        def answer(u):
            if entries_of(u)[0][0] == "rpu":
                return action(entries_of(u), rpu=(2, 2), ttl=600)  # 2 a minute
            return action(entries_of(u), max_tokens=5, fill=0, ttl=600)  # fill 0: cannot be applied

        q = self.quota(FakeRLQS(answer), fail_closed=True, clock=clk)
        rpu, bad = D("rpu", "x"), D("bad", "x")
        q.allow(rpu, bad)
        wait_for(self, "the assignment", lambda: assigned(q, rpu))
        wait_for(self, "the answer", lambda: fake_answered(q, bad))
        self.assertEqual([q.allow(rpu), q.allow(rpu), q.allow(rpu)], [True, True, False])
        clk.now += 60
        self.assertTrue(q.allow(rpu))
        self.assertFalse(q.allow(bad), "an assignment the client cannot apply: the failure policy (closed)")

    def test_malformed(self):
        q = self.quota(FakeRLQS())
        for name, ds in {
            "none": (),
            "no entries": (Descriptor([]),),
            "repeated key": (D("a", "1", "b", "2", "a", "3"),),
            "empty key": (D("", "1"),),
            "override": (D("a", "1", limit=LimitOverride(1, 1.0)),),
            "too many": tuple(D("a", str(i)) for i in range(65)),
            "second is bad": (D("a", "1"), D("b", "1", "b", "1")),
            "not UTF-8": (D("a", b"\xff"),),
            "hits": (D("a", "1", hits=-1),),
            "not a descriptor": (("a", "1"),),
        }.items():
            with self.subTest(name):
                with self.assertRaises(InvalidRequest):
                    q.allow(*ds)
        with self.assertRaises(InvalidRequest):
            q.should_rate_limit("other", D("a", "1"))
        self.assertEqual(q.buckets, 0, "a malformed call made a bucket")
        ch = grpc.insecure_channel("127.0.0.1:1")
        self.addCleanup(ch.close)
        for kw in ({"domain": ""}, {"domain": "d", "reporting_interval": -1}, {"domain": "d", "max_buckets": 0},
                   {"domain": "x" * 257}):
            with self.subTest(**kw), self.assertRaises(ValueError):
                Quota(ch, **kw)

    def test_order_and_bounds(self):
        # A bucket id is a map; past max_buckets, the failure policy decides.
        q = self.quota(FakeRLQS(lambda u: action(entries_of(u), blanket=0, ttl=60)), fail_closed=True,
                       max_buckets=2)
        q.allow(D("a", "1", "b", "2"), D("a", "2", "b", "1"))
        wait_for(self, "the assignments", lambda: assigned(q, D("b", "2", "a", "1")) and
                 assigned(q, D("a", "2", "b", "1")))
        self.assertEqual(q.buckets, 2)
        got = [q.allow(D("b", "2", "a", "1")), q.allow(D("c", "1")), q.allow(D("b", "1", "a", "2"))]
        self.assertEqual(got, [True, False, True])
        self.assertEqual(q.buckets, 2, "buckets held past max_buckets")
        d = q.should_rate_limit("edge", D("c", "1"))
        self.assertIsInstance(d.error, NoAssignment)

    def test_abandon(self):
        # An abandoned bucket is forgotten, and reported afresh at its next use.
        fake = FakeRLQS()
        q = self.quota(fake)
        d = D("k", "v")
        q.allow(d)
        _, r = fake.next(self)
        while not r.bucket_quota_usages:
            _, r = fake.next(self)
        fake.push.put(action([("k", "v")], blanket=1, ttl=60))
        wait_for(self, "the assignment", lambda: assigned(q, d))
        self.assertFalse(q.allow(d), "DENY_ALL allowed")
        fake.push.put(action([("k", "v")], abandon=True))
        wait_for(self, "the bucket forgotten", lambda: not held(q, d))
        self.assertTrue(q.allow(d), "an abandoned bucket: want the failure policy, open")
        _, r = fake.next(self)
        self.assertEqual([entries_of(u) for u in r.bucket_quota_usages], [[("k", "v")]])

    def test_reports_and_reconnects(self):
        # After failed streams the Quota reconnects, names the domain again,
        # and reports its buckets' counts each interval; idle buckets are
        # forgotten.
        fake = FakeRLQS(fail=2)
        with self.assertLogs("ratelimitd", logging.WARNING):
            q = self.quota(fake, reporting_interval=0.02)
            q.allow(D("k", "v"))
            n, r = fake.next(self)
        self.assertEqual((n, r.domain), (3, "edge"))
        d = D("k", "w")
        for _ in range(5):
            q.allow(d)
        q.allow(D("k", "w", hits=3))
        allowed = 0
        elapsed = []
        while allowed < 8:
            _, r = fake.next(self)
            for u in r.bucket_quota_usages:
                if entries_of(u) == [("k", "w")]:
                    allowed += u.num_requests_allowed
                    elapsed.append(u.time_elapsed.ToNanoseconds())
        self.assertEqual(allowed, 8)
        self.assertEqual(elapsed[0], 20_000_000, "a first report's time_elapsed is the interval")
        wait_for(self, "the idle bucket forgotten", lambda: not held(q, d))

    def test_close(self):
        # close ends the stream and the thread; it can be called again.
        fake = FakeRLQS()
        q = self.quota(fake)
        fake.next(self)
        q.close()
        self.assertFalse(q._thread.is_alive())
        self.assertTrue(fake.ended.wait(WAIT), "the server's stream did not end after close")
        q.close()

    def test_channels(self):
        async def main():
            aio = grpc.aio.insecure_channel("127.0.0.1:1")
            try:
                with self.assertRaisesRegex(TypeError, "AsyncQuota"):
                    Quota(aio, "edge")
            finally:
                await aio.close()

        asyncio.run(main())
        ch = grpc.insecure_channel("127.0.0.1:1")
        self.addCleanup(ch.close)
        with self.assertRaisesRegex(TypeError, "grpc.aio"):
            AsyncQuota(ch, "edge")


def fake_answered(q, d):
    b = q._buckets.get(frozenset((e.key, e.value) for e in d.entries))
    return b is not None and b.reported_on != 0


class AsyncQuotaTest(unittest.TestCase):
    def test_assignment_reports_and_close(self):
        fake = FakeRLQS(lambda u: action(entries_of(u), max_tokens=1, per_fill=1, fill=3600, ttl=60))
        addr = serve(self, fake)
        clk = Clock()

        async def main():
            async with grpc.aio.insecure_channel(addr) as ch:
                async with AsyncQuota(ch, "edge", reporting_interval=0.05, fail_closed=True, clock=clk) as q:
                    d = D("k", "v")
                    got = await q.should_rate_limit("edge", d)
                    self.assertFalse(got.allowed)
                    self.assertIsInstance(got.error, NoAssignment)
                    deadline = time.monotonic() + WAIT
                    while not assigned(q, d):
                        self.assertLess(time.monotonic(), deadline, "no assignment in time")
                        await asyncio.sleep(0.002)
                    self.assertEqual([q.allow(d), q.allow(d)], [True, False])
                    refused = await q.should_rate_limit("edge", d)
                    self.assertGreater(refused.retry_after, 3000)
                    # The counts reach the server within an interval.
                    allowed = denied = 0
                    while denied < 3:  # the first call, the second allow and should_rate_limit
                        n, r = await asyncio.get_running_loop().run_in_executor(None, fake.next, self)
                        self.assertEqual(n, 1)
                        for u in r.bucket_quota_usages:
                            allowed += u.num_requests_allowed
                            denied += u.num_requests_denied
                    self.assertEqual((allowed, denied), (1, 3))
                self.assertTrue(q._task.done())

        asyncio.run(main())
        self.assertTrue(fake.ended.wait(WAIT), "the server's stream did not end after close")

    def test_needs_a_running_loop(self):
        async def make():
            return grpc.aio.insecure_channel("127.0.0.1:1")

        loop = asyncio.new_event_loop()
        try:
            ch = loop.run_until_complete(make())
            with self.assertRaisesRegex(RuntimeError, "running event loop"):
                AsyncQuota(ch, "edge")
            loop.run_until_complete(ch.close())
        finally:
            loop.close()


if __name__ == "__main__":
    unittest.main()
