# -*- coding: utf-8 -*-
# Copyright: gpunode.nvidia contributors
# Apache License 2.0
"""How a containerd version resolves and merges `imports`: one answer for the editor (controller side,
plugin_utils/containerd/imports.py) and for discovery and the doctor (on the node, runtime_views.py).

Verified with Debian's 1.6.20, 1.7.24 and 2.1.9, and containerd's source: containerd loads its root file,
then the files its `imports` name, breadth first, each file once. An entry with `*` is a glob (Go's
filepath.Glob), any other entry is one file; a relative file is relative to the importing file's directory;
a relative glob is too from 1.7 on, but 1.6 expands it from its working directory (`/` under systemd). A
missing file stops containerd 1.x from starting; 2.x skips it. 1.x lets an imported plugin table replace
the whole table read before it; 2.x merges tables key by key. Standard library only.

And what a containerd version reads of a config (containerd's source at v2.2.0, v2.3.0, v2.3.4 and v2.4.0-beta.0:
version/version.go, cmd/containerd/server/config/config.go, internal/cri/config, RELEASES.md): the newest
`version` it starts with (3 from 2.0, 4 from 2.3, whose migration moves server settings into server plugins
and keeps the CRI plugin ids of version 3), and the keys 2.4 removes.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import posixpath
import re

# The CRI plugin's ids (field guide §2): `cri` in a version 1 file; io.containerd.grpc.v1.cri for containerd 1.x
# reading version 2; io.containerd.cri.v1.runtime and io.containerd.cri.v1.images for 2.x (versions 3 and 4).
CRI_V1 = "cri"
CRI_V2 = "io.containerd.grpc.v1.cri"
CRI_V3_RUNTIME = "io.containerd.cri.v1.runtime"
CRI_V3_IMAGES = "io.containerd.cri.v1.images"
# The plugin that holds the runtime settings, by config version: version 4 (containerd 2.3) keeps version 3's
# (plugins/cri/runtime/plugin.go at v2.3.0 and v2.4.0-beta.0; version 4 moved only server settings).
CRI_RUNTIME_PLUGIN = {1: CRI_V1, 2: CRI_V2, 3: CRI_V3_RUNTIME, 4: CRI_V3_RUNTIME}
# containerd 1.x's one CRI plugin, under its two names.
CRI_1X_PLUGINS = (CRI_V1, CRI_V2)
# The runtime plugin under each name it has had, oldest first: the names `config dump` shows it under.
CRI_RUNTIME_PLUGINS = CRI_1X_PLUGINS + (CRI_V3_RUNTIME,)
# Any of these in disabled_plugins leaves kubelet without CRI.
CRI_DISABLE_NAMES = CRI_RUNTIME_PLUGINS + (CRI_V3_IMAGES,)


# Removed in containerd 2.4 (RELEASES.md "Deprecated features" at v2.4.0-beta.0): (plugin ids, key in that
# plugin's table, deprecated since, what to use instead). CDI is always on from 2.4.
REMOVED_IN_2_4 = (
    ((CRI_V3_RUNTIME, CRI_V2), ("enable_cdi",), "2.2",
     "delete the key: CDI is always on"),
    ((CRI_V3_RUNTIME, CRI_V2), ("cni", "bin_dir"), "2.1",
     "use `bin_dirs` (a list of directories) in the same table"),
    (("io.containerd.internal.v1.tracing",), ("service_name",), "1.6.29",
     "set OTEL_SERVICE_NAME in containerd's environment"),
    (("io.containerd.internal.v1.tracing",), ("sampling_ratio",), "1.6.29",
     "set OTEL_TRACES_SAMPLER and OTEL_TRACES_SAMPLER_ARG in containerd's environment"),
    (("io.containerd.tracing.processor.v1.otlp",), ("endpoint",), "1.6.29",
     "set OTEL_EXPORTER_OTLP_TRACES_ENDPOINT in containerd's environment"),
    (("io.containerd.tracing.processor.v1.otlp",), ("protocol",), "1.6.29",
     "set OTEL_EXPORTER_OTLP_PROTOCOL in containerd's environment"),
    (("io.containerd.tracing.processor.v1.otlp",), ("insecure",), "1.6.29",
     "set OTEL_EXPORTER_OTLP_INSECURE in containerd's environment"),
)


def release(containerd_version):
    """(major, minor) of a containerd version string ("2.3.4", "1:2.4.0~ds1"), or None."""
    match = re.search(r"(\d+)\.(\d+)", containerd_version or "")
    return (int(match.group(1)), int(match.group(2))) if match else None


def newest_config_version(containerd_version):
    """The newest config `version` a containerd starts with, where known: 2 for 1.7 (1.6 reads any newer
    header as 2), 3 for 2.0 to 2.2, 4 from 2.3 (version/version.go ConfigVersion)."""
    known = release(containerd_version)
    if known is None or known < (1, 7):
        return None
    if known < (2, 0):
        return 2
    return 3 if known < (2, 3) else 4


def cdi_always_on(containerd_version):
    """containerd 2.4 removes `enable_cdi`: CDI is always on (deprecated since 2.2, RELEASES.md)."""
    known = release(containerd_version)
    return known is not None and known >= (2, 4)


def removed_keys(plugins):
    """[(plugin id, key path, value, since, instead)] of the keys containerd 2.4 removed found in a file's
    `plugins`."""
    found = []
    for plugin_ids, key_path, since, instead in REMOVED_IN_2_4:
        for plugin_id in plugin_ids:
            table = plugins.get(plugin_id) if isinstance(plugins, dict) else None
            for key in key_path[:-1]:
                table = table.get(key) if isinstance(table, dict) else None
            if isinstance(table, dict) and key_path[-1] in table:
                found.append((plugin_id, key_path, table[key_path[-1]], since, instead))
    return found


class Semantics(object):
    """How a containerd version resolves and merges imports."""

    def __init__(self, containerd_version, root_version=None):
        self.major, self.minor = release(containerd_version) or (None, None)
        if self.major is None and root_version is not None and root_version >= 3:
            self.major = 2  # only containerd 2.x reads version 3 and 4 files
        # Unknown version: assume the 1.x rules, the ones that can lose settings.
        self.replaces_plugin_tables = self.major is None or self.major < 2
        self.missing_file_is_fatal = self.major is None or self.major < 2
        self.glob_from_cwd = self.major == 1 and self.minor < 7

    def name(self):
        return "%d.%d" % (self.major, self.minor) if self.minor is not None else "1.x"

    def absolute(self, entry, importer):
        """The absolute path or pattern an `imports` entry stands for."""
        if "*" in entry and self.glob_from_cwd:
            return entry if posixpath.isabs(entry) else posixpath.join("/", entry)
        path = posixpath.normpath(entry)
        if not posixpath.isabs(path):
            path = posixpath.normpath(posixpath.join(posixpath.dirname(importer), path))
        return path


def deep_merge(base, override):
    """`override` merged over `base` the way containerd merges an imported file into what it read before:
    tables key by key, any other value replaced whole."""
    out = dict(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = value
    return out
