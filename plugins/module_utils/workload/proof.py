# -*- coding: utf-8 -*-
# Copyright: gpunode.nvidia contributors
# Apache License 2.0
"""The node's record of its last successful GPU workload proof, and when it still holds.

A proof depends on the runtime's config file, the NVIDIA driver, the container toolkit and the
runtime daemon, and on what was run (engine, socket, handler, image). The record is kept on the node
with those as its key; a later run that changed nothing may report it instead of running the
workload again, as long as every part of the key is the same and the live runtime still has the
handler loaded. Standard library only (node side).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import time

RECORD_FORMAT = 1
# Verdicts a record is made of: a run that proved what it could on this node.
PROVEN = ("cuda-verified", "wiring-only")
KEY_FIELDS = ("engine", "socket", "runtime_handler", "image", "config_sha256", "runtime_version",
              "driver_version", "toolkit_version")
KEY_LABELS = {
    "engine": "runtime engine", "socket": "runtime socket", "runtime_handler": "runtime handler",
    "image": "workload image", "config_sha256": "runtime config file", "runtime_version": "runtime version",
    "driver_version": "NVIDIA driver version", "toolkit_version": "container toolkit version",
}


def proof_key(engine, socket, runtime_handler, image, config_sha256, runtime_version, driver_version,
              toolkit_version):
    """What the proof depends on; None stands for 'absent' (no driver, no config file)."""
    return {
        "engine": engine, "socket": socket, "runtime_handler": runtime_handler, "image": image,
        "config_sha256": config_sha256, "runtime_version": runtime_version,
        "driver_version": driver_version, "toolkit_version": toolkit_version,
    }


def make_record(key, result, now=None):
    """The record of a successful run (result: the check's result), or None when it proved nothing."""
    if result.get("verdict") not in PROVEN:
        return None
    return {
        "format": RECORD_FORMAT,
        "key": key,
        "verdict": result["verdict"],
        "cuda_verified": bool(result.get("cuda_verified")),
        "runtime_wiring_verified": bool(result.get("runtime_wiring_verified")),
        "recorded_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now)),
        "duration_s": result.get("duration_s"),
    }


def dumps(record):
    return json.dumps(record, indent=2, sort_keys=True) + "\n"


def parse(text):
    """The record in text, or None when text is empty or not a record of this format."""
    if not text:
        return None
    try:
        record = json.loads(text)
    except ValueError:
        return None
    if not isinstance(record, dict) or record.get("format") != RECORD_FORMAT or not isinstance(record.get("key"), dict):
        return None
    return record


def holds(record, key, loaded_handlers):
    """(True, '') when record proves the node as it is now, else (False, why not, in words)."""
    if record is None:
        return False, "no proof is recorded on the node"
    if record.get("verdict") not in PROVEN:
        return False, "the recorded run did not pass"
    changed = [KEY_LABELS[field] for field in KEY_FIELDS if record["key"].get(field) != key.get(field)]
    if changed:
        return False, "changed since the recorded proof: %s" % ", ".join(changed)
    if key["runtime_handler"] not in loaded_handlers:
        return False, "the runtime does not have the %r handler loaded now" % key["runtime_handler"]
    return True, ""
