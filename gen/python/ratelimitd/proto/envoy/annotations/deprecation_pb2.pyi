from google.protobuf import descriptor_pb2 as _descriptor_pb2
# ratelimitd: made by .ci/generate-python with protoc 3.21.12 and grpc_python_plugin 1.51.1; nested under ratelimitd.proto.
from google.protobuf import descriptor as _descriptor
from typing import ClassVar as _ClassVar

DEPRECATED_AT_MINOR_VERSION_ENUM_FIELD_NUMBER: _ClassVar[int]
DEPRECATED_AT_MINOR_VERSION_FIELD_NUMBER: _ClassVar[int]
DESCRIPTOR: _descriptor.FileDescriptor
DISALLOWED_BY_DEFAULT_ENUM_FIELD_NUMBER: _ClassVar[int]
DISALLOWED_BY_DEFAULT_FIELD_NUMBER: _ClassVar[int]
deprecated_at_minor_version: _descriptor.FieldDescriptor
deprecated_at_minor_version_enum: _descriptor.FieldDescriptor
disallowed_by_default: _descriptor.FieldDescriptor
disallowed_by_default_enum: _descriptor.FieldDescriptor
