#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpunode.nvidia contributors
# Apache License 2.0

# The work is done on the controller by the action plugin of the same name
# (plugins/action/gpu_node_maintenance.py); this file carries its documentation.

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: gpu_node_maintenance
short_description: Take a Kubernetes GPU node out of service and back, one step at a time
version_added: "0.3.0"
description:
  - Runs on the controller with a kubeconfig and the official C(kubernetes) Python client; one O(step) per task.
    Role C(gpunode.nvidia.gpu_maintenance) chains the steps (entry points C(enter) and C(leave)).
notes:
  - "V(cordon): sets C(spec.unschedulable). A node that is already unschedulable is left as it is and that is
    recorded in the annotation C(nvidia.com/gpu-driver-upgrade.node-initial-state.unschedulable=true) (the GPU
    operator's name), so that V(uncordon) leaves it cordoned. The annotation C(gpunode.nvidia/maintenance-owner)
    records O(owner); a node in maintenance for another owner is refused."
  - "V(wait_for_jobs): waits until no unfinished pod matching O(job_selector) runs on the node."
  - "V(evict_gpu_pods): evicts through the Eviction API every pod on the node that requests an C(nvidia.com/gpu)
    or C(nvidia.com/mig-*) resource or holds a DRA resource claim (DaemonSet and mirror pods excepted). Run it while
    the device plugin and the DRA kubelet plugin still run. PodDisruptionBudgets are honoured: a refusal (HTTP 429)
    is retried every O(retry_interval) seconds until O(timeout), then the task fails naming the pod and the budget."
  - "V(drain): the same for every pod on the node except DaemonSet and mirror pods."
  - "V(pause_gpu_operands): sets each GPU operator C(nvidia.com/gpu.deploy.<operand>) label that is V(true) on the
    node (device-plugin, gpu-feature-discovery, dcgm, dcgm-exporter, mig-manager, node-status-exporter,
    operator-validator) to V(false), records which in the annotation C(gpunode.nvidia/paused-operands) and waits
    until their pods have left the node. V(resume_gpu_operands) sets exactly those back to V(true) and waits
    (up to O(timeout)) until each of their pods runs again with every container ready, naming the ones that do
    not."
  - "V(validate): waits until the node is Ready and each resource of O(expected_allocatable) is allocatable at
    least as many times; with O(validate_pod) a CUDA vector-add pod pinned to the node must then pass (the pod of
    M(gpunode.nvidia.gpu_cluster_check), tolerating the cordon)."
  - "V(uncordon): makes the node schedulable only when this maintenance cordoned it, and removes its annotations."
  - "V(label): sets the node labels of O(labels) and removes those whose value is null (the driver role's
    C(gpunode.nvidia/secure-boot-enrollment-pending)). A node that is not in the cluster yet is reported
    (RV(node_found)), not an error: a node prepared before it joins is labelled by the first run after it joined."
  - Every write carries the node's C(resourceVersion); when another writer changed the node meanwhile (409
    Conflict) the step reads it again and decides again.
author:
  - gpunode.nvidia contributors (!UNKNOWN)
extends_documentation_fragment:
  - gpunode.nvidia.kubernetes
  - gpunode.nvidia.attributes
  - gpunode.nvidia.attributes.action
options:
  node:
    description: The Kubernetes node name.
    type: str
    required: true
  step:
    description: The step to run.
    type: str
    required: true
    choices: [cordon, wait_for_jobs, evict_gpu_pods, drain, pause_gpu_operands, resume_gpu_operands, validate, uncordon,
              label]
  owner:
    description: Who is maintaining the node (e.g. V(upgrade), V(partitioning)), recorded on the node.
    type: str
    default: maintenance
  job_selector:
    description: For V(wait_for_jobs), a label selector of the pods to wait for (e.g. C(app=training)).
    type: str
  timeout:
    description: Seconds a waiting step (jobs, evictions, operand pods, validation) may take before it fails.
    type: int
    default: 300
  retry_interval:
    description: Seconds between two tries of a refused eviction, and between two reads while waiting.
    type: float
    default: 5.0
  expected_allocatable:
    description:
      - "For V(validate), resource name to the least allocatable count, for example C(nvidia.com/mig-1g.10gb: 7).
        Default C(nvidia.com/gpu: 1)."
    type: dict
  validate_pod:
    description: For V(validate), also run a CUDA vector-add pod pinned to the node.
    type: bool
    default: false
  pod_image:
    description: The vector-add image for O(validate_pod) (a mirror of it on air-gapped clusters).
    type: str
    default: nvcr.io/nvidia/k8s/cuda-sample:vectoradd-cuda12.5.0-ubuntu22.04
  labels:
    description:
      - For V(label), label name to value; a null value removes the label. Booleans are written V(true)/V(false).
    type: dict
attributes:
  check_mode:
    support: full
    details: Reads only; RV(would) says what the step would do (which pods, which budget would make it wait).
  diff_mode:
    support: none
  action:
    support: full
    details: Runs on the controller; delegate to localhost or use it in a play over localhost.
seealso:
  - module: gpunode.nvidia.gpu_clients
  - module: gpunode.nvidia.gpu_cluster_check
"""

EXAMPLES = r"""
- name: Cordon the node for a partitioning change
  gpunode.nvidia.gpu_node_maintenance:
    kubeconfig: ~/.kube/config
    node: gpu-node-7
    step: cordon
    owner: partitioning
  delegate_to: localhost

- name: Evict its GPU pods, waiting up to 10 minutes for PodDisruptionBudgets
  gpunode.nvidia.gpu_node_maintenance:
    node: gpu-node-7
    step: evict_gpu_pods
    owner: partitioning
    timeout: 600
    retry_interval: 10
  delegate_to: localhost

- name: Back in service with seven MIG slices
  gpunode.nvidia.gpu_node_maintenance:
    node: gpu-node-7
    step: validate
    expected_allocatable: {nvidia.com/mig-1g.10gb: 7}
    validate_pod: false
  delegate_to: localhost

- name: Label the node while its Secure Boot key waits for MokManager, remove the label once enrolled
  gpunode.nvidia.gpu_node_maintenance:
    node: gpu-node-7
    step: label
    labels:
      gpunode.nvidia/secure-boot-enrollment-pending: "{{ 'true' if nvidia_driver_enrollment_pending else None }}"
  delegate_to: localhost
"""

RETURN = r"""
step:
  description: The step that ran.
  returned: always
  type: str
node:
  description: The node.
  returned: always
  type: str
was_unschedulable:
  description: V(cordon) found the node already unschedulable (it stays so after V(uncordon)).
  returned: step is cordon
  type: bool
uncordoned:
  description: V(uncordon) made the node schedulable.
  returned: step is uncordon
  type: bool
waited_for:
  description: Pods matching O(job_selector) that were running when the step began.
  returned: step is wait_for_jobs
  type: list
  elements: str
evicted:
  description: The pods evicted, as C(namespace/name).
  returned: step is evict_gpu_pods or drain
  type: list
  elements: str
blocked_by:
  description: Pod to the PodDisruptionBudget (C(namespace/name)) that refused its eviction at least once (check
    mode, that allows no disruption now).
  returned: step is evict_gpu_pods or drain
  type: dict
would_evict:
  description: The pods a real run would evict.
  returned: check mode, step is evict_gpu_pods or drain
  type: list
  elements: str
operands:
  description: The operand names paused or resumed (C(device-plugin), C(dcgm-exporter), ...).
  returned: step is pause_gpu_operands or resume_gpu_operands
  type: list
  elements: str
validated:
  description: V(validate) checked the node (false in check mode).
  returned: step is validate
  type: bool
pod:
  description: The vector-add pod's result, as one entry of the C(nodes) that M(gpunode.nvidia.gpu_cluster_check) returns.
  returned: step is validate
  type: dict
labels:
  description: The label names set or removed (or that would be, in check mode).
  returned: step is label
  type: list
  elements: str
node_found:
  description: V(label) found the node in the cluster (false, the node has not joined yet, nothing was labelled).
  returned: step is label
  type: bool
would:
  description: What the step would do.
  returned: check mode
  type: str
"""
