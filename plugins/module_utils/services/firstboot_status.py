# -*- coding: utf-8 -*-
# Copyright: gpunode.nvidia contributors
# Apache License 2.0
"""Where a baked image's first boot records what it did, and which instance it did it for.

The first-boot program (firstboot.py) writes the status file; the diagnosis rule
`firstboot-failed` reads it. The file is keyed on the instance: cloud-init's instance id
when cloud-init ran, else /etc/machine-id (emptied by the bake, so that every machine
started from the image gets its own). Standard library only: runs on managed nodes.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os
import tempfile

from ansible_collections.gpunode.nvidia.plugins.module_utils.common.node_paths import in_root

STATUS_PATH = "/var/lib/gpunode/firstboot.json"
CONFIG_PATH = "/etc/gpunode/firstboot.json"
UNIT = "gpunode-firstboot.service"
CLOUD_INIT_INSTANCE_ID = "/var/lib/cloud/data/instance-id"
MACHINE_ID = "/etc/machine-id"


def _read_text(path):
    try:
        with open(path) as handle:
            return handle.read().strip()
    except (IOError, OSError):
        return ""


def instance_id(root="/"):
    """('cloud-init'|'machine-id', id) of this machine, or (None, None) when it has neither."""
    for source, path in (("cloud-init", CLOUD_INIT_INSTANCE_ID), ("machine-id", MACHINE_ID)):
        value = _read_text(in_root(root, path))
        if value:
            return source, value
    return None, None


def read_status(root="/"):
    """(status dict or None, problem or None): None, None when the first boot never ran here."""
    try:
        with open(in_root(root, STATUS_PATH)) as handle:
            text = handle.read()
    except (IOError, OSError) as exc:
        if getattr(exc, "errno", None) == 2:
            return None, None
        return None, "cannot read %s: %s" % (STATUS_PATH, exc)
    return parse_status(text)


def parse_status(text):
    """(status dict or None, problem or None) from the status file's text (None: no file)."""
    if text is None:
        return None, None
    try:
        status = json.loads(text)
    except ValueError as exc:
        return None, "%s is not JSON: %s" % (STATUS_PATH, exc)
    if not isinstance(status, dict):
        return None, "%s does not hold a JSON object" % STATUS_PATH
    return status, None


def write_status(status, root="/"):
    """Replace the status file atomically (readers never see half a file)."""
    path = in_root(root, STATUS_PATH)
    directory = os.path.dirname(path)
    if not os.path.isdir(directory):
        os.makedirs(directory, 0o755)
    fd, temp = tempfile.mkstemp(prefix=".firstboot.", dir=directory)
    try:
        with os.fdopen(fd, "w") as handle:
            json.dump(status, handle, indent=2, sort_keys=True)
            handle.write("\n")
        os.chmod(temp, 0o644)
        os.rename(temp, path)
    except Exception:
        if os.path.exists(temp):
            os.unlink(temp)
        raise
    return path


def done_for(status, source, value):
    """True when STATUS says the first boot already succeeded on this instance."""
    return bool(status and status.get("ok") and status.get("instance_id") == value
                and status.get("instance_id_source") == source)
