# -*- coding: utf-8 -*-
# Copyright: gpunode.nvidia contributors
# Apache License 2.0
"""The node lock: one edit-restart-verify sequence per node at a time, across runs.

Used by gpunode.nvidia.node_lock (a task of its own) and by the modules that take the
lock in the same call that reads the config (run_holding), so that a run that changes
nothing does not pay two more round trips for it. Standard library only: runs on nodes.

The lock outlives the call (Ansible tasks are separate processes), so it is a lease file
naming its owner, replaced atomically. Every look at and change of the lease happens under
an exclusive flock on a guard file beside it, so two runs that find the same stale lease
cannot both take it over.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import collections
import fcntl
import json
import os
import tempfile
import time
from contextlib import contextmanager

from ansible_collections.gpunode.nvidia.plugins.module_utils.safe_exit import fail

DEFAULT_PATH = "/run/lock/gpunode-nvidia.lock"
# Beside the lock, never removed: every change to the lock happens while holding an
# flock on it, so two runs that find the same stale lock cannot both take it over.
GUARD_SUFFIX = ".guard"

# The lock's options, as node_lock takes them and as the `lock` option of the modules that fold it in.
LOCK_OPTIONS = dict(
    path=dict(type="path", default=DEFAULT_PATH),
    owner=dict(type="str", required=True),
    timeout=dict(type="int", default=600),
    stale_after=dict(type="int", default=3600),
)

# held_by: the owner; waited: seconds spent waiting for another owner; taken_over: the stale owner
# replaced, or None; reentered: the owner held it already before (it is not this call's to give back).
Lease = collections.namedtuple("Lease", ["held_by", "waited", "taken_over", "reentered"])


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
    """Take the lock for owner, waiting up to timeout seconds; return a Lease. TimeoutError names the holder."""
    directory = os.path.dirname(path)
    if directory and not os.path.isdir(directory):
        os.makedirs(directory, 0o755)
    start = clock()
    while True:
        taken, current, stale = try_take(path, owner, stale_after, clock)
        if taken:
            reentered = current is not None and not stale
            return Lease(owner, clock() - start, current.get("owner") if stale else None, reentered)
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


def timeout_message(exc):
    return ("%s. Another run is changing this node's container runtime; retry when it is done, or remove "
            "the lock file if that run is gone." % exc)


def run_holding(module, lock, run, keep):
    """run(module)'s result, computed while holding the node lock (`lock`: LOCK_OPTIONS' values).

    The lock is taken first (waiting as node_lock does). It is given back before this returns
    unless keep(result) is true, and always when run fails (fail_json's exit included), except
    when its owner held it before the call: then whoever took it gives it back. The result
    tells: lock_held (held by the owner after the call), lock_waited, lock_taken_over.
    """
    try:
        lease = acquire(lock["path"], lock["owner"], lock["timeout"], lock["stale_after"])
    except TimeoutError as exc:
        fail(module, timeout_message(exc))
    kept = lease.reentered
    try:
        result = run(module)
        kept = kept or bool(keep(result))
    finally:
        if not kept:
            release(lock["path"], lock["owner"])
    result.update(lock_held=kept, lock_waited=round(lease.waited, 1))
    if lease.taken_over:
        result["lock_taken_over"] = lease.taken_over
    return result


def under_lock_option(run):
    """run, for a config-editing module with a `lock` option: without the option, as it is; with it, under
    the node lock, which stays held after a write (for the restart and the checks that follow) and only then."""
    def run_locked(module):
        lock = module.params.get("lock")
        if not lock:
            return run(module)
        return run_holding(module, lock, run, lambda result: bool(result.get("changed")) and not module.check_mode)
    return run_locked
