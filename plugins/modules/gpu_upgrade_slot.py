#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpunode.nvidia contributors
# Apache License 2.0

# The work is done on the controller by the action plugin of the same name
# (plugins/action/gpu_upgrade_slot.py); this file carries its documentation.

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: gpu_upgrade_slot
short_description: Take or give back a node's slot of a rolling GPU upgrade, held in the cluster
version_added: "0.2.0"
description:
  - Runs on the controller with a kubeconfig and the official C(kubernetes) Python client.
notes:
  - The slots of a rolling upgrade are kept in one Lease (O(lease_namespace)/O(lease_name), annotation
    C(gpunode.nvidia/upgrade-slots)), written with its C(resourceVersion). When two controllers (a rerun, AWX
    job slices) write at once, the API refuses the second with 409 Conflict and it decides again on what the
    first wrote. The limits therefore hold across controllers, not only inside one play.
  - O(op=acquire) waits up to O(timeout) until the node may start. Each look reads the Lease; the GPU nodes are
    listed again only when the Lease no longer refuses the node by itself and its slots changed (or every tenth
    look), and always before a slot is written. The pause between looks starts at O(poll_interval) and grows by
    half after each refusal up to four times it, each with its own jitter, so a long wait costs few requests. A
    node may start when no GPU node is C(upgrade-failed), fewer than O(max_parallel) slots are held, and the
    GPU nodes unavailable for any reason (unschedulable or NotReady), the slot holders and the node itself
    number at most O(max_unavailable). A node that already holds this controller's slot is granted again at
    once (a resumed run).
  - When a GPU node is C(upgrade-failed), returns C(halted=true) without a slot and without failing; the play
    fails that host without touching it ("not started, because the rollout stopped"; in check mode "would not
    start").
  - While the Lease carries the annotation C(gpunode.nvidia/upgrade-paused) (any value, the reason), no node takes a
    new slot; nodes holding one finish. Removing the annotation resumes the waiting nodes.
  - In check mode nothing is written and nothing is waited for - the answer is what the slot decision is now.
  - A release or renewal that loses a race on the Lease (409 Conflict) reads it again and applies itself again until
    it is in; it never gives up.
  - A slot is freed by O(op=release) (as soon as the node is done), or when its controller is gone, that is
    when it was not renewed within O(ttl) seconds, or at once when the controller ran on this machine and its
    process no longer exists (a killed run).
author:
  - gpunode.nvidia contributors (!UNKNOWN)
extends_documentation_fragment:
  - gpunode.nvidia.kubernetes
  - gpunode.nvidia.attributes
  - gpunode.nvidia.attributes.action
options:
  node:
    description: The Kubernetes Node name.
    type: str
    required: true
  op:
    description: V(acquire) waits for and takes the slot; V(release) gives it back; V(renew) marks it alive.
    type: str
    choices: [acquire, release, renew]
    default: acquire
  max_parallel:
    description: At most this many nodes in progress at once, across controllers.
    type: int
    default: 1
  max_unavailable:
    description:
      - At most this many GPU nodes unavailable at once, counting nodes cordoned or NotReady for any reason.
      - A count (V(2)) or a percentage of the GPU nodes (V(25%)), rounded up.
    type: raw
    default: 25%
  gpu_node_selector:
    description:
      - The label selector (equality-based) of the GPU nodes counted for O(max_unavailable); nodes with
        C(nvidia.com/gpu) capacity count too, so a cluster without GPU feature discovery needs no label. No GPU node
        found is an error naming both.
    type: str
    default: nvidia.com/gpu.present=true
  lease_namespace:
    description: Namespace of the slot Lease.
    type: str
    default: kube-system
  lease_name:
    description: Name of the slot Lease; rollouts that must not limit each other use different names.
    type: str
    default: gpunode-upgrade
  timeout:
    description: Seconds O(op=acquire) waits for a slot before failing with the reason it waited for.
    type: int
    default: 3600
  poll_interval:
    description: Seconds between the first two looks at the cluster while waiting; later pauses grow to four times it.
    type: float
    default: 5.0
  ttl:
    description: A slot not renewed for this many seconds belongs to a controller that is gone.
    type: int
    default: 3600
attributes:
  check_mode:
    support: full
    details: Decides on what the cluster holds now, returns whether the slot would be granted, writes nothing.
  diff_mode:
    support: none
  action:
    support: full
    details: Runs on the controller.
seealso:
  - module: gpunode.nvidia.gpu_upgrade_state
  - module: gpunode.nvidia.gpu_node_maintenance
"""

EXAMPLES = r"""
- name: Wait for a slot, at most 2 GPU nodes unavailable and 1 in progress
  gpunode.nvidia.gpu_upgrade_slot:
    node: "{{ gpunode_node_name | default(inventory_hostname) }}"
    max_parallel: 1
    max_unavailable: 2
  register: slot

- name: Give the slot back once the node is done
  gpunode.nvidia.gpu_upgrade_slot:
    node: "{{ gpunode_node_name | default(inventory_hostname) }}"
    op: release
"""

RETURN = r"""
granted:
  description: The slot is this controller's (O(op=acquire)).
  returned: when O(op=acquire)
  type: bool
halted:
  description: No slot because a GPU node is C(upgrade-failed); the rollout starts no new node.
  returned: when O(op=acquire)
  type: bool
reason:
  description: Why the slot was granted or what it waited for, naming the nodes.
  returned: when O(op=acquire)
  type: str
  sample: "max_unavailable 2 reached: gpu-3, gpu-5 unavailable (cordoned, NotReady or in progress)"
unavailable:
  description: The GPU nodes unschedulable or NotReady at the last look.
  returned: when O(op=acquire)
  type: list
  elements: str
in_progress:
  description: The nodes holding a slot at the last look.
  returned: when O(op=acquire)
  type: list
  elements: str
max_unavailable:
  description: O(max_unavailable) as a node count.
  returned: when O(op=acquire)
  type: int
waited_s:
  description: Seconds spent waiting.
  returned: when O(op=acquire)
  type: float
held_elsewhere:
  description: Another live controller holds the node's slot; the node is left to it, without waiting.
  returned: when O(op=acquire)
  type: bool
gpu_nodes:
  description: How many GPU nodes were found, and how (by the label, by capacity alone).
  returned: when O(op=acquire)
  type: str
budget:
  description: How many nodes may be in progress at once now (the limits less the nodes unavailable for other reasons).
  returned: when O(op=acquire)
  type: int
paused:
  description: The value of the Lease's C(gpunode.nvidia/upgrade-paused) annotation, null when the rollout is not paused.
  returned: when O(op=acquire)
  type: str
holder:
  description: This controller's identity in the slot table (host/pid/start time of ansible-playbook).
  returned: always
  type: str
"""
