"""A grpc.aio server interceptor asking ratelimitd whether each call may
proceed, as the Go client's UnaryServerInterceptor and
StreamServerInterceptor do.

    server = grpc.aio.server(interceptors=[RateLimitInterceptor(
        lambda: ratelimitd.AsyncClient(grpc.aio.insecure_channel("ratelimitd:8081")), "api",
        metadata_keys=["x-api-key"])])
"""

from __future__ import annotations

import inspect
import logging
from typing import Any, Awaitable, Callable, Iterable, List, Optional, Sequence, Union, cast

import grpc

from .client import AsyncClient, Client, D, Decision, Descriptor, InvalidRequest, UnencodableValue

__all__ = ["METHOD_KEY", "REMOTE_ADDRESS_KEY", "RateLimitInterceptor"]

#: The default key of the descriptor holding a call's full method.
METHOD_KEY = "method"
#: The key of the descriptor holding the peer's host (peer_address=True).
REMOTE_ADDRESS_KEY = "remote_address"

#: descriptors(method, context) -> descriptors (or an awaitable of them).
DescriptorFunc = Callable[[str, grpc.aio.ServicerContext], Union[Sequence[Descriptor], Awaitable[Sequence[Descriptor]]]]


def _peer_host(peer: str) -> Optional[str]:
    """The host of a grpc peer string ("ipv4:127.0.0.1:5000",
    "ipv6:[::1]:5000", "unix:/path"), None when unknown."""
    if not peer:
        return None
    kind, _, addr = peer.partition(":")
    if kind == "ipv4":
        return addr.rsplit(":", 1)[0]
    if kind == "ipv6":
        host = addr.rsplit(":", 1)[0] if addr.startswith("[") else addr
        return host.strip("[]")
    return addr or None


class RateLimitInterceptor(grpc.aio.ServerInterceptor):
    """Asks, under the rules of domain, whether each call may proceed
    (once per call, streams when they start).

    client: an AsyncClient, a quota mode's AsyncQuota or Quota (which decide
    locally), anything whose should_rate_limit is a coroutine function, or
    a function returning one, called at the first call (grpc.aio channels
    belong to the server's event loop). The blocking Client is refused.

    A call's descriptors, in this order: [method=<full method>]
    (method_key; "" leaves it out), one per metadata key of metadata_keys
    that the call carries with a non-empty value (the key lower-cased),
    [remote_address=<peer host>] with peer_address, and those of
    descriptors(method, context). A call without descriptors proceeds.

    Refused by ratelimitd (or a quota's token bucket): the call fails with
    RESOURCE_EXHAUSTED, ratelimitd's headers (Retry-After...) in its
    trailing metadata, names lower-cased. ratelimitd failed and the
    failure policy refused: UNAVAILABLE. A request the interceptor cannot
    send (its own configuration's fault): INTERNAL, logged; never let
    through.
    """

    def __init__(self, client: Any, domain: str, *, method_key: str = METHOD_KEY,
                 metadata_keys: Iterable[str] = (), peer_address: bool = False,
                 descriptors: Optional[DescriptorFunc] = None, logger: Optional[logging.Logger] = None):
        if isinstance(client, Client):
            raise TypeError("ratelimitd: RateLimitInterceptor needs an AsyncClient (over a grpc.aio channel) or a "
                            "quota, not the blocking ratelimitd.Client, whose calls would stall the event loop")
        if hasattr(client, "should_rate_limit") or isinstance(client, AsyncClient):
            self._client: Any = client
            self._new: Optional[Callable[[], Any]] = None
        elif callable(client):
            self._client, self._new = None, client
        else:
            raise TypeError(f"ratelimitd: RateLimitInterceptor's client is a {type(client).__name__}")
        self.domain = domain
        self._method_key = method_key
        self._metadata_keys = [k.lower() for k in metadata_keys if k]
        self._peer = peer_address
        self._descriptors = descriptors
        self._log = logger or logging.getLogger("ratelimitd")

    async def _call_descriptors(self, method: str, context: grpc.aio.ServicerContext) -> List[Descriptor]:
        ds: List[Descriptor] = []
        if self._method_key:
            ds.append(D(self._method_key, method))
        if self._metadata_keys:
            md = context.invocation_metadata() or ()
            for k in self._metadata_keys:
                for mk, mv in md:
                    if mk == k:
                        if mv:
                            ds.append(D(k, mv))
                        break
        if self._peer:
            host = _peer_host(context.peer())
            if host:
                ds.append(D(REMOTE_ADDRESS_KEY, host))
        if self._descriptors is not None:
            got = self._descriptors(method, context)
            more = await got if inspect.isawaitable(got) else got
            ds.extend(cast(Sequence[Descriptor], more))
        return ds

    async def _check(self, method: str, context: grpc.aio.ServicerContext) -> None:
        """Returns when the call may proceed; else aborts it."""
        ds = await self._call_descriptors(method, context)
        if not ds:
            return
        if self._client is None:
            assert self._new is not None  # one of the two is set
            self._client = self._new()
        try:
            d = self._client.should_rate_limit(self.domain, *ds)
            if inspect.isawaitable(d):
                d = await d
        except UnencodableValue as e:  # the caller's own metadata bytes: its error, not ours
            self._log.warning("rate limit: cannot attribute the call: method=%s err=%s", method, e)
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"ratelimitd: rate limiting {method}: {e}")
            return
        except InvalidRequest as e:
            self._log.error("rate limit request malformed: domain=%r method=%s err=%s", self.domain, method, e)
            await context.abort(grpc.StatusCode.INTERNAL, f"ratelimitd: rate limiting {method}: {e}")
            return
        if not isinstance(d, Decision):
            raise TypeError(f"ratelimitd: RateLimitInterceptor's client answered a {type(d).__name__}")
        if d.allowed:
            return
        if d.error is not None:
            await context.abort(grpc.StatusCode.UNAVAILABLE,
                                f"ratelimitd: {method} refused: rate limit service failed: {d.error}")
            return
        md = tuple((n.lower(), v) for n, v in d.headers)
        await context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED,
                            f"ratelimitd: {method} rate limited, retry in {d.retry_after:.3f} s", md)

    async def intercept_service(self, continuation, handler_call_details):
        handler = await continuation(handler_call_details)
        if handler is None:
            return None
        method = handler_call_details.method
        check = self._check

        if handler.response_streaming:
            inner = handler.stream_stream if handler.request_streaming else handler.unary_stream

            async def streaming(request, context):
                await check(method, context)
                out = inner(request, context)
                if hasattr(out, "__aiter__"):
                    async for r in out:
                        yield r
                elif inspect.isawaitable(out):
                    await out  # writes with context.write

            make = grpc.stream_stream_rpc_method_handler if handler.request_streaming \
                else grpc.unary_stream_rpc_method_handler
            return make(streaming, request_deserializer=handler.request_deserializer,
                        response_serializer=handler.response_serializer)

        inner = handler.stream_unary if handler.request_streaming else handler.unary_unary

        async def unary(request, context):
            await check(method, context)
            out = inner(request, context)
            return await out if inspect.isawaitable(out) else out

        make = grpc.stream_unary_rpc_method_handler if handler.request_streaming \
            else grpc.unary_unary_rpc_method_handler
        return make(unary, request_deserializer=handler.request_deserializer,
                    response_serializer=handler.response_serializer)
