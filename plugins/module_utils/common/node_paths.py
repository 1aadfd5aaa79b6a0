# -*- coding: utf-8 -*-
# Copyright: gpunode.nvidia contributors
# Apache License 2.0
"""Paths on the node seen through ``root`` (``/`` for the live node, a mounted image or a test tree
otherwise), and where systemd looks for units. One definition for every reader of the node.

Runs on managed nodes: standard library only.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import errno
import os

# systemd's unit search path for the system manager, highest priority first.
UNIT_DIRS = ("/etc/systemd/system", "/run/systemd/system", "/usr/local/lib/systemd/system",
             "/lib/systemd/system", "/usr/lib/systemd/system")


def walk_files(directory, listdir, isdir, suffix=""):
    """The files under DIRECTORY whose names end with SUFFIX, in the order Go's filepath.Walk and WalkDir visit
    them: by name, a subdirectory's files where its name sorts. CRI-O applies every file of crio.conf.d this way
    (any name: a backup or an editor's swap file too), kubelet the `.conf` files of its --config-dir. listdir
    and isdir read the node (the live one, or an image's root)."""
    files = []
    for name in sorted(listdir(directory)):
        path = directory.rstrip("/") + "/" + name
        if isdir(path):
            files.extend(walk_files(path, listdir, isdir, suffix))
        elif name.endswith(suffix):
            files.append(path)
    return files


def in_root(root, node_path):
    """The local path of node_path when the node's `/` is at root."""
    return os.path.join(root or "/", node_path.lstrip("/"))


def resolve_in_root(root, node_path, max_links=40):
    """Follow symlinks of node_path as the node would, never leaving root.

    An absolute link target (``/lib64/libc.so.6 -> /lib/x86_64-linux-gnu/...``)
    is a path on the node, so it is taken relative to root, not to this
    machine's `/`. Returns the resolved node path (it may not exist); a loop
    raises OSError(ELOOP), as the kernel would.
    """
    parts = [p for p in node_path.split("/") if p]
    resolved = []
    links = 0
    while parts:
        part = parts.pop(0)
        if part == ".":
            continue
        if part == "..":
            if resolved:
                resolved.pop()
            continue
        local = in_root(root, "/" + "/".join(resolved + [part]))
        if os.path.islink(local):
            links += 1
            if links > max_links:
                raise OSError(errno.ELOOP, "too many levels of symbolic links", node_path)
            target = os.readlink(local)
            if target.startswith("/"):
                resolved = []
            parts = [p for p in target.split("/") if p] + parts
            continue
        resolved.append(part)
    return "/" + "/".join(resolved)


def unit_path(exists, name):
    """The unit file systemd loads for NAME: the first UNIT_DIRS entry that has it (a link to /dev/null
    included: a masked unit), or None. EXISTS(path) reads the node (through its root)."""
    return next((d + "/" + name for d in UNIT_DIRS if exists(d + "/" + name)), None)


def unit_dropins(listdir, name):
    """NAME's drop-ins (NAME.d/*.conf) in the order systemd applies them: from every unit directory, one of
    the same file name in a higher-priority directory replacing the lower one, all sorted by file name."""
    dropins = {}
    for directory in reversed(UNIT_DIRS):
        for entry in listdir(directory + "/" + name + ".d"):
            if entry.endswith(".conf"):
                dropins[entry] = directory + "/" + name + ".d/" + entry
    return [dropins[entry] for entry in sorted(dropins)]


def unit_files(exists, listdir, name):
    """The unit file, then its drop-ins; the drop-ins are listed even where the unit file itself is not
    found (a drop-in still says what runs)."""
    main = unit_path(exists, name)
    return ([main] if main else []) + unit_dropins(listdir, name)
