# -*- coding: utf-8 -*-
# Copyright: gpunode.nvidia contributors
# Apache License 2.0
"""The value types a daemon's Go decoder insists on, checked on parsed configs (daemon.json, containerd's and
CRI-O's TOML): one place for what "a list of strings" means, for the editors, discovery and the doctor.

A schema is a sequence of (key path, kind); "*" in a key path stands for every key of a table or object.
Runs on managed nodes: standard library only.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

# kind: (the container or scalar type, the type of its items or None). Tables and objects are both dicts.
KINDS = {
    "a string": (str, None), "a boolean": (bool, None), "an integer": (int, None), "a table": (dict, None),
    "an object": (dict, None), "a list of strings": (list, str), "an object of booleans": (dict, bool),
}
ITEM_KINDS = {str: "a string", bool: "true or false"}


def values_at(data, keys):
    """(key path, value) of each value at KEYS in DATA; "*" stands for every key of a table."""
    if not keys:
        return [((), data)]
    if not isinstance(data, dict):
        return []
    names = list(data) if keys[0] == "*" else [keys[0]] if keys[0] in data else []
    return [((name,) + found, value) for name in names for found, value in values_at(data[name], keys[1:])]


def mismatch(value, kind):
    """None when VALUE is of KIND; else (where, bad value, kind expected there): where is () for the value itself,
    or (index or key,) for an item of a list or object. A null item is "not set" to Go and passes."""
    container, item = KINDS[kind]
    if not _is(value, container):
        return (), value, kind
    items = enumerate(value) if isinstance(value, list) else value.items() if item else ()
    for where, element in items:
        if element is not None and not _is(element, item):
            return (where,), element, ITEM_KINDS[item]
    return None


def _is(value, kind):
    """isinstance, but a boolean is no integer (Go's decoders keep them apart)."""
    return isinstance(value, kind) and (kind is bool or not isinstance(value, bool))
