"""Generated stubs of ratelimitd's gRPC APIs (gen/python in its repository).

# ratelimitd: made by .ci/generate-python with protoc 3.21.12 and grpc_python_plugin 1.51.1; nested under ratelimitd.proto.

ratelimit.v1 (the native API): ratelimitd.proto.ratelimit.v1.ratelimit_pb2
and ratelimit_pb2_grpc. Envoy's RLS v3:
ratelimitd.proto.envoy.service.ratelimit.v3.rls_pb2 and rls_pb2_grpc.
Envoy's RLQS: ratelimitd.proto.envoy.service.rate_limit_quota.v3.rlqs_pb2
and rlqs_pb2_grpc. With the files they import, each under ratelimitd.proto
as under its proto path; each _pb2 module has its type stub (.pyi).
"""
