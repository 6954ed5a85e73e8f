from google.protobuf import descriptor_pb2 as _descriptor_pb2
# ratelimitd: made by .ci/generate-python with protoc 3.21.12 and grpc_python_plugin 1.51.1; nested under ratelimitd.proto.
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Optional as _Optional

DESCRIPTOR: _descriptor.FileDescriptor
ENUM_MIGRATE_FIELD_NUMBER: _ClassVar[int]
ENUM_VALUE_MIGRATE_FIELD_NUMBER: _ClassVar[int]
FIELD_MIGRATE_FIELD_NUMBER: _ClassVar[int]
FILE_MIGRATE_FIELD_NUMBER: _ClassVar[int]
MESSAGE_MIGRATE_FIELD_NUMBER: _ClassVar[int]
enum_migrate: _descriptor.FieldDescriptor
enum_value_migrate: _descriptor.FieldDescriptor
field_migrate: _descriptor.FieldDescriptor
file_migrate: _descriptor.FieldDescriptor
message_migrate: _descriptor.FieldDescriptor

class FieldMigrateAnnotation(_message.Message):
    __slots__ = ["oneof_promotion", "rename"]
    ONEOF_PROMOTION_FIELD_NUMBER: _ClassVar[int]
    RENAME_FIELD_NUMBER: _ClassVar[int]
    oneof_promotion: str
    rename: str
    def __init__(self, rename: _Optional[str] = ..., oneof_promotion: _Optional[str] = ...) -> None: ...

class FileMigrateAnnotation(_message.Message):
    __slots__ = ["move_to_package"]
    MOVE_TO_PACKAGE_FIELD_NUMBER: _ClassVar[int]
    move_to_package: str
    def __init__(self, move_to_package: _Optional[str] = ...) -> None: ...

class MigrateAnnotation(_message.Message):
    __slots__ = ["rename"]
    RENAME_FIELD_NUMBER: _ClassVar[int]
    rename: str
    def __init__(self, rename: _Optional[str] = ...) -> None: ...
