# -*- coding: utf-8 -*-
# Copyright: gpunode.nvidia contributors
# Apache License 2.0
"""Read Docker's daemon.json as dockerd does: parse it (key order kept), refuse what dockerd refuses (naming
the line), and find where each member lies in the text. The editor (editors/docker_config.py) splices its
edits at those places; discovery and the doctor only read.

Standard library only: this runs on managed nodes.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
from collections import OrderedDict, namedtuple

from ansible_collections.gpunode.nvidia.plugins.module_utils.common.value_kinds import mismatch, values_at

BOM = u"\ufeff"
# daemon.json needs four levels at most; deeper input is refused before the
# (recursive) JSON parser sees it.
MAX_NESTING = 64

WHITESPACE = " \t\r\n"
_DECODER = json.JSONDecoder(object_pairs_hook=OrderedDict)

# One `"key": value` of an object. lead_start is just after the `{` or `,`
# before it, so text[lead_start:key_start] is the layout in front of the key.
_Member = namedtuple("_Member", "key lead_start key_start key_end value_start value_end")
_Object = namedtuple("_Object", "start end members")


class DockerConfigError(Exception):
    """A daemon.json the module must not touch; the message says where and why.

    For a file dockerd cannot read either, `line` and `reason` say the same for a reader that only reports it
    (the doctor's view of the node): the reason names no path and quotes nothing of the file.
    """

    def __init__(self, message, line=None, reason=None):
        Exception.__init__(self, message)
        self.line = line
        self.reason = reason or message


# The Go types of dockerd's configuration for the keys this collection reads or writes.
DOCKERD_TYPES = {
    ("hosts",): "a list of strings", ("exec-opts",): "a list of strings", ("default-runtime",): "a string",
    ("containerd",): "a string", ("data-root",): "a string", ("runtimes",): "an object",
    ("features",): "an object of booleans",
}
RUNTIME_TYPES = {"path": "a string", "runtimeType": "a string", "runtimeArgs": "a list of strings",
                 "options": "an object"}


def line_col(text, pos):
    """1-based line and column of a character offset."""
    line = text.count("\n", 0, pos) + 1
    return line, pos - (text.rfind("\n", 0, pos) + 1) + 1


def _where(path, text, pos):
    return "%s line %d column %d" % ((path,) + line_col(text, pos))


def _json_type(value):
    if isinstance(value, dict):
        return "an object"
    if isinstance(value, list):
        return "an array"
    if isinstance(value, bool):
        return "a boolean"
    if value is None:
        return "null"
    if isinstance(value, (int, float)):
        return "a number"
    return "a string"


def parse_daemon_json(text, path):
    """Parse daemon.json text as dockerd reads it (key order kept): a UTF-8 BOM is skipped, and an empty file
    or a top-level `null` is an empty object (dockerd 26.1 and 28.5 start with each)."""
    body = text[1:] if text.startswith(BOM) else text
    if not body.strip():
        return OrderedDict()
    _check_scan(body, path)
    try:
        data = json.loads(body, object_pairs_hook=OrderedDict)
    except ValueError as exc:
        # JSONDecodeError carries the position; dockerd would refuse this file too.
        _refuse_trailing_comma(body, getattr(exc, "pos", None), path)
        line, col = getattr(exc, "lineno", None), getattr(exc, "colno", None)
        msg = getattr(exc, "msg", str(exc))
        raise DockerConfigError(
            "%s is not valid JSON: %s at line %s column %s. Fix the file by hand; "
            "it was left untouched." % (path, msg, line, col),
            line, "not valid JSON: %s at column %s" % (msg, col))
    if data is None:
        return OrderedDict()
    if not isinstance(data, dict):
        raise DockerConfigError(
            "%s must hold a JSON object at the top level, found %s. Fix the file by hand; "
            "it was left untouched." % (path, _json_type(data)),
            1, "not a JSON object at the top level (found %s)" % _json_type(data))
    _check_types(data, body, path)
    return data


def _check_types(data, text, path):
    """Refuse, as dockerd's Go decoder does, a value of another JSON type at a key this collection reads or
    writes (`null` is "not set" to Go, and passes)."""
    checks = list(DOCKERD_TYPES.items())
    for keys, _runtime in values_at(data, ("runtimes", "*")):
        checks.append((keys, "an object"))
        checks.extend((keys + (key,), kind) for key, kind in RUNTIME_TYPES.items())
    for keys, kind in checks:
        value = get_key(data, keys)
        problem = mismatch(value, kind) if value is not None else None
        if problem:
            _type_error(text, path, keys, *problem)


def _type_error(text, path, keys, where, value, kind):
    """WHERE: () for the value at KEYS itself, (index,) for an item of its list, (key,) for a member of its object."""
    if where and isinstance(where[0], int):
        name = "%s[%d]" % (".".join(keys), where[0])
    else:
        keys += where
        name = ".".join(keys)
    line = key_line(text, keys)
    raise DockerConfigError(
        "%s%s: %s is %s; dockerd expects %s there and does not start with this file. Fix it by hand; "
        "the file was left untouched." % (path, " line %d" % line if line else "", name, _json_type(value), kind),
        line, "%s is %s; dockerd expects %s" % (name, _json_type(value), kind))


def _check_scan(body, path):
    """Refuse, naming where (no recursion here), objects/arrays nested deeper than MAX_NESTING and the
    NaN/Infinity numbers that Python's json reads but dockerd's Go decoder does not."""
    depth, pos, length = 0, 0, len(body)
    while pos < length:
        char = body[pos]
        if char == '"':
            pos += 1
            while pos < length and body[pos] != '"':
                pos += 2 if body[pos] == "\\" else 1
        elif char in "NI" and body.startswith(("NaN", "Infinity"), pos):
            word, (line, col) = "NaN" if char == "N" else "Infinity", line_col(body, pos)
            raise DockerConfigError(
                "%s is not valid JSON: %s at line %d column %d is not a JSON number, and dockerd does not "
                "start with it. Fix the file by hand; it was left untouched." % (path, word, line, col),
                line, "not valid JSON: %s at column %d is not a JSON number" % (word, col))
        elif char in "[{":
            depth += 1
            if depth > MAX_NESTING:
                line, col = line_col(body, pos)
                raise DockerConfigError(
                    "%s nests objects or arrays more than %d levels deep at line %d column %d; dockerd "
                    "needs a few levels only. Fix the file by hand; it was left untouched."
                    % (path, MAX_NESTING, line, col),
                    line, "objects or arrays nested more than %d levels deep at column %d" % (MAX_NESTING, col))
        elif char in "]}":
            depth -= 1
        pos += 1


def _refuse_trailing_comma(body, pos, path):
    """Refuse a comma right before a `}` or `]` where json stopped at POS, named at the bracket on every Python:
    3.13 stops at the comma (with words of its own), earlier versions and dockerd at the bracket."""
    if pos is None:
        return
    if body[pos:pos + 1] == ",":
        comma, bracket = pos, skip_ws(body, pos + 1)
    else:
        comma, bracket = _prev_non_ws(body, pos), pos
    before = _prev_non_ws(body, comma)
    # A comma after `{`, `[` or another comma is a missing value, reported where json stopped.
    if body[comma:comma + 1] != "," or body[bracket:bracket + 1] not in ("}", "]") or before < 0 or body[before] in ",[{":
        return
    line, col = line_col(body, bracket)
    raise DockerConfigError(
        "%s is not valid JSON: a trailing comma (line %d column %d) before the '%s' at line %d column %d. "
        "Fix the file by hand; it was left untouched." % ((path,) + line_col(body, comma) + (body[bracket], line, col)),
        line, "not valid JSON: a trailing comma before the '%s' at column %d" % (body[bracket], col))


def _prev_non_ws(text, pos):
    """Index of the last non-whitespace character before pos (-1 if none)."""
    pos -= 1
    while pos >= 0 and text[pos] in WHITESPACE:
        pos -= 1
    return pos


# --- scanning: where each member of an object lies in the text -------------

def skip_ws(text, pos):
    while pos < len(text) and text[pos] in WHITESPACE:
        pos += 1
    return pos


def scan_object(text, start):
    """Members of the (already validated) JSON object whose `{` is at start."""
    members = []
    lead_start = start + 1
    pos = skip_ws(text, lead_start)
    if text[pos] == "}":
        return _Object(start, pos + 1, members)
    while True:
        key_start = pos
        key, key_end = json.decoder.scanstring(text, key_start + 1)
        value_start = skip_ws(text, skip_ws(text, key_end) + 1)  # past the colon
        _value, value_end = _DECODER.raw_decode(text, value_start)
        members.append(_Member(key, lead_start, key_start, key_end, value_start, value_end))
        pos = skip_ws(text, value_end)
        if text[pos] == "}":
            return _Object(start, pos + 1, members)
        lead_start = pos + 1
        pos = skip_ws(text, lead_start)


def _member(text, obj, key, path):
    """The member named key, or None; a repeated key is an error (which one wins is unclear)."""
    found = [m for m in obj.members if m.key == key]
    if len(found) > 1:
        raise DockerConfigError(
            "%s: key %s appears more than once (again at %s). Remove the duplicate; "
            "the file was left untouched." % (path, json.dumps(key), _where(path, text, found[1].key_start))
        )
    return found[0] if found else None


def value_at(text, member):
    return _DECODER.raw_decode(text, member.value_start)[0]


def locate(text, keys, path):
    """Walk keys from the top object; return (deepest object found, keys left, member or None).

    The member comes with keys left when it holds `null` on the way: it stands for the missing object."""
    obj = scan_object(text, skip_ws(text, 0))
    for index, key in enumerate(keys):
        member = _member(text, obj, key, path)
        if member is None:
            return obj, keys[index:], None
        if index == len(keys) - 1:
            return obj, (), member
        value = value_at(text, member)
        if value is None:  # `null`: dockerd reads the key as absent (the member is what set_key replaces)
            return obj, keys[index:], member
        if not isinstance(value, dict):
            raise DockerConfigError(
                "%s: %s at %s is %s; dockerd expects an object there. Fix it by hand; "
                "the file was left untouched."
                % (path, ".".join(keys[: index + 1]), _where(path, text, member.value_start), _json_type(value))
            )
        obj = scan_object(text, member.value_start)
    return obj, (), None


def key_line(text, keys):
    """The line (1-based) of the member that KEYS name in daemon.json TEXT, or None where there is none
    (or it is written twice, or the text is no JSON object)."""
    body = text[1:] if text.startswith(BOM) else text
    try:
        _obj, left, member = locate(body, tuple(keys), "daemon.json")
    except (DockerConfigError, ValueError, IndexError):
        return None
    return line_col(body, member.key_start)[0] if member is not None and not left else None


def get_key(data, keys):
    for key in keys:
        if not isinstance(data, dict) or key not in data:
            return None
        data = data[key]
    return data


def runtime_entry(data, name):
    """The runtime's object as dockerd will read it, or None."""
    return get_key(data, ("runtimes", name))
