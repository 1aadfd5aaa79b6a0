# -*- coding: utf-8 -*-
# Copyright: gpunode.nvidia contributors
# Apache License 2.0
"""The node's record of containerd_runtime's last run that found nothing to change, and when it still holds.

containerd_runtime's answer depends on its request (the controller keeps a digest of it as the record's key)
and on the node: the files containerd loads, what each `imports` entry matches, and the containerd and
runtime binaries. The record keeps each of those as that run saw them. The node's discovery (gpu_node_facts,
`runtime_record`) compares them with the node as it is now; when every one is the same, and the request's
digest too, the controller reports the recorded answer instead of reading, planning and validating again.
Anything that differs (a file edited, a drop-in added, containerd upgraded, another request) means the full
run. Standard library only (node side).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os

from ansible_collections.gpunode.nvidia.plugins.module_utils.common import goglob
from ansible_collections.gpunode.nvidia.plugins.module_utils.common.binaries import find_binary
from ansible_collections.gpunode.nvidia.plugins.module_utils.editors.filewrite import read_bytes, sha256_bytes

RECORD_FORMAT = 1
# What a record says about the node, each compared with the node as it is now.
STATE_FIELDS = ("files", "patterns", "binaries")


def file_digest(path):
    """The file's SHA-256, or None when there is no file (a directory counts as none)."""
    data = read_bytes(path) if not os.path.isdir(path) else None
    return sha256_bytes(data) if data is not None else None


def binary_stamp(name):
    """Size and modification time of a binary (a package upgrade replaces both), or None when it is absent. A
    bare name is looked up as the editors look it up."""
    path = name if "/" in name else find_binary(name)
    if path is None:
        return None
    try:
        stat = os.stat(path)
    except OSError:
        return None
    return "%d:%d" % (stat.st_size, stat.st_mtime_ns)


def glob_matches(pattern):
    """What an `imports` pattern matches now, in order; None for a pattern containerd cannot read."""
    try:
        return sorted(goglob.glob(pattern))
    except goglob.BadPattern:
        return None


def node_state(files, patterns, binaries):
    """The node now, for the files, patterns and binaries named."""
    return {
        "files": dict((path, file_digest(path)) for path in files),
        "patterns": dict((pattern, glob_matches(pattern)) for pattern in patterns),
        "binaries": dict((path, binary_stamp(path)) for path in binaries),
    }


def differences(expected, now):
    """What differs between two states, in words; empty when nothing does."""
    found = []
    for path in sorted(expected["files"]):
        if expected["files"][path] != now["files"].get(path):
            found.append("%s %s" % (path, "is gone" if now["files"].get(path) is None else (
                "appeared" if expected["files"][path] is None else "changed")))
    for pattern in sorted(expected["patterns"]):
        if sorted(expected["patterns"][pattern] or []) != sorted(now["patterns"].get(pattern) or []):
            found.append("the files %s matches changed" % pattern)
    for path in sorted(expected["binaries"]):
        if expected["binaries"][path] != now["binaries"].get(path):
            found.append("%s was %s" % (path, "removed" if now["binaries"].get(path) is None else (
                "installed" if expected["binaries"][path] is None else "replaced")))
    return found


def parse(text):
    """The record in TEXT, or None when it is empty or not a record of this format."""
    try:
        record = json.loads(text) if text else None
    except ValueError:
        return None
    if not isinstance(record, dict) or record.get("format") != RECORD_FORMAT or not isinstance(
            record.get("result"), dict) or not all(isinstance(record.get(field), dict) for field in STATE_FIELDS):
        return None
    return record


def proposal_problem(proposal):
    """Why a proposed record (the controller's JSON) cannot be one, or ''."""
    if not isinstance(proposal, dict) or not isinstance(proposal.get("key"), str) or not isinstance(
            proposal.get("result"), dict):
        return "the record needs a key (string) and a result (mapping)"
    if not isinstance(proposal.get("files"), dict) or not isinstance(proposal.get("patterns"), dict) or not \
            isinstance(proposal.get("binaries"), list):
        return "the record needs files (mapping), patterns (mapping) and binaries (list)"
    return ""


def make(proposal):
    """(record, why not): the record of PROPOSAL when the node is still what the controller read, else None
    and what changed since (the controller read the files, then gave the node lock back)."""
    now = node_state(proposal["files"], proposal["patterns"], proposal["binaries"])
    changed = differences(dict(proposal, binaries={}), now)
    if changed:
        return None, "changed since it was read: %s" % "; ".join(changed)
    record = dict((field, now[field]) for field in STATE_FIELDS)
    record.update(format=RECORD_FORMAT, key=proposal["key"], result=proposal["result"])
    return record, ""


def dumps(record):
    return json.dumps(record, indent=2, sort_keys=True) + "\n"


def recall(path):
    """What gpu_node_facts reports for the record at PATH: found, holds (with the reason when it does not),
    and the key and result to compare and reuse."""
    data = read_bytes(path) if not os.path.isdir(path) else None
    if data is None:
        return {"path": path, "found": False, "holds": False, "reason": "no record on the node"}
    record = parse(data.decode("utf-8", "replace"))
    if record is None:
        return {"path": path, "found": False, "holds": False, "reason": "the record is not one this version reads"}
    changed = differences(record, node_state(record["files"], record["patterns"], record["binaries"]))
    return {"path": path, "found": True, "holds": not changed, "key": record["key"], "result": record["result"],
            "reason": "changed since the record: %s" % "; ".join(changed) if changed else ""}
