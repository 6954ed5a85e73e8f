from ratelimitd.proto.udpa.annotations import status_pb2 as _status_pb2
# ratelimitd: made by .ci/generate-python with protoc 3.21.12 and grpc_python_plugin 1.51.1; nested under ratelimitd.proto.
from ratelimitd.proto.udpa.annotations import versioning_pb2 as _versioning_pb2
from ratelimitd.proto.validate import validate_pb2 as _validate_pb2
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class FractionalPercent(_message.Message):
    __slots__ = ["denominator", "numerator"]
    class DenominatorType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = []
    DENOMINATOR_FIELD_NUMBER: _ClassVar[int]
    HUNDRED: FractionalPercent.DenominatorType
    MILLION: FractionalPercent.DenominatorType
    NUMERATOR_FIELD_NUMBER: _ClassVar[int]
    TEN_THOUSAND: FractionalPercent.DenominatorType
    denominator: FractionalPercent.DenominatorType
    numerator: int
    def __init__(self, numerator: _Optional[int] = ..., denominator: _Optional[_Union[FractionalPercent.DenominatorType, str]] = ...) -> None: ...

class Percent(_message.Message):
    __slots__ = ["value"]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    value: float
    def __init__(self, value: _Optional[float] = ...) -> None: ...
