"""ratelimitd's native API (ratelimit.v1) as generated stubs, for callers
that want the messages themselves (Client and AsyncClient wrap them):
ratelimit_pb2 (messages, Code, Algorithm) and ratelimit_pb2_grpc
(RateLimitServiceStub, RateLimitServiceServicer,
add_RateLimitServiceServicer_to_server)."""

from .proto.ratelimit.v1 import ratelimit_pb2, ratelimit_pb2_grpc

__all__ = ["ratelimit_pb2", "ratelimit_pb2_grpc"]
