"""Both of ratelimitd's APIs against a live ratelimitd: the checks a
developer's client relies on. They run when RATELIMITD_BIN names the daemon
(make build: bin/ratelimitd), which they start on free loopback ports with
rules.yaml (and examples/config.yaml, for the example program), and skip
otherwise."""

import asyncio
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import unittest
from unittest import mock

import grpc

import ratelimitd
from ratelimitd import D, LimitOverride, envoy_rls
from ratelimitd.asgi import RateLimitMiddleware

HERE = os.path.dirname(os.path.abspath(__file__))
EXAMPLES = os.path.join(HERE, "..", "..", "examples")
DOMAIN = "pytest"
LIMIT = 2

daemon = None  # the running Daemon, set by setUpModule


class Daemon:
    """ratelimitd started on free loopback ports with the rules of the
    directory rules (and more flags), its JSON log in a temporary file."""

    def __init__(self, binary, rules, *flags):
        self.dir = tempfile.mkdtemp(prefix="ratelimitd-pytest-")
        self.log_path = os.path.join(self.dir, "ratelimitd.log")
        self.log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(
            [binary, "--config", rules, "--grpc-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0",
             "--log-format", "json", *flags], stdout=self.log, stderr=subprocess.STDOUT)
        self.addr = self._wait_started()

    def _wait_started(self):
        """The gRPC address from the "ratelimitd started" log line."""
        for _ in range(300):
            with open(self.log_path, "rb") as f:
                for line in f:
                    try:
                        rec = json.loads(line)
                    except ValueError:
                        continue
                    if rec.get("msg") == "ratelimitd started" and rec.get("grpc"):
                        return rec["grpc"]
            if self.proc.poll() is not None:
                break
            time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"ratelimitd did not start:\n{self.output()}")

    def output(self):
        with open(self.log_path, "rb") as f:
            return f.read().decode("utf-8", "replace")

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()
        shutil.rmtree(self.dir, ignore_errors=True)


def setUpModule():
    global daemon
    binary = os.environ.get("RATELIMITD_BIN")
    if not binary:
        raise unittest.SkipTest("RATELIMITD_BIN is not set: no live ratelimitd to test against")
    rules = tempfile.mkdtemp(prefix="ratelimitd-pytest-rules-")
    try:
        shutil.copy(os.path.join(HERE, "rules.yaml"), os.path.join(rules, "pytest.yaml"))
        example = os.path.join(EXAMPLES, "config.yaml")
        if os.path.exists(example):
            shutil.copy(example, os.path.join(rules, "edge.yaml"))
        daemon = Daemon(binary, rules)
    finally:
        shutil.rmtree(rules, ignore_errors=True)  # read at start


def tearDownModule():
    if daemon is not None:
        daemon.stop()


def fresh_user(what):
    return f"py-{what}-{os.getpid()}-{time.time_ns()}"


class LiveTest(unittest.TestCase):
    def setUp(self):
        self.channel = grpc.insecure_channel(daemon.addr)
        self.addCleanup(self.channel.close)
        grpc.channel_ready_future(self.channel).result(timeout=10)

    def test_native(self):
        rl = ratelimitd.Client(self.channel, timeout=5, fail_closed=True)
        user = fresh_user("native")
        for i in range(LIMIT + 1):
            d = rl.should_rate_limit(DOMAIN, D("user", user))
            self.assertIsNone(d.error)
            st = d.statuses[0]
            self.assertEqual((st.limit.name, st.limit.requests, st.limit.window, st.limit.algorithm),
                             ("per_user", LIMIT, 60.0, ratelimitd.Algorithm.SLIDING_LOG))
            names = [n.lower() for n, _ in d.headers]
            self.assertIn("ratelimit-policy", names)
            self.assertIn("ratelimit", names)
            if i < LIMIT:
                self.assertTrue(d.allowed, f"call {i + 1}")
                self.assertEqual(st.remaining, LIMIT - 1 - i)
                self.assertEqual(d.retry_after, 0)
            else:
                self.assertFalse(d.allowed)
                self.assertTrue(st.over_limit)
                self.assertGreater(d.retry_after, 0)
                self.assertIn("retry-after", names)
        self.assertEqual(rl.failures, 0)

    def test_native_check_only_and_override(self):
        rl = ratelimitd.Client(self.channel, timeout=5)
        user = fresh_user("override")
        d = rl.should_rate_limit(DOMAIN, D("user", user, check_only=True))
        self.assertTrue(d.allowed)
        self.assertEqual(d.statuses[0].remaining, LIMIT)  # nothing consumed
        one = LimitOverride(requests=1, window=30)
        d = rl.should_rate_limit(DOMAIN, D("user", user, limit=one))
        self.assertTrue(d.allowed)
        self.assertEqual((d.statuses[0].limit.requests, d.statuses[0].limit.window), (1, 30.0))
        d = rl.should_rate_limit(DOMAIN, D("user", user, limit=one))
        self.assertFalse(d.allowed)

    def test_native_invalid_argument(self):
        rl = ratelimitd.Client(self.channel, timeout=5)
        ds = D("user", fresh_user("invalid"), limit=LimitOverride(1, 0.0001))  # a window under 1 ms
        with self.assertRaises(ratelimitd.InvalidRequest) as cm:  # refused by the client itself
            rl.should_rate_limit(DOMAIN, ds)
        self.assertIsNone(cm.exception.rpc_error)
        # With the client's check off, ratelimitd refuses it: INVALID_ARGUMENT
        # raises InvalidRequest too, holding ratelimitd's answer.
        with mock.patch("ratelimitd.client._check_override"):
            with self.assertRaises(ratelimitd.InvalidRequest) as cm:
                rl.should_rate_limit(DOMAIN, ds)
        self.assertEqual(cm.exception.rpc_error.code(), grpc.StatusCode.INVALID_ARGUMENT)
        self.assertIn("limit override", str(cm.exception))

    def test_native_async(self):
        user = fresh_user("async")

        async def main():
            async with grpc.aio.insecure_channel(daemon.addr) as ch:
                rl = ratelimitd.AsyncClient(ch, timeout=5)
                return [await rl.should_rate_limit(DOMAIN, D("user", user)) for _ in range(LIMIT + 1)]
        ds = asyncio.run(main())
        self.assertEqual([d.allowed for d in ds], [True] * LIMIT + [False])
        self.assertTrue(all(d.error is None for d in ds))

    def test_envoy(self):
        stub = envoy_rls.RateLimitServiceStub(self.channel)
        user = fresh_user("envoy")
        req = envoy_rls.RateLimitRequest(domain=DOMAIN, descriptors=[
            envoy_rls.RateLimitDescriptor(entries=[envoy_rls.RateLimitDescriptor.Entry(key="user", value=user)])])
        Code = envoy_rls.RateLimitResponse.Code
        Unit = envoy_rls.RateLimitResponse.RateLimit.Unit
        for i in range(LIMIT + 1):
            resp = stub.ShouldRateLimit(req, timeout=5)
            want = "OK" if i < LIMIT else "OVER_LIMIT"
            self.assertEqual(Code.Name(resp.overall_code), want, f"call {i + 1}")
            st = resp.statuses[0]
            self.assertEqual(Code.Name(st.code), want)
            self.assertEqual((st.current_limit.requests_per_unit, Unit.Name(st.current_limit.unit)),
                             (LIMIT, "MINUTE"))
            if i < LIMIT:
                self.assertEqual(st.limit_remaining, LIMIT - 1 - i)

    def test_asgi(self):
        user = fresh_user("asgi")
        calls = []

        async def app(scope, receive, send):
            calls.append(scope["path"])
            await send({"type": "http.response.start", "status": 200, "headers": []})
            await send({"type": "http.response.body", "body": b"ok"})

        async def main():
            async with grpc.aio.insecure_channel(daemon.addr) as ch:
                mw = RateLimitMiddleware(app, ratelimitd.AsyncClient(ch, timeout=5), DOMAIN,
                                         descriptors=lambda scope: [D("user", user)])
                out = []
                for _ in range(LIMIT + 1):
                    sent = []

                    async def send(m):
                        sent.append(m)
                    scope = {"type": "http", "method": "GET", "path": "/x", "headers": [],
                             "client": ("127.0.0.1", 1)}
                    await mw(scope, None, send)
                    out.append(sent)
                return out
        out = asyncio.run(main())
        self.assertEqual(len(calls), LIMIT)
        self.assertEqual([m[0]["status"] for m in out], [200] * LIMIT + [429])
        last = dict((bytes(n).decode(), bytes(v).decode()) for n, v in out[-1][0]["headers"])
        self.assertIn("ratelimit", last)
        self.assertIn("ratelimit-policy", last)
        self.assertGreaterEqual(int(last["retry-after"]), 1)
        body = json.loads(out[-1][1]["body"])
        self.assertEqual(body["violated-policies"], ["per_user"])

    def test_example_program(self):
        example = os.path.join(EXAMPLES, "python", "client.py")
        if not os.path.exists(os.path.join(EXAMPLES, "config.yaml")) or not os.path.exists(example):
            self.skipTest("examples/ not found beside the tests")
        out = subprocess.run([sys.executable, example, daemon.addr, fresh_user("example")],
                             capture_output=True, text=True, timeout=60)
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertTrue(out.stdout.startswith("allowed\n"), out.stdout)
        self.assertIn("limit burst (10 per 1 s): ", out.stdout)
        self.assertIn("RateLimit", out.stdout)


if __name__ == "__main__":
    unittest.main()
