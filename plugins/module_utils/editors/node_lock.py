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

Whether the holder still lives: its controller is on another machine, so its PID on the node
says nothing. The lease records two signs of life instead: `called`, the last call of a module
that holds it (each call renews it), and `renewed`, written every few seconds by a keeper
process that the holding call leaves on the node. The keeper watches the holder's connection
process (the sshd session its tasks run under; with a local connection, the ansible process
that runs the play) and renews while it lives and, for ssh, while a task of that connection is
running. It stops when the connection goes (controller killed: the SSH master lingers at most
ControlPersist, 60 s by default; connection lost: the node's task ends) or the lease is given
back. A lease is abandoned when its newest sign of life is older than stale_after (90 s by
default). A waiter that shares the holder's connection (another run from the same controller
over the same SSH master) would itself keep that connection busy, so it judges by `called` only.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import collections
import fcntl
import json
import os
import signal
import tempfile
import time
from contextlib import contextmanager

from ansible_collections.gpunode.nvidia.plugins.module_utils.editors.safe_exit import fail

DEFAULT_PATH = "/run/lock/gpunode-nvidia.lock"
# Beside the lock, never removed: every change to the lock happens while holding an
# flock on it, so two runs that find the same stale lock cannot both take it over.
GUARD_SUFFIX = ".guard"

# Seconds between two renewals by the keeper; stale_after must be well above it.
KEEPER_INTERVAL = 5
# A keeper never outlives this, whatever its connection does.
KEEPER_LIFETIME = 24 * 3600

# The lock's options, as node_lock takes them and as the `lock` option of the modules that fold it in.
LOCK_OPTIONS = dict(
    path=dict(type="path", default=DEFAULT_PATH),
    owner=dict(type="str", required=True),
    timeout=dict(type="int", default=600),
    stale_after=dict(type="int", default=90),
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


def write_lock(path, owner, previous=None):
    """Replace the lease atomically: readers see the old one or the new one, never half of it.

    A call of the owner: `called` renewed, the connection recorded (previous: the owner's lease, kept since)."""
    now = time.time()
    lease = {"owner": owner, "since": now, "pid": os.getpid(), "called": now, "connection": connection()}
    if previous and previous.get("owner") == owner:
        lease["since"] = previous.get("since", now)
    replace_lease(path, lease)


def replace_lease(path, lease):
    fd, temp = tempfile.mkstemp(prefix=".%s." % os.path.basename(path), dir=os.path.dirname(path) or ".")
    try:
        with os.fdopen(fd, "w") as handle:
            json.dump(lease, handle)
        os.chmod(temp, 0o644)
        os.rename(temp, path)
    except BaseException:
        os.unlink(temp)
        raise


def _time(lease, key):
    value = lease.get(key, 0)
    return value if isinstance(value, (int, float)) and not isinstance(value, bool) else 0


def _since(lease):
    return _time(lease, "since")


def last_sign_of_life(lease, mine):
    """When the holder last showed it lives; `mine`: the waiter's own connection."""
    signs = [_since(lease), _time(lease, "called")]
    if not (mine and lease.get("connection") == mine):  # else its busy connection is the waiter's own doing
        signs.append(_time(lease, "renewed"))
    return max(signs)


def try_take(path, owner, stale_after, clock):
    """One attempt, under the guard: (taken, lease found, whether it was stale). The owner's own call renews."""
    with guarded(path):
        current = read_lock(path)
        if current is None:
            write_lock(path, owner)
            return True, None, False
        if current.get("owner") == owner:
            write_lock(path, owner, current)
            return True, current, False
        if clock() - last_sign_of_life(current, connection()) > stale_after:
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
    return ("%s. Another run is changing this node's container runtime and still shows signs of life; retry "
            "when it is done. A run that is gone is taken over by itself once it has shown none for stale_after "
            "seconds." % exc)


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
    if kept:
        start_keeper(lock["path"], lock["owner"])
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


# --- the holder's connection, and the keeper that vouches for it ---------------------------------

def _stat_fields(pid):
    """(command name, parent pid, start time in clock ticks) of a process, or None when it is gone."""
    try:
        with open("/proc/%d/stat" % pid) as handle:
            raw = handle.read()
    except (IOError, OSError):
        return None
    name = raw[raw.index("(") + 1:raw.rindex(")")]
    fields = raw[raw.rindex(")") + 2:].split()
    return name, int(fields[1]), int(fields[19])


def _argv(pid):
    try:
        with open("/proc/%d/cmdline" % pid, "rb") as handle:
            return handle.read().decode("utf-8", "replace").split("\0")
    except (IOError, OSError):
        return []


def _is_ansible_cli(pid):
    return any(os.path.basename(arg).startswith("ansible") for arg in _argv(pid)[:2])


def connection(pid=None):
    """The process that lives as long as this call's connection: {pid, start, kind}, or None.

    kind ssh: the nearest sshd ancestor (the session that runs this connection's tasks);
    kind local: the outermost of the nearest ansible processes (the play, run on this node).
    """
    pid = os.getppid() if pid is None else pid
    while pid > 1:
        fields = _stat_fields(pid)
        if fields is None:
            return None
        name, parent, start = fields
        if name.startswith("sshd"):
            return {"pid": pid, "start": start, "kind": "ssh"}
        if _is_ansible_cli(pid):
            return _outermost_ansible(pid, parent, start)
        pid = parent
    return None


def _outermost_ansible(pid, parent, start):
    """A play's worker processes are forks of the ansible process that runs it: climb to that one."""
    while parent > 1 and _is_ansible_cli(parent):
        fields = _stat_fields(parent)
        if fields is None:
            break
        pid, parent, start = parent, fields[1], fields[2]
    return {"pid": pid, "start": start, "kind": "local"}


def connection_alive(conn):
    """The connection still serves its controller: its process lives and, for ssh, runs a task right now."""
    fields = _stat_fields(conn["pid"])
    if fields is None or fields[2] != conn["start"]:
        return False
    return conn["kind"] == "local" or _has_children(conn["pid"])


def _has_children(pid):
    for name in os.listdir("/proc"):
        if name.isdigit():
            fields = _stat_fields(int(name))
            if fields is not None and fields[1] == pid:
                return True
    return False


def start_keeper(path, owner):
    """Leave a keeper on the node that renews owner's lease while its connection is alive (see the module doc)."""
    conn = connection()
    if conn is None:
        return  # no connection to watch: only the owner's calls renew the lease
    child = os.fork()
    if child:
        os.waitpid(child, 0)  # it forks the keeper and ends at once
        return
    try:  # the keeper: detached from this call, which must end now
        os.setsid()
        if os.fork():
            os._exit(0)
        _detach()
        keep_renewing(path, owner, conn)
    finally:
        os._exit(0)


def _detach():
    """Let go of the call's stdin/stdout/stderr, or the controller would wait for the keeper to end."""
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(devnull, fd)
    os.closerange(3, 1024)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)


def keep_renewing(path, owner, conn, sleep=time.sleep, clock=time.time):
    """Renew owner's lease every KEEPER_INTERVAL seconds while conn is alive; stop when it is not the owner's."""
    me = os.getpid()
    started = clock()
    while clock() - started < KEEPER_LIFETIME:
        with guarded(path):
            lease = read_lock(path)
            if not lease or lease.get("owner") != owner or lease.get("connection") != conn:
                return  # given back, taken over, or the owner's calls now come over another connection
            keeper = lease.get("keeper")
            if keeper not in (None, me) and _stat_fields(keeper) is not None:
                return  # another keeper already vouches for this connection
            if not connection_alive(conn):
                return
            lease.update(renewed=clock(), keeper=me)
            replace_lease(path, lease)
        sleep(KEEPER_INTERVAL)
