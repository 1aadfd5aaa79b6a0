# -*- coding: utf-8 -*-
# Copyright: gpunode.nvidia contributors
# Apache License 2.0
"""The `lock` option: of the runtime modules, which take the node lock in the call that reads their file
(DOCUMENTATION), and of containerd_config_file, which takes it for one call (ONE_CALL). Its suboptions are
written once, for both."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type


_LOCK_SUBOPTIONS = r"""
    type: dict
    suboptions:
      path:
        description: The lock file.
        type: path
        default: /run/lock/gpunode-nvidia.lock
      owner:
        description: Who takes the lock (one name per run).
        type: str
        required: true
      timeout:
        description: Seconds to wait for another owner's lock.
        type: int
        default: 600
      stale_after:
        description:
          - Seconds without a sign of life from another owner after which its lock is taken over. Signs of life
            are its module calls that hold the lock, and a keeper process those calls leave on the node, which
            vouches for the owner while its connection lives (for SSH, while a task of it runs). See
            M(gpunode.nvidia.node_lock).
        type: int
        default: 90
"""


class ModuleDocFragment(object):
    DOCUMENTATION = r"""
options:
  lock:
    description:
      - Take the node lock (the lease file of M(gpunode.nvidia.node_lock), with the same owner, waiting and
        stale takeover) before reading the config file, in this same call. It is given back before the task ends
        unless the file was written (RV(lock_held)); then give it back after the restart and the checks, with
        O(gpunode.nvidia.node_lock#module:state=released) and the same owner. Check mode and a failing task never
        leave it held.
      - The task fails naming the holder when another owner keeps it longer than O(lock.timeout).
      - Do not also take it with M(gpunode.nvidia.node_lock) under another owner (the task would wait for it).
""" + _LOCK_SUBOPTIONS

    # containerd_config_file: the lock for one call, kept only when asked (the action writes and restarts next).
    ONE_CALL = r"""
options:
  lock:
    description:
      - Take the node lock before anything else, as M(gpunode.nvidia.node_lock) does (same lease file,
        owner and waiting), and give it back before the call returns, unless O(keep_lock=true).
      - A failing call always gives back a lock it took. A lock its owner held before the call is left held.
      - The call fails naming the holder when another owner keeps it longer than O(lock.timeout).
""" + _LOCK_SUBOPTIONS + r"""
  keep_lock:
    description:
      - With O(lock), keep holding the lock when the call succeeds (RV(lock_held)), for a write and a restart
        that follow; give it back later with O(gpunode.nvidia.node_lock#module:state=released).
    type: bool
    default: false
"""
