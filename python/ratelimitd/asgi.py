"""ASGI middleware asking ratelimitd whether each HTTP request may proceed.

It mirrors the Go client's net/http middleware (client.HTTPMiddleware) and
depends on no web framework: wrap any ASGI 3 application (Starlette,
FastAPI, Django's ASGI handler, Quart...).

    from ratelimitd import AsyncClient
    from ratelimitd.asgi import RateLimitMiddleware

    app = RateLimitMiddleware(app, lambda: AsyncClient(grpc.aio.insecure_channel("ratelimitd:8081")),
                              "edge", trusted_proxies=["10.0.0.0/8"])
"""

from __future__ import annotations

import inspect
import ipaddress
import json
import logging
from typing import Any, Awaitable, Callable, Iterable, List, Optional, Sequence, Tuple, Union, cast

from ._common import seconds
from .client import AsyncClient, Client, D, Decision, Descriptor, InvalidRequest, Status, UnencodableValue

__all__ = ["QUOTA_EXCEEDED", "KeyErrorHandler", "RateLimitMiddleware", "client_ip", "trusted_network"]

#: The problem type (RFC 9457) of the 429 body, as
#: draft-ietf-httpapi-ratelimit-headers registers it.
QUOTA_EXCEEDED = "https://iana.org/assignments/http-problem-types#quota-exceeded"

_TITLE = "Request cannot be satisfied as assigned quota has been exceeded"

Scope = dict
IPAddress = Union[ipaddress.IPv4Address, ipaddress.IPv6Address]
Network = Union[ipaddress.IPv4Network, ipaddress.IPv6Network]
#: The signature of key_error_handler: (scope, receive, send, exception),
#: a coroutine function that sends the answer.
KeyErrorHandler = Callable[[Scope, Callable, Callable, Exception], Awaitable[None]]


class RateLimitMiddleware:
    """ASGI middleware: asks ratelimitd, under the rules of domain, whether
    each HTTP request may proceed, before calling app. Other scopes
    (websocket, lifespan) pass through.

    client: an AsyncClient (or anything whose should_rate_limit is a
    coroutine function taking the same arguments, such as
    ratelimitd.testing.FakeAsyncClient), a quota mode's
    ratelimitd.quota.AsyncQuota or Quota (both decide locally, without
    waiting), or a function returning one, called once on the first
    request (grpc.aio channels belong to the event loop that made them,
    which a server starts after the application is built). The blocking
    Client is refused: it would stall the event loop. With a quota, the
    domain must be the quota's; a refusal has Retry-After (until the
    token bucket's next fill) but no RateLimit headers, and the failure
    policy's refusal is the 503 of a failed ratelimitd.

    Descriptors, in this order, each request being one hit on each:

        [api_key=<header value>]           api_key_header="X-API-Key"
        [remote_address=<client network>]  client_ip=True
        [path=<route>, method=<method>]    route=True, or a function of the scope
        ...                                descriptors=function of the scope

    trusted_proxies turns client_ip on. Without api_key_header, client_ip
    (or trusted_proxies), route and descriptors, the default set is
    client_ip and route. A request left without descriptors passes without
    asking. The client network is the peer's address (scope["client"]) or,
    only when the peer is in trusted_proxies (CIDRs), the right-most address
    of proxy_header (X-Forwarded-For, or Forwarded, RFC 7239) that is not
    trusted; then masked to ipv4_prefix (32) or ipv6_prefix (64) bits: a
    single IPv6 host commonly holds a whole /64. IPv4-mapped IPv6 addresses
    count as IPv4, trusted proxies included (::ffff:10.0.0.0/104 is
    10.0.0.0/8). The default route is scope["path"]; pass a function to
    normalise paths (IDs and all).

    skip(scope) -> True passes a request without asking (health checks...).

    Key functions (route, descriptors and skip) that raise: the request
    cannot be attributed, so it is neither counted nor passed on (a caller
    able to make them fail would escape every limit): 400, text/plain
    "rate limit: cannot attribute the request", the exception logged at
    warning; key_error_handler(scope, receive, send, exc), a coroutine
    function, answers instead. A key function meaning to let a request
    through unlimited returns no descriptors (or skip returns True).

    Answers, as the Go middleware's: allowed, ratelimitd's headers
    (RateLimit-Policy, RateLimit...) are added to the application's response
    (those the application sets itself win), plus X-RateLimit-Limit,
    -Remaining, -Reset of the tightest limit with x_ratelimit_headers=True;
    refused, 429 with those headers, Retry-After (seconds, rounded up, at
    least 1) and an application/problem+json body whose violated-policies
    names the limits over their budget; ratelimitd failed, the client's
    failure policy decides (fail open: no headers; fail closed: 503,
    text/plain); a request the middleware cannot send (malformed
    descriptors from its own configuration): 500, text/plain, logged.
    """

    def __init__(
        self,
        app,
        client: Union[AsyncClient, Callable[[], AsyncClient]],
        domain: str,
        *,
        api_key_header: Optional[str] = None,
        client_ip: bool = False,
        trusted_proxies: Iterable[Union[str, Network]] = (),
        proxy_header: str = "X-Forwarded-For",
        ipv4_prefix: int = 32,
        ipv6_prefix: int = 64,
        route: Union[bool, Callable[[Scope], str]] = False,
        descriptors: Optional[Callable[[Scope], Union[Sequence[Descriptor], Awaitable[Sequence[Descriptor]]]]] = None,
        skip: Optional[Callable[[Scope], bool]] = None,
        key_error_handler: Optional[KeyErrorHandler] = None,
        x_ratelimit_headers: bool = False,
        logger: Optional[logging.Logger] = None,
    ):
        self.app = app
        if _is_client(client):
            self._client: Any = _checked_client(client)
            self._new_client: Optional[Callable[[], Any]] = None
        elif callable(client):
            self._client, self._new_client = None, client
        else:
            raise TypeError(f"ratelimitd: RateLimitMiddleware's client is a {type(client).__name__}: want an "
                            "AsyncClient, or a function returning one")
        self.domain = domain
        self._api_key = api_key_header.lower().encode("latin-1") if api_key_header else None
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

    def _get_client(self) -> AsyncClient:
        if self._client is None:
            assert self._new_client is not None  # one of the two is set
            c = self._new_client()
            if not _is_client(c):
                raise TypeError(f"ratelimitd: RateLimitMiddleware's client function returned a "
                                f"{type(c).__name__}: want an AsyncClient")
            self._client = _checked_client(c)
        return self._client

    async def _bad_request(self, scope: Scope, receive, send, exc: Exception) -> None:
        """The default key error handler: 400, logged at warning."""
        self._log.warning("rate limit key function failed: %s %r: %r", scope.get("method", ""),
                          scope.get("path", ""), exc, exc_info=exc)
        await _plain(send, 400, "rate limit: cannot attribute the request")

    async def _request_descriptors(self, scope: Scope) -> List[Descriptor]:
        ds: List[Descriptor] = []
        if self._api_key is not None:
            v = _header(scope, self._api_key)
            if v:
                ds.append(D("api_key", v))
        if self._client_ip:
            ip = client_ip(scope, self._proxy_header, self._trusted)
            if ip is not None:
                ds.append(D("remote_address", self._network(ip)))
        if self._route:
            r = self._route(scope) if callable(self._route) else scope.get("path", "")
            ds.append(D("path", r, "method", scope.get("method", "")))
        if self._descriptors is not None:
            got = self._descriptors(scope)
            more = await got if inspect.isawaitable(got) else got
            ds.extend(cast(Sequence[Descriptor], more))
        return ds

    async def _attributed(self, scope: Scope):
        """The request's descriptors, None to pass it on unasked (skipped),
        or the exception of a key function."""
        try:
            if self._skip is not None and self._skip(scope):
                return None
            return await self._request_descriptors(scope)
        except Exception as e:  # a key function's failure, answered by _key_error
            return e

    def _network(self, ip: IPAddress) -> str:
        bits = self._v4 if ip.version == 4 else self._v6
        return str(ipaddress.ip_network((ip, bits), strict=False).network_address)

    async def __call__(self, scope, receive, send):
        if scope.get("type") != "http":
            await self.app(scope, receive, send)
            return
        ds = await self._attributed(scope)
        if isinstance(ds, Exception):
            answered = self._key_error(scope, receive, send, ds)
            if inspect.isawaitable(answered):
                await answered
            return
        if not ds:
            await self.app(scope, receive, send)
            return
        try:
            c = self._get_client()
            d: Any = c.should_rate_limit(self.domain, *ds)
            if getattr(c, "decides_locally", False) and isinstance(d, Decision):
                pass  # a Quota's decision, made without waiting
            elif not inspect.isawaitable(d):
                raise TypeError(f"ratelimitd: the should_rate_limit of RateLimitMiddleware's client returned a "
                                f"{type(d).__name__}, not an awaitable")
            else:
                d = await d
        except UnencodableValue as e:  # the request's own bytes: not attributable, not a fault of ours
            answered = self._key_error(scope, receive, send, e)
            if inspect.isawaitable(answered):
                await answered
            return
        except InvalidRequest as e:
            self._log.error("rate limit request malformed: domain=%r err=%s", self.domain, e)
            await _plain(send, 500, "rate limit: malformed rate limit request")
            return
        if d.error is not None and not d.allowed:
            await _plain(send, 503, "rate limit service unavailable")
            return
        # ASGI wants lower-case names; values are ratelimitd's, as Go writes them.
        headers = [(n.lower().encode("latin-1", "replace"), v.encode("latin-1", "replace")) for n, v in d.headers
                   if n.lower() != "retry-after"]
        if self._x_ratelimit:
            headers.extend(_x_ratelimit(d.statuses))
        if not d.allowed:
            await _refuse(send, d, headers)
            return
        if not headers:
            await self.app(scope, receive, send)
            return

        async def send_with_headers(message):
            if message.get("type") == "http.response.start":
                own = list(message.get("headers", ()))
                names = {bytes(n).lower() for n, _ in own}
                message = dict(message)
                message["headers"] = [h for h in headers if h[0] not in names] + own
            await send(message)

        await self.app(scope, receive, send_with_headers)


def _is_client(c) -> bool:
    """Whether c looks like a client rather than a function making one."""
    return isinstance(c, (AsyncClient, Client)) or hasattr(c, "should_rate_limit")


def _checked_client(c):
    """c, when it may serve as the middleware's client; raises TypeError
    for a blocking one."""
    if getattr(c, "decides_locally", False):  # a quota: local decisions, never blocking
        return c
    if isinstance(c, Client):
        raise TypeError("ratelimitd: RateLimitMiddleware needs an AsyncClient (over a grpc.aio channel), not "
                        "the blocking ratelimitd.Client, whose calls would stall the event loop")
    m = c.should_rate_limit
    if (inspect.isfunction(m) or inspect.ismethod(m)) and not inspect.iscoroutinefunction(m):
        raise TypeError(f"ratelimitd: the should_rate_limit of RateLimitMiddleware's client, a "
                        f"{type(c).__name__}, is not a coroutine function (async def): want an AsyncClient")
    return c


def attribution(api_key_header: Optional[str], client_ip: bool, trusted_proxies: Iterable[Union[str, Network]],
                route: Any, descriptors: Any, ipv4_prefix: int, ipv6_prefix: int) -> Tuple[List[Network], bool, Any]:
    """The attribution settings the ASGI and WSGI middleware share, checked:
    the trusted proxies' networks, whether to key by client IP (yes with
    trusted proxies, and when nothing else keys), and the route option (on
    when nothing else keys)."""
    if not 1 <= ipv4_prefix <= 32 or not 1 <= ipv6_prefix <= 128:
        raise ValueError(f"ratelimitd: prefix lengths {ipv4_prefix}, {ipv6_prefix}: want an IPv4 length "
                         "of 1 to 32 and an IPv6 length of 1 to 128")
    trusted = [trusted_network(p) for p in trusted_proxies]
    if trusted:
        client_ip = True
    if not api_key_header and not client_ip and not route and descriptors is None:
        client_ip, route = True, True
    return trusted, client_ip, route


def trusted_network(p: Union[str, Network]) -> Network:
    """A trusted proxy network, from a CIDR or an address (strict=False: host
    bits are dropped). An IPv4-mapped IPv6 network of /96 or longer is
    turned into the IPv4 network it maps (::ffff:10.0.0.0/104 is
    10.0.0.0/8), since client addresses are compared unmapped; one shorter
    than /96 that covers ::ffff:0:0/96 still matches only IPv6 addresses.
    Raises ValueError for anything else."""
    n = ipaddress.ip_network(p, strict=False) if isinstance(p, str) else p
    if not isinstance(n, (ipaddress.IPv4Network, ipaddress.IPv6Network)):
        raise ValueError(f"ratelimitd: trusted proxy {p!r} is not an IP network")
    if n.version == 6 and n.prefixlen >= 96 and n.network_address.ipv4_mapped is not None:
        return ipaddress.IPv4Network((n.network_address.ipv4_mapped, n.prefixlen - 96))
    return n


def _header(scope: Scope, name: bytes) -> Optional[bytes]:
    """The first value of the header name (lower case), or None."""
    for n, v in scope.get("headers", ()):
        if bytes(n).lower() == name:
            return bytes(v)
    return None


def _x_ratelimit(sts: Sequence[Status]) -> List[Tuple[bytes, bytes]]:
    """The X-RateLimit headers of the tightest limit of sts: the longest
    refused, else the one with the least remaining."""
    tight: Optional[Status] = None
    for s in sts:
        if s.limit is None or s.unlimited:
            continue
        if tight is None:
            tight = s
        elif s.over_limit and (not tight.over_limit or s.retry_after > tight.retry_after):
            tight = s
        elif not s.over_limit and not tight.over_limit and s.remaining < tight.remaining:
            tight = s
    if tight is None or tight.limit is None:
        return []
    return [(b"x-ratelimit-limit", str(tight.limit.requests).encode()),
            (b"x-ratelimit-remaining", str(tight.remaining).encode()),
            (b"x-ratelimit-reset", str(seconds(tight.reset_after)).encode())]


def _go_json(obj) -> bytes:
    """obj as Go's encoding/json writes it: compact, non-ASCII as is, and
    <, >, &, U+2028, U+2029 escaped."""
    s = json.dumps(obj, ensure_ascii=False, separators=(",", ":"))
    for c, esc in (("<", "\\u003c"), (">", "\\u003e"), ("&", "\\u0026"),
                   ("\u2028", "\\u2028"), ("\u2029", "\\u2029")):
        s = s.replace(c, esc)
    return s.encode("utf-8", "replace")


def problem(d: Decision) -> bytes:
    """The body of a 429: RFC 9457 plus the draft's violated-policies."""
    retry = max(seconds(d.retry_after), 1)
    p = {
        "type": QUOTA_EXCEEDED,
        "title": _TITLE,
        "status": 429,
        "detail": f"Too many requests; retry in {retry} s.",
    }
    violated: List[str] = []
    for s in d.statuses:
        if s.over_limit and s.limit is not None and s.limit.name and s.limit.name not in violated:
            violated.append(s.limit.name)
    if violated:
        p["violated-policies"] = violated
    return _go_json(p) + b"\n"


async def _refuse(send, d: Decision, headers: List[Tuple[bytes, bytes]]) -> None:
    body = problem(d)
    retry = max(seconds(d.retry_after), 1)
    h = list(headers) + [
        (b"retry-after", str(retry).encode()),
        (b"content-type", b"application/problem+json"),
        (b"x-content-type-options", b"nosniff"),
        (b"content-length", str(len(body)).encode()),
    ]
    await send({"type": "http.response.start", "status": 429, "headers": h})
    await send({"type": "http.response.body", "body": body})


async def _plain(send, status: int, msg: str) -> None:
    """An answer as Go's http.Error writes it."""
    body = (msg + "\n").encode()
    await send({"type": "http.response.start", "status": status, "headers": [
        (b"content-type", b"text/plain; charset=utf-8"),
        (b"x-content-type-options", b"nosniff"),
        (b"content-length", str(len(body)).encode()),
    ]})
    await send({"type": "http.response.body", "body": body})


def _trusted(a: IPAddress, trusted: Sequence[Network]) -> bool:
    return any(a.version == p.version and a in p for p in trusted)


def parse_node(s: Union[str, bytes]) -> Optional[IPAddress]:
    """An address with an optional port, IPv6 optionally in brackets
    ("192.0.2.1", "192.0.2.1:80", "2001:db8::1", "[2001:db8::1]",
    "[2001:db8::1]:80"), without zone, IPv4-mapped IPv6 as IPv4; None for
    anything else."""
    if isinstance(s, bytes):
        s = s.decode("latin-1")
    s = s.strip()
    if not s:
        return None
    a = _addr(s)
    if a is None:
        if s.startswith("["):
            end = s.find("]")
            if end < 0:
                return None
            rest = s[end + 1:]
            if rest and not (rest.startswith(":") and _port(rest[1:])):
                return None
            a = _addr(s[1:end])
            if a is None or a.version != 6:
                return None
        elif s.count(":") == 1:
            host, port = s.split(":")
            a = _addr(host) if _port(port) else None
            if a is None or a.version != 4:
                return None
        else:
            return None
    if a.version == 6:
        if a.ipv4_mapped is not None:
            return a.ipv4_mapped
        if a.scope_id is not None:
            a = ipaddress.IPv6Address(str(a).split("%", 1)[0])
    return a


def _port(p: str) -> bool:
    return p.isdigit() and p.isascii() and int(p) <= 65535


def _addr(s: str) -> Optional[IPAddress]:
    try:
        return ipaddress.ip_address(s)
    except ValueError:
        return None


def client_ip(scope: Scope, header: str = "X-Forwarded-For",
              trusted: Sequence[Network] = ()) -> Optional[IPAddress]:
    """The IP address of the request's client, or None when unknown (no
    scope["client"], or not an IP address).

    When the peer is in none of the trusted networks, it is the peer and no
    header is read. Otherwise the addresses proxies appended to header are
    walked from right to left, and the first one in no trusted network is
    returned; if all are trusted, the left-most. An entry that is not an
    address stops the walk at the last trusted address before it. header is
    "Forwarded" (RFC 7239: the for= parameters) or a comma-separated list
    such as X-Forwarded-For; all the request's fields of that name are read
    in order. Addresses are compared without zone, IPv4-mapped IPv6 ones as
    IPv4: pass trusted networks through trusted_network, which maps the
    IPv4-mapped ones likewise."""
    peer_t = scope.get("client")
    peer = parse_node(str(peer_t[0])) if peer_t else None
    if peer is None or not _trusted(peer, trusted):
        return peer
    name = header.lower().encode("latin-1")
    values = [bytes(v).decode("latin-1") for n, v in scope.get("headers", ()) if bytes(n).lower() == name]
    if header.lower() == "forwarded":
        nodes = _forwarded_for(values)
    else:
        nodes = [n for v in values for n in v.split(",")]
    ip = peer
    for node in reversed(nodes):
        a = parse_node(node)
        if a is None:
            break
        ip = a
        if not _trusted(a, trusted):
            break
    return ip


def _forwarded_for(values: Sequence[str]) -> List[str]:
    """The for= value of each element of the Forwarded field values (RFC
    7239 section 4), unquoted, in order; "" for an element without one, or
    a malformed one."""
    nodes: List[str] = []
    for v in values:
        i = 0
        while i <= len(v):
            node = ""
            while True:
                while i < len(v) and v[i] in " \t;":
                    i += 1
                if i >= len(v) or v[i] == ",":
                    break
                eq = _index_any(v, i, "=,;")
                if eq < 0 or v[eq] != "=":
                    node, i = "", _skip_element(v, i)
                    break
                key = v[i:eq].strip()
                i = eq + 1
                val, n, ok = _pair_value(v[i:])
                if not ok:
                    node, i = "", _skip_element(v, i)
                    break
                i += n
                if key.lower() == "for":
                    node = val
            nodes.append(node)
            i += 1
    return nodes


def _index_any(s: str, start: int, chars: str) -> int:
    for i in range(start, len(s)):
        if s[i] in chars:
            return i
    return -1


def _pair_value(s: str) -> Tuple[str, int, bool]:
    """A token or quoted-string at the start of s, unquoted, with the
    characters it took."""
    if not s or s[0] != '"':
        end = _index_any(s, 0, ";, \t")
        if end < 0:
            end = len(s)
        return s[:end], end, True
    out = []
    i = 1
    while i < len(s):
        c = s[i]
        if c == "\\":
            i += 1
            if i == len(s):
                return "", 0, False
            out.append(s[i])
        elif c == '"':
            return "".join(out), i + 1, True
        else:
            out.append(c)
        i += 1
    return "", 0, False


def _skip_element(v: str, i: int) -> int:
    """The index of the ',' ending the element at i, or len(v), skipping
    quoted strings."""
    quoted = False
    while i < len(v):
        c = v[i]
        if quoted and c == "\\":
            i += 1
        elif c == '"':
            quoted = not quoted
        elif not quoted and c == ",":
            return i
        i += 1
    return len(v)
