# -*- coding: utf-8 -*-
# Copyright: gpunode.nvidia contributors
# Apache License 2.0
"""HPACK (RFC 7541), the header compression of HTTP/2, as far as a unary gRPC call needs it.

Requests are encoded as literal fields without Huffman (``encode_headers``);
responses are fully decoded (``HPACKDecoder``: static and dynamic table,
Huffman code of Appendix B), because Go's gRPC server Huffman-encodes
``grpc-message``. Used by http2_grpc.py; runs on managed nodes: standard
library only.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

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
