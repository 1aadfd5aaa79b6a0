# -*- coding: utf-8 -*-
# Copyright: gpunode.nvidia contributors
# Apache License 2.0
"""Planning an edit of the containerd config (controller side, pure): which of the loaded files change
and how, so that containerd reads the runtime where it is written.

Input: the files containerd loads (containerd_imports.Imports), the task's arguments and containerd's
effective config; output: an Edit (path -> new text) and its warnings. Nothing here reads or writes the node.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import posixpath

from ansible_collections.gpunode.nvidia.plugins.plugin_utils.containerd import effective
from ansible_collections.gpunode.nvidia.plugins.plugin_utils.containerd import imports as imports_mod
from ansible_collections.gpunode.nvidia.plugins.plugin_utils.containerd.target import DROPIN_NAME
from ansible_collections.gpunode.nvidia.plugins.module_utils.node.containerd_semantics import deep_merge
from ansible_collections.gpunode.nvidia.plugins.plugin_utils.containerd.runtime_tables import (
    is_builtin_runc, pick_source_runtime, runtime_as_run)
from ansible_collections.gpunode.nvidia.plugins.plugin_utils.containerd.toml_edit import (
    BUILTIN_COMMENT, CREATED_COMMENT, plan_runtime_edit, set_value)
from ansible_collections.gpunode.nvidia.plugins.plugin_utils.containerd.toml_read import ConfigError, parse
from ansible_collections.gpunode.nvidia.plugins.plugin_utils.containerd.toml_render import get_path

# default_runtime_name, relative to the CRI runtime plugin's table.
DEFAULT_KEY = ("containerd", "default_runtime_name")


class Edit(object):
    """What the task changes: path -> new text (None: remove the file), in planning order."""

    def __init__(self, plan, defined_in, warnings):
        self.plan = plan
        self.defined_in = defined_in
        self.warnings = warnings
        self.changes = {}
        self.order = []
        self.runtime = plan.runtime
        self.default_runtime = plan.default_runtime
        # What the edit changes in containerd's effective config (see toml_edit.Plan), over all files.
        self.planned_keys = []
        self.expected_values = {}
        self.add_meaning(plan)

    def add_meaning(self, plan):
        """Add what one file's plan changes in the effective config."""
        self.planned_keys.extend(plan.planned_keys)
        self.expected_values.update(plan.expected_values)

    def set_default(self, config, value):
        """Set default_runtime_name to `value` in another loaded file (where containerd reads it)."""
        self.set(config.path, config.text, set_value(config.text, config.default_runtime_path(), value))
        self.planned_keys.append(DEFAULT_KEY)
        self.expected_values[DEFAULT_KEY] = value

    def set(self, path, original, text):
        if text == original:
            return
        if path not in self.changes:
            self.order.append(path)
        self.changes[path] = text

    @property
    def changed(self):
        return bool(self.changes)

    def write_order(self, root_path):
        """Imported files first (the root never names a missing file), removals after the root."""
        kept = [(p, self.changes[p]) for p in self.order if p != root_path and self.changes[p] is not None]
        root = [(root_path, self.changes[root_path])] if self.changes.get(root_path) is not None else []
        removed = [(p, None) for p in self.order if self.changes[p] is None]
        return kept + root + removed

    def contents(self, files):
        """path -> text of the edited state (None: a removed drop-in; a removed root file reads as empty)."""
        contents = dict((config.path, config.text) for config in files.files)
        contents.update(self.changes)
        if contents[files.root.path] is None:
            contents[files.root.path] = ""
        return contents


def plan_edit(args, files, current, dump):
    """Which files change and how: the runtime is edited where containerd reads it."""
    if args["drop_in"]:
        _check_drop_in(args, files, current)
    if args["state"] == "present":
        return _plan_present(args, files, dump)
    return _plan_absent(args, files, dump)


def _check_drop_in(args, files, current):
    if not posixpath.isabs(args["drop_in"]):
        raise ConfigError("drop_in %s must be an absolute path (containerd resolves a relative import against the "
                          "importing file's directory, and only from 1.7 on for globs)." % args["drop_in"])
    if args["drop_in"] == files.root.path:
        example = posixpath.join(posixpath.dirname(files.root.path), "conf.d", DROPIN_NAME)
        raise ConfigError("drop_in %s is the root config file itself; give a separate file (for example "
                          "%s)." % (args["drop_in"], example))
    if args["state"] == "present" and not current["exists"]:
        raise ConfigError("%s does not exist, so nothing would import drop_in %s. Create the root config first "
                          "(or leave drop_in unset)." % (files.root.path, args["drop_in"]))


def _plan_kwargs(args, files, dump):
    return dict(name=args["name"], binary=args["binary"], set_as_default=args["set_as_default"], cdi=args["cdi"],
                state=args["state"], containerd_version=files.containerd_version, effective=dump)


def _plan_present(args, files, dump):
    name, root = args["name"], files.root
    defined = files.defined_in(name)
    warnings = _version_warnings(files)
    if defined is not None:
        target_path = defined.path
        if args["drop_in"] and defined.path != args["drop_in"]:
            warnings.append("drop_in %s was not used: runtime %r is already defined in %s, which was updated "
                            "instead (a second definition would shadow the first). To move it, remove it first "
                            "(state: absent without drop_in)." % (args["drop_in"], name, defined.path))
    elif args["drop_in"]:
        target_path = args["drop_in"]
    elif files.semantics.replaces_plugin_tables and files.effective_cri_file() not in (None, root):
        target_path = files.effective_cri_file().path  # containerd 1.x reads only that file's CRI table
    else:
        target_path = root.path
    for ignored in files.ignored_definitions(name):
        if ignored.path != target_path:
            warnings.append("%s also defines runtime %r, but containerd 1.x ignores it: %s, loaded later, replaces "
                            "its whole CRI plugin table." % (ignored.path, name, files.effective_cri_file().path))
    target = files.get(target_path)
    _refuse_version_mismatch(files, target_path, target)
    original = target.text if target is not None else None
    text = original if original is not None else _new_drop_in(root)
    kwargs = _plan_kwargs(args, files, dump)
    if target_path != root.path and not files.semantics.replaces_plugin_tables:
        kwargs["source"] = _merged_source(files, name)
    plan = plan_runtime_edit(text, target_path, **kwargs)
    text = plan.text
    edit = Edit(plan, target_path, warnings + list(plan.warnings))
    edit.set(target_path, original, text)
    if args["set_as_default"]:
        _set_default_where_read(edit, files, target_path, name)
    data = parse(text, target_path)
    edit.runtime = get_path(data, plan.cri_path + ("containerd", "runtimes", name))
    if target is None and not files.covers(target_path):
        edit.set(root.path, root.text, imports_mod.add_import(root.text, target_path, root.path))
    return edit


def _plan_absent(args, files, dump):
    name, root = args["name"], files.root
    warnings = _version_warnings(files)
    definitions = files.definitions(name) or [root]
    edit = None
    for config in definitions:
        if config is not root:
            _refuse_version_mismatch(files, config.path, config)
        plan = plan_runtime_edit(config.text, config.path, **_plan_kwargs(args, files, dump))
        if edit is None:
            edit = Edit(plan, None, warnings)
        else:
            edit.add_meaning(plan)
        edit.plan = plan
        edit.runtime = None
        edit.set(config.path, config.text, plan.text)
    for config in files.files:
        if config.default_runtime() == name and config.runtime(name) is None:
            edit.set_default(config, pick_source_runtime(files.merged_runtimes(), "runc", name) or "runc")
    drop_in = files.get(args["drop_in"]) if args["drop_in"] else None
    if drop_in is not None and _holds_nothing_else(files, drop_in, edit.changes.get(drop_in.path, drop_in.text),
                                                   name):
        edit.set(drop_in.path, drop_in.text, None)
        edit.set(root.path, root.text, imports_mod.remove_import(edit.changes.get(root.path, root.text),
                                                                 drop_in.path, root.path))
    if edit.changes.get(root.path) is not None and _holds_nothing(edit.changes[root.path], root.path):
        edit.set(root.path, root.text, None)  # containerd reads no file as it reads one that sets nothing
    return edit


def _holds_nothing(text, path):
    """Whether a file this module created sets nothing but `version` (and holds no other comment)."""
    if not text.startswith(CREATED_COMMENT + "\n"):
        return False
    data = parse(text, path)
    data.pop("version", None)
    return "#" not in text[len(CREATED_COMMENT):] and all(value == {} for value in effective.flatten(data).values())


def _set_default_where_read(edit, files, target_path, name):
    """containerd 2.x reads default_runtime_name from the last file that sets it: change it there too."""
    setter = files.default_set_in()
    if (setter is None or setter.path == target_path or files.semantics.replaces_plugin_tables
            or files.get(target_path) is None or files.index(setter.path) < files.index(target_path)):
        return
    _refuse_version_mismatch(files, setter.path, setter)
    edit.set_default(setter, name)


def _new_drop_in(root):
    """A new drop-in: same `version` as the root file (containerd 2.3.0-2.3.4 refuse a higher one)."""
    return ("# The container runtime added by gpunode.nvidia.containerd_runtime, imported by %s.\n"
            "version = %d\n" % (root.path, root.version))


def _refuse_version_mismatch(files, path, config):
    root_version = files.root.version
    if config is None or config is files.root or config.version == root_version:
        return
    reason = ""
    if config.version > root_version:
        reason = (" containerd 2.3.0 to 2.3.4 refuse to start when an imported file has a higher version than the "
                  "root file.")
    raise ConfigError(
        "%s: refusing to edit this imported file: its `version = %s` differs from the root file %s "
        "(`version = %s`), and this module never writes a drop-in whose version differs from the root's.%s "
        "Migrate the two files to the same version (`containerd config migrate` prints a file in the newest "
        "version), or merge the drop-in into %s, and run again. The files were left unchanged."
        % (path, config.version, files.root.path, root_version, reason, files.root.path))


def _version_warnings(files):
    """Warnings about the loaded files as they are: hidden 1.x settings, drop-ins 2.3.0-2.3.4 refuse."""
    higher = ["%s has `version = %s`, higher than the root file %s (`version = %s`): containerd 2.3.0 to "
              "2.3.4 refuse to start with it. Give both files the same version."
              % (config.path, version, files.root.path, files.root.version)
              for config, version in files.version_conflicts() if version > files.root.version]
    return _hidden_settings_warning(files) + higher


def _merged_source(files, name):
    """containerd 2.x, runtime in a drop-in: (name, table) of the runtime pods use, wherever that one is
    defined (the drop-in alone does not hold it), or None."""
    merged = files.merged_runtimes()
    default = files.default_set_in()
    source_name = pick_source_runtime(merged, default.default_runtime() if default else "runc", name)
    return (source_name, merged[source_name]) if source_name is not None else None


def _holds_nothing_else(files, drop_in, text, name):
    """Whether a drop-in, once the runtime is gone, sets nothing the other files do not already set.
    A default it named `name` and now names a fallback is ours: without the file, the others' default
    (the one pods used before) applies again. So is the runc present wrote out beside the runtime
    (containerd 1.x: a file that lists a runtime replaces the list) while it still runs as the others'
    runc would (containerd's built-in one when they define none)."""
    data = parse(text, drop_in.path)
    data.pop("version", None)
    others = [config for config in files.files if config is not drop_in]
    merged = {}
    for config in others:
        merged = deep_merge(merged, config.data)
    for plugin_name, plugin in (data.get("plugins") or {}).items():
        if not isinstance(plugin, dict) or not isinstance(plugin.get("containerd"), dict):
            continue
        if drop_in.default_runtime() == name:
            plugin["containerd"].pop("default_runtime_name", None)
        runtimes = plugin["containerd"].get("runtimes")
        if BUILTIN_COMMENT in text and isinstance(runtimes, dict) and list(runtimes) == ["runc"] and _runs_as(
                runtimes["runc"], get_path(merged, ("plugins", plugin_name, "containerd", "runtimes", "runc"))):
            del runtimes["runc"]
    for key, value in effective.flatten(data).items():
        if value == {}:
            continue
        if get_path(merged, key) != value and not (key[-1] == "default_runtime_name" and value == "runc"
                                                   and get_path(merged, key) is None):
            return False
    return True


def _runs_as(written_out, others):
    """Whether a runc table written out as containerd ran it runs as the others' table (or the built-in)."""
    if others is None:
        return is_builtin_runc(written_out)
    return runtime_as_run(None, written_out) == runtime_as_run(None, others)


def refuse_unchecked_drop_in(args, edit, files, current):
    """Without the guard, a new runtime-only drop-in is written only where containerd is known to merge it."""
    guarded = args["validate"] and current.get("binary_path")
    if (args["drop_in"] and args["drop_in"] in edit.changes and args["state"] == "present" and not guarded
            and files.semantics.replaces_plugin_tables):
        raise ConfigError(
            "drop_in %s: containerd %s is not known to be 2.x and the effective-config guard cannot run here, "
            "so this module cannot prove the drop-in is safe: containerd 1.x lets an imported file replace the "
            "whole CRI plugin table (sandbox_image, SystemdCgroup, runc and registry settings would be lost). "
            "Leave drop_in unset, or run with containerd installed and validate: true."
            % (args["drop_in"], current.get("binary_version") or "(not found)"))


def hidden_settings(files):
    """containerd 1.x: dotted CRI keys of earlier files that a later file's CRI table hides."""
    effective_file = files.effective_cri_file()
    if not files.semantics.replaces_plugin_tables or effective_file in (None, files.root):
        return []
    shown = effective.flatten(effective_file.data.get("plugins", {}))
    hidden = set()
    for config in files.files[:files.index(effective_file.path)]:
        for key, value in effective.flatten(dict((p, t) for p, t in (config.data.get("plugins") or {}).items()
                                                 if p in imports_mod.CRI_1X_PLUGINS)).items():
            if shown.get(key, _ABSENT) != value:
                hidden.add(effective.dotted(("plugins",) + key))
    return sorted(hidden)


_ABSENT = object()


def _hidden_settings_warning(files):
    hidden = hidden_settings(files)
    if not hidden:
        return []
    return ["containerd 1.x reads the CRI plugin table only from %s (a later import replaces the whole table), so "
            "these settings of earlier files have no effect: %s%s. Copy them into %s or remove that file's CRI "
            "table." % (files.effective_cri_file().path, ", ".join(hidden[:10]),
                        " and %d more" % (len(hidden) - 10) if len(hidden) > 10 else "",
                        files.effective_cri_file().path)]


def effective_default(edit, files, globs):
    """default_runtime_name containerd will use after the edit (runc when no file sets it)."""
    if not edit.changed:
        state = files
    else:
        contents = edit.contents(files)
        state = imports_mod.from_contents(files.root.path, contents, files.containerd_version, globs)
    setter = state.default_set_in()
    return setter.default_runtime() if setter is not None else "runc"
