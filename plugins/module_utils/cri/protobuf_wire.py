# -*- coding: utf-8 -*-
# Copyright: gpunode.nvidia contributors
# Apache License 2.0
"""protobuf (proto3) wire format of the CRI ``runtime.v1`` messages the CRI client sends and reads.

``SCHEMA`` lists the messages and their fields; field numbers come from
k8s.io/cri-api pkg/apis/runtime/v1/api.proto. ``encode_message`` leaves out
default values as proto3 does; ``decode_message`` skips unknown fields, so
newer daemons keep working. Used by cri.py (and workload.py for PullImage);
runs on managed nodes: standard library only.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

# message -> ((field number, name, kind, repeated), ...). A kind is a scalar
# type, "map" (map<string,string>) or the name of another message here.
SCHEMA = {
    "VersionRequest": ((1, "version", "string", False),),
    "VersionResponse": (
        (1, "version", "string", False), (2, "runtime_name", "string", False),
        (3, "runtime_version", "string", False), (4, "runtime_api_version", "string", False),
    ),
    "StatusRequest": ((1, "verbose", "bool", False),),
    "StatusResponse": (
        (1, "status", "RuntimeStatus", False), (2, "info", "map", False),
        (3, "runtime_handlers", "RuntimeHandler", True),
    ),
    "RuntimeStatus": ((1, "conditions", "RuntimeCondition", True),),
    "RuntimeCondition": (
        (1, "type", "string", False), (2, "status", "bool", False),
        (3, "reason", "string", False), (4, "message", "string", False),
    ),
    "RuntimeHandler": ((1, "name", "string", False), (2, "features", "RuntimeHandlerFeatures", False)),
    "RuntimeHandlerFeatures": (
        (1, "recursive_read_only_mounts", "bool", False), (2, "user_namespaces", "bool", False),
    ),
    "PodSandboxMetadata": (
        (1, "name", "string", False), (2, "uid", "string", False),
        (3, "namespace", "string", False), (4, "attempt", "uint32", False),
    ),
    "DNSConfig": (
        (1, "servers", "string", True), (2, "searches", "string", True), (3, "options", "string", True),
    ),
    "NamespaceOption": (
        (1, "network", "enum", False), (2, "pid", "enum", False),
        (3, "ipc", "enum", False), (4, "target_id", "string", False),
    ),
    "LinuxSandboxSecurityContext": (
        (1, "namespace_options", "NamespaceOption", False), (6, "privileged", "bool", False),
    ),
    "LinuxPodSandboxConfig": (
        (1, "cgroup_parent", "string", False),
        (2, "security_context", "LinuxSandboxSecurityContext", False),
        (3, "sysctls", "map", False),
    ),
    "PodSandboxConfig": (
        (1, "metadata", "PodSandboxMetadata", False), (2, "hostname", "string", False),
        (3, "log_directory", "string", False), (4, "dns_config", "DNSConfig", False),
        (6, "labels", "map", False), (7, "annotations", "map", False),
        (8, "linux", "LinuxPodSandboxConfig", False),
    ),
    "RunPodSandboxRequest": ((1, "config", "PodSandboxConfig", False), (2, "runtime_handler", "string", False)),
    "RunPodSandboxResponse": ((1, "pod_sandbox_id", "string", False),),
    "StopPodSandboxRequest": ((1, "pod_sandbox_id", "string", False),),
    "RemovePodSandboxRequest": ((1, "pod_sandbox_id", "string", False),),
    "Empty": (),
    "PodSandboxFilter": ((1, "id", "string", False), (3, "label_selector", "map", False)),
    "ListPodSandboxRequest": ((1, "filter", "PodSandboxFilter", False),),
    "ListPodSandboxResponse": ((1, "items", "PodSandbox", True),),
    "PodSandbox": (
        (1, "id", "string", False), (2, "metadata", "PodSandboxMetadata", False),
        (3, "state", "enum", False), (4, "created_at", "int64", False),
        (5, "labels", "map", False), (6, "annotations", "map", False),
        (7, "runtime_handler", "string", False),
    ),
    "ContainerFilter": (
        (1, "id", "string", False), (3, "pod_sandbox_id", "string", False),
        (4, "label_selector", "map", False),
    ),
    "ListContainersRequest": ((1, "filter", "ContainerFilter", False),),
    "ListContainersResponse": ((1, "containers", "Container", True),),
    "Container": (
        (1, "id", "string", False), (2, "pod_sandbox_id", "string", False),
        (3, "metadata", "ContainerMetadata", False), (4, "image", "ImageSpec", False),
        (5, "image_ref", "string", False), (6, "state", "enum", False),
        (7, "created_at", "int64", False), (8, "labels", "map", False),
        (9, "annotations", "map", False), (10, "image_id", "string", False),
    ),
    "ImageSpec": (
        (1, "image", "string", False), (2, "annotations", "map", False),
        (18, "user_specified_image", "string", False), (19, "runtime_handler", "string", False),
    ),
    "KeyValue": ((1, "key", "string", False), (2, "value", "string", False)),
    "ContainerMetadata": ((1, "name", "string", False), (2, "attempt", "uint32", False)),
    "LinuxContainerSecurityContext": (
        (2, "privileged", "bool", False), (3, "namespace_options", "NamespaceOption", False),
    ),
    "LinuxContainerConfig": ((2, "security_context", "LinuxContainerSecurityContext", False),),
    "ContainerConfig": (
        (1, "metadata", "ContainerMetadata", False), (2, "image", "ImageSpec", False),
        (3, "command", "string", True), (4, "args", "string", True),
        (5, "working_dir", "string", False), (6, "envs", "KeyValue", True),
        (9, "labels", "map", False), (10, "annotations", "map", False),
        (11, "log_path", "string", False), (15, "linux", "LinuxContainerConfig", False),
    ),
    "CreateContainerRequest": (
        (1, "pod_sandbox_id", "string", False), (2, "config", "ContainerConfig", False),
        (3, "sandbox_config", "PodSandboxConfig", False),
    ),
    "CreateContainerResponse": ((1, "container_id", "string", False),),
    "StartContainerRequest": ((1, "container_id", "string", False),),
    "StopContainerRequest": ((1, "container_id", "string", False), (2, "timeout", "int64", False)),
    "RemoveContainerRequest": ((1, "container_id", "string", False),),
    "ContainerStatusRequest": ((1, "container_id", "string", False), (2, "verbose", "bool", False)),
    "ContainerStatusResponse": ((1, "status", "ContainerStatus", False), (2, "info", "map", False)),
    "ContainerStatus": (
        (1, "id", "string", False), (2, "metadata", "ContainerMetadata", False),
        (3, "state", "enum", False), (4, "created_at", "int64", False),
        (5, "started_at", "int64", False), (6, "finished_at", "int64", False),
        (7, "exit_code", "int32", False), (8, "image", "ImageSpec", False),
        (9, "image_ref", "string", False), (10, "reason", "string", False),
        (11, "message", "string", False), (12, "labels", "map", False),
        (13, "annotations", "map", False), (15, "log_path", "string", False),
        (17, "image_id", "string", False),
    ),
    "Int64Value": ((1, "value", "int64", False),),
    "Image": (
        (1, "id", "string", False), (2, "repo_tags", "string", True),
        (3, "repo_digests", "string", True), (4, "size", "uint64", False),
        (5, "uid", "Int64Value", False), (6, "username", "string", False),
        (7, "spec", "ImageSpec", False), (8, "pinned", "bool", False),
    ),
    "ImageFilter": ((1, "image", "ImageSpec", False),),
    "ListImagesRequest": ((1, "filter", "ImageFilter", False),),
    "ListImagesResponse": ((1, "images", "Image", True),),
    "ImageStatusRequest": ((1, "image", "ImageSpec", False), (2, "verbose", "bool", False)),
    "ImageStatusResponse": ((1, "image", "Image", False), (2, "info", "map", False)),
}

_VARINT_KINDS = ("bool", "enum", "int32", "int64", "uint32", "uint64")
_SCALAR_KINDS = _VARINT_KINDS + ("string", "bytes")
_WIRE_VARINT, _WIRE_FIXED64, _WIRE_BYTES, _WIRE_FIXED32 = 0, 1, 2, 5


def encode_varint(value):
    """Base-128 varint; negative numbers as 64-bit two's complement, as protobuf does."""
    value &= (1 << 64) - 1
    out = bytearray()
    while True:
        low = value & 0x7F
        value >>= 7
        if value:
            out.append(low | 0x80)
        else:
            out.append(low)
            return bytes(out)


def decode_varint(data, pos):
    """Return (value, next position) of the varint at `pos`."""
    result = shift = 0
    while True:
        if pos >= len(data):
            raise ValueError("truncated varint")
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7
        if shift > 63:
            raise ValueError("varint too long")


def _tag(number, wire_type):
    return encode_varint(number << 3 | wire_type)


def _length_delimited(number, payload):
    return _tag(number, _WIRE_BYTES) + encode_varint(len(payload)) + payload


def _encode_value(number, kind, value):
    if kind in _VARINT_KINDS:
        return _tag(number, _WIRE_VARINT) + encode_varint(int(value))
    if kind == "string":
        return _length_delimited(number, value.encode("utf-8"))
    if kind == "bytes":
        return _length_delimited(number, bytes(value))
    return _length_delimited(number, encode_message(kind, value))


def encode_message(name, values):
    """Serialise dict `values` as protobuf message `name`; defaults (0, "", False, empty) are omitted."""
    out = bytearray()
    fields = dict((f[1], f) for f in SCHEMA[name])
    unknown = set(values) - set(fields)
    if unknown:
        raise ValueError("%s has no field(s) %s" % (name, ", ".join(sorted(unknown))))
    for number, field, kind, repeated in SCHEMA[name]:
        value = values.get(field)
        if value is None or (not repeated and kind in _SCALAR_KINDS and not value):
            continue  # proto3 does not send default values
        if kind == "map":
            for key in sorted(value):
                entry = _encode_value(1, "string", key) + _encode_value(2, "string", value[key])
                out += _length_delimited(number, entry)
        elif repeated:
            for item in value:
                out += _encode_value(number, kind, item)
        else:
            out += _encode_value(number, kind, value)
    return bytes(out)


def iter_fields(data):
    """Yield (field number, wire type, raw value) for each field of a serialised message."""
    pos = 0
    while pos < len(data):
        key, pos = decode_varint(data, pos)
        number, wire_type = key >> 3, key & 7
        if wire_type == _WIRE_VARINT:
            value, pos = decode_varint(data, pos)
        elif wire_type == _WIRE_BYTES:
            length, pos = decode_varint(data, pos)
            value = data[pos:pos + length]
            if len(value) != length:
                raise ValueError("truncated field %d" % number)
            pos += length
        elif wire_type == _WIRE_FIXED64:
            value, pos = data[pos:pos + 8], pos + 8
        elif wire_type == _WIRE_FIXED32:
            value, pos = data[pos:pos + 4], pos + 4
        else:
            raise ValueError("unsupported wire type %d" % wire_type)
        yield number, wire_type, value


def _scalar(kind, value):
    if kind == "bool":
        return bool(value)
    if kind in ("int32", "int64") and value >= 1 << 63:
        return value - (1 << 64)
    return value


def _default(kind, repeated):
    if repeated:
        return []
    return {"map": {}, "string": "", "bytes": b"", "bool": False}.get(
        kind, 0 if kind in _VARINT_KINDS else None)


def decode_message(name, data):
    """Parse protobuf `data` as message `name` into a dict with every known field present."""
    fields = dict((f[0], f) for f in SCHEMA[name])
    result = dict((f[1], _default(f[2], f[3])) for f in SCHEMA[name])
    for number, wire_type, raw in iter_fields(bytes(data)):
        if number not in fields:
            continue
        _num, field, kind, repeated = fields[number]
        if kind == "map":
            entry = dict((n, v) for n, _w, v in iter_fields(raw))
            result[field][entry.get(1, b"").decode("utf-8")] = entry.get(2, b"").decode("utf-8")
            continue
        if kind in _VARINT_KINDS and wire_type == _WIRE_BYTES:  # packed repeated scalars
            pos, values = 0, []
            while pos < len(raw):
                value, pos = decode_varint(raw, pos)
                values.append(_scalar(kind, value))
            result[field].extend(values)
            continue
        if kind in _VARINT_KINDS:
            value = _scalar(kind, raw)
        elif kind == "string":
            value = raw.decode("utf-8")
        elif kind == "bytes":
            value = bytes(raw)
        else:
            value = decode_message(kind, raw)
        if repeated:
            result[field].append(value)
        else:
            result[field] = value
    return result
