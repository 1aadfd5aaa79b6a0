# -*- coding: utf-8 -*-
# Copyright: gpunode.nvidia contributors
# Apache License 2.0
"""What a containerd runtime table means to containerd (controller side).

Which keys name a runtime's OCI binary (BinaryName, the 1.x v1 shim's Runtime or runtime_engine), which keys a
new runtime inherits from the one pods use today, which runtime pods use today, and a runtime as containerd
runs it (its `config dump` view under the keys the file sets). The planner (toml_edit.py) and the plan over
loaded files (plan.py) read runtimes through these."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import copy

from ansible_collections.gpunode.nvidia.plugins.module_utils.node.containerd_semantics import deep_merge
from ansible_collections.gpunode.nvidia.plugins.plugin_utils.containerd.toml_render import get_path, set_path

RUNC_TYPE = "io.containerd.runc.v2"
# Shims that run the OCI runtime binary named in options.BinaryName (or, for the 1.x v1 shim, options.Runtime).
RUNC_SHIMS = ("io.containerd.runc.v2", "io.containerd.runc.v1")
V1_LINUX_SHIM = "io.containerd.runtime.v1.linux"
# Keys a runtime must share with the runtime pods use today, even when it already exists.
INHERITED_KEYS = (("runtime_type",), ("privileged_without_host_devices",), ("options", "SystemdCgroup"))


def is_nvidia_runtime(name, table):
    binary = get_path(table, ("options", "BinaryName")) or ""
    return "nvidia" in name or "nvidia" in str(binary)


def pick_source_runtime(runtimes, default_name, own_name):
    """The runtime pods use today among merged runtimes (files of a drop-in world): the default unless
    it is an nvidia runtime, else runc, else crun."""
    for candidate in (default_name, "runc", "crun"):
        table = runtimes.get(candidate)
        if candidate != own_name and isinstance(table, dict) and not is_nvidia_runtime(candidate, table):
            return candidate
    return None


def inherited_value(table, key):
    """An inherited key's value, with containerd's defaults (false; the runc shim for no runtime_type)."""
    value = get_path(table, key)
    if key == ("runtime_type",):
        return value or RUNC_TYPE
    return False if value is None else value


def binaries_of(table):
    """The OCI runtime binaries a runtime table names (options.BinaryName, the v1 shim's options.Runtime
    or, without options, its runtime_engine)."""
    return [value for value in (get_path(table, key) for key in _BINARY_KEYS) if isinstance(value, str) and value]


_BINARY_KEYS = (("options", "BinaryName"), ("options", "Runtime"), ("runtime_engine",))


def binary_keys(table):
    """Where a runtime table names its OCI runtime binary: options.BinaryName; the 1.x v1 shim reads
    options.Runtime, and without an options table its legacy runtime_engine (containerd 1.x builds the v1
    shim's options from runtime_engine, runtime_root and the CRI-level systemd_cgroup only then)."""
    if table.get("runtime_type") != V1_LINUX_SHIM:
        return (("options", "BinaryName"),)
    if "options" not in table:
        return (("runtime_engine",),)
    return (("options", "BinaryName"), ("options", "Runtime"))


def is_builtin_runc(table):
    """Whether a runtime table says nothing containerd's built-in runc does not (1.6/1.7 `config dump`)."""
    return runtime_as_run(None, table) in ({"runtime_type": RUNC_TYPE},
                                           {"runtime_type": RUNC_TYPE, "sandbox_mode": "podsandbox"})


def runtime_as_run(file_table, effective_table):
    """A runtime as containerd runs it: its effective table (`config dump`) without the zero values a
    new runtime gets anyway, under the keys the file itself sets."""
    table = _without_zero_values(effective_table) if isinstance(effective_table, dict) else {}
    return deep_merge(table, file_table if isinstance(file_table, dict) else {})


def _without_zero_values(data):
    kept = {}
    for key, value in data.items():
        if isinstance(value, dict):
            value = _without_zero_values(value)
        if value not in ("", 0, False, [], {}) or isinstance(value, float):
            kept[key] = value
    return kept


def desired_runtime(existing, source, binary):
    """The runtime table to write: a copy of `source`, or `existing` brought in line with it."""
    if existing is None:
        table = copy.deepcopy(source)
    else:
        table = copy.deepcopy(existing)
        for key in INHERITED_KEYS:
            value = get_path(source, key)
            # A key the table leaves out is read by containerd as its default: equal is no change to write
            # (the source may spell out defaults, as a written-out runc does).
            if value is not None and inherited_value(source, key) != inherited_value(table, key):
                set_path(table, key, value)
    if not table.get("runtime_type"):
        table["runtime_type"] = RUNC_TYPE  # containerd refuses a container whose runtime has no type
    if binary is not None:
        for key in binary_keys(table):
            set_path(table, key, binary)
    return table
