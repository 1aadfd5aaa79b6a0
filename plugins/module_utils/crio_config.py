# -*- coding: utf-8 -*-
# Copyright: gpunode.nvidia contributors
# Apache License 2.0
"""CRI-O runtime drop-in: render the file this collection owns, and find what overrides it.

Standard library only: this runs on managed nodes, where no TOML library is
available. The drop-in is generated whole, so rendering needs no parser; the
override scan reads other files with a line-based scan of table headers and
the few keys that matter, which is all CRI-O's layout (one table per runtime,
`default_runtime` under `[crio.runtime]`) needs.

CRI-O reads /etc/crio/crio.conf first, then every file of the drop-in
directory sorted by name; a later file wins for each key it sets.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os
import re
from collections import namedtuple

HEADER_MARK = "# Managed by gpunode.nvidia (crio_runtime module)."
HEADER = (
    HEADER_MARK + " Changes made here are overwritten.\n"
    "# Remove it with the module (state: absent) rather than by hand; restart crio afterwards.\n"
)
_BARE_KEY = re.compile(r"^[A-Za-z0-9_-]+$")
_TABLE = re.compile(r"^\s*\[\[?(?P<name>[^\]]*)\]\]?\s*(?:#.*)?$")
_KEY = re.compile(r"""^\s*(?P<key>(?:[A-Za-z0-9_-]+|"[^"]*"|'[^']*')(?:\s*\.\s*(?:[A-Za-z0-9_-]+|"[^"]*"|'[^']*'))*)\s*=\s*(?P<value>.*)$""")
_STRING = re.compile(r"""^\s*(?:"((?:[^"\\]|\\.)*)"|'([^']*)')""")

# One setting found in a file: the dotted key path, its value text, where it is.
Setting = namedtuple("Setting", "keys value file line")


def toml_string(value):
    """A TOML basic string (JSON string escapes are valid TOML escapes)."""
    return json.dumps(value, ensure_ascii=False)


def toml_key(name):
    return name if _BARE_KEY.match(name) else toml_string(name)


def default_runtime_root(name):
    return "/run/%s" % name


def render_dropin(name, binary, runtime_root=None, set_as_default=False):
    """The whole drop-in file for one runtime."""
    lines = [HEADER]
    if set_as_default:
        lines += ["[crio.runtime]", "default_runtime = %s" % toml_string(name), ""]
    lines += [
        "[crio.runtime.runtimes.%s]" % toml_key(name),
        "runtime_path = %s" % toml_string(binary),
        'runtime_type = "oci"',
        "runtime_root = %s" % toml_string(runtime_root or default_runtime_root(name)),
    ]
    return "\n".join(lines) + "\n"


def runtime_table(name, binary, runtime_root=None):
    return {"runtime_path": binary, "runtime_type": "oci",
            "runtime_root": runtime_root or default_runtime_root(name)}


def is_managed(text):
    return text.startswith(HEADER_MARK)


def split_key(dotted):
    """`crio.runtime.runtimes."nvidia"` -> ("crio", "runtime", "runtimes", "nvidia")."""
    parts = re.findall(r"""\s*("[^"]*"|'[^']*'|[^.\s]+)\s*(?:\.|$)""", dotted)
    return tuple(part[1:-1] if part[:1] in "\"'" else part for part in parts)


def string_value(text):
    match = _STRING.match(text)
    if not match:
        return text.split("#", 1)[0].strip()
    return match.group(1) if match.group(1) is not None else match.group(2)


def scan(text, path):
    """Every table header and `key = value` line, as full dotted key paths."""
    settings, table, in_multiline = [], (), False
    for number, line in enumerate(text.splitlines(), 1):
        # Skip the body of multi-line strings, whose lines may look like tables.
        quotes = line.count('"""') + line.count("'''")
        if in_multiline:
            in_multiline = quotes % 2 == 0
            continue
        if quotes % 2 == 1:
            in_multiline = True
        header = _TABLE.match(line)
        if header:
            table = split_key(header.group("name"))
            settings.append(Setting(table, None, path, number))
            continue
        pair = _KEY.match(line)
        if pair:
            settings.append(Setting(table + split_key(pair.group("key")), pair.group("value"), path, number))
    return settings


def config_files(main_config, dropin_dir):
    """Files in the order CRI-O applies them: the main file, then drop-ins by name."""
    files = [main_config] if main_config and os.path.isfile(main_config) else []
    if os.path.isdir(dropin_dir):
        names = sorted(os.listdir(dropin_dir))
        files += [os.path.join(dropin_dir, n) for n in names if os.path.isfile(os.path.join(dropin_dir, n))]
    return files


def _read(path):
    with open(path, "rb") as handle:
        return handle.read().decode("utf-8", "replace")


def _defines_runtime(setting, name):
    return setting.keys[:4] == ("crio", "runtime", "runtimes", name)


def _default_runtime(setting):
    if setting.keys == ("crio", "runtime", "default_runtime"):
        return string_value(setting.value)
    return None


def find_overrides(ours, main_config, name, set_as_default, state):
    """Problems other files cause for our drop-in at path `ours`, as dicts with a message.

    present: a drop-in sorted after ours that redefines our runtime table, or
    (with set_as_default) sets another default_runtime, wins over ours.
    absent: a remaining file whose default_runtime still names the runtime
    while no remaining file defines it would stop CRI-O from starting.
    """
    dropin_dir = os.path.dirname(os.path.abspath(ours))
    ours = os.path.abspath(ours)
    found = []
    others = [f for f in config_files(main_config, dropin_dir) if os.path.abspath(f) != ours]
    later = [f for f in others if os.path.dirname(os.path.abspath(f)) == dropin_dir
             and os.path.basename(f) > os.path.basename(ours)]
    settings = dict((f, scan(_read(f), f)) for f in others)
    if state == "present":
        for path in later:
            redefinitions = [s for s in settings[path] if _defines_runtime(s, name)]
            if redefinitions:
                found.append(_issue(redefinitions[0], "redefines [crio.runtime.runtimes.%s], which overrides "
                                                      "%s (CRI-O applies drop-ins in name order, the last one "
                                                      "wins)" % (name, ours)))
            for setting in settings[path]:
                default = _default_runtime(setting)
                if set_as_default and default is not None and default != name:
                    found.append(_issue(setting, "sets default_runtime = %s after %s, so %s is not the "
                                                 "default" % (toml_string(default), ours, name)))
        return found
    defined = any(_defines_runtime(s, name) for path in others for s in settings[path])
    defaults = [s for path in others for s in settings[path] if _default_runtime(s) is not None]
    if defaults and _default_runtime(defaults[-1]) == name and not defined:
        found.append(_issue(defaults[-1], "sets default_runtime = %s, a runtime no other file defines once "
                                          "%s is removed: CRI-O will refuse to start" % (toml_string(name), ours)))
    return found


def _issue(setting, what):
    return {"file": setting.file, "line": setting.line,
            "message": "%s line %d %s." % (setting.file, setting.line, what)}
