# -*- coding: utf-8 -*-
# Copyright: gpunode.nvidia contributors
# Apache License 2.0
"""A minimal CRI client: gRPC over HTTP/2 (h2c) on a unix socket, standard library only.

Nodes have Python but no crictl and no grpcio, yet the only honest answer to
"which runtimes does the containerd that kubelet talks to really run?" comes
from asking that daemon over CRI, as kubelet does. This module speaks just
enough of the three layers for unary calls of `runtime.v1`:

* HTTP/2 (RFC 9113) with prior knowledge: preface, SETTINGS and their ACK,
  HEADERS/CONTINUATION, DATA, WINDOW_UPDATE (both directions), PING,
  RST_STREAM and GOAWAY. One connection per call: calls are rare, a unix
  socket connects in microseconds, and no state survives a daemon restart.
* HPACK (RFC 7541): requests use literal fields without Huffman; responses
  are fully decoded (static and dynamic table, Huffman code of Appendix B),
  because Go's gRPC server Huffman-encodes `grpc-message`.
* protobuf (proto3) for the messages listed in SCHEMA; field numbers come from
  k8s.io/cri-api pkg/apis/runtime/v1/api.proto. Unknown fields are skipped, so
  newer daemons keep working.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import socket
import struct
import time

try:  # Python 3
    from urllib.parse import unquote
except ImportError:  # pragma: no cover - Python 2 is not supported on nodes
    from urllib import unquote

DEFAULT_SOCKET = "/run/containerd/containerd.sock"
DEFAULT_TIMEOUT = 10.0
RUNTIME_SERVICE = "runtime.v1.RuntimeService"
IMAGE_SERVICE = "runtime.v1.ImageService"

# NamespaceMode and ContainerState enums of api.proto.
NAMESPACE_POD, NAMESPACE_CONTAINER, NAMESPACE_NODE = 0, 1, 2
CONTAINER_STATES = {0: "CREATED", 1: "RUNNING", 2: "EXITED", 3: "UNKNOWN"}

GRPC_CODES = (
    "OK", "CANCELLED", "UNKNOWN", "INVALID_ARGUMENT", "DEADLINE_EXCEEDED", "NOT_FOUND",
    "ALREADY_EXISTS", "PERMISSION_DENIED", "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION",
    "ABORTED", "OUT_OF_RANGE", "UNIMPLEMENTED", "INTERNAL", "UNAVAILABLE", "DATA_LOSS",
    "UNAUTHENTICATED",
)
UNKNOWN, DEADLINE_EXCEEDED, UNIMPLEMENTED, INTERNAL, UNAVAILABLE = 2, 4, 12, 13, 14


class CRIError(Exception):
    """A failed CRI call: `code` is the gRPC status code, `message` the daemon's text, verbatim."""

    def __init__(self, code, message):
        self.code = code
        self.message = message
        super(CRIError, self).__init__(code, message)

    @property
    def code_name(self):
        return GRPC_CODES[self.code] if 0 <= self.code < len(GRPC_CODES) else str(self.code)

    def __str__(self):
        return "%s: %s" % (self.code_name, self.message)


# --------------------------------------------------------------------------
# protobuf
# --------------------------------------------------------------------------

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


# --------------------------------------------------------------------------
# HPACK
# --------------------------------------------------------------------------

# RFC 7541 Appendix A.
STATIC_TABLE = (
    (":authority", ""), (":method", "GET"), (":method", "POST"), (":path", "/"),
    (":path", "/index.html"), (":scheme", "http"), (":scheme", "https"), (":status", "200"),
    (":status", "204"), (":status", "206"), (":status", "304"), (":status", "400"),
    (":status", "404"), (":status", "500"), ("accept-charset", ""),
    ("accept-encoding", "gzip, deflate"), ("accept-language", ""), ("accept-ranges", ""),
    ("accept", ""), ("access-control-allow-origin", ""), ("age", ""), ("allow", ""),
    ("authorization", ""), ("cache-control", ""), ("content-disposition", ""),
    ("content-encoding", ""), ("content-language", ""), ("content-length", ""),
    ("content-location", ""), ("content-range", ""), ("content-type", ""), ("cookie", ""),
    ("date", ""), ("etag", ""), ("expect", ""), ("expires", ""), ("from", ""), ("host", ""),
    ("if-match", ""), ("if-modified-since", ""), ("if-none-match", ""), ("if-range", ""),
    ("if-unmodified-since", ""), ("last-modified", ""), ("link", ""), ("location", ""),
    ("max-forwards", ""), ("proxy-authenticate", ""), ("proxy-authorization", ""),
    ("range", ""), ("referer", ""), ("refresh", ""), ("retry-after", ""), ("server", ""),
    ("set-cookie", ""), ("strict-transport-security", ""), ("transfer-encoding", ""),
    ("user-agent", ""), ("vary", ""), ("via", ""), ("www-authenticate", ""),
)

# RFC 7541 Appendix B as code lengths in bits, symbols 0..255 then EOS (256).
# The table is a canonical Huffman code (codes of one length are consecutive
# and ordered by symbol), so the codes follow from the lengths; the unit tests
# check known codes of the RFC and its C.4 examples.
HUFFMAN_CODE_LENGTHS = (
    13, 23, 28, 28, 28, 28, 28, 28, 28, 24, 30, 28, 28, 30, 28, 28,  # 0x00
    28, 28, 28, 28, 28, 28, 30, 28, 28, 28, 28, 28, 28, 28, 28, 28,  # 0x10
    6, 10, 10, 12, 13, 6, 8, 11, 10, 10, 8, 11, 8, 6, 6, 6,  # 0x20  !"#$%&'()*+,-./
    5, 5, 5, 6, 6, 6, 6, 6, 6, 6, 7, 8, 15, 6, 12, 10,  # 0x30 0-9 :;<=>?
    13, 6, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7,  # 0x40 @A-O
    7, 7, 7, 7, 7, 7, 7, 7, 8, 7, 8, 13, 19, 13, 14, 6,  # 0x50 P-Z [\]^_
    15, 5, 6, 5, 6, 5, 6, 6, 6, 5, 7, 7, 6, 6, 6, 5,  # 0x60 `a-o
    6, 7, 6, 5, 5, 6, 7, 7, 7, 7, 7, 15, 11, 14, 13, 28,  # 0x70 p-z {|}~ DEL
    20, 22, 20, 20, 22, 22, 22, 23, 22, 23, 23, 23, 23, 23, 24, 23,  # 0x80
    24, 24, 22, 23, 24, 23, 23, 23, 23, 21, 22, 23, 22, 23, 23, 24,  # 0x90
    22, 21, 20, 22, 22, 23, 23, 21, 23, 22, 22, 24, 21, 22, 23, 23,  # 0xa0
    21, 21, 22, 21, 23, 22, 23, 23, 20, 22, 22, 22, 23, 22, 22, 23,  # 0xb0
    26, 26, 20, 19, 22, 23, 22, 25, 26, 26, 26, 27, 27, 26, 24, 25,  # 0xc0
    19, 21, 26, 27, 27, 26, 27, 24, 21, 21, 26, 26, 28, 27, 27, 27,  # 0xd0
    20, 24, 20, 21, 22, 21, 21, 23, 22, 22, 25, 25, 24, 24, 26, 23,  # 0xe0
    26, 27, 26, 26, 27, 27, 27, 27, 27, 28, 27, 27, 27, 27, 27, 26,  # 0xf0
    30,  # EOS
)
HUFFMAN_EOS = 256


def _canonical_codes(lengths):
    """symbol -> (code, length) of the canonical Huffman code with these lengths."""
    codes, code, previous = {}, 0, 0
    for symbol in sorted(range(len(lengths)), key=lambda s: (lengths[s], s)):
        code <<= lengths[symbol] - previous
        previous = lengths[symbol]
        codes[symbol] = (code, previous)
        code += 1
    return codes


HUFFMAN_CODES = _canonical_codes(HUFFMAN_CODE_LENGTHS)
_HUFFMAN_DECODE = dict((value, symbol) for symbol, value in HUFFMAN_CODES.items())


class HPACKError(ValueError):
    pass


def huffman_decode(data):
    """Decode an HPACK Huffman string (RFC 7541 5.2); padding must be a short run of 1 bits."""
    out = bytearray()
    code = length = 0
    for byte in bytearray(data):
        for shift in range(7, -1, -1):
            code = code << 1 | (byte >> shift) & 1
            length += 1
            symbol = _HUFFMAN_DECODE.get((code, length))
            if symbol is None:
                if length > 30:
                    raise HPACKError("invalid Huffman code")
                continue
            if symbol == HUFFMAN_EOS:
                raise HPACKError("EOS symbol inside a Huffman string")
            out.append(symbol)
            code = length = 0
    if length > 7 or code != (1 << length) - 1:
        raise HPACKError("invalid Huffman padding")
    return bytes(out)


def huffman_encode(data):
    """Huffman-encode bytes (used by the tests; requests are sent as plain literals)."""
    bits = nbits = 0
    for byte in bytearray(data):
        code, length = HUFFMAN_CODES[byte]
        bits, nbits = bits << length | code, nbits + length
    pad = -nbits % 8
    bits, nbits = bits << pad | (1 << pad) - 1, nbits + pad
    return bits.to_bytes(nbits // 8, "big") if nbits else b""


def encode_integer(value, prefix_bits, first_byte_flags=0):
    """HPACK integer with an N-bit prefix (RFC 7541 5.1)."""
    limit = (1 << prefix_bits) - 1
    if value < limit:
        return bytes(bytearray([first_byte_flags | value]))
    out = bytearray([first_byte_flags | limit])
    value -= limit
    while value >= 128:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def decode_integer(data, pos, prefix_bits):
    limit = (1 << prefix_bits) - 1
    if pos >= len(data):
        raise HPACKError("truncated integer")
    value = data[pos] & limit
    pos += 1
    if value < limit:
        return value, pos
    shift = 0
    while True:
        if pos >= len(data) or shift > 28:
            raise HPACKError("truncated or oversized integer")
        byte = data[pos]
        pos += 1
        value += (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return value, pos


def _encode_string(text):
    raw = text.encode("utf-8")
    return encode_integer(len(raw), 7) + raw


def encode_headers(headers):
    """Header block of literal fields without indexing, new names, no Huffman (RFC 7541 6.2.2)."""
    return b"".join(b"\x00" + _encode_string(name) + _encode_string(value) for name, value in headers)


class HPACKDecoder:
    """Decoder state of one HTTP/2 connection (the dynamic table lives across header blocks)."""

    def __init__(self, max_table_size=4096):
        self.max_table_size = max_table_size
        self.table_size_limit = max_table_size
        self.dynamic = []  # newest first
        self.size = 0

    def _lookup(self, index):
        if index <= 0:
            raise HPACKError("header index 0")
        if index <= len(STATIC_TABLE):
            return STATIC_TABLE[index - 1]
        try:
            return self.dynamic[index - len(STATIC_TABLE) - 1]
        except IndexError:
            raise HPACKError("header index %d out of range" % index)

    def _evict(self):
        while self.size > self.table_size_limit and self.dynamic:
            name, value = self.dynamic.pop()
            self.size -= 32 + len(name.encode("utf-8")) + len(value.encode("utf-8"))

    def _insert(self, name, value):
        self.dynamic.insert(0, (name, value))
        self.size += 32 + len(name.encode("utf-8")) + len(value.encode("utf-8"))
        self._evict()

    def _string(self, data, pos):
        huffman = data[pos] & 0x80 if pos < len(data) else 0
        length, pos = decode_integer(data, pos, 7)
        raw = data[pos:pos + length]
        if len(raw) != length:
            raise HPACKError("truncated string")
        raw = huffman_decode(raw) if huffman else raw
        return raw.decode("utf-8", "replace"), pos + length

    def decode(self, block):
        """Return the (name, value) list of one complete header block."""
        data, pos, headers = bytearray(block), 0, []
        while pos < len(data):
            byte = data[pos]
            if byte & 0x80:  # indexed field
                index, pos = decode_integer(data, pos, 7)
                headers.append(self._lookup(index))
                continue
            if byte & 0xE0 == 0x20:  # dynamic table size update
                size, pos = decode_integer(data, pos, 5)
                if size > self.max_table_size:
                    raise HPACKError("table size %d above the limit" % size)
                self.table_size_limit = size
                self._evict()
                continue
            indexing = byte & 0xC0 == 0x40
            index, pos = decode_integer(data, pos, 6 if indexing else 4)
            if index:
                name = self._lookup(index)[0]
            else:
                name, pos = self._string(data, pos)
            value, pos = self._string(data, pos)
            if indexing:
                self._insert(name, value)
            headers.append((name, value))
        return headers


# --------------------------------------------------------------------------
# HTTP/2 and gRPC
# --------------------------------------------------------------------------

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
DATA, HEADERS, PRIORITY, RST_STREAM, SETTINGS, PUSH_PROMISE, PING, GOAWAY, WINDOW_UPDATE, CONTINUATION = range(10)
FLAG_END_STREAM, FLAG_ACK, FLAG_END_HEADERS, FLAG_PADDED, FLAG_PRIORITY = 0x1, 0x1, 0x4, 0x8, 0x20
SETTINGS_HEADER_TABLE_SIZE, SETTINGS_ENABLE_PUSH, SETTINGS_INITIAL_WINDOW_SIZE, SETTINGS_MAX_FRAME_SIZE = 1, 2, 4, 5
DEFAULT_WINDOW = 65535
RECEIVE_WINDOW = 1 << 24  # we read whole responses into memory; let the server send freely
STREAM_ID = 1  # one call per connection: always the first client stream


def frame(frame_type, flags, stream_id, payload=b""):
    return struct.pack(">I", len(payload))[1:] + struct.pack(">BBI", frame_type, flags, stream_id) + payload


def grpc_message_frame(message):
    """gRPC length-prefixed message: compressed flag 0, 4-byte length."""
    return struct.pack(">BI", 0, len(message)) + message


def parse_grpc_messages(body):
    """Split a gRPC response body into its messages."""
    messages, pos = [], 0
    while pos < len(body):
        if len(body) - pos < 5:
            raise CRIError(INTERNAL, "truncated gRPC message prefix")
        compressed, length = struct.unpack(">BI", body[pos:pos + 5])
        if compressed:
            raise CRIError(INTERNAL, "compressed gRPC message although none was accepted")
        messages.append(body[pos + 5:pos + 5 + length])
        if len(messages[-1]) != length:
            raise CRIError(INTERNAL, "truncated gRPC message")
        pos += 5 + length
    return messages


def _grpc_timeout(seconds):
    return "%dm" % max(1, min(int(seconds * 1000), 99999999))


class _UnaryCall:
    """One unary gRPC call on its own HTTP/2 connection."""

    def __init__(self, sock, deadline, what):
        self.sock = sock
        self.deadline = deadline
        self.what = what
        self.decoder = HPACKDecoder()
        self.buffer = b""
        self.send_window = {0: DEFAULT_WINDOW, STREAM_ID: DEFAULT_WINDOW}
        self.peer_max_frame = 16384
        self.peer_initial_window = DEFAULT_WINDOW
        self.header_blocks = []
        self.pending_block = None
        self.body = bytearray()
        self.ended = False

    # -- socket ---------------------------------------------------------
    def _remaining(self):
        left = self.deadline - time.time()
        if left <= 0:
            raise CRIError(DEADLINE_EXCEEDED, "%s: no answer in time" % self.what)
        return left

    def _send(self, data):
        self.sock.settimeout(self._remaining())
        self.sock.sendall(data)

    def _read_exact(self, count):
        while len(self.buffer) < count:
            self.sock.settimeout(self._remaining())
            chunk = self.sock.recv(max(65536, count - len(self.buffer)))
            if not chunk:
                raise CRIError(UNAVAILABLE, "%s: connection closed before the reply was complete" % self.what)
            self.buffer += chunk
        data, self.buffer = self.buffer[:count], self.buffer[count:]
        return data

    def _read_frame(self):
        head = self._read_exact(9)
        length = struct.unpack(">I", b"\x00" + head[:3])[0]
        frame_type, flags, stream_id = struct.unpack(">BBI", head[3:])
        return frame_type, flags, stream_id & 0x7FFFFFFF, self._read_exact(length)

    # -- protocol -------------------------------------------------------
    def run(self, path, request, metadata):
        settings = struct.pack(">HIHIHI", SETTINGS_ENABLE_PUSH, 0, SETTINGS_INITIAL_WINDOW_SIZE, RECEIVE_WINDOW,
                               SETTINGS_HEADER_TABLE_SIZE, 4096)
        self._send(PREFACE + frame(SETTINGS, 0, 0, settings)
                   + frame(WINDOW_UPDATE, 0, 0, struct.pack(">I", RECEIVE_WINDOW - DEFAULT_WINDOW)))
        headers = [(":method", "POST"), (":scheme", "http"), (":path", path), (":authority", "localhost"),
                   ("content-type", "application/grpc"), ("te", "trailers"),
                   ("grpc-timeout", _grpc_timeout(self.deadline - time.time()))] + list(metadata)
        self._send(frame(HEADERS, FLAG_END_HEADERS, STREAM_ID, encode_headers(headers)))
        pending = grpc_message_frame(request)
        while pending or not self.ended:
            window = min(self.send_window[0], self.send_window[STREAM_ID], self.peer_max_frame)
            if pending and window > 0:
                chunk, pending = pending[:window], pending[window:]
                self._send(frame(DATA, 0 if pending else FLAG_END_STREAM, STREAM_ID, chunk))
                self.send_window[0] -= len(chunk)
                self.send_window[STREAM_ID] -= len(chunk)
                continue
            self._handle(*self._read_frame())
        try:
            self.sock.sendall(frame(GOAWAY, 0, 0, struct.pack(">II", STREAM_ID, 0)))
        except (OSError, socket.error):
            pass
        return self.header_blocks, bytes(self.body)

    def _handle(self, frame_type, flags, stream_id, payload):
        if frame_type == SETTINGS:
            if not flags & FLAG_ACK:
                self._apply_settings(payload)
                self._send(frame(SETTINGS, FLAG_ACK, 0))
        elif frame_type == PING:
            if not flags & FLAG_ACK:
                self._send(frame(PING, FLAG_ACK, 0, payload))
        elif frame_type == WINDOW_UPDATE:
            if stream_id in self.send_window:
                self.send_window[stream_id] += struct.unpack(">I", payload)[0] & 0x7FFFFFFF
        elif frame_type == GOAWAY:
            last_stream, error_code = struct.unpack(">II", payload[:8])
            if (last_stream & 0x7FFFFFFF) < STREAM_ID or error_code:
                raise CRIError(UNAVAILABLE, "%s: the daemon closed the connection (GOAWAY, HTTP/2 error %d): %s" % (
                    self.what, error_code, payload[8:].decode("utf-8", "replace")))
        elif stream_id != STREAM_ID:
            return  # PRIORITY, PUSH_PROMISE (disabled) or a stream that is not ours
        elif frame_type == RST_STREAM:
            raise CRIError(UNAVAILABLE, "%s: the daemon reset the call (HTTP/2 error %d)" % (
                self.what, struct.unpack(">I", payload)[0]))
        elif frame_type in (HEADERS, CONTINUATION):
            self._header_fragment(frame_type, flags, payload)
        elif frame_type == DATA:
            self.body += self._strip_padding(flags, payload)
            if payload:  # give the flow-control credit straight back
                credit = struct.pack(">I", len(payload))
                self._send(frame(WINDOW_UPDATE, 0, 0, credit) + frame(WINDOW_UPDATE, 0, STREAM_ID, credit))
            self.ended = bool(flags & FLAG_END_STREAM)

    def _apply_settings(self, payload):
        for pos in range(0, len(payload) - 5, 6):
            key, value = struct.unpack(">HI", payload[pos:pos + 6])
            if key == SETTINGS_MAX_FRAME_SIZE:
                self.peer_max_frame = value
            elif key == SETTINGS_INITIAL_WINDOW_SIZE:
                self.send_window[STREAM_ID] += value - self.peer_initial_window
                self.peer_initial_window = value

    @staticmethod
    def _strip_padding(flags, payload):
        if flags & FLAG_PADDED:
            pad = bytearray(payload[:1])[0]
            payload = payload[1:len(payload) - pad]
        return payload

    def _header_fragment(self, frame_type, flags, payload):
        if frame_type == HEADERS:
            payload = self._strip_padding(flags, payload)
            if flags & FLAG_PRIORITY:
                payload = payload[5:]
            self.pending_block = [payload, bool(flags & FLAG_END_STREAM)]
        elif self.pending_block is None:
            raise CRIError(INTERNAL, "%s: CONTINUATION without HEADERS" % self.what)
        else:
            self.pending_block[0] += payload
        if flags & FLAG_END_HEADERS:
            block, end_stream = self.pending_block
            self.pending_block = None
            self.header_blocks.append(self.decoder.decode(block))
            self.ended = self.ended or end_stream


def _socket_path(address):
    """Accept kubelet-style `unix:///path` endpoints as well as plain paths."""
    if address.startswith("unix://"):
        return address[len("unix://"):]
    return address


def grpc_unary(address, path, request, timeout=DEFAULT_TIMEOUT, metadata=()):
    """Send one serialised request to `path` (/package.Service/Method); return the response bytes."""
    sock_path = _socket_path(address)
    what = "%s on %s" % (path.rsplit("/", 1)[-1], sock_path)
    deadline = time.time() + timeout
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.settimeout(timeout)
        try:
            sock.connect(sock_path)
        except (OSError, socket.error) as exc:
            raise CRIError(UNAVAILABLE, "cannot connect to %s: %s" % (sock_path, getattr(exc, "strerror", None) or exc))
        try:
            blocks, body = _UnaryCall(sock, deadline, what).run(path, request, metadata)
        except socket.timeout:
            raise CRIError(DEADLINE_EXCEEDED, "%s: no answer within %gs" % (what, timeout))
        except HPACKError as exc:
            raise CRIError(INTERNAL, "%s: bad header block: %s" % (what, exc))
        except (OSError, socket.error) as exc:
            raise CRIError(UNAVAILABLE, "%s: connection failed: %s" % (what, exc))
    finally:
        sock.close()
    return _check_status(blocks, body, what)


def _check_status(blocks, body, what):
    if not blocks:
        raise CRIError(INTERNAL, "no response headers from %s" % what)
    headers = dict(blocks[0])
    trailers = dict(blocks[-1])
    if headers.get(":status") != "200":
        raise CRIError(UNAVAILABLE if headers.get(":status") in ("502", "503", "504") else UNKNOWN,
                       "HTTP status %s from %s" % (headers.get(":status"), what))
    if "grpc-status" not in trailers:
        raise CRIError(INTERNAL, "no grpc-status in the response of %s" % what)
    code = int(trailers["grpc-status"])
    if code:
        raise CRIError(code, unquote(trailers.get("grpc-message", "")))
    messages = parse_grpc_messages(body)
    if len(messages) != 1:
        raise CRIError(INTERNAL, "expected one response message from %s, got %d" % (what, len(messages)))
    return messages[0]


# --------------------------------------------------------------------------
# CRI client
# --------------------------------------------------------------------------


class CRIClient:
    """RuntimeService and ImageService of CRI `runtime.v1` on a unix socket."""

    def __init__(self, address=DEFAULT_SOCKET, timeout=DEFAULT_TIMEOUT):
        self.address = address
        self.timeout = timeout

    def call(self, service, method, request_type, request, response_type, timeout=None):
        payload = encode_message(request_type, request)
        raw = grpc_unary(self.address, "/%s/%s" % (service, method), payload,
                         timeout=self.timeout if timeout is None else timeout)
        try:
            return decode_message(response_type, raw)
        except (ValueError, TypeError, UnicodeDecodeError) as exc:
            raise CRIError(INTERNAL, "cannot parse the %s reply from %s: %s" % (method, self.address, exc))

    def _runtime(self, method, request, timeout=None, request_type=None, response_type=None):
        return self.call(RUNTIME_SERVICE, method, request_type or method + "Request", request,
                         response_type or method + "Response", timeout)

    # -- runtime ----------------------------------------------------------
    def version(self):
        return self._runtime("Version", {"version": "v1"})

    def status(self, verbose=True):
        """conditions, info (values are JSON text, e.g. info["config"]) and runtime_handlers."""
        return self._runtime("Status", {"verbose": verbose})

    def run_pod_sandbox(self, config, runtime_handler="", timeout=None):
        reply = self._runtime("RunPodSandbox", {"config": config, "runtime_handler": runtime_handler}, timeout)
        return reply["pod_sandbox_id"]

    def stop_pod_sandbox(self, sandbox_id, timeout=None):
        self._runtime("StopPodSandbox", {"pod_sandbox_id": sandbox_id}, timeout, response_type="Empty")

    def remove_pod_sandbox(self, sandbox_id, timeout=None):
        self._runtime("RemovePodSandbox", {"pod_sandbox_id": sandbox_id}, timeout, response_type="Empty")

    def list_pod_sandboxes(self, labels=None, timeout=None):
        """Sandboxes (id, metadata, state 0=ready/1=not ready, labels, runtime_handler), optionally by label."""
        request = {"filter": {"label_selector": dict(labels)}} if labels else {}
        return self._runtime("ListPodSandbox", request, timeout)["items"]

    def list_containers(self, sandbox_id="", labels=None, timeout=None):
        request = {"filter": {"pod_sandbox_id": sandbox_id, "label_selector": dict(labels or {})}}
        return self._runtime("ListContainers", request, timeout)["containers"]

    def create_container(self, sandbox_id, config, sandbox_config, timeout=None):
        reply = self._runtime("CreateContainer", {"pod_sandbox_id": sandbox_id, "config": config,
                                                  "sandbox_config": sandbox_config}, timeout)
        return reply["container_id"]

    def start_container(self, container_id, timeout=None):
        self._runtime("StartContainer", {"container_id": container_id}, timeout, response_type="Empty")

    def stop_container(self, container_id, grace_seconds=0, timeout=None):
        self._runtime("StopContainer", {"container_id": container_id, "timeout": grace_seconds}, timeout,
                      response_type="Empty")

    def remove_container(self, container_id, timeout=None):
        self._runtime("RemoveContainer", {"container_id": container_id}, timeout, response_type="Empty")

    def container_status(self, container_id, timeout=None):
        """The ContainerStatus message, with `state_name` (CREATED/RUNNING/EXITED/UNKNOWN) added."""
        status = self._runtime("ContainerStatus", {"container_id": container_id}, timeout)["status"] or {}
        status["state_name"] = CONTAINER_STATES.get(status.get("state"), "UNKNOWN")
        return status

    # -- images -----------------------------------------------------------
    def list_images(self, timeout=None):
        return self.call(IMAGE_SERVICE, "ListImages", "ListImagesRequest", {}, "ListImagesResponse",
                         timeout)["images"]

    def image_status(self, image, timeout=None):
        """The Image message, or None when the runtime does not have the image."""
        return self.call(IMAGE_SERVICE, "ImageStatus", "ImageStatusRequest", {"image": {"image": image}},
                         "ImageStatusResponse", timeout)["image"]

    # -- helpers ------------------------------------------------------------
    def wait_container_exit(self, container_id, timeout, interval=0.2):
        """Poll ContainerStatus until the container has exited; return its status."""
        deadline = time.time() + timeout
        while True:
            status = self.container_status(container_id)
            if status["state_name"] == "EXITED":
                return status
            if time.time() + interval > deadline:
                raise CRIError(DEADLINE_EXCEEDED, "container %s still %s after %gs" % (
                    container_id[:12], status["state_name"].lower(), timeout))
            time.sleep(interval)


def sandbox_config(name, uid, namespace="default", attempt=0, hostname=None, log_directory="",
                   labels=None, host_network=True):
    """PodSandboxConfig for a pod on the node's network (no CNI needed), as kubelet builds it.

    Like kubelet, no hostname for a host-network pod: it shares the node's UTS
    namespace and runc refuses to set a hostname there.
    """
    mode = NAMESPACE_NODE if host_network else NAMESPACE_POD
    if hostname is None:
        hostname = "" if host_network else name
    return {
        "metadata": {"name": name, "uid": uid, "namespace": namespace, "attempt": attempt},
        "hostname": hostname,
        "log_directory": log_directory,
        "labels": dict(labels or {}),
        "linux": {"security_context": {"namespace_options": {"network": mode, "pid": NAMESPACE_CONTAINER}}},
    }


def container_config(name, image, command=None, args=None, envs=None, log_path="", labels=None,
                     host_network=True):
    """ContainerConfig; `envs` is a dict, `log_path` is relative to the sandbox's log_directory."""
    mode = NAMESPACE_NODE if host_network else NAMESPACE_POD
    return {
        "metadata": {"name": name, "attempt": 0},
        "image": {"image": image},
        "command": list(command or []),
        "args": list(args or []),
        "envs": [{"key": k, "value": v} for k, v in sorted((envs or {}).items())],
        "log_path": log_path,
        "labels": dict(labels or {}),
        "linux": {"security_context": {"namespace_options": {"network": mode, "pid": NAMESPACE_CONTAINER}}},
    }


def read_container_log(path):
    """Text of a CRI log file (`<time> <stream> <P|F> <text>` lines); partial lines are joined."""
    out = []
    with open(path, "rb") as handle:
        for line in handle.read().decode("utf-8", "replace").splitlines():
            parts = line.split(" ", 3)
            if len(parts) < 3:
                continue
            text = parts[3] if len(parts) == 4 else ""
            out.append(text if parts[2] == "P" else text + "\n")
    return "".join(out)


def runtime_ready(status):
    """True when the RuntimeReady condition of a Status reply is true."""
    conditions = ((status or {}).get("status") or {}).get("conditions", [])
    return any(c["type"] == "RuntimeReady" and c["status"] for c in conditions)


def _info_json(status, key):
    try:
        return json.loads(status.get("info", {}).get(key) or "null") or {}
    except ValueError:
        return {}


def runtime_config(status):
    """The CRI runtime settings from a verbose Status: the `containerd` table of the effective config.

    containerd 1.6/1.7 put the whole CRI plugin config in info["config"]
    (runtimes under `containerd.runtimes`); 2.x splits the plugin and returns
    the runtime plugin's config there too, with the same `containerd` table.
    """
    config = _info_json(status, "config")
    return config.get("containerd") or config.get("Containerd") or {}


def runtimes_from_status(status):
    """Runtimes the daemon loaded: name -> {runtime_type, binary_name, systemd_cgroup, options}."""
    runtimes = {}
    for name, runtime in sorted((runtime_config(status).get("runtimes") or {}).items()):
        options = runtime.get("options") or {}
        runtimes[name] = {
            "runtime_type": runtime.get("runtimeType") or runtime.get("runtime_type") or "",
            "binary_name": options.get("BinaryName") or "",
            "systemd_cgroup": bool(options.get("SystemdCgroup")),
            "options": options,
        }
    for handler in status.get("runtime_handlers") or []:
        if handler["name"] and handler["name"] not in runtimes:
            runtimes[handler["name"]] = {"runtime_type": "", "binary_name": "", "systemd_cgroup": False,
                                         "options": {}}
    return runtimes


def default_runtime_from_status(status):
    config = runtime_config(status)
    return config.get("defaultRuntimeName") or config.get("default_runtime_name") or ""
