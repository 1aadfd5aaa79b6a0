# -*- coding: utf-8 -*-
# Copyright: gpunode.nvidia contributors
# Apache License 2.0
"""Plan an in-place edit of a containerd config.toml (controller side).

`plan_runtime_edit` returns the new text and what it means. The invariant
(docs/containerd.md): for any input it either raises ConfigError (file, line,
column, what to do) or returns text that parses, equals the input document
plus exactly the intended change, keeps every line outside the runtime's own
table and the keys asked for, and plans no further change when run again.
Untouched lines stay byte-identical: new lines are spliced into the original
text in the style of the tables around them (sections, dotted keys, inline
tables), values are replaced inside their span, and the result is re-parsed
and compared with the expected document before anyone sees it: an editor
mistake becomes a refusal, never a wrong write.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import copy
import re

from ansible_collections.gpunode.nvidia.plugins.module_utils.node.containerd_semantics import (
    CRI_DISABLE_NAMES, CRI_RUNTIME_PLUGIN, CRI_RUNTIME_PLUGINS, CRI_V3_RUNTIME, cdi_always_on, newest_config_version)
from ansible_collections.gpunode.nvidia.plugins.module_utils.editors.editor_contract import HOW_TO_REPORT
from ansible_collections.gpunode.nvidia.plugins.module_utils.common.toml_reader import toml_type
from ansible_collections.gpunode.nvidia.plugins.plugin_utils.containerd.runtime_tables import (
    INHERITED_KEYS, RUNC_SHIMS, RUNC_TYPE, V1_LINUX_SHIM, binaries_of, binary_keys, desired_runtime,
    inherited_value, is_builtin_runc, is_nvidia_runtime, runtime_as_run)
from ansible_collections.gpunode.nvidia.plugins.plugin_utils.containerd.toml_layout import Layout, ScanError
from ansible_collections.gpunode.nvidia.plugins.plugin_utils.containerd.toml_read import (
    ConfigError, parse, require_tomlkit)
from ansible_collections.gpunode.nvidia.plugins.plugin_utils.containerd.toml_render import (
    blank_line_style, comparable, defining_ancestor, get_path, headers_under, insert_block, insert_dotted,
    insert_table, leaves, pruned, render_keys, render_path, render_value, replace_value, set_path)

# The CRI runtime plugin's table, by config version (field guide §2; the ids: node/containerd_semantics.py).
CRI_PLUGIN = dict((version, ("plugins", plugin)) for version, plugin in CRI_RUNTIME_PLUGIN.items())
CRI_V1_RUNTIME = ("plugins", CRI_V3_RUNTIME)
# Names under which `disabled_plugins` turns the CRI plugin off.
CRI_PLUGIN_IDS = CRI_DISABLE_NAMES
# The CRI runtime plugin as containerd 1.x (v1/v2 configs) and 2.x (v3+) name it in `config dump`.
CRI_DUMP_PLUGINS = CRI_RUNTIME_PLUGINS
BUILTIN_COMMENT = ("containerd's built-in runtime, written out as it runs today: with containerd 1.x "
                   "a file that lists any runtime replaces the built-in list")
# The first line of a file this module creates: state: absent removes the file again once it holds nothing else.
CREATED_COMMENT = "# Created by gpunode.nvidia.containerd_runtime (state: absent removes it when nothing else is set)."
# Written above default_runtime_name only when the previous default cannot be derived from the file.
PREVIOUS_DEFAULT = re.compile(r"^[ \t]*# gpunode\.nvidia: default_runtime_name was (unset|\"([^\"\\\n]*)\")")
PREVIOUS_DEFAULT_COMMENT = "# gpunode.nvidia: default_runtime_name was %s (state: absent restores it)"
# Written above the enable_cdi this module turns on: state: absent gives back the value it found.
PREVIOUS_CDI = re.compile(r"^[ \t]*# gpunode\.nvidia: enable_cdi was (unset|false) ")
PREVIOUS_CDI_COMMENT = "# gpunode.nvidia: enable_cdi was %s (state: absent restores it)"
# containerd 2.x reads these keys of a version 2 file's [...containerd] table only when that file has a
# `runtimes` table (its migration to io.containerd.cri.v1.images is keyed on it; verified with 2.1.9's
# `config dump`), with the value containerd uses without them.
RUNTIMES_GATED_KEYS = (("snapshotter", "overlayfs"), ("disable_snapshot_annotations", True),
                       ("discard_unpacked_layers", False))
_NOT_SET = object()
BUG_REPORT = ("The file was left unchanged. This is a bug in gpunode.nvidia.containerd_runtime: %s, "
              "with the file attached (credentials removed)." % HOW_TO_REPORT)


class Plan(object):
    warnings = ()
    # What the edit means in containerd's effective config, relative to the CRI runtime plugin's table:
    # the keys it changes (the guard accepts differences at, under or above them, and nowhere else) and
    # the values containerd must show for the keys it sets.
    planned_keys = ()
    expected_values = None

    def __init__(self, original, text, data, version, cri_path, name, runtime, default_runtime, source_runtime):
        self.original = original
        self.text = text
        self.data = data
        self.version = version
        self.cri_path = cri_path
        self.name = name
        self.runtime = runtime
        self.default_runtime = default_runtime
        self.source_runtime = source_runtime

    @property
    def changed(self):
        return self.text != self.original

    @property
    def cri_plugin(self):
        return self.cri_path[1]


# ---------------------------------------------------------------- reading


def default_version(containerd_version):
    """Config version for a new file: the one `containerd config default` writes (3 for containerd 2.0 to 2.2,
    4 from 2.3), else 2 (read by 1.x and 2.x alike)."""
    major = _major(containerd_version)
    if major is None or major < 2:
        return 2
    return newest_config_version(containerd_version)


def release_of(version):
    match = re.search(r"\d+\.\d+(\.\d+)?", version or "")
    return match.group(0) if match else version


def _major(version):
    match = re.search(r"(\d+)\.\d+", version or "")
    return int(match.group(1)) if match else None


def config_version(data, layout, path):
    version = data.get("version", 1)
    entry = layout.key(("version",))
    if isinstance(version, bool) or not isinstance(version, int):
        raise ConfigError(
            "%s: line %s: `version` must be an integer (1, 2, 3 or 4), found %r. "
            "The file was left unchanged." % (path, entry.line if entry else "?", version)
        )
    if version not in CRI_PLUGIN:
        raise ConfigError("%s: line %s: config version %d is not supported (1 to 4 are). The file was left "
                          "unchanged." % (path, entry.line if entry else "?", version))
    return version


def check_cri_enabled(data, layout, path):
    listed = data.get("disabled_plugins") or []
    disabled = [p for p in listed if isinstance(p, str) and p in CRI_PLUGIN_IDS] if isinstance(listed, list) else []
    if disabled:
        entry = layout.key(("disabled_plugins",))
        raise ConfigError(
            "%s: line %s: disabled_plugins lists %s, so this containerd runs without its CRI plugin and "
            "Kubernetes cannot use it at all (packages built for Docker-only hosts ship this). Remove %s from "
            "disabled_plugins, restart containerd, and run again. The file was left unchanged."
            % (path, entry.line if entry else "?", ", ".join('"%s"' % p for p in disabled),
               " and ".join('"%s"' % p for p in disabled))
        )


def cri_table(data, version, layout, path, containerd_version):
    """The CRI runtime table containerd of the installed version reads from this file.

    A v1/v2 file may hold `io.containerd.cri.v1.runtime` tables (cloud node images ship such files):
    containerd 2.x reads them and ignores the v1/v2 runtime settings; 1.x ignores them (verified
    with `config dump` on 1.6.20, 1.7.24 and 2.1.9, tests/integration/test_containerd_versions.py).
    """
    plugins = data.get("plugins")
    major = _major(containerd_version)
    if version == 1 and major is not None and major >= 2:
        # containerd 2.x reads none of a version 1 file's [plugins.cri] settings (`config dump` calls them
        # unknown keys), but it reads io.containerd.cri.v1.runtime tables from it (verified on 2.1.9).
        return CRI_V1_RUNTIME
    newest = newest_config_version(containerd_version)
    if newest is not None and version > newest:
        entry = layout.key(("version",))
        raise ConfigError(
            "%s: line %s: containerd %s does not start with a version %d file (it reads versions 1 to %d; this "
            "file was written for a newer containerd). Write it as a version %d file (`containerd config default` "
            "shows the layout) or install the containerd it was written for, and run again. The file was left "
            "unchanged." % (path, entry.line if entry else "?", release_of(containerd_version), version, newest, newest))
    schema = version
    if version >= 3 and major is not None and major < 2:
        schema = 2  # containerd 1.6 reads any newer header as version 2: [plugins."io.containerd.grpc.v1.cri"]
    if schema >= 3 or not isinstance(plugins, dict) or CRI_V1_RUNTIME[1] not in plugins:
        return CRI_PLUGIN[schema]
    if major is not None and major >= 2:
        return CRI_V1_RUNTIME
    where = _position(layout, CRI_V1_RUNTIME)
    declared = render_path(CRI_PLUGIN[schema], '"')
    if major is None:
        raise ConfigError(
            "%s: %s: this version %d file configures the CRI runtime under [%s], a table only containerd "
            "2.x reads (containerd 1.x reads [%s] and ignores it), and the installed containerd's version is "
            "unknown, so which table takes effect cannot be told. Let the module find containerd "
            "(containerd_binary, validate: true), or write `version = 3` if this node runs containerd 2.x. "
            "The file was left unchanged." % (path, where, version, render_path(CRI_V1_RUNTIME, '"'), declared))
    raise ConfigError(
        "%s: %s: this version %d file configures the CRI runtime under [%s], which containerd %s ignores "
        "(containerd 1.x reads only [%s]; the file was written for containerd 2.x): its runtime settings "
        "are not in effect on this node. Move them under [%s] (or install containerd 2.x) and run again. "
        "The file was left unchanged."
        % (path, where, version, render_path(CRI_V1_RUNTIME, '"'), release_of(containerd_version), declared, declared))


def _position(layout, table_path):
    """'line L, column C' of the first entry at or under `table_path`."""
    for entry in layout.under(table_path) or layout.entries[:1]:
        return "line %d, column %d" % (entry.line, entry.column())
    return "line ?"


def effective_runtimes(dump):
    """The runtimes table of a `config dump` (name -> table), or {}."""
    plugins = (dump or {}).get("plugins", {})
    for plugin in CRI_DUMP_PLUGINS:
        table = get_path(plugins, (plugin, "containerd", "runtimes"))
        if isinstance(table, dict) and table:
            return table
    return {}


def _require_tables(data, layout, table_path, path, what):
    """Refuse when a table on `table_path` holds another type (containerd would not load it either)."""
    for size in range(1, len(table_path) + 1):
        value = get_path(data, table_path[:size])
        if value is not None and not isinstance(value, dict):
            entry = (layout.key(table_path[:size]) or layout.array_ancestor(table_path[:size])
                     or layout.inline_ancestor(table_path[:size]))
            where = "line %d, column %d" % (entry.line, entry.column()) if entry else "line ?"
            kind = "an array of tables" if isinstance(value, list) and layout.array_ancestor(
                table_path[:size]) else toml_type(value)
            raise ConfigError(
                "%s: %s: %s must be a table (it is %s), so containerd cannot read %s from it. Fix that "
                "key and run again. The file was left unchanged."
                % (path, where, render_path(table_path[:size], '"'), kind, what))


# ---------------------------------------------------------------- planning


class _Text(object):
    """The document being edited: LF text (a CRLF file is edited as LF and written back as CRLF)."""

    def __init__(self, original):
        self.bom = original.startswith(u"\ufeff")
        body = original[1:] if self.bom else original
        self.crlf = "\r\n" in body and body.count("\r\n") == body.count("\n")
        self.body = body  # what the parser reads
        self.text = body.replace("\r\n", "\n") if self.crlf else body

    def output(self, text):
        if self.crlf:
            text = text.replace("\n", "\r\n")
        return (u"\ufeff" if self.bom else "") + text

    def parseable(self, output):
        return output[1:] if self.bom else output


def plan_runtime_edit(text, path, name="nvidia", binary="/usr/bin/nvidia-container-runtime",
                      set_as_default=False, cdi=False, state="present", containerd_version=None,
                      effective=None, source=None):
    """Return a Plan for adding, updating or removing runtime `name` in config text.

    `effective` is containerd's `config dump` of the current file, when known; `source` a (name, table)
    of the runtime pods use when another file defines it (a drop-in). Raises ConfigError only.
    """
    require_tomlkit()
    doc = _Text(text)
    data = parse(doc.body, path)
    layout = _layout(doc.text, path)
    work = doc.text
    if not layout.entries:
        if state != "present":
            return Plan(text, text, data, default_version(containerd_version), CRI_PLUGIN[default_version(
                containerd_version)], name, None, "runc", None)
        version = default_version(containerd_version)
        work = _with_version(work, version)
        data = {"version": version}
    else:
        version = config_version(data, layout, path)
    check_cri_enabled(data, layout, path)
    cri = cri_table(data, version, layout, path, containerd_version)
    edit = _Edit(work, data, cri, name, path, containerd_version, effective)
    edit.source_override = source
    if state == "present":
        edit.present(binary, set_as_default, cdi)
    else:
        edit.absent(keep_cdi=cdi)
    output = doc.output(edit.text)
    new_data = _verify(doc.parseable(output), edit.expected, path)
    new_default = get_path(new_data, edit.default_path)
    plan = Plan(text, output, new_data, version, cri, name, edit.runtime,
                new_default if isinstance(new_default, str) else "runc", edit.source_name)
    plan.planned_keys = tuple(key[len(cri):] for key in edit.planned_keys)
    plan.expected_values = dict((key[len(cri):], value) for key, value in edit.expected_values.items())
    plan.warnings = edit.warnings + _v1_file_warnings(data, version, cri, path, containerd_version, name, state)
    return plan


def _v1_file_warnings(data, version, cri, path, containerd_version, name, state):
    """A version 1 file's warnings: its [plugins.cri] settings are ignored by the installed containerd 2.x, or
    may be (its version is unknown)."""
    if version == 1 and cri == CRI_PLUGIN[1] and _major(containerd_version) is None:
        return ["%s is a version 1 file and the installed containerd's version is unknown, so it was edited where "
                "containerd 1.x reads it ([plugins.cri]). containerd 2.x ignores every [plugins.cri] setting of a "
                "version 1 file: on a containerd 2.x node, let the module find containerd (containerd_binary) and "
                "run again, or migrate the file (`containerd config migrate`)." % path]
    if version != 1 or cri != CRI_V1_RUNTIME or not isinstance(get_path(data, CRI_PLUGIN[1]), dict):
        return []
    where = render_path(CRI_V1_RUNTIME, '"')
    if state == "present":
        return ["%s is a version 1 file: containerd %s ignores its [plugins.cri] settings (`containerd config dump` "
                "lists them as unknown keys), so the runtime was written under [%s], which it reads. Migrate the "
                "file (`containerd config migrate`) to bring the other [plugins.cri] settings into effect."
                % (path, release_of(containerd_version), where)]
    if not isinstance(get_path(data, CRI_PLUGIN[1] + ("containerd", "runtimes", name)), dict):
        return []
    return ["%s is a version 1 file: containerd %s ignores its [plugins.cri] settings, so %s is not in effect there "
            "and was removed only from [%s], which it reads. Its [plugins.cri] table still defines %s: "
            "`containerd config migrate` would bring it back into effect. Remove that table by hand before "
            "migrating the file." % (path, release_of(containerd_version), name, where, name)]


def _layout(text, path):
    try:
        return Layout(text)
    except (ScanError, ValueError, IndexError) as exc:
        raise ConfigError("%s: could not locate the entries of this (valid) file: %s. %s" % (path, exc, BUG_REPORT))


def _verify(output, expected, path):
    """The post-condition: the output parses and equals the expected document."""
    try:
        new_data = parse(output, path)
    except ConfigError:
        new_data = None
    if new_data is None or comparable(pruned(new_data)) != comparable(pruned(expected)):
        raise ConfigError(
            "%s: could not edit this file in place without side effects (the edited text would not equal the "
            "original document plus the runtime). %s" % (path, BUG_REPORT))
    return new_data


class _Edit(object):
    """One planned edit: the text, the document it must equal, and what was decided."""

    @property
    def layout(self):
        """The layout of the text as it is now: scanned again only after the text changed."""
        cached = getattr(self, "_layout_of", None)
        if cached is None or cached[0] is not self.text:
            cached = self._layout_of = (self.text, Layout(self.text))
        return cached[1]

    def __init__(self, text, data, cri, name, path, containerd_version, effective):
        self.text = text
        self.data = data
        self.expected = copy.deepcopy(data)
        self.cri = cri
        self.name = name
        self.path = path
        self.containerd_version = containerd_version
        self.effective = effective
        self.runtimes_path = cri + ("containerd", "runtimes")
        self.default_path = cri + ("containerd", "default_runtime_name")
        self.legacy_default_path = cri + ("containerd", "default_runtime")
        self.runtime = None
        self.source_name = None
        self.source_override = None
        self.binary_name = None
        self.warnings = []
        self.planned_keys = []
        self.expected_values = {}
        self._added_tables = []  # (key path, marker pattern) of tables present added for one key
        layout = Layout(text)
        _require_tables(data, layout, self.runtimes_path, path, "runtimes")
        runtimes = get_path(data, self.runtimes_path) or {}
        for runtime_name, table in runtimes.items():
            _require_tables(data, layout, self.runtimes_path + (runtime_name, "options"), path,
                            "the options of runtime %s" % runtime_name)
        self.runtimes = runtimes
        default = get_path(data, self.default_path)
        if default is not None and not isinstance(default, str):
            entry = layout.key(self.default_path)
            raise ConfigError("%s: %s: default_runtime_name must be a string naming a runtime, not %s. Fix it and "
                              "run again. The file was left unchanged."
                              % (path, "line %d, column %d" % (entry.line, entry.column()) if entry else "line ?",
                                 toml_type(default)))
        self.default_name = default
        legacy = get_path(data, self.legacy_default_path)
        self.legacy_default = legacy if isinstance(legacy, dict) and legacy.get("runtime_type") else None

    # -- decisions

    def _builtin(self, name):
        """containerd's own table of runtime `name` as it runs today (from `config dump`)."""
        return self._effective_table(name) or {"runtime_type": RUNC_TYPE}

    def _effective_table(self, name):
        """Runtime `name` (or the deprecated default_runtime table) as containerd runs it, or None."""
        if name != "default_runtime":
            return effective_runtimes(self.effective).get(name) or None
        for plugin in CRI_DUMP_PLUGINS:
            table = get_path(self.effective, ("plugins", plugin, "containerd", "default_runtime"))
            if isinstance(table, dict):
                return table
        return None

    def _runnable_source(self):
        """(name, table) the new runtime copies: the runtime pods use today, as containerd runs it. A shim
        that does not run an OCI runtime binary (kata & co) cannot run the NVIDIA one: runc's table is
        copied instead, and the warning says so."""
        name, table = self.source_override or self._source()
        table = runtime_as_run(table, self._effective_table(name))
        shim = table.get("runtime_type") or RUNC_TYPE
        if shim in RUNC_SHIMS or (shim == V1_LINUX_SHIM and _replaces_builtin_runtimes(self.containerd_version)):
            return name, table
        fallback, table = self._runc_shim_runtime()
        self.warnings.append(
            "%s: runtime %r, which pods use today, runs shim %s, which %s, so it cannot run %s; runtime %r "
            "uses the runc shim (%s) with %s instead. "
            "Check that its options.SystemdCgroup (%s) matches kubelet's cgroup driver, or define runtime %r "
            "yourself with the settings it needs."
            % (self.path, name, shim, "containerd 2.x does not have (it was containerd 1.x's v1 shim)"
               if shim == V1_LINUX_SHIM else "does not start an OCI runtime binary (options.BinaryName)",
               self.binary_name or "the NVIDIA runtime", self.name, table["runtime_type"],
               "the settings of runtime %r" % fallback if fallback else "containerd's defaults",
               str(get_path(table, ("options", "SystemdCgroup"), False)).lower(), self.name))
        return fallback, table

    def _runc_shim_runtime(self):
        """(name, table) of `runc` as containerd runs it, when that is a runc shim; else (None, defaults)."""
        runc = runtime_as_run(self.runtimes.get("runc"), self._effective_table("runc"))
        if "runc" != self.name and runc and (runc.get("runtime_type") or RUNC_TYPE) in RUNC_SHIMS:
            return "runc", dict(runc, runtime_type=runc.get("runtime_type") or RUNC_TYPE)
        return None, {"runtime_type": RUNC_TYPE}

    def _source(self):
        """(name, table) of the runtime pods use today, which the new runtime copies."""
        if self.legacy_default is not None:
            return "default_runtime", self.legacy_default
        default = self.default_name
        if default == self.name:  # ours already: the source is what pods used before it
            recorded = self._recorded_previous()
            if recorded is _NOT_RECORDED:
                return self._source_named(self._derived_previous(self.data) or "runc")
            default = recorded
        table = self.runtimes.get(default) if default else None
        if default and default != self.name and isinstance(table, dict) and not is_nvidia_runtime(default, table):
            return default, table
        if default in (None, "runc"):
            return self._source_named("runc")
        # The default is another nvidia runtime: the source is the runtime it was copied from.
        return self._source_named(self._derived_previous(self.data, default) or "runc")

    def _source_named(self, source_name):
        """(name, table) of a source runtime: the file's table, else containerd's built-in runc."""
        table = self.runtimes.get(source_name) if source_name != self.name else None
        return source_name, table if isinstance(table, dict) else {"runtime_type": RUNC_TYPE}

    def _recorded_previous(self):
        """The default recorded above default_runtime_name (None: unset), or _NOT_RECORDED."""
        marker = (self._marker(self.default_path, PREVIOUS_DEFAULT)
                  or self._marker_of_added_table(self.default_path, PREVIOUS_DEFAULT))
        if marker is None:
            return _NOT_RECORDED
        match = PREVIOUS_DEFAULT.match(marker[2])
        return match.group(2) if match.group(1) != "unset" else None

    def _marker(self, key_path, pattern):
        """(start, end, line text) of the comment line just above the key at `key_path`, if it is ours."""
        return self._marker_above(self.layout.key(key_path), pattern)

    def _marker_above(self, entry, pattern):
        """(start, end, line text) of the comment line just above `entry` (a key or header), if it is ours."""
        if entry is None or entry.start == 0:
            return None
        start = self.text.rfind("\n", 0, entry.start - 1) + 1
        line = self.text[start:entry.start]
        return (start, entry.start, line) if pattern.match(line) else None

    def _derived_previous(self, data, reference=None):
        """What `absent` restores without a record: the runtime whose inherited options the `reference`
        runtime (ours by default) matches: the file's runc, else containerd's built-in runc (None: no
        key), then the other non-nvidia runtimes in file order; without a match, runc."""
        runtimes = get_path(data, self.runtimes_path) or {}
        reference = reference or self.name
        ours = runtimes.get(reference)
        runc = runtimes.get("runc")
        runc_usable = "runc" not in (self.name, reference) and isinstance(runc, dict) and not is_nvidia_runtime(
            "runc", runc)
        if not isinstance(ours, dict):
            return "runc" if runc_usable else None
        candidates = [("runc", runc)] if runc_usable else [(None, {"runtime_type": RUNC_TYPE})]
        candidates += [(n, t) for n, t in runtimes.items() if n not in ("runc", self.name, reference)
                       and isinstance(t, dict) and not is_nvidia_runtime(n, t)]
        for candidate, table in candidates:
            if all(inherited_value(table, key) == inherited_value(ours, key) for key in INHERITED_KEYS):
                return candidate
        return "runc" if runc_usable else None

    # -- present

    def present(self, binary, set_as_default, cdi):
        if set_as_default and self.legacy_default is not None:
            layout = self.layout
            raise ConfigError(
                "%s: %s: this file sets the deprecated `default_runtime` table, which containerd turns into "
                "the default runtime (named \"default\") whatever default_runtime_name says, so %s cannot "
                "become the default. Move that table to [%s.default] with default_runtime_name = \"default\" "
                "(same keys), or run without set_as_default. The file was left unchanged."
                % (self.path, _position(layout, self.legacy_default_path), self.name,
                   render_path(self.runtimes_path, '"')))
        self.binary_name = binary
        self._refuse_runtimes_gated_settings()
        self.source_name, source = self._runnable_source()
        # containerd 1.x: a file that lists any runtime replaces the built-in list, so the runtime
        # pods use today (or, beside a deprecated default_runtime table, runc) is written out as
        # containerd runs it now, or it would vanish.
        builtin_name = "runc" if self.source_name in ("default_runtime", None) else self.source_name
        write_builtin = (not self.runtimes and builtin_name != self.name
                         and _replaces_builtin_runtimes(self.containerd_version))
        builtin = self._builtin(builtin_name) if write_builtin else None
        existing = self.runtimes.get(self.name)
        self.runtime = desired_runtime(existing, source, binary)
        runtime_path = self.runtimes_path + (self.name,)
        # Parent keys first, so that a new runtime table nests under any header they add.
        if cdi:
            self._turn_on_cdi()
        if set_as_default:
            self._plan(self.default_path, self.name)
        if set_as_default and self.default_name != self.name:
            added_table = self._set_in_table(self.default_path, self.name)
            planned = copy.deepcopy(self.expected)
            if write_builtin:
                set_path(planned, self.runtimes_path + (builtin_name,), builtin)
            set_path(planned, runtime_path, self.runtime)
            if added_table is not None:
                self._write_marker_above(added_table, PREVIOUS_DEFAULT_COMMENT % "unset")
            elif self._derived_previous(planned) != self.default_name:
                self._write_default_marker(self.default_name)
        if write_builtin:
            self._add_table(self.runtimes_path + (builtin_name,), builtin, None, comment=BUILTIN_COMMENT)
            set_path(self.expected, self.runtimes_path + (builtin_name,), builtin)
            self.runtimes = {builtin_name: builtin}
        if existing is None:
            after = self.source_name if self.source_name in self.runtimes else (
                builtin_name if builtin_name in self.runtimes else None)
            self._add_table(runtime_path, self.runtime, after)
        else:
            self._update_runtime(runtime_path, existing, self.runtime)
        set_path(self.expected, runtime_path, self.runtime)
        self.planned_keys.append(runtime_path)
        for key in binary_keys(self.runtime):
            self.expected_values[runtime_path + key] = binary

    def _plan(self, key_path, value=_NOT_SET):
        """Record a key the edit changes in containerd's effective config (and the value it must show)."""
        self.planned_keys.append(key_path)
        if value is not _NOT_SET:
            self.expected_values[key_path] = value

    def _turn_on_cdi(self):
        """enable_cdi = true, with a line recording what it was, so that state: absent gives that back."""
        key_path = self.cri + ("enable_cdi",)
        if cdi_always_on(self.containerd_version):
            self._cdi_always_on(key_path)
            return
        self._plan(key_path, True)
        previous = get_path(self.data, key_path)
        if previous is True:
            return
        added_table = self._set_in_table(key_path, True)
        line = PREVIOUS_CDI_COMMENT % ("unset" if previous is None else "false")
        if added_table is not None:
            self._write_marker_above(added_table, line)
        else:
            self._write_marker(key_path, line)

    def _cdi_always_on(self, key_path):
        """containerd 2.4 removed enable_cdi and always runs CDI (RELEASES.md): the request holds without the key."""
        entry = self.layout.key(key_path)
        found = (" %s line %d still sets enable_cdi = %s, a key containerd 2.4 removed (deprecated since 2.2): "
                 "delete it." % (self.path, entry.line, render_value(get_path(self.data, key_path)))
                 if entry is not None else "")
        self.warnings.append("cdi: containerd %s always enables CDI (it removed `enable_cdi`), so the file was not "
                             "edited for it.%s" % (release_of(self.containerd_version), found))

    def _set_in_table(self, key_path, value):
        """Set a key; the path of its table when that table's header was added for it, else None."""
        table_path = key_path[:-1]
        had_header = self.layout.header(table_path) is not None
        self._set(key_path, value)
        return table_path if not had_header and self.layout.header(table_path) is not None else None

    def _write_marker_above(self, table_path, line):
        """Our line above a header present added (absent then removes the header with the key)."""
        header = self.layout.header(table_path)
        self.text = insert_block(self.text, header.start, header.indent + line + "\n")

    def _refuse_runtimes_gated_settings(self):
        """containerd 2.x: the first runtime table of a version 2 file brings settings into effect that it
        ignores today (see RUNTIMES_GATED_KEYS); that is not this edit's to do."""
        containerd_path = self.cri + ("containerd",)
        if (_replaces_builtin_runtimes(self.containerd_version) or self.cri != CRI_PLUGIN[2]
                or get_path(self.data, self.runtimes_path) is not None):
            return
        table = get_path(self.data, containerd_path) or {}
        gated = [(key, table[key], default) for key, default in RUNTIMES_GATED_KEYS
                 if key in table and table[key] != default]
        if not gated:
            return
        entry = self.layout.key(containerd_path + (gated[0][0],))
        raise ConfigError(
            "%s: line %s: containerd %s ignores %s in this version 2 file today (it reads them only from a file "
            "that has a [%s] table, and this one has none), so adding runtime %r would bring %s into effect (it "
            "runs %s now). Remove %s (or, to use %s, add an empty [%s] table yourself and restart containerd "
            "first), and run again. The file was left unchanged."
            % (self.path, entry.line if entry else "?", release_of(self.containerd_version),
               " and ".join(key for key, _value, _default in gated), render_path(self.runtimes_path, '"'), self.name,
               ", ".join("%s = %s" % (key, render_value(value)) for key, value, _default in gated),
               ", ".join("%s = %s" % (key, render_value(default)) for key, _value, default in gated),
               "them" if len(gated) > 1 else "it", "them" if len(gated) > 1 else "it",
               render_path(self.runtimes_path, '"')))

    def _write_marker(self, key_path, line):
        """Write comment `line` just above the key at `key_path`."""
        entry = self.layout.key(key_path)
        self.text = insert_block(self.text, entry.start, entry.indent + line + "\n")

    def _write_default_marker(self, previous):
        label = "unset" if previous is None else '"%s"' % previous
        if previous is not None and ('"' in previous or "\\" in previous or "\n" in previous):
            raise ConfigError("%s: line %d: the current default_runtime_name %r cannot be recorded for state: "
                              "absent; rename that runtime and run again. The file was left unchanged."
                              % (self.path, self.layout.key(self.default_path).line, previous))
        self._write_marker(self.default_path, PREVIOUS_DEFAULT_COMMENT % label)

    def _update_runtime(self, runtime_path, existing, desired):
        layout = self.layout
        inline = layout.key(runtime_path)
        if inline is not None:
            # Written as one inline table: that line is the runtime's own, rewrite its value.
            self.text = replace_value(self.text, inline, desired)
            return
        for key_path, value in leaves(desired):
            if get_path(existing, key_path) != value:
                holder = self.layout.inline_ancestor(runtime_path + key_path)
                if holder is not None and holder.path[:len(runtime_path)] == runtime_path:
                    # An inline table inside the runtime's own table (options = { ... }): its line is ours.
                    self.text = replace_value(self.text, holder, get_path(desired, holder.path[len(runtime_path):]))
                else:
                    self._set(runtime_path + key_path, value, update_expected=False)

    # -- absent

    def absent(self, keep_cdi=False):
        runtime_path = self.runtimes_path + (self.name,)
        written_out_removed = False
        if self.name in self.runtimes:
            previous = _NOT_RECORDED
            if self.default_name == self.name:
                previous = self._recorded_previous()
                if previous is _NOT_RECORDED:
                    previous = self._derived_previous(self.data)
            self.source_name = previous if previous is not _NOT_RECORDED else None
            binaries = binaries_of(self.runtimes[self.name])
            self._remove_tree(runtime_path)
            del get_path(self.expected, self.runtimes_path)[self.name]
            self._plan(runtime_path)
            if self.default_name == self.name:
                self._restore_default(previous)
            self._forget_binaries_in_legacy_default(binaries)
            written_out_removed = self._remove_written_out_builtin()
        self._restore_cdi(keep_cdi)
        self._remove_emptied_tables(keep_runtimes_header=written_out_removed)
        self._remove_added_tables()

    def _restore_cdi(self, keep):
        """The enable_cdi present turned on (its marker line says so) goes back to what present found,
        unless `keep` (cdi: true) asks for CDI to stay on."""
        key_path = self.cri + ("enable_cdi",)
        marker = self._marker(key_path, PREVIOUS_CDI)
        table_marker = None if marker is not None else self._marker_of_added_table(key_path, PREVIOUS_CDI)
        if marker is None and table_marker is None:
            return
        if keep or marker is not None:
            start, end = (marker or table_marker)[:2]
            self.text = self.text[:start] + self.text[end:]
        if keep:
            return
        if table_marker is not None:
            self._remove_added_table(key_path, PREVIOUS_CDI)
            self._plan(key_path)  # unset again: containerd's default (false on 1.7, true on 2.x)
        elif PREVIOUS_CDI.match(marker[2]).group(1) == "unset":
            self._remove_key(key_path)
            self._plan(key_path)
        else:
            self._set(key_path, False)
            self._plan(key_path, False)

    def _marker_of_added_table(self, key_path, pattern):
        """(start, end, line) of our line above the header of `key_path`'s table when present added that
        header for the key (the key alone right under it, and unset before), or None."""
        layout = self.layout
        header, key = layout.header(key_path[:-1]), layout.key(key_path)
        if (header is None or key is None or layout.section_keys(header) != [key]
                or self.text[header.end:key.start].strip()):
            return None
        marker = self._marker_above(header, pattern)
        if marker is None or pattern.match(marker[2]).group(1) != "unset":
            return None
        return marker

    def _remove_added_table(self, key_path, pattern):
        """Plan the removal of our line, the header present added and the key under it (done last, when the
        file is back to the layout present saw: see _remove_added_tables)."""
        self._added_tables.append((key_path, pattern))
        del get_path(self.expected, key_path[:-1])[key_path[-1]]

    def _remove_added_tables(self):
        for key_path, pattern in self._added_tables:
            layout = self.layout
            start, end = self._marker_of_added_table(key_path, pattern)[0], layout.key(key_path).end
            # The blank line present wrote with the table, in the file's style without it (as present saw it):
            # after it when the table went before its first sub-table, else before it.
            following = [entry for entry in layout.entries if entry.is_header and entry.start >= end][:1]
            if blank_line_style(Layout(self.text[:start] + self.text[end:])):
                if (following and following[0].path[:len(key_path) - 1] == key_path[:-1]
                        and self.text[end:].startswith("\n")):
                    end += 1
                elif self.text[:start].endswith("\n\n"):
                    start -= 1
            self.text = self.text[:start] + self.text[end:]

    def _forget_binaries_in_legacy_default(self, binaries):
        """A deprecated default_runtime table that runs the removed runtime's binary runs runc again
        (the v1 shim's and runc shim's default when Runtime/BinaryName/runtime_engine are unset)."""
        if self.legacy_default is None:
            return
        for key in (("options", "BinaryName"), ("options", "Runtime"), ("runtime_engine",)):
            key_path = self.legacy_default_path + key
            if get_path(self.expected, key_path) in binaries:
                self._remove_key(key_path)
                self._plan(key_path)

    def _remove_written_out_builtin(self):
        """The runc that present wrote out (containerd 1.x would have dropped it) goes once it is alone
        again and still as containerd builds it: containerd's own runc takes its place. True when it went."""
        runc_path = self.runtimes_path + ("runc",)
        remaining = get_path(self.expected, self.runtimes_path)
        if (self.name == "runc" or not isinstance(remaining, dict) or list(remaining) != ["runc"]
                or not is_builtin_runc(remaining["runc"])):
            return False
        first = self.layout.under(runc_path)[0]  # its header, or its first dotted key
        start = self.text.rfind("\n", 0, max(first.start - 1, 0)) + 1
        if self.text[start:first.start].strip() != "# " + BUILTIN_COMMENT:
            return False
        self.text = self.text[:start] + self.text[first.start:]
        self._remove_tree(runc_path)
        del remaining["runc"]
        return True

    def _remove_emptied_tables(self, keep_runtimes_header=False):
        """The `containerd` and CRI table headers present added for default_runtime_name and enable_cdi go
        once empty again; so does an emptied `runtimes` table where containerd 1.x may read it (as "no
        runtime at all": it refuses to start), unless it held only the runc present wrote out (present
        never writes that header: it was the user's, and on 2.x it decides which settings are read)."""
        emptied = ((self.runtimes_path,) if _replaces_builtin_runtimes(self.containerd_version)
                   and not keep_runtimes_header else ())
        for table_path in emptied + (self.cri + ("containerd",), self.cri):
            layout = self.layout
            header = layout.header(table_path)
            if (header is not None and layout.under(table_path) == [header] and get_path(self.data, table_path)
                    and not pruned(get_path(self.expected, table_path))):
                self._remove_tree(table_path)

    def _remove_key(self, key_path):
        layout = self.layout
        self._refuse_inline(key_path, layout)
        entry = layout.key(key_path)
        self.text = self.text[:entry.start] + self.text[entry.end:]
        del get_path(self.expected, key_path[:-1])[key_path[-1]]

    def _restore_default(self, previous):
        self._plan(self.default_path, "runc" if previous is None else previous)
        marker = self._marker(self.default_path, PREVIOUS_DEFAULT)
        if marker is None:
            added_table = self._marker_of_added_table(self.default_path, PREVIOUS_DEFAULT)
            if added_table is not None:
                self._remove_added_table(self.default_path, PREVIOUS_DEFAULT)
                return
        if marker is not None:
            self.text = self.text[:marker[0]] + self.text[marker[1]:]
        if previous is None:
            self._remove_key(self.default_path)
        else:
            self._set(self.default_path, previous)

    # -- text edits

    def _set(self, key_path, value, update_expected=True):
        """Set one key: replace its value in place, or add it in the style of its table."""
        layout = self.layout
        self._refuse_inline(key_path, layout)
        entry = layout.key(key_path)
        if entry is not None:
            self.text = replace_value(self.text, entry, value)
        else:
            self._add(key_path[:-1], {key_path[-1]: value}, layout)
        if update_expected:
            set_path(self.expected, key_path, value)

    def _add_table(self, table_path, table, after_name, comment=None):
        """Add a new table (a runtime) beside `after_name`'s, in that runtime's style."""
        layout = self.layout
        self._refuse_inline(table_path, layout)
        if after_name is not None:
            sibling = self.runtimes_path + (after_name,)
            entry = layout.key(sibling)
            if entry is not None:  # the sibling is one inline table: add ours as one more line beside it
                relative = entry.path[len(entry.table):-1] + (table_path[-1],)
                line = "%s%s = %s\n" % (entry.indent, render_path(relative, layout.quote_char()), render_value(table))
                self.text = insert_block(self.text, entry.end, line)
                return
            dotted = layout.dotted_entries(sibling)
            if dotted and layout.header(sibling) is None and not headers_under(layout, sibling):
                self.text = insert_dotted(self.text, layout, dotted, table_path, table)
                return
        self._add(table_path, table, layout, after=(self.runtimes_path + (after_name,)) if after_name else None,
                  comment=comment, whole_table=True)

    def _add(self, table_path, table, layout, after=None, comment=None, whole_table=False):
        """Add keys (`table`) to the table at `table_path`, creating it in the style of its parents."""
        header = layout.header(table_path)
        if header is not None and not whole_table:
            keys = layout.section_keys(header)
            offset = keys[-1].end if keys else header.end
            indent = keys[-1].indent if keys else header.indent + layout.indent_step()
            self.text = insert_block(self.text, offset, render_keys((), table, indent, layout.quote_char()))
            return
        dotted = layout.dotted_entries(table_path)
        if dotted and not whole_table:
            self.text = insert_dotted(self.text, layout, dotted, table_path, table)
            return
        anchor = defining_ancestor(layout, table_path)
        if anchor is not None and anchor[0] == "dotted" and not headers_under(layout, anchor[1] + table_path[
                len(anchor[1]):len(anchor[1]) + 1]):
            self.text = insert_dotted(self.text, layout, anchor[2], table_path, table, comment)
            return
        if header is not None or dotted:
            raise ConfigError("%s: %s is already defined; refusing to define it twice. %s"
                              % (self.path, render_path(table_path, '"'), BUG_REPORT))
        self.text = insert_table(self.text, layout, table_path, table, after_path=after, comment=comment)

    def _refuse_inline(self, key_path, layout):
        holder = layout.inline_ancestor(key_path)
        if holder is not None:
            raise ConfigError(
                "%s: line %d, column %d: %s is written as an inline table, and changing %s inside it would "
                "rewrite that whole line (with the settings it holds). Write %s as a [%s] section (one per "
                "sub-table, keys unchanged) and run again. The file was left unchanged."
                % (self.path, holder.line, holder.column(), render_path(holder.path, '"'),
                   render_path(key_path[len(holder.path):], '"'), render_path(holder.path, '"'),
                   render_path(holder.path, '"')))
        array = layout.array_ancestor(key_path)
        if array is not None:
            raise ConfigError(
                "%s: line %d, column %d: %s is an array of tables ([[...]]), which containerd does not read "
                "as a table. Write it as a [%s] section and run again. The file was left unchanged."
                % (self.path, array.line, array.column(), render_path(array.path, '"'),
                   render_path(array.path, '"')))

    def _remove_tree(self, table_path):
        """Remove every line that defines `table_path` or anything under it."""
        layout = self.layout
        self._refuse_inline(table_path, layout)
        spans = []
        blank = blank_line_style(layout)
        for entry in layout.under(table_path):
            if entry.is_header:
                start, end = entry.start, layout.section_end(entry)
                if blank and self.text[:start].endswith("\n\n"):
                    start -= 1
                spans.append((start, end))
            elif len(entry.table) < len(table_path):  # dotted or inline, in an ancestor's section
                spans.append((entry.start, entry.end))
        for start, end in sorted(spans, reverse=True):
            self.text = self.text[:start] + self.text[end:]


_NOT_RECORDED = object()


def _replaces_builtin_runtimes(containerd_version):
    """True unless containerd is known to be 2.x, which merges a file's runtimes with its own."""
    major = _major(containerd_version)
    return major is None or major < 2


def _with_version(text, version):
    if not text:
        return CREATED_COMMENT + "\nversion = %d\n" % version
    prefix = text if text.endswith("\n") else text + "\n"
    return prefix + "version = %d\n" % version


class _KeyEdit(object):
    """Set keys of a file outside a runtime plan (a default in another file, options a drop-in
    inherits), with the same in-place rules and refusals as the plan itself."""

    layout = _Edit.layout
    _set = _Edit._set
    _add = _Edit._add
    _refuse_inline = _Edit._refuse_inline

    def __init__(self, text, path):
        self.text, self.path, self.expected = text, path, {}


def set_value(text, key_path, value, path="config.toml"):
    """`text` with the key at `key_path` set to `value`: its value replaced in place, or the key added
    in the style of its table."""
    edit = _KeyEdit(text, path)
    edit._set(key_path, value)  # pylint: disable=protected-access
    return edit.text
