"""ratelimitd's Python package: ask ratelimitd, before doing work, whether
you may.

- Client and AsyncClient call the native API (ratelimit.v1) and return a
  Decision; D and Descriptor describe what the work is.
- ratelimitd.asgi.RateLimitMiddleware protects any ASGI application.
- ratelimitd.testing has fake clients for the tests of code using them.
- ratelimitd.envoy_rls holds Envoy's RLS v3 API, ratelimitd.v1 the native
  one, as generated stubs (all under ratelimitd.proto).

    import grpc, ratelimitd

    with grpc.insecure_channel("127.0.0.1:8081") as ch:
        rl = ratelimitd.Client(ch)  # fail open, 50 ms per call, 1 s of refusal memory
        d = rl.should_rate_limit("edge", ratelimitd.D("api_key", "k"))
        if not d.allowed:
            ...  # refuse; retry in d.retry_after seconds, send d.headers
"""

from . import client
from .client import *  # noqa: F401,F403 (the names of client.__all__)

__version__ = "0.1.0"

__all__ = []
__all__ += client.__all__
