# -*- coding: utf-8 -*-
# Copyright: gpunode.nvidia contributors
# Apache License 2.0
"""Edit Docker's daemon.json in place (reading it: common/daemon_json.py; dockerd flags that clash with it:
node/dockerd_flags.py).

Standard library only: this runs on managed nodes.

Edits are splices into the original text, never a re-serialisation: every
byte outside the members that change stays as it was (inline arrays, odd
spacing, escapes, key order, the trailing newline). New members copy the
layout of their neighbours: the same line break and indentation before the
key, the same `:` spacing. A file with no layout to copy (missing, empty,
`{}`) gets two-space indentation.

Removing a member deletes precisely the text that adding it inserted. Two
keys stay behind on purpose after `state=absent`: an emptied `runtimes` object
is kept as `"runtimes": {}`, and a `default-runtime` that named the removed
runtime becomes `"runc"` (dockerd's stock default). On SIGHUP dockerd reloads
only the keys present in the file (seen with 20.10, 26.1 and 28.5): had the
keys been deleted, `systemctl reload docker` would leave the runtime
registered, and still the default, until a full restart. A file that already
had other runtimes, or `"runtimes": {}`, gets its original bytes back.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import re
from collections import OrderedDict

from ansible_collections.gpunode.nvidia.plugins.module_utils.common.daemon_json import (
    BOM, WHITESPACE, get_key, locate, parse_daemon_json, value_at)

DEFAULT_INDENT = "  "
# dockerd refuses these runtime names in daemon.json ("runtime name ... is reserved").
RESERVED_RUNTIME_NAMES = ("runc", "io.containerd.runc.v2", "io.containerd.runtime.v1.linux")
STOCK_RUNTIME = "runc"


# --- layout: copy what the file already does ----------------------------------

def _newline(text):
    return "\r\n" if "\r\n" in text else "\n"


def _line_indent(text, pos):
    line_start = text.rfind("\n", 0, pos) + 1
    line = text[line_start:pos]
    return line[: len(line) - len(line.lstrip(" \t"))]


def detect_indent(text):
    """The file's indentation unit ("  ", "    ", "\\t" ...), or None for a one-line file."""
    body = text.strip(WHITESPACE + BOM)
    if not body or body == "{}":
        return DEFAULT_INDENT
    widths = [line[: len(line) - len(line.lstrip(" \t"))] for line in body.splitlines()[1:]]
    widths = [w for w in widths if w]
    if not widths:
        return None if "\n" not in body else DEFAULT_INDENT
    return min(widths, key=len)


def _key_separator(obj, text):
    for member in obj.members:
        return text[member.key_end:member.value_start]
    match = re.search(r'"\s*:\s*', text)
    return match.group(0)[1:] if match else ": "


def _item_separator(obj, text, key_sep):
    """Separator between members on one line: as the object has it, else spaced like `:`."""
    if len(obj.members) > 1:
        return "," + text[obj.members[-1].lead_start:obj.members[-1].key_start]
    return ", " if key_sep.endswith(" ") else ","


def _render(value, indent, base, newline, key_sep, item_sep=", "):
    """JSON text of value: on one line when indent is None, else indented from base."""
    if indent is None:
        return json.dumps(value, separators=(item_sep, key_sep), ensure_ascii=False)
    rendered = json.dumps(value, indent=indent, separators=(",", key_sep), ensure_ascii=False)
    return rendered.replace("\n", newline + base)


def _insert_member(text, obj, key, value, indent):
    """Add `key: value` as the last member of obj, laid out like its neighbours."""
    newline = _newline(text)
    key_sep = _key_separator(obj, text)
    quoted_key = json.dumps(key, ensure_ascii=False)
    if obj.members:
        last = obj.members[-1]
        lead = text[last.lead_start:last.key_start]
        if "\n" in lead:
            separator = "," + lead
            rendered = _render(value, indent, lead[lead.rfind("\n") + 1:], newline, key_sep)
        else:
            separator = _item_separator(obj, text, key_sep)
            rendered = _render(value, None, "", newline, key_sep, separator)
        addition = separator + quoted_key + key_sep + rendered
        return text[: last.value_end] + addition + text[last.value_end:]
    if indent is None:
        item_sep = _item_separator(obj, text, key_sep)
        interior = quoted_key + key_sep + _render(value, None, "", newline, key_sep, item_sep)
    else:
        outer = _line_indent(text, obj.start)
        inner = outer + indent
        interior = (newline + inner + quoted_key + key_sep
                    + _render(value, indent, inner, newline, key_sep) + newline + outer)
    return text[: obj.start + 1] + interior + text[obj.end - 1:]


def _remove_member(text, obj, member):
    """Delete member and exactly the separator text that joined it to the object."""
    index = obj.members.index(member)
    if len(obj.members) == 1:
        return text[: obj.start + 1] + text[obj.end - 1:]
    if index > 0:
        return text[: obj.members[index - 1].value_end] + text[member.value_end:]
    return text[: member.key_start] + text[obj.members[1].key_start:]


# --- edits by key path -------------------------------------------------------

def _same(a, b):
    return json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)


def set_key(text, keys, value, path, indent):
    """Set the value at keys (a tuple), creating missing parent objects."""
    obj, missing, member = locate(text, keys, path)
    if member is not None and missing:  # a `null` on the way: the objects below it replace it
        for key in reversed(missing[1:]):
            value = OrderedDict([(key, value)])
        multiline = indent is not None and "\n" in text
        rendered = _render(value, indent if multiline else None, _line_indent(text, member.key_start),
                           _newline(text), _key_separator(obj, text))
        return text[: member.value_start] + rendered + text[member.value_end:]
    if member is not None:
        if _same(value_at(text, member), value):
            return text
        # Keep a one-line value on one line (e.g. an inline runtimeArgs array).
        multiline = "\n" in text[member.value_start:member.value_end]
        base = _line_indent(text, member.key_start)
        rendered = _render(value, indent if multiline else None, base, _newline(text), _key_separator(obj, text))
        return text[: member.value_start] + rendered + text[member.value_end:]
    for key in reversed(missing[1:]):
        value = OrderedDict([(key, value)])
    return _insert_member(text, obj, missing[0], value, indent)


def remove_key(text, keys, path):
    """Remove the member at keys when it exists."""
    obj, missing, member = locate(text, keys, path)
    if member is None or missing:
        return text
    return _remove_member(text, obj, member)


def edit_daemon_json(text, path, name, binary, runtime_args=(), set_as_default=False,
                     cdi=False, state="present"):
    """Return daemon.json text with the runtime added/updated (present) or removed (absent).

    text is the file's content ("" for a missing file). Raises DockerConfigError
    for a file this module must not touch.
    """
    data = parse_daemon_json(text, path)  # refuses a runtimes or features value dockerd cannot read
    bom = BOM if text.startswith(BOM) else ""
    body = text[len(bom):]
    if not data:
        if state == "absent":
            return text
        if body.strip() in ("", "null"):  # nothing to keep: the object replaces them
            body = "{}" + _newline(body or "\n")
    indent = detect_indent(body)

    if state == "present":
        body = set_key(body, ("runtimes", name, "path"), binary, path, indent)
        existing = get_key(data, ("runtimes", name)) or {}
        if runtime_args or "runtimeArgs" in existing:
            body = set_key(body, ("runtimes", name, "runtimeArgs"), list(runtime_args), path, indent)
        if set_as_default:
            body = set_key(body, ("default-runtime",), name, path, indent)
        if cdi:
            body = set_key(body, ("features", "cdi"), True, path, indent)
    else:
        # The emptied `runtimes` object stays, so that a reload unregisters the runtime. A `null` runtime
        # goes too: dockerd 28.5 does not start with it ("either a runtimeType or a path must be
        # configured"), and `dockerd --validate` passes it.
        if name in (data.get("runtimes") or {}):
            body = remove_key(body, ("runtimes", name), path)
        # A default naming a missing runtime stops dockerd; write the stock default
        # rather than deleting the key, which a reload would ignore.
        if data.get("default-runtime") == name:
            body = set_key(body, ("default-runtime",), STOCK_RUNTIME, path, indent)
    return bom + body
