#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpunode.nvidia contributors
# Apache License 2.0

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: gpu_mig_layout
short_description: Check and apply a MIG layout (nvidia-mig-parted's format) on a GPU node
version_added: "0.3.0"
description:
  - Reads the GPUs with C(nvidia-smi --query-gpu) and validates the layout against what each GPU offers BEFORE
    anything changes (C(nvidia-smi mig -lgip) where MIG is on; NVIDIA's published profile table for A100, H100
    and B200 where it is off, since C(-lgip) lists nothing then). A profile a GPU lacks fails the task naming
    the GPU, its model and the profile.
notes:
  - Needs C(nvidia-smi) (the driver stage installs it) and C(nvidia-mig-parted) (NVIDIA's mig-parted release
    package; the collection does not install it) on the node.
  - C(nvidia-mig-parted assert) decides whether anything changes; in check mode that is all that runs.
  - With O(state=applied) and a change, writes mig-parted's config to O(config_path), runs
    C(nvidia-mig-parted apply --mode-only --skip-reset), resets (C(nvidia-smi -r)) only the GPUs whose MIG mode
    changes, applies the MIG devices and asserts again. The module does not stop GPU clients, cordon or drain;
    role C(gpunode.nvidia.gpu_partitioning) does that around it with role C(gpunode.nvidia.gpu_maintenance).
author:
  - gpunode.nvidia contributors (!UNKNOWN)
options:
  name:
    description:
      - Name of the layout in mig-parted's C(mig-configs). Without O(layout), a shipped layout
        (C(all-disabled), C(all-enabled), C(all-balanced), C(all-<profile>) such as C(all-1g.10gb)), built for
        the models of this node.
    type: str
    required: true
  layout:
    description:
      - The layout itself, mig-parted's list of C(devices) (C(all) or GPU indexes), C(mig-enabled) and
        C(mig-devices) (profile to count).
    type: list
    elements: dict
  state:
    description: V(planned) only decides (nothing is written); V(applied) applies a change.
    type: str
    choices: [planned, applied]
    default: planned
  config_path:
    description: Where mig-parted's config is written for O(state=applied).
    type: path
    default: /etc/gpunode/mig-parted.yaml
  mig_strategy:
    description: The device plugin's MIG strategy, for RV(expected_allocatable).
    type: str
    choices: [mixed, single]
    default: mixed
extends_documentation_fragment:
  - gpunode.nvidia.attributes
attributes:
  check_mode:
    support: full
    details: Only C(nvidia-smi) queries and C(nvidia-mig-parted assert) run.
  diff_mode:
    support: full
    details: The diff is mig-parted's config file at O(config_path), the record of the applied layout.
"""

EXAMPLES = r"""
- name: Will all-balanced change anything here? (nvidia-mig-parted assert only)
  gpunode.nvidia.gpu_mig_layout:
    name: all-balanced
  register: mig_plan

# Applying a layout resets GPUs: take the node out of service first (cordon, evict the GPU pods, stop the GPU
# clients) and bring it back however the change went. Role gpunode.nvidia.gpu_partitioning does all of this
# (gpu_partitioning_mig_layout_name); these are the tasks it runs.
- name: Change the layout with the node out of service
  when: mig_plan.would_change
  block:
    - name: Take the node out of service
      ansible.builtin.include_role:
        name: gpunode.nvidia.gpu_maintenance
        tasks_from: enter
      vars:
        gpu_maintenance_owner: partitioning
        gpu_maintenance_unload_modules: "{{ mig_plan.mode_changes | length > 0 }}"

    - name: Two 1g, one 2g and one 3g instance on every GPU
      gpunode.nvidia.gpu_mig_layout:
        name: all-balanced
        state: applied
  always:
    - name: Bring the node back into service
      ansible.builtin.include_role:
        name: gpunode.nvidia.gpu_maintenance
        tasks_from: leave
      vars:
        gpu_maintenance_owner: partitioning
"""

RETURN = r"""
would_change:
  description: The layout is not (fully) applied now.
  returned: always
  type: bool
mode_changes:
  description: Indexes of the GPUs whose MIG mode changes (these need a GPU reset).
  returned: always
  type: list
  elements: int
reset:
  description: Indexes of the GPUs that were reset in this run.
  returned: always
  type: list
  elements: int
gpus:
  description: The GPUs as read before the change (index, name, pci, mig_current, mig_pending, compute_mode).
  returned: always
  type: list
  elements: dict
layout:
  description: The layout that was checked (a shipped layout resolved for this node's models).
  returned: always
  type: list
  elements: dict
expected_allocatable:
  description: Extended resources the device plugin advertises once the layout is applied.
  returned: always
  type: dict
"""

import contextlib
import os
import tempfile

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpunode.nvidia.plugins.module_utils.common.binaries import NVIDIA_TOOL_DIRS, find_binary
from ansible_collections.gpunode.nvidia.plugins.module_utils.editors import filewrite
from ansible_collections.gpunode.nvidia.plugins.module_utils.partitioning import mig_layout
from ansible_collections.gpunode.nvidia.plugins.module_utils.editors.safe_exit import fail, run_and_exit

# What installs each tool the module runs: the driver stage brings nvidia-smi, nothing of the collection brings
# nvidia-mig-parted (a prerequisite of MIG layouts, docs/before-you-start.md).
MISSING_TOOL = {
    "nvidia-smi": "nvidia-smi is not installed on this node: it comes with NVIDIA's driver utilities, which the "
                  "driver stage installs; run it first (gpunode_driver_stage).",
    "nvidia-mig-parted": "nvidia-mig-parted is not installed on this node: install NVIDIA's mig-parted release package "
                         "(github.com/NVIDIA/mig-parted/releases) or your mirror of it, or leave MIG to the GPU "
                         "operator's MIG manager.",
}


def tools(module):
    found = {}
    for tool in ("nvidia-smi", "nvidia-mig-parted"):
        found[tool] = find_binary(tool, NVIDIA_TOOL_DIRS)
        if not found[tool]:
            fail(module, MISSING_TOOL[tool])
    return found


def resolve_layout(module, gpus):
    if module.params["layout"]:
        return mig_layout.normalize(module.params["layout"], "layout %s" % module.params["name"])
    return mig_layout.named_layout(module.params["name"], gpus)


@contextlib.contextmanager
def temporary_config(text):
    """mig-parted's config in a temporary file: assert and apply read it; the lasting copy is written after success."""
    handle, path = tempfile.mkstemp(prefix="gpunode-mig-", suffix=".yaml")
    try:
        with os.fdopen(handle, "w") as stream:
            stream.write(text)
        yield path
    finally:
        os.unlink(path)


def recorded_text(path):
    """The layout file as the last run wrote it ('' when there is none)."""
    try:
        with open(path) as handle:
            return handle.read()
    except (IOError, OSError):
        return ""


def run(module):
    found = tools(module)
    node = mig_layout.MigNode(module.run_command, found["nvidia-smi"], found["nvidia-mig-parted"])
    name, path = module.params["name"], module.params["config_path"]
    gpus = node.gpus()
    if not gpus:
        fail(module, "nvidia-smi lists no GPU on this node: nothing can be partitioned.")
    layout = resolve_layout(module, gpus)
    problems = mig_layout.check_layout(layout, gpus)
    if problems:
        fail(module, "The MIG layout %s cannot be applied; nothing was changed: %s." % (name, "; ".join(problems)),
             gpus=gpus)
    changes = mig_layout.mode_changes(layout, gpus)
    text = mig_layout.render(name, layout)
    with temporary_config(text) as temporary:
        would_change = bool(changes) or not node.applied(temporary, name)
        if would_change and module.params["state"] == "applied" and not module.check_mode:
            apply_layout(node, temporary, name, [g for g in gpus if g["index"] in changes])
    result = {"would_change": would_change, "mode_changes": changes, "reset": [], "gpus": gpus, "layout": layout,
              "expected_allocatable": mig_layout.expected_allocatable(layout, gpus, module.params["mig_strategy"]),
              "changed": False}
    recorded = recorded_text(path)
    if module._diff and recorded != text:
        result["diff"] = {"before": recorded, "after": text, "before_header": path, "after_header": path}
    if module.params["state"] == "planned" or module.check_mode:
        result["changed"] = module.check_mode and module.params["state"] == "applied" and (
            would_change or recorded != text)
        result["msg"] = summary(name, result, planned=True)
        return result
    result["reset"] = changes
    result["changed"] = would_change
    if recorded != text:
        filewrite.atomic_write(module, path, text.encode("utf-8"), mode=0o644)
        result["changed"] = True
    result["msg"] = summary(name, result, planned=False)
    return result


def apply_layout(node, path, name, changes):
    """Mode first (no reset by mig-parted), a reset only of the GPUs whose mode changes, then the MIG devices."""
    node.apply(path, name, mode_only=True)
    if changes:
        node.reset(changes)
    node.apply(path, name)
    if not node.applied(path, name):
        raise mig_layout.LayoutError("nvidia-mig-parted applied the MIG layout %s but its assert still fails; "
                                     "run 'nvidia-mig-parted assert' with this layout to see which GPU differs" % name)


def summary(name, result, planned):
    if not result["would_change"]:
        return "MIG layout %s is applied." % name
    if planned:
        return "MIG layout %s is not applied%s." % (name, "; MIG mode changes on GPU %s (a GPU reset)" % ", ".join(
            str(i) for i in result["mode_changes"]) if result["mode_changes"] else "")
    return "MIG layout %s applied%s." % (name, "; GPU %s reset for the new MIG mode" % ", ".join(
        str(i) for i in result["reset"]) if result["reset"] else "")


def main():
    module = AnsibleModule(
        argument_spec=dict(
            name=dict(type="str", required=True),
            layout=dict(type="list", elements="dict"),
            state=dict(type="str", choices=["planned", "applied"], default="planned"),
            config_path=dict(type="path", default="/etc/gpunode/mig-parted.yaml"),
            mig_strategy=dict(type="str", choices=["mixed", "single"], default="mixed"),
        ),
        supports_check_mode=True,
    )

    def guarded(module):
        try:
            return run(module)
        except mig_layout.LayoutError as error:
            fail(module, str(error))

    run_and_exit(module, "gpu_mig_layout", module.params["config_path"], guarded)


if __name__ == "__main__":
    main()
