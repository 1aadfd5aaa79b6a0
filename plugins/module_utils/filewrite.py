# -*- coding: utf-8 -*-
# Copyright: gpunode.nvidia contributors
# Apache License 2.0
"""Atomic, attribute-preserving writes of configuration files on the node.

Standard library plus AnsibleModule helpers only.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import hashlib
import os
import tempfile


def sha256_bytes(data):
    return hashlib.sha256(data).hexdigest()


def read_bytes(path):
    """Return the file's bytes, or None when it does not exist."""
    try:
        with open(path, "rb") as handle:
            return handle.read()
    except (IOError, OSError) as exc:
        if getattr(exc, "errno", None) == 2:
            return None
        raise


def write_temp_beside(path, data, suffix=".tmp"):
    """Write data to a new temp file in path's directory, fsync it, return its name.

    Same directory so that the final rename is atomic and relative `imports`
    resolve exactly as they will for the real file.
    """
    directory = os.path.dirname(os.path.abspath(path)) or "."
    fd, tmp = tempfile.mkstemp(prefix=".%s.gpunode-" % os.path.basename(path), suffix=suffix, dir=directory)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
    except Exception:
        os.unlink(tmp)
        raise
    return tmp


def atomic_write(module, path, data, backup=False, mode=None):
    """Replace path with data atomically; keep owner, mode and SELinux context.

    Returns the backup file name (or None). A missing parent directory is
    created with mode 0755. `mode` applies only to a file that did not exist.
    """
    directory = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(directory):
        os.makedirs(directory, 0o755)
    existed = os.path.exists(path)
    backup_file = module.backup_local(path) if backup and existed else None
    tmp = write_temp_beside(path, data)
    # atomic_move copies owner, mode and SELinux context from an existing dest.
    module.atomic_move(tmp, path, unsafe_writes=False)
    if not existed and mode is not None:
        os.chmod(path, mode)
    _fsync_dir(directory)
    return backup_file


def _fsync_dir(directory):
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
