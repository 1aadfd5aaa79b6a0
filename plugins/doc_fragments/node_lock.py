# -*- coding: utf-8 -*-
# Copyright: gpunode.nvidia contributors
# Apache License 2.0
"""The `lock` option of the modules that take the node lock in the call that reads their file (the runtime
modules and containerd_config_file); each says in RV(lock_held) when it keeps the lock."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type


class ModuleDocFragment(object):
    DOCUMENTATION = r"""
options:
  lock:
    description:
      - Take the node lock (the lease file of M(gpunode.nvidia.node_lock), with the same owner, waiting and
        stale takeover) before reading the config file, in this same call. It is given back before the task ends
        unless the module keeps it for what follows (RV(lock_held) says when); then give it back after the restart
        and the checks, with O(gpunode.nvidia.node_lock#module:state=released) and the same owner. A failing task
        always gives back a lock it took; a lock its owner held before the call is left held.
      - The task fails naming the holder when another owner keeps it longer than O(lock.timeout).
      - Do not also take it with M(gpunode.nvidia.node_lock) under another owner (the task would wait for it).
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
