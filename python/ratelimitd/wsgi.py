"""WSGI middleware (PEP 3333) asking ratelimitd whether each HTTP request
may proceed: Flask, Django's WSGI handler, Pyramid, Bottle... It is
ratelimitd.asgi.RateLimitMiddleware for WSGI, with the same options and
answers; key functions get the WSGI environ.

    import grpc, ratelimitd
    from ratelimitd.wsgi import RateLimitMiddleware

    channel = grpc.insecure_channel("ratelimitd:8081")
    app.wsgi_app = RateLimitMiddleware(app.wsgi_app, ratelimitd.Client(channel), "edge",
                                       trusted_proxies=["10.0.0.0/8"])  # Flask
"""

from __future__ import annotations

import inspect
import ipaddress
import logging
from typing import Any, Callable, Iterable, List, Optional, Sequence, Tuple, Union

from .asgi import IPAddress, Network, _x_ratelimit, attribution, client_ip, problem
from ._common import seconds
from .client import AsyncClient, D, Decision, Descriptor, InvalidRequest, UnencodableValue

__all__ = ["RateLimitMiddleware", "environ_client_ip"]

Environ = dict
StartResponse = Callable[..., Any]
#: The signature of key_error_handler: (environ, start_response, exception),
#: returning the response body, as a WSGI application does.
KeyErrorHandler = Callable[[Environ, StartResponse, Exception], Iterable[bytes]]


def _scope(environ: Environ) -> dict:
    """The parts of an ASGI scope that client_ip reads, from environ: the
    peer and the request's header fields."""
    headers = []
    for k, v in environ.items():
        if k.startswith("HTTP_"):
            headers.append((k[5:].replace("_", "-").lower().encode("latin-1"), str(v).encode("latin-1", "replace")))
    peer = environ.get("REMOTE_ADDR")
    return {"client": (peer, 0) if peer else None, "headers": headers}


def environ_client_ip(environ: Environ, header: str = "X-Forwarded-For",
                      trusted: Sequence[Network] = ()) -> Optional[IPAddress]:
    """ratelimitd.asgi.client_ip for a WSGI environ: REMOTE_ADDR, or the
    right-most untrusted address of header when the peer is trusted. (A
    WSGI server joins repeated fields with commas, as the list needs.)"""
    return client_ip(_scope(environ), header, trusted)


class RateLimitMiddleware:
    """WSGI middleware: asks ratelimitd, under the rules of domain, whether
    each HTTP request may proceed, before calling app.

    client: a blocking ratelimitd.Client, a quota mode's
    ratelimitd.quota.Quota (which decides locally), or anything whose
    should_rate_limit(domain, *descriptors) returns a Decision (such as
    ratelimitd.testing.FakeClient). An AsyncClient is refused: WSGI is
    synchronous.

    The descriptors, options and answers are those of
    ratelimitd.asgi.RateLimitMiddleware, with the environ in place of the
    scope: [api_key=<header>] (api_key_header), [remote_address=<client
    network>] (client_ip, trusted_proxies, proxy_header, ipv4_prefix,
    ipv6_prefix: REMOTE_ADDR, or the right-most untrusted address of the
    proxy header when REMOTE_ADDR is a trusted proxy), [path=<route>,
    method=<method>] (route: True for PATH_INFO, or a function of the
    environ), then descriptors(environ); the default set is client_ip and
    route. skip(environ) -> True passes a request unasked. A key function
    that raises: 400 (key_error_handler(environ, start_response, exc)
    answers instead). Allowed: ratelimitd's headers are added to the
    application's (its own win). Refused: 429, Retry-After and an
    application/problem+json body. ratelimitd failed and the policy
    refused: 503. A malformed request: 500, logged.
    """

    def __init__(
        self,
        app,
        client,
        domain: str,
        *,
        api_key_header: Optional[str] = None,
        client_ip: bool = False,
        trusted_proxies: Iterable[Union[str, Network]] = (),
        proxy_header: str = "X-Forwarded-For",
        ipv4_prefix: int = 32,
        ipv6_prefix: int = 64,
        route: Union[bool, Callable[[Environ], str]] = False,
        descriptors: Optional[Callable[[Environ], Sequence[Descriptor]]] = None,
        skip: Optional[Callable[[Environ], bool]] = None,
        key_error_handler: Optional[KeyErrorHandler] = None,
        x_ratelimit_headers: bool = False,
        logger: Optional[logging.Logger] = None,
    ):
        m = getattr(client, "should_rate_limit", None)
        if isinstance(client, AsyncClient) or not callable(m) or inspect.iscoroutinefunction(m):
            raise TypeError(f"ratelimitd: the WSGI RateLimitMiddleware's client is a {type(client).__name__}: "
                            "want a blocking ratelimitd.Client or a ratelimitd.quota.Quota (an asyncio client's "
                            "coroutines cannot serve WSGI)")
        self.app = app
        self.client = client
        self.domain = domain
        self._api_key = "HTTP_" + api_key_header.upper().replace("-", "_") if api_key_header else None
        self._trusted, self._client_ip, route = attribution(api_key_header, client_ip, trusted_proxies, route,
                                                            descriptors, ipv4_prefix, ipv6_prefix)
        self._proxy_header = proxy_header
        self._v4, self._v6 = ipv4_prefix, ipv6_prefix
        self._route = route
        self._descriptors = descriptors
        self._skip = skip
        self._key_error = key_error_handler or self._bad_request
        self._x_ratelimit = x_ratelimit_headers
        self._log = logger or logging.getLogger("ratelimitd")

    def _bad_request(self, environ: Environ, start_response: StartResponse, exc: Exception) -> Iterable[bytes]:
        self._log.warning("rate limit key function failed: %s %r: %r", environ.get("REQUEST_METHOD", ""),
                          environ.get("PATH_INFO", ""), exc, exc_info=exc)
        return _plain(start_response, "400 Bad Request", "rate limit: cannot attribute the request")

    def _request_descriptors(self, environ: Environ) -> List[Descriptor]:
        ds: List[Descriptor] = []
        if self._api_key is not None:
            v = environ.get(self._api_key)
            if v:
                ds.append(D("api_key", v.encode("latin-1", "replace") if isinstance(v, str) else v))
        if self._client_ip:
            ip = environ_client_ip(environ, self._proxy_header, self._trusted)
            if ip is not None:
                bits = self._v4 if ip.version == 4 else self._v6
                ds.append(D("remote_address", str(ipaddress.ip_network((ip, bits), strict=False).network_address)))
        if self._route:
            r = self._route(environ) if callable(self._route) else _path(environ)
            ds.append(D("path", r, "method", environ.get("REQUEST_METHOD", "")))
        if self._descriptors is not None:
            ds.extend(self._descriptors(environ))
        return ds

    def __call__(self, environ: Environ, start_response: StartResponse) -> Iterable[bytes]:
        try:
            if self._skip is not None and self._skip(environ):
                return self.app(environ, start_response)
            ds = self._request_descriptors(environ)
        except Exception as e:  # a key function's failure: neither counted nor passed on
            return self._key_error(environ, start_response, e)
        if not ds:
            return self.app(environ, start_response)
        try:
            d = self.client.should_rate_limit(self.domain, *ds)
        except UnencodableValue as e:  # the request's own bytes: not attributable, not a fault of ours
            return self._key_error(environ, start_response, e)
        except InvalidRequest as e:
            self._log.error("rate limit request malformed: domain=%r err=%s", self.domain, e)
            return _plain(start_response, "500 Internal Server Error", "rate limit: malformed rate limit request")
        if not isinstance(d, Decision):
            raise TypeError(f"ratelimitd: the should_rate_limit of the WSGI RateLimitMiddleware's client returned "
                            f"a {type(d).__name__}, not a Decision")
        if d.error is not None and not d.allowed:
            return _plain(start_response, "503 Service Unavailable", "rate limit service unavailable")
        headers = [(n, v) for n, v in d.headers if n.lower() != "retry-after"]
        if self._x_ratelimit:
            headers.extend((n.decode("latin-1"), v.decode("latin-1")) for n, v in _x_ratelimit(d.statuses))
        if not d.allowed:
            body = problem(d)
            start_response("429 Too Many Requests", headers + [
                ("Retry-After", str(max(seconds(d.retry_after), 1))),
                ("Content-Type", "application/problem+json"),
                ("X-Content-Type-Options", "nosniff"),
                ("Content-Length", str(len(body))),
            ])
            return [body]
        if not headers:
            return self.app(environ, start_response)

        def start_with_headers(status: str, own: List[Tuple[str, str]], exc_info: Any = None):
            names = {n.lower() for n, _ in own}
            merged = [h for h in headers if h[0].lower() not in names] + list(own)
            if exc_info is None:
                return start_response(status, merged)
            return start_response(status, merged, exc_info)

        return self.app(environ, start_with_headers)


def _path(environ: Environ) -> str:
    """The request's path, as the ASGI middleware's scope["path"]: decoded
    from the WSGI string (bytes as latin-1) as UTF-8."""
    p = environ.get("SCRIPT_NAME", "") + environ.get("PATH_INFO", "")
    try:
        return p.encode("latin-1").decode("utf-8")
    except UnicodeError:
        return p


def _plain(start_response: StartResponse, status: str, msg: str) -> List[bytes]:
    """An answer as Go's http.Error writes it."""
    body = (msg + "\n").encode()
    start_response(status, [("Content-Type", "text/plain; charset=utf-8"), ("X-Content-Type-Options", "nosniff"),
                            ("Content-Length", str(len(body)))])
    return [body]
