"""ratelimitd.testing: the fakes answer by their script, record the calls,
and refuse malformed requests as the real clients do."""

import asyncio
import threading
import unittest

import grpc

from ratelimitd import D, Decision, InvalidRequest, LimitOverride
from ratelimitd.testing import (FakeAsyncClient, FakeClient, allow, decide, fail, fail_closed, fail_open, refuse,
                                unavailable)


class FakeTest(unittest.TestCase):
    def test_script(self):
        fake = FakeClient()
        self.assertTrue(fake.should_rate_limit("edge", D("k", "v")).allowed)  # the zero fake allows
        err = InvalidRequest("no such domain")
        fake.push(refuse(1.2), fail_open(), fail(err))
        fake.set_default(fail_closed())
        d = fake.should_rate_limit("edge", D("tenant", "acme", "path", "/"), D("ip", "1"))
        self.assertFalse(d.allowed)
        self.assertEqual(d.retry_after, 1.2)
        self.assertEqual([s.limit.name for s in d.statuses], ["tenant.path", "ip"])
        self.assertEqual(d.headers, (("Retry-After", "2"),))
        d = fake.should_rate_limit("edge", D("k", "v"))
        self.assertTrue(d.allowed)
        self.assertEqual(d.error.code(), grpc.StatusCode.UNAVAILABLE)
        with self.assertRaises(InvalidRequest):
            fake.should_rate_limit("edge", D("k", "v"))
        d = fake.should_rate_limit("edge", D("k", "v"))  # the default, now
        self.assertFalse(d.allowed)
        self.assertIsInstance(d.error, grpc.RpcError)
        calls = fake.calls
        self.assertEqual(len(calls), 5)
        self.assertEqual(calls[1].descriptors, (D("tenant", "acme", "path", "/"), D("ip", "1")))
        self.assertIs(calls[3].error, err)
        self.assertIsNone(calls[3].decision)
        self.assertFalse(calls[4].decision.allowed)
        fake.reset()
        self.assertEqual(fake.calls, [])
        self.assertTrue(fake.should_rate_limit("edge", D("k", "v")).allowed)

    def test_malformed_requests_raise_before_any_answer(self):
        fake = FakeClient(decide(Decision(allowed=True)))
        for domain, ds in (("", [D("k", "v")]), ("edge", []), ("edge", [D("k", "v", hits=1.5)]),
                           ("edge", [D("k", "v", limit=LimitOverride(1, 1e-7))])):
            with self.subTest(domain=domain, ds=ds):
                with self.assertRaises(InvalidRequest):
                    fake.should_rate_limit(domain, *ds)
        self.assertEqual(len(fake.calls), 4)
        self.assertTrue(all(isinstance(c.error, InvalidRequest) for c in fake.calls))
        # The queued answer is still there.
        self.assertEqual(fake.should_rate_limit("edge", D("k", "v")), Decision(allowed=True))

    def test_async(self):
        fake = FakeAsyncClient(refuse(0))

        async def main():
            return [await fake.should_rate_limit("edge", D("k", "v")) for _ in range(2)]
        refused, allowed = asyncio.run(main())
        self.assertEqual((refused.allowed, refused.headers), (False, (("Retry-After", "1"),)))
        self.assertTrue(allowed.allowed)
        self.assertEqual(allow()("edge", (D("a", "b"), D("c", "d"))).statuses[1].over_limit, False)

    def test_answer_may_call_the_fake(self):
        # An answer runs without the fake's lock held.
        fake = FakeClient()
        fake.set_default(lambda domain, ds: Decision(allowed=len(fake.calls) < 1))
        done = threading.Event()

        def run():
            fake.should_rate_limit("edge", D("k", "v"))
            fake.should_rate_limit("edge", D("k", "v"))
            done.set()
        t = threading.Thread(target=run, daemon=True)
        t.start()
        t.join(30)
        self.assertTrue(done.is_set(), "deadlocked")
        self.assertEqual([c.decision.allowed for c in fake.calls], [True, False])

    def test_answer_must_be_a_decision(self):
        fake = FakeClient(lambda domain, ds: True)
        with self.assertRaisesRegex(TypeError, "not a Decision"):
            fake.should_rate_limit("edge", D("k", "v"))

    def test_unavailable(self):
        e = unavailable("gone")
        self.assertEqual((e.code(), e.details()), (grpc.StatusCode.UNAVAILABLE, "gone"))


if __name__ == "__main__":
    unittest.main()
