# -*- coding: utf-8 -*-
# Copyright: gpunode.nvidia contributors
# Apache License 2.0
"""Reading a containerd config.toml into plain data (controller side), beside toml_layout.py.

Syntax errors name the file, line and column (tomllib's positions on Python 3.11+, tomlkit's before), and
documents nested deeper than any containerd config needs are refused before they can exhaust the stack.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re
import sys

from ansible.module_utils.basic import missing_required_lib

try:
    import tomlkit
    from tomlkit.exceptions import ParseError
except ImportError:  # reported by require_tomlkit() when an edit is planned
    tomlkit = None

    class ParseError(Exception):
        """Never raised: keeps the except clauses valid without tomlkit."""

try:  # Python 3.11+: the standard parser, with precise error positions
    import tomllib
except ImportError:  # pragma: no cover - older controllers
    tomllib = None

from ansible_collections.gpunode.nvidia.plugins.plugin_utils.containerd.toml_layout import MAX_NESTING, nesting_too_deep
from ansible_collections.gpunode.nvidia.plugins.plugin_utils.containerd.toml_render import render_key

BOM = u"\ufeff"
MAX_DEPTH = 64  # tables, arrays and inline tables together


class ConfigError(Exception):
    """A config this module must not edit; the message says where and what to do."""


def require_tomlkit():
    """Fail with the install line when the controller has no tomlkit (a controller-side requirement)."""
    if tomlkit is None:
        raise ConfigError("%s Install it on the controller: %s -m pip install tomlkit" % (
            missing_required_lib("tomlkit", reason="to edit containerd's config.toml"), sys.executable))


def parse(text, path):
    """Parse TOML into plain data; syntax errors name file, line and column."""
    text = text[1:] if text.startswith(BOM) else text  # containerd 1.x reads past it; 2.x refuses it (its dump says)
    deep = nesting_too_deep(text)
    if deep:
        raise ConfigError(
            "%s: line %d, column %d: arrays or inline tables nested more than %d levels deep; containerd "
            "configs never need that. The file was left unchanged; flatten that value and run again."
            % (path, deep[0], deep[1], MAX_NESTING))
    try:
        if tomllib is not None:
            try:
                data = tomllib.loads(text)
            except tomllib.TOMLDecodeError as exc:
                match = re.search(r"^(.*) \(at line (\d+), column (\d+)\)$", str(exc))
                at_end = re.search(r"^(.*) \(at end of document\)$", str(exc))
                if at_end:
                    raise _syntax_error(path, *_end_of_file(text, at_end.group(1)))
                reason, line, col = match.groups() if match else (str(exc), "?", "?")
                raise _syntax_error(path, line, col, reason)
        else:  # pragma: no cover
            try:
                data = tomlkit.parse(text).unwrap()
            except ParseError as exc:
                reason = re.sub(r" at line \d+ col \d+$", "", str(exc))
                raise _syntax_error(path, exc.line, exc.col, reason)
    except RecursionError:
        raise ConfigError("%s: the document nests too deeply to be read safely. The file was left unchanged; "
                          "flatten it and run again." % path)
    _check_depth(data, path)
    return data


_HEADER = re.compile(r"^[ \t]*(\[\[?[^\]\n]+\]\]?)")


def _end_of_file(text, reason):
    """(line, column, reason) for an error the parser met at the end of the file: the last line, and the
    table that was still open there (where an unclosed string or array usually began)."""
    lines = text.split("\n")
    while len(lines) > 1 and not lines[-1].strip():
        lines.pop()
    headers = [match.group(1) for match in (_HEADER.match(line) for line in lines) if match]
    where = " in table %s" % headers[-1] if headers else " at the top level (before any table)"
    return (len(lines), len(lines[-1]) + 1,
            "%s at the end of the file (the last line)%s" % (reason, where))


def _syntax_error(path, line, col, reason):
    return ConfigError("%s: line %s, column %s: %s. The file was left unchanged; fix the TOML and run again."
                       % (path, line, col, reason.rstrip(".")))


def _check_depth(data, path):
    """Refuse documents nested deeper than MAX_DEPTH (checked iteratively: no recursion on input)."""
    stack = [(data, 1, ())]
    while stack:
        value, depth, top = stack.pop()
        if depth > MAX_DEPTH:
            raise ConfigError("%s: key %s nests tables and arrays more than %d levels deep; containerd configs "
                              "never need that. The file was left unchanged; flatten it and run again."
                              % (path, render_key(top[0]) if top else "(top level)", MAX_DEPTH))
        children = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
        for key, child in children:
            if isinstance(child, (dict, list)):
                stack.append((child, depth + 1, top or (str(key),)))
