# -*- coding: utf-8 -*-
# Copyright: gpunode.nvidia contributors
# Apache License 2.0
"""Where an executable is: the one lookup of the editors, the node services, the runtime views and the modules.

Standard library only: this runs on managed nodes.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os

# The PATH systemd gives a service, in its order: what containerd's shims, dockerd and CRI-O search for a
# runtime binary without a slash, and where distribution packages put their tools.
SEARCH_DIRS = ("/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin")
# Where a driver installed by NVIDIA's GPU operator (driver container) puts nvidia-smi and its tools.
NVIDIA_TOOL_DIRS = ("/usr/local/nvidia/bin",)


def executable(path):
    return os.path.isfile(path) and os.access(path, os.X_OK)


def search_dirs(extra_dirs=(), env_path=True):
    """The directories a bare name is looked for in, in order: EXTRA_DIRS (where the tool's own installer puts
    it), this process's PATH when ENV_PATH (on the live node: the binary the caller means, e.g. a containerd
    unpacked beside the packaged one), then SEARCH_DIRS. Each directory once, empty entries dropped."""
    dirs = list(extra_dirs)
    if env_path:
        dirs += os.environ.get("PATH", "").split(os.pathsep)
    dirs += SEARCH_DIRS
    return [directory for index, directory in enumerate(dirs) if directory and directory not in dirs[:index]]


def find_binary(name, extra_dirs=(), env_path=True, usable=executable):
    """The path NAME runs from, or None. A name with a slash is that path when USABLE; a bare name is the first
    usable file of that name in search_dirs(EXTRA_DIRS, ENV_PATH). USABLE reads the node: executable() on
    the live node, a check through a root prefix for a node tree (then ENV_PATH is False: this process's PATH
    says nothing of another root)."""
    if "/" in name:
        return name if usable(name) else None
    for directory in search_dirs(extra_dirs, env_path):
        candidate = directory.rstrip("/") + "/" + name
        if usable(candidate):
            return candidate
    return None
