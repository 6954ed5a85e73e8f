"""The grpc.aio server interceptor, on a real grpc.aio server with a
unary and a streaming method, and the other additions of the asyncio
side: the ASGI middleware over a Quota, AsyncClient refusing a blocking
channel, the Algorithm enum."""

import asyncio
import unittest

import grpc

import ratelimitd
from ratelimitd import D
from ratelimitd.asgi import RateLimitMiddleware
from ratelimitd.grpc_aio import RateLimitInterceptor
from ratelimitd.quota import AsyncQuota
from ratelimitd.testing import FakeAsyncClient, fail, fail_closed, refuse
from test_quota import FakeRLQS, action, assigned, entries_of, serve

ident = dict(request_deserializer=None, response_serializer=None)


async def echo(request, context):
    return request


async def count(request, context):
    for i in range(3):
        yield bytes([i])


async def start(interceptor):
    server = grpc.aio.server(interceptors=[interceptor])
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler("test.Echo", {
        "Say": grpc.unary_unary_rpc_method_handler(echo, **ident),
        "Count": grpc.unary_stream_rpc_method_handler(count, **ident),
    }),))
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    return server, f"127.0.0.1:{port}"


class InterceptorTest(unittest.TestCase):
    def test_decisions(self):
        fake = FakeAsyncClient()

        async def main():
            server, addr = await start(RateLimitInterceptor(fake, "api", metadata_keys=["X-API-Key"],
                                                            peer_address=True,
                                                            descriptors=lambda m, ctx: [D("plan", "free")]))
            try:
                async with grpc.aio.insecure_channel(addr) as ch:
                    say = ch.unary_unary("/test.Echo/Say")
                    cnt = ch.unary_stream("/test.Echo/Count")
                    self.assertEqual(await say(b"hi", metadata=(("x-api-key", "k1"),)), b"hi")
                    self.assertEqual([r async for r in cnt(b"")], [b"\x00", b"\x01", b"\x02"])
                    codes = []
                    for answer in (refuse(2), fail_closed(), fail(ratelimitd.InvalidRequest("bad"))):
                        fake.push(answer)
                        with self.assertRaises(grpc.aio.AioRpcError) as cm:
                            await say(b"hi")
                        codes.append(cm.exception.code())
                        if answer is not None and len(codes) == 1:
                            self.assertIn(("retry-after", "2"), tuple(cm.exception.trailing_metadata()))
                    fake.push(refuse(1))
                    with self.assertRaises(grpc.aio.AioRpcError) as cm:
                        [r async for r in cnt(b"")]
                    codes.append(cm.exception.code())
                    return codes
            finally:
                await server.stop(None)

        with self.assertLogs("ratelimitd", "ERROR"):
            codes = asyncio.run(main())
        S = grpc.StatusCode
        self.assertEqual(codes, [S.RESOURCE_EXHAUSTED, S.UNAVAILABLE, S.INTERNAL, S.RESOURCE_EXHAUSTED])
        first = fake.calls[0]
        self.assertEqual(first.domain, "api")
        self.assertEqual(list(first.descriptors), [D("method", "/test.Echo/Say"), D("x-api-key", "k1"),
                                                   D("remote_address", "127.0.0.1"), D("plan", "free")])
        self.assertEqual(list(fake.calls[1].descriptors)[0], D("method", "/test.Echo/Count"))

    def test_refuses_the_blocking_client(self):
        ch = grpc.insecure_channel("127.0.0.1:1")
        self.addCleanup(ch.close)
        with self.assertRaises(TypeError):
            RateLimitInterceptor(ratelimitd.Client(ch), "api")

    def test_quota(self):
        rlqs = FakeRLQS(lambda u: action(entries_of(u), max_tokens=1, per_fill=1, fill=3600, ttl=60))
        rlqs_addr = serve(self, rlqs)

        async def main():
            async with grpc.aio.insecure_channel(rlqs_addr) as qch:
                async with AsyncQuota(qch, "api", reporting_interval=3600) as q:
                    q.allow(D("method", "/test.Echo/Say"))
                    while not assigned(q, D("method", "/test.Echo/Say")):
                        await asyncio.sleep(0.002)
                    server, addr = await start(RateLimitInterceptor(q, "api"))
                    try:
                        async with grpc.aio.insecure_channel(addr) as ch:
                            say = ch.unary_unary("/test.Echo/Say")
                            self.assertEqual(await say(b"1"), b"1")
                            with self.assertRaises(grpc.aio.AioRpcError) as cm:
                                await say(b"2")
                            return cm.exception.code()
                    finally:
                        await server.stop(None)

        self.assertEqual(asyncio.run(main()), grpc.StatusCode.RESOURCE_EXHAUSTED)


class ASGIQuotaTest(unittest.TestCase):
    def test_asgi_takes_quotas(self):
        rlqs = FakeRLQS(lambda u: action(entries_of(u), max_tokens=1, per_fill=1, fill=3600, ttl=60))
        addr = serve(self, rlqs)
        calls = []

        async def app(scope, receive, send):
            calls.append(scope["path"])
            await send({"type": "http.response.start", "status": 200, "headers": []})
            await send({"type": "http.response.body", "body": b"ok"})

        async def main():
            async with grpc.aio.insecure_channel(addr) as ch:
                async with AsyncQuota(ch, "edge", reporting_interval=3600, fail_closed=True) as q:
                    mw = RateLimitMiddleware(app, lambda: q, "edge", descriptors=lambda s: [D("tenant", "acme")])
                    statuses = []
                    for i in range(3):
                        sent = []

                        async def send(m):
                            sent.append(m)
                        await mw({"type": "http", "method": "GET", "path": "/x", "headers": [],
                                  "client": ("127.0.0.1", 1)}, None, send)
                        statuses.append(sent[0]["status"])
                        if i == 0:
                            while not assigned(q, D("tenant", "acme")):
                                await asyncio.sleep(0.002)
                    return statuses

        self.assertEqual(asyncio.run(main()), [503, 200, 429])
        self.assertEqual(calls, ["/x"])


class APITest(unittest.TestCase):
    def test_async_client_refuses_a_blocking_channel(self):
        ch = grpc.insecure_channel("127.0.0.1:1")
        self.addCleanup(ch.close)
        with self.assertRaisesRegex(TypeError, "grpc.aio channel"):
            ratelimitd.AsyncClient(ch)
        ratelimitd.Client(ch)  # the blocking one takes it

    def test_algorithm_enum(self):
        A = ratelimitd.Algorithm
        self.assertEqual([a.value for a in A], ["sliding_window", "fixed_window", "sliding_log", "token_bucket",
                                                "gcra", "concurrency"])
        self.assertEqual(A.GCRA, "gcra")
        self.assertEqual(f"{A.TOKEN_BUCKET}", "token_bucket")
        self.assertEqual(str(A.SLIDING_LOG), "sliding_log")
        self.assertIs(A("fixed_window"), A.FIXED_WINDOW)


if __name__ == "__main__":
    unittest.main()
