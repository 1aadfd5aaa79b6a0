#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpunode.nvidia contributors
# Apache License 2.0

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: gpu_doctor_cluster
short_description: Diagnose a Kubernetes cluster's GPU nodes from the API, read-only
version_added: "0.1.0"
description:
  - Reads nodes, RuntimeClasses, pending pods and their events with the C(kubernetes) Python client and reports,
    in the findings format of M(gpunode.nvidia.gpu_doctor)
  - "C(cluster-gpu-not-allocatable): a GPU node advertises no C(nvidia.com/gpu) (the device plugin is not
    registered);"
author:
  - gpunode.nvidia contributors (!UNKNOWN)
extends_documentation_fragment:
  - gpunode.nvidia.kubernetes
  - gpunode.nvidia.attributes
  - gpunode.nvidia.attributes.action
options:
  kubeconfig:
    description: Path of the kubeconfig on the controller.
    type: path
    required: true
  gpu_nodes:
    description: Kubernetes node names to treat as GPU nodes even without GPU labels or capacity.
    type: list
    elements: str
    default: []
  resource_name:
    description: The extended resource GPUs are advertised as.
    type: str
    default: nvidia.com/gpu
  runtime_class:
    description: The RuntimeClass GPU pods use.
    type: str
    default: nvidia
  runtime_handler:
    description: The handler that RuntimeClass must name.
    type: str
    default: nvidia
  timeout:
    description: Seconds allowed for each API request.
    type: int
    default: 20
attributes:
  check_mode:
    support: full
    details: Reads the API only; runs the same in check mode.
  diff_mode:
    support: none
  action:
    support: full
    details: Runs on the controller.
notes:
  - "C(cluster-gpu-node-not-ready): a GPU node is NotReady (incident I3);"
  - "C(cluster-runtimeclass-missing): no RuntimeClass C(nvidia), or one with another handler;"
  - "C(cluster-gpu-pod-pending): a pod requesting C(nvidia.com/gpu) is Pending, with the event that explains why
    (C(no runtime for \"nvidia\" is configured) is incident I1, a C(GLIBC_2.27) error incident I4,
    C(Insufficient nvidia.com/gpu) a device plugin problem);"
  - "C(cluster-unreachable): the API could not be read (a finding, not a task failure)."
  - A node is a GPU node when it carries C(nvidia.com/gpu.present=true) or
    C(feature.node.kubernetes.io/pci-10de.present=true), has C(nvidia.com/gpu) in its capacity, or is named in
    O(gpu_nodes).
  - Runs on the controller (an action plugin), whatever host the task targets; needs the C(kubernetes) package in
    the controller's Python (C(requirements.txt)).
  - Supports check mode; it never writes to the cluster.
seealso:
  - module: gpunode.nvidia.gpu_doctor
"""

EXAMPLES = r"""
- name: Diagnose the cluster
  gpunode.nvidia.gpu_doctor_cluster:
    kubeconfig: ~/.kube/config
  register: cluster
  delegate_to: localhost
  run_once: true
"""

RETURN = r"""
checked:
  description: The API was read.
  returned: always
  type: bool
error:
  description: Why the API could not be read, or null.
  returned: always
  type: str
nodes:
  description: Number of nodes in the cluster.
  returned: when checked
  type: int
gpu_nodes:
  description: Names of the nodes treated as GPU nodes.
  returned: always
  type: list
  elements: str
findings:
  description: >-
    Findings as M(gpunode.nvidia.gpu_doctor) returns them (C(rule), C(severity), C(incident), C(title),
    C(message), C(evidence), C(fix)); evidence entries have C(kind) C(api), the C(object) and a C(text). A
    RuntimeClass fix carries the C(manifest) to apply.
  returned: always
  type: list
  elements: dict
"""

from ansible.module_utils.basic import AnsibleModule


def main():
    module = AnsibleModule(argument_spec=dict(
        kubeconfig=dict(type="path", required=True), context=dict(type="str"),
        gpu_nodes=dict(type="list", elements="str", default=[]),
        resource_name=dict(type="str", default="nvidia.com/gpu"), runtime_class=dict(type="str", default="nvidia"),
        runtime_handler=dict(type="str", default="nvidia"), timeout=dict(type="int", default=20)),
        supports_check_mode=True)
    module.fail_json(msg="gpu_doctor_cluster runs on the controller through its action plugin; "
                         "it was called without it (is the collection installed?)")


if __name__ == "__main__":
    main()
