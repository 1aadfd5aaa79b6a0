# -*- coding: utf-8 -*-
# Copyright: gpunode.nvidia contributors
# Apache License 2.0
"""containerd_runtime's side of the node's record (module_utils/editors/runtime_record.py): the request's digest,
the recorded answer a run may report, and the proposal a run that changed nothing sends to the node."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import hashlib
import json

# Options that do not decide the answer: how the node is reached and locked, and where the record lives.
NOT_IN_KEY = ("discovered", "lock", "record")
# Fields of a discovered instance that change when it merely restarts.
VOLATILE_TARGET_FIELDS = ("pid", "running")
# Result fields of one run, never part of a recorded answer.
RUN_FIELDS = ("lock_held", "lock_waited", "lock_taken_over", "record", "diff")


def request_key(args, target):
    """Digest of what decides the answer: the options (after defaults) and the instance being configured."""
    request = dict((name, value) for name, value in args.items() if name not in NOT_IN_KEY)
    request["target"] = dict((name, value) for name, value in (target or {}).items()
                             if name not in VOLATILE_TARGET_FIELDS) if target else None
    text = json.dumps(request, sort_keys=True, default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def recall_of(args):
    """The discovery's recall of this task's record, or None when the discovery did not read it."""
    recall = (args.get("discovered") or {}).get("runtime_record")
    if not args["record"] or not isinstance(recall, dict) or recall.get("path") != args["record"]:
        return None
    return recall


def recorded_answer(args, key):
    """The recorded answer when the record holds for this request, else None."""
    recall = recall_of(args)
    if recall is None or not recall.get("holds") or recall.get("key") != key or not isinstance(
            recall.get("result"), dict):
        return None
    return dict(recall["result"], changed=False, record="reused")


def proposal(key, result, plan, args):
    """What the node records for a run that changed nothing: RESULT, with the state the run read.

    The files are the root and every file it loads, each `imports` path that was missing and the drop-in
    (absent: null); the patterns are the globs the imports named, with what each matched; the binaries are
    the containerd that validated and the runtime's binary."""
    current, files = plan.current, plan.files
    # The root is the first of them, with the SHA-256 the node sent (empty for a missing file).
    digests = dict((path, files.get(path).sha256 or None) for path in files.paths())
    for path in files.missing:
        digests[path] = None
    if args["drop_in"] and args["drop_in"] not in digests:
        digests[args["drop_in"]] = None
    binaries = [path for path in (current.get("binary_path"), args["binary"]) if path]
    answer = dict((name, value) for name, value in result.items() if name not in RUN_FIELDS)
    return {"key": key, "result": answer, "files": digests, "patterns": dict(plan.globs), "binaries": binaries}
