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
  - The lock outlives the task (Ansible tasks are separate processes), so it is a lease file owned
    by O(owner), replaced atomically (temporary file and rename). A lease older than O(stale_after)
    seconds is taken over (a run that was killed cannot block the node forever).
  - Every look at and change of the lease happens under an exclusive C(flock) on a guard file
    beside it (O(path) plus C(.guard), never removed), so two runs that find the same stale lease
    cannot both take it over, and staleness is checked again while the guard is held.
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

import fcntl
import json
import os
import tempfile
import time
from contextlib import contextmanager

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpunode.nvidia.plugins.module_utils.safe_exit import fail, run_and_exit

# Beside the lock, never removed: every change to the lock happens while holding an
# flock on it, so two runs that find the same stale lock cannot both take it over.
GUARD_SUFFIX = ".guard"


@contextmanager
def guarded(path):
    """Hold an exclusive flock on the lock's guard file (released when the block ends)."""
    fd = os.open(path + GUARD_SUFFIX, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing drops the flock


def read_lock(path):
    """The lease as a dict; None when there is none; {} when unreadable (treated by its age)."""
    try:
        with open(path) as handle:
            lease = json.load(handle)
    except (IOError, OSError):
        return None if not os.path.exists(path) else {"since": _mtime(path)}
    except ValueError:
        return {"since": _mtime(path)}
    return lease if isinstance(lease, dict) else {"since": _mtime(path)}


def _mtime(path):
    try:
        return os.stat(path).st_mtime
    except OSError:
        return 0


def write_lock(path, owner):
    """Replace the lease atomically: readers see the old one or the new one, never half of it."""
    fd, temp = tempfile.mkstemp(prefix=".%s." % os.path.basename(path), dir=os.path.dirname(path) or ".")
    try:
        with os.fdopen(fd, "w") as handle:
            json.dump({"owner": owner, "since": time.time(), "pid": os.getpid()}, handle)
        os.chmod(temp, 0o644)
        os.rename(temp, path)
    except BaseException:
        os.unlink(temp)
        raise


def _since(lease):
    since = lease.get("since", 0)
    return since if isinstance(since, (int, float)) else 0


def try_take(path, owner, stale_after, clock):
    """One attempt, under the guard: (taken, lease found, whether it was stale)."""
    with guarded(path):
        current = read_lock(path)
        if current is None:
            write_lock(path, owner)
            return True, None, False
        if current.get("owner") == owner:
            return True, current, False
        if clock() - _since(current) > stale_after:
            write_lock(path, owner)  # still stale while we hold the guard: nobody else took it
            return True, current, True
        return False, current, False


def acquire(path, owner, timeout, stale_after, sleep=time.sleep, clock=time.time):
    """Return (held_by, waited, taken_over)."""
    directory = os.path.dirname(path)
    if directory and not os.path.isdir(directory):
        os.makedirs(directory, 0o755)
    start = clock()
    while True:
        taken, current, stale = try_take(path, owner, stale_after, clock)
        if taken:
            return owner, clock() - start, current.get("owner") if stale else None
        if clock() - start >= timeout:
            raise TimeoutError("lock %s is held by %s since %s; waited %ds" % (
                path, current.get("owner"), time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(_since(current))),
                timeout))
        sleep(1)


def release(path, owner):
    """Give the lock back when owner holds it; return who holds it afterwards."""
    if not os.path.exists(path):
        return None
    with guarded(path):
        current = read_lock(path)
        if current and current.get("owner") == owner:
            os.unlink(path)
            return None
        return current.get("owner") if current else None


ARGUMENT_SPEC = dict(
    path=dict(type="path", default="/run/lock/gpunode-nvidia.lock"),
    owner=dict(type="str", required=True),
    state=dict(type="str", choices=["acquired", "released"], default="acquired"),
    timeout=dict(type="int", default=600),
    stale_after=dict(type="int", default=3600),
)


def run_module(module):
    params = module.params
    if params["state"] == "released":
        return dict(changed=False, held_by=release(params["path"], params["owner"]), waited=0.0)
    try:
        held_by, waited, taken_over = acquire(params["path"], params["owner"], params["timeout"],
                                              params["stale_after"])
    except TimeoutError as exc:
        fail(module, "%s. Another run is changing this node's container runtime; retry when it is "
                     "done, or remove the lock file if that run is gone." % exc)
    result = dict(changed=False, held_by=held_by, waited=round(waited, 1))
    if taken_over:
        result["taken_over"] = taken_over
    return result


def main():
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    run_and_exit(module, "node_lock", module.params["path"], run_module)


if __name__ == "__main__":
    main()
