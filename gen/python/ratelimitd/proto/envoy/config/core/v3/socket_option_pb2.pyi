from ratelimitd.proto.udpa.annotations import status_pb2 as _status_pb2
# ratelimitd: made by .ci/generate-python with protoc 3.21.12 and grpc_python_plugin 1.51.1; nested under ratelimitd.proto.
from ratelimitd.proto.udpa.annotations import versioning_pb2 as _versioning_pb2
from ratelimitd.proto.validate import validate_pb2 as _validate_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Iterable as _Iterable, Mapping as _Mapping, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class SocketOption(_message.Message):
    __slots__ = ["buf_value", "description", "int_value", "ip_version", "level", "name", "state", "type"]
    class SocketIpVersion(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = []
    class SocketState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = []
    class SocketType(_message.Message):
        __slots__ = ["datagram", "stream"]
        class Datagram(_message.Message):
            __slots__ = []
            def __init__(self) -> None: ...
        class Stream(_message.Message):
            __slots__ = []
            def __init__(self) -> None: ...
        DATAGRAM_FIELD_NUMBER: _ClassVar[int]
        STREAM_FIELD_NUMBER: _ClassVar[int]
        datagram: SocketOption.SocketType.Datagram
        stream: SocketOption.SocketType.Stream
        def __init__(self, stream: _Optional[_Union[SocketOption.SocketType.Stream, _Mapping]] = ..., datagram: _Optional[_Union[SocketOption.SocketType.Datagram, _Mapping]] = ...) -> None: ...
    BUF_VALUE_FIELD_NUMBER: _ClassVar[int]
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    INT_VALUE_FIELD_NUMBER: _ClassVar[int]
    IP_VERSION_FIELD_NUMBER: _ClassVar[int]
    LEVEL_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    SOCKET_IP_VERSION_IPV4: SocketOption.SocketIpVersion
    SOCKET_IP_VERSION_IPV6: SocketOption.SocketIpVersion
    SOCKET_IP_VERSION_UNSPECIFIED: SocketOption.SocketIpVersion
    STATE_BOUND: SocketOption.SocketState
    STATE_FIELD_NUMBER: _ClassVar[int]
    STATE_LISTENING: SocketOption.SocketState
    STATE_PREBIND: SocketOption.SocketState
    TYPE_FIELD_NUMBER: _ClassVar[int]
    buf_value: bytes
    description: str
    int_value: int
    ip_version: SocketOption.SocketIpVersion
    level: int
    name: int
    state: SocketOption.SocketState
    type: SocketOption.SocketType
    def __init__(self, description: _Optional[str] = ..., level: _Optional[int] = ..., name: _Optional[int] = ..., int_value: _Optional[int] = ..., buf_value: _Optional[bytes] = ..., state: _Optional[_Union[SocketOption.SocketState, str]] = ..., type: _Optional[_Union[SocketOption.SocketType, _Mapping]] = ..., ip_version: _Optional[_Union[SocketOption.SocketIpVersion, str]] = ...) -> None: ...

class SocketOptionsOverride(_message.Message):
    __slots__ = ["socket_options"]
    SOCKET_OPTIONS_FIELD_NUMBER: _ClassVar[int]
    socket_options: _containers.RepeatedCompositeFieldContainer[SocketOption]
    def __init__(self, socket_options: _Optional[_Iterable[_Union[SocketOption, _Mapping]]] = ...) -> None: ...
