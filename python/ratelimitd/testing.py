"""Fake clients for the tests of code that uses ratelimitd: they answer by a
script, with no ratelimitd, and record the calls, so that a test can check
what its code asked and how it handled each answer.

FakeClient stands in for Client, FakeAsyncClient for AsyncClient (and so
for the ASGI middleware's client):

    from ratelimitd.testing import FakeAsyncClient, refuse

    fake = FakeAsyncClient()
    fake.push(refuse(30))                 # the next call is refused
    app = RateLimitMiddleware(inner, fake, "edge")
    ...                                   # drive app: 429, Retry-After: 30
    assert fake.calls[0].domain == "edge"

Like a real client, a fake raises InvalidRequest for a malformed request
(the ones Client would refuse before any call), before any answer; other
calls take the next queued answer (push), else the default one
(set_default), else allow(). An answer is a function of (domain,
descriptors) returning a Decision, or raising (as InvalidRequest when
ratelimitd answers INVALID_ARGUMENT). Every call is recorded, with its
decision or exception. The fakes are safe for use by several threads; an
answer runs without the fakes' lock held, so it may call them.
"""

from __future__ import annotations

import threading
from collections import deque
from dataclasses import dataclass
from typing import Callable, Deque, List, Optional, Sequence, Tuple

import grpc

from ._common import seconds
from .client import Decision, Descriptor, Limit, Status, check

__all__ = ["Answer", "Call", "FakeAsyncClient", "FakeClient", "allow", "decide", "fail", "fail_closed",
           "fail_open", "refuse", "unavailable"]

#: One answer of a fake: (domain, descriptors) -> Decision, or raises.
Answer = Callable[[str, Tuple[Descriptor, ...]], Decision]


@dataclass(frozen=True)
class Call:
    """One should_rate_limit call a fake received, and what it answered:
    decision, or error (the exception it raised, then decision is None)."""

    domain: str
    descriptors: Tuple[Descriptor, ...]
    decision: Optional[Decision] = None
    error: Optional[Exception] = None


class _Fake:
    """What FakeClient and FakeAsyncClient share: the script and the
    record."""

    def __init__(self, *answers: Answer):
        self._lock = threading.Lock()
        self._queue: Deque[Answer] = deque(answers)
        self._default: Optional[Answer] = None
        self._calls: List[Call] = []

    def push(self, *answers: Answer) -> None:
        """Queues answers: each of the next calls takes the first one left,
        in order, before the default answer applies again."""
        with self._lock:
            self._queue.extend(answers)

    def set_default(self, answer: Optional[Answer]) -> None:
        """Sets the answer of calls when no queued answer is left; None
        restores allow()."""
        with self._lock:
            self._default = answer

    @property
    def calls(self) -> List[Call]:
        """The calls received, in order (a copy)."""
        with self._lock:
            return list(self._calls)

    def reset(self) -> None:
        """Forgets the calls, the queued answers and the default answer."""
        with self._lock:
            self._queue.clear()
            self._default = None
            self._calls.clear()

    def _answer(self, domain: str, descriptors: Sequence[Descriptor]) -> Decision:
        ds = tuple(descriptors)
        try:
            check(domain, ds)
            with self._lock:
                answer = self._queue.popleft() if self._queue else self._default
            d = (answer or allow())(domain, ds)
            if not isinstance(d, Decision):
                raise TypeError(f"ratelimitd.testing: an answer returned a {type(d).__name__}, not a Decision")
        except Exception as e:
            with self._lock:
                self._calls.append(Call(domain, ds, error=e))
            raise
        with self._lock:
            self._calls.append(Call(domain, ds, decision=d))
        return d


class FakeClient(_Fake):
    """Stands in for Client in tests: answers by a script (see the module's
    documentation). FakeClient(*answers) queues answers."""

    def should_rate_limit(self, domain: str, *descriptors: Descriptor, timeout: Optional[float] = None,
                          metadata: Optional[Sequence[Tuple[str, str]]] = None) -> Decision:
        """See Client.should_rate_limit; timeout and metadata are ignored."""
        return self._answer(domain, descriptors)


class FakeAsyncClient(_Fake):
    """Stands in for AsyncClient in tests, and as the ASGI middleware's
    client: answers by a script (see the module's documentation).
    FakeAsyncClient(*answers) queues answers."""

    async def should_rate_limit(self, domain: str, *descriptors: Descriptor, timeout: Optional[float] = None,
                                metadata: Optional[Sequence[Tuple[str, str]]] = None) -> Decision:
        """See Client.should_rate_limit; timeout and metadata are ignored."""
        return self._answer(domain, descriptors)


def allow() -> Answer:
    """Answers allowed, with one Status per descriptor and no headers."""
    return lambda domain, ds: Decision(allowed=True, statuses=tuple(Status() for _ in ds))


def refuse(retry_after: float) -> Answer:
    """Answers refused, as ratelimitd does: every descriptor over its limit,
    named by its keys joined by dots (such as "tenant.path"), with
    retry_after seconds (at least 1 s in the Retry-After header)."""
    def answer(domain: str, ds: Tuple[Descriptor, ...]) -> Decision:
        statuses = tuple(Status(over_limit=True, limit=Limit(name=".".join(e.key for e in d.entries)),
                                reset_after=retry_after, retry_after=retry_after) for d in ds)
        return Decision(allowed=False, statuses=statuses, retry_after=retry_after,
                        headers=(("Retry-After", str(max(seconds(retry_after), 1))),))
    return answer


def unavailable(details: str = "ratelimitd.testing: rate limit service unavailable") -> grpc.RpcError:
    """A grpc.RpcError of code UNAVAILABLE, as a client gets when ratelimitd
    is away."""
    return grpc.aio.AioRpcError(grpc.StatusCode.UNAVAILABLE, grpc.aio.Metadata(), grpc.aio.Metadata(),
                                details=details)


def fail_open(err: Optional[Exception] = None) -> Answer:
    """Answers as a client failing open does when ratelimitd failed with
    err: allowed, Decision.error set (None: unavailable())."""
    return _failed(True, err)


def fail_closed(err: Optional[Exception] = None) -> Answer:
    """Answers as a client failing closed (fail_closed=True) does when
    ratelimitd failed with err: refused, Decision.error set (None:
    unavailable())."""
    return _failed(False, err)


def _failed(allowed: bool, err: Optional[Exception]) -> Answer:
    e = err if err is not None else unavailable()
    return lambda domain, ds: Decision(allowed=allowed, error=e)


def fail(err: Exception) -> Answer:
    """Raises err, as a client raises InvalidRequest when ratelimitd answers
    INVALID_ARGUMENT."""
    def answer(domain: str, ds: Tuple[Descriptor, ...]) -> Decision:
        raise err
    return answer


def decide(d: Decision) -> Answer:
    """Answers d, whatever the call."""
    return lambda domain, ds: d
