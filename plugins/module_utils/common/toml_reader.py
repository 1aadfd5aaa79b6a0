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
nested, trailing commas), inline tables and ``[[arrays.of.tables]]``. Dates
and times are checked and kept as their text. It refuses what TOML 1.0 refuses
(as containerd's and CRI-O's parsers do): a key or table defined twice, a table
extended after it was written inline, leading zeros, misplaced underscores,
escapes TOML 1.0 does not name.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import datetime
import re

try:  # Python 3.11+
    import tomllib
except ImportError:  # pragma: no cover - depends on the node's Python
    tomllib = None

BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")
# TOML 1.0's numbers: no leading zero, an underscore only between two digits, no sign before 0x, 0o or 0b.
NUMBER = re.compile(r"0x[0-9A-Fa-f](?:_?[0-9A-Fa-f])*|0o[0-7](?:_?[0-7])*|0b[01](?:_?[01])*|[+-]?(?:inf|nan)"
                    r"|[+-]?(?:0|[1-9](?:_?\d)*)(?:\.\d(?:_?\d)*)?(?:[eE][+-]?\d(?:_?\d)*)?")
NUMBER_CONTINUES = re.compile(r"[\w.]")
DATETIME = re.compile(r"(\d{4})-(\d{2})-(\d{2})(?:[Tt ](\d{2}):(\d{2}):(\d{2})(?:\.\d+)?(?:[Zz]|[+-](\d{2}):(\d{2}))?)?"
                      r"|(\d{2}):(\d{2}):(\d{2})(?:\.\d+)?")
# TOML allows no control character but tab and the line end (LF, or CR LF) anywhere: not in comments, strings or keys.
CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")
# TOML 1.0's escapes: containerd's and CRI-O's parsers refuse TOML 1.1's \e and \x.
ESCAPES = {"b": "\b", "t": "\t", "n": "\n", "f": "\f", "r": "\r", '"': '"', "\\": "\\"}
LINE_ENDING_BACKSLASH = re.compile(r"\\[ \t]*\n[ \t\n]*")
EXPLICIT, FROZEN = "defined by a header or a dotted key", "written whole"


class TomlError(ValueError):
    """A file the reader cannot parse; ``line`` is 1-based (None when unknown)."""

    def __init__(self, message, line=None):
        self.message = message
        self.line = line
        super(TomlError, self).__init__("line %s: %s" % (line, message) if line else message)


class TomlDocument(object):
    """data: the tables; lines: {key path tuple: line} (in an array of tables, the first table's line);
    reader: 'tomllib' or 'lines' (which parser gave the values)."""

    def __init__(self, data, lines, reader):
        self.data = data
        self.lines = lines
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
    data, lines = _Reader(text).parse()
    reader = "lines"
    if use_tomllib and tomllib is not None:
        try:
            data = tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            raise TomlError(str(exc), _tomllib_line(str(exc)))
        reader = "tomllib"
    return TomlDocument(data, lines, reader)


def _tomllib_line(message):
    match = re.search(r"line (\d+)", message)
    return int(match.group(1)) if match else None


class _Flags(object):
    """What TOML lets a file define again, per key path: a table a [header] or a dotted key defined (EXPLICIT)
    is not defined twice; an inline table or array (FROZEN, with everything in it) is never extended."""

    def __init__(self):
        self.tree = {}
        self.pending = []  # dotted keys' tables: EXPLICIT once the next header starts

    def is_set(self, path, flag):
        nodes = self.tree
        for key in path[:-1]:
            if key not in nodes:
                return False
            if flag in nodes[key]["recursive"]:
                return True
            nodes = nodes[key]["nested"]
        node = nodes.get(path[-1]) if path else None
        return bool(node) and (flag in node["flags"] or flag in node["recursive"])

    def set(self, path, flag, recursive=False):
        nodes, node = self.tree, None
        for key in path:
            node = nodes.setdefault(key, {"flags": set(), "recursive": set(), "nested": {}})
            nodes = node["nested"]
        node["recursive" if recursive else "flags"].add(flag)

    def forget(self, path):
        """A new table of an array of tables starts with nothing defined below it."""
        nodes = self.tree
        for key in path[:-1]:
            if key not in nodes:
                return
            nodes = nodes[key]["nested"]
        nodes.pop(path[-1], None)

    def settle(self):
        for path in self.pending:
            self.set(path, EXPLICIT)
        self.pending = []


class _Reader(object):
    """A character scanner over the whole text; it tracks the line number as it goes."""

    def __init__(self, text):
        self.text = text.replace("\r\n", "\n")
        self.pos = 0
        self.data = {}
        self.lines = {}
        self.flags = _Flags()
        self._line_at = (0, 1)  # (position, its line): counting from the last place asked keeps reading linear

    # -- helpers --------------------------------------------------------------------
    @property
    def line(self):
        start, line = self._line_at if self.pos >= self._line_at[0] else (0, 1)
        line += self.text.count("\n", start, self.pos)
        self._line_at = (self.pos, line)
        return line

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
        header = ()
        while True:
            self.skip_blank(newlines=True)
            if self.pos >= len(self.text):
                return self.data, self.lines
            line = self.line
            if self.peek(2) == "[[":
                self.pos += 2
                header = self.key_path("]]")
                self.open_array_table(header, line)
            elif self.peek() == "[":
                self.pos += 1
                header = self.key_path("]")
                self.open_table(header, line)
            else:
                path = self.key_path("=")
                self.assign(header, path, self.value(), line)
            self.expect_line_end()

    def open_table(self, path, line):
        self.flags.settle()
        if self.flags.is_set(path, FROZEN):
            self.error("[%s] extends a value written whole above (an inline table or an array)" % _name(path))
        if self.flags.is_set(path, EXPLICIT):
            self.error("table [%s] is defined twice" % _name(path))
        self.flags.set(path, EXPLICIT)
        self.nest(path)
        self.lines.setdefault(path, line)

    def open_array_table(self, path, line):
        self.flags.settle()
        if self.flags.is_set(path, FROZEN):
            self.error("[[%s]] extends a value written whole above (an inline table or an array)" % _name(path))
        self.flags.forget(path)
        self.flags.set(path, EXPLICIT)
        tables = self.nest(path[:-1]).setdefault(path[-1], [])
        if not isinstance(tables, list):
            self.error("[[%s]]: %s is defined above as a table or value, not an array of tables"
                       % (_name(path), _name(path)))
        tables.append({})
        self.lines.setdefault(path, line)

    def nest(self, path):
        """The table at PATH, created where missing; in an array of tables, its last table."""
        table = self.data
        for key in path:
            table = table.setdefault(key, {})
            if isinstance(table, list) and table:
                table = table[-1]
            if not isinstance(table, dict):
                self.error("key %s is not a table" % key)
        return table

    def assign(self, header, path, value, line):
        full = header + path
        for depth in range(1, len(path)):
            table = header + path[:depth]
            if self.flags.is_set(table, EXPLICIT):
                self.error("%s: table %s is already defined, so a dotted key cannot add to it"
                           % (_name(full), _name(table)))
            self.flags.pending.append(table)
        if self.flags.is_set(full[:-1], FROZEN):
            self.error("%s extends a value written whole above (an inline table or an array)" % _name(full))
        table = self.nest(full[:-1])
        if path[-1] in table:
            self.error("key %s is defined twice" % _name(full))
        table[path[-1]] = value
        if isinstance(value, (dict, list)):
            self.flags.set(full, FROZEN, recursive=True)
        self.lines.setdefault(full, line)
        for depth in range(1, len(path)):
            self.lines.setdefault(header + path[:depth], line)

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
            if not _valid_datetime(match):
                self.error("not a date or time: %r" % match.group(0))
            self.pos = match.end()
            return match.group(0)
        match = NUMBER.match(self.text, self.pos)
        if match and not NUMBER_CONTINUES.match(self.text, match.end()):
            self.pos = match.end()
            return _number(match.group(0))
        if match:
            self.error("not a TOML number (a leading zero, or an underscore not between two digits): %r"
                       % self.text[self.pos:self.pos + 20].split()[0])
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
        self.error("bad escape \\%s (write a backslash as \\\\)" % code.strip())

    def literal_string(self):
        end = self.text.find("'", self.pos + 1)
        newline = self.text.find("\n", self.pos + 1)
        if end < 0 or (0 <= newline < end):
            self.error("unterminated string")
        value = self.text[self.pos + 1:end]
        self.pos = end + 1
        return value

    def multiline_string(self, quote):
        self.pos += 3
        if self.peek() == "\n":  # a newline right after the opening quotes is not part of the string
            self.pos += 1
        out = []
        while True:
            if self.pos >= len(self.text):
                self.error("unterminated multi-line string")
            if self.text.startswith(quote, self.pos):
                run = len(re.match(quote[0] + "+", self.text[self.pos:self.pos + 6]).group(0))
                if run > 5:
                    self.error("more than two quotes before the end of a multi-line string")
                self.pos += run
                out.append(quote[0] * (run - 3))  # up to two quotes may end the content
                return "".join(out)
            char = self.text[self.pos]
            if quote == '"""' and char == "\\":
                line_end = LINE_ENDING_BACKSLASH.match(self.text, self.pos)
                if line_end:
                    self.pos = line_end.end()
                else:
                    out.append(self.escape())
            else:
                out.append(char)
                self.pos += 1

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
        table, flags = {}, _Flags()
        self.skip_blank()
        if self.peek() == "}":
            self.pos += 1
            return table
        while True:
            path = self.key_path("=")
            value = self.value()
            if flags.is_set(path, FROZEN):
                self.error("%s extends a value written whole in the same inline table" % _name(path))
            target = table
            for key in path[:-1]:
                target = target.setdefault(key, {})
                if not isinstance(target, dict):
                    self.error("key %s is not a table" % key)
            if path[-1] in target:
                self.error("key %s is defined twice in an inline table" % _name(path))
            target[path[-1]] = value
            if isinstance(value, (dict, list)):
                flags.set(path, FROZEN, recursive=True)
            self.skip_blank()
            if self.peek() == "}":
                self.pos += 1
                return table
            if self.peek() != ",":
                self.error("expected ',' or '}' in an inline table (TOML 1.0 writes one on one line)")
            self.pos += 1
            self.skip_blank()


def toml_type(value):
    """How TOML names a parsed value's type, for messages (tomllib's dates and times are objects)."""
    for kind, name in ((bool, "a boolean"), (int, "an integer"), (float, "a float"), (str, "a string"),
                       (list, "an array"), (dict, "a table"), (datetime.datetime, "a date-time"),
                       (datetime.date, "a date"), (datetime.time, "a time")):
        if isinstance(value, kind):
            return name
    return "a %s" % type(value).__name__


def _name(path):
    return ".".join(path)


def _valid_datetime(match):
    """Whether a date, time or date-time names a real moment (no 13th month, 25th hour, 61st minute)."""
    year, month, day, hour, minute, second, off_hour, off_minute, t_hour, t_minute, t_second = (
        None if group is None else int(group) for group in match.groups())
    if year is not None:
        try:
            datetime.date(year, month, day)
        except ValueError:
            return False
    else:
        hour, minute, second = t_hour, t_minute, t_second
    return ((hour is None or (hour < 24 and minute < 60 and second < 60))
            and (off_hour is None or (off_hour < 24 and off_minute < 60)))


def _unicode_scalar(digits, width):
    """The character WIDTH hex digits name, or None where TOML refuses them (not hex, a surrogate, past U+10FFFF)."""
    if len(digits) != width or not re.match(r"[0-9A-Fa-f]+$", digits):
        return None
    value = int(digits, 16)
    if 0xD800 <= value <= 0xDFFF or value > 0x10FFFF:
        return None
    return chr(value)


def _number(text):
    clean = text.replace("_", "")
    lowered = clean.lower().lstrip("+-")
    if lowered in ("inf", "nan"):
        return float(clean)
    for prefix, base in (("0x", 16), ("0o", 8), ("0b", 2)):
        if lowered.startswith(prefix):
            return int(clean[2:], base)
    if any(c in clean for c in ".eE"):
        return float(clean)
    return int(clean)
