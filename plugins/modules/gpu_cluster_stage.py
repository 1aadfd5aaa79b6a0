#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpunode.nvidia contributors
# Apache License 2.0

# The work is done on the controller by the action plugin of the same name
# (plugins/action/gpu_cluster_stage.py); this file carries its documentation.

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: gpu_cluster_stage
short_description: The cluster side of a GPU node (unproven taint, labels, RuntimeClass, NVIDIA's device plugin)
version_added: "0.4.0"
description:
  - Runs on the controller with a kubeconfig and the official C(kubernetes) Python client; one O(step) per task.
  - O(step=taint) puts C(gpunode.nvidia/unproven=REASON:NoSchedule) on the node (O(reason)), keeping GPU work off
    it until its proof passes; O(step=untaint) removes it. The node's other taints stay.
  - O(step=labels) sets the node's labels from O(facts) under the collection's prefix
    (C(gpunode.nvidia/driver.version), C(driver.branch), C(toolkit.version), C(runtime), C(runtime.handler),
    C(cuda.driver-api), C(mig.mode)); a fact no longer known removes its label. It sets
    C(nvidia.com/gpu.present=true) unless GPU feature discovery labels the node. With O(proven),
    C(gpunode.nvidia/proven-at) (UTC, C(20261129T030129Z)) is set when the node has none or a fact label changed.
  - O(step=runtime_class) creates the RuntimeClass O(runtime_class) with handler O(runtime_handler) when missing;
    one with another handler is an error (a RuntimeClass's handler cannot be changed).
  - O(step=device_plugin) deploys NVIDIA's k8s-device-plugin DaemonSet (v0.20.0 unless O(version) or O(image))
    in O(namespace), rendered from NVIDIA's static manifest of that version (docs/cluster.md lists every
    difference), then waits until the node advertises GPUs. Where the GPU operator or another device plugin runs
    in the cluster, nothing is deployed and the result says which.
  - A node not in the cluster yet is no error for the node steps (C(node_found=false)); a later run does it.
notes:
  - Objects are compared through their C(gpunode.nvidia/manifest-sha256) annotation; a changed rendering replaces
    the object with the read resourceVersion. An existing Namespace is used as it is.
attributes:
  check_mode:
    support: full
    details: Reads and reports what it would write (C(would)); writes nothing.
  diff_mode:
    support: none
  action:
    support: full
    details: Runs on the controller.
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
    choices: [taint, untaint, labels, runtime_class, device_plugin]
  reason:
    description: The taint's value, why the node is unproven, for O(step=taint).
    type: str
    choices: [setup, first-boot, proof-failed, setup-failed, proof-void]
    default: setup
  unless_proven:
    description:
      - For O(step=taint) - leave a node alone that an earlier run proved (it has C(gpunode.nvidia/proven-at) and
        no unproven taint), so that a second run over an unchanged node changes nothing.
    type: bool
    default: false
  facts:
    description:
      - For O(step=labels) - C(driver_version), C(toolkit_version), C(runtime), C(runtime_handler),
        C(cuda_driver_api) and C(mig_modes) (nvidia-smi's current MIG mode per GPU). Empty values remove labels.
    type: dict
    default: {}
  proven:
    description: For O(step=labels) - the node's proof passed in this run (sets the proof time as described).
    type: bool
    default: false
  runtime_class:
    description: The RuntimeClass name, for O(step=runtime_class).
    type: str
    default: nvidia
  runtime_handler:
    description: The RuntimeClass handler (the runtime name configured on the nodes).
    type: str
    default: nvidia
  namespace:
    description: The device plugin's namespace (created when missing).
    type: str
    default: nvidia-device-plugin
  image:
    description: The device plugin's full image reference; default O(registry)/k8s-device-plugin:O(version).
    type: str
  registry:
    description: The registry and path of NVIDIA's images, or a mirror of them.
    type: str
    default: nvcr.io/nvidia
  version:
    description: The device plugin's version (its image tag).
    type: str
    default: v0.20.0
  image_pull_secrets:
    description: Secrets in O(namespace) the device plugin's pods pull with (a private mirror).
    type: list
    elements: str
    default: []
  device_plugin_runtime_class:
    description: The device plugin pods' C(runtimeClassName); empty where the node's default runtime is nvidia.
    type: str
    default: nvidia
  tolerations:
    description:
      - Tolerations of the device plugin's pods besides C(nvidia.com/gpu) and the unproven taint, which it always
        tolerates.
    type: list
    elements: dict
    default: []
  config_map:
    description:
      - The partitioning stage's ConfigMap of sharing configs (time-slicing, MPS) in O(namespace); the plugin
        then serves the config the node label C(nvidia.com/device-plugin.config) names.
    type: str
  default_config:
    description: The config a node without that label serves (empty - the plugin's own default).
    type: str
    default: ""
  wait:
    description: For O(step=device_plugin), wait until the node advertises GPUs.
    type: bool
    default: true
  timeout:
    description: Seconds to wait for the device plugin on the node.
    type: int
    default: 300
  retry_interval:
    description: Seconds between two reads while waiting.
    type: float
    default: 2.0
seealso:
  - module: gpunode.nvidia.gpu_cluster_check
"""

EXAMPLES = r"""
- name: Keep GPU work off the node until it is proven
  gpunode.nvidia.gpu_cluster_stage:
    kubeconfig: ~/.kube/config
    node: gpu-1
    step: taint
    reason: setup
  delegate_to: localhost

- name: Deploy NVIDIA's device plugin from a registry mirror
  gpunode.nvidia.gpu_cluster_stage:
    node: gpu-1
    step: device_plugin
    registry: registry.example.com/nvidia
    image_pull_secrets: [mirror-pull]
  delegate_to: localhost
"""

RETURN = r"""
msg:
  description: What the step did, or what it would do (check mode).
  returned: always
  type: str
node_found:
  description: The node is in the cluster (node steps).
  returned: for taint, untaint and labels
  type: bool
taint:
  description: The unproven taint the node carries after the step, or null.
  returned: for taint and untaint
  type: str
  sample: gpunode.nvidia/unproven=setup:NoSchedule
gfd_managed:
  description: GPU feature discovery labels the node (nvidia.com/gpu.present is left to it).
  returned: for labels
  type: bool
runtime_class_state:
  description: V(present), V(created) or V(would-create).
  returned: for runtime_class
  type: str
deployed:
  description: The collection's device plugin is the one deployed (false where another one runs).
  returned: for device_plugin
  type: bool
others:
  description: The GPU operator's or other device plugin DaemonSets found (namespace/name and why).
  returned: for device_plugin
  type: list
  elements: str
applied:
  description: What was created or updated.
  returned: for device_plugin, when deployed
  type: list
  elements: str
gpu_allocatable:
  description: The GPU resources the node advertises once the device plugin runs there.
  returned: for device_plugin, when deployed and waited for
  type: dict
image:
  description: The device plugin's image.
  returned: for device_plugin
  type: str
"""
