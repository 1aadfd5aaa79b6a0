#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpunode.nvidia contributors
# Apache License 2.0

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: gpu_sharing_preflight
short_description: Check that a GPU node can serve the device plugin's time-slicing or MPS sharing
version_added: "0.3.0"
description:
  - Reads the GPUs with C(nvidia-smi --query-gpu) (compute mode, MIG mode current and pending) and fails, naming
    each GPU and what to do, when the node cannot serve the strategy. Changes nothing.
  - Time-slicing needs compute mode Default on every GPU.
notes:
  - MPS needs no GPU with MIG enabled (or pending), no compute mode Prohibited, no host MPS daemon
    (C(nvidia-cuda-mps-control)), and C(/run/nvidia/mps) free for the device plugin's daemon.
author:
  - gpunode.nvidia contributors (!UNKNOWN)
extends_documentation_fragment:
  - gpunode.nvidia.attributes
  - gpunode.nvidia.attributes.read_only
options:
  strategy:
    description: The sharing the device plugin is configured for.
    type: str
    choices: [time-slicing, mps]
    required: true
  root:
    description: Where C(/proc) and C(/run) are read; anything other than C(/) is for tests with a node tree.
    type: path
    default: /
"""

EXAMPLES = r"""
- name: Can this node serve MPS?
  gpunode.nvidia.gpu_sharing_preflight:
    strategy: mps
"""

RETURN = r"""
gpus:
  description: The GPUs as read (index, name, pci, mig_current, mig_pending, compute_mode).
  returned: always
  type: list
  elements: dict
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpunode.nvidia.plugins.module_utils.common.binaries import NVIDIA_TOOL_DIRS, find_binary
from ansible_collections.gpunode.nvidia.plugins.module_utils.partitioning import gpu_sharing
from ansible_collections.gpunode.nvidia.plugins.module_utils.partitioning import mig_layout
from ansible_collections.gpunode.nvidia.plugins.module_utils.editors.safe_exit import fail, run_and_exit


def run(module):
    smi = find_binary("nvidia-smi", NVIDIA_TOOL_DIRS)
    if not smi:
        fail(module, "nvidia-smi is not installed on this node: the driver stage installs it; run it first.")
    strategy = module.params["strategy"]
    try:
        gpus = mig_layout.MigNode(module.run_command, smi).gpus()
    except mig_layout.LayoutError as error:
        fail(module, str(error))
    if not gpus:
        fail(module, "nvidia-smi lists no GPU on this node: there is nothing to share.")
    found = gpu_sharing.problems(strategy, gpus, module.params["root"])
    if found:
        fail(module, "This node cannot serve %s sharing; nothing was changed: %s." % (strategy, "; ".join(found)),
             gpus=gpus)
    return {"changed": False, "gpus": gpus,
            "msg": "The %d GPU(s) of this node can serve %s sharing." % (len(gpus), strategy)}


def main():
    module = AnsibleModule(
        argument_spec=dict(
            strategy=dict(type="str", choices=["time-slicing", "mps"], required=True),
            root=dict(type="path", default="/"),
        ),
        supports_check_mode=True,
    )
    run_and_exit(module, "gpu_sharing_preflight", module.params["root"], run)


if __name__ == "__main__":
    main()
