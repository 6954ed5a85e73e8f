from google.protobuf import timestamp_pb2 as _timestamp_pb2
# ratelimitd: made by .ci/generate-python with protoc 3.21.12 and grpc_python_plugin 1.51.1; nested under ratelimitd.proto.
from ratelimitd.proto.ratelimit.v1 import ratelimit_pb2 as _ratelimit_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Iterable as _Iterable, Mapping as _Mapping, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class DeleteOverrideRequest(_message.Message):
    __slots__ = ["domain", "entries", "reason"]
    DOMAIN_FIELD_NUMBER: _ClassVar[int]
    ENTRIES_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    domain: str
    entries: _containers.RepeatedCompositeFieldContainer[_ratelimit_pb2.Entry]
    reason: str
    def __init__(self, domain: _Optional[str] = ..., entries: _Optional[_Iterable[_Union[_ratelimit_pb2.Entry, _Mapping]]] = ..., reason: _Optional[str] = ...) -> None: ...

class DeleteOverrideResponse(_message.Message):
    __slots__ = []
    def __init__(self) -> None: ...

class ListOverridesRequest(_message.Message):
    __slots__ = ["domain"]
    DOMAIN_FIELD_NUMBER: _ClassVar[int]
    domain: str
    def __init__(self, domain: _Optional[str] = ...) -> None: ...

class ListOverridesResponse(_message.Message):
    __slots__ = ["overrides"]
    OVERRIDES_FIELD_NUMBER: _ClassVar[int]
    overrides: _containers.RepeatedCompositeFieldContainer[Override]
    def __init__(self, overrides: _Optional[_Iterable[_Union[Override, _Mapping]]] = ...) -> None: ...

class Override(_message.Message):
    __slots__ = ["domain", "entries", "expires_at", "limits", "reason", "set_at", "set_by", "unmatched", "version"]
    DOMAIN_FIELD_NUMBER: _ClassVar[int]
    ENTRIES_FIELD_NUMBER: _ClassVar[int]
    EXPIRES_AT_FIELD_NUMBER: _ClassVar[int]
    LIMITS_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    SET_AT_FIELD_NUMBER: _ClassVar[int]
    SET_BY_FIELD_NUMBER: _ClassVar[int]
    UNMATCHED_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    domain: str
    entries: _containers.RepeatedCompositeFieldContainer[_ratelimit_pb2.Entry]
    expires_at: _timestamp_pb2.Timestamp
    limits: _containers.RepeatedCompositeFieldContainer[OverrideLimit]
    reason: str
    set_at: _timestamp_pb2.Timestamp
    set_by: str
    unmatched: bool
    version: int
    def __init__(self, domain: _Optional[str] = ..., entries: _Optional[_Iterable[_Union[_ratelimit_pb2.Entry, _Mapping]]] = ..., limits: _Optional[_Iterable[_Union[OverrideLimit, _Mapping]]] = ..., expires_at: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., reason: _Optional[str] = ..., version: _Optional[int] = ..., set_by: _Optional[str] = ..., set_at: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., unmatched: bool = ...) -> None: ...

class OverrideLimit(_message.Message):
    __slots__ = ["algorithm", "burst", "name", "requests_per_unit", "unit", "window"]
    ALGORITHM_FIELD_NUMBER: _ClassVar[int]
    BURST_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    REQUESTS_PER_UNIT_FIELD_NUMBER: _ClassVar[int]
    UNIT_FIELD_NUMBER: _ClassVar[int]
    WINDOW_FIELD_NUMBER: _ClassVar[int]
    algorithm: str
    burst: int
    name: str
    requests_per_unit: int
    unit: str
    window: str
    def __init__(self, requests_per_unit: _Optional[int] = ..., unit: _Optional[str] = ..., window: _Optional[str] = ..., algorithm: _Optional[str] = ..., burst: _Optional[int] = ..., name: _Optional[str] = ...) -> None: ...

class ResetCountersRequest(_message.Message):
    __slots__ = ["domain", "entries", "reason"]
    DOMAIN_FIELD_NUMBER: _ClassVar[int]
    ENTRIES_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    domain: str
    entries: _containers.RepeatedCompositeFieldContainer[_ratelimit_pb2.Entry]
    reason: str
    def __init__(self, domain: _Optional[str] = ..., entries: _Optional[_Iterable[_Union[_ratelimit_pb2.Entry, _Mapping]]] = ..., reason: _Optional[str] = ...) -> None: ...

class ResetCountersResponse(_message.Message):
    __slots__ = ["counters"]
    COUNTERS_FIELD_NUMBER: _ClassVar[int]
    counters: int
    def __init__(self, counters: _Optional[int] = ...) -> None: ...

class SetOverrideRequest(_message.Message):
    __slots__ = ["override"]
    OVERRIDE_FIELD_NUMBER: _ClassVar[int]
    override: Override
    def __init__(self, override: _Optional[_Union[Override, _Mapping]] = ...) -> None: ...

class SetOverrideResponse(_message.Message):
    __slots__ = ["override"]
    OVERRIDE_FIELD_NUMBER: _ClassVar[int]
    override: Override
    def __init__(self, override: _Optional[_Union[Override, _Mapping]] = ...) -> None: ...
