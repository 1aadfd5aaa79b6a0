# -*- coding: utf-8 -*-
# Copyright: gpunode.nvidia contributors
# Apache License 2.0
"""CRI-O runtime drop-in: render the file this collection owns, and find what overrides it.

Standard library only: this runs on managed nodes, where no TOML library is
available. The drop-in is generated whole, so rendering needs no parser; the
override check reads the other files with toml_reader (tomllib where the
node's Python has it, the collection's small reader otherwise, which also
gives the line of each key), so every TOML style is seen: tables, dotted
keys, inline tables, quoted keys with escapes. A file CRI-O could not read
(not UTF-8, not TOML) is reported, never a reason to crash.

CRI-O reads /etc/crio/crio.conf first, then every file of the drop-in
directory (whatever its name, subdirectories too) sorted by name; a later file
wins for each key it sets.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os
import re
from collections import OrderedDict

from ansible_collections.gpunode.nvidia.plugins.module_utils.common.toml_reader import TomlError, read_toml
from ansible_collections.gpunode.nvidia.plugins.module_utils.common.node_paths import walk_files

HEADER_MARK = "# Managed by gpunode.nvidia (crio_runtime module)."
HEADER = (
    HEADER_MARK + " Changes made here are overwritten.\n"
    "# Remove it with the module (state: absent) rather than by hand; restart crio afterwards.\n"
)
_BARE_KEY = re.compile(r"^[A-Za-z0-9_-]+$")
BOM = u"\ufeff"
RUNTIMES = ("crio", "runtime", "runtimes")
DEFAULT_RUNTIME = ("crio", "runtime", "default_runtime")


def toml_string(value):
    """A TOML basic string (JSON string escapes are valid TOML escapes; DEL must be escaped too)."""
    return json.dumps(value, ensure_ascii=False).replace(u"\x7f", u"\\u007f")


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


def load(path):
    """(TomlDocument, None) for a readable TOML file, else (None, issue): what CRI-O would refuse."""
    try:
        with open(path, "rb") as handle:
            text = handle.read().decode("utf-8")
        return read_toml(text[1:] if text.startswith(BOM) else text), None
    except (IOError, OSError) as exc:
        return None, _issue(path, None, "cannot be read (%s)" % (exc.strerror or exc))
    except UnicodeDecodeError as exc:
        return None, _issue(path, None, "is not UTF-8 text (byte %d): CRI-O will refuse to start" % exc.start)
    except TomlError as exc:
        # The reason is left out: a parser's message may quote the file (credentials included).
        return None, _issue(path, exc.line, "is not valid TOML: CRI-O will refuse to start")
    except RecursionError:
        return None, _issue(path, None, "nests arrays or tables too deeply to be read: CRI-O will refuse to start")


def _get(data, keys):
    for key in keys:
        if not isinstance(data, dict) or key not in data:
            return None
        data = data[key]
    return data


def _defines_runtime(doc, name):
    runtimes = _get(doc.data, RUNTIMES)
    return isinstance(runtimes, dict) and name in runtimes


def _default_runtime(doc):
    value = _get(doc.data, DEFAULT_RUNTIME)
    return value if isinstance(value, str) else None


def config_files(main_config, dropin_dir):
    """Files in the order CRI-O applies them: the main file, then the drop-ins."""
    files = [main_config] if main_config and os.path.isfile(main_config) else []
    return files + walk_files(dropin_dir, _listdir, os.path.isdir)  # every file, whatever its name


def _listdir(directory):
    try:
        return os.listdir(directory)
    except OSError:
        return []


def find_overrides(ours, main_config, name, set_as_default, state):
    """Problems other files cause for our drop-in at path `ours`, as dicts with a message.

    present: a drop-in sorted after ours that redefines our runtime table, or
    (with set_as_default) sets another default_runtime, wins over ours.
    absent: a remaining file whose default_runtime still names the runtime
    while no remaining file defines it would stop CRI-O from starting.
    """
    dropin_dir = os.path.dirname(os.path.abspath(ours))
    ours = os.path.abspath(ours)
    others = [f for f in config_files(main_config, dropin_dir) if os.path.abspath(f) != ours]
    later = [f for f in others if os.path.dirname(os.path.abspath(f)) == dropin_dir
             and os.path.basename(f) > os.path.basename(ours)]
    docs, found = OrderedDict(), []
    for path in others:
        doc, problem = load(path)
        if problem is not None:
            found.append(problem)
        else:
            docs[path] = doc
    if state == "present":
        for path in [f for f in later if f in docs]:
            doc = docs[path]
            if _defines_runtime(doc, name):
                found.append(_issue(path, doc.line_of(RUNTIMES + (name,)),
                                    "redefines [crio.runtime.runtimes.%s], which overrides %s (CRI-O applies "
                                    "drop-ins in name order, the last one wins)" % (toml_key(name), ours)))
            default = _default_runtime(doc)
            if set_as_default and default is not None and default != name:
                found.append(_issue(path, doc.line_of(DEFAULT_RUNTIME), "sets default_runtime = %s after %s, so "
                                    "%s is not the default" % (toml_string(default), ours, name)))
        return found
    defined = any(_defines_runtime(doc, name) for doc in docs.values())
    defaults = [(path, doc) for path, doc in docs.items() if _default_runtime(doc) is not None]
    if defaults and _default_runtime(defaults[-1][1]) == name and not defined:
        path, doc = defaults[-1]
        found.append(_issue(path, doc.line_of(DEFAULT_RUNTIME), "sets default_runtime = %s, a runtime no other "
                            "file defines once %s is removed: CRI-O will refuse to start" % (toml_string(name), ours)))
    return found


def _issue(path, line, what):
    where = "%s line %d" % (path, line) if line else path
    return {"file": path, "line": line, "message": "%s %s." % (where, what)}
