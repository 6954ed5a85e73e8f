from google.protobuf import descriptor_pb2 as _descriptor_pb2
# ratelimitd: made by .ci/generate-python with protoc 3.21.12 and grpc_python_plugin 1.51.1; nested under ratelimitd.proto.
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

ACTIVE: PackageVersionStatus
DESCRIPTOR: _descriptor.FileDescriptor
FILE_STATUS_FIELD_NUMBER: _ClassVar[int]
FROZEN: PackageVersionStatus
NEXT_MAJOR_VERSION_CANDIDATE: PackageVersionStatus
UNKNOWN: PackageVersionStatus
file_status: _descriptor.FieldDescriptor

class StatusAnnotation(_message.Message):
    __slots__ = ["package_version_status", "work_in_progress"]
    PACKAGE_VERSION_STATUS_FIELD_NUMBER: _ClassVar[int]
    WORK_IN_PROGRESS_FIELD_NUMBER: _ClassVar[int]
    package_version_status: PackageVersionStatus
    work_in_progress: bool
    def __init__(self, work_in_progress: bool = ..., package_version_status: _Optional[_Union[PackageVersionStatus, str]] = ...) -> None: ...

class PackageVersionStatus(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []
