# -*- coding: utf-8 -*-
# Copyright: gpunode.nvidia contributors
# Apache License 2.0
"""Go's filepath.Match and filepath.Glob, which containerd uses to expand `imports`.

They differ from Python's glob: `*` also matches names that start with a dot,
a class is negated with `^` (not `!`), a backslash escapes the next character,
and the results are sorted per directory. Runs on managed nodes and on the
controller: standard library only.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import re

META = "*?[\\"


class BadPattern(ValueError):
    """A pattern Go rejects (filepath.ErrBadPattern): containerd fails to start on it."""


def has_meta(pattern):
    return any(char in pattern for char in META)


def _translate(pattern):
    """A regular expression equivalent to Go's filepath.Match pattern (one path element)."""
    out, i, size = [], 0, len(pattern)
    while i < size:
        char = pattern[i]
        if char == "*":
            out.append("[^/]*")
        elif char == "?":
            out.append("[^/]")
        elif char == "\\":
            if i + 1 >= size:
                raise BadPattern("trailing backslash in %r" % pattern)
            i += 1
            out.append(re.escape(pattern[i]))
        elif char == "[":
            end, cls = _class(pattern, i + 1)
            out.append(cls)
            i = end
        else:
            out.append(re.escape(char))
        i += 1
    return "".join(out)


def _class(pattern, i):
    """(index of the closing bracket, regex class) for a class whose body starts at i (Go's rules)."""
    negated = i < len(pattern) and pattern[i] == "^"
    i += 1 if negated else 0
    ranges = []
    while True:
        if i < len(pattern) and pattern[i] == "]" and ranges:
            break
        low, i = _class_char(pattern, i)
        high = low
        if i < len(pattern) and pattern[i] == "-":
            high, i = _class_char(pattern, i + 1)
        ranges.append((low, high))
    # Go tests lo <= c <= hi: a reversed range (z-a) is no error, it matches nothing.
    kept = ["%s-%s" % (re.escape(low), re.escape(high)) if high != low else re.escape(low)
            for low, high in ranges if low <= high]
    if not kept:
        return i, "." if negated else "(?!)"
    return i, "[%s%s]" % ("^" if negated else "", "".join(kept))


def _class_char(pattern, i):
    """Go's getEsc: one (possibly escaped) character of a class; `-` and `]` must be escaped."""
    if i >= len(pattern) or pattern[i] in "-]":
        raise BadPattern("bad character class in %r" % pattern)
    if pattern[i] == "\\":
        i += 1
        if i >= len(pattern):
            raise BadPattern("bad character class in %r" % pattern)
    return pattern[i], i + 1


def match(pattern, name):
    """Go's filepath.Match(pattern, name) on a Unix system."""
    return re.match("(?s)^%s$" % _translate(pattern), name) is not None


def match_path(pattern, path):
    """Whether a whole path matches a pattern element by element (as Glob would find it)."""
    pattern_parts, path_parts = pattern.split("/"), path.split("/")
    if len(pattern_parts) != len(path_parts):
        return False
    return all(match(p, n) for p, n in zip(pattern_parts, path_parts))


def glob(pattern, listdir=None, lexists=os.path.lexists):
    """Go's filepath.Glob: matching paths, sorted per directory; missing directories match nothing.
    listdir and lexists read the node (default: this machine's files; an image's root through a node reader)."""
    if not has_meta(pattern):
        return [pattern] if lexists(pattern) else []
    directory, name = os.path.split(pattern)
    directory = directory or "."
    _translate(name)  # a bad pattern fails even when nothing could match
    if not has_meta(directory):
        return _glob_in(directory, name, listdir or _listdir)
    if directory == pattern:
        raise BadPattern("recursive pattern %r" % pattern)
    found = []
    for parent in glob(directory, listdir, lexists):
        found.extend(_glob_in(parent, name, listdir or _listdir))
    return found


def _listdir(directory):
    try:
        return os.listdir(directory)
    except OSError:
        return []


def _glob_in(directory, name, listdir):
    # Go joins with filepath.Join, which cleans the path (no "//" or "/./").
    return [os.path.normpath(os.path.join(directory, entry)) for entry in sorted(listdir(directory))
            if match(name, entry)]
