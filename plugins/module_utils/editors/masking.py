# -*- coding: utf-8 -*-
# Copyright: gpunode.nvidia contributors
# Apache License 2.0
"""Hide credential values before they reach a diff, a message, a log or a returned value.

Runs on managed nodes and on the controller: standard library only.
Registry credentials live in the very files this collection edits
(containerd's registry auth tables, daemon.json, CRI-O drop-ins), so every
output path goes through this one module:

- mask_text(): TOML or JSON text (whole documents or messages quoting them);
- mask_data(): returned structures (every string in them also goes through mask_text);
- mask_value(): one value known by its key path (the effective-config guard).

Rules, the same everywhere:

- A credential key is matched by name after unescaping (JSON `\\u0070assword`,
  TOML quoted keys with escapes), case-insensitively, on any component of its
  dotted path or TOML table header (`[...registry.configs."r".auth]` masks
  every value of that table).
- Its value is replaced by "********" whatever its type: string, multi-line
  string, array (multi-line too), inline table, JSON object. A value that spans
  lines becomes one line; everything else keeps its bytes.
- The password of a URL (`https://user:password@host`) is masked anywhere.

Text is scanned once, left to right, without recursion: no nesting depth makes it fail.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

MASK = "********"
_QUOTED_MASK = '"' + MASK + '"'
_MAX_DATA_DEPTH = 200

# Key names whose values are credentials, matched on the whole (unescaped) name.
SECRET_KEY_RE = re.compile(
    r"(?i)^(?:auths?|password|passwd|secret|token|credentials?|identitytoken|identity[-_]token|"
    r"registrytoken|registry[-_]token|client[-_]secret|api[-_]?key|private[-_]?key|"
    r".*[-_](?:token|password|passwd|secret|credentials?))$"
)
# Text without any of these cannot hold a credential key (escaped names hold a backslash).
_MAYBE_SECRET_RE = re.compile(r"(?i)auth|pass|secret|token|credential|key|\\|://")
_URL_PASSWORD_RE = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://[^\s/@:\"'<>]*:)[^\s/@\"'<>]+@")
_BARE_KEY_RE = re.compile(r"[A-Za-z0-9_-]+")
_ESCAPE_RE = re.compile(r"\\(u[0-9a-fA-F]{4}|U[0-9a-fA-F]{8}|x[0-9a-fA-F]{2}|.)", re.S)
_SIMPLE_ESCAPES = {"b": "\b", "t": "\t", "n": "\n", "f": "\f", "r": "\r", "e": "\x1b"}
_BLANKS = " \t"
_SPACE = " \t\r\n\ufeff"


# --- key names -----------------------------------------------------------------

def unescape(body):
    """The characters a JSON or TOML basic string body stands for (bad escapes dropped)."""
    def replace(match):
        code = match.group(1)
        if len(code) == 1:
            return _SIMPLE_ESCAPES.get(code, code)
        try:
            return chr(int(code[1:], 16))
        except (ValueError, OverflowError):
            return ""
    return _ESCAPE_RE.sub(replace, body)


def is_secret_name(name):
    """True when one key name (already unquoted) is a credential key."""
    return bool(SECRET_KEY_RE.match(str(name).strip()))


def is_secret_path(parts):
    """True when any component of a key path is a credential key."""
    return any(is_secret_name(part) for part in parts)


def is_secret_key(key):
    """True for a key as written (bare, quoted with escapes, or dotted) that holds a credential."""
    end, parts = _key_at(str(key).strip(), 0)
    if end is None:
        return is_secret_name(key)
    return is_secret_path(parts)


# --- text ----------------------------------------------------------------------

def _skip(text, pos, chars):
    while pos < len(text) and text[pos] in chars:
        pos += 1
    return pos


def _string_end(text, start):
    """End of the one-line string opening at start, or None when it does not close on its line."""
    quote, pos = text[start], start + 1
    while pos < len(text):
        char = text[pos]
        if char == "\\" and quote == '"':
            pos += 2
            continue
        if char == quote:
            return pos + 1
        if char in "\r\n":
            return None
        pos += 1
    return None


def _multiline_end(text, start):
    """End of the TOML multi-line string (\"\"\" or ''') opening at start (end of text when unclosed)."""
    delimiter, pos = text[start:start + 3], start + 3
    while pos < len(text):
        if text[pos] == "\\" and delimiter == '"""':
            pos += 2
            continue
        if text.startswith(delimiter, pos):
            end = pos + 3
            while end < len(text) and text[end] == delimiter[0] and end - pos < 5:
                end += 1  # up to two quotes just before the delimiter belong to the string
            return end
        pos += 1
    return len(text)


def _is_multiline(text, pos):
    return text.startswith('"""', pos) or text.startswith("'''", pos)


def _line_end(text, pos):
    while pos < len(text) and text[pos] not in "\r\n":
        pos += 1
    return pos


def _bracket_end(text, start):
    """End of the array/object/inline table opening at start (end of text when unbalanced)."""
    depth, pos = 0, start
    while pos < len(text):
        char = text[pos]
        if _is_multiline(text, pos):
            pos = _multiline_end(text, pos)
            continue
        if char in "\"'":
            end = _string_end(text, pos)
            pos = end if end is not None else pos + 1
            continue
        if char == "#":
            pos = _line_end(text, pos)
            continue
        if char in "[{":
            depth += 1
        elif char in "]}":
            depth -= 1
            if depth == 0:
                return pos + 1
        pos += 1
    return len(text)


def _value_end(text, start):
    """End of the value starting at start: a string, an array/table, or a bare scalar."""
    if start >= len(text):
        return start
    if _is_multiline(text, start):
        return _multiline_end(text, start)
    char = text[start]
    if char in "\"'":
        end = _string_end(text, start)
        return end if end is not None else _line_end(text, start)
    if char in "[{":
        return _bracket_end(text, start)
    end = start
    while end < len(text) and text[end] not in ",]}#\r\n":
        end += 1
    while end > start and text[end - 1] in _BLANKS:
        end -= 1
    return end


def _key_part_at(text, pos):
    """(end, name) of one bare or quoted key component at pos, or (None, None)."""
    if pos >= len(text) or _is_multiline(text, pos):
        return None, None
    if text[pos] in "\"'":
        end = _string_end(text, pos)
        if end is None:
            return None, None
        body = text[pos + 1:end - 1]
        return end, unescape(body) if text[pos] == '"' else body
    match = _BARE_KEY_RE.match(text, pos)
    if not match:
        return None, None
    return match.end(), match.group(0)


def _key_at(text, pos):
    """(end, [names]) of a dotted key at pos, or (None, None)."""
    end, name = _key_part_at(text, pos)
    if end is None:
        return None, None
    parts = [name]
    while True:
        dot = _skip(text, end, _BLANKS)
        if dot >= len(text) or text[dot] != ".":
            return end, parts
        next_end, name = _key_part_at(text, _skip(text, dot + 1, _BLANKS))
        if next_end is None:
            return end, parts
        end = next_end
        parts.append(name)


def _table_header_at(text, pos):
    """(end, [names]) of a TOML `[table]` or `[[array.of.tables]]` header at pos, or (None, None)."""
    double = text.startswith("[[", pos)
    key_end, parts = _key_at(text, _skip(text, pos + (2 if double else 1), _BLANKS))
    if key_end is None:
        return None, None
    close = _skip(text, key_end, _BLANKS)
    closer = "]]" if double else "]"
    if not text.startswith(closer, close):
        return None, None
    return close + len(closer), parts


def mask_text(text, _comments=True):
    """TOML or JSON text (or a message quoting it) with every credential value masked."""
    if not text or not isinstance(text, str) or not _MAYBE_SECRET_RE.search(text):
        return text
    pieces, copied, pos = [], 0, 0
    open_brackets = 0        # arrays/tables/objects entered as values (not TOML headers)
    in_secret_table = False  # the current TOML [table] has a credential key in its name
    line_start = True
    while pos < len(text):
        char = text[pos]
        if char in _SPACE:
            line_start = line_start or char in "\r\n"
            pos += 1
            continue
        at_line_start, line_start = line_start, False
        if char == "#" and _comments:
            # A comment opens no bracket or table, but a commented-out setting is masked too.
            end = _line_end(text, pos)
            comment = mask_text(text[pos + 1:end], _comments=False)
            if comment != text[pos + 1:end]:
                pieces.extend((text[copied:pos + 1], comment))
                copied = end
            pos = end
            continue
        if char == "[" and at_line_start and open_brackets == 0:
            header_end, parts = _table_header_at(text, pos)
            if header_end is not None:
                in_secret_table = is_secret_path(parts)
                pos = header_end
                continue
        if char in "[{":
            open_brackets += 1
            pos += 1
            continue
        if char in "]}":
            open_brackets = max(0, open_brackets - 1)
            pos += 1
            continue
        if _is_multiline(text, pos):
            pos = _multiline_end(text, pos)
            continue
        key_end, parts = _key_at(text, pos)
        if key_end is None:
            if char in "\"'":
                end = _string_end(text, pos)
                pos = end if end is not None else pos + 1
            else:
                pos += 1
            continue
        separator = _skip(text, key_end, _BLANKS)
        if separator >= len(text) or text[separator] not in "=:":
            pos = key_end
            continue
        assignment = text[separator] == "="
        value_start = _skip(text, separator + 1, _BLANKS if assignment else _SPACE)
        secret = is_secret_path(parts) or (assignment and in_secret_table and open_brackets == 0)
        value_end = _value_end(text, value_start) if secret else value_start
        if value_end > value_start:
            pieces.extend((text[copied:value_start], _QUOTED_MASK))
            copied = value_end
        pos = max(value_end, separator + 1)
    pieces.append(text[copied:])
    return _URL_PASSWORD_RE.sub(r"\g<1>" + MASK + "@", "".join(pieces))


# --- data ----------------------------------------------------------------------

def mask_data(value, _depth=0):
    """A copy of a returned structure: credential values masked whatever their type,
    every string masked as text (it may quote a config file or a URL with a password)."""
    if _depth > _MAX_DATA_DEPTH:
        return MASK
    if isinstance(value, dict):
        return dict((key, MASK if is_secret_name(key) else mask_data(item, _depth + 1))
                    for key, item in value.items())
    if isinstance(value, (list, tuple)):
        return [mask_data(item, _depth + 1) for item in value]
    if isinstance(value, str):
        return mask_text(value)
    return value


def mask_value(path, value):
    """A value found at a key path (a tuple of names): masked when the path names a credential."""
    return MASK if is_secret_path(path) else mask_data(value)
