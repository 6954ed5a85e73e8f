"""What the client, its refusal memory and the ASGI middleware share:
ratelimitd's bounds on a request, and conversions of durations."""

from __future__ import annotations

import math
from fractions import Fraction

# ratelimitd's bounds on a request, which the client checks before sending.
MAX_DOMAIN = 256
MAX_DESCRIPTORS = 64
MAX_ENTRIES = 32
MAX_KEY = 1024
MAX_VALUE = 1024  # a longer value is sent, and counted, as its SHA-256 digest
MAX_HITS = 2**32 - 1
MAX_REQUEST = 1 << 20  # bytes of the encoded request
MAX_REQUESTS = 2**32 - 1  # of a LimitOverride
# The bounds of a LimitOverride's window, in seconds: 1 ms to 100 years of
# 365 days.
MIN_OVERRIDE_WINDOW = 0.001
MAX_OVERRIDE_WINDOW = 100 * 365 * 24 * 3600


def seconds(d: float) -> int:
    """d in whole seconds, rounded up; 0 for d <= 0."""
    return math.ceil(d) if d > 0 else 0


def micros(window: float) -> int:
    """A window in seconds as the nearest whole number of microseconds,
    computed exactly from the float (1.1 s is 1100000)."""
    return round(Fraction(window) * 1_000_000)


def whole_micros(window: float) -> bool:
    """Whether window, in seconds, is a whole number of microseconds, to
    within a nanosecond (the float nearest 1.1 s is, 0.0015001 s is not)."""
    f = Fraction(window) * 1_000_000
    return abs(f - round(f)) < Fraction(1, 1000)
