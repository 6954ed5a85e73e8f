"""Envoy's rate limit service API (envoy.service.ratelimit.v3), for callers
that speak it to ratelimitd (or to envoyproxy/ratelimit).

The generated stubs live under ratelimitd.proto (nested there so that no
top-level envoy package is installed); this module names what a caller
needs:

    import grpc
    from ratelimitd import envoy_rls

    stub = envoy_rls.RateLimitServiceStub(grpc.insecure_channel("127.0.0.1:8081"))
    resp = stub.ShouldRateLimit(envoy_rls.RateLimitRequest(
        domain="edge",
        descriptors=[envoy_rls.RateLimitDescriptor(
            entries=[envoy_rls.RateLimitDescriptor.Entry(key="api_key", value="k")])],
    ), timeout=0.05)
    if resp.overall_code == envoy_rls.RateLimitResponse.OVER_LIMIT: ...
"""

from .proto.envoy.extensions.common.ratelimit.v3 import ratelimit_pb2 as common_pb2
from .proto.envoy.service.ratelimit.v3 import rls_pb2, rls_pb2_grpc

RateLimitRequest = rls_pb2.RateLimitRequest
RateLimitResponse = rls_pb2.RateLimitResponse
RateLimitDescriptor = common_pb2.RateLimitDescriptor
RateLimitServiceStub = rls_pb2_grpc.RateLimitServiceStub
RateLimitServiceServicer = rls_pb2_grpc.RateLimitServiceServicer
add_RateLimitServiceServicer_to_server = rls_pb2_grpc.add_RateLimitServiceServicer_to_server

__all__ = [
    "RateLimitDescriptor",
    "RateLimitRequest",
    "RateLimitResponse",
    "RateLimitServiceServicer",
    "RateLimitServiceStub",
    "add_RateLimitServiceServicer_to_server",
    "common_pb2",
    "rls_pb2",
    "rls_pb2_grpc",
]
