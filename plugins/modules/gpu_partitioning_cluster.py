#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpunode.nvidia contributors
# Apache License 2.0

# The work is done on the controller by the action plugin of the same name
# (plugins/action/gpu_partitioning_cluster.py); this file carries its documentation.

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: gpu_partitioning_cluster
short_description: The Kubernetes side of GPU partitioning and sharing (node labels, device plugin ConfigMap)
version_added: "0.3.0"
description:
  - Runs on the controller with a kubeconfig and the official C(kubernetes) Python client.
  - O(step=detect_operator) reads the node's labels and returns whether NVIDIA's GPU operator manages it
    (C(nvidia.com/gpu.deploy.*) or C(nvidia.com/mig.config.state) labels).
attributes:
  check_mode:
    support: full
    details: Reads the Node and the ConfigMap and reports what it would write; writes nothing.
  diff_mode:
    support: none
  action:
    support: full
    details: Runs on the controller.
notes:
  - O(step=mig_config) sets the node label C(nvidia.com/mig.config) to O(mig_config) and waits until the GPU
    operator's MIG manager reports C(nvidia.com/mig.config.state=success) (C(failed), or O(timeout), fails the
    task naming the state). Only where the operator runs; elsewhere the node side applies the layout.
  - O(step=sharing) renders every config of O(sharing_configs) in the device plugin's format into the ConfigMap
    O(configmap) (keys of other configs in it stay), sets the node label C(nvidia.com/device-plugin.config) to
    O(sharing_config), and returns the allocatable the plugin advertises once it serves that config.
  - O(step=dra) keeps the device plugin from advertising the GPUs the DRA driver hands out. Where the GPU operator
    manages the node, it sets C(nvidia.com/gpu.deploy.device-plugin=false); elsewhere a node that still advertises
    C(nvidia.com/gpu) fails the task.
  - Check mode reads only and says what would change.
author:
  - gpunode.nvidia contributors (!UNKNOWN)
extends_documentation_fragment:
  - gpunode.nvidia.kubernetes
  - gpunode.nvidia.attributes
  - gpunode.nvidia.attributes.action
options:
  node:
    description: The Kubernetes Node name of this GPU node.
    type: str
    required: true
  step:
    description: What to do.
    type: str
    required: true
    choices: [detect_operator, mig_config, sharing, dra]
  mig_config:
    description: Name of the layout in the GPU operator's MIG manager config, for O(step=mig_config).
    type: str
  sharing_configs:
    description: Sharing configs by name (C(strategy), C(replicas) or C(resources), C(rename_by_default),
      C(fail_requests_greater_than_one), C(mig_strategy)).
    type: dict
    default: {}
  sharing_config:
    description: The name in O(sharing_configs) this node serves.
    type: str
  configmap:
    description: The device plugin's ConfigMap (its chart value C(config.name)).
    type: str
    default: gpunode-device-plugin-configs
  namespace:
    description: Namespace of O(configmap) (the device plugin's).
    type: str
    default: nvidia-device-plugin
  physical:
    description: Unshared resource counts of the node (resource name to count), for RV(expected_allocatable).
    type: dict
    default: {}
  timeout:
    description: Seconds to wait for C(nvidia.com/mig.config.state=success).
    type: int
    default: 600
  retry_interval:
    description: Seconds between reads of the state label.
    type: float
    default: 5.0
"""

EXAMPLES = r"""
- name: Serve the h100-ts config on this node
  gpunode.nvidia.gpu_partitioning_cluster:
    kubeconfig: ~/.kube/config
    node: gpu-1
    step: sharing
    sharing_configs:
      h100-ts: {strategy: time-slicing, replicas: 4}
    sharing_config: h100-ts
    physical: {nvidia.com/gpu: 8}
  delegate_to: localhost
"""

RETURN = r"""
operator:
  description: The GPU operator manages this node (O(step=detect_operator)).
  returned: when step is detect_operator
  type: bool
expected_allocatable:
  description: What the device plugin advertises with the selected sharing config.
  returned: when step is sharing
  type: dict
device_plugin_running:
  description:
    - The node advertises GPUs now, so a device plugin runs there and restarts with the config. False on a node
      whose device plugin site.yml's cluster stage deploys later in the run (nothing to wait for yet).
  returned: when step is sharing
  type: bool
"""
