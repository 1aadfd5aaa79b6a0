"""Wire formats of the standard-library CRI client: protobuf, HPACK (with Huffman), HTTP/2 framing.

The HTTP/2 tests run the client against a small scripted server on a unix
socket in a thread; the real-daemon tests are in tests/integration/test_cri_client.py.
"""
from __future__ import absolute_import, division, print_function
__metaclass__ = type

import os
import socket
import struct
import tempfile
import threading
import time

import pytest

from ansible_collections.gpunode.nvidia.plugins.module_utils.cri import client as cri

from ansible_collections.gpunode.nvidia.plugins.module_utils.cri import hpack

from ansible_collections.gpunode.nvidia.plugins.module_utils.cri import protobuf_wire
from ansible_collections.gpunode.nvidia.plugins.module_utils.cri import http2_grpc as h2


# ---------------------------------------------------------------- protobuf

@pytest.mark.parametrize("value, wire", [(0, b"\x00"), (1, b"\x01"), (300, b"\xac\x02"),
                                         (2 ** 63 - 1, b"\xff" * 8 + b"\x7f"),
                                         (-1, b"\xff" * 9 + b"\x01")])
def test_varint_round_trip(value, wire):
    assert protobuf_wire.encode_varint(value) == wire
    decoded, end = protobuf_wire.decode_varint(wire, 0)
    assert end == len(wire)
    assert decoded == value & (2 ** 64 - 1)


def test_scalar_and_nested_encoding_matches_protobuf_bytes():
    assert protobuf_wire.encode_message("StatusRequest", {"verbose": True}) == b"\x08\x01"
    assert protobuf_wire.encode_message("StatusRequest", {"verbose": False}) == b""  # proto3 omits defaults
    assert protobuf_wire.encode_message("VersionRequest", {"version": "v1"}) == b"\x0a\x02v1"
    request = protobuf_wire.encode_message("RunPodSandboxRequest", {
        "config": {"metadata": {"name": "p", "attempt": 1}, "labels": {"a": "b"}},
        "runtime_handler": "nvidia"})
    metadata = b"\x0a\x01p" + b"\x20\x01"
    config = b"\x0a" + bytes([len(metadata)]) + metadata + b"\x32\x06\x0a\x01a\x12\x01b"
    assert request == b"\x0a" + bytes([len(config)]) + config + b"\x12\x06nvidia"


def test_round_trip_of_a_container_config():
    config = cri.container_config("va", "img:1", command=["/bin/sh"], args=["-c", "echo hi"],
                                  envs={"B": "2", "A": "1"}, log_path="va.log", labels={"k": "v"})
    decoded = protobuf_wire.decode_message("ContainerConfig", protobuf_wire.encode_message("ContainerConfig", config))
    assert decoded["args"] == ["-c", "echo hi"]
    assert decoded["envs"] == [{"key": "A", "value": "1"}, {"key": "B", "value": "2"}]
    assert decoded["image"]["image"] == "img:1"
    assert decoded["labels"] == {"k": "v"}
    assert decoded["linux"]["security_context"]["namespace_options"]["network"] == cri.NAMESPACE_NODE


def test_decode_skips_unknown_fields_and_reads_negative_int32():
    exit_minus_one = b"\x38" + protobuf_wire.encode_varint(-1)            # field 7 exit_code
    unknown = b"\xa8\x06\x05" + b"\xb2\x06\x03abc" + b"\xbd\x06\x00\x00\x00\x00"  # fields 101-103
    status = protobuf_wire.decode_message("ContainerStatus", b"\x0a\x02id" + unknown + exit_minus_one + b"\x18\x02")
    assert status["id"] == "id" and status["exit_code"] == -1 and status["state"] == 2
    assert status["labels"] == {} and status["metadata"] is None and status["reason"] == ""


def test_decode_packed_repeated_scalars():
    # RuntimeHandlerFeatures has no repeated scalar; use a throwaway schema entry
    protobuf_wire.SCHEMA["_Packed"] = ((5, "groups", "int64", True),)
    try:
        assert protobuf_wire.decode_message("_Packed", b"\x2a\x03\x01\x02\x03")["groups"] == [1, 2, 3]
        assert protobuf_wire.decode_message("_Packed", b"\x28\x07\x28\x08")["groups"] == [7, 8]
    finally:
        del protobuf_wire.SCHEMA["_Packed"]


def test_encode_rejects_unknown_field_names():
    with pytest.raises(ValueError, match="runtime_handlr"):
        protobuf_wire.encode_message("RunPodSandboxRequest", {"runtime_handlr": "nvidia"})


def test_truncated_message_is_an_error():
    with pytest.raises(ValueError):
        protobuf_wire.decode_message("VersionResponse", b"\x0a\x05ab")


# ---------------------------------------------------------------- HPACK

def test_huffman_table_is_rfc7541_appendix_b():
    assert len(hpack.HUFFMAN_CODE_LENGTHS) == 257
    # a few codes straight from the RFC's table
    assert hpack.HUFFMAN_CODES[ord("0")] == (0x0, 5)
    assert hpack.HUFFMAN_CODES[ord(" ")] == (0x14, 6)
    assert hpack.HUFFMAN_CODES[ord("\"")] == (0x3f9, 10)
    assert hpack.HUFFMAN_CODES[ord("%")] == (0x15, 6)
    assert hpack.HUFFMAN_CODES[ord("\\")] == (0x7fff0, 19)
    assert hpack.HUFFMAN_CODES[0] == (0x1ff8, 13)
    assert hpack.HUFFMAN_CODES[10] == (0x3ffffffc, 30)
    assert hpack.HUFFMAN_CODES[255] == (0x3ffffee, 26)
    assert hpack.HUFFMAN_CODES[hpack.HUFFMAN_EOS] == (0x3fffffff, 30)
    # a complete prefix code: the Kraft sum is exactly one
    assert sum(2 ** (30 - n) for n in hpack.HUFFMAN_CODE_LENGTHS) == 2 ** 30


@pytest.mark.parametrize("text, hexed", [
    ("www.example.com", "f1e3c2e5f23a6ba0ab90f4ff"),       # RFC 7541 C.4.1
    ("no-cache", "a8eb10649cbf"),                           # C.4.2
    ("custom-value", "25a849e95bb8e8b4bf"),                 # C.4.3
    ("Mon, 21 Oct 2013 20:13:21 GMT", "d07abe941054d444a8200595040b8166e082a62d1bff"),  # C.6.1
])
def test_huffman_rfc_strings(text, hexed):
    assert hpack.huffman_decode(bytes.fromhex(hexed)) == text.encode()
    assert hpack.huffman_encode(text.encode()) == bytes.fromhex(hexed)


def test_huffman_round_trip_of_every_byte():
    data = bytes(range(256)) * 2
    assert hpack.huffman_decode(hpack.huffman_encode(data)) == data


@pytest.mark.parametrize("bad", [b"\x18",            # 'a' padded with zeros, not ones
                                 b"\xff\xff",        # 16 bits of padding
                                 b"\xff\xff\xff\xfc"])  # EOS inside the string
def test_huffman_rejects_bad_padding_and_eos(bad):
    with pytest.raises(hpack.HPACKError):
        hpack.huffman_decode(bad)


@pytest.mark.parametrize("value, prefix, wire", [(10, 5, b"\x0a"), (1337, 5, b"\x1f\x9a\x0a"), (42, 8, b"\x2a")])
def test_integer_representation_rfc_c1(value, prefix, wire):
    assert hpack.encode_integer(value, prefix) == wire
    assert hpack.decode_integer(wire, 0, prefix) == (value, len(wire))


def test_hpack_rfc_c4_requests_with_huffman():
    decoder = hpack.HPACKDecoder()
    first = decoder.decode(bytes.fromhex("828684418cf1e3c2e5f23a6ba0ab90f4ff"))
    assert first == [(":method", "GET"), (":scheme", "http"), (":path", "/"), (":authority", "www.example.com")]
    assert decoder.size == 57
    second = decoder.decode(bytes.fromhex("828684be5886a8eb10649cbf"))
    assert second == first + [("cache-control", "no-cache")]
    assert decoder.size == 110
    third = decoder.decode(bytes.fromhex("828785bf408825a849e95ba97d7f8925a849e95bb8e8b4bf"))
    assert third == [(":method", "GET"), (":scheme", "https"), (":path", "/index.html"),
                     (":authority", "www.example.com"), ("custom-key", "custom-value")]
    assert decoder.size == 164
    assert decoder.dynamic[0] == ("custom-key", "custom-value")


def test_hpack_rfc_c6_responses_with_eviction():
    decoder = hpack.HPACKDecoder(max_table_size=256)
    first = decoder.decode(bytes.fromhex(
        "488264025885aec3771a4b6196d07abe941054d444a8200595040b8166e082a62d1bff"
        "6e919d29ad171863c78f0b97c8e9ae82ae43d3"))
    assert first == [(":status", "302"), ("cache-control", "private"),
                     ("date", "Mon, 21 Oct 2013 20:13:21 GMT"), ("location", "https://www.example.com")]
    assert decoder.size == 222
    second = decoder.decode(bytes.fromhex("4883640effc1c0bf"))
    assert second[0] == (":status", "307") and second[1:] == first[1:]
    assert decoder.size == 222
    third = decoder.decode(bytes.fromhex(
        "88c16196d07abe941054d444a8200595040b8166e084a62d1bffc05a839bd9ab77ad94e7821dd7f2e6c7b335dfdfcd5b"
        "3960d5af27087f3672c1ab270fb5291f9587316065c003ed4ee5b1063d5007"))
    assert third == [(":status", "200"), ("cache-control", "private"),
                     ("date", "Mon, 21 Oct 2013 20:13:22 GMT"), ("location", "https://www.example.com"),
                     ("content-encoding", "gzip"),
                     ("set-cookie", "foo=ASDJKHQKBZXOQWEOPIUAXQWEOIU; max-age=3600; version=1")]
    assert decoder.size == 215
    assert [name for name, _unused in decoder.dynamic] == ["set-cookie", "content-encoding", "date"]


def test_hpack_table_size_update_and_bad_index():
    decoder = hpack.HPACKDecoder()
    decoder.decode(bytes.fromhex("828684418cf1e3c2e5f23a6ba0ab90f4ff"))
    assert decoder.decode(b"\x20") == [] and decoder.dynamic == []  # size 0 empties the table
    with pytest.raises(hpack.HPACKError):
        decoder.decode(b"\xbe")  # index 62: nothing in the dynamic table


def test_request_headers_are_plain_literals_our_decoder_reads():
    headers = [(":path", "/runtime.v1.RuntimeService/Status"), ("te", "trailers")]
    block = hpack.encode_headers(headers)
    assert block.startswith(b"\x00\x05:path")
    assert hpack.HPACKDecoder().decode(block) == headers


# ---------------------------------------------------------------- HTTP/2 + gRPC against a scripted server

def _frame_reader(conn):
    buffer = b""

    def read(count):
        nonlocal buffer
        while len(buffer) < count:
            chunk = conn.recv(65536)
            if not chunk:
                raise EOFError
            buffer += chunk
        data, buffer = buffer[:count], buffer[count:]
        return data

    def frame():
        head = read(9)
        length = struct.unpack(">I", b"\0" + head[:3])[0]
        kind, flags, stream = struct.unpack(">BBI", head[3:])
        return kind, flags, stream, read(length)
    return read, frame


class ScriptedServer:
    """Accepts one connection, reads the client's request, then plays SCRIPT(conn, request)."""

    def __init__(self, script, peer_window=65535):
        self.dir = tempfile.mkdtemp(prefix="cri-wire-")
        self.path = os.path.join(self.dir, "s.sock")
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(self.path)
        self.listener.listen(1)
        self.script = script
        self.peer_window = peer_window
        self.request = None
        self.headers = None
        self.data_frames = 0
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self):
        conn, _unused = self.listener.accept()
        try:
            read, frame = _frame_reader(conn)
            assert read(len(h2.PREFACE)) == h2.PREFACE
            # a small initial window forces the client to wait for WINDOW_UPDATE on big requests
            settings = struct.pack(">HI", h2.SETTINGS_INITIAL_WINDOW_SIZE, self.peer_window)
            conn.sendall(h2.frame(h2.SETTINGS, 0, 0, settings))
            body, decoder, window = b"", hpack.HPACKDecoder(), self.peer_window
            while True:
                kind, flags, stream, payload = frame()
                if kind == h2.HEADERS:
                    self.headers = dict(decoder.decode(payload))
                elif kind == h2.DATA:
                    body += payload
                    self.data_frames += 1
                    window -= len(payload)
                    if window <= 0:
                        grant = struct.pack(">I", 70000)
                        conn.sendall(h2.frame(h2.WINDOW_UPDATE, 0, 0, grant)
                                     + h2.frame(h2.WINDOW_UPDATE, 0, 1, grant))
                        window += 70000
                    if flags & h2.FLAG_END_STREAM:
                        break
            self.request = body
            self.script(conn, body)
            time.sleep(0.05)
        except (EOFError, OSError):
            pass
        finally:
            conn.close()

    def close(self):
        self.listener.close()
        self.thread.join(5)
        if os.path.exists(self.path):
            os.unlink(self.path)
        os.rmdir(self.dir)


@pytest.fixture
def scripted():
    servers = []

    def start(script, **kwargs):
        servers.append(ScriptedServer(script, **kwargs))
        return servers[-1]
    yield start
    for server in servers:
        server.close()


def _literal(name, value, huffman=False):
    raw = hpack.huffman_encode(value.encode()) if huffman else value.encode()
    return (b"\x40" + hpack.encode_integer(len(name), 7) + name.encode()
            + hpack.encode_integer(len(raw), 7, 0x80 if huffman else 0) + raw)


def _version_reply():
    return h2.grpc_message_frame(protobuf_wire.encode_message("VersionResponse", {
        "version": "0.1.0", "runtime_name": "containerd", "runtime_version": "9.9", "runtime_api_version": "v1"}))


def test_unary_call_with_ping_continuation_padding_and_indexed_trailers(scripted):
    def script(conn, _request):
        conn.sendall(h2.frame(h2.PING, 0, 0, b"12345678"))
        status_block = b"\x88" + _literal("content-type", "application/grpc")   # :status 200 indexed
        conn.sendall(h2.frame(h2.HEADERS, 0, 1, status_block[:3])
                     + h2.frame(h2.CONTINUATION, h2.FLAG_END_HEADERS, 1, status_block[3:]))
        reply = _version_reply()
        padded = bytes([4]) + reply[:7] + b"\0" * 4
        conn.sendall(h2.frame(h2.DATA, h2.FLAG_PADDED, 1, padded) + h2.frame(h2.DATA, 0, 1, reply[7:]))
        conn.sendall(h2.frame(h2.HEADERS, h2.FLAG_END_HEADERS | h2.FLAG_END_STREAM, 1,
                              _literal("grpc-status", "0", huffman=True)))

    server = scripted(script)
    version = cri.CRIClient(server.path, timeout=5).version()
    assert version["runtime_version"] == "9.9"
    assert server.headers[":path"] == "/runtime.v1.RuntimeService/Version"
    assert server.headers["content-type"] == "application/grpc"
    assert server.headers["grpc-timeout"].endswith("m")
    assert server.request == h2.grpc_message_frame(b"\x0a\x02v1")


def test_grpc_error_in_huffman_trailers_comes_back_verbatim(scripted):
    text = 'failed to get sandbox runtime: no runtime for "nvidia" is configured'

    def script(conn, _request):
        conn.sendall(h2.frame(h2.HEADERS, h2.FLAG_END_HEADERS, 1, b"\x88"))
        trailers = _literal("grpc-status", "2") + _literal("grpc-message", text, huffman=True)
        conn.sendall(h2.frame(h2.HEADERS, h2.FLAG_END_HEADERS | h2.FLAG_END_STREAM, 1, trailers))

    server = scripted(script)
    with pytest.raises(h2.CRIError) as caught:
        cri.CRIClient(server.path, timeout=5).run_pod_sandbox(cri.sandbox_config("p", "u"), "nvidia")
    assert caught.value.code == 2 and caught.value.code_name == "UNKNOWN"
    assert caught.value.message == text
    assert str(caught.value) == "UNKNOWN: " + text


def test_trailers_only_reply_with_percent_encoded_message(scripted):
    def script(conn, _request):
        block = b"\x88" + _literal("grpc-status", "12") + _literal("grpc-message", "caf%C3%A9 100%25 %22x%22")
        conn.sendall(h2.frame(h2.HEADERS, h2.FLAG_END_HEADERS | h2.FLAG_END_STREAM, 1, block))

    server = scripted(script)
    with pytest.raises(h2.CRIError) as caught:
        cri.CRIClient(server.path, timeout=5).status()
    assert (caught.value.code, caught.value.message) == (h2.UNIMPLEMENTED, u'caf\xe9 100% "x"')


def test_large_request_waits_for_window_updates(scripted):
    labels = dict(("label-%04d" % i, "x" * 100) for i in range(1500))  # ~170 kB request

    def script(conn, _request):
        block = b"\x88" + _literal("content-type", "application/grpc")
        conn.sendall(h2.frame(h2.HEADERS, h2.FLAG_END_HEADERS, 1, block))
        conn.sendall(h2.frame(h2.DATA, 0, 1, h2.grpc_message_frame(b"")))
        conn.sendall(h2.frame(h2.HEADERS, h2.FLAG_END_HEADERS | h2.FLAG_END_STREAM, 1,
                              _literal("grpc-status", "0")))

    server = scripted(script, peer_window=20000)
    assert cri.CRIClient(server.path, timeout=5).list_pod_sandboxes(labels=labels) == []
    decoded = protobuf_wire.decode_message("ListPodSandboxRequest", server.request[5:])
    assert decoded["filter"]["label_selector"] == labels
    assert server.data_frames > 10  # split by max frame size and by the peer's window


def test_rst_stream_and_goaway_are_errors(scripted):
    server = scripted(lambda conn, _r: conn.sendall(h2.frame(h2.RST_STREAM, 0, 1, struct.pack(">I", 2))))
    with pytest.raises(h2.CRIError, match="reset the call"):
        cri.CRIClient(server.path, timeout=5).version()
    server = scripted(lambda conn, _r: conn.sendall(
        h2.frame(h2.GOAWAY, 0, 0, struct.pack(">II", 0, 0) + b"shutting down")))
    with pytest.raises(h2.CRIError, match="GOAWAY.*shutting down") as caught:
        cri.CRIClient(server.path, timeout=5).version()
    assert caught.value.code == h2.UNAVAILABLE


def test_connection_closed_mid_call(scripted):
    server = scripted(lambda conn, _r: conn.sendall(h2.frame(h2.HEADERS, h2.FLAG_END_HEADERS, 1, b"\x88")))
    with pytest.raises(h2.CRIError) as caught:
        cri.CRIClient(server.path, timeout=5).version()
    # EOF or a reset, depending on whether our last frames were read before the close
    assert caught.value.code == h2.UNAVAILABLE
    assert "Version on %s" % server.path in caught.value.message


def test_silent_server_hits_the_timeout(scripted):
    server = scripted(lambda conn, _r: time.sleep(0.8))
    started = time.time()
    with pytest.raises(h2.CRIError) as caught:
        cri.CRIClient(server.path, timeout=0.3).version()
    assert caught.value.code == h2.DEADLINE_EXCEEDED
    assert time.time() - started < 0.75


def test_missing_socket_names_the_path(tmp_path):
    path = str(tmp_path / "nothing.sock")
    with pytest.raises(h2.CRIError) as caught:
        cri.CRIClient("unix://" + path, timeout=1).version()
    assert caught.value.code == h2.UNAVAILABLE
    assert path in caught.value.message and "unix://" not in caught.value.message


# ---------------------------------------------------------------- helpers on decoded replies

def _status(config, handlers=()):
    import json
    return {"status": {"conditions": [{"type": "RuntimeReady", "status": True, "reason": "", "message": ""}]},
            "info": {"config": json.dumps(config)}, "runtime_handlers": [{"name": n} for n in handlers]}


def test_runtimes_from_status_normalises_containerd_config():
    status = _status({"containerd": {"defaultRuntimeName": "nvidia", "runtimes": {
        "runc": {"runtimeType": "io.containerd.runc.v2", "options": {"SystemdCgroup": True}},
        "nvidia": {"runtimeType": "io.containerd.runc.v2",
                   "options": {"BinaryName": "/usr/bin/nvidia-container-runtime", "SystemdCgroup": True}},
        "kata": {"runtimeType": "io.containerd.kata.v2", "options": None}}}}, handlers=["", "runc", "crun"])
    runtimes = cri.runtimes_from_status(status)
    assert sorted(runtimes) == ["crun", "kata", "nvidia", "runc"]
    assert runtimes["nvidia"]["binary_name"] == "/usr/bin/nvidia-container-runtime"
    assert runtimes["runc"]["systemd_cgroup"] is True
    assert runtimes["kata"] == {"runtime_type": "io.containerd.kata.v2", "binary_name": "",
                                "systemd_cgroup": False, "options": {}}
    assert cri.default_runtime_from_status(status) == "nvidia"
    assert cri.runtime_ready(status)


def test_read_container_log_joins_partial_lines(tmp_path):
    log = tmp_path / "c.log"
    log.write_text("2024-01-01T00:00:00Z stdout P Test \n2024-01-01T00:00:00Z stdout F PASSED\n"
                   "2024-01-01T00:00:01Z stderr F \n")
    assert cri.read_container_log(str(log)) == "Test PASSED\n\n"
