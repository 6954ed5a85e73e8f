"""The ASGI middleware, driven by hand-written ASGI calls, asking an
in-process server with scripted answers over real gRPC on loopback."""

import asyncio
import ipaddress
import json
import logging
import unittest

import grpc

import ratelimitd
from ratelimitd import D, Descriptor
from ratelimitd.asgi import QUOTA_EXCEEDED, RateLimitMiddleware, client_ip, trusted_network
from ratelimitd.testing import FakeAsyncClient, FakeClient, refuse

from scripted import Server, ok, over, status, wait_state

TRUSTED = [ipaddress.ip_network("10.0.0.0/8"), ipaddress.ip_network("2001:db8:ffff::/48")]


class App:
    """An ASGI application answering 200 "ok", counting its calls; it sets
    its own headers, given."""

    def __init__(self, headers=()):
        self.calls = 0
        self.headers = list(headers)

    async def __call__(self, scope, receive, send):
        self.calls += 1
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", b"text/plain")] + self.headers})
        await send({"type": "http.response.body", "body": b"ok"})


def http_scope(method="GET", path="/", client=("192.0.2.1", 4711), headers=()):
    return {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": method,
            "scheme": "http", "path": path, "raw_path": path.encode(), "query_string": b"",
            "root_path": "", "client": client, "server": ("127.0.0.1", 80),
            "headers": [(n.lower().encode("latin-1"), v.encode("latin-1") if isinstance(v, str) else v)
                        for n, v in headers]}


class Response:
    def __init__(self, messages):
        start = messages[0]
        assert start["type"] == "http.response.start", messages
        self.status = start["status"]
        self.header_list = [(bytes(n).decode("latin-1"), bytes(v).decode("latin-1")) for n, v in start["headers"]]
        self.body = b"".join(m.get("body", b"") for m in messages[1:])

    def get(self, name):
        vals = self.values(name)
        return vals[0] if vals else None

    def values(self, name):
        return [v for n, v in self.header_list if n.lower() == name.lower()]


class MiddlewareTest(unittest.TestCase):
    def setUp(self):
        self.server = Server().__enter__()
        self.addCleanup(self.server.__exit__)

    def call(self, app, scopes, client_opts=None, **opts):
        """Runs each scope through RateLimitMiddleware(app, ...) in one event
        loop and returns the responses (None for a scope that sent none)."""
        async def main():
            channels = []

            def new_client():
                ch = grpc.aio.insecure_channel(self.server.addr)
                channels.append(ch)
                return ratelimitd.AsyncClient(ch, **(client_opts or {"timeout": 30}))
            mw = RateLimitMiddleware(app, new_client, "web", **opts)
            out = []
            for scope in scopes:
                sent = []

                async def receive():
                    return {"type": "http.request", "body": b"", "more_body": False}

                async def send(m):
                    sent.append(m)
                await mw(scope, receive, send)
                out.append(Response(sent) if sent else None)
            for ch in channels:
                await ch.close()
            return out
        return asyncio.run(main())

    def entries(self, i=0):
        return [[(e.key, e.value or e.raw_value) for e in d.entries] for d in self.server.requests[i].descriptors]

    def test_allowed_passes_the_headers(self):
        self.server.answer(ok(status(name="n", requests=5, window=60, remaining=4),
                              headers=[("RateLimit-Policy", '"n";q=5;w=60'), ("RateLimit", '"n";r=4;t=60'),
                                       ("X-Own", "server")]))
        app = App(headers=[(b"x-own", b"app")])
        [r] = self.call(app, [http_scope(path="/items/1", client=("192.0.2.1", 1))])
        self.assertEqual(app.calls, 1)
        self.assertEqual(r.status, 200)
        self.assertEqual(r.body, b"ok")
        self.assertEqual(r.get("RateLimit-Policy"), '"n";q=5;w=60')
        self.assertEqual(r.get("RateLimit"), '"n";r=4;t=60')
        self.assertEqual(r.values("X-Own"), ["app"])  # the application's own header wins
        self.assertIsNone(r.get("X-RateLimit-Limit"))
        # The default set: the client's network, then the route.
        self.assertEqual(self.entries(), [[("remote_address", "192.0.2.1")],
                                          [("path", "/items/1"), ("method", "GET")]])
        self.assertEqual(self.server.requests[0].domain, "web")

    def test_refused(self):
        self.server.answer(over(
            status(over_limit=True, name="login", requests=1, window=60, reset=(59, 0), retry=(41, 200)),
            status(over_limit=True, name="login", requests=1, window=60, retry=(3, 0)),
            status(over_limit=True, name="<b>&", requests=1, window=60, retry=(1, 0)),
            status(over_limit=False, name="other", requests=9, window=60, remaining=3),
            headers=[("RateLimit-Policy", '"login";q=1;w=60'), ("RateLimit", '"login";r=0;t=59'),
                     ("Retry-After", "41")]))
        app = App()
        [r] = self.call(app, [http_scope(method="POST", path="/login")])
        self.assertEqual(app.calls, 0)
        self.assertEqual(r.status, 429)
        self.assertEqual(r.values("Retry-After"), ["42"])  # rounded up; ratelimitd's own is replaced
        self.assertEqual(r.get("Content-Type"), "application/problem+json")
        self.assertEqual(r.get("X-Content-Type-Options"), "nosniff")
        self.assertEqual(r.get("RateLimit"), '"login";r=0;t=59')
        self.assertEqual(r.get("RateLimit-Policy"), '"login";q=1;w=60')
        self.assertEqual(int(r.get("Content-Length")), len(r.body))
        # Byte for byte what Go's encoding/json writes.
        self.assertEqual(r.body, (
            '{"type":"https://iana.org/assignments/http-problem-types#quota-exceeded",'
            '"title":"Request cannot be satisfied as assigned quota has been exceeded",'
            '"status":429,"detail":"Too many requests; retry in 42 s.",'
            '"violated-policies":["login","\\u003cb\\u003e\\u0026"]}\n').encode())
        p = json.loads(r.body)
        self.assertEqual(p["type"], QUOTA_EXCEEDED)

    def test_refused_without_names_or_retry(self):
        self.server.answer(over(status(over_limit=True, limit=False)))
        [r] = self.call(App(), [http_scope()])
        self.assertEqual(r.status, 429)
        self.assertEqual(r.get("Retry-After"), "1")  # at least 1
        self.assertNotIn(b"violated-policies", r.body)
        self.assertIn(b'"detail":"Too many requests; retry in 1 s."', r.body)

    def test_x_ratelimit_headers(self):
        self.server.answer(ok(status(name="a", requests=10, window=60, remaining=7, reset=(30, 1)),
                              status(name="b", requests=5, window=60, remaining=2, reset=(10, 0)),
                              status(unlimited=True, remaining=4294967295, limit=False)),
                           over(status(over_limit=True, name="a", requests=10, window=60, retry=(2, 0), reset=(2, 0)),
                                status(over_limit=True, name="b", requests=5, window=60, retry=(9, 0), reset=(9, 0)),
                                status(name="c", requests=1, window=1, remaining=0)))
        r1, r2 = self.call(App(), [http_scope(), http_scope()], x_ratelimit_headers=True)
        self.assertEqual((r1.get("X-RateLimit-Limit"), r1.get("X-RateLimit-Remaining"), r1.get("X-RateLimit-Reset")),
                         ("5", "2", "10"))
        self.assertEqual((r2.status, r2.get("X-RateLimit-Limit"), r2.get("X-RateLimit-Reset")), (429, "5", "9"))

    def test_failure_policy(self):
        self.server.answer((grpc.StatusCode.UNAVAILABLE, "down"))
        app = App()
        [r] = self.call(app, [http_scope()])
        self.assertEqual((r.status, app.calls), (200, 1))
        self.assertIsNone(r.get("RateLimit"))

        self.server.answer((grpc.StatusCode.UNAVAILABLE, "down"))
        [r] = self.call(app, [http_scope()], client_opts={"timeout": 30, "fail_closed": True})
        self.assertEqual((r.status, app.calls), (503, 1))
        self.assertEqual(r.body, b"rate limit service unavailable\n")
        self.assertEqual(r.get("Content-Type"), "text/plain; charset=utf-8")
        self.assertIsNone(r.get("Retry-After"))

    def test_malformed_is_500_and_logged(self):
        app = App()
        with self.assertLogs("ratelimitd", logging.ERROR):
            [r] = self.call(app, [http_scope()], descriptors=lambda scope: [D("", "v")])
        self.assertEqual((r.status, app.calls), (500, 0))
        self.assertEqual(r.body, b"rate limit: malformed rate limit request\n")
        self.assertEqual(self.server.requests, [])

    def test_invalid_argument_from_server_is_500(self):
        self.server.answer((grpc.StatusCode.INVALID_ARGUMENT, "no such domain"))
        with self.assertLogs("ratelimitd", logging.ERROR):
            [r] = self.call(App(), [http_scope()], client_opts={"timeout": 30, "fail_closed": False})
        self.assertEqual(r.status, 500)

    def test_api_key_route_and_custom_descriptors(self):
        self.server.answer(ok(), ok())

        async def tenant(scope):
            return [Descriptor([("tenant", "acme"), ("plan", "gold")], hits=3)]
        app = App()
        self.call(app, [http_scope(method="DELETE", path="/items/42", headers=[("X-API-Key", b"k\xff")]),
                        http_scope(path="/items/43")],
                  api_key_header="X-API-Key", route=lambda scope: scope["path"].rsplit("/", 1)[0] + "/{id}",
                  descriptors=tenant)
        self.assertEqual(self.entries(0), [[("api_key", b"k\xff")],
                                           [("path", "/items/{id}"), ("method", "DELETE")],
                                           [("tenant", "acme"), ("plan", "gold")]])
        self.assertEqual(self.server.requests[0].descriptors[2].hits, 3)
        # No key: no api_key descriptor; no client IP without client_ip=True.
        self.assertEqual(self.entries(1)[0], [("path", "/items/{id}"), ("method", "GET")])

    def test_no_descriptors_passes_without_asking(self):
        app = App()
        [r] = self.call(app, [http_scope()], api_key_header="X-API-Key")
        self.assertEqual((r.status, app.calls), (200, 1))
        [r] = self.call(app, [http_scope(client=None)], client_ip=True)  # a Unix socket: no client IP
        self.assertEqual((r.status, app.calls), (200, 2))
        self.assertEqual(self.server.requests, [])

    def test_skip_and_other_scopes(self):
        app = App()
        self.call(app, [http_scope(path="/healthz")], skip=lambda scope: scope["path"] == "/healthz")
        self.assertEqual(app.calls, 1)

        seen = []

        async def other(scope, receive, send):
            seen.append(scope["type"])

        async def main():
            mw = RateLimitMiddleware(other, lambda: self.fail("no client wanted"), "web")
            await mw({"type": "lifespan"}, None, None)
            await mw({"type": "websocket", "path": "/ws", "headers": []}, None, None)
        asyncio.run(main())
        self.assertEqual(seen, ["lifespan", "websocket"])
        self.assertEqual(self.server.requests, [])

    def test_client_network(self):
        cases = [
            # (peer, X-Forwarded-For, trusted, prefixes, want)
            (("2001:db8:1:2:aaaa::1", 1), None, (), {}, "2001:db8:1:2::"),
            (("192.0.2.77", 1), "203.0.113.5", (), {}, "192.0.2.77"),  # untrusted peer: no header read
            (("10.0.0.1", 1), "203.0.113.5, 10.1.1.1", TRUSTED, {}, "203.0.113.5"),
            (("10.0.0.1", 1), "2001:db8:5:6:7::1", ["10.0.0.0/8"], {}, "2001:db8:5:6::"),
            (("::ffff:192.0.2.9", 1), None, (), {}, "192.0.2.9"),
            (("192.0.2.77", 1), None, (), {"ipv4_prefix": 24, "ipv6_prefix": 48}, "192.0.2.0"),
            (("2001:db8:1:2::1", 1), None, (), {"ipv4_prefix": 24, "ipv6_prefix": 48}, "2001:db8:1::"),
        ]
        for peer, xff, trusted, prefixes, want in cases:
            with self.subTest(peer=peer, xff=xff):
                n = len(self.server.requests)
                self.server.answer(ok())
                headers = [("X-Forwarded-For", xff)] if xff else []
                self.call(App(), [http_scope(client=peer, headers=headers)], client_ip=True,
                          trusted_proxies=trusted, **prefixes)
                self.assertEqual(self.entries(n), [[("remote_address", want)]])

    def test_trusted_proxies_turn_client_ip_on(self):
        # trusted_proxies means client_ip, which switches the default set
        # off: the route is not counted.
        self.server.answer(ok())
        self.call(App(), [http_scope(client=("10.0.0.1", 1), headers=[("X-Forwarded-For", "203.0.113.5")])],
                  trusted_proxies=["10.0.0.0/8"])
        self.assertEqual(self.entries(), [[("remote_address", "203.0.113.5")]])

    def test_ipv4_mapped_trusted_proxy(self):
        # A trusted proxy written IPv4-mapped, as dual-stack sockets show
        # peers, matches the peer (compared unmapped).
        for trusted in ("::ffff:10.0.0.5", "::ffff:10.0.0.0/104", "::ffff:a00:5"):
            for peer in ("10.0.0.5", "::ffff:10.0.0.5"):
                with self.subTest(trusted=trusted, peer=peer):
                    n = len(self.server.requests)
                    self.server.answer(ok())
                    self.call(App(), [http_scope(client=(peer, 1), headers=[("X-Forwarded-For", "203.0.113.5")])],
                              trusted_proxies=[trusted])
                    self.assertEqual(self.entries(n), [[("remote_address", "203.0.113.5")]])
        self.assertEqual(trusted_network("::ffff:10.0.0.0/104"), ipaddress.ip_network("10.0.0.0/8"))
        self.assertEqual(trusted_network(ipaddress.ip_network("::ffff:0:0/96")), ipaddress.ip_network("0.0.0.0/0"))
        self.assertEqual(trusted_network("2001:db8::/32"), ipaddress.ip_network("2001:db8::/32"))

    def test_key_function_errors_are_400(self):
        # A key function (route, descriptors, skip) that raises: 400 as the
        # Go middleware answers, logged at warning, ratelimitd not asked and
        # the application not called.
        def boom(scope):
            raise LookupError("no tenant")

        async def aboom(scope):
            raise LookupError("no tenant")
        for opts in ({"route": boom}, {"descriptors": boom}, {"descriptors": aboom}, {"skip": boom}):
            with self.subTest(opts=list(opts)):
                app = App()
                with self.assertLogs("ratelimitd", logging.WARNING) as logs:
                    [r] = self.call(app, [http_scope()], **opts)
                self.assertEqual((r.status, app.calls), (400, 0))
                self.assertEqual(r.body, b"rate limit: cannot attribute the request\n")
                self.assertEqual(r.get("Content-Type"), "text/plain; charset=utf-8")
                self.assertEqual([rec.levelno for rec in logs.records], [logging.WARNING])
                self.assertIn("no tenant", logs.output[0])
        self.assertEqual(self.server.requests, [])

    def test_key_error_handler(self):
        seen = []

        async def handler(scope, receive, send, exc):
            seen.append((scope["path"], exc))
            await send({"type": "http.response.start", "status": 401, "headers": []})
            await send({"type": "http.response.body", "body": b"who are you?"})
        err = PermissionError("bad token")

        def tenant(scope):
            raise err
        app = App()
        [r] = self.call(app, [http_scope(path="/x")], descriptors=tenant, key_error_handler=handler)
        self.assertEqual((r.status, r.body, app.calls), (401, b"who are you?", 0))
        self.assertEqual(seen, [("/x", err)])

    def test_client_kinds(self):
        # A blocking Client, or anything not a client, is refused when the
        # middleware is made (or the client function returns it), not on the
        # first request with "not callable".
        ch = grpc.insecure_channel(self.server.addr)
        self.addCleanup(ch.close)
        self.addCleanup(wait_state, ch, grpc.ChannelConnectivity.READY)  # before closing
        with self.assertRaisesRegex(TypeError, "blocking ratelimitd.Client"):
            RateLimitMiddleware(App(), ratelimitd.Client(ch), "web")
        with self.assertRaisesRegex(TypeError, "coroutine function"):
            RateLimitMiddleware(App(), FakeClient(), "web")
        with self.assertRaisesRegex(TypeError, "want an AsyncClient"):
            RateLimitMiddleware(App(), "127.0.0.1:8081", "web")

        async def main():
            mw = RateLimitMiddleware(App(), lambda: FakeClient(), "web")
            await mw(http_scope(), None, None)
        with self.assertRaisesRegex(TypeError, "coroutine function"):
            asyncio.run(main())

    def test_fake_async_client(self):
        # FakeAsyncClient serves as the middleware's client, given as is.
        fake = FakeAsyncClient(refuse(30))
        app = App()
        sent = []

        async def main():
            mw = RateLimitMiddleware(app, fake, "web", route=True)

            async def send(m):
                sent.append(m)
            await mw(http_scope(path="/a"), None, send)
            await mw(http_scope(path="/b"), None, send)
        asyncio.run(main())
        self.assertEqual(Response(sent[:2]).status, 429)
        self.assertEqual(Response(sent[:2]).get("Retry-After"), "30")
        self.assertEqual(Response(sent[2:]).status, 200)
        self.assertEqual(app.calls, 1)
        self.assertEqual([c.descriptors for c in fake.calls],
                         [(D("path", "/a", "method", "GET"),), (D("path", "/b", "method", "GET"),)])

    def test_bad_prefix(self):
        for v4, v6 in ((0, 64), (33, 64), (32, 0), (32, 129)):
            with self.assertRaises(ValueError):
                RateLimitMiddleware(App(), lambda: None, "web", ipv4_prefix=v4, ipv6_prefix=v6)


class ClientIPTest(unittest.TestCase):
    """client_ip, with the Go middleware's ClientIP cases."""

    def test_cases(self):
        cases = [
            ("untrusted peer ignores XFF", "192.0.2.1:80", "X-Forwarded-For", "203.0.113.1", "192.0.2.1"),
            ("no header", "10.0.0.1:80", "X-Forwarded-For", "", "10.0.0.1"),
            ("trusted peer", "10.0.0.1:80", "X-Forwarded-For", "203.0.113.1", "203.0.113.1"),
            ("right-most untrusted", "10.0.0.1:80", "X-Forwarded-For", "198.51.100.1, 203.0.113.1, 10.1.1.1",
             "203.0.113.1"),
            ("all trusted", "10.0.0.1:80", "X-Forwarded-For", "10.2.2.2, 10.1.1.1", "10.2.2.2"),
            ("garbage stops", "10.0.0.1:80", "X-Forwarded-For", "203.0.113.1, nonsense, 10.1.1.1", "10.1.1.1"),
            ("ports and brackets", "10.0.0.1:80", "X-Forwarded-For", "[2001:db8::1]:4711", "2001:db8::1"),
            ("IPv4-mapped", "[::ffff:10.0.0.1]:80", "X-Forwarded-For", "::ffff:203.0.113.1", "203.0.113.1"),
            ("zone dropped", "10.0.0.1:80", "X-Forwarded-For", "fe80::1%eth0", "fe80::1"),
            ("peer without port", "10.0.0.1", "X-Forwarded-For", "203.0.113.1", "203.0.113.1"),
            ("peer unknown", "@", "X-Forwarded-For", "203.0.113.1", None),
            ("trusted IPv6 peer", "[2001:db8:ffff::1]:80", "X-Forwarded-For", "2001:db8::2", "2001:db8::2"),
            ("Forwarded quoted IPv6", "10.0.0.1:80", "Forwarded", 'for="[2001:db8::1]:4711"', "2001:db8::1"),
            ("Forwarded pairs", "10.0.0.1:80", "Forwarded", "for=192.0.2.60;proto=http;by=203.0.113.43",
             "192.0.2.60"),
            ("Forwarded elements", "10.0.0.1:80", "Forwarded", 'for=198.51.100.17, For="10.1.1.1";proto="a,b"',
             "198.51.100.17"),
            ("Forwarded unknown stops", "10.0.0.1:80", "Forwarded", "for=198.51.100.17, for=unknown, for=10.1.1.1",
             "10.1.1.1"),
            ("Forwarded obfuscated", "10.0.0.1:80", "Forwarded", "for=_hidden", "10.0.0.1"),
            ("Forwarded without for", "10.0.0.1:80", "Forwarded", "by=10.1.1.1", "10.0.0.1"),
            ("Forwarded unterminated", "10.0.0.1:80", "Forwarded", 'for="198.51.100.17', "10.0.0.1"),
            ("Forwarded ignores XFF", "10.0.0.1:80", "Forwarded", "", "10.0.0.1"),
        ]
        for name, remote, header, value, want in cases:
            with self.subTest(name):
                headers = [] if header == "X-Forwarded-For" else [("X-Forwarded-For", "192.0.2.99")]
                if value:
                    headers.append((header, value))
                got = client_ip(http_scope(client=(remote, 0), headers=headers), header, TRUSTED)
                self.assertEqual(None if got is None else str(got), want)

    def test_header_lines(self):
        scope = http_scope(client=("10.0.0.1", 1), headers=[
            ("Forwarded", "for=198.51.100.1"), ("Forwarded", "for=203.0.113.1, for=10.9.9.9")])
        self.assertEqual(str(client_ip(scope, "Forwarded", TRUSTED)), "203.0.113.1")


if __name__ == "__main__":
    unittest.main()
