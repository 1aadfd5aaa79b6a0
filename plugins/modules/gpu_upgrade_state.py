#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpunode.nvidia contributors
# Apache License 2.0

# The work is done on the controller by the action plugin of the same name
# (plugins/action/gpu_upgrade_state.py); this file carries its documentation.

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: gpu_upgrade_state
short_description: Read, plan or move a node's rolling-upgrade state on its Node object
version_added: "0.2.0"
description:
  - Runs on the controller with a kubeconfig and the official C(kubernetes) Python client.
notes:
  - The state is the GPU operator's label C(nvidia.com/gpu-driver-upgrade-state) (C(upgrade-required),
    C(cordon-required), C(wait-for-jobs-required), C(pod-deletion-required), C(drain-required),
    C(pod-restart-required), C(validation-required), C(uncordon-required), C(upgrade-done), C(upgrade-failed)),
    so dashboards and runbooks made for the operator read it. A node with C(nvidia.com/gpu-driver-upgrade.skip=true)
    is left alone.
  - O(op=read) decides what the node needs from O(current) and O(target) and its label - V(skip),
    V(at-target), V(refused) (the GPU operator manages its driver, label C(nvidia.com/gpu.deploy.driver=true), or
    the target is below the security minimum and not O(allow_below_minimum)), V(failed) (C(upgrade-failed) and no
    O(retry_failed)) or V(upgrade) - and the states still to walk.
  - O(op=plan) adds, for check mode, the lines of the plan and the PodDisruptionBudgets that allow no
    disruption now for the node's GPU pods.
  - O(op=set) writes O(state) (before the step it names, so that a killed run resumes there) and renews the
    node's slot once a quarter of the slot's ttl has passed since it was taken or last renewed. Going back is
    refused except to C(upgrade-required) (a retry) or to C(upgrade-failed); a failed node never moves to
    C(upgrade-done) directly.
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
    description: V(read), V(plan) or V(set).
    type: str
    choices: [read, set, plan]
    default: read
  state:
    description: The state O(op=set) writes.
    type: str
    choices: [upgrade-required, cordon-required, wait-for-jobs-required, pod-deletion-required, drain-required,
              pod-restart-required, validation-required, uncordon-required, upgrade-done, upgrade-failed]
  current:
    description: The node's versions, C(driver), C(toolkit), C(fabricmanager) (empty or missing when not installed).
    type: dict
    default: {}
  target:
    description:
      - The wanted versions, same keys; a key left out or empty is not changed by the rollout. A value that is no
        version (V(58O), V(latest), V(5800)) is refused before the node is read.
      - With O(op=set), the target as O(op=read) resolved it; C(upgrade-required) records it on the Node
        (annotation C(gpunode.nvidia/upgrade-target)) and a node C(upgrade-done) for this very target is never
        started again (RV(replan)).
    type: dict
    default: {}
  branch:
    description: The driver branch the nodes are kept on (C(nvidia_driver_branch)); a target driver outside it is refused. Empty, any branch.
    type: str
    default: ""
  timeouts:
    description:
      - Seconds of the waiting steps, C(job), C(eviction), C(validation), C(reboot); O(op=plan) adds up those of
        the steps walked into the node's worst case.
    type: dict
    default: {}
  allow_downgrade:
    description:
      - Move to an older driver or toolkit version than the node runs, inside its branch (the rollback), through the
        same states. Without it such a node is V(refused).
    type: bool
    default: false
  minimum:
    description:
      - The target is the security minimum instead of O(target) - the highest fixed version of the node's driver
        branch, and of the toolkit, in the collection's table of NVIDIA security bulletins; a node at or above
        both is at the target.
    type: bool
    default: false
  allow_below_minimum:
    description:
      - Upgrade to a target driver or toolkit version below the security minimum of the collection's table of NVIDIA
        security bulletins anyway. Without it such a node is V(refused) (decision) before anything is changed, naming
        the bulletins.
    type: bool
    default: false
  retry_failed:
    description: A C(upgrade-failed) node starts again from C(upgrade-required).
    type: bool
    default: false
  job_selector:
    description: Label selector of the jobs to wait for; without it the C(wait-for-jobs-required) step is left out.
    type: str
  drain:
    description: Drain every pod, not only the GPU pods; without it the C(drain-required) step is left out.
    type: bool
    default: false
  reboot:
    description: The rollout reboots every node (said in the plan).
    type: bool
    default: false
  lease_namespace:
    description: Namespace of the slot Lease (the slot is renewed on O(op=set)).
    type: str
    default: kube-system
  lease_name:
    description: Name of the slot Lease.
    type: str
    default: gpunode-upgrade
attributes:
  check_mode:
    support: full
    details: O(op=set) says which label would be written and writes nothing.
  diff_mode:
    support: none
  action:
    support: full
    details: Runs on the controller.
seealso:
  - module: gpunode.nvidia.gpu_upgrade_slot
"""

EXAMPLES = r"""
- name: What does this node need
  gpunode.nvidia.gpu_upgrade_state:
    node: gpu-1
    current: {driver: 535.261.03, toolkit: 1.17.8-1}
    target: {driver: 535.309.01}
  register: upgrade

- name: Label the step about to run
  gpunode.nvidia.gpu_upgrade_state:
    node: gpu-1
    op: set
    state: cordon-required
"""

RETURN = r"""
replan:
  description: >-
    O(op=set) was refused because the node changed under this run (another controller finished or moved it): plan
    the node again, never label it C(upgrade-failed).
  returned: when the state machine refused the move
  type: bool
state:
  description: The node's state label (after O(op=set)), null when it has none.
  returned: success
  type: str
previous:
  description: The state label before O(op=set) changed it.
  returned: when O(op=set) changed the label
  type: str
decision:
  description: C(action) (skip, at-target, refused, failed, upgrade), C(start) (the state to start or resume at) and C(reason).
  returned: when O(op=read) or O(op=plan)
  type: dict
  sample: {action: upgrade, start: drain-required, reason: "resuming at drain-required (an earlier run stopped there)"}
steps:
  description: The states still to walk, in order.
  returned: when O(op=read) or O(op=plan)
  type: list
  elements: str
target:
  description: The versions this node moves to (C(driver), C(toolkit), C(fabricmanager); empty - unchanged).
  returned: when O(op=read) or O(op=plan)
  type: dict
driver_install:
  description: >-
    How the driver role installs the target driver, parsed once from the C(driver) of RV(target) - C(branch)
    (V(535)) and C(version), the exact version to install (an epoch or package revision dropped), empty for a
    branch alone (its newest).
  returned: when O(op=read) or O(op=plan)
  type: dict
  sample: {branch: "535", version: "535.309.01"}
changes:
  description: What differs from the target (V(driver), V(toolkit), V(fabricmanager)).
  returned: when O(op=read) or O(op=plan)
  type: list
  elements: str
light:
  description: No driver change - no module unload and no reboot.
  returned: when O(op=read) or O(op=plan)
  type: bool
skip:
  description: The node has the skip label.
  returned: when O(op=read) or O(op=plan)
  type: bool
unschedulable:
  description: The node is cordoned now.
  returned: when O(op=read) or O(op=plan)
  type: bool
ready:
  description: The node is Ready now.
  returned: when O(op=read) or O(op=plan)
  type: bool
operator_managed:
  description: NVIDIA's GPU operator manages the driver on this node.
  returned: when O(op=read) or O(op=plan)
  type: bool
pdb_waits:
  description: C(namespace/pod) -> C(namespace/pdb) for GPU pods whose budget allows no disruption now.
  returned: when O(op=plan)
  type: dict
plan:
  description: What a real run would do on the node, one line per step.
  returned: when O(op=plan)
  type: list
  elements: str
"""
