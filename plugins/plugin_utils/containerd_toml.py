# -*- coding: utf-8 -*-
# Copyright: gpunode.nvidia contributors
# Apache License 2.0
"""Plan an in-place edit of a containerd config.toml (controller side).

`plan_runtime_edit` returns the new text and what it means. Untouched lines
stay byte-identical: new lines are spliced into the original text at the
place a person would put them, values are replaced inside their span, and
the result is re-parsed and compared with the expected document before
anyone sees it.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import copy
import json
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

from ansible_collections.gpunode.nvidia.plugins.plugin_utils.toml_layout import Layout, ScanError

# The CRI runtime plugin's table, by config version (field guide §2).
CRI_PLUGIN = {
    1: ("plugins", "cri"),
    2: ("plugins", "io.containerd.grpc.v1.cri"),
    3: ("plugins", "io.containerd.cri.v1.runtime"),
    4: ("plugins", "io.containerd.cri.v1.runtime"),
}
# Names under which `disabled_plugins` turns the CRI plugin off.
CRI_PLUGIN_IDS = ("cri", "io.containerd.grpc.v1.cri", "io.containerd.cri.v1.runtime", "io.containerd.cri.v1.images")
# The CRI runtime plugin as containerd 1.x (v1/v2 configs) and 2.x (v3+) name it in `config dump`.
CRI_DUMP_PLUGINS = ("cri", "io.containerd.grpc.v1.cri", "io.containerd.cri.v1.runtime")
RUNC_TYPE = "io.containerd.runc.v2"
BUILTIN_COMMENT = ("containerd's built-in runtime, written out as it runs today: with containerd 1.x "
                   "a file that lists any runtime replaces the built-in list")
# Keys a runtime must share with the runtime pods use today, even when it already exists.
INHERITED_KEYS = (("runtime_type",), ("privileged_without_host_devices",), ("options", "SystemdCgroup"))


class ConfigError(Exception):
    """A config this module must not edit; the message says where and what to do."""


def require_tomlkit():
    """Fail with the install line when the controller has no tomlkit (a controller-side requirement)."""
    if tomlkit is None:
        raise ConfigError("%s Install it on the controller: %s -m pip install tomlkit" % (
            missing_required_lib("tomlkit", reason="to edit containerd's config.toml"), sys.executable))


class Plan(object):
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


def parse(text, path):
    """Parse TOML into plain data; syntax errors name file, line and column."""
    if tomllib is not None:
        try:
            return tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            match = re.search(r"^(.*) \(at line (\d+), column (\d+)\)$", str(exc))
            reason, line, col = match.groups() if match else (str(exc), "?", "?")
            raise _syntax_error(path, line, col, reason)
    try:
        return tomlkit.parse(text).unwrap()
    except ParseError as exc:
        reason = re.sub(r" at line \d+ col \d+$", "", str(exc))
        raise _syntax_error(path, exc.line, exc.col, reason)


def _syntax_error(path, line, col, reason):
    return ConfigError("%s: line %s, column %s: %s. The file was left unchanged; fix the TOML and run again."
                       % (path, line, col, reason.rstrip(".")))


def default_version(containerd_version):
    """Config version for a new file: 3 for containerd 2.x, else 2 (read by 1.x and 2.x alike)."""
    major = _major(containerd_version)
    return 3 if major is not None and major >= 2 else 2


def _major(version):
    match = re.search(r"(\d+)\.\d+", version or "")
    return int(match.group(1)) if match else None


def config_version(data, layout, path):
    version = data.get("version", 1)
    if isinstance(version, bool) or not isinstance(version, int):
        entry = layout.key(("version",))
        raise ConfigError(
            "%s: line %s: `version` must be an integer (1, 2, 3 or 4), found %r. "
            "The file was left unchanged." % (path, entry.line if entry else "?", version)
        )
    if version not in CRI_PLUGIN:
        raise ConfigError("%s: config version %d is not supported (1 to 4 are). The file was left unchanged." % (path, version))
    return version


def check_cri_enabled(data, layout, path):
    disabled = [p for p in data.get("disabled_plugins") or [] if p in CRI_PLUGIN_IDS]
    if disabled:
        entry = layout.key(("disabled_plugins",))
        raise ConfigError(
            "%s: line %s: disabled_plugins lists %s, so this containerd runs without its CRI plugin and "
            "Kubernetes cannot use it at all (packages built for Docker-only hosts ship this). Remove %s from "
            "disabled_plugins, restart containerd, and run again. The file was left unchanged."
            % (path, entry.line if entry else "?", ", ".join('"%s"' % p for p in disabled),
               " and ".join('"%s"' % p for p in disabled))
        )


def get_path(data, path, default=None):
    for key in path:
        if not isinstance(data, dict) or key not in data:
            return default
        data = data[key]
    return data


def is_nvidia_runtime(name, table):
    binary = get_path(table, ("options", "BinaryName")) or ""
    return "nvidia" in name or "nvidia" in str(binary)


def pick_source_runtime(runtimes, default_name, own_name):
    """The runtime pods use today: the default unless it is an nvidia runtime, else runc, else crun."""
    for candidate in (default_name, "runc", "crun"):
        table = runtimes.get(candidate)
        if candidate != own_name and isinstance(table, dict) and not is_nvidia_runtime(candidate, table):
            return candidate
    return None


def effective_runtimes(dump):
    """The runtimes table of a `config dump` (name -> table), or {}."""
    plugins = (dump or {}).get("plugins", {})
    for plugin in CRI_DUMP_PLUGINS:
        table = get_path(plugins, (plugin, "containerd", "runtimes"))
        if table:
            return table
    return {}


def plan_runtime_edit(text, path, name="nvidia", binary="/usr/bin/nvidia-container-runtime",
                      set_as_default=False, cdi=False, state="present", containerd_version=None,
                      effective=None):
    """Return a Plan for adding, updating or removing runtime `name` in config text.

    `effective` is containerd's `config dump` of the current file, when known.
    """
    require_tomlkit()
    original = text
    data = parse(text, path)
    try:
        layout = Layout(text)
    except ScanError as exc:
        raise ConfigError("%s: %s. The file was left unchanged." % (path, exc))
    if not layout.entries:
        version = default_version(containerd_version)
        text = _with_version(text, version)
        data = {"version": version}
    else:
        version = config_version(data, layout, path)
    check_cri_enabled(data, layout, path)

    cri = CRI_PLUGIN[version]
    runtimes_path = cri + ("containerd", "runtimes")
    default_path = cri + ("containerd", "default_runtime_name")
    runtimes = get_path(data, runtimes_path, {}) or {}
    default_name = get_path(data, default_path)
    source_name = pick_source_runtime(runtimes, default_name or "runc", name)
    expected = copy.deepcopy(data)
    runtime = None

    if state == "present":
        # Parent keys first, so that a new runtime table nests under any header they add.
        if cdi and get_path(data, cri + ("enable_cdi",)) is not True:
            text = set_value(text, cri + ("enable_cdi",), True)
            _set_path(expected, cri + ("enable_cdi",), True)
        if set_as_default and default_name != name:
            text = set_value(text, default_path, name)
            _set_path(expected, default_path, name)
        if not runtimes and _replaces_builtin_runtimes(containerd_version):
            # containerd 1.x: a file that lists any runtime replaces the built-in list, so the
            # runtime pods use today is written out as containerd runs it now, or it would vanish.
            source_name = default_name or "runc"
            builtin = effective_runtimes(effective).get(source_name) or {"runtime_type": RUNC_TYPE}
            text = _write_runtime(text, runtimes_path, source_name, None, builtin, None, path,
                                  comment=BUILTIN_COMMENT)
            _set_path(expected, runtimes_path + (source_name,), builtin)
            runtimes = {source_name: builtin}
        source = runtimes.get(source_name) or {"runtime_type": RUNC_TYPE}
        runtime = _desired_runtime(runtimes.get(name), source, binary)
        text = _write_runtime(text, runtimes_path, name, runtimes.get(name), runtime, source_name, path)
        _set_path(expected, runtimes_path + (name,), runtime)
    elif name in runtimes:
        text = _remove_table(text, runtimes_path + (name,), path)
        del get_path(expected, runtimes_path)[name]
        if default_name == name:
            fallback = source_name or "runc"
            text = set_value(text, default_path, fallback)
            _set_path(expected, default_path, fallback)

    new_data = parse(text, path)
    if _pruned(new_data) != _pruned(expected):
        raise ConfigError(
            "%s: could not edit this file in place without side effects (its layout is unusual). "
            "The file was left unchanged; please report it with the file attached." % path
        )
    new_default = get_path(new_data, default_path) or "runc"
    return Plan(original, text, new_data, version, cri, name, runtime, new_default, source_name)


def _replaces_builtin_runtimes(containerd_version):
    """True unless containerd is known to be 2.x, which merges a file's runtimes with its own."""
    major = _major(containerd_version)
    return major is None or major < 2


def _pruned(data):
    """Data without empty tables: a table that only existed to hold ours is no loss."""
    if not isinstance(data, dict):
        return data
    pruned = dict((k, _pruned(v)) for k, v in data.items())
    return dict((k, v) for k, v in pruned.items() if v != {})


def _with_version(text, version):
    prefix = text if not text or text.endswith("\n") else text + "\n"
    return prefix + "version = %d\n" % version


def _desired_runtime(existing, source, binary):
    """The runtime table to write: a copy of `source`, or `existing` brought in line with it."""
    if existing is None:
        table = copy.deepcopy(source)
    else:
        table = copy.deepcopy(existing)
        for key in INHERITED_KEYS:
            value = get_path(source, key)
            if value is not None:
                _set_path(table, key, value)
    _set_path(table, ("options", "BinaryName"), binary)
    return table


def _set_path(data, path, value):
    for key in path[:-1]:
        data = data.setdefault(key, {})
    data[path[-1]] = value


# ---------------------------------------------------------------- text edits


def render_value(value, old_text=None):
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        if old_text and old_text.startswith("'") and "'" not in value and "\n" not in value:
            return "'%s'" % value
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, list):
        return "[" + ", ".join(render_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join("%s = %s" % (render_key(k), render_value(v)) for k, v in value.items()) + "}"
    raise TypeError("cannot render %r as TOML" % (value,))


def render_key(key, quote='"'):
    if re.match(r"^[A-Za-z0-9_-]+$", key):
        return key
    if quote == "'" and "'" not in key:
        return "'%s'" % key
    return json.dumps(key)


def render_path(path, quote):
    return ".".join(render_key(k, quote) for k in path)


def set_value(text, path, value):
    """Set the key at `path` to `value`, replacing only the value's text if the key exists."""
    layout = Layout(text)
    entry = layout.key(path)
    if entry is not None:
        old = text[entry.value_start:entry.value_end]
        return text[:entry.value_start] + render_value(value, old) + text[entry.value_end:]
    return _add_key(text, layout, path[:-1], path[-1], value)


def _add_key(text, layout, table, key, value):
    header = layout.header(table) if table else None
    if header is not None or not table:
        keys = layout.section_keys(header) if header else _root_keys(layout)
        if keys:
            after, indent = keys[-1].end, keys[-1].indent
        elif header is not None:
            after, indent = header.end, header.indent + layout.indent_step()
        else:
            after, indent = 0, ""
        line = "%s%s = %s\n" % (indent, render_key(key, layout.quote_char()), render_value(value))
        return _insert(text, after, line)
    dotted = [e for e in layout.entries
              if e.kind == "key" and e.path[:len(table)] == table and len(e.table) < len(table)]
    if dotted:
        # The table is made of dotted keys in an ancestor's section: add one more beside them.
        relative = table[len(dotted[-1].table):] + (key,)
        line = "%s%s = %s\n" % (dotted[-1].indent, render_path(relative, layout.quote_char()), render_value(value))
        return _insert(text, dotted[-1].end, line)
    return _insert_table(text, layout, table, {key: value})


def _root_keys(layout):
    keys = []
    for entry in layout.entries:
        if entry.is_header:
            break
        keys.append(entry)
    return keys


def _insert(text, offset, block):
    if offset > 0 and not text[:offset].endswith("\n"):
        block = "\n" + block
    return text[:offset] + block + text[offset:]


def _insert_table(text, layout, path, table, after_path=None, comment=None):
    """Insert `[path]` with `table` (and its sub-tables) where a person would put it."""
    step = layout.indent_step()
    blank = _blank_line_style(layout)
    descendants = [e for e in layout.entries if e.is_header and e.path[:len(path)] == path]
    if after_path is not None and layout.subtree_end(after_path) is not None:
        anchor = layout.header(after_path) or _first_header_under(layout, after_path)
        offset = layout.subtree_end(after_path)
        indent = anchor.indent + step * max(0, len(path) - len(anchor.path))
    elif descendants:
        # A parent table declared just before its first sub-table keeps the file readable.
        first = descendants[0]
        offset = first.start
        ancestor = _deepest_existing_ancestor(layout, path)
        indent = ancestor.indent + step if ancestor is not None else first.indent
        block = _render_table(path, table, indent, step, layout.quote_char(), blank, comment)
        return text[:offset] + block.lstrip("\n") + ("\n" if blank else "") + text[offset:]
    else:
        ancestor = _deepest_existing_ancestor(layout, path)
        if ancestor is not None:
            offset = layout.subtree_end(ancestor.path)
            indent = ancestor.indent + step
        else:
            offset, indent = len(text), ""
            blank = True
    block = _render_table(path, table, indent, step, layout.quote_char(), blank, comment)
    return _insert(text, offset, block)


def _first_header_under(layout, path):
    for entry in layout.entries:
        if entry.is_header and entry.path[:len(path)] == path:
            return entry
    return None


def _deepest_existing_ancestor(layout, path):
    for size in range(len(path) - 1, 0, -1):
        header = layout.header(path[:size])
        if header is not None:
            return header
    return None


def _blank_line_style(layout):
    """True when the file separates tables with a blank line."""
    headers = [e for e in layout.entries if e.is_header]
    text = layout.text
    separated = sum(1 for h in headers if h.start >= 2 and text[:h.start].endswith("\n\n"))
    return bool(headers) and separated * 2 >= len(headers)


def _render_table(path, table, indent, step, quote, blank, comment=None):
    lines = ["\n"] if blank else []
    if comment:
        lines.append("%s# %s\n" % (indent, comment))
    lines.append("%s[%s]\n" % (indent, render_path(path, quote)))
    inner = indent + step
    for key, value in table.items():
        if not isinstance(value, dict):
            lines.append("%s%s = %s\n" % (inner, render_key(key, quote), render_value(value)))
    for key, value in table.items():
        if isinstance(value, dict):
            lines.append(_render_table(path + (key,), value, inner, step, quote, blank))
    return "".join(lines)


def _write_runtime(text, runtimes_path, name, existing, desired, source_name, path, comment=None):
    runtime_path = runtimes_path + (name,)
    if existing is None:
        layout = Layout(text)
        after = runtimes_path + (source_name,) if source_name else None
        if after is None and layout.subtree_end(runtimes_path) is not None:
            after = runtimes_path
        return _insert_table(text, layout, runtime_path, desired, after_path=after, comment=comment)
    for key_path, value in _leaves(desired):
        if get_path(existing, key_path) != value:
            text = _set_in_table(text, runtime_path, key_path, value, path)
    return text


def _set_in_table(text, table_path, key_path, value, path):
    if Layout(text).header(table_path) is None:
        raise ConfigError(
            "%s: runtime table %s is written inline or with dotted keys; this module edits only "
            "[table] sections. Rewrite it as a [table] section and run again. The file was left unchanged."
            % (path, render_path(table_path, '"'))
        )
    return set_value(text, table_path + key_path, value)


def _leaves(data, prefix=()):
    for key, value in data.items():
        if isinstance(value, dict) and value:
            yield from _leaves(value, prefix + (key,))
        else:
            yield prefix + (key,), value


def _remove_table(text, table_path, path):
    layout = Layout(text)
    span = layout.subtree_range(table_path)
    if span is None:
        raise ConfigError(
            "%s: runtime %s is not a [table] section (inline or dotted keys); remove it by hand."
            % (path, table_path[-1])
        )
    start, end = span
    if _blank_line_style(layout) and text[:start].endswith("\n\n"):
        start -= 1
    return text[:start] + text[end:]
