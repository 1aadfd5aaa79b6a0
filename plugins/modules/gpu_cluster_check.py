#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpunode.nvidia contributors
# Apache License 2.0

# The work is done on the controller by the action plugin of the same name
# (plugins/action/gpu_cluster_check.py); this file carries its documentation.

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: gpu_cluster_check
short_description: Prove that a GPU pod runs on each GPU node of a Kubernetes cluster
version_added: "0.1.0"
description:
  - Runs on the controller with a kubeconfig and the official C(kubernetes) Python client. Nothing is run on
    the nodes and no C(kubectl) is needed.
  - Ensures the RuntimeClass O(runtime_class) (C(node.k8s.io/v1)) with handler O(runtime_handler).
notes:
  - For each node in O(nodes) (or matching O(node_selector)) creates one pod pinned to it through
    C(nodeSelector kubernetes.io/hostname), so that the scheduler, the node's taints and its
    C(nvidia.com/gpu) allocatable take part as for any GPU pod, with C(runtimeClassName), C(resources.requests)
    and C(limits) C(nvidia.com/gpu) (O(gpus_per_pod)) and O(tolerations). It waits for C(Succeeded) within O(timeout), reads the log for
    C(Test PASSED) and deletes the pod, also on failure. All nodes run in parallel (O(parallelism) threads).
  - A failure is explained from the pod's events and container states, its log, and the node's
    C(nvidia.com/gpu) allocatable and C(Ready) condition, for example C(Insufficient nvidia.com/gpu) or zero
    allocatable (device plugin not registered), C(no runtime for "nvidia" is configured) (incident I1, naming
    the node's discovered config file when O(nodes) gives it), C(GLIBC) errors (I4), image pull errors and
    NotReady nodes (I3).
  - A pod stuck on a failure that waiting cannot cure (a missing runtime, an image pull error, a failing
    prestart hook) is judged at once; a pod that waits for scheduling (no free GPU, a NotReady node) is
    given the whole O(timeout), because a device plugin or a kubelet may still come up.
  - Returns a summary table per node (GPU count, driver, runtime, result, duration) and writes it as JSON to
    O(report_path).
author:
  - gpunode.nvidia contributors (!UNKNOWN)
extends_documentation_fragment:
  - gpunode.nvidia.kubernetes
  - gpunode.nvidia.attributes
  - gpunode.nvidia.attributes.action
options:
  namespace:
    description: Namespace of the verification pods.
    type: str
    default: default
  runtime_class:
    description: The RuntimeClass the pods use (and that is created when missing).
    type: str
    default: nvidia
  runtime_handler:
    description: The handler of that RuntimeClass, the runtime name configured on the nodes.
    type: str
    default: nvidia
  create_runtime_class:
    description:
      - Create the RuntimeClass when it is missing. An existing one with another handler is an error
        (a RuntimeClass's handler cannot be changed). False - only check that it is there, with its handler
        (site.yml's cluster stage, M(gpunode.nvidia.gpu_cluster_stage), creates it).
    type: bool
    default: true
  nodes:
    description:
      - The Kubernetes node names to verify, as strings, or as dicts with C(name) and, from
        M(gpunode.nvidia.gpu_workload_check) or M(gpunode.nvidia.gpu_node_facts), C(config_path), C(socket),
        C(engine) and C(driver), which explanations then name.
    type: list
    elements: raw
    default: []
  node_selector:
    description: A label selector choosing the nodes when O(nodes) is empty, e.g. C(nvidia.com/gpu.present=true).
    type: str
  image:
    description: The CUDA vector-add image (a mirror of it on air-gapped clusters).
    type: str
    default: nvcr.io/nvidia/k8s/cuda-sample:vectoradd-cuda12.5.0-ubuntu22.04
  image_pull_policy:
    description: The pods' C(imagePullPolicy).
    type: str
    choices: [Always, IfNotPresent, Never]
    default: IfNotPresent
  tolerations:
    description:
      - The pods' tolerations, in Kubernetes' own form. Default, the usual C(nvidia.com/gpu) taint and the cluster
        stage's C(gpunode.nvidia/unproven) taint (the proof is what lifts it).
    type: list
    elements: dict
  gpus_per_pod:
    description: The C(nvidia.com/gpu) limit of each pod.
    type: int
    default: 1
  timeout:
    description: Seconds each pod may take from creation to completion.
    type: int
    default: 300
  poll_interval:
    description: Seconds between two reads of a pod's status.
    type: float
    default: 2.0
  parallelism:
    description: Nodes verified at the same time.
    type: int
    default: 32
  report_path:
    description: Write the report as JSON to this file on the controller.
    type: path
attributes:
  check_mode:
    support: partial
    details: Reads the RuntimeClass and reports whether it would be created; runs no pod and writes no report.
  diff_mode:
    support: none
  action:
    support: full
    details: Runs on the controller; use C(run_once) in a play over the GPU nodes.
seealso:
  - module: gpunode.nvidia.gpu_workload_check
"""

EXAMPLES = r"""
- name: Verify every GPU node of the play in the cluster
  gpunode.nvidia.gpu_cluster_check:
    kubeconfig: ~/.kube/config
    nodes: "{{ ansible_play_hosts }}"
    report_path: /tmp/gpu-verify.json
  run_once: true
  register: cluster

- name: Print the summary table
  ansible.builtin.debug:
    msg: "{{ cluster.table }}"
  run_once: true

- name: All nodes with GPU feature discovery's label, a mirrored image, an extra taint tolerated
  gpunode.nvidia.gpu_cluster_check:
    node_selector: nvidia.com/gpu.present=true
    image: registry.example.com/nvidia/cuda-sample:vectoradd-cuda12.5.0-ubuntu22.04
    tolerations:
      - {key: nvidia.com/gpu, operator: Exists, effect: NoSchedule}
      - {key: dedicated, operator: Equal, value: gpu, effect: NoSchedule}
  run_once: true
"""

RETURN = r"""
passed:
  description: Every node passed.
  returned: always
  type: bool
runtime_class_state:
  description: V(present), V(created) or V(would-create) (check mode).
  returned: success
  type: str
nodes:
  description:
    - One entry per node, in the order given. C(result) is V(passed), V(failed), V(timeout) or V(error).
    - C(gpu_allocatable) and C(gpu_capacity) are the node's C(nvidia.com/gpu); C(driver) comes from GPU feature
      discovery labels, else from O(nodes); C(runtime) is the node's C(containerRuntimeVersion).
    - On failure, C(events) (type, reason, message), C(log), C(message) and C(explanation) (rule, cause,
      incident, fix).
  returned: always
  type: list
  elements: dict
  sample:
    - {node: gpu-1, result: passed, passed: true, gpu_allocatable: "8", driver: 550.54.15,
       runtime: "containerd://1.7.24", duration_s: 41.2, pod: gpunode-verify-gpu-1-3fa9c}
table:
  description: The summary table, one line per node.
  returned: always
  type: list
  elements: str
  sample:
    - "NODE   GPUS  DRIVER     RUNTIME             RESULT  TIME"
    - "gpu-1  8     550.54.15  containerd://1.7.24 passed  41.2s"
duration_s:
  description: Wall time of the whole check.
  returned: success
  type: float
report_path:
  description: Where the JSON report was written.
  returned: when report_path is set
  type: str
"""
