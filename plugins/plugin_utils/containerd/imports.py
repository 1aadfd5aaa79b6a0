# -*- coding: utf-8 -*-
# Copyright: gpunode.nvidia contributors
# Apache License 2.0
"""The files a containerd really loads (`imports`), and where each of our settings lives in them.

containerd loads its root file, then the files its `imports` name, breadth
first, each file once; later files override earlier ones. How an entry is
resolved and merged depends on the version (verified with Debian's 1.6.20,
1.7.24 and 2.1.9, and containerd's source):

* the rules module_utils/node/containerd_semantics.py states (globs, relative
  entries, missing files), shared with discovery and the doctor;
* 1.x lets an imported plugin table REPLACE the whole table read before it
  (a drop-in defining only a runtime loses sandbox_image, SystemdCgroup,
  runc...); 2.x merges tables key by key;
* 2.3.0 to 2.3.4 refuse to start when an imported file's `version` is higher
  than the root file's.

Controller side. The node reads the files (gpunode.nvidia.containerd_config_file,
`include`); this module decides which, in what order, and what they mean.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import re

from ansible_collections.gpunode.nvidia.plugins.module_utils.common import goglob
from ansible_collections.gpunode.nvidia.plugins.module_utils.node.containerd_semantics import (
    CRI_1X_PLUGINS, Semantics, deep_merge)
from ansible_collections.gpunode.nvidia.plugins.plugin_utils.containerd.toml_edit import CRI_DUMP_PLUGINS
from ansible_collections.gpunode.nvidia.plugins.plugin_utils.containerd.toml_read import ConfigError, parse
from ansible_collections.gpunode.nvidia.plugins.plugin_utils.containerd.toml_render import get_path


class ConfigFile(object):
    """One file containerd loads: its text, data and who imported it."""

    def __init__(self, path, text, sha256, imported_by=None, entry=None):
        self.path = path
        self.text = text
        self.sha256 = sha256
        self.imported_by = imported_by
        self.entry = entry
        self.data = parse(text, path)

    @property
    def version(self):
        """The file's config version (a file without `version` is version 1)."""
        version = self.data.get("version", 1)
        if isinstance(version, bool) or not isinstance(version, int):
            raise ConfigError("%s: `version` must be an integer (1, 2, 3 or 4), found %r. The files were left "
                              "unchanged." % (self.path, version))
        return version

    def imports(self):
        value = self.data.get("imports")
        if value is None:
            return []
        if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
            raise ConfigError("%s: `imports` must be a list of file names or patterns (strings), found %r. "
                              "The files were left unchanged." % (self.path, value))
        return value

    def runtime(self, name):
        for plugin in CRI_DUMP_PLUGINS:
            table = get_path(self.data, ("plugins", plugin, "containerd", "runtimes", name))
            if isinstance(table, dict):
                return table
        return None

    def default_runtime(self):
        path = self.default_runtime_path()
        return get_path(self.data, path) if path else None

    def default_runtime_path(self):
        """The dotted path of this file's default_runtime_name, or None."""
        for plugin in CRI_DUMP_PLUGINS:
            path = ("plugins", plugin, "containerd", "default_runtime_name")
            if get_path(self.data, path) is not None:
                return path
        return None

    def has_1x_cri_table(self):
        plugins = self.data.get("plugins")
        return isinstance(plugins, dict) and any(isinstance(plugins.get(p), dict) for p in CRI_1X_PLUGINS)


class Imports(object):
    """The files of one containerd config in merge order (root first), and what they define."""

    def __init__(self, files, semantics, missing, containerd_version):
        self.containerd_version = containerd_version
        self.files = files
        self.semantics = semantics
        self.missing = missing

    @property
    def root(self):
        return self.files[0]

    def get(self, path):
        for config in self.files:
            if config.path == path:
                return config
        return None

    def index(self, path):
        return [config.path for config in self.files].index(path)

    def effective_cri_file(self):
        """containerd 1.x: the last file holding a CRI plugin table, the only one that counts."""
        holders = [config for config in self.files if config.has_1x_cri_table()]
        return holders[-1] if holders else None

    def definitions(self, name):
        """Every file that defines runtime `name`, in merge order."""
        return [config for config in self.files if config.runtime(name) is not None]

    def defined_in(self, name):
        """The file whose definition of `name` containerd uses (None: no effective definition)."""
        if self.semantics.replaces_plugin_tables:
            effective = self.effective_cri_file()
            return effective if effective is not None and effective.runtime(name) is not None else None
        found = self.definitions(name)
        return found[-1] if found else None

    def ignored_definitions(self, name):
        """containerd 1.x: definitions in files whose CRI table a later file replaces."""
        if not self.semantics.replaces_plugin_tables:
            return []
        effective = self.effective_cri_file()
        return [config for config in self.definitions(name) if config is not effective]

    def default_set_in(self):
        """The file whose default_runtime_name containerd uses, or None."""
        if self.semantics.replaces_plugin_tables:
            effective = self.effective_cri_file()
            return effective if effective is not None and effective.default_runtime() is not None else None
        setters = [config for config in self.files if config.default_runtime() is not None]
        return setters[-1] if setters else None

    def merged_runtimes(self):
        """name -> runtime table as containerd merges the files (before its built-in defaults)."""
        if self.semantics.replaces_plugin_tables:
            effective = self.effective_cri_file()
            return dict(_runtimes_of(effective.data)) if effective is not None else {}
        merged = {}
        for config in self.files:
            for name, table in _runtimes_of(config.data).items():
                merged[name] = deep_merge(merged.get(name, {}), table)
        return merged

    def version_conflicts(self):
        """Imported files whose `version` differs from the root's: [(file, its version)]."""
        root_version = self.root.version
        return [(config, config.version) for config in self.files[1:] if config.version != root_version]

    def covers(self, path):
        """Whether some loaded file's `imports` already names `path` (so no entry is needed)."""
        for config in self.files:
            for entry in config.imports():
                pattern = self.semantics.absolute(entry, config.path)
                if pattern == path or ("*" in entry and goglob.match_path(pattern, path)):
                    return True
        return False

    def paths(self):
        return [config.path for config in self.files]


def _runtimes_of(data):
    for plugin in CRI_DUMP_PLUGINS:
        table = get_path(data, ("plugins", plugin, "containerd", "runtimes"))
        if isinstance(table, dict):
            return table
    return {}


def resolve(root_path, root_text, containerd_version, read, root_sha256=""):
    """Imports of the root file, resolved and loaded the way containerd does.

    `read(patterns)` returns, for each absolute path or pattern, the node's
    answer {pattern, files: [{path, exists, content, sha256}], error?}: the
    config_file module's `included`. It is called once per level of imports.
    """
    root = ConfigFile(root_path, root_text, root_sha256)
    root_version = root.data.get("version")
    semantics = Semantics(containerd_version, root_version if isinstance(root_version, int) else None)
    files, loaded, missing = [root], set([root_path]), []
    level = [root]
    while level:
        requests = [(config, entry, semantics.absolute(entry, config.path))
                    for config in level for entry in config.imports()]
        if not requests:
            break
        answers = read([pattern for _config, _entry, pattern in requests])
        level = []
        for (importer, entry, pattern), answer in zip(requests, answers):
            if answer.get("error"):
                raise ConfigError("%s: imports entry %r is not a valid pattern (%s), so containerd cannot start "
                                  "with this file. Fix the entry and run again. The files were left unchanged."
                                  % (importer.path, entry, answer["error"]))
            for item in answer["files"]:
                if item["path"] in loaded:
                    continue
                if not item["exists"]:
                    if semantics.missing_file_is_fatal:
                        raise ConfigError(
                            "%s: imports entry %r names %s, which does not exist: containerd %s fails to start "
                            "with this file. Create the file or remove the entry, and run again. The files were "
                            "left unchanged." % (importer.path, entry, item["path"], semantics.name()))
                    missing.append(item["path"])
                    continue
                loaded.add(item["path"])
                config = ConfigFile(item["path"], item["content"], item.get("sha256", ""), importer.path, entry)
                files.append(config)
                level.append(config)
    return Imports(files, semantics, missing, containerd_version)


def from_contents(root_path, contents, containerd_version, globs):
    """Resolve from texts already known on the controller (a candidate state, or a test fixture).

    `contents`: path -> text (None: missing); `globs`: absolute pattern -> paths the node
    found for it (files added to `contents` that match are included, in Go's order).
    """
    def read(patterns):
        answers = []
        for pattern in patterns:
            if "*" not in pattern:
                paths = [pattern]
            else:
                known = set(globs.get(pattern, []))
                known.update(p for p, text in contents.items() if text is not None and goglob.match_path(pattern, p))
                paths = sorted(p for p in known if contents.get(p) is not None)
                paths = _go_order(paths)
            answers.append({"pattern": pattern, "files": [
                {"path": p, "exists": contents.get(p) is not None, "content": contents.get(p) or ""} for p in paths]})
        return answers
    return resolve(root_path, contents[root_path], containerd_version, read)


def _go_order(paths):
    """Go's Glob order: by directory (in its own order), then by name."""
    return sorted(paths, key=lambda p: tuple(p.split("/")))


# ---------------------------------------------------------------- the `imports` line, edited in place

_KEY_RE = re.compile(r"""^[ \t]*(?:imports|"imports"|'imports')[ \t]*=[ \t]*""", re.M)
_HEADER_RE = re.compile(r"^[ \t]*\[", re.M)
_VERSION_RE = re.compile(r"""^[ \t]*(?:version|"version"|'version')[ \t]*=[^\n]*\n?""", re.M)


def add_import(text, entry, path):
    """`text` with `entry` appended to its top-level `imports` (the key added if absent); other lines kept."""
    span = _imports_span(text)
    if span is None:
        line = "imports = [%s]%s" % (json.dumps(entry), "\r\n" if "\r\n" in text else "\n")
        new = _insert_line(text, line)
    else:
        start, end, tokens = span
        if not tokens:
            new = text[:start + 1] + json.dumps(entry) + text[end - 1:]
        else:
            last_start, last_end = tokens[-1]
            rendered = _render_like(entry, text[last_start:last_end])
            closing_line = text.count("\n", 0, end - 1)
            if text.count("\n", 0, last_end) == closing_line:
                new = text[:last_end] + ", " + rendered + text[last_end:]
            else:
                new = _append_line(text, last_end, rendered)
    _verify_imports(text, new, path, _imports_of(text, path) + [entry])
    return new


def remove_import(text, entry, path):
    """`text` without the `imports` entry equal to `entry` (the key removed when it was the only one)."""
    span = _imports_span(text)
    values = _imports_of(text, path)
    if span is None or entry not in values:
        return text
    start, end, tokens = span
    index = values.index(entry)
    if len(values) == 1:
        line_start = text.rfind("\n", 0, start) + 1
        line_end = text.find("\n", end)
        new = text[:line_start] + text[line_end + 1 if line_end >= 0 else len(text):]
    else:
        tok_start, tok_end = tokens[index]
        line_start = text.rfind("\n", 0, tok_start) + 1
        line_end = text.find("\n", tok_end)
        rest = text[tok_end:line_end if line_end >= 0 else len(text)]
        if not text[line_start:tok_start].strip() and re.match(r"^\s*,?\s*(#.*)?$", rest):
            new = text[:line_start] + text[line_end + 1:]
        else:
            after = re.match(r"\s*,\s*", text[tok_end:])
            if after and index < len(values) - 1:
                new = text[:tok_start] + text[tok_end + after.end():]
            else:
                before = re.search(r"\s*,\s*$", text[:tok_start])
                new = text[:before.start()] + text[tok_end:]
    expected = list(values)
    del expected[index]
    _verify_imports(text, new, path, expected, key_may_vanish=not expected)
    return new


def replace_imports(text, entries, path):
    """`text` with `imports` set to exactly `entries` (for the guard's private copies only)."""
    span = _imports_span(text)
    rendered = "[%s]" % ", ".join(json.dumps(e) for e in entries)
    if span is None:
        return _insert_line(text, "imports = %s\n" % rendered) if entries else text
    start, end, _tokens = span
    return text[:start] + rendered + text[end:]


def _imports_of(text, path):
    value = parse(text, path).get("imports") or []
    return list(value)


def _top_level_end(text):
    header = _HEADER_RE.search(text)
    return header.start() if header else len(text)


def _imports_span(text):
    """(start of `[`, end after `]`, [(start, end) of each string]) of the top-level imports array."""
    limit = _top_level_end(text)
    key = None
    for match in _KEY_RE.finditer(text, 0, limit):
        key = match
    if key is None or text[key.end():key.end() + 1] != "[":
        return None
    i, tokens = key.end() + 1, []
    while i < len(text):
        char = text[i]
        if char == "]":
            return key.end(), i + 1, tokens
        if char == "#":
            i = text.find("\n", i)
            i = len(text) if i < 0 else i
            continue
        if char in "\"'":
            end = _string_end(text, i)
            tokens.append((i, end))
            i = end
            continue
        i += 1
    return None


def _string_end(text, i):
    quote = text[i]
    j = i + 1
    while j < len(text) and text[j] != quote:
        j += 2 if quote == '"' and text[j] == "\\" else 1
    return j + 1


def _render_like(entry, sample):
    if sample.startswith("'") and "'" not in entry:
        return "'%s'" % entry
    return json.dumps(entry)


def _append_line(text, last_end, rendered):
    """A new array line after the last element's line, with its indentation and comma style."""
    line_start = text.rfind("\n", 0, last_end) + 1
    indent = re.match(r"[ \t]*", text[line_start:]).group(0)
    line_end = text.find("\n", last_end)
    has_comma = re.match(r"\s*,", text[last_end:line_end]) is not None
    if has_comma:
        return text[:line_end + 1] + indent + rendered + ",\n" + text[line_end + 1:]
    return text[:last_end] + "," + text[last_end:line_end + 1] + indent + rendered + "\n" + text[line_end + 1:]


def _insert_line(text, line):
    """Insert a top-level key line: after `version`, else before the first table and its comments."""
    version = _VERSION_RE.search(text, 0, _top_level_end(text))
    if version is not None:
        offset = version.end()
        if not text[:offset].endswith("\n"):
            line = "\n" + line
    elif _HEADER_RE.search(text) is None:
        offset = len(text)
        if text and not text.endswith("\n"):
            line = "\n" + line
    else:
        offset = _top_level_end(text)
        while offset > 0:
            previous = text.rfind("\n", 0, offset - 1) + 1
            if not text[previous:offset].lstrip().startswith("#"):
                break
            offset = previous
    return text[:offset] + line + text[offset:]


def _verify_imports(old, new, path, expected, key_may_vanish=False):
    """The edit changed `imports` to `expected` and nothing else, or it is refused."""
    before, after = parse(old, path), parse(new, path)
    before.pop("imports", None)
    got = after.pop("imports", None)
    if before != after or (got or []) != expected or (got is None and not key_may_vanish and expected):
        raise ConfigError(
            "%s: could not edit `imports` in place without side effects (its layout is unusual). Set it by hand "
            "to %s and run again. The file was left unchanged." % (path, json.dumps(expected)))
