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
# The plugin that holds the runtime settings, by config version.
CRI_RUNTIME_PLUGIN = {1: CRI_V1, 2: CRI_V2, 3: CRI_V3_RUNTIME, 4: CRI_V3_RUNTIME}
# containerd 1.x's one CRI plugin, under its two names.
CRI_1X_PLUGINS = (CRI_V1, CRI_V2)
# The runtime plugin under each name it has had, oldest first: the names `config dump` shows it under.
CRI_RUNTIME_PLUGINS = CRI_1X_PLUGINS + (CRI_V3_RUNTIME,)
# Any of these in disabled_plugins leaves kubelet without CRI.
CRI_DISABLE_NAMES = CRI_RUNTIME_PLUGINS + (CRI_V3_IMAGES,)


class Semantics(object):
    """How a containerd version resolves and merges imports."""

    def __init__(self, containerd_version, root_version=None):
        match = re.search(r"(\d+)\.(\d+)", containerd_version or "")
        self.major, self.minor = (int(match.group(1)), int(match.group(2))) if match else (None, None)
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
