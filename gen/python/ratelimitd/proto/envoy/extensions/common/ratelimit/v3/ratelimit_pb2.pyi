from ratelimitd.proto.envoy.type.v3 import ratelimit_unit_pb2 as _ratelimit_unit_pb2
# ratelimitd: made by .ci/generate-python with protoc 3.21.12 and grpc_python_plugin 1.51.1; nested under ratelimitd.proto.
from ratelimitd.proto.envoy.type.v3 import token_bucket_pb2 as _token_bucket_pb2
from google.protobuf import wrappers_pb2 as _wrappers_pb2
from ratelimitd.proto.udpa.annotations import status_pb2 as _status_pb2
from ratelimitd.proto.udpa.annotations import versioning_pb2 as _versioning_pb2
from ratelimitd.proto.validate import validate_pb2 as _validate_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Iterable as _Iterable, Mapping as _Mapping, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor
DRAFT_VERSION_03: XRateLimitHeadersRFCVersion
IGNORE: VhRateLimitsOptions
INCLUDE: VhRateLimitsOptions
OFF: XRateLimitHeadersRFCVersion
OVERRIDE: VhRateLimitsOptions

class LocalClusterRateLimit(_message.Message):
    __slots__ = []
    def __init__(self) -> None: ...

class LocalRateLimitDescriptor(_message.Message):
    __slots__ = ["entries", "shadow_mode", "token_bucket"]
    ENTRIES_FIELD_NUMBER: _ClassVar[int]
    SHADOW_MODE_FIELD_NUMBER: _ClassVar[int]
    TOKEN_BUCKET_FIELD_NUMBER: _ClassVar[int]
    entries: _containers.RepeatedCompositeFieldContainer[RateLimitDescriptor.Entry]
    shadow_mode: bool
    token_bucket: _token_bucket_pb2.TokenBucket
    def __init__(self, entries: _Optional[_Iterable[_Union[RateLimitDescriptor.Entry, _Mapping]]] = ..., token_bucket: _Optional[_Union[_token_bucket_pb2.TokenBucket, _Mapping]] = ..., shadow_mode: bool = ...) -> None: ...

class RateLimitDescriptor(_message.Message):
    __slots__ = ["entries", "hits_addend", "is_negative_hits", "limit"]
    class Entry(_message.Message):
        __slots__ = ["key", "value"]
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    class RateLimitOverride(_message.Message):
        __slots__ = ["requests_per_unit", "unit", "unit_multiplier"]
        REQUESTS_PER_UNIT_FIELD_NUMBER: _ClassVar[int]
        UNIT_FIELD_NUMBER: _ClassVar[int]
        UNIT_MULTIPLIER_FIELD_NUMBER: _ClassVar[int]
        requests_per_unit: int
        unit: _ratelimit_unit_pb2.RateLimitUnit
        unit_multiplier: _wrappers_pb2.UInt32Value
        def __init__(self, requests_per_unit: _Optional[int] = ..., unit: _Optional[_Union[_ratelimit_unit_pb2.RateLimitUnit, str]] = ..., unit_multiplier: _Optional[_Union[_wrappers_pb2.UInt32Value, _Mapping]] = ...) -> None: ...
    ENTRIES_FIELD_NUMBER: _ClassVar[int]
    HITS_ADDEND_FIELD_NUMBER: _ClassVar[int]
    IS_NEGATIVE_HITS_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    entries: _containers.RepeatedCompositeFieldContainer[RateLimitDescriptor.Entry]
    hits_addend: _wrappers_pb2.UInt64Value
    is_negative_hits: bool
    limit: RateLimitDescriptor.RateLimitOverride
    def __init__(self, entries: _Optional[_Iterable[_Union[RateLimitDescriptor.Entry, _Mapping]]] = ..., limit: _Optional[_Union[RateLimitDescriptor.RateLimitOverride, _Mapping]] = ..., hits_addend: _Optional[_Union[_wrappers_pb2.UInt64Value, _Mapping]] = ..., is_negative_hits: bool = ...) -> None: ...

class XRateLimitHeadersRFCVersion(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []

class VhRateLimitsOptions(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []
