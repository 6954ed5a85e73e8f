from ratelimitd.proto.envoy.config.core.v3 import base_pb2 as _base_pb2
# ratelimitd: made by .ci/generate-python with protoc 3.21.12 and grpc_python_plugin 1.51.1; nested under ratelimitd.proto.
from ratelimitd.proto.envoy.extensions.common.ratelimit.v3 import ratelimit_pb2 as _ratelimit_pb2
from google.protobuf import duration_pb2 as _duration_pb2
from google.protobuf import struct_pb2 as _struct_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
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

class RateLimitRequest(_message.Message):
    __slots__ = ["descriptors", "domain", "hits_addend"]
    DESCRIPTORS_FIELD_NUMBER: _ClassVar[int]
    DOMAIN_FIELD_NUMBER: _ClassVar[int]
    HITS_ADDEND_FIELD_NUMBER: _ClassVar[int]
    descriptors: _containers.RepeatedCompositeFieldContainer[_ratelimit_pb2.RateLimitDescriptor]
    domain: str
    hits_addend: int
    def __init__(self, domain: _Optional[str] = ..., descriptors: _Optional[_Iterable[_Union[_ratelimit_pb2.RateLimitDescriptor, _Mapping]]] = ..., hits_addend: _Optional[int] = ...) -> None: ...

class RateLimitResponse(_message.Message):
    __slots__ = ["dynamic_metadata", "overall_code", "quota", "raw_body", "request_headers_to_add", "response_headers_to_add", "statuses"]
    class Code(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = []
    class DescriptorStatus(_message.Message):
        __slots__ = ["code", "current_limit", "duration_until_reset", "limit_remaining", "quota"]
        CODE_FIELD_NUMBER: _ClassVar[int]
        CURRENT_LIMIT_FIELD_NUMBER: _ClassVar[int]
        DURATION_UNTIL_RESET_FIELD_NUMBER: _ClassVar[int]
        LIMIT_REMAINING_FIELD_NUMBER: _ClassVar[int]
        QUOTA_FIELD_NUMBER: _ClassVar[int]
        code: RateLimitResponse.Code
        current_limit: RateLimitResponse.RateLimit
        duration_until_reset: _duration_pb2.Duration
        limit_remaining: int
        quota: RateLimitResponse.Quota
        def __init__(self, code: _Optional[_Union[RateLimitResponse.Code, str]] = ..., current_limit: _Optional[_Union[RateLimitResponse.RateLimit, _Mapping]] = ..., limit_remaining: _Optional[int] = ..., duration_until_reset: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ..., quota: _Optional[_Union[RateLimitResponse.Quota, _Mapping]] = ...) -> None: ...
    class Quota(_message.Message):
        __slots__ = ["id", "requests", "valid_until"]
        ID_FIELD_NUMBER: _ClassVar[int]
        REQUESTS_FIELD_NUMBER: _ClassVar[int]
        VALID_UNTIL_FIELD_NUMBER: _ClassVar[int]
        id: str
        requests: int
        valid_until: _timestamp_pb2.Timestamp
        def __init__(self, requests: _Optional[int] = ..., valid_until: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., id: _Optional[str] = ...) -> None: ...
    class RateLimit(_message.Message):
        __slots__ = ["name", "requests_per_unit", "unit", "unit_multiplier"]
        class Unit(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
            __slots__ = []
        DAY: RateLimitResponse.RateLimit.Unit
        HOUR: RateLimitResponse.RateLimit.Unit
        MINUTE: RateLimitResponse.RateLimit.Unit
        MONTH: RateLimitResponse.RateLimit.Unit
        NAME_FIELD_NUMBER: _ClassVar[int]
        REQUESTS_PER_UNIT_FIELD_NUMBER: _ClassVar[int]
        SECOND: RateLimitResponse.RateLimit.Unit
        UNIT_FIELD_NUMBER: _ClassVar[int]
        UNIT_MULTIPLIER_FIELD_NUMBER: _ClassVar[int]
        UNKNOWN: RateLimitResponse.RateLimit.Unit
        WEEK: RateLimitResponse.RateLimit.Unit
        YEAR: RateLimitResponse.RateLimit.Unit
        name: str
        requests_per_unit: int
        unit: RateLimitResponse.RateLimit.Unit
        unit_multiplier: _wrappers_pb2.UInt32Value
        def __init__(self, name: _Optional[str] = ..., requests_per_unit: _Optional[int] = ..., unit: _Optional[_Union[RateLimitResponse.RateLimit.Unit, str]] = ..., unit_multiplier: _Optional[_Union[_wrappers_pb2.UInt32Value, _Mapping]] = ...) -> None: ...
    DYNAMIC_METADATA_FIELD_NUMBER: _ClassVar[int]
    OK: RateLimitResponse.Code
    OVERALL_CODE_FIELD_NUMBER: _ClassVar[int]
    OVER_LIMIT: RateLimitResponse.Code
    QUOTA_FIELD_NUMBER: _ClassVar[int]
    RAW_BODY_FIELD_NUMBER: _ClassVar[int]
    REQUEST_HEADERS_TO_ADD_FIELD_NUMBER: _ClassVar[int]
    RESPONSE_HEADERS_TO_ADD_FIELD_NUMBER: _ClassVar[int]
    STATUSES_FIELD_NUMBER: _ClassVar[int]
    UNKNOWN: RateLimitResponse.Code
    dynamic_metadata: _struct_pb2.Struct
    overall_code: RateLimitResponse.Code
    quota: RateLimitResponse.Quota
    raw_body: bytes
    request_headers_to_add: _containers.RepeatedCompositeFieldContainer[_base_pb2.HeaderValue]
    response_headers_to_add: _containers.RepeatedCompositeFieldContainer[_base_pb2.HeaderValue]
    statuses: _containers.RepeatedCompositeFieldContainer[RateLimitResponse.DescriptorStatus]
    def __init__(self, overall_code: _Optional[_Union[RateLimitResponse.Code, str]] = ..., statuses: _Optional[_Iterable[_Union[RateLimitResponse.DescriptorStatus, _Mapping]]] = ..., response_headers_to_add: _Optional[_Iterable[_Union[_base_pb2.HeaderValue, _Mapping]]] = ..., request_headers_to_add: _Optional[_Iterable[_Union[_base_pb2.HeaderValue, _Mapping]]] = ..., raw_body: _Optional[bytes] = ..., dynamic_metadata: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., quota: _Optional[_Union[RateLimitResponse.Quota, _Mapping]] = ...) -> None: ...
