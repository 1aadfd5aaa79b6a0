#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpunode.nvidia contributors
# Apache License 2.0

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: gpu_dra_readiness
short_description: Check that a GPU node meets the prerequisites of NVIDIA's DRA driver
version_added: "0.3.0"
description:
  - Reads the node (the runtime kubelet uses, the kubelet, the loaded driver) and fails naming every missing
    prerequisite of the DRA driver (kubernetes-sigs/dra-driver-nvidia-gpu). Changes nothing.
notes:
  - CDI in the runtime kubelet uses. containerd 1.6 is refused (no CDI; its C(config dump) silently drops
    C(enable_cdi)), as are CRI-O before 1.27 and Docker. containerd 1.7 gets C(enable_cdi = true) from the
    container_runtime role.
  - Kubernetes 1.34.2 or newer, or 1.32/1.33 with the kubelet feature gate C(DynamicResourceAllocation=true) in the
    distribution's own kubelet config place (kubeadm's kubelet config file, C(/etc/rancher/k3s|rke2/config.yaml),
    the MicroK8s and Canonical Kubernetes snap args files, k0s's config), which the message names.
  - NVIDIA driver 565 or newer; 570.158.01 or newer with O(compute_domains).
author:
  - gpunode.nvidia contributors (!UNKNOWN)
extends_documentation_fragment:
  - gpunode.nvidia.attributes
  - gpunode.nvidia.attributes.read_only
options:
  kubernetes_version:
    description: The kubelet's version; empty asks the node (C(kubelet --version), C(k3s|rke2 --version), the snap's
      metadata).
    type: str
    default: ""
  compute_domains:
    description: ComputeDomains (multi-node NVLink through IMEX) are wanted.
    type: bool
    default: false
  feature_gate_pending:
    description:
      - The kubelet's C(DynamicResourceAllocation) gate is being written in this run (by
        M(gpunode.nvidia.kubelet_feature_gates), in check mode not yet); it is not reported missing.
    type: bool
    default: false
  root:
    description: Where the node is read; anything other than C(/) is for tests with a node tree.
    type: path
    default: /
"""

EXAMPLES = r"""
- name: Is this node ready for the DRA driver?
  gpunode.nvidia.gpu_dra_readiness:
    compute_domains: true
"""

RETURN = r"""
runtime:
  description: Kind and version of the runtime kubelet uses.
  returned: always
  type: dict
kubernetes_version:
  description: The Kubernetes version checked (empty when unknown).
  returned: always
  type: str
driver_root:
  description:
    - The DRA driver chart's C(nvidiaDriverRoot) for this node - C(/run/nvidia/driver) where the GPU operator's driver
      container publishes the driver (its C(usr/bin/nvidia-smi) is there), else C(/) (a driver installed on the host).
  returned: always
  type: str
  sample: /
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpunode.nvidia.plugins.module_utils.partitioning import dra_readiness
from ansible_collections.gpunode.nvidia.plugins.module_utils.partitioning.kubelet_gates import kubelet_version
from ansible_collections.gpunode.nvidia.plugins.module_utils.node.discovery import gather
from ansible_collections.gpunode.nvidia.plugins.module_utils.node.node_reader import Node
from ansible_collections.gpunode.nvidia.plugins.module_utils.editors.safe_exit import fail, run_and_exit


def run(module):
    root = module.params["root"]
    facts = gather(root, ("driver", "runtimes", "kubelet", "target"))
    node = Node(root)

    def runner(argv):
        return node.run(argv)[:2] if node.run else (1, "")

    version = module.params["kubernetes_version"] or kubelet_version(facts.get("kubelet") or {}, runner, node.read)
    found = dra_readiness.problems(facts, version, node.read, module.params["compute_domains"],
                                   gate_pending=module.params["feature_gate_pending"])
    target = facts.get("target") or {}
    runtime = {"kind": target.get("kind"), "version": target.get("version")}
    root_of_driver = dra_readiness.driver_root(node)
    if found:
        fail(module, "This node is not ready for DRA; nothing was changed: %s" % " ".join(found), runtime=runtime,
             kubernetes_version=version, driver_root=root_of_driver)
    return {"changed": False, "runtime": runtime, "kubernetes_version": version, "driver_root": root_of_driver,
            "msg": "Ready for DRA: %s %s, Kubernetes %s, driver %s." % (
                runtime["kind"], runtime["version"], version or "(version unknown)",
                (facts.get("driver") or {}).get("version"))}


def main():
    module = AnsibleModule(
        argument_spec=dict(
            kubernetes_version=dict(type="str", default=""),
            compute_domains=dict(type="bool", default=False),
            feature_gate_pending=dict(type="bool", default=False),
            root=dict(type="path", default="/"),
        ),
        supports_check_mode=True,
    )
    run_and_exit(module, "gpu_dra_readiness", module.params["root"], run)


if __name__ == "__main__":
    main()
