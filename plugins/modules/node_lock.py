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
notes:
  - The lock outlives the task (Ansible tasks are separate processes), so it is a lease file owned
    by O(owner), replaced atomically (temporary file and rename).
  - "A run that died does not block the node: its controller is on another machine, so the lease records
    signs of life instead of a PID: each call that takes or holds the lock renews it, and the call leaves a
    small keeper process on the node that renews it every 5 seconds while the run's connection lives: the
    sshd session of its tasks, while one of them runs (a restart, a check), or with a local connection the
    ansible process of the play. A controller killed or a connection lost stops the renewals (SSH keeps an
    idle shared connection for ControlPersist, 60 s by default); once the newest sign of life is older than
    O(stale_after) (90 s) another owner takes the lock over, so within about two minutes. A live run is not
    taken over while it runs a task or calls again within O(stale_after)."
  - Another run from the same controller shares its SSH connection (and keeps it busy while it waits), so it
    judges the holder by the holder's own calls only.
  - Every look at and change of the lease happens under an exclusive C(flock) on a guard file
    beside it (O(path) plus C(.guard), never removed), so two runs that find the same stale lease
    cannot both take it over, and staleness is checked again while the guard is held.
  - "It reports C(changed=false): the lock is bookkeeping, not a change to the node."
  - M(gpunode.nvidia.containerd_runtime), M(gpunode.nvidia.docker_runtime), M(gpunode.nvidia.crio_runtime) and
    M(gpunode.nvidia.containerd_config_file) take the same lock in the call that reads the config (their C(lock) option),
    which saves the round trips of this module where nothing changes; this module gives it back after a write.
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
    description:
      - Seconds without a sign of life from another owner after which its lock is taken over (see the description).
      - Raise it for plays over many nodes where one node can wait longer than this between two of its tasks while
        the lock is held (a long handler on the other nodes, a C(pause)); the lock is then judged by its connection
        alone, which SSH closes after ControlPersist (60 s by default) without tasks.
    type: int
    default: 90
extends_documentation_fragment:
  - gpunode.nvidia.attributes
attributes:
  check_mode:
    support: full
    details: The lock is taken in check mode too, so a check run does not read a half-applied change.
  diff_mode:
    support: none
"""

EXAMPLES = r"""
- name: Name this run's lock owner once (the same owner takes and gives back the lock)
  ansible.builtin.set_fact:
    run_lock_owner: "{{ inventory_hostname }}:{{ now(utc=true).isoformat() }}"

- name: Take the node lock for this run
  gpunode.nvidia.node_lock:
    owner: "{{ run_lock_owner }}"

- name: Give it back
  gpunode.nvidia.node_lock:
    owner: "{{ run_lock_owner }}"
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

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpunode.nvidia.plugins.module_utils.editors.node_lock import (
    LOCK_OPTIONS, acquire, release, start_keeper, timeout_message)
from ansible_collections.gpunode.nvidia.plugins.module_utils.editors.safe_exit import fail, run_and_exit

ARGUMENT_SPEC = dict(
    LOCK_OPTIONS,
    state=dict(type="str", choices=["acquired", "released"], default="acquired"),
)


def run_module(module):
    params = module.params
    if params["state"] == "released":
        return dict(changed=False, held_by=release(params["path"], params["owner"]), waited=0.0)
    try:
        lease = acquire(params["path"], params["owner"], params["timeout"], params["stale_after"])
    except TimeoutError as exc:
        fail(module, timeout_message(exc))
    start_keeper(params["path"], params["owner"])
    result = dict(changed=False, held_by=lease.held_by, waited=round(lease.waited, 1))
    if lease.taken_over:
        result["taken_over"] = lease.taken_over
    return result


def main():
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    run_and_exit(module, "node_lock", module.params["path"], run_module)


if __name__ == "__main__":
    main()
