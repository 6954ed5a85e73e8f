from ratelimitd.proto.udpa.annotations import status_pb2 as _status_pb2
# ratelimitd: made by .ci/generate-python with protoc 3.21.12 and grpc_python_plugin 1.51.1; nested under ratelimitd.proto.
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from typing import ClassVar as _ClassVar

DAY: RateLimitUnit
DESCRIPTOR: _descriptor.FileDescriptor
HOUR: RateLimitUnit
MINUTE: RateLimitUnit
MONTH: RateLimitUnit
SECOND: RateLimitUnit
UNKNOWN: RateLimitUnit
YEAR: RateLimitUnit

class RateLimitUnit(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []
