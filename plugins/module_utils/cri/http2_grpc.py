# -*- coding: utf-8 -*-
# Copyright: gpunode.nvidia contributors
# Apache License 2.0
"""Unary gRPC calls over HTTP/2 (h2c, prior knowledge) on a unix socket, standard library only.

``grpc_unary`` sends one serialised request and returns the serialised reply;
a failed call raises ``CRIError`` with the gRPC status code. HTTP/2 (RFC 9113)
is spoken just enough for that: preface, SETTINGS and their ACK,
HEADERS/CONTINUATION, DATA, WINDOW_UPDATE (both directions), PING, RST_STREAM
and GOAWAY. One connection per call: calls are rare, a unix socket connects in
microseconds, and no state survives a daemon restart. Headers go through
hpack.py; the CRI client on top is cri.py. Runs on managed nodes.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import socket
import struct
import time

try:  # Python 3
    from urllib.parse import unquote
except ImportError:  # pragma: no cover - Python 2 is not supported on nodes
    from urllib import unquote

from ansible_collections.gpunode.nvidia.plugins.module_utils.cri.hpack import HPACKDecoder, HPACKError, encode_headers

DEFAULT_TIMEOUT = 10.0

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


def socket_path(address):
    """Accept kubelet-style `unix:///path` endpoints as well as plain paths."""
    if address.startswith("unix://"):
        return address[len("unix://"):]
    return address


def grpc_unary(address, path, request, timeout=DEFAULT_TIMEOUT, metadata=()):
    """Send one serialised request to `path` (/package.Service/Method); return the response bytes."""
    sock_path = socket_path(address)
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
