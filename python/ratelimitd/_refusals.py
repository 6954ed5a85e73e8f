"""The clients' memory of refusals, as the Go client's (refusals.go): a
request ratelimitd refused with a retry-after of T is refused again by the
client itself for min(T, max_age), without a call."""

from __future__ import annotations

import dataclasses
import hashlib
import math
import threading
from itertools import islice
from typing import TYPE_CHECKING, Callable, Dict, Hashable, Optional, Sequence, Tuple

from ._common import MAX_VALUE, micros, seconds

if TYPE_CHECKING:
    from .client import Decision, Descriptor

# How many refusals evict examines without a full sweep.
_EVICT_SAMPLE = 16
# The most digits of a Structured Fields Integer (RFC 9651 section 3.3.1).
_MAX_DIGITS = 15


def refusal_key(domain: str, descriptors: Sequence["Descriptor"]) -> Hashable:
    """An unambiguous key of a request: the domain, and for each descriptor
    its entries (a value over MAX_VALUE bytes by its SHA-256 digest, so that
    a remembered refusal stays small), hits as sent (0 for check_only, else
    at least 1) and the limit override."""
    ds = []
    for d in descriptors:
        es = []
        for e in d.entries:
            v = e.value
            b = v if isinstance(v, bytes) else v.encode("utf-8", "surrogateescape")
            es.append((e.key, hashlib.sha256(b).digest() if len(b) > MAX_VALUE else b,
                       len(b) > MAX_VALUE))
        hits = 0 if d.check_only else max(d.hits or 1, 1)
        limit = (d.limit.requests, micros(d.limit.window)) if d.limit is not None else None
        ds.append((tuple(es), hits, limit))
    return (domain, tuple(ds))


class Refusals:
    """Remembered refusals: at most size, each for min(retry_after,
    max_age) seconds of clock (time.monotonic). Safe for use by several
    threads."""

    def __init__(self, max_age: float, size: int, clock: Callable[[], float]):
        self.max_age = max_age
        self.size = size
        self.clock = clock
        self._lock = threading.Lock()
        self._m: Dict[Hashable, Tuple[float, float, Decision]] = {}  # key: (at, expires, decision)
        self._swept = -math.inf

    def __len__(self) -> int:
        with self._lock:
            return len(self._m)

    def get(self, key: Hashable) -> Optional[Decision]:
        """The refusal remembered under key, counted down to now, or None."""
        now = self.clock()
        with self._lock:
            f = self._m.get(key)
            if f is not None and now >= f[1]:
                del self._m[key]
                f = None
        if f is None:
            return None
        at, _, d = f
        elapsed = max(now - at, 0.0)
        retry = max(d.retry_after - elapsed, 0.0)
        statuses = tuple(dataclasses.replace(s, reset_after=max(s.reset_after - elapsed, 0.0),
                                             retry_after=max(s.retry_after - elapsed, 0.0))
                         for s in d.statuses)
        return dataclasses.replace(d, local=True, retry_after=retry, statuses=statuses,
                                   headers=local_headers(d.headers, elapsed, retry))

    def put(self, key: Hashable, d: Decision) -> None:
        """Remembers the refusal d, made now, under key."""
        now = self.clock()
        f = (now, now + min(d.retry_after, self.max_age), d)
        with self._lock:
            if key not in self._m and len(self._m) >= self.size:
                self._evict(now)
            self._m[key] = f

    def _evict(self, now: float) -> None:
        """Makes room for one refusal: forgets the expired ones, all of them
        at most once per max_age, else among a few; if none expired, the
        oldest. Requires the lock."""
        if now - self._swept >= self.max_age:
            self._swept = now
            for k in [k for k, f in self._m.items() if now >= f[1]]:
                del self._m[k]
            if len(self._m) < self.size:
                return
        sample = list(islice(self._m.items(), _EVICT_SAMPLE))
        expired = [k for k, f in sample if now >= f[1]]
        for k in expired:
            del self._m[k]
        if not expired and sample:
            del self._m[sample[0][0]]


def _delta_seconds(s: str) -> Optional[int]:
    """s as a non-negative number of seconds: 1 to 15 decimal digits."""
    if not s or len(s) > _MAX_DIGITS or not all("0" <= c <= "9" for c in s):
        return None
    return int(s)


def local_headers(hs: Sequence[Tuple[str, str]], elapsed: float, retry_after: float) -> Tuple[Tuple[str, str], ...]:
    """hs, the headers of a refusal made elapsed seconds ago, counted down:
    Retry-After (delta-seconds) becomes retry_after rounded up, at least 1
    (an HTTP-date is kept); the t parameters of RateLimit and the legacy
    RateLimit-Reset lose the whole seconds elapsed, not below 0. The rest is
    kept as it is."""
    secs = int(max(elapsed, 0.0))
    out = []
    for name, value in hs:
        low = name.lower()
        if low == "retry-after":
            if _delta_seconds(value) is not None:
                value = str(max(seconds(retry_after), 1))
        elif low == "ratelimit":
            value = count_down_t(value, secs)
        elif low == "ratelimit-reset":
            n = _delta_seconds(value)
            if n is not None and secs > 0 and n > 0:
                value = str(max(n - secs, 0))
        out.append((name, value))
    return tuple(out)


def count_down_t(v: str, secs: int) -> str:
    """v, a Structured Fields List (the IETF RateLimit field), with each
    non-negative Integer parameter t of its top-level members lowered by
    secs, not below 0. Strings, inner lists, other parameters, negative or
    non-Integer t are copied unchanged."""
    if secs <= 0:
        return v
    out = []
    last = 0  # v[last:] is not yet in out
    depth = 0  # of inner lists
    i = 0
    n = len(v)
    while i < n:
        c = v[i]
        if c == '"':  # a String: skip it
            i += 1
            while i < n and v[i] != '"':
                if v[i] == "\\":
                    i += 1
                i += 1
        elif c == "(":
            depth += 1
        elif c == ")":
            depth = max(depth - 1, 0)
        elif c == ";" and depth == 0:
            j = i + 1
            while j < n and v[j] == " ":
                j += 1
            if j + 1 < n and v[j] == "t" and v[j + 1] == "=":
                start = end = j + 2
                while end < n and end - start <= _MAX_DIGITS and "0" <= v[end] <= "9":
                    end += 1
                if end > start and end - start <= _MAX_DIGITS and (end == n or v[end] in ";, \t)"):
                    t = int(v[start:end])
                    nt = max(t - secs, 0)
                    if nt != t:
                        out.append(v[last:start])
                        out.append(str(nt))
                        last = end
                    i = end - 1
        i += 1
    if last == 0:
        return v
    out.append(v[last:])
    return "".join(out)
