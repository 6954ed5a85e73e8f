from google.protobuf import duration_pb2 as _duration_pb2
# ratelimitd: made by .ci/generate-python with protoc 3.21.12 and grpc_python_plugin 1.51.1; nested under ratelimitd.proto.
from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Iterable as _Iterable, Mapping as _Mapping, Optional as _Optional, Union as _Union

ALGORITHM_CONCURRENCY: Algorithm
ALGORITHM_FIXED_WINDOW: Algorithm
ALGORITHM_GCRA: Algorithm
ALGORITHM_SLIDING_LOG: Algorithm
ALGORITHM_SLIDING_WINDOW: Algorithm
ALGORITHM_TOKEN_BUCKET: Algorithm
ALGORITHM_UNSPECIFIED: Algorithm
CODE_OK: Code
CODE_OVER_LIMIT: Code
CODE_UNSPECIFIED: Code
DECISION_NO_RULE: Decision
DECISION_OK: Decision
DECISION_OVER_LIMIT: Decision
DECISION_UNLIMITED: Decision
DECISION_UNSPECIFIED: Decision
DESCRIPTOR: _descriptor.FileDescriptor

class AcquireRequest(_message.Message):
    __slots__ = ["descriptors", "domain", "hits"]
    DESCRIPTORS_FIELD_NUMBER: _ClassVar[int]
    DOMAIN_FIELD_NUMBER: _ClassVar[int]
    HITS_FIELD_NUMBER: _ClassVar[int]
    descriptors: _containers.RepeatedCompositeFieldContainer[Descriptor]
    domain: str
    hits: int
    def __init__(self, domain: _Optional[str] = ..., descriptors: _Optional[_Iterable[_Union[Descriptor, _Mapping]]] = ..., hits: _Optional[int] = ...) -> None: ...

class AcquireResponse(_message.Message):
    __slots__ = ["code", "headers", "lease", "statuses"]
    CODE_FIELD_NUMBER: _ClassVar[int]
    HEADERS_FIELD_NUMBER: _ClassVar[int]
    LEASE_FIELD_NUMBER: _ClassVar[int]
    STATUSES_FIELD_NUMBER: _ClassVar[int]
    code: Code
    headers: _containers.RepeatedCompositeFieldContainer[Header]
    lease: Lease
    statuses: _containers.RepeatedCompositeFieldContainer[DescriptorStatus]
    def __init__(self, code: _Optional[_Union[Code, str]] = ..., statuses: _Optional[_Iterable[_Union[DescriptorStatus, _Mapping]]] = ..., headers: _Optional[_Iterable[_Union[Header, _Mapping]]] = ..., lease: _Optional[_Union[Lease, _Mapping]] = ...) -> None: ...

class Descriptor(_message.Message):
    __slots__ = ["entries", "give_back", "hits", "limit"]
    ENTRIES_FIELD_NUMBER: _ClassVar[int]
    GIVE_BACK_FIELD_NUMBER: _ClassVar[int]
    HITS_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    entries: _containers.RepeatedCompositeFieldContainer[Entry]
    give_back: bool
    hits: int
    limit: LimitOverride
    def __init__(self, entries: _Optional[_Iterable[_Union[Entry, _Mapping]]] = ..., hits: _Optional[int] = ..., limit: _Optional[_Union[LimitOverride, _Mapping]] = ..., give_back: bool = ...) -> None: ...

class DescriptorExplanation(_message.Message):
    __slots__ = ["decision", "give_back", "hits", "limits", "override", "quota_mode", "replaces", "rule", "runtime_override", "shadow_mode", "unlimited"]
    DECISION_FIELD_NUMBER: _ClassVar[int]
    GIVE_BACK_FIELD_NUMBER: _ClassVar[int]
    HITS_FIELD_NUMBER: _ClassVar[int]
    LIMITS_FIELD_NUMBER: _ClassVar[int]
    OVERRIDE_FIELD_NUMBER: _ClassVar[int]
    QUOTA_MODE_FIELD_NUMBER: _ClassVar[int]
    REPLACES_FIELD_NUMBER: _ClassVar[int]
    RULE_FIELD_NUMBER: _ClassVar[int]
    RUNTIME_OVERRIDE_FIELD_NUMBER: _ClassVar[int]
    SHADOW_MODE_FIELD_NUMBER: _ClassVar[int]
    UNLIMITED_FIELD_NUMBER: _ClassVar[int]
    decision: Decision
    give_back: bool
    hits: int
    limits: _containers.RepeatedCompositeFieldContainer[LimitExplanation]
    override: bool
    quota_mode: bool
    replaces: _containers.RepeatedScalarFieldContainer[str]
    rule: MatchedRule
    runtime_override: RuntimeOverride
    shadow_mode: bool
    unlimited: bool
    def __init__(self, rule: _Optional[_Union[MatchedRule, _Mapping]] = ..., decision: _Optional[_Union[Decision, str]] = ..., unlimited: bool = ..., shadow_mode: bool = ..., quota_mode: bool = ..., replaces: _Optional[_Iterable[str]] = ..., override: bool = ..., hits: _Optional[int] = ..., limits: _Optional[_Iterable[_Union[LimitExplanation, _Mapping]]] = ..., give_back: bool = ..., runtime_override: _Optional[_Union[RuntimeOverride, _Mapping]] = ...) -> None: ...

class DescriptorStatus(_message.Message):
    __slots__ = ["code", "limit", "remaining", "reset_after", "retry_after", "unlimited"]
    CODE_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    REMAINING_FIELD_NUMBER: _ClassVar[int]
    RESET_AFTER_FIELD_NUMBER: _ClassVar[int]
    RETRY_AFTER_FIELD_NUMBER: _ClassVar[int]
    UNLIMITED_FIELD_NUMBER: _ClassVar[int]
    code: Code
    limit: Limit
    remaining: int
    reset_after: _duration_pb2.Duration
    retry_after: _duration_pb2.Duration
    unlimited: bool
    def __init__(self, code: _Optional[_Union[Code, str]] = ..., limit: _Optional[_Union[Limit, _Mapping]] = ..., remaining: _Optional[int] = ..., reset_after: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ..., retry_after: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ..., unlimited: bool = ...) -> None: ...

class Entry(_message.Message):
    __slots__ = ["key", "raw_value", "value", "value_sha256"]
    KEY_FIELD_NUMBER: _ClassVar[int]
    RAW_VALUE_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    VALUE_SHA256_FIELD_NUMBER: _ClassVar[int]
    key: str
    raw_value: bytes
    value: str
    value_sha256: bytes
    def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ..., raw_value: _Optional[bytes] = ..., value_sha256: _Optional[bytes] = ...) -> None: ...

class ExplainRequest(_message.Message):
    __slots__ = ["request"]
    REQUEST_FIELD_NUMBER: _ClassVar[int]
    request: ShouldRateLimitRequest
    def __init__(self, request: _Optional[_Union[ShouldRateLimitRequest, _Mapping]] = ...) -> None: ...

class ExplainResponse(_message.Message):
    __slots__ = ["code", "descriptors", "shadow_mode"]
    CODE_FIELD_NUMBER: _ClassVar[int]
    DESCRIPTORS_FIELD_NUMBER: _ClassVar[int]
    SHADOW_MODE_FIELD_NUMBER: _ClassVar[int]
    code: Code
    descriptors: _containers.RepeatedCompositeFieldContainer[DescriptorExplanation]
    shadow_mode: bool
    def __init__(self, code: _Optional[_Union[Code, str]] = ..., descriptors: _Optional[_Iterable[_Union[DescriptorExplanation, _Mapping]]] = ..., shadow_mode: bool = ...) -> None: ...

class Header(_message.Message):
    __slots__ = ["name", "value"]
    NAME_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    name: str
    value: str
    def __init__(self, name: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...

class Lease(_message.Message):
    __slots__ = ["expires_at", "id"]
    EXPIRES_AT_FIELD_NUMBER: _ClassVar[int]
    ID_FIELD_NUMBER: _ClassVar[int]
    expires_at: _timestamp_pb2.Timestamp
    id: bytes
    def __init__(self, id: _Optional[bytes] = ..., expires_at: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class Limit(_message.Message):
    __slots__ = ["algorithm", "burst", "name", "requests", "window"]
    ALGORITHM_FIELD_NUMBER: _ClassVar[int]
    BURST_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    REQUESTS_FIELD_NUMBER: _ClassVar[int]
    WINDOW_FIELD_NUMBER: _ClassVar[int]
    algorithm: Algorithm
    burst: int
    name: str
    requests: int
    window: _duration_pb2.Duration
    def __init__(self, requests: _Optional[int] = ..., window: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ..., algorithm: _Optional[_Union[Algorithm, str]] = ..., name: _Optional[str] = ..., burst: _Optional[int] = ...) -> None: ...

class LimitExplanation(_message.Message):
    __slots__ = ["counter", "held", "limit", "next_lease_expiry", "remaining", "replaced", "reset_after", "retry_after", "would_admit"]
    COUNTER_FIELD_NUMBER: _ClassVar[int]
    HELD_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    NEXT_LEASE_EXPIRY_FIELD_NUMBER: _ClassVar[int]
    REMAINING_FIELD_NUMBER: _ClassVar[int]
    REPLACED_FIELD_NUMBER: _ClassVar[int]
    RESET_AFTER_FIELD_NUMBER: _ClassVar[int]
    RETRY_AFTER_FIELD_NUMBER: _ClassVar[int]
    WOULD_ADMIT_FIELD_NUMBER: _ClassVar[int]
    counter: str
    held: int
    limit: Limit
    next_lease_expiry: _duration_pb2.Duration
    remaining: int
    replaced: bool
    reset_after: _duration_pb2.Duration
    retry_after: _duration_pb2.Duration
    would_admit: bool
    def __init__(self, limit: _Optional[_Union[Limit, _Mapping]] = ..., replaced: bool = ..., counter: _Optional[str] = ..., remaining: _Optional[int] = ..., reset_after: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ..., would_admit: bool = ..., retry_after: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ..., held: _Optional[int] = ..., next_lease_expiry: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ...) -> None: ...

class LimitOverride(_message.Message):
    __slots__ = ["requests", "window"]
    REQUESTS_FIELD_NUMBER: _ClassVar[int]
    WINDOW_FIELD_NUMBER: _ClassVar[int]
    requests: int
    window: _duration_pb2.Duration
    def __init__(self, requests: _Optional[int] = ..., window: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ...) -> None: ...

class MatchedRule(_message.Message):
    __slots__ = ["file", "line", "path"]
    FILE_FIELD_NUMBER: _ClassVar[int]
    LINE_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    file: str
    line: int
    path: str
    def __init__(self, path: _Optional[str] = ..., file: _Optional[str] = ..., line: _Optional[int] = ...) -> None: ...

class ReleaseRequest(_message.Message):
    __slots__ = ["descriptors", "domain", "hits", "lease_id"]
    DESCRIPTORS_FIELD_NUMBER: _ClassVar[int]
    DOMAIN_FIELD_NUMBER: _ClassVar[int]
    HITS_FIELD_NUMBER: _ClassVar[int]
    LEASE_ID_FIELD_NUMBER: _ClassVar[int]
    descriptors: _containers.RepeatedCompositeFieldContainer[Descriptor]
    domain: str
    hits: int
    lease_id: bytes
    def __init__(self, domain: _Optional[str] = ..., descriptors: _Optional[_Iterable[_Union[Descriptor, _Mapping]]] = ..., hits: _Optional[int] = ..., lease_id: _Optional[bytes] = ...) -> None: ...

class ReleaseResponse(_message.Message):
    __slots__ = ["statuses"]
    STATUSES_FIELD_NUMBER: _ClassVar[int]
    statuses: _containers.RepeatedCompositeFieldContainer[DescriptorStatus]
    def __init__(self, statuses: _Optional[_Iterable[_Union[DescriptorStatus, _Mapping]]] = ...) -> None: ...

class RenewRequest(_message.Message):
    __slots__ = ["descriptors", "domain", "hits", "lease_id"]
    DESCRIPTORS_FIELD_NUMBER: _ClassVar[int]
    DOMAIN_FIELD_NUMBER: _ClassVar[int]
    HITS_FIELD_NUMBER: _ClassVar[int]
    LEASE_ID_FIELD_NUMBER: _ClassVar[int]
    descriptors: _containers.RepeatedCompositeFieldContainer[Descriptor]
    domain: str
    hits: int
    lease_id: bytes
    def __init__(self, domain: _Optional[str] = ..., descriptors: _Optional[_Iterable[_Union[Descriptor, _Mapping]]] = ..., hits: _Optional[int] = ..., lease_id: _Optional[bytes] = ...) -> None: ...

class RenewResponse(_message.Message):
    __slots__ = ["code", "lease", "statuses"]
    CODE_FIELD_NUMBER: _ClassVar[int]
    LEASE_FIELD_NUMBER: _ClassVar[int]
    STATUSES_FIELD_NUMBER: _ClassVar[int]
    code: Code
    lease: Lease
    statuses: _containers.RepeatedCompositeFieldContainer[DescriptorStatus]
    def __init__(self, code: _Optional[_Union[Code, str]] = ..., statuses: _Optional[_Iterable[_Union[DescriptorStatus, _Mapping]]] = ..., lease: _Optional[_Union[Lease, _Mapping]] = ...) -> None: ...

class RuntimeOverride(_message.Message):
    __slots__ = ["expires_at", "reason", "set_by", "version"]
    EXPIRES_AT_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    SET_BY_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    expires_at: _timestamp_pb2.Timestamp
    reason: str
    set_by: str
    version: int
    def __init__(self, reason: _Optional[str] = ..., set_by: _Optional[str] = ..., expires_at: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., version: _Optional[int] = ...) -> None: ...

class ShouldRateLimitRequest(_message.Message):
    __slots__ = ["descriptors", "domain", "hits"]
    DESCRIPTORS_FIELD_NUMBER: _ClassVar[int]
    DOMAIN_FIELD_NUMBER: _ClassVar[int]
    HITS_FIELD_NUMBER: _ClassVar[int]
    descriptors: _containers.RepeatedCompositeFieldContainer[Descriptor]
    domain: str
    hits: int
    def __init__(self, domain: _Optional[str] = ..., descriptors: _Optional[_Iterable[_Union[Descriptor, _Mapping]]] = ..., hits: _Optional[int] = ...) -> None: ...

class ShouldRateLimitResponse(_message.Message):
    __slots__ = ["code", "headers", "statuses"]
    CODE_FIELD_NUMBER: _ClassVar[int]
    HEADERS_FIELD_NUMBER: _ClassVar[int]
    STATUSES_FIELD_NUMBER: _ClassVar[int]
    code: Code
    headers: _containers.RepeatedCompositeFieldContainer[Header]
    statuses: _containers.RepeatedCompositeFieldContainer[DescriptorStatus]
    def __init__(self, code: _Optional[_Union[Code, str]] = ..., statuses: _Optional[_Iterable[_Union[DescriptorStatus, _Mapping]]] = ..., headers: _Optional[_Iterable[_Union[Header, _Mapping]]] = ...) -> None: ...

class Code(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []

class Algorithm(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []

class Decision(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []
