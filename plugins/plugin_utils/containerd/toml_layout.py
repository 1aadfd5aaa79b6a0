# -*- coding: utf-8 -*-
# Copyright: gpunode.nvidia contributors
# Apache License 2.0
"""Where each table and key of a TOML document sits in its text.

Controller-side. TOML libraries that round-trip a document still re-indent
or re-space what they add (nested tables, keys appended to indented
sections), and a containerd config is read by people: we splice new lines
into the original text instead, and use this map to know where.

The scanner only locates entries; the meaning of the result is always
checked by re-parsing it (see containerd_toml.py), so a scanning mistake
cannot silently change a config.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

try:
    import tomllib
except ImportError:  # pragma: no cover - older controllers
    tomllib = None
try:
    import tomlkit
except ImportError:  # containerd_toml.require_tomlkit() reports it before any scan
    tomlkit = None

_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")
_LOCAL_DATE = re.compile(r"\d{4}-\d{2}-\d{2}$")
_TIME_AFTER_SPACE = re.compile(r" \d{2}:\d{2}")
# Arrays and inline tables nested deeper than this are refused before any parser recurses into them.
MAX_NESTING = 32
_NESTING_CHARS = re.compile(r"[\n#\"'\[\]{}]")


class Entry(object):
    """One table header or key/value line (a value may span several lines)."""

    __slots__ = ("kind", "path", "start", "end", "line", "indent", "value_start", "value_end", "table")

    def __init__(self, kind, path, start, end, line, indent, value_start=None, value_end=None, table=None):
        self.kind = kind  # "table", "array_table" or "key"
        self.path = path  # absolute path: table path for headers, table + key path for keys
        self.start = start  # offset of the first character of the line
        self.end = end  # offset just past the line's newline
        self.line = line  # 1-based line number
        self.indent = indent
        self.value_start = value_start
        self.value_end = value_end
        self.table = table  # for keys: the path of the [table] section the line sits in

    @property
    def is_header(self):
        return self.kind != "key"

    def column(self):
        """1-based column of the value (keys) or of the opening bracket (headers)."""
        return (self.value_start if self.value_start is not None else self.start + len(self.indent)) - self.start + 1

    def __repr__(self):
        return "Entry(%s %r line %d)" % (self.kind, self.path, self.line)


class Layout(object):
    """The entries of a document, in order, with lookups used by the editor."""

    def __init__(self, text):
        self.text = text
        self.entries = _scan(text)

    def header(self, path):
        for entry in self.entries:
            if entry.kind == "table" and entry.path == path:
                return entry
        return None

    def key(self, path):
        for entry in self.entries:
            if entry.kind == "key" and entry.path == path:
                return entry
        return None

    def under(self, path):
        """Entries whose path lies at or below `path`."""
        return [e for e in self.entries if e.path[:len(path)] == path]

    def inline_ancestor(self, path):
        """The key entry whose (inline) value holds `path`, if a proper prefix of it is a key."""
        for entry in self.entries:
            if entry.kind == "key" and len(entry.path) < len(path) and path[:len(entry.path)] == entry.path:
                return entry
        return None

    def array_ancestor(self, path):
        """An [[array of tables]] header at or above `path`, if any."""
        for entry in self.entries:
            if entry.kind == "array_table" and path[:len(entry.path)] == entry.path:
                return entry
        return None

    def dotted_entries(self, table):
        """Key entries that define `table` through a dotted key (in an ancestor's section)."""
        return [e for e in self.entries
                if e.kind == "key" and e.path[:len(table)] == table and len(e.table) < len(table)
                and len(e.path) > len(table)]

    def section_end(self, header):
        """Offset past the last entry of a header's own section (its keys), or past the header."""
        keys = self.section_keys(header)
        return keys[-1].end if keys else header.end

    def section_keys(self, header):
        """Key entries that belong to a header's own section (up to the next header)."""
        keys = []
        for entry in self.entries[self.entries.index(header) + 1:]:
            if entry.is_header:
                break
            keys.append(entry)
        return keys

    def subtree_end(self, path):
        """Offset just past the last entry of the contiguous run of tables under `path`.

        None when no header under `path` exists.
        """
        end = None
        inside = False
        for entry in self.entries:
            if entry.is_header:
                under = entry.path[:len(path)] == path
                if under:
                    inside = True
                elif inside:
                    break
            if inside:
                end = entry.end
        return end

    def indent_step(self):
        """Indentation added per nesting level of headers (0 for flat files)."""
        headers = [e for e in self.entries if e.is_header]
        for parent, child in zip(headers, headers[1:]):
            if child.path[:len(parent.path)] == parent.path and len(child.indent) > len(parent.indent):
                return child.indent[len(parent.indent):]
        if any(e.indent for e in self.entries):
            return "  "
        return ""

    def quote_char(self):
        """The quote style this file uses for quoted keys in headers."""
        for entry in self.entries:
            if entry.is_header:
                header_text = self.text[entry.start:entry.end]
                if "'" in header_text and '"' not in header_text:
                    return "'"
                if '"' in header_text:
                    return '"'
        return '"'


class ScanError(ValueError):
    pass


def nesting_too_deep(text):
    """(line, column) where arrays/inline tables nest deeper than MAX_NESTING, else None.

    An iterative pass (strings and comments skipped), so that no recursive parser ever sees such input.
    """
    if text.count("[") + text.count("{") <= MAX_NESTING:
        return None
    depth, line, line_start, i, length = 0, 1, 0, 0, len(text)
    while i < length:
        match = _NESTING_CHARS.search(text, i)
        if match is None:
            break
        i = match.start()
        char = text[i]
        if char == "\n":
            line, line_start = line + 1, i + 1
        elif char == "#":
            newline = text.find("\n", i)
            i = length if newline < 0 else newline
            continue
        elif char in "\"'":
            quote = text[i:i + 3] if text.startswith(char * 3, i) else char
            end = _string_close(text, i, quote)
            line += text.count("\n", i, end)
            if "\n" in text[i:end]:
                line_start = text.rfind("\n", i, end) + 1
            i = end
            continue
        elif char in "[{":
            depth += 1
            if depth > MAX_NESTING:
                return line, i - line_start + 1
        elif char in "]}":
            depth = max(0, depth - 1)
        i += 1
    return None


def _string_close(text, pos, quote):
    """Offset past the string opened by `quote` at pos (or the end of text when unterminated)."""
    i = pos + len(quote)
    while i < len(text):
        if quote[0] == '"' and text[i] == "\\":
            i += 2
            continue
        if text.startswith(quote, i):
            end = i + len(quote)
            while len(quote) == 3 and text.startswith(quote[0], end) and end - i < 5:
                end += 1
            return end
        if len(quote) == 1 and text[i] == "\n":
            return i
        i += 1
    return len(text)


def _scan(text):
    entries = []
    table = ()
    pos = 0
    line = 1
    length = len(text)
    while pos < length:
        line_start = pos
        i = _skip_blanks(text, pos)
        indent = text[line_start:i]
        if i >= length:
            break
        char = text[i]
        if char in "\r\n" or char == "#":
            pos = _end_of_line(text, i)
            line += 1
            continue
        if char == "[":
            array = text.startswith("[[", i)
            path, i = _parse_key(text, i + (2 if array else 1))
            i = _skip_blanks(text, i)
            closing = "]]" if array else "]"
            if not text.startswith(closing, i):
                raise ScanError("unterminated table header at line %d" % line)
            table = path
            end = _end_of_line(text, i + len(closing))
            entries.append(Entry("array_table" if array else "table", path, line_start, end, line, indent))
            line += 1
            pos = end
            continue
        key, i = _parse_key(text, i)
        i = _skip_blanks(text, i)
        if i >= length or text[i] != "=":
            raise ScanError("expected '=' after key at line %d" % line)
        value_start = _skip_blanks(text, i + 1)
        value_end = _skip_value(text, value_start)
        end = _end_of_line(text, value_end)
        entries.append(Entry("key", table + key, line_start, end, line, indent, value_start, value_end, table))
        line += text.count("\n", line_start, end)
        pos = end
    return entries


def _skip_blanks(text, pos):
    while pos < len(text) and text[pos] in " \t":
        pos += 1
    return pos


def _end_of_line(text, pos):
    newline = text.find("\n", pos)
    return len(text) if newline < 0 else newline + 1


def _parse_key(text, pos):
    parts = []
    while True:
        pos = _skip_blanks(text, pos)
        char = text[pos:pos + 1]
        if char == '"':
            end = _string_end(text, pos, '"')
            parts.append(_decode_string(text[pos:end]))
        elif char == "'":
            end = text.index("'", pos + 1) + 1
            parts.append(text[pos + 1:end - 1])
        else:
            match = _BARE_KEY.match(text, pos)
            if not match:
                raise ScanError("invalid key at offset %d" % pos)
            end = match.end()
            parts.append(match.group(0))
        pos = _skip_blanks(text, end)
        if text[pos:pos + 1] != ".":
            return tuple(parts), pos
        pos += 1


def _decode_string(literal):
    if "\\" not in literal:
        return literal[1:-1]
    if tomllib is not None:
        return tomllib.loads("k = " + literal)["k"]
    return tomlkit.parse("k = " + literal)["k"].unwrap()  # pragma: no cover


def _string_end(text, pos, quote):
    """Offset past a single-line string starting at pos."""
    i = pos + 1
    while i < len(text):
        if text[i] == "\\" and quote == '"':
            i += 2
            continue
        if text[i] == quote:
            return i + 1
        i += 1
    raise ScanError("unterminated string at offset %d" % pos)


def _skip_value(text, pos):
    """Offset past the value starting at pos (strings, arrays, inline tables, scalars)."""
    for triple in ('"""', "'''"):
        if text.startswith(triple, pos):
            end = pos + 3
            while True:
                found = text.find(triple, end)
                if found < 0:
                    raise ScanError("unterminated multi-line string at offset %d" % pos)
                if triple == '"""' and _escaped(text, found):
                    end = found + 1
                    continue
                end = found + 3
                while text.startswith(triple[0], end):  # up to two quotes may close the string
                    end += 1
                return end
    char = text[pos:pos + 1]
    if char in "\"'":
        return _string_end(text, pos, char)
    if char in "[{":
        return _skip_container(text, pos)
    end = _scalar_end(text, pos)
    if _LOCAL_DATE.match(text, pos, end) and _TIME_AFTER_SPACE.match(text, end):
        end = _scalar_end(text, end + 1)  # a date-time written with a space: 1979-05-27 07:32:00
    return end


def _scalar_end(text, pos):
    end = pos
    while end < len(text) and text[end] not in " \t\r\n#,]}":
        end += 1
    return end


def _escaped(text, pos):
    backslashes = 0
    while pos - backslashes - 1 >= 0 and text[pos - backslashes - 1] == "\\":
        backslashes += 1
    return backslashes % 2 == 1


def _skip_container(text, pos):
    closing = {"[": "]", "{": "}"}[text[pos]]
    i = pos + 1
    while i < len(text):
        char = text[i]
        if char == closing:
            return i + 1
        if char == "#":
            i = _end_of_line(text, i)
        elif char in " \t\r\n,":
            i += 1
        elif char == "=" or char == ".":
            i += 1
        elif text[i:i + 1] in "[{\"'":
            i = _skip_value(text, i)
        else:
            match = _BARE_KEY.match(text, i)
            following = match.end() if match else _skip_value(text, i)
            i = following if following > i else i + 1
    raise ScanError("unterminated array or inline table at offset %d" % pos)
