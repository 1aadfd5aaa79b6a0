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

import copy
import posixpath

from ansible_collections.gpunode.nvidia.plugins.module_utils.editors.masking import mask_text, mask_value
from ansible_collections.gpunode.nvidia.plugins.plugin_utils.containerd import imports as imports_mod
from ansible_collections.gpunode.nvidia.plugins.plugin_utils.containerd.toml_edit import CRI_DUMP_PLUGINS, release_of
from ansible_collections.gpunode.nvidia.plugins.plugin_utils.containerd.toml_read import ConfigError, parse, require_tomlkit
from ansible_collections.gpunode.nvidia.plugins.plugin_utils.containerd.toml_render import get_path


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


def is_intended(path, planned_keys, old, new):
    """Whether a difference at dump key `path` is one the edit planned: at or under a key it changes (in the
    CRI runtime plugin's table), or a table above one that the change empties or creates."""
    if len(path) < 3 or path[0] != "plugins" or path[1] not in CRI_DUMP_PLUGINS:
        return False
    rest = path[2:]
    for planned in planned_keys:
        if rest[:len(planned)] == planned:
            return True
        if planned[:len(rest)] == rest and all(side.get(path, {}) == {} for side in (old, new)):
            return True
    return False


def dotted(path):
    return ".".join('"%s"' % k if "." in k else k for k in path)


def compare(before, after, planned_keys, state="present"):
    """Return (intended, unintended) lists of dotted keys that differ between two dumps; `planned_keys`
    are the keys the edit changes, relative to the CRI runtime plugin's table (toml_edit.Plan)."""
    old, new = flatten(before), flatten(after)
    planned = [tuple(key) for key in planned_keys]
    # containerd 1.x: removing the only runtime a file lists gives containerd its built-in runc back.
    if state == "absent" and runtime_in_dump(before, "runc") is None:
        planned.append(("containerd", "runtimes", "runc"))
    changed = sorted(k for k in set(old) | set(new) if old.get(k, _MISSING) != new.get(k, _MISSING))
    intended = [dotted(k) for k in changed if is_intended(k, planned, old, new)]
    unintended = [_describe(k, old, new) for k in changed if not is_intended(k, planned, old, new)]
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
    value = value_in_dump(dump, ("containerd", "default_runtime_name"))
    return None if value is _MISSING else value


def value_in_dump(dump, key):
    """The value containerd shows for `key` (relative to the CRI runtime plugin's table), or _MISSING."""
    plugins = dump.get("plugins", {})
    for plugin in CRI_DUMP_PLUGINS:
        value = get_path(plugins, (plugin,) + tuple(key), _MISSING)
        if value is not _MISSING:
            return value
    return _MISSING


# Keys an older containerd drops without a word: the release that first reads them.
FIRST_READ_IN = {("enable_cdi",): ("1.7", "cdi")}


def check_effect(dump, edit, name, state, containerd_version):
    """Problems when the candidate's effective config does not do what was asked: the runtime is missing
    (or, for absent, still loaded), or a key the edit sets does not show in containerd's view with the
    value it was set to (containerd drops keys it does not know)."""
    problems = []
    table = runtime_in_dump(dump, name)
    if state == "present" and table is None:
        problems.append("runtime %r is missing from the effective config" % name)
    elif state != "present" and table is not None:
        problems.append("runtime %r would still be loaded (another file defines it)" % name)
    for key, value in sorted(edit.expected_values.items()):
        shown = value_in_dump(dump, key)
        if shown == value or (key[:3] == ("containerd", "runtimes", name) and table is None):
            continue
        if shown is _MISSING:
            since = FIRST_READ_IN.get(tuple(key))
            problems.append("containerd %s does not read %s: `config dump` of the edited file has no such key, so "
                            "setting it would change nothing%s"
                            % (release_of(containerd_version) or "(version unknown)", dotted(key),
                               " (containerd %s and later read it: upgrade containerd, or run without %s)" % since
                               if since else ""))
        elif key[:3] == ("containerd", "runtimes", name):
            problems.append("runtime %r would run %r, not %r" % (name, shown, value))
        else:
            problems.append("%s would be %r, not %r" % (dotted(key), shown, value))
    return problems


def candidate_files(edit, files, globs, containerd_version):
    """(root text, companions) for the guard: the root's imports list every file of the edited state in
    containerd's order; changed files (and files with imports of their own, their imports emptied: the root's
    list already holds what they import, in order) become companions in the node's private directory."""
    contents = edit.contents(files)
    if len(files.files) == 1 and set(edit.changes) <= set([files.root.path]):
        return contents[files.root.path], []
    candidate = imports_mod.from_contents(files.root.path, contents, containerd_version, globs)
    entries, companions = [], []
    for index, config in enumerate(candidate.files[1:]):
        if config.path in edit.changes or config.imports():
            name = "%02d-%s" % (index, posixpath.basename(config.path))
            companions.append(dict(name=name, path=config.path,
                                   content=imports_mod.replace_imports(config.text, [], config.path)))
            entries.append(name)
        else:
            entries.append(config.path)
    return imports_mod.replace_imports(candidate.root.text, entries, files.root.path), companions


def check_loaded_files(files, dump):
    """containerd 1.x lists the files it loaded in `config dump`: they must be the ones resolved here."""
    if dump is None or not files.semantics.replaces_plugin_tables or not isinstance(dump.get("imports"), list):
        return
    if sorted(dump["imports"]) != sorted(files.paths()):
        raise ConfigError(
            "%s: containerd loads %s, but this module found %s; it edits only what it can see exactly, so nothing "
            "was written. Please report this with the files attached." % (files.root.path, sorted(dump["imports"]),
                                                                          sorted(files.paths())))


def without_imports(dump):
    """The effective config minus the informational list of files (it changes with a drop-in)."""
    dump = copy.copy(dump)
    dump.pop("imports", None)
    return dump


def absolute_imports(text, files, path):
    """The candidate is checked from a private directory on the node, not beside PATH: its relative
    `imports` are given as the absolute paths they stand for beside PATH."""
    entries = parse(text, path).get("imports") or []
    absolute = [files.semantics.absolute(entry, path) for entry in entries]
    return imports_mod.replace_imports(text, absolute, path) if absolute != entries else text


def _guard_cause(files, unintended):
    """The likeliest reason containerd reads the edited files otherwise than planned, from what is known."""
    lost_runtimes = sorted(set(item.split(".runtimes.")[1].split(".")[0] for item in unintended
                               if ".containerd.runtimes." in item and "(would be lost" in item))
    if files.semantics.replaces_plugin_tables and len(files.files) > 1:
        return ("With containerd 1.x an imported file replaces the whole CRI plugin table of the files read before "
                "it; %s loads %s. Edit the file that holds the CRI plugin table (or merge the drop-ins into %s)."
                % (files.root.path, ", ".join(files.paths()), files.root.path))
    if files.semantics.replaces_plugin_tables and lost_runtimes:
        return ("containerd 1.x drops its built-in runtimes (%s) from a file that lists any runtime, and this edit "
                "did not write them out. Define them in %s as `config dump` shows them, and run again."
                % (", ".join(lost_runtimes), files.root.path))
    conflicts = files.version_conflicts()
    if conflicts:
        return ("The loaded files have different `version` headers (%s: %s; %s), which containerd migrates "
                "separately. Give them the same version and run again."
                % (files.root.path, files.root.version,
                   ", ".join("%s: %s" % (config.path, version) for config, version in conflicts)))
    return ("containerd %s reads %s (config version %s) otherwise than this module planned. Compare "
            "`containerd --config %s config dump` with the file, and report the file (credentials removed) if it "
            "is valid." % (files.semantics.name(), ", ".join(files.paths()), files.root.version, files.root.path))


def guard_message(args, edit, files, unintended, problems):
    """Why the guard refused: what would be lost or changed, and the likeliest cause."""
    lines = ["%s: the edit would not do only what was asked in containerd's effective config "
             "(`containerd config dump`), so nothing was written." % ", ".join(edit.changes)]
    if unintended:
        lines.append("Settings that would be lost or changed:")
        lines.extend("  - " + mask_text(item) for item in unintended[:40])
    if problems:
        lines.append("The change would not take effect:")
        lines.extend("  - " + item for item in problems)
    if not unintended:
        return "\n".join(lines)
    if args["drop_in"] and files.semantics.replaces_plugin_tables and args["state"] == "present":
        lines.append(
            "containerd 1.x lets an imported file REPLACE the whole CRI plugin table of the files read before "
            "it, so a drop-in holding only the %r runtime would take sandbox_image, SystemdCgroup, runc and "
            "registry settings away. This module does not copy the whole table into %s (later edits of %s "
            "would then silently stop working). Leave drop_in unset to add the runtime to %s in place, or "
            "upgrade to containerd 2.x, which merges drop-ins key by key."
            % (args["name"], args["drop_in"], files.root.path, files.root.path))
    else:
        lines.append(_guard_cause(files, unintended))
    return "\n".join(lines)
