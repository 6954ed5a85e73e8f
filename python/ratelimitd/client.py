"""Clients of ratelimitd's native API (ratelimit.v1.RateLimitService).

Client (blocking, over a grpc.Channel) and AsyncClient (asyncio, over a
grpc.aio.Channel) ask ratelimitd whether work may proceed and return a
Decision. They mirror the Go client (github.com/ratelimitd/ratelimitd/client):

- over the limit is a decision (Decision.allowed is False), not an error;
- a malformed request, one ratelimitd would refuse whatever its rules or
  that cannot be sent, raises InvalidRequest, whatever the failure policy,
  before any call when the client can tell;
- when ratelimitd fails (unreachable, slower than the budget, any other
  error), the failure policy decides: allowed (fail open, the default) or
  refused (fail_closed=True), with ratelimitd's error in Decision.error.

Each call has a budget of DEFAULT_TIMEOUT (50 ms) unless told otherwise,
and a request ratelimitd refused is refused again by the client itself for
min(its retry-after, DEFAULT_REFUSAL_CACHE: 1 s). The caller owns the
channel and closes it.

A client starts connecting its channel when made, and a call made while
the channel connects waits for it, up to the connect budget
(DEFAULT_CONNECT_TIMEOUT: 1 s), before its own budget starts: see
Client.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import threading
import time
import weakref
from dataclasses import dataclass, field
from enum import Enum
from typing import Awaitable, Callable, Iterable, Optional, Sequence, Tuple, Union, cast

import grpc

from ._common import (MAX_DESCRIPTORS, MAX_DOMAIN, MAX_ENTRIES, MAX_HITS, MAX_KEY, MAX_OVERRIDE_WINDOW,
                      MAX_REQUEST, MAX_REQUESTS, MAX_VALUE, MIN_OVERRIDE_WINDOW, micros, whole_micros)
from ._refusals import Refusals, refusal_key
from .proto.ratelimit.v1 import ratelimit_pb2 as pb
from .proto.ratelimit.v1 import ratelimit_pb2_grpc as pb_grpc

__all__ = [
    "Algorithm",
    "AsyncClient",
    "AsyncLease",
    "Client",
    "D",
    "DEFAULT_CONNECT_TIMEOUT",
    "DEFAULT_REFUSAL_CACHE",
    "DEFAULT_REFUSAL_CACHE_SIZE",
    "DEFAULT_TIMEOUT",
    "Decision",
    "Descriptor",
    "Entry",
    "InvalidRequest",
    "Lease",
    "LeaseLost",
    "Limit",
    "LimitOverride",
    "RELEASE_TIMEOUT",
    "Status",
    "UnencodableValue",
]

#: The default budget of one call, in seconds.
DEFAULT_TIMEOUT = 0.05
#: How long, by default, calls wait for a connection attempt, in seconds
#: (see Client).
DEFAULT_CONNECT_TIMEOUT = 1.0
#: How long, at most, a refusal is remembered by default, in seconds.
DEFAULT_REFUSAL_CACHE = 1.0
#: How many refusals are remembered at most by default.
DEFAULT_REFUSAL_CACHE_SIZE = 10000
#: How long, at most, a release waits for ratelimitd, in seconds: it runs
#: even when the caller was cancelled, so it has a bound of its own. A
#: release that fails leaves the slots held until their lease expires.
RELEASE_TIMEOUT = 1.0
# The least an auto-renewal waits, in seconds, so that a lease about to
# expire does not make it spin.
_MIN_RENEW_WAIT = 0.1

log = logging.getLogger("ratelimitd")

Value = Union[str, bytes]


class InvalidRequest(ValueError):
    """A request ratelimitd would refuse whatever its rules, or that cannot
    be sent: found by the client before any call, or answered
    INVALID_ARGUMENT by ratelimitd (then .rpc_error holds its answer). It is
    a bug in the caller: no failure policy hides it."""

    def __init__(self, message: str, rpc_error: Optional[grpc.RpcError] = None):
        super().__init__(message)
        self.rpc_error = rpc_error


class UnencodableValue(InvalidRequest):
    """A descriptor value a Quota cannot carry: bytes that are not UTF-8.
    Such a value comes from the request being limited (a header, gRPC
    metadata), not from the program, so the middleware and interceptors
    answer it as a request they cannot attribute (400, INVALID_ARGUMENT,
    logged as a warning), not as a malformed configuration."""


class Algorithm(str, Enum):
    """How a limit counts, named as in the rules' YAML. A str: each member
    equals its name in the YAML (Algorithm.GCRA == "gcra"), and str() and
    format() give that name."""

    def __str__(self) -> str:
        return str(self.value)

    def __format__(self, spec: str) -> str:
        return format(str(self.value), spec)

    SLIDING_WINDOW = "sliding_window"
    FIXED_WINDOW = "fixed_window"
    SLIDING_LOG = "sliding_log"
    TOKEN_BUCKET = "token_bucket"
    GCRA = "gcra"
    #: At most requests held at once, each until released or its lease
    #: (window) expires: see Client.acquire.
    CONCURRENCY = "concurrency"


_ALGORITHMS = {
    pb.ALGORITHM_SLIDING_WINDOW: Algorithm.SLIDING_WINDOW,
    pb.ALGORITHM_FIXED_WINDOW: Algorithm.FIXED_WINDOW,
    pb.ALGORITHM_SLIDING_LOG: Algorithm.SLIDING_LOG,
    pb.ALGORITHM_TOKEN_BUCKET: Algorithm.TOKEN_BUCKET,
    pb.ALGORITHM_GCRA: Algorithm.GCRA,
    pb.ALGORITHM_CONCURRENCY: Algorithm.CONCURRENCY,
}


@dataclass(frozen=True)
class Entry:
    """One key/value pair of a Descriptor. key: 1 to 1024 bytes of UTF-8.
    value: any str or bytes, of any length (see Descriptor)."""

    key: str
    value: Value


@dataclass(frozen=True)
class LimitOverride:
    """A limit given by the caller instead of the configuration, for one
    request (the matched rule's algorithm is kept; the domain must exist).
    requests: admitted per window, 0 refuses everything. window: seconds, a
    whole number of microseconds from 1 ms to 100 years."""

    requests: int
    window: float


@dataclass(frozen=True)
class Descriptor:
    """One counter of a request: entries matched, outermost first, against
    the nested rules of the request's domain, such as
    [("tenant", "acme"), ("path", "/search")].

    hits: how much the work consumes on this descriptor (None or 0: 1).
    check_only: ask whether the counter is already past its limit without
    consuming anything (hits is then ignored). limit: a LimitOverride
    replacing the configured limits for this request. give_back: give the
    hits back instead of taking them (Envoy's negative hits), for work
    counted ahead that did not happen: never refused, never past the limit,
    applied whatever the request's other descriptors decide; a request
    holding one is always sent, never refused from the memory of refusals.
    check_only and give_back do not go together, and acquire takes no
    give_back (its release gives the slots back).

    Values may hold any bytes, of any length: a value that is not valid
    UTF-8 is sent as bytes (it counts as the same bytes sent as a string),
    one over 1024 bytes as its SHA-256 digest, by which ratelimitd counts
    every such value (it then only matches rules matching any value).
    """

    entries: Tuple[Entry, ...]
    hits: Optional[int] = None
    check_only: bool = False
    limit: Optional[LimitOverride] = None
    give_back: bool = False

    def __init__(
        self,
        entries: Iterable[Union[Entry, Tuple[str, Value]]],
        hits: Optional[int] = None,
        check_only: bool = False,
        limit: Optional[LimitOverride] = None,
        give_back: bool = False,
    ):
        es = tuple(e if isinstance(e, Entry) else Entry(*e) for e in entries)
        object.__setattr__(self, "entries", es)
        object.__setattr__(self, "hits", hits)
        object.__setattr__(self, "check_only", check_only)
        object.__setattr__(self, "limit", limit)
        object.__setattr__(self, "give_back", give_back)


def D(*kv: Value, hits: Optional[int] = None, check_only: bool = False,
      limit: Optional[LimitOverride] = None, give_back: bool = False) -> Descriptor:
    """A Descriptor whose entries are kv, given as key, value pairs:
    D("path", "/login", "remote_address", "10.0.0.1"). Raises ValueError for
    an odd number of arguments."""
    if len(kv) % 2:
        raise ValueError(f"ratelimitd.D: odd argument count {len(kv)}")
    # Keys that are not str are refused by check, as the caller's mistake.
    pairs = cast("Iterable[Tuple[str, Value]]", zip(kv[0::2], kv[1::2]))
    return Descriptor(pairs, hits=hits, check_only=check_only, limit=limit, give_back=give_back)


@dataclass(frozen=True)
class Limit:
    """A configured (or overridden) limit. window is in seconds; algorithm
    is an Algorithm, or "" for one this client does not know."""

    name: str = ""
    requests: int = 0
    window: float = 0.0
    algorithm: Union[Algorithm, str] = ""
    burst: int = 0


@dataclass(frozen=True)
class Status:
    """The decision on one descriptor. Durations are in seconds.

    limit is the limit that decided (the one that refused, else the one with
    the least remaining), None when no limit applies or the rule is
    unlimited. remaining: hits the limit admits now. reset_after: until the
    counter resets. retry_after: until the same hits would be admitted (0
    when admitted)."""

    over_limit: bool = False
    limit: Optional[Limit] = None
    remaining: int = 0
    reset_after: float = 0.0
    retry_after: float = 0.0
    unlimited: bool = False


@dataclass(frozen=True)
class Decision:
    """The answer to one call.

    allowed: whether the work may proceed. statuses: one Status per request
    descriptor, in order (empty when the failure policy decided).
    retry_after: when refused, seconds until the same request would be
    admitted (the longest of the descriptors over their limit); 0 when
    allowed, and when the failure policy refused. headers: the HTTP response
    headers ratelimitd asks the caller to send (RateLimit-Policy and
    RateLimit, or the legacy family, and Retry-After when refused), as
    (name, value) pairs. error: ratelimitd's failure (a grpc.RpcError) when
    the failure policy decided instead of ratelimitd, else None. local: the
    client refused by itself, remembering an earlier refusal of the same
    request, without calling ratelimitd; its durations, and its headers'
    (Retry-After, the t parameters of RateLimit), count down from the
    remembered answer's."""

    allowed: bool
    statuses: Tuple[Status, ...] = ()
    retry_after: float = 0.0
    headers: Tuple[Tuple[str, str], ...] = ()
    error: Optional[Exception] = field(default=None, compare=False)
    local: bool = False


#: The signature of on_decision: (domain, descriptors, decision).
DecisionHook = Callable[[str, Sequence[Descriptor], Decision], None]


def _utf8(s: str) -> Optional[bytes]:
    try:
        return s.encode("utf-8")
    except UnicodeEncodeError:
        return None


def check(domain: str, descriptors: Sequence[Descriptor]) -> None:
    """Raises InvalidRequest for the malformed requests ratelimitd would
    refuse whatever its rules, and those that cannot be encoded."""
    if not isinstance(domain, str) or domain == "":
        raise InvalidRequest("ratelimitd: domain is empty")
    d = _utf8(domain)
    if d is None:
        raise InvalidRequest(f"ratelimitd: domain {domain!r} is not valid UTF-8")
    if len(d) > MAX_DOMAIN:
        raise InvalidRequest(f"ratelimitd: domain is {len(d)} bytes, over the maximum {MAX_DOMAIN}")
    if not descriptors:
        raise InvalidRequest("ratelimitd: no descriptors")
    if len(descriptors) > MAX_DESCRIPTORS:
        raise InvalidRequest(f"ratelimitd: {len(descriptors)} descriptors, over the maximum {MAX_DESCRIPTORS}")
    for i, desc in enumerate(descriptors):
        if not isinstance(desc, Descriptor):
            raise InvalidRequest(f"ratelimitd: descriptor {i} is a {type(desc).__name__}, not a Descriptor")
        if not desc.entries:
            raise InvalidRequest(f"ratelimitd: descriptor {i} has no entries")
        if len(desc.entries) > MAX_ENTRIES:
            raise InvalidRequest(
                f"ratelimitd: descriptor {i} has {len(desc.entries)} entries, over the maximum {MAX_ENTRIES}")
        if not desc.check_only and desc.hits is not None and not _int_in(desc.hits, MAX_HITS):
            raise InvalidRequest(f"ratelimitd: descriptor {i}: hits {desc.hits!r} is not a whole number "
                                 f"from 0 to {MAX_HITS}")
        if desc.check_only and desc.give_back:
            raise InvalidRequest(f"ratelimitd: descriptor {i}: both check_only and give_back")
        if desc.limit is not None:
            _check_override(i, desc.limit)
        for j, e in enumerate(desc.entries):
            if not isinstance(e.key, str) or e.key == "":
                raise InvalidRequest(f"ratelimitd: descriptor {i} entry {j} has an empty key")
            k = _utf8(e.key)
            if k is None:
                raise InvalidRequest(f"ratelimitd: descriptor {i} entry {j}: key {e.key!r} is not valid UTF-8")
            if len(k) > MAX_KEY:
                raise InvalidRequest(
                    f"ratelimitd: descriptor {i} entry {j}: key is {len(k)} bytes, over the maximum {MAX_KEY}")
            if not isinstance(e.value, (str, bytes)):
                raise InvalidRequest(f"ratelimitd: descriptor {i} entry {j}: value is a {type(e.value).__name__}")


def _int_in(n, most: int) -> bool:
    """Whether n is an int (not a bool) from 0 to most."""
    return isinstance(n, int) and not isinstance(n, bool) and 0 <= n <= most


def _check_override(i: int, limit: LimitOverride) -> None:
    """Raises InvalidRequest for a limit override ratelimitd would refuse:
    requests not a whole number from 0 to MAX_REQUESTS, a window out of [1
    ms, 100 years] (of 365 days) or not a whole number of microseconds."""
    if not isinstance(limit, LimitOverride):
        raise InvalidRequest(f"ratelimitd: descriptor {i}: limit is a {type(limit).__name__}, not a LimitOverride")
    if not _int_in(limit.requests, MAX_REQUESTS):
        raise InvalidRequest(f"ratelimitd: descriptor {i}: limit override of {limit.requests!r} requests is not "
                             f"a whole number from 0 to {MAX_REQUESTS}")
    w = limit.window
    if not isinstance(w, (int, float)) or isinstance(w, bool) or not MIN_OVERRIDE_WINDOW <= w <= MAX_OVERRIDE_WINDOW:
        raise InvalidRequest(f"ratelimitd: descriptor {i}: limit override window {w!r} s out of range "
                             f"[{MIN_OVERRIDE_WINDOW} s, {MAX_OVERRIDE_WINDOW} s]")
    if not whole_micros(w):
        raise InvalidRequest(f"ratelimitd: descriptor {i}: limit override window {w!r} s is not a whole number "
                             "of microseconds")


def _entry(e: Entry) -> pb.Entry:
    """e in the smallest form ratelimitd counts it by: over MAX_VALUE bytes
    its digest; else, when not valid UTF-8, bytes; else a string. A str
    holding lone surrogates (as decoded with surrogateescape) is sent as the
    bytes it stands for."""
    v = e.value
    if isinstance(v, str):
        try:
            b = v.encode("utf-8")
        except UnicodeEncodeError:
            b = v.encode("utf-8", "surrogateescape")
    else:
        b = bytes(v)
    if len(b) > MAX_VALUE:
        return pb.Entry(key=e.key, value_sha256=hashlib.sha256(b).digest())
    try:
        return pb.Entry(key=e.key, value=b.decode("utf-8"))
    except UnicodeDecodeError:
        return pb.Entry(key=e.key, raw_value=b)


def request(domain: str, descriptors: Sequence[Descriptor]) -> pb.ShouldRateLimitRequest:
    """The request to send, checked; raises InvalidRequest."""
    check(domain, descriptors)
    return _build(domain, descriptors)


def _build(domain: str, descriptors: Sequence[Descriptor]) -> pb.ShouldRateLimitRequest:
    """The request to send for descriptors, checked by check; raises
    InvalidRequest when it is over ratelimitd's largest request."""
    req = pb.ShouldRateLimitRequest(domain=domain)
    for desc in descriptors:
        rd = req.descriptors.add()
        rd.entries.extend(_entry(e) for e in desc.entries)
        if desc.check_only:
            rd.hits = 0
        elif desc.hits:
            rd.hits = desc.hits
        if desc.give_back:
            rd.give_back = True
        if desc.limit is not None:
            rd.limit.requests = desc.limit.requests
            rd.limit.window.seconds, us = divmod(micros(desc.limit.window), 1_000_000)
            rd.limit.window.nanos = us * 1000
    n = req.ByteSize()
    if n > MAX_REQUEST:
        raise InvalidRequest(f"ratelimitd: request is {n} bytes, over the maximum {MAX_REQUEST}")
    return req


def _seconds(d) -> float:
    """A Duration in seconds; negative ones, which ratelimitd never sends, 0."""
    return max(d.seconds + d.nanos / 1e9, 0.0)


def decision(resp: Union[pb.ShouldRateLimitResponse, pb.AcquireResponse]) -> Decision:
    """Converts ratelimitd's answer (to ShouldRateLimit or Acquire)."""
    allowed = resp.code != pb.CODE_OVER_LIMIT
    statuses = []
    retry = 0.0
    for st in resp.statuses:
        limit = None
        if st.HasField("limit"):
            l = st.limit
            limit = Limit(name=l.name, requests=l.requests, window=_seconds(l.window),
                          algorithm=_ALGORITHMS.get(l.algorithm, ""), burst=l.burst)
        s = Status(over_limit=st.code == pb.CODE_OVER_LIMIT, limit=limit, remaining=st.remaining,
                   reset_after=_seconds(st.reset_after), retry_after=_seconds(st.retry_after),
                   unlimited=st.unlimited)
        if not allowed and s.over_limit:
            retry = max(retry, s.retry_after)
        statuses.append(s)
    return Decision(allowed=allowed, statuses=tuple(statuses), retry_after=retry,
                    headers=tuple((h.name, h.value) for h in resp.headers))


def _invalid(err: grpc.RpcError) -> Exception:
    """err, or InvalidRequest when ratelimitd answered INVALID_ARGUMENT."""
    if hasattr(err, "code") and err.code() == grpc.StatusCode.INVALID_ARGUMENT:
        return InvalidRequest(f"ratelimitd: {err.details()}", err)
    return err


_C = grpc.ChannelConnectivity
# How often AsyncClient looks at its channel's state while waiting for it
# to connect, in seconds.
_ASYNC_POLL = 0.005


def _kick(_state) -> None:
    """A connectivity callback doing nothing: subscribing it with
    try_to_connect asks an idle channel to connect."""


def _core(channel):
    """The grpc core channel under channel (a grpc.Channel keeps it as
    _channel, under interceptors' wrappers too), or None."""
    for _ in range(4):
        channel = getattr(channel, "_channel", None)
        if channel is None or hasattr(channel, "check_connectivity_state"):
            return channel
    return None


class _Connectivity:
    """The connectivity of one grpc.Channel, kept up to date by a
    subscription (grpc's own connectivity poller, a thread that ends when
    the channel is closed or collected). One is shared by all the Clients
    of a channel (see _connectivity), so that making many Clients of a
    channel does not make many subscriptions. It keeps only a weak
    reference to the channel."""

    def __init__(self, channel: grpc.Channel):
        self.cond = threading.Condition()
        self.state: Optional[grpc.ChannelConnectivity] = None  # guarded by cond; None until first told
        # Whether the channel was asked to connect since it was last seen
        # other than idle. Guarded by cond.
        self._asked = False
        self._channel = weakref.ref(channel)
        channel.subscribe(self._update)
        self.connect()

    def _update(self, state: grpc.ChannelConnectivity) -> None:
        with self.cond:
            self.state = state
            if state is not _C.IDLE:
                self._asked = False
            self.cond.notify_all()

    def connect(self) -> None:
        """Asks the channel to connect if it is idle (or not yet known),
        once per time it is idle; not under cond.

        The public way to ask, subscribing with try_to_connect, leaves a
        request with grpc's connectivity poller, which it serves within
        0.2 s (its polling interval); a channel closed meanwhile makes the
        poller fail with a logged traceback (grpc/grpc#18995). So the
        client asks grpc's core channel directly, at once
        (check_connectivity_state(True), what the poller itself calls),
        where it finds it, and the public way otherwise."""
        with self.cond:
            if self._asked or self.state not in (None, _C.IDLE):
                return
            self._asked = True
        ch = self._channel()
        if ch is None:
            return
        core = _core(ch)
        if core is not None:
            try:
                core.check_connectivity_state(True)
                return
            except ValueError:  # closed
                return
            except Exception:  # not the core channel this code knows: ask the public way
                pass
        ch.subscribe(_kick, try_to_connect=True)
        ch.unsubscribe(_kick)


_connectivities: "weakref.WeakKeyDictionary[grpc.Channel, _Connectivity]" = weakref.WeakKeyDictionary()
_connectivities_lock = threading.Lock()


def _connectivity(channel) -> Optional[_Connectivity]:
    """The _Connectivity of channel, made on first use, or None when
    channel cannot report its connectivity (it does not implement
    subscribe)."""
    with _connectivities_lock:
        try:
            c = _connectivities.get(channel)
        except TypeError:  # neither hashable nor weakly referable: not shared
            c = None
        if c is not None:
            return c
        try:
            c = _Connectivity(channel)
        except (AttributeError, NotImplementedError):
            return None
        try:
            _connectivities[channel] = c
        except TypeError:
            pass
        return c


class _Base:
    """What Client and AsyncClient share: the stub of channel, options,
    counters, the failure policy and the hook."""

    def __init__(self, channel: Union[grpc.Channel, "grpc.aio.Channel"], *,
                 timeout: Optional[float] = DEFAULT_TIMEOUT, fail_closed: bool = False,
                 on_decision: Optional[DecisionHook] = None, logger: Optional[logging.Logger] = None,
                 refusal_cache: float = DEFAULT_REFUSAL_CACHE,
                 refusal_cache_size: int = DEFAULT_REFUSAL_CACHE_SIZE,
                 clock: Callable[[], float] = time.monotonic,
                 connect_timeout: Optional[float] = DEFAULT_CONNECT_TIMEOUT, auto_renew: bool = False):
        self._auto_renew = auto_renew
        # The generated stub serves both channels: its calls are awaitable
        # on a grpc.aio.Channel.
        self._stub = pb_grpc.RateLimitServiceStub(channel)
        self._connect_timeout = connect_timeout if connect_timeout is not None and connect_timeout > 0 else None
        # When the current connection attempt began, as this client saw it
        # (time.monotonic), or None while the channel is seen ready.
        self._since: Optional[float] = None
        self._start_connecting(channel)
        self._refusals = (Refusals(refusal_cache, refusal_cache_size, clock)
                          if refusal_cache > 0 and refusal_cache_size > 0 else None)
        self._local = 0
        self._timeout = timeout if timeout is not None and timeout > 0 else None
        self._fail_closed = fail_closed
        self._on_decision = on_decision
        self._log = logger or log
        self._lock = threading.Lock()
        self._fail_opens = 0
        self._failures = 0
        self._unimplemented_logged = False

    def _start_connecting(self, channel) -> None:
        """Asks channel to connect, and notes how to learn its state."""
        raise NotImplementedError

    @staticmethod
    def _start_timer(delay: float, f: Callable[[], object]) -> Callable[[], object]:
        """Calls f in delay seconds (auto_renew's timers; tests replace it),
        and returns what cancels it: here a daemon thread's timer."""
        t = threading.Timer(delay, f)
        t.daemon = True
        t.start()
        return t.cancel

    def _wait_left(self, state) -> Optional[float]:
        """The step of a call waiting for the connection, which is in state:
        None when the call goes on (the channel is ready, failing or shut
        down, or the attempt's connect budget is spent), else how long it
        may still wait. Both clients' waits take their steps from it."""
        if state is _C.READY:
            self._since = None
            return None
        if state in (_C.TRANSIENT_FAILURE, _C.SHUTDOWN) or self._connect_timeout is None:
            return None
        if self._since is None:
            self._since = time.monotonic()
        left = self._since + self._connect_timeout - time.monotonic()
        return left if left > 0 else None

    @property
    def local_refusals(self) -> int:
        """How many requests the client refused by itself, from its memory
        of refusals, without calling ratelimitd."""
        return self._local

    @property
    def fail_opens(self) -> int:
        """How many requests were allowed because ratelimitd failed."""
        return self._fail_opens

    @property
    def failures(self) -> int:
        """How many calls ratelimitd failed (allowed or refused by the
        failure policy)."""
        return self._failures

    def _remembered(self, domain: str, descriptors: Sequence[Descriptor]):
        """Checks the request, and returns (its key in the refusal memory or
        None, the remembered refusal or None). The key is built only when
        something is remembered: see _decided."""
        check(domain, descriptors)
        if not self._refusals or any(d.give_back for d in descriptors):
            # Off, or nothing remembered; or a request whose give-backs
            # apply whatever it decides, which a refusal from memory would lose.
            return None, None
        key = refusal_key(domain, descriptors)
        d = self._refusals.get(key)
        if d is not None:
            with self._lock:
                self._local += 1
        return key, d

    def _decided(self, domain: str, descriptors: Sequence[Descriptor], key, resp) -> Decision:
        """ratelimitd's decision resp, remembered when a refusal with a
        retry-after, under key (built now if _remembered did not)."""
        d = decision(resp)
        if (not d.allowed and self._refusals is not None and d.retry_after > 0
                and not any(desc.give_back for desc in descriptors)):
            self._refusals.put(refusal_key(domain, descriptors) if key is None else key, d)
        return d

    def _acquire_request(self, domain: str, descriptors: Sequence[Descriptor]) -> pb.AcquireRequest:
        """The Acquire request for descriptors; raises InvalidRequest."""
        check(domain, descriptors)
        for i, desc in enumerate(descriptors):
            if desc.give_back:
                raise InvalidRequest(f"ratelimitd: descriptor {i}: give_back in acquire")
        return pb.AcquireRequest(domain=domain, descriptors=_build(domain, descriptors).descriptors)

    def _acquired(self, domain: str, descriptors: Sequence[Descriptor],
                  resp: Optional[pb.AcquireResponse], err: Optional[grpc.RpcError]):
        """The decision on an Acquire (ratelimitd's answer resp, or the
        failure policy's on err), passed to the hook, and the lease it
        answered (None when nothing is held)."""
        d = decision(resp) if resp is not None else self._failed(cast(grpc.RpcError, err), "Acquire")
        lease = resp.lease if resp is not None and d.allowed and resp.HasField("lease") and resp.lease.id else None
        return self._hook(domain, descriptors, d), lease

    def _budget(self, timeout: Optional[float]) -> Optional[float]:
        if timeout is None:
            return self._timeout
        return timeout if timeout > 0 else None

    def _failed(self, err: grpc.RpcError, method: str = "ShouldRateLimit") -> Decision:
        """The failure policy's decision on ratelimitd's error err; raises
        InvalidRequest for INVALID_ARGUMENT."""
        invalid = _invalid(err)
        if invalid is not err:
            raise invalid from err
        if hasattr(err, "code") and err.code() == grpc.StatusCode.UNIMPLEMENTED:
            self._unimplemented(method)
        with self._lock:
            self._failures += 1
            if not self._fail_closed:
                self._fail_opens += 1
        return Decision(allowed=not self._fail_closed, error=err)

    def _unimplemented(self, method: str) -> None:
        with self._lock:
            if self._unimplemented_logged:
                return
            self._unimplemented_logged = True
        self._log.error(
            "ratelimitd: the server does not implement ratelimit.v1.RateLimitService/%s "
            "(UNIMPLEMENTED): is this client pointed at ratelimitd (one recent enough for the method), or at "
            "another rate limit service (such as envoyproxy/ratelimit, which serves only Envoy's "
            "envoy.service.ratelimit.v3; use ratelimitd.envoy_rls for it)? Calls so answered are decided by "
            "the failure policy (%s); this is logged once.",
            method, "fail closed" if self._fail_closed else "fail open")

    def _hook(self, domain: str, descriptors: Sequence[Descriptor], d: Decision) -> Decision:
        if self._on_decision is not None:
            try:
                self._on_decision(domain, descriptors, d)
            except Exception:  # a hook must not turn a decision into an error
                self._log.exception("ratelimitd: on_decision hook raised")
        return d


class Client(_Base):
    """A blocking client of ratelimitd's native API over channel (a
    grpc.Channel, such as grpc.insecure_channel("127.0.0.1:8081")), which the
    caller keeps and closes. Safe for use by several threads.

    timeout: the budget of each call in seconds (DEFAULT_TIMEOUT; None or
    <= 0: none), which starts once the channel is connected (see below).
    fail_closed: refuse instead of allowing when ratelimitd
    fails. on_decision: called with (domain, descriptors, decision) after
    every decision, the failure policy's included (its exceptions are
    logged, not raised). logger: for the UNIMPLEMENTED warning and hook
    errors (default logging.getLogger("ratelimitd")).

    connect_timeout: the connect budget, in seconds (DEFAULT_CONNECT_TIMEOUT;
    None or <= 0: calls never wait). A new channel is idle until used: the
    client asks it to connect when made, in the background, and a call
    made while the channel is idle or connecting waits until it is ready
    before its budget starts, so that a handshake longer than the budget
    (TLS, a distant or loaded ratelimitd, the first calls after a deploy,
    a reconnection after ratelimitd restarted) does not make calls fail
    open. The connect budget is counted from the start of a connection
    attempt (when the client is made, or at the first call that finds the
    channel not ready after it was), not per call: calls wait together at
    most until connect_timeout after that start, and once it is spent no
    call waits until the channel has been ready again, so a host that
    accepts connections but never answers delays calls once, not each
    call. Calls never wait while the channel is in TRANSIENT_FAILURE
    (ratelimitd refused or failed the handshake; grpc retries with
    backoff): the failure policy decides at once. Code must still expect
    decisions of the failure policy, first calls included (Decision.error
    set, no statuses). The blocking client learns the channel's state
    from a subscription (channel.subscribe), one per channel whatever the
    number of clients, which grpc ends when the channel is closed.

    refusal_cache: when ratelimitd refuses a request with a retry-after of
    T, the client refuses the same request (domain, descriptors, entries,
    hits and overrides, in the same order) by itself for min(T,
    refusal_cache) seconds (DEFAULT_REFUSAL_CACHE; 0: off), without a call:
    Decision.local is then True, and local_refusals counts them.
    refusal_cache_size bounds how many are remembered (10000). clock: the
    seconds clock of that memory (time.monotonic).

    auto_renew: renew each lease acquire holds halfway to its expiry (no
    sooner than 0.1 s) until it is released, for work that may outlive its
    limit's window: on a daemon thread's timer (an AsyncClient's: a task of
    its event loop). A slot is then held as long as the work, and a lease
    never released holds it as long as the process lives. A lease lost all
    the same (ratelimitd away past its expiry) is logged (warning).
    """

    def should_rate_limit(self, domain: str, *descriptors: Descriptor,
                          timeout: Optional[float] = None,
                          metadata: Optional[Sequence[Tuple[str, str]]] = None) -> Decision:
        """Asks whether the work described by descriptors may proceed under
        the rules of domain: allowed only if every descriptor is within its
        limits; a refused request consumes nothing. timeout overrides the
        client's budget for this call (<= 0: none). Raises InvalidRequest
        for a malformed request; never raises for ratelimitd's failures."""
        key, d = self._remembered(domain, descriptors)
        if d is not None:
            return self._hook(domain, descriptors, d)
        req = _build(domain, descriptors)
        self._await_connection()
        try:
            resp = self._stub.ShouldRateLimit(req, timeout=self._budget(timeout), metadata=metadata)
        except grpc.RpcError as err:
            d = self._failed(err)
        else:
            d = self._decided(domain, descriptors, key, resp)
        return self._hook(domain, descriptors, d)

    def acquire(self, domain: str, *descriptors: Descriptor, timeout: Optional[float] = None,
                metadata: Optional[Sequence[Tuple[str, str]]] = None) -> "Lease":
        """Takes slots of the concurrency limits (algorithm: concurrency)
        of domain's rules that descriptors match, and counts on their other
        limits as should_rate_limit does, and returns the Lease holding
        them, a context manager that releases it on exit, exception or not:

            with rl.acquire("jobs", D("tenant", t)) as lease:
                if not lease.allowed:
                    ...  # all slots busy: retry in lease.decision.retry_after
                ...  # the work

        The decision (lease.decision) is should_rate_limit's: refused, or
        decided by the failure policy, nothing is held, and release does
        nothing; so where no concurrency limit applies. Raises
        InvalidRequest for a malformed request (a give_back descriptor
        among them). The memory of refusals is not used: a slot may free at
        any time. A slot frees itself when its lease expires (the limit's
        window): work that may outlive it calls lease.renew()."""
        req = self._acquire_request(domain, descriptors)
        self._await_connection()
        try:
            resp, err = self._stub.Acquire(req, timeout=self._budget(timeout), metadata=metadata), None
        except grpc.RpcError as e:
            resp, err = None, e
        d, lease = self._acquired(domain, descriptors, resp, err)
        return Lease(self, req, d, lease)

    def _start_connecting(self, channel: grpc.Channel) -> None:
        self._conn = _connectivity(channel)
        if self._conn is not None:
            self._conn.connect()
            with self._conn.cond:
                if self._conn.state is not _C.READY:
                    self._since = time.monotonic()

    def _await_connection(self) -> None:
        """Returns once the channel is ready, in TRANSIENT_FAILURE or shut
        down, or once the current attempt's connect budget is spent."""
        c = self._conn
        if c is None or self._connect_timeout is None:
            return
        if c.state is _C.READY and self._since is None:  # the fast path, without the lock
            return
        kick = False
        with c.cond:
            while True:
                state = c.state
                left = self._wait_left(state)
                if left is None:
                    return
                if state is _C.IDLE and not kick:
                    kick = True
                    c.cond.release()  # connect takes cond, and subscribing grpc's lock
                    try:
                        c.connect()
                    finally:
                        c.cond.acquire()
                    continue
                c.cond.wait(left)


class AsyncClient(_Base):
    """The asyncio variant of Client, over a grpc.aio.Channel (such as
    grpc.aio.insecure_channel("127.0.0.1:8081"), made in the event loop that
    uses it), which the caller keeps and closes. Same options as Client.
    Cancelling the awaiting task cancels the call (asyncio.CancelledError).
    It asks the channel to connect when made, and learns its state, with
    channel.get_state (no subscription, no thread; a call waiting for the
    connection looks every 5 ms); a channel without it is used as it is,
    and calls do not wait for it to connect."""

    def _start_connecting(self, channel: "grpc.aio.Channel") -> None:
        # Called first thing when made. A blocking channel's calls would not
        # be awaitable: the first call would fail, far from the mistake.
        if isinstance(channel, grpc.Channel) or not hasattr(channel, "unary_unary"):
            raise TypeError(f"ratelimitd: AsyncClient needs a grpc.aio channel (grpc.aio.insecure_channel, "
                            f"grpc.aio.secure_channel), not a {type(channel).__module__}.{type(channel).__name__}; "
                            "use ratelimitd.Client over a blocking grpc.Channel")
        self._channel = channel if hasattr(channel, "get_state") else None
        if self._channel is not None and self._channel.get_state(try_to_connect=True) is not _C.READY:
            self._since = time.monotonic()

    @staticmethod
    def _start_timer(delay: float, f: Callable[[], object]) -> Callable[[], object]:
        """See _Base._start_timer: here the running event loop's."""
        return asyncio.get_running_loop().call_later(delay, f).cancel

    async def _await_connection(self) -> None:
        """See Client._await_connection."""
        ch = self._channel
        if ch is None or self._connect_timeout is None:
            return
        state = ch.get_state(try_to_connect=False)
        while True:
            left = self._wait_left(state)
            if left is None:
                return
            if state is _C.IDLE:
                ch.get_state(try_to_connect=True)
            # Polled: grpc.aio's wait_for_state_change has no deadline, and
            # one given up (timed out, cancelled) stays registered until the
            # state changes, then fires into an event loop that may be
            # closed (a logged RuntimeError).
            await asyncio.sleep(min(left, _ASYNC_POLL))
            state = ch.get_state(try_to_connect=False)

    async def should_rate_limit(self, domain: str, *descriptors: Descriptor,
                                timeout: Optional[float] = None,
                                metadata: Optional[Sequence[Tuple[str, str]]] = None) -> Decision:
        """See Client.should_rate_limit."""
        key, d = self._remembered(domain, descriptors)
        if d is not None:
            return self._hook(domain, descriptors, d)
        req = _build(domain, descriptors)
        await self._await_connection()
        try:
            resp = await self._stub.ShouldRateLimit(req, timeout=self._budget(timeout), metadata=metadata)
        except grpc.RpcError as err:
            d = self._failed(err)
        else:
            d = self._decided(domain, descriptors, key, resp)
        return self._hook(domain, descriptors, d)

    def acquire(self, domain: str, *descriptors: Descriptor, timeout: Optional[float] = None,
                metadata: Optional[Sequence[Tuple[str, str]]] = None) -> "_Acquiring":
        """Client.acquire for asyncio: await it for the AsyncLease, or use
        it as an async context manager, which releases on exit, exception
        or cancellation alike:

            async with rl.acquire("jobs", D("tenant", t)) as lease:
                if not lease.allowed:
                    ...
        """
        return _Acquiring(self._acquire(domain, descriptors, timeout, metadata))

    async def _acquire(self, domain: str, descriptors: Sequence[Descriptor], timeout: Optional[float],
                       metadata: Optional[Sequence[Tuple[str, str]]]) -> "AsyncLease":
        req = self._acquire_request(domain, descriptors)
        await self._await_connection()
        try:
            resp, err = await self._stub.Acquire(req, timeout=self._budget(timeout), metadata=metadata), None
        except grpc.RpcError as e:
            resp, err = None, e
        d, lease = self._acquired(domain, descriptors, resp, err)
        return AsyncLease(self, req, d, lease)


class LeaseLost(Exception):
    """Raised by renew when the lease has expired or was released: its
    slots may be held by others now; the work should stop, or acquire
    again."""


class _LeaseBase:
    """What Lease and AsyncLease share: the Acquire's request and
    decision, the lease held, and the requests that release and renew it."""

    def __init__(self, client: _Base, req: pb.AcquireRequest, decision: Decision, lease: Optional[pb.Lease]):
        self._client = client
        self._req = req
        #: The Acquire's decision, as should_rate_limit's.
        self.decision = decision
        self._id: Optional[bytes] = None
        self._expires_at: Optional[float] = None
        self._hold(lease)
        # Released, or lost: release and renew do nothing more.
        self._ended = False
        self._release_error: Optional[Exception] = None
        # Set when release is called: auto_renew stops. The cancel of the
        # next renewal's timer, under _timer_lock.
        self._releasing = False
        self._timer_lock = threading.Lock()
        self._cancel: Optional[Callable[[], object]] = None

    @property
    def allowed(self) -> bool:
        """Whether the work may proceed: decision.allowed."""
        return self.decision.allowed

    @property
    def expires_at(self) -> Optional[float]:
        """When the slots free themselves unless renewed, in seconds since
        the epoch (as time.time(), on ratelimitd's clock), or None when
        nothing is held."""
        return self._expires_at

    def _hold(self, lease: Optional[pb.Lease]) -> None:
        self._id = lease.id if lease is not None else None
        self._expires_at = (lease.expires_at.seconds + lease.expires_at.nanos / 1e9
                            if lease is not None and lease.HasField("expires_at") else None)

    def _start_release(self) -> Optional[pb.ReleaseRequest]:
        """Ends the lease, and returns the request to send, None when there
        is none (nothing held, or ended already); raises the first
        release's error again. Under the op lock."""
        if self._release_error is not None:
            raise self._release_error
        if self._ended:
            return None
        self._ended = True
        if self._id is None:
            return None
        req = pb.ReleaseRequest(domain=self._req.domain, descriptors=self._req.descriptors, lease_id=self._id)
        self._hold(None)
        return req

    def _release_failed(self, err: grpc.RpcError) -> Exception:
        """Records err, the failure of the release, as what release raises
        now and again later, and returns it. Under the op lock."""
        self._release_error = _invalid(err)
        return self._release_error

    def _renew_request(self) -> Optional[pb.RenewRequest]:
        """The request renewing the lease, None when nothing was ever held;
        raises LeaseLost once it ended. Under the op lock."""
        if self._ended:
            raise LeaseLost("ratelimitd: lease expired or released")
        if self._id is None:
            return None
        return pb.RenewRequest(domain=self._req.domain, descriptors=self._req.descriptors, lease_id=self._id)

    def _renewed(self, resp: pb.RenewResponse) -> None:
        """Holds the renewed lease of resp; raises LeaseLost when refused."""
        if resp.code == pb.CODE_OVER_LIMIT or not resp.HasField("lease"):
            self._ended = True
            self._hold(None)
            raise LeaseLost("ratelimitd: lease expired or released")
        self._hold(resp.lease)

    def _keep(self, last: Optional[BaseException], renew: Callable[[], object]) -> None:
        """Schedules renew halfway to the expiry (no sooner than 0.1 s),
        after the failure last if any; once the lease expired without a
        renewal, logs it lost instead. Nothing once released."""
        with self._timer_lock:
            if self._releasing or self._ended or self._expires_at is None:
                return
            left = self._expires_at - time.time()
            if last is not None and left <= 0:
                self._log_lost(last)
                return
            self._cancel = self._client._start_timer(max(left / 2, _MIN_RENEW_WAIT), renew)

    def _stop_keeping(self) -> None:
        """Stops auto_renew: called first thing by release."""
        with self._timer_lock:
            self._releasing = True
            if self._cancel is not None:
                self._cancel()

    def _log_lost(self, err: BaseException) -> None:
        self._client._log.warning("ratelimitd: a lease held was lost; its slots may be held by others (domain %s): %s",
                                  self._req.domain, err)

    def _log_release(self, err: BaseException) -> None:
        self._client._log.warning("ratelimitd: release failed; the slots free themselves when their lease "
                                  "expires (domain %s): %s", self._req.domain, err)


class Lease(_LeaseBase):
    """The slots one Client.acquire took, until release() gives them back
    or the lease expires (expires_at); renew() extends it. A context
    manager that releases on exit (a failed release is logged, not
    raised). Safe for use by several threads."""

    def __init__(self, client: _Base, req: pb.AcquireRequest, decision: Decision, lease: Optional[pb.Lease]):
        super().__init__(client, req, decision, lease)
        self._op = threading.Lock()  # serializes release and renew
        if client._auto_renew:
            self._keep(None, self._renew_kept)

    def _renew_kept(self) -> None:
        """auto_renew's renewal, on the timer's thread."""
        try:
            self.renew()
        except LeaseLost as err:
            if not self._releasing:
                self._log_lost(err)
            return
        except Exception as err:
            self._keep(err, self._renew_kept)
            return
        self._keep(None, self._renew_kept)

    def __enter__(self) -> "Lease":
        return self

    def __exit__(self, *exc) -> None:
        try:
            self.release()
        except Exception as err:  # the block's own exception, if any, matters more
            self._log_release(err)

    def release(self) -> None:
        """Gives the slots back, exactly those, once: later calls do nothing
        (or raise the first one's error again). Waits for ratelimitd at most
        RELEASE_TIMEOUT. Raises ratelimitd's error (a grpc.RpcError) when it
        could not be told: the slots then free themselves when the lease
        expires."""
        self._stop_keeping()
        with self._op:
            req = self._start_release()
            if req is None:
                return
            try:
                self._client._stub.Release(req, timeout=RELEASE_TIMEOUT)
            except grpc.RpcError as err:
                raise self._release_failed(err) from None

    def renew(self, timeout: Optional[float] = None) -> None:
        """Extends the lease to a full lease from now (the limit's window);
        expires_at then says until when. Raises LeaseLost when it has
        expired or was released, and ratelimitd's error (a grpc.RpcError)
        when it could not be asked within the budget (timeout, else the
        client's): the lease then still ends at expires_at. Does nothing
        when nothing was ever held."""
        with self._op:
            req = self._renew_request()
            if req is None:
                return
            try:
                resp = self._client._stub.Renew(req, timeout=self._client._budget(timeout))
            except grpc.RpcError as err:
                raise _invalid(err) from None
            self._renewed(resp)


class AsyncLease(_LeaseBase):
    """Lease for asyncio (AsyncClient.acquire): release and renew are
    coroutines, and it is an async context manager. A release runs to its
    end even when the task awaiting it is cancelled."""

    def __init__(self, client: _Base, req: pb.AcquireRequest, decision: Decision, lease: Optional[pb.Lease]):
        super().__init__(client, req, decision, lease)
        self._op = asyncio.Lock()  # serializes release and renew
        self._renewing: Optional["asyncio.Future[None]"] = None  # auto_renew's renewal in flight
        if client._auto_renew:
            self._keep(None, self._renew_now)

    def _renew_now(self) -> None:
        self._renewing = asyncio.ensure_future(self._renew_kept())

    async def _renew_kept(self) -> None:
        """auto_renew's renewal, a task of the event loop."""
        try:
            await self.renew()
        except LeaseLost as err:
            if not self._releasing:
                self._log_lost(err)
            return
        except Exception as err:
            self._keep(err, self._renew_now)
            return
        self._keep(None, self._renew_now)

    async def __aenter__(self) -> "AsyncLease":
        return self

    async def __aexit__(self, *exc) -> None:
        try:
            await self.release()
        except Exception as err:  # the block's own exception, if any, matters more
            self._log_release(err)

    async def release(self) -> None:
        """See Lease.release. It is shielded from cancellation: a cancelled
        caller gets CancelledError while the release goes on (and logs its
        failure, if it fails)."""
        self._stop_keeping()
        if self._renewing is not None:
            self._renewing.cancel()  # a renewal in flight gives up
        task = asyncio.ensure_future(self._release())
        try:
            await asyncio.shield(task)
        except asyncio.CancelledError:
            task.add_done_callback(self._released_late)
            raise

    def _released_late(self, task: "asyncio.Future[None]") -> None:
        if not task.cancelled() and task.exception() is not None:
            self._log_release(cast(BaseException, task.exception()))

    async def _release(self) -> None:
        async with self._op:
            req = self._start_release()
            if req is None:
                return
            try:
                await self._client._stub.Release(req, timeout=RELEASE_TIMEOUT)
            except grpc.RpcError as err:
                raise self._release_failed(err) from None

    async def renew(self, timeout: Optional[float] = None) -> None:
        """See Lease.renew."""
        async with self._op:
            req = self._renew_request()
            if req is None:
                return
            try:
                resp = await self._client._stub.Renew(req, timeout=self._client._budget(timeout))
            except grpc.RpcError as err:
                raise _invalid(err) from None
            self._renewed(resp)


class _Acquiring:
    """AsyncClient.acquire's answer: awaitable (the AsyncLease), and an
    async context manager holding the lease for its block."""

    def __init__(self, acquiring: Awaitable[AsyncLease]):
        self._acquiring = acquiring
        self._lease: Optional[AsyncLease] = None

    def __await__(self):
        return self._acquiring.__await__()

    async def __aenter__(self) -> AsyncLease:
        lease = self._lease = await self._acquiring
        return lease

    async def __aexit__(self, *exc) -> None:
        if self._lease is not None:
            await self._lease.__aexit__(*exc)
