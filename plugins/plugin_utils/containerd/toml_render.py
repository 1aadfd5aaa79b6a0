# -*- coding: utf-8 -*-
# Copyright: gpunode.nvidia contributors
# Apache License 2.0
"""TOML text splicing for the containerd editor (controller side), beside toml_layout.py.

toml_layout.py finds where things are in a file's text; this module writes values, keys and tables into
that text in the style of the lines around them (render_value, table insertion), and holds the small
helpers on parsed TOML data the planner shares (get_path, set_path, pruned, comparable)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import datetime
import math
import re


def get_path(data, path, default=None):
    for key in path:
        if not isinstance(data, dict) or key not in data:
            return default
        data = data[key]
    return data


def set_path(data, path, value):
    for key in path[:-1]:
        data = data.setdefault(key, {})
    data[path[-1]] = value


def pruned(data):
    """Data without empty tables: a table that only existed to hold ours is no loss."""
    if not isinstance(data, dict):
        return data
    kept = dict((k, pruned(v)) for k, v in data.items())
    return dict((k, v) for k, v in kept.items() if v != {})


def comparable(data):
    """Data where NaN equals NaN (TOML allows nan; nan != nan would refuse a correct edit)."""
    if isinstance(data, dict):
        return dict((k, comparable(v)) for k, v in data.items())
    if isinstance(data, list):
        return [comparable(v) for v in data]
    if isinstance(data, float) and math.isnan(data):
        return ("nan",)
    return data


def render_value(value, old_text=None):
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return repr(value)
    if isinstance(value, str):
        if old_text and old_text.startswith("'") and not old_text.startswith("'''") and _literal_ok(value):
            return "'%s'" % value
        return _basic_string(value)
    if isinstance(value, datetime.datetime):
        return value.isoformat()
    if isinstance(value, (datetime.date, datetime.time)):
        return value.isoformat()
    if isinstance(value, list):
        return "[" + ", ".join(render_value(v) for v in value) + "]"
    if isinstance(value, dict):
        if not value:
            return "{}"
        return "{ " + ", ".join("%s = %s" % (render_key(k), render_value(v)) for k, v in value.items()) + " }"
    raise TypeError("cannot render %r as TOML" % (value,))


def _literal_ok(value):
    return not re.search(r"['\x00-\x08\x0a-\x1f\x7f]", value)


_ESCAPES = {'"': '\\"', "\\": "\\\\", "\b": "\\b", "\t": "\\t", "\n": "\\n", "\f": "\\f", "\r": "\\r"}


def _basic_string(value):
    out = []
    for char in value:
        if char in _ESCAPES:
            out.append(_ESCAPES[char])
        elif ord(char) < 0x20 or ord(char) == 0x7f:
            out.append("\\u%04x" % ord(char))
        else:
            out.append(char)
    return '"%s"' % "".join(out)


def render_key(key, quote='"'):
    if re.match(r"^[A-Za-z0-9_-]+$", key):
        return key
    if quote == "'" and _literal_ok(key):
        return "'%s'" % key
    return _basic_string(key)


def render_path(path, quote):
    return ".".join(render_key(k, quote) for k in path)


def replace_value(text, entry, value):
    old = text[entry.value_start:entry.value_end]
    return text[:entry.value_start] + render_value(value, old) + text[entry.value_end:]


def render_keys(prefix, table, indent, quote):
    """`a.b = v` lines for every leaf of `table` (empty tables as `x = {}`)."""
    return "".join("%s%s = %s\n" % (indent, render_path(prefix + key_path, quote), render_value(value))
                   for key_path, value in leaves(table))


def insert_dotted(text, layout, dotted, table_path, table, comment=None):
    """Add `table`'s leaves as dotted keys beside the last dotted entry that defines its ancestor."""
    last = dotted[-1]
    prefix = table_path[len(last.table):]
    block = render_keys(prefix, table, last.indent, layout.quote_char())
    return insert_block(text, last.end, ("%s# %s\n" % (last.indent, comment) if comment else "") + block)


def defining_ancestor(layout, table_path):
    """('header', path, entry) or ('dotted', path, entries) of the deepest ancestor defined explicitly."""
    for size in range(len(table_path) - 1, 0, -1):
        ancestor = table_path[:size]
        if layout.header(ancestor) is not None:
            return "header", ancestor, layout.header(ancestor)
        dotted = layout.dotted_entries(ancestor)
        if dotted:
            return "dotted", ancestor, dotted
    return None


def headers_under(layout, table_path):
    return [e for e in layout.entries if e.is_header and e.path[:len(table_path)] == table_path]


def insert_block(text, offset, block):
    if offset > 0 and not text[:offset].endswith("\n"):
        block = "\n" + block
    return text[:offset] + block + text[offset:]


def insert_table(text, layout, path, table, after_path=None, comment=None):
    """Insert `[path]` with `table` (and its sub-tables) where a person would put it."""
    step = layout.indent_step()
    blank = blank_line_style(layout)
    descendants = headers_under(layout, path)
    if after_path is not None and layout.subtree_end(after_path) is not None:
        anchor = layout.header(after_path) or headers_under(layout, after_path)[0]
        offset = layout.subtree_end(after_path)
        indent = anchor.indent + step * max(0, len(path) - len(anchor.path))
    elif descendants:
        # A parent table declared just before its first sub-table keeps the file readable.
        first = descendants[0]
        offset = first.start
        ancestor = deepest_existing_ancestor(layout, path)
        indent = ancestor.indent + step if ancestor is not None else first.indent
        block = render_table(path, table, indent, step, layout.quote_char(), blank, comment)
        return text[:offset] + block.lstrip("\n") + ("\n" if blank else "") + text[offset:]
    else:
        ancestor = deepest_existing_ancestor(layout, path)
        if ancestor is not None:
            offset = layout.subtree_end(ancestor.path)
            indent = ancestor.indent + step
        else:
            offset, indent = len(text), ""
    block = render_table(path, table, indent, step, layout.quote_char(), blank, comment)
    return insert_block(text, offset, block)


def deepest_existing_ancestor(layout, path):
    for size in range(len(path) - 1, 0, -1):
        header = layout.header(path[:size])
        if header is not None:
            return header
    return None


def blank_line_style(layout):
    """True when the file separates tables with a blank line."""
    headers = [e for e in layout.entries if e.is_header]
    text = layout.text
    separated = sum(1 for h in headers if h.start >= 2 and text[:h.start].endswith("\n\n"))
    return bool(headers) and separated * 2 >= len(headers)


def render_table(path, table, indent, step, quote, blank, comment=None):
    lines = ["\n"] if blank else []
    if comment:
        lines.append("%s# %s\n" % (indent, comment))
    lines.append("%s[%s]\n" % (indent, render_path(path, quote)))
    inner = indent + step
    for key, value in table.items():
        if not isinstance(value, dict) or not value:
            lines.append("%s%s = %s\n" % (inner, render_key(key, quote), render_value(value)))
    for key, value in table.items():
        if isinstance(value, dict) and value:
            lines.append(render_table(path + (key,), value, inner, step, quote, blank))
    return "".join(lines)


def leaves(data, prefix=()):
    for key, value in data.items():
        if isinstance(value, dict) and value:
            yield from leaves(value, prefix + (key,))
        else:
            yield prefix + (key,), value
