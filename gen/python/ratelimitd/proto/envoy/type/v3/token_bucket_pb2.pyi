from google.protobuf import duration_pb2 as _duration_pb2
# ratelimitd: made by .ci/generate-python with protoc 3.21.12 and grpc_python_plugin 1.51.1; nested under ratelimitd.proto.
from google.protobuf import wrappers_pb2 as _wrappers_pb2
from ratelimitd.proto.udpa.annotations import status_pb2 as _status_pb2
from ratelimitd.proto.udpa.annotations import versioning_pb2 as _versioning_pb2
from ratelimitd.proto.validate import validate_pb2 as _validate_pb2
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Mapping as _Mapping, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class TokenBucket(_message.Message):
    __slots__ = ["fill_interval", "max_tokens", "tokens_per_fill"]
    FILL_INTERVAL_FIELD_NUMBER: _ClassVar[int]
    MAX_TOKENS_FIELD_NUMBER: _ClassVar[int]
    TOKENS_PER_FILL_FIELD_NUMBER: _ClassVar[int]
    fill_interval: _duration_pb2.Duration
    max_tokens: int
    tokens_per_fill: _wrappers_pb2.UInt32Value
    def __init__(self, max_tokens: _Optional[int] = ..., tokens_per_fill: _Optional[_Union[_wrappers_pb2.UInt32Value, _Mapping]] = ..., fill_interval: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ...) -> None: ...
