"""Quota mode: decide locally, under assignments ratelimitd sends over
Envoy's Rate Limit Quota Service (RLQS), as the Go client's client.Quota
does.

Each descriptor is a bucket, whose entries are the bucket id (a map: the
same bucket in any order of its entries). A Quota reports each bucket's
use to ratelimitd over one bidirectional stream (at the bucket's first use,
then every reporting interval), and ratelimitd answers with the bucket's
assignment: a token bucket (this client's share of the rule's limit),
allow all or deny all, for a time to live (twice the reporting interval).
Decisions never call ratelimitd: Quota.allow reads and updates the
bucket's token bucket in memory.

Until a bucket's first assignment arrives, once its assignment expired
(ratelimitd unreachable for two reporting intervals), for an assignment
this client cannot apply, and for buckets past max_buckets, the failure
policy decides: allowed (fail open, the default), or refused
(fail_closed=True); Decision.error is then a NoAssignment. A bucket
unused for QUOTA_IDLE_INTERVALS reporting intervals is forgotten, and one
ratelimitd abandons (its rule was removed) is reported afresh at its next
use.

Quota works over a grpc.Channel with a thread of its own; AsyncQuota over
a grpc.aio.Channel with a task in the event loop that made it. Both decide
synchronously (allow); their should_rate_limit answers with a Decision,
which the ASGI and WSGI middleware and the grpc.aio interceptor take.

Use a Client (an RPC per decision) when each request must be decided
exactly against counters shared by every replica; use a Quota when the
round trip costs too much and a limit enforced as shares, adjusted every
reporting interval, is close enough: a client may go past its share by its
token bucket's burst.

Importing this module loads Envoy's RLQS stubs (and the files they import)
into protobuf's process-wide descriptor pool; import ratelimitd alone does
not.

Bucket ids are protobuf strings here, so a Quota refuses (InvalidRequest)
entries whose value is bytes that are not valid UTF-8; the Go client, which
writes its messages itself, sends any byte.
"""

from __future__ import annotations

import asyncio
import logging
import math
import random
import threading
import time
from typing import Any, Callable, Dict, FrozenSet, Iterator, List, Optional, Sequence, Tuple

import grpc

from ._common import MAX_DESCRIPTORS, MAX_DOMAIN, MAX_ENTRIES, MAX_HITS
from .client import Decision, Descriptor, InvalidRequest, Status, UnencodableValue
from .proto.envoy.service.rate_limit_quota.v3 import rlqs_pb2 as pb
from .proto.envoy.service.rate_limit_quota.v3 import rlqs_pb2_grpc as pb_grpc

__all__ = [
    "DEFAULT_QUOTA_MAX_BUCKETS",
    "DEFAULT_REPORTING_INTERVAL",
    "QUOTA_IDLE_INTERVALS",
    "AsyncQuota",
    "NoAssignment",
    "Quota",
]

#: How often, by default, a Quota reports its buckets' usage, in seconds
#: (ratelimitd's assignments then live twice as long).
DEFAULT_REPORTING_INTERVAL = 5.0
#: How many buckets a Quota holds at most by default.
DEFAULT_QUOTA_MAX_BUCKETS = 10000
#: How many reporting intervals a bucket may go unused before the Quota
#: forgets it.
QUOTA_IDLE_INTERVALS = 3

# Reconnection backoff of the reporting stream: doubling from the first to
# the second, each wait jittered by +-20%.
_BACKOFF_MIN = 0.1
_BACKOFF_MAX = 10.0
# The longest duration read from an assignment: longer ones read as it.
_MAX_DURATION = 100 * 365 * 24 * 3600.0
# Seconds per RateLimitUnit, from SECOND (1) to YEAR (6).
_UNIT_SECONDS = (0, 1, 60, 3600, 86400, 30 * 86400, 365 * 86400)
# The most tokens a token bucket holds, as the Go client's.
_MAX_TOKENS = 2**32 - 1

log = logging.getLogger("ratelimitd")

# Kinds of assignment.
_ALLOW_ALL, _DENY_ALL, _TOKENS = 0, 1, 2

BucketKey = FrozenSet[Tuple[str, str]]


class NoAssignment(Exception):
    """Decision.error when a Quota's failure policy decided: a bucket had no
    assignment in force (none received yet, expired because ratelimitd
    could not be reached, or one this client cannot apply), or the Quota
    held as many buckets as it may."""


_NO_ASSIGNMENT = NoAssignment("ratelimitd: quota: no assignment in force from ratelimitd")


def _bucket_key(d: Descriptor, i: int) -> Tuple[BucketKey, Tuple[Tuple[str, str], ...]]:
    """The bucket id of descriptor i, d: its entries as a set of (key, value)
    strings and as pairs in order, cached on d (immutable). Raises
    InvalidRequest for a descriptor a Quota cannot decide."""
    if not isinstance(d, Descriptor):
        raise InvalidRequest(f"ratelimitd: quota: descriptor {i} is a {type(d).__name__}, not a Descriptor")
    cached = d.__dict__.get("_quota_key")
    if cached is not None:
        return cached
    if not d.entries or len(d.entries) > MAX_ENTRIES:
        raise InvalidRequest(f"ratelimitd: quota: descriptor {i} has {len(d.entries)} entries, want 1 to {MAX_ENTRIES}")
    if d.limit is not None:
        raise InvalidRequest(f"ratelimitd: quota: descriptor {i} has a limit override, which a Quota cannot apply")
    pairs: List[Tuple[str, str]] = []
    seen = set()
    for j, e in enumerate(d.entries):
        k, v = e.key, e.value
        if not isinstance(k, str) or k == "":
            raise InvalidRequest(f"ratelimitd: quota: descriptor {i} entry {j} has an empty key")
        if k in seen:
            raise InvalidRequest(f"ratelimitd: quota: descriptor {i} repeats key {k!r}: a bucket id is a map")
        seen.add(k)
        try:
            k.encode("utf-8")
            if isinstance(v, bytes):
                v = v.decode("utf-8")
            elif isinstance(v, str):
                v.encode("utf-8")
            else:
                raise InvalidRequest(f"ratelimitd: quota: descriptor {i} entry {j}: value is a {type(v).__name__}")
        except UnicodeError:
            raise UnencodableValue(f"ratelimitd: quota: descriptor {i} entry {j} ({k!r}) is not valid UTF-8, which "
                                   "a bucket id of the Python client must be") from None
        pairs.append((k, v))
    key = (frozenset(pairs), tuple(pairs))
    object.__setattr__(d, "_quota_key", key)  # d is frozen: its entries never change
    return key


class _Bucket:
    """One bucket: its id, its assignment and token bucket, and its counts
    since the last report. Guarded by its Quota's lock."""

    __slots__ = ("pairs", "kind", "expires", "max", "per_fill", "fill", "base", "last", "held",
                 "allowed", "denied", "used", "reported_on", "last_report", "idle")

    def __init__(self, pairs: Tuple[Tuple[str, str], ...], now: float):
        self.pairs = pairs
        self.kind: Optional[int] = None  # no assignment
        self.expires = math.inf
        self.max = self.per_fill = self.held = self.last = 0
        self.fill = self.base = 0.0
        self.allowed = self.denied = 0
        self.used = False  # since the last report, check_only calls too
        self.reported_on = 0  # the stream generation of its last report
        self.last_report = now  # of its last report, or its creation
        self.idle = 0  # intervals without use


def _duration(d) -> float:
    """A google.protobuf.Duration in seconds: negative reads as 0, over 100
    years as 100 years."""
    if d.seconds < 0 or d.nanos < 0:
        return 0.0
    return min(d.seconds + d.nanos / 1e9, _MAX_DURATION)


def _strategy(qa) -> Optional[Tuple[int, int, int, float]]:
    """The (kind, max tokens, tokens per fill, fill interval) of a
    QuotaAssignmentAction's strategy, None when this client cannot apply
    it."""
    s = qa.rate_limit_strategy
    which = s.WhichOneof("strategy")
    if which == "blanket_rule":
        return (s.blanket_rule, 0, 0, 0.0) if s.blanket_rule in (_ALLOW_ALL, _DENY_ALL) else None
    if which == "requests_per_time_unit":
        r = s.requests_per_time_unit
        if not 0 < r.time_unit < len(_UNIT_SECONDS):
            return None
        return (_TOKENS, r.requests_per_time_unit, r.requests_per_time_unit, float(_UNIT_SECONDS[r.time_unit]))
    if which == "token_bucket":
        tb = s.token_bucket
        per_fill = tb.tokens_per_fill.value if tb.HasField("tokens_per_fill") else 1
        fill = _duration(tb.fill_interval)
        if fill <= 0:
            return None
        return (_TOKENS, tb.max_tokens, per_fill, fill)
    return None


class _Core:
    """What Quota and AsyncQuota share: the buckets, the decisions, the
    reports and the application of assignments."""

    # Read by the middleware: decisions are local, so a blocking Quota may
    # serve an event loop.
    decides_locally = True

    def __init__(self, domain: str, *, reporting_interval: float, fail_closed: bool, max_buckets: int,
                 logger: Optional[logging.Logger], clock: Callable[[], float]):
        if not isinstance(domain, str) or not domain or len(domain.encode("utf-8", "surrogatepass")) > MAX_DOMAIN:
            raise ValueError(f"ratelimitd: quota: domain {domain!r}: want 1 to {MAX_DOMAIN} bytes of UTF-8")
        try:
            domain.encode("utf-8")
        except UnicodeError:
            raise ValueError(f"ratelimitd: quota: domain {domain!r} is not valid UTF-8") from None
        if reporting_interval is None or not reporting_interval > 0 or math.isinf(reporting_interval):
            raise ValueError(f"ratelimitd: quota: reporting_interval {reporting_interval!r}: want a positive "
                             "number of seconds")
        if isinstance(max_buckets, bool) or not isinstance(max_buckets, int) or max_buckets < 1:
            raise ValueError(f"ratelimitd: quota: max_buckets {max_buckets!r}: want a positive whole number")
        self._domain = domain
        self._interval = float(reporting_interval)
        self._fail_closed = fail_closed
        self._max_buckets = max_buckets
        self._log = logger or log
        self._clock = clock
        self._lock = threading.Lock()
        self._buckets: Dict[BucketKey, _Bucket] = {}
        self._fail_opens = 0
        self._closed = False

    @property
    def domain(self) -> str:
        """The domain whose rules decide."""
        return self._domain

    @property
    def fail_opens(self) -> int:
        """How many calls the failure policy allowed (a bucket without an
        assignment in force, or past max_buckets) when failing open."""
        return self._fail_opens

    @property
    def buckets(self) -> int:
        """How many buckets the Quota holds."""
        return len(self._buckets)

    def _wake(self) -> None:
        """Asks the reporter to report new buckets now."""
        raise NotImplementedError

    def allow(self, *descriptors: Descriptor) -> bool:
        """Whether the work described by descriptors may proceed: only if
        each descriptor's bucket admits it, and a refused call consumes
        nothing. A descriptor takes hits tokens (None or 0: 1) from a token
        bucket, a check_only one none; the counts reported are of hits.
        Never blocks nor calls ratelimitd. Raises InvalidRequest for a
        malformed call: no descriptors, over 64, a descriptor without
        entries or over 32, with an empty key, a key twice, a value that
        is not UTF-8, or a limit override (which RLQS cannot carry)."""
        return self._decide(descriptors)[0]

    def should_rate_limit(self, domain: str, *descriptors: Descriptor, timeout: Optional[float] = None,
                          metadata: Any = None) -> Decision:
        """allow as a Decision, for code written for a Client (timeout and
        metadata are not used: the decision is local). domain must be the
        Quota's. The Decision has no headers; when a token bucket refused,
        its retry_after is the time until that bucket's next fill and its
        statuses mark the descriptor that refused; when the failure policy
        decided, its error is a NoAssignment."""
        if domain != self._domain:
            raise InvalidRequest(f"ratelimitd: quota: domain {domain!r} is not the Quota's {self._domain!r}")
        return self._decision(descriptors)

    def _decision(self, descriptors: Sequence[Descriptor]) -> Decision:
        allowed, policy, refused, retry = self._decide(descriptors)
        if policy:
            return Decision(allowed=allowed, error=_NO_ASSIGNMENT)
        if allowed:
            return Decision(allowed=True)
        sts = [Status()] * len(descriptors)
        sts[refused] = Status(over_limit=True, retry_after=retry)
        return Decision(allowed=False, statuses=tuple(sts), retry_after=retry)

    def _decide(self, ds: Sequence[Descriptor]) -> Tuple[bool, bool, int, float]:
        """(allowed, whether the failure policy decided, the descriptor that
        refused, seconds until its token bucket's next fill). Looks up every
        descriptor's bucket (creating it, and so reporting it, even when an
        earlier one refuses), then takes from each in order, giving back
        what it took when one refuses."""
        n = len(ds)
        if n == 0 or n > MAX_DESCRIPTORS:
            raise InvalidRequest(f"ratelimitd: quota: {n} descriptors, want 1 to {MAX_DESCRIPTORS}")
        wants = []
        for i, d in enumerate(ds):
            key = d.__dict__.get("_quota_key") if type(d) is Descriptor else None
            if key is None:
                key = _bucket_key(d, i)
            if d.check_only:
                hits = 0
            else:
                h = d.hits
                if h is None or h == 0:
                    hits = 1
                elif type(h) is not int or not 0 < h <= MAX_HITS:
                    raise InvalidRequest(f"ratelimitd: quota: descriptor {i}: hits {h!r} is not a whole "
                                         f"number from 0 to {MAX_HITS}")
                else:
                    hits = h
            wants.append((key, hits))
        now = self._clock()
        new = False
        allowed, policy, refused, retry = True, False, -1, 0.0
        with self._lock:
            buckets = self._buckets
            slots = []
            for (key, pairs), hits in wants:
                b = buckets.get(key)
                if b is None and not self._closed and len(buckets) < self._max_buckets:
                    b = buckets[key] = _Bucket(pairs, now)
                    new = True
                slots.append((b, hits))
            taken = 0
            for b, hits in slots:
                if b is None or b.kind is None or now >= b.expires:
                    policy = True
                    ok = not self._fail_closed
                elif b.kind == _TOKENS:
                    fill = int((now - b.base) // b.fill)
                    if fill > b.last:  # fills due since the last call (never backwards)
                        if b.held < b.max and b.per_fill:
                            b.held = min(b.max, b.held + (fill - b.last) * b.per_fill)
                        b.last = fill
                    ok = b.held >= hits
                    if ok:
                        b.held -= hits
                    else:
                        policy, retry = False, b.base + (max(fill, b.last) + 1) * b.fill - now
                else:
                    ok = b.kind == _ALLOW_ALL
                    if not ok:
                        policy = False
                if not ok:
                    allowed, refused = False, taken
                    for b2, h2 in slots[:taken]:  # give back what the call took
                        if b2 is not None and b2.kind == _TOKENS and now < b2.expires:
                            b2.held = min(b2.max, b2.held + h2)
                    break
                taken += 1
            for b, hits in slots:
                if b is not None:
                    b.used = True
                    if allowed:
                        b.allowed += hits
                    else:
                        b.denied += hits
            if policy and allowed:
                self._fail_opens += 1
        if new:
            self._wake()
        return allowed, policy, refused, retry

    def _reports(self, gen: int, everything: bool, domain: str) -> Optional[pb.RateLimitQuotaUsageReports]:
        """The reports of the buckets to report on stream gen: all of them
        when everything is set, forgetting those idle for
        QUOTA_IDLE_INTERVALS intervals; else those not yet reported on gen
        (new buckets). None when there is nothing to send. domain names the
        domain in the first message of a stream ("" after)."""
        now = self._clock()
        usages = []
        with self._lock:
            for key, b in list(self._buckets.items()):
                if not everything and b.reported_on == gen:
                    continue
                # ratelimitd takes a bucket's last time_elapsed as the
                # client's reporting interval, and sizes the assignment's
                # time to live from it: a first report gives the interval.
                elapsed = self._interval if b.reported_on == 0 else max(now - b.last_report, 0.0)
                allowed, denied = b.allowed, b.denied
                b.allowed = b.denied = 0
                if everything:
                    if b.used:
                        b.used, b.idle = False, 0
                    else:
                        b.idle += 1
                    if b.idle >= QUOTA_IDLE_INTERVALS:
                        del self._buckets[key]
                        continue
                b.reported_on, b.last_report = gen, now
                usages.append((b.pairs, elapsed, allowed, denied))
        if not usages and not domain:
            return None
        msg = pb.RateLimitQuotaUsageReports(domain=domain)
        for pairs, elapsed, allowed, denied in usages:
            u = msg.bucket_quota_usages.add(num_requests_allowed=allowed, num_requests_denied=denied)
            u.bucket_id.bucket.update(pairs)
            secs = int(elapsed)
            u.time_elapsed.seconds, u.time_elapsed.nanos = secs, int((elapsed - secs) * 1e9)
        return msg

    def _apply(self, resp: pb.RateLimitQuotaResponse) -> None:
        """Applies the actions of a response to their buckets, if still held."""
        now = self._clock()
        with self._lock:
            for a in resp.bucket_action:
                key = frozenset(a.bucket_id.bucket.items())
                b = self._buckets.get(key)
                if b is None:
                    continue
                which = a.WhichOneof("bucket_action")
                if which == "abandon_action":
                    del self._buckets[key]
                    continue
                st = _strategy(a.quota_assignment_action) if which == "quota_assignment_action" else None
                if st is None:  # unknown: the failure policy applies, as with no assignment
                    b.kind = None
                    continue
                kind, max_tokens, per_fill, fill = st
                qa = a.quota_assignment_action
                ttl = _duration(qa.assignment_time_to_live) if qa.HasField("assignment_time_to_live") else 0.0
                b.expires = now + ttl if ttl > 0 else math.inf
                if kind == _TOKENS:
                    max_tokens = min(max_tokens, _MAX_TOKENS)
                    same = (b.kind == _TOKENS and b.max == max_tokens and b.per_fill == per_fill and b.fill == fill)
                    if not same:  # a new token bucket, holding the old one's tokens, or full without one
                        b.held = min(b.held, max_tokens) if b.kind == _TOKENS else max_tokens
                        b.max, b.per_fill, b.fill, b.base, b.last = max_tokens, per_fill, fill, now, 0
                b.kind = kind

    def _backoff(self, wait: float) -> float:
        return wait * (0.8 + 0.4 * random.random())


class Quota(_Core):
    """Quota mode over channel (a grpc.Channel, such as
    grpc.insecure_channel("127.0.0.1:8081")), which the caller keeps and
    closes after close(). Safe for use by several threads.

    domain: the domain whose rules decide. reporting_interval: seconds
    between reports (DEFAULT_REPORTING_INTERVAL). fail_closed: refuse,
    instead of allowing, the descriptors of buckets without an assignment
    in force. max_buckets: the most buckets held (DEFAULT_QUOTA_MAX_BUCKETS);
    past it new buckets are decided by the failure policy. logger: for the
    warnings of the stream's failures. clock: the seconds clock of token
    buckets and times to live (time.monotonic; tests drive their own),
    while reports go every reporting_interval of real time.

    It starts a daemon thread running the reporting stream, which connects
    in the background (wait_for_ready) and reconnects with backoff; close()
    ends it. Also a context manager.
    """

    def __init__(self, channel: grpc.Channel, domain: str, *,
                 reporting_interval: float = DEFAULT_REPORTING_INTERVAL, fail_closed: bool = False,
                 max_buckets: int = DEFAULT_QUOTA_MAX_BUCKETS, logger: Optional[logging.Logger] = None,
                 clock: Callable[[], float] = time.monotonic):
        super().__init__(domain, reporting_interval=reporting_interval, fail_closed=fail_closed,
                         max_buckets=max_buckets, logger=logger, clock=clock)
        if isinstance(channel, grpc.aio.Channel):
            raise TypeError("ratelimitd: Quota needs a blocking grpc.Channel; use AsyncQuota over a grpc.aio "
                            "channel")
        self._stub = pb_grpc.RateLimitQuotaServiceStub(channel)
        self._cv = threading.Condition()
        self._woken = False
        self._call: Optional[Any] = None
        self._thread = threading.Thread(target=self._run, name=f"ratelimitd-quota-{domain}", daemon=True)
        self._thread.start()

    def __enter__(self) -> "Quota":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def close(self) -> None:
        """Ends the reporting stream and its thread, and returns once they
        ended. Assignments received still decide until they expire; new
        buckets get the failure policy."""
        with self._cv:
            self._closed = True
            call = self._call
            self._cv.notify_all()
        if call is not None:
            call.cancel()
        if self._thread is not threading.current_thread():
            self._thread.join()

    def _wake(self) -> None:
        with self._cv:
            self._woken = True
            self._cv.notify_all()

    def _run(self) -> None:
        gen = 0
        wait = _BACKOFF_MIN
        while True:
            gen += 1
            answered, err = self._stream(gen)
            with self._cv:
                if self._closed:
                    return
            if answered:
                wait = _BACKOFF_MIN
            self._log.warning("ratelimitd quota: the RLQS stream failed; assignments keep until they expire, "
                              "then the failure policy decides (domain %r, retry in %.1f s): %s",
                              self._domain, wait, err)
            deadline = time.monotonic() + self._backoff(wait)
            with self._cv:
                while not self._closed and time.monotonic() < deadline:
                    self._cv.wait(deadline - time.monotonic())
                if self._closed:
                    return
            wait = min(2 * wait, _BACKOFF_MAX)

    def _stream(self, gen: int) -> Tuple[bool, Optional[BaseException]]:
        """Runs stream gen until it fails or the Quota closes; returns
        whether ratelimitd answered, and the error."""
        ended = threading.Event()
        answered = False
        with self._cv:
            if self._closed:
                return False, None
            call = self._stub.StreamRateLimitQuotas(self._requests(gen, ended), wait_for_ready=True)
            self._call = call
        try:
            for resp in call:
                self._apply(resp)
                answered = True
            return answered, RuntimeError("ratelimitd ended the stream")
        except grpc.RpcError as err:
            return answered, err
        except Exception as err:  # a response this client cannot read: retry
            call.cancel()
            return answered, err
        finally:
            with self._cv:
                self._call = None
                ended.set()
                self._cv.notify_all()

    def _requests(self, gen: int, ended: threading.Event) -> Iterator[pb.RateLimitQuotaUsageReports]:
        """The messages of stream gen, which grpc's thread pulls: every
        bucket at once (naming the domain), new buckets as soon as they are
        used, every bucket each interval."""
        domain = self._domain
        tick = time.monotonic() + self._interval
        everything = False
        while True:
            msg = self._reports(gen, everything, domain)
            if msg is not None:
                domain = ""
                yield msg
            with self._cv:
                while not (self._woken or self._closed or ended.is_set()):
                    left = tick - time.monotonic()
                    if left <= 0:
                        break
                    self._cv.wait(left)
                if self._closed or ended.is_set():
                    return
                self._woken = False
            now = time.monotonic()
            everything = now >= tick
            if everything:
                tick = max(tick + self._interval, now)


class AsyncQuota(_Core):
    """Quota over a grpc.aio.Channel (such as
    grpc.aio.insecure_channel("127.0.0.1:8081")), made in the running event
    loop, whose task runs the reporting stream; the caller keeps the channel
    and closes it after await close(). Same options as Quota; allow is the
    same synchronous call, should_rate_limit a coroutine (for the ASGI
    middleware and the grpc.aio interceptor). Call it from the loop's
    thread. Also an async context manager."""

    def __init__(self, channel: "grpc.aio.Channel", domain: str, *,
                 reporting_interval: float = DEFAULT_REPORTING_INTERVAL, fail_closed: bool = False,
                 max_buckets: int = DEFAULT_QUOTA_MAX_BUCKETS, logger: Optional[logging.Logger] = None,
                 clock: Callable[[], float] = time.monotonic):
        super().__init__(domain, reporting_interval=reporting_interval, fail_closed=fail_closed,
                         max_buckets=max_buckets, logger=logger, clock=clock)
        if not isinstance(channel, grpc.aio.Channel):
            raise TypeError(f"ratelimitd: AsyncQuota needs a grpc.aio channel, not a {type(channel).__name__}; "
                            "use Quota over a blocking grpc.Channel")
        try:
            self._loop = asyncio.get_running_loop()
        except RuntimeError:
            raise RuntimeError("ratelimitd: AsyncQuota must be made in a running event loop (the one its "
                               "grpc.aio channel belongs to)") from None
        self._stub = pb_grpc.RateLimitQuotaServiceStub(channel)
        self._event = asyncio.Event()
        self._task = self._loop.create_task(self._run())

    async def __aenter__(self) -> "AsyncQuota":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    async def close(self) -> None:
        """Ends the reporting stream and its task (see Quota.close)."""
        self._closed = True
        self._task.cancel()
        try:
            await self._task
        except asyncio.CancelledError:
            pass

    async def should_rate_limit(self, domain: str, *descriptors: Descriptor,  # type: ignore[override]
                                timeout: Optional[float] = None, metadata: Any = None) -> Decision:
        """See Quota.should_rate_limit; never waits."""
        return _Core.should_rate_limit(self, domain, *descriptors)

    def _wake(self) -> None:
        if self._loop.is_closed():
            return
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is self._loop:
            self._event.set()
        else:
            self._loop.call_soon_threadsafe(self._event.set)

    async def _run(self) -> None:
        gen = 0
        wait = _BACKOFF_MIN
        while not self._closed:
            gen += 1
            answered, err = await self._stream(gen)
            if self._closed:
                # close() cancelled the task, perhaps while the stream's
                # cleanup awaited its reader, which takes the cancellation:
                # end now rather than after a backoff.
                return
            if answered:
                wait = _BACKOFF_MIN
            self._log.warning("ratelimitd quota: the RLQS stream failed; assignments keep until they expire, "
                              "then the failure policy decides (domain %r, retry in %.1f s): %s",
                              self._domain, wait, err)
            await asyncio.sleep(self._backoff(wait))
            wait = min(2 * wait, _BACKOFF_MAX)

    async def _stream(self, gen: int) -> Tuple[bool, Optional[BaseException]]:
        call = self._stub.StreamRateLimitQuotas(wait_for_ready=True)
        answered = [False]

        async def receive() -> None:
            while True:
                resp = await call.read()
                if resp is grpc.aio.EOF:
                    raise RuntimeError("ratelimitd ended the stream")
                self._apply(resp)
                answered[0] = True

        recv = asyncio.ensure_future(receive())
        try:
            domain = self._domain
            tick = time.monotonic() + self._interval
            everything = False
            while True:
                msg = self._reports(gen, everything, domain)
                if msg is not None:
                    domain = ""
                    await call.write(msg)
                self._event.clear()
                woken = asyncio.ensure_future(self._event.wait())
                try:
                    await asyncio.wait({recv, woken}, timeout=max(tick - time.monotonic(), 0),
                                       return_when=asyncio.FIRST_COMPLETED)
                finally:
                    woken.cancel()
                if recv.done():
                    recv.result()  # raises its error
                now = time.monotonic()
                everything = now >= tick
                if everything:
                    tick = max(tick + self._interval, now)
        except Exception as err:  # the stream's failure, or a response this client cannot read: retry
            return answered[0], err
        finally:
            call.cancel()
            recv.cancel()
            try:
                await recv
            except BaseException:  # its error, or its cancellation: the stream is over
                pass
