"""The WSGI middleware, driven as a WSGI server drives it (PEP 3333), with
fake clients and with a Quota over a scripted RLQS server."""

import json
import unittest

import grpc

import ratelimitd
from ratelimitd import D
from ratelimitd.quota import Quota
from ratelimitd.testing import FakeClient, FakeAsyncClient, allow, decide, fail, fail_closed, fail_open, refuse
from ratelimitd.wsgi import RateLimitMiddleware
from test_quota import FakeRLQS, action, assigned, entries_of, serve, wait_for


def app_of(calls):
    def app(environ, start_response):
        calls.append(environ["PATH_INFO"])
        start_response("200 OK", [("Content-Type", "text/plain"), ("RateLimit", "own")])
        return [b"ok"]
    return app


def request(mw, path="/x", method="GET", addr="192.0.2.1", **headers):
    environ = {"REQUEST_METHOD": method, "PATH_INFO": path, "SCRIPT_NAME": "", "REMOTE_ADDR": addr,
               "wsgi.url_scheme": "http"}
    environ.update(("HTTP_" + k.upper(), v) for k, v in headers.items())
    got = {}

    def start_response(status, headers, exc_info=None):
        got["status"], got["headers"] = status, headers

    body = b"".join(mw(environ, start_response))
    return got["status"], dict((n.lower(), v) for n, v in got["headers"]), body


class WSGITest(unittest.TestCase):
    def test_descriptors_and_allowed(self):
        calls = []
        fake = FakeClient(decide(ratelimitd.Decision(allowed=True, headers=(("RateLimit", "theirs"),
                                                                             ("RateLimit-Policy", "p")))))
        mw = RateLimitMiddleware(app_of(calls), fake, "edge", api_key_header="X-API-Key", client_ip=True,
                                 trusted_proxies=["10.0.0.0/8"], route=True)
        status, headers, body = request(mw, addr="10.1.1.1", x_api_key="k1", x_forwarded_for="2001:db8:1:2::7, 10.0.0.3")
        self.assertEqual((status, body), ("200 OK", b"ok"))
        self.assertEqual(headers["ratelimit"], "own", "the application's header wins")
        self.assertEqual(headers["ratelimit-policy"], "p")
        self.assertEqual(fake.calls[0].domain, "edge")
        self.assertEqual(list(fake.calls[0].descriptors),
                         [D("api_key", b"k1"), D("remote_address", "2001:db8:1:2::"), D("path", "/x", "method", "GET")])
        self.assertEqual(calls, ["/x"])

    def test_refused_failed_malformed_and_key_errors(self):
        calls = []
        fake = FakeClient()
        mw = RateLimitMiddleware(app_of(calls), fake, "edge")
        fake.push(refuse(2.5))
        status, headers, body = request(mw)
        self.assertEqual(status, "429 Too Many Requests")
        self.assertEqual(headers["retry-after"], "3")
        self.assertEqual(headers["content-type"], "application/problem+json")
        self.assertEqual(json.loads(body)["violated-policies"], ["remote_address", "path.method"])
        fake.push(fail_closed())
        self.assertEqual(request(mw)[0], "503 Service Unavailable")
        fake.push(fail_open())
        self.assertEqual(request(mw)[0], "200 OK")
        fake.push(fail(ratelimitd.InvalidRequest("bad")))
        with self.assertLogs("ratelimitd", "ERROR"):
            self.assertEqual(request(mw)[0], "500 Internal Server Error")
        self.assertEqual(calls, ["/x"])

        def broken(environ):
            raise RuntimeError("no tenant")
        mw = RateLimitMiddleware(app_of(calls), FakeClient(allow()), "edge", descriptors=broken)
        with self.assertLogs("ratelimitd", "WARNING"):
            self.assertEqual(request(mw)[0], "400 Bad Request")
        mw = RateLimitMiddleware(app_of(calls), fake, "edge", skip=lambda e: e["PATH_INFO"] == "/healthz")
        n = len(fake.calls)
        self.assertEqual(request(mw, path="/healthz")[0], "200 OK")
        self.assertEqual(len(fake.calls), n, "a skipped request was asked about")

    def test_refuses_async_clients(self):
        with self.assertRaises(TypeError):
            RateLimitMiddleware(app_of([]), FakeAsyncClient(), "edge")
        with self.assertRaises(TypeError):
            RateLimitMiddleware(app_of([]), object(), "edge")

    def test_quota(self):
        # A Quota decides each request locally: a token bucket of 2.
        fake = FakeRLQS(lambda u: action(entries_of(u), max_tokens=2, per_fill=1, fill=3600, ttl=60))
        ch = grpc.insecure_channel(serve(self, fake))
        self.addCleanup(ch.close)
        q = Quota(ch, "edge", reporting_interval=3600, fail_closed=True)
        self.addCleanup(q.close)
        calls = []
        mw = RateLimitMiddleware(app_of(calls), q, "edge", descriptors=lambda e: [D("tenant", "acme")],
                                 api_key_header=None, client_ip=False)
        self.assertEqual(request(mw)[0], "503 Service Unavailable", "before the first assignment: fail closed")
        wait_for(self, "the assignment", lambda: assigned(q, D("tenant", "acme")))
        got = [request(mw) for _ in range(3)]
        self.assertEqual([s for s, _, _ in got], ["200 OK", "200 OK", "429 Too Many Requests"])
        self.assertGreaterEqual(int(got[2][1]["retry-after"]), 3000)
        self.assertEqual(len(calls), 2)

    def test_quota_unencodable_header(self):
        # A header whose bytes are not UTF-8 cannot be a Quota's bucket id:
        # the request is not attributable (400, a warning), not a fault of
        # the configuration (500, an error).
        fake = FakeRLQS(lambda u: action(entries_of(u), max_tokens=2, per_fill=1, fill=3600, ttl=60))
        ch = grpc.insecure_channel(serve(self, fake))
        self.addCleanup(ch.close)
        q = Quota(ch, "edge", reporting_interval=3600)
        self.addCleanup(q.close)
        calls = []
        mw = RateLimitMiddleware(app_of(calls), q, "edge", api_key_header="X-API-Key", client_ip=False)
        with self.assertLogs("ratelimitd", "WARNING") as logs:
            self.assertEqual(request(mw, x_api_key="caf\xe9")[0], "400 Bad Request")
        self.assertFalse([r for r in logs.records if r.levelname == "ERROR"], "logged as an error")
        self.assertEqual(calls, [])


if __name__ == "__main__":
    unittest.main()
