# -*- coding: utf-8 -*-
# Copyright: gpunode.nvidia contributors
# Apache License 2.0
"""The effective-config guard (controller side).

`containerd --config FILE config dump` is the only honest answer to "what
will containerd do with this file": it applies imports and version
migration exactly as the daemon does (containerd 1.x lets a drop-in replace
a whole plugin table; 2.x merges deeply). We dump the current file and the
candidate, and allow only the keys the edit is about to differ.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

try:
    import tomlkit
except ImportError:  # reported by containerd_toml.require_tomlkit() with the install line
    tomlkit = None

from ansible_collections.gpunode.nvidia.plugins.module_utils.masking import mask_value
from ansible_collections.gpunode.nvidia.plugins.plugin_utils.containerd_toml import (
    CRI_DUMP_PLUGINS, get_path, require_tomlkit)


class GuardError(Exception):
    pass


def load_dump(text):
    """Parse `config dump` output (the node already named the candidate by its real path)."""
    require_tomlkit()
    dump = tomlkit.parse(text).unwrap()
    # The list of files read is informational, and its order depends on file names.
    if isinstance(dump.get("imports"), list):
        dump["imports"] = sorted(dump["imports"])
    return dump


def flatten(data, prefix=()):
    """{dotted path tuple: leaf value}; empty tables are leaves so their loss shows."""
    flat = {}
    for key, value in data.items():
        if isinstance(value, dict) and value:
            flat.update(flatten(value, prefix + (key,)))
        else:
            flat[prefix + (key,)] = value
    return flat


def is_intended(path, name, restored=()):
    """Keys the runtime edit may change: the runtime's table, the default runtime, CDI (and the tables of
    built-in runtimes that removing the last listed runtime gives back to containerd 1.x)."""
    if len(path) < 3 or path[0] != "plugins" or path[1] not in CRI_DUMP_PLUGINS:
        return False
    rest = path[2:]
    return (rest[:3] == ("containerd", "runtimes", name)
            or (rest[:2] == ("containerd", "runtimes") and len(rest) > 2 and rest[2] in restored)
            or rest == ("containerd", "default_runtime_name")
            or rest == ("enable_cdi",))


def dotted(path):
    return ".".join('"%s"' % k if "." in k else k for k in path)


def compare(before, after, name, state="present"):
    """Return (intended, unintended) lists of dotted keys that differ between two dumps."""
    old, new = flatten(before), flatten(after)
    # containerd 1.x: removing the only runtime a file lists gives containerd its built-in runc back.
    restored = ("runc",) if state == "absent" and runtime_in_dump(before, "runc") is None else ()
    changed = sorted(k for k in set(old) | set(new) if old.get(k, _MISSING) != new.get(k, _MISSING))
    intended = [dotted(k) for k in changed if is_intended(k, name, restored)]
    unintended = [_describe(k, old, new) for k in changed if not is_intended(k, name, restored)]
    return intended, unintended


_MISSING = object()


def _describe(key, old, new):
    if key not in new:
        return "%s (would be lost; was %r)" % (dotted(key), mask_value(key, old[key]))
    if key not in old:
        return "%s (would appear: %r)" % (dotted(key), mask_value(key, new[key]))
    return "%s (would change from %r to %r)" % (dotted(key), mask_value(key, old[key]), mask_value(key, new[key]))


def runtime_in_dump(dump, name):
    """The runtime table containerd would load for `name`, or None."""
    plugins = dump.get("plugins", {})
    for plugin in CRI_DUMP_PLUGINS:
        table = get_path(plugins, (plugin, "containerd", "runtimes", name))
        if table is not None:
            return table
    return None


def default_in_dump(dump):
    plugins = dump.get("plugins", {})
    for plugin in CRI_DUMP_PLUGINS:
        value = get_path(plugins, (plugin, "containerd", "default_runtime_name"))
        if value is not None:
            return value
    return None


def check_effect(dump, plan, binary, set_as_default, state):
    """Problems when the candidate's effective config does not do what was asked."""
    problems = []
    table = runtime_in_dump(dump, plan.name)
    if state == "present":
        if table is None:
            problems.append("runtime %r is missing from the effective config" % plan.name)
        elif get_path(table, ("options", "BinaryName")) != binary:
            problems.append("runtime %r would run %r, not %r"
                            % (plan.name, get_path(table, ("options", "BinaryName")), binary))
        if set_as_default and default_in_dump(dump) != plan.name:
            problems.append("default_runtime_name would be %r, not %r" % (default_in_dump(dump), plan.name))
    elif table is not None:
        problems.append("runtime %r would still be loaded (another file defines it)" % plan.name)
    return problems
