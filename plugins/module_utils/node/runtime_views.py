# -*- coding: utf-8 -*-
# Copyright: gpunode.nvidia contributors
# Apache License 2.0
"""What a runtime instance really runs: its runtimes, default runtime and CRI plugin state.

One "view" per runtime instance that discovery found, built from up to three
sources, each recorded in the view so a finding can say where it looked:

* ``files``: the instance's config file and the files it imports, read with
  ``toml_reader`` and merged the way the daemon merges them (containerd 1.x
  replaces a whole plugin table with an imported one; 2.x merges deeply). This
  always runs: it gives the file and line of every key, and it is all there is
  for a mounted image.
* ``config-dump``: ``containerd --config FILE config dump`` on the live node,
  the daemon's own answer to "what does this file mean" (imports applied,
  version migrated). Its values replace the file reader's.
* ``cri``: the live daemon asked over CRI (``Status(verbose=True)``), the only
  answer to "what did the running daemon load" (an edit that was never
  followed by a restart shows up here).

Runs on managed nodes: standard library only.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os

from ansible_collections.gpunode.nvidia.plugins.module_utils.cri.client import (
    CRIClient, default_runtime_from_status, runtimes_from_status)
from ansible_collections.gpunode.nvidia.plugins.module_utils.common import goglob
from ansible_collections.gpunode.nvidia.plugins.module_utils.common.binaries import find_binary
from ansible_collections.gpunode.nvidia.plugins.module_utils.common.node_paths import walk_files
from ansible_collections.gpunode.nvidia.plugins.module_utils.node.containerd_semantics import (
    CRI_RUNTIME_PLUGINS, CRI_V1, CRI_V2, Semantics, deep_merge, removed_keys)
from ansible_collections.gpunode.nvidia.plugins.module_utils.common.daemon_json import (
    DockerConfigError, key_line, parse_daemon_json)
from ansible_collections.gpunode.nvidia.plugins.module_utils.cri.http2_grpc import CRIError
from ansible_collections.gpunode.nvidia.plugins.module_utils.common.toml_reader import TomlError, read_toml, toml_type
from ansible_collections.gpunode.nvidia.plugins.module_utils.common.value_kinds import mismatch, values_at

RUNC_TYPE = "io.containerd.runc.v2"
# Plugin ids of the CRI runtime settings, newest first: containerd 2.x (config version 3),
# then 1.x/2.x reading version 2, then version 1's short name.
CRI_PLUGIN_IDS = tuple(reversed(CRI_RUNTIME_PLUGINS))
DOCKER_BUILTIN = ("runc", "io.containerd.runc.v2", "io.containerd.runtime.v1.linux")
CRIO_BUILTIN = ("runc", "crun")


def new_view(instance):
    return {
        "instance": instance["id"], "kind": instance["kind"], "major": None,
        "files": [], "config_error": None,
        "source": None, "dump": None, "reader": None,
        "runtimes": {}, "default_runtime": None, "default_origin": None,
        "disabled_plugins": [], "disabled_origin": None, "cri_tables": [], "removed_keys": [],
        "live": None,
    }


def major_version(instance):
    """containerd's major version from the discovered version, else from its config version (3 = 2.x)."""
    version = instance.get("version") or ""
    digits = version.split(":")[-1].split(".")[0]
    if digits.isdigit():
        return int(digits)
    if (instance.get("config_version") or 0) >= 3:
        return 2
    return None


def build_view(node, instance, query_cri=False, cri_timeout=5.0, run_dump=True):
    """The view of one runtime instance (never raises: problems are recorded in the view)."""
    view = new_view(instance)
    if instance["kind"] == "containerd":
        containerd_files(node, instance, view)
        if run_dump and node.live and not view["config_error"]:
            containerd_dump(node, instance, view)
        if query_cri:
            containerd_live(instance, view, cri_timeout)
    elif instance["kind"] == "docker":
        docker_files(node, instance, view)
    elif instance["kind"] == "crio":
        crio_files(node, instance, view)
    return view


# --- containerd: files ----------------------------------------------------------------------

def containerd_files(node, instance, view):
    view["major"] = major_version(instance)
    view["source"] = "files"
    docs = load_with_imports(node, instance, view)
    if view["config_error"]:
        return
    merged = merge_documents(docs, view["major"])
    view["reader"] = docs[0][1].reader if docs else None
    apply_effective(view, merged, docs)
    view["cri_tables"] = cri_tables(docs)
    view["removed_keys"] = [
        {"path": path, "line": doc.line_of(("plugins", plugin_id) + key_path), "plugin": plugin_id,
         "key": ".".join(key_path), "value": value, "since": since, "instead": instead}
        for path, doc in docs for plugin_id, key_path, value, since, instead in removed_keys(doc.data.get("plugins"))]


def load_with_imports(node, instance, view):
    """[(path, TomlDocument)] in the order containerd loads and merges them: the instance's file, then the files
    its `imports` name, breadth first, each once (containerd_semantics)."""
    config_version = instance.get("config_version")
    semantics = Semantics(instance.get("version"), config_version if isinstance(config_version, int) else None)
    docs, loaded, pending = [], set(), [instance["config_path"]]
    while pending:
        path = pending.pop(0)
        if path in loaded:
            continue
        loaded.add(path)
        doc = _read_one(node, path, view)
        if view["config_error"]:
            return docs
        if doc is None:
            continue
        docs.append((path, doc))
        for pattern in doc.data.get("imports") or []:
            try:
                pending.extend(expand_import(node, semantics.absolute(pattern, path)))
            except goglob.BadPattern as exc:
                view["config_error"] = {"path": path, "line": doc.line_of(("imports",)), "message": (
                    "imports entry %s is not a pattern Go's filepath.Glob accepts (%s)" % (json.dumps(pattern), exc))}
                return docs
    return docs


def _read_one(node, path, view):
    """One file's TomlDocument, None when it does not exist; a file containerd cannot load is view's config_error."""
    text = node.read(path)
    view["files"].append({"path": path, "exists": text is not None})
    if text is None:
        return None
    try:
        doc = read_toml(text)
    except TomlError as exc:
        view["config_error"] = {"path": path, "line": exc.line, "message": exc.message}
        return None
    view["config_error"] = (type_error(path, doc, _CONTAINERD_TYPES, "containerd") or type_error(
        path, doc, _RUNTIME_OPTION_TYPES, "containerd", "containerd starts, but no container of that runtime does"))
    return doc


# The Go types containerd decodes the keys this collection reads into. A value of another TOML type stops
# containerd: at the top level when it reads the file, in the CRI plugin's table when the plugin loads (1.6,
# 1.7 and 2.1 exit with "cannot decode"); a runtime's options stop each container of that runtime instead.
_CONTAINERD_TYPES = (
    (("version",), "an integer"), (("imports",), "a list of strings"), (("disabled_plugins",), "a list of strings"),
    (("required_plugins",), "a list of strings"), (("root",), "a string"), (("state",), "a string"),
    (("plugins",), "a table"),
) + tuple(
    (("plugins", plugin_id) + keys, kind) for plugin_id in CRI_PLUGIN_IDS for keys, kind in (
        ((), "a table"), (("containerd",), "a table"), (("containerd", "default_runtime_name"), "a string"),
        (("containerd", "runtimes"), "a table"), (("containerd", "runtimes", "*"), "a table"),
        (("containerd", "runtimes", "*", "runtime_type"), "a string"),
        (("containerd", "runtimes", "*", "options"), "a table")))
_RUNTIME_OPTION_TYPES = tuple(
    (("plugins", plugin_id, "containerd", "runtimes", "*", "options", key), kind) for plugin_id in CRI_PLUGIN_IDS
    for key, kind in (("BinaryName", "a string"), ("SystemdCgroup", "a boolean")))
# CRI-O (BurntSushi/toml into its Config) refuses to start on any of these.
_CRIO_TYPES = (
    (("crio",), "a table"), (("crio", "api"), "a table"), (("crio", "api", "listen"), "a string"),
    (("crio", "runtime"), "a table"), (("crio", "runtime", "default_runtime"), "a string"),
    (("crio", "runtime", "runtimes"), "a table"), (("crio", "runtime", "runtimes", "*"), "a table"),
    (("crio", "runtime", "runtimes", "*", "runtime_path"), "a string"),
    (("crio", "runtime", "runtimes", "*", "runtime_type"), "a string"),
    (("crio", "runtime", "runtimes", "*", "runtime_root"), "a string"),
)


def type_error(path, doc, schema, daemon, effect=None):
    """A config_error for the first value of DOC whose TOML type is not the one SCHEMA gives its key, or None.
    effect: what the daemon then does, when it still starts."""
    for keys, kind in schema:
        for found, value in values_at(doc.data, keys):
            if mismatch(value, kind):
                error = {"path": path, "line": doc.line_of(found), "message": "%s is %s; %s expects %s there" % (
                    ".".join(found), toml_type(value), daemon, kind)}
                if effect:
                    error["effect"] = effect
                return error
    return None


def expand_import(node, entry):
    """The files an (absolute) `imports` entry names: one file, or a glob as Go's filepath.Glob expands it
    (raises goglob.BadPattern). A missing file is kept: it stops containerd 1.x."""
    if "*" not in entry:
        return [entry]
    return [path for path in goglob.glob(entry, node.listdir, node.exists) if node.isfile(path)]


def plugin_table(data, ids=CRI_PLUGIN_IDS):
    """(id, table) of the first CRI plugin table present in a parsed file, or (None, None)."""
    plugins = data.get("plugins") or {}
    for plugin_id in ids:
        if isinstance(plugins.get(plugin_id), dict):
            return plugin_id, plugins[plugin_id]
    return None, None


def cri_containerd(data):
    """The `containerd` table of the CRI runtime settings, whatever the config version says.

    containerd 2.x migrates version 2 tables to version 3 in memory: both are
    merged here, version 3 winning, as the daemon does.
    """
    plugins = data.get("plugins") or {}
    merged = {}
    for plugin_id in reversed(CRI_PLUGIN_IDS):
        table = plugins.get(plugin_id)
        if isinstance(table, dict) and isinstance(table.get("containerd"), dict):
            merged = deep_merge(merged, table["containerd"])
    return merged


def _cri_plugin_key(plugin_id):
    """containerd 1.x migrates version 1's `cri` to the version 2 id: both are one plugin."""
    return CRI_V2 if plugin_id == CRI_V1 else plugin_id


def merge_documents(docs, major):
    """The effective settings of the files: 1.x replaces whole plugin tables, 2.x merges deeply."""
    merged = {}
    for _path, doc in docs:
        data = dict(doc.data)
        if major == 1 or major is None:
            plugins = dict(merged.get("plugins") or {})
            for plugin_id, table in (data.pop("plugins", None) or {}).items():
                plugins[_cri_plugin_key(plugin_id)] = table
            merged.update(data)
            merged["plugins"] = plugins
        else:
            merged = deep_merge(merged, data)
    return merged


def runtimes_of(containerd_table, major, with_builtin=True):
    """name -> {runtime_type, binary, systemd_cgroup}: the runtimes containerd will have.

    containerd 1.x: a file that defines any runtime replaces the built-in `runc`
    (verified with 1.6.20 and 1.7.24); 2.x keeps it and merges the file's (2.1.9).
    A `config dump` already lists every runtime: no built-in is added (with_builtin=False).
    """
    defined = containerd_table.get("runtimes") or {}
    runtimes = {}
    if with_builtin and (not defined or (major is not None and major >= 2)):
        runtimes["runc"] = {"runtime_type": RUNC_TYPE, "binary": "", "systemd_cgroup": False, "builtin": True}
    for name, table in defined.items():
        if not isinstance(table, dict):
            continue
        options = table.get("options") or {}
        base = runtimes.get(name, {})
        runtimes[name] = {
            "runtime_type": table.get("runtime_type") or base.get("runtime_type") or "",
            "binary": options.get("BinaryName") or base.get("binary") or "",
            "systemd_cgroup": bool(options.get("SystemdCgroup", base.get("systemd_cgroup", False))),
            "builtin": False,
        }
    return runtimes


def apply_effective(view, merged, docs):
    """Fill runtimes, default and disabled plugins from MERGED, with the file and line of each."""
    table = cri_containerd(merged)
    view["runtimes"] = runtimes_of(table, view["major"])
    view["default_runtime"] = table.get("default_runtime_name") or "runc"
    view["disabled_plugins"] = list(merged.get("disabled_plugins") or [])
    for name, runtime in view["runtimes"].items():
        runtime["origin"] = last_origin(docs, lambda data, n=name: _runtime_path(data, n))
    view["default_origin"] = last_origin(docs, lambda data: _containerd_key_path(data, "default_runtime_name"))
    view["disabled_origin"] = last_origin(docs, lambda data: ("disabled_plugins",) if "disabled_plugins" in data
                                          else None)


def _containerd_key_path(data, key):
    plugins = data.get("plugins") or {}
    for plugin_id in CRI_PLUGIN_IDS:
        table = (plugins.get(plugin_id) or {}).get("containerd") or {}
        if key in table:
            return ("plugins", plugin_id, "containerd", key)
    return None


def _runtime_path(data, name):
    plugins = data.get("plugins") or {}
    for plugin_id in CRI_PLUGIN_IDS:
        runtimes = ((plugins.get(plugin_id) or {}).get("containerd") or {}).get("runtimes") or {}
        if name in runtimes:
            return ("plugins", plugin_id, "containerd", "runtimes", name)
    return None


def last_origin(docs, locate):
    """{path, line} of the last file (in merge order) where locate(data) finds a key path."""
    for path, doc in reversed(docs):
        key_path = locate(doc.data)
        if key_path:
            return {"path": path, "line": doc.line_of(key_path)}
    return None


def cri_tables(docs):
    """Each file's CRI plugin table: where it is and the settings it holds (flattened dotted keys)."""
    tables = []
    for index, (path, doc) in enumerate(docs):
        plugin_id, table = plugin_table(doc.data)
        if table is None:
            continue
        tables.append({"path": path, "main": index == 0, "plugin": plugin_id,
                       "line": doc.line_of(("plugins", plugin_id)), "settings": flatten(table)})
    return tables


def flatten(table, prefix=""):
    flat = {}
    for key, value in table.items():
        dotted = prefix + key
        if isinstance(value, dict) and value:
            flat.update(flatten(value, dotted + "."))
        else:
            flat[dotted] = value
    return flat


# --- containerd: the daemon's own answers ---------------------------------------------------------

def containerd_dump(node, instance, view):
    """Replace the file reader's values with `containerd config dump` (live node, containerd binary)."""
    binary = instance.get("binary") or ""
    if os.path.basename(binary) != "containerd" or not os.path.isfile(binary) or not node.run:
        view["dump"] = {"ran": False, "reason": "no containerd binary to ask (%s)" % (binary or "unknown")}
        return
    if not instance.get("config_exists"):
        view["dump"] = {"ran": False, "reason": "no config file: containerd runs on its built-in defaults"}
        return
    rc, out, err = node.run([binary, "--config", instance["config_path"], "config", "dump"])
    command = "%s --config %s config dump" % (binary, instance["config_path"])
    if rc != 0:
        message = (err or out).strip().splitlines()[-1:] or ["exit status %d" % rc]
        view["dump"] = {"ran": True, "ok": False, "command": command, "error": message[0]}
        view["config_error"] = {"path": instance["config_path"], "line": None, "message": message[0],
                                "by": "containerd config dump"}
        return
    try:
        dumped = read_toml(out).data
    except TomlError as exc:
        view["dump"] = {"ran": True, "ok": False, "command": command, "error": "unreadable output: %s" % exc}
        return
    view["dump"] = {"ran": True, "ok": True, "command": command, "files": dumped.get("imports") or []}
    view["source"] = "config-dump"
    table = cri_containerd(dumped)
    origins = dict((name, rt.get("origin")) for name, rt in view["runtimes"].items())
    view["runtimes"] = runtimes_of(table, view["major"], with_builtin=False)
    for name, runtime in view["runtimes"].items():
        runtime["origin"] = origins.get(name)
        runtime["builtin"] = origins.get(name) is None
    view["default_runtime"] = table.get("default_runtime_name") or "runc"
    view["disabled_plugins"] = list(dumped.get("disabled_plugins") or [])


def containerd_live(instance, view, timeout):
    """Ask the running daemon over CRI which runtimes it loaded."""
    socket = instance.get("socket")
    if not instance.get("running") or not socket:
        view["live"] = {"queried": False, "reason": "not running"}
        return
    if not os.path.exists(socket):
        view["live"] = {"queried": True, "ok": False, "socket": socket, "code": "UNAVAILABLE",
                        "error": "socket %s does not exist" % socket}
        return
    try:
        status = CRIClient(socket, timeout=timeout).status(verbose=True)
    except (CRIError, OSError, ValueError) as exc:
        view["live"] = {"queried": True, "ok": False, "socket": socket,
                        "code": getattr(exc, "code_name", type(exc).__name__), "error": str(exc)}
        return
    runtimes = runtimes_from_status(status)
    view["live"] = {"queried": True, "ok": True, "socket": socket,
                    "runtimes": dict((name, {"runtime_type": rt["runtime_type"], "binary": rt["binary_name"],
                                             "systemd_cgroup": rt["systemd_cgroup"]})
                                     for name, rt in runtimes.items()),
                    "default_runtime": default_runtime_from_status(status) or None}


# --- Docker and CRI-O -----------------------------------------------------------------------------

def docker_files(node, instance, view):
    view["source"] = "files"
    path = instance["config_path"]
    text = node.read(path)
    view["files"].append({"path": path, "exists": text is not None})
    view["runtimes"] = dict((name, {"runtime_type": "", "binary": "", "systemd_cgroup": False,
                                    "builtin": True, "origin": None}) for name in DOCKER_BUILTIN)
    view["default_runtime"] = "runc"
    if text is None:
        return
    try:
        data = parse_daemon_json(text, path)  # as dockerd reads it: BOM skipped, NaN refused, `null` empty
    except DockerConfigError as exc:
        view["config_error"] = {"path": path, "line": exc.line, "message": exc.reason}
        return
    for name, runtime in (data.get("runtimes") or {}).items():
        runtime = runtime if isinstance(runtime, dict) else {}
        view["runtimes"][name] = {"runtime_type": runtime.get("runtimeType", ""), "binary": runtime.get("path", ""),
                                  "systemd_cgroup": False, "builtin": False,
                                  "origin": {"path": path, "line": key_line(text, ("runtimes", name))}}
    if data.get("default-runtime"):
        view["default_runtime"] = data["default-runtime"]
        view["default_origin"] = {"path": path, "line": key_line(text, ("default-runtime",))}


def crio_files(node, instance, view):
    """CRI-O: crio.conf, then every file of its drop-in directory in name order (later files override keys)."""
    view["source"] = "files"
    dropins = walk_files(instance["dropin_dir"] or "/etc/crio/crio.conf.d", node.listdir, node.isdir)
    paths = [instance["config_path"]] + dropins
    docs = []
    for path in paths:
        text = node.read(path)
        view["files"].append({"path": path, "exists": text is not None})
        if text is None:
            continue
        try:
            docs.append((path, read_toml(text)))
        except TomlError as exc:
            view["config_error"] = {"path": path, "line": exc.line, "message": exc.message}
            return
        view["config_error"] = type_error(path, docs[-1][1], _CRIO_TYPES, "CRI-O")
        if view["config_error"]:
            return
    merged = {}
    for _path, doc in docs:
        merged = deep_merge(merged, doc.data)
    view["reader"] = docs[0][1].reader if docs else None
    runtime = (merged.get("crio") or {}).get("runtime") or {}
    view["runtimes"] = dict((name, {"runtime_type": "oci", "binary": "", "systemd_cgroup": False, "builtin": True,
                                    "origin": None}) for name in CRIO_BUILTIN)
    for name, table in (runtime.get("runtimes") or {}).items():
        table = table if isinstance(table, dict) else {}
        view["runtimes"][name] = {
            "runtime_type": table.get("runtime_type", "oci"), "binary": table.get("runtime_path", ""),
            "systemd_cgroup": False, "builtin": False,
            "origin": last_origin(docs, lambda data, n=name: ("crio", "runtime", "runtimes", n)
                                  if n in (((data.get("crio") or {}).get("runtime") or {}).get("runtimes") or {})
                                  else None)}
    view["default_runtime"] = runtime.get("default_runtime") or "crun"
    view["default_origin"] = last_origin(docs, lambda data: ("crio", "runtime", "default_runtime")
                                         if "default_runtime" in ((data.get("crio") or {}).get("runtime") or {})
                                         else None)


# --- shared -------------------------------------------------------------------------------------

def binary_exists(node, binary):
    """(exists, where): BinaryName as the shim resolves it: a path, or a name on the service's PATH."""
    if not binary:
        return None, None
    # A BinaryName without a slash: the shim searches its service's PATH, not this process's.
    found = find_binary(binary, env_path=False, usable=node.isfile)
    return found is not None, found or binary
