# -*- coding: utf-8 -*-
# Copyright: gpunode.nvidia contributors
# Apache License 2.0
"""Read TOML on a managed node, where no TOML library may exist (tomllib only from Python 3.11).

``read_toml(text)`` returns ``(data, lines)``: the parsed tables as plain dicts
and, for every table header and key, the line it is written on, so a finding
can name "file:line". Values come from ``tomllib`` when the node's Python has
it (the real parser, the strict one); otherwise from the small reader below.
Line numbers always come from the small reader.

What the small reader understands (everything containerd, CRI-O and the
platforms' generated files use): comments, ``[table]`` headers with bare,
"basic" and 'literal' quoted keys, dotted keys, basic and literal strings
(single- and multi-line), integers, floats, booleans, arrays (multi-line,
nested, trailing commas) and inline tables. Dates and times are kept as their
text. ``[[array.of.tables]]`` is not read: its tables are skipped and listed
in ``TomlDocument.skipped``, so the caller can say what it could not see.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

try:  # Python 3.11+
    import tomllib
except ImportError:  # pragma: no cover - depends on the node's Python
    tomllib = None

BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")
NUMBER = re.compile(r"[+-]?(?:0x[0-9A-Fa-f_]+|0o[0-7_]+|0b[01_]+|inf|nan|"
                    r"\d[\d_]*(?:\.\d[\d_]*)?(?:[eE][+-]?\d[\d_]*)?)")
DATETIME = re.compile(r"\d{4}-\d{2}-\d{2}(?:[Tt ]\d{2}:\d{2}:\d{2}(?:\.\d+)?(?:[Zz]|[+-]\d{2}:\d{2})?)?"
                      r"|\d{2}:\d{2}:\d{2}(?:\.\d+)?")
# TOML allows no control character but tab and the line end (LF, or CR LF) anywhere: not in comments, strings or keys.
CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")
ESCAPES = {"b": "\b", "t": "\t", "n": "\n", "f": "\f", "r": "\r", '"': '"', "\\": "\\", "e": "\x1b"}


class TomlError(ValueError):
    """A file the reader cannot parse; ``line`` is 1-based (None when unknown)."""

    def __init__(self, message, line=None):
        self.message = message
        self.line = line
        super(TomlError, self).__init__("line %s: %s" % (line, message) if line else message)


class TomlDocument(object):
    """data: the tables; lines: {key path tuple: line}; skipped: [(line, header)] not read;
    reader: 'tomllib' or 'lines' (which parser gave the values)."""

    def __init__(self, data, lines, skipped, reader):
        self.data = data
        self.lines = lines
        self.skipped = skipped
        self.reader = reader

    def line_of(self, path):
        """Line of a key or table, or of the nearest enclosing table written in the file."""
        path = tuple(path)
        while path:
            if path in self.lines:
                return self.lines[path]
            path = path[:-1]
        return None


def read_toml(text, use_tomllib=True):
    """Parse TOML text into a TomlDocument; raise TomlError for a malformed file."""
    data, lines, skipped = _Reader(text).parse()
    reader = "lines"
    if use_tomllib and tomllib is not None:
        try:
            data = tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            raise TomlError(str(exc), _tomllib_line(str(exc)))
        reader = "tomllib"
    return TomlDocument(data, lines, skipped, reader)


def _tomllib_line(message):
    match = re.search(r"line (\d+)", message)
    return int(match.group(1)) if match else None


class _Reader(object):
    """A character scanner over the whole text; it tracks the line number as it goes."""

    def __init__(self, text):
        self.text = text.replace("\r\n", "\n")
        self.pos = 0
        self.data = {}
        self.lines = {}
        self.skipped = []
        self.defined_tables = set()

    # -- helpers --------------------------------------------------------------------
    @property
    def line(self):
        return self.text.count("\n", 0, self.pos) + 1

    def error(self, message):
        raise TomlError(message, self.line)

    def peek(self, count=1):
        return self.text[self.pos:self.pos + count]

    def skip_blank(self, newlines=False):
        """Skip spaces, tabs and comments (and newlines when asked)."""
        while self.pos < len(self.text):
            char = self.text[self.pos]
            if char in " \t" or (newlines and char == "\n"):
                self.pos += 1
            elif char == "#":
                end = self.text.find("\n", self.pos)
                self.pos = len(self.text) if end < 0 else end
            else:
                break

    def expect_line_end(self):
        self.skip_blank()
        if self.pos < len(self.text) and self.text[self.pos] != "\n":
            self.error("unexpected text after the value: %r" % self.text[self.pos:self.pos + 20])

    # -- document -------------------------------------------------------------------
    def parse(self):
        control = CONTROL.search(self.text)
        if control:
            self.pos = control.start()
            self.error("control character %r (TOML allows only tab and line ends)" % control.group())
        current, skipping = (), False
        while True:
            self.skip_blank(newlines=True)
            if self.pos >= len(self.text):
                return self.data, self.lines, self.skipped
            if self.peek(2) == "[[":
                line = self.line
                self.pos += 2
                path = self.key_path("]]")
                self.skipped.append((line, ".".join(path)))
                skipping = True
            elif self.peek() == "[":
                line = self.line
                self.pos += 1
                current = self.key_path("]")
                skipping = False
                self.open_table(current, line)
            else:
                line = self.line
                path = self.key_path("=")
                value = self.value()
                if not skipping:
                    self.assign(current, path, value, line)
            self.expect_line_end()

    def open_table(self, path, line):
        if path in self.defined_tables:
            self.error("table [%s] is defined twice" % ".".join(path))
        self.defined_tables.add(path)
        table = self.table_at(path)
        if not isinstance(table, dict):
            self.error("[%s] is not a table" % ".".join(path))
        self.lines.setdefault(path, line)

    def table_at(self, path):
        table = self.data
        for key in path:
            table = table.setdefault(key, {})
            if not isinstance(table, dict):
                self.error("key %s is not a table" % key)
        return table

    def assign(self, current, path, value, line):
        table = self.table_at(current + path[:-1])
        if path[-1] in table:
            self.error("key %s is defined twice" % ".".join(current + path))
        table[path[-1]] = value
        self.lines[current + path] = line
        for depth in range(1, len(path)):
            self.lines.setdefault(current + path[:depth], line)

    # -- keys -----------------------------------------------------------------------
    def key_path(self, terminator):
        parts = []
        while True:
            self.skip_blank()
            parts.append(self.key())
            self.skip_blank()
            if self.text.startswith(terminator, self.pos):
                self.pos += len(terminator)
                self.skip_blank()
                return tuple(parts)
            if self.peek() != ".":
                self.error("expected '.' or %r in a key" % terminator)
            self.pos += 1

    def key(self):
        char = self.peek()
        if char == '"':
            return self.basic_string()
        if char == "'":
            return self.literal_string()
        match = BARE_KEY.match(self.text, self.pos)
        if not match:
            self.error("expected a key")
        self.pos = match.end()
        return match.group(0)

    # -- values ---------------------------------------------------------------------
    def value(self):
        self.skip_blank()
        char = self.peek()
        if self.peek(3) in ('"""', "'''"):
            return self.multiline_string(self.peek(3))
        if char == '"':
            return self.basic_string()
        if char == "'":
            return self.literal_string()
        if char == "[":
            return self.array()
        if char == "{":
            return self.inline_table()
        for word, result in (("true", True), ("false", False)):
            if self.text.startswith(word, self.pos):
                self.pos += len(word)
                return result
        match = DATETIME.match(self.text, self.pos)
        if match:
            self.pos = match.end()
            return match.group(0)
        match = NUMBER.match(self.text, self.pos)
        if match:
            self.pos = match.end()
            try:
                return _number(match.group(0))
            except ValueError:  # underscores only after a prefix, "0x_"
                self.error("not a number")
        self.error("cannot read the value %r" % self.text[self.pos:self.pos + 20])

    def basic_string(self):
        self.pos += 1
        out = []
        while True:
            if self.pos >= len(self.text) or self.text[self.pos] == "\n":
                self.error("unterminated string")
            char = self.text[self.pos]
            if char == '"':
                self.pos += 1
                return "".join(out)
            if char == "\\":
                out.append(self.escape())
            else:
                out.append(char)
                self.pos += 1

    def escape(self):
        code = self.text[self.pos + 1:self.pos + 2]
        if code in ESCAPES:
            self.pos += 2
            return ESCAPES[code]
        if code in ("u", "U"):
            width = 4 if code == "u" else 8
            char = _unicode_scalar(self.text[self.pos + 2:self.pos + 2 + width], width)
            if char is None:
                self.error("bad unicode escape (%d hex digits of a Unicode scalar value expected)" % width)
            self.pos += 2 + width
            return char
        self.error("bad escape \\%s" % code)

    def literal_string(self):
        end = self.text.find("'", self.pos + 1)
        newline = self.text.find("\n", self.pos + 1)
        if end < 0 or (0 <= newline < end):
            self.error("unterminated string")
        value = self.text[self.pos + 1:end]
        self.pos = end + 1
        return value

    def multiline_string(self, quote):
        start = self.pos + 3
        end = self.text.find(quote, start)
        if end < 0:
            self.error("unterminated multi-line string")
        while self.text.startswith(quote[0], end + 3):  # up to two quotes may end the content
            end += 1
        raw = self.text[start:end]
        self.pos = end + 3
        if raw.startswith("\n"):
            raw = raw[1:]
        if quote == "'''":
            return raw
        raw = re.sub(r"\\[ \t]*\n\s*", "", raw)  # line-ending backslash
        try:
            return re.sub(r"\\(u[0-9A-Fa-f]{4}|U[0-9A-Fa-f]{8}|.)", _unescape, raw)
        except ValueError as exc:  # an escape naming no character
            self.error(str(exc))

    def array(self):
        self.pos += 1
        items = []
        while True:
            self.skip_blank(newlines=True)
            if self.peek() == "]":
                self.pos += 1
                return items
            items.append(self.value())
            self.skip_blank(newlines=True)
            if self.peek() == ",":
                self.pos += 1
            elif self.peek() != "]":
                self.error("expected ',' or ']' in an array")

    def inline_table(self):
        self.pos += 1
        table = {}
        self.skip_blank()
        if self.peek() == "}":
            self.pos += 1
            return table
        while True:
            path = self.key_path("=")
            value = self.value()
            target = table
            for key in path[:-1]:
                target = target.setdefault(key, {})
            target[path[-1]] = value
            self.skip_blank()
            if self.peek() == "}":
                self.pos += 1
                return table
            if self.peek() != ",":
                self.error("expected ',' or '}' in an inline table")
            self.pos += 1
            self.skip_blank()


def _unicode_scalar(digits, width):
    """The character WIDTH hex digits name, or None where TOML refuses them (not hex, a surrogate, past U+10FFFF)."""
    if len(digits) != width or not re.match(r"[0-9A-Fa-f]+$", digits):
        return None
    value = int(digits, 16)
    if 0xD800 <= value <= 0xDFFF or value > 0x10FFFF:
        return None
    return chr(value)


def _unescape(match):
    code = match.group(1)
    if code[0] in "uU":
        char = _unicode_scalar(code[1:], len(code) - 1)
        if char is None:
            raise ValueError("bad unicode escape \\%s" % code)
        return char
    if code not in ESCAPES:
        raise ValueError("bad escape \\%s" % code)
    return ESCAPES[code]


def _number(text):
    clean = text.replace("_", "")
    lowered = clean.lower().lstrip("+-")
    if lowered in ("inf", "nan"):
        return float(clean)
    for prefix, base in (("0x", 16), ("0o", 8), ("0b", 2)):
        if lowered.startswith(prefix):
            return int(clean.replace(prefix, "", 1), base)
    if any(c in clean for c in ".eE"):
        return float(clean)
    return int(clean)
