#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpunode.nvidia contributors
# Apache License 2.0

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: node_lock
short_description: Serialise edit-restart-verify sequences on a node across concurrent runs
version_added: 0.1.0
description:
  - Two runs at once on one node (two operators, a cron job) must not interleave a runtime edit,
    its restart and the check that follows. This module takes a lock file for a named owner and
    waits while another owner holds it.
  - The lock outlives the task (Ansible tasks are separate processes), so it is a lease, created
    atomically with C(O_EXCL) and owned by O(owner). A lease older than O(stale_after) seconds is
    taken over (a run that was killed cannot block the node forever).
  - "It reports C(changed=false): the lock is bookkeeping, not a change to the node."
author:
  - gpunode.nvidia contributors (!UNKNOWN)
options:
  path:
    description: The lock file.
    type: path
    default: /run/lock/gpunode-nvidia.lock
  owner:
    description: Who takes the lock; the same owner may take it again (re-entrant).
    type: str
    required: true
  state:
    description: V(acquired) takes the lock (waiting up to O(timeout)); V(released) gives it back if held by O(owner).
    type: str
    choices: [acquired, released]
    default: acquired
  timeout:
    description: Seconds to wait for another owner's lock.
    type: int
    default: 600
  stale_after:
    description: Seconds after which another owner's lock is considered abandoned.
    type: int
    default: 3600
attributes:
  check_mode:
    description: Can run in check_mode and return changed status prediction without modifying target.
    support: full
    details: The lock is taken in check mode too, so a check run does not read a half-applied change.
  diff_mode:
    description: Will return details on what has changed (or possibly needs changing in check_mode), when in diff mode.
    support: none
"""

EXAMPLES = r"""
- name: Take the node lock for this run
  gpunode.nvidia.node_lock:
    owner: "{{ container_runtime_lock_owner }}"
- name: Give it back
  gpunode.nvidia.node_lock:
    owner: "{{ container_runtime_lock_owner }}"
    state: released
"""

RETURN = r"""
held_by:
  description: The owner holding the lock after the call (null when free).
  returned: always
  type: str
waited:
  description: Seconds spent waiting for another owner.
  returned: always
  type: float
taken_over:
  description: The stale owner whose lock was taken over, if any.
  returned: when a stale lock was taken over
  type: str
"""

import errno
import json
import os
import time

from ansible.module_utils.basic import AnsibleModule


def read_lock(path):
    try:
        with open(path) as handle:
            return json.load(handle)
    except (IOError, OSError, ValueError):
        return None


def try_create(path, owner):
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    except OSError as exc:
        if exc.errno == errno.EEXIST:
            return False
        raise
    with os.fdopen(fd, "w") as handle:
        json.dump({"owner": owner, "since": time.time(), "pid": os.getpid()}, handle)
    return True


def acquire(path, owner, timeout, stale_after, sleep=time.sleep, clock=time.time):
    """Return (held_by, waited, taken_over)."""
    directory = os.path.dirname(path)
    if directory and not os.path.isdir(directory):
        os.makedirs(directory, 0o755)
    start = clock()
    while True:
        if try_create(path, owner):
            return owner, clock() - start, None
        current = read_lock(path) or {}
        if current.get("owner") == owner:
            return owner, clock() - start, None
        if clock() - current.get("since", 0) > stale_after:
            os.unlink(path)
            if try_create(path, owner):
                return owner, clock() - start, current.get("owner")
            continue
        if clock() - start >= timeout:
            raise TimeoutError("lock %s is held by %s since %s; waited %ds" % (
                path, current.get("owner"), time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(current.get("since", 0))),
                timeout))
        sleep(1)


def release(path, owner):
    current = read_lock(path)
    if current and current.get("owner") == owner:
        os.unlink(path)
        return None
    return current.get("owner") if current else None


def main():
    module = AnsibleModule(
        argument_spec=dict(
            path=dict(type="path", default="/run/lock/gpunode-nvidia.lock"),
            owner=dict(type="str", required=True),
            state=dict(type="str", choices=["acquired", "released"], default="acquired"),
            timeout=dict(type="int", default=600),
            stale_after=dict(type="int", default=3600),
        ),
        supports_check_mode=True,
    )
    params = module.params
    if params["state"] == "released":
        module.exit_json(changed=False, held_by=release(params["path"], params["owner"]), waited=0.0)
    try:
        held_by, waited, taken_over = acquire(params["path"], params["owner"], params["timeout"],
                                              params["stale_after"])
    except TimeoutError as exc:
        module.fail_json(msg="%s. Another run is changing this node's container runtime; retry when it is "
                             "done, or remove the lock file if that run is gone." % exc)
    result = dict(changed=False, held_by=held_by, waited=round(waited, 1))
    if taken_over:
        result["taken_over"] = taken_over
    module.exit_json(**result)


if __name__ == "__main__":
    main()
