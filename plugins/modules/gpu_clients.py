#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpunode.nvidia contributors
# Apache License 2.0

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: gpu_clients
short_description: Stop and restart a GPU node's GPU clients, and unload the NVIDIA kernel modules safely
version_added: "0.3.0"
description:
  - With O(state=stopped), stops the active GPU client services (by default those installed among
    C(nvidia-dcgm-exporter), C(nvidia-dcgm), C(dcgm), C(nvidia-imex), C(nvidia-mps), C(nvidia-fabricmanager),
    C(nv-fabricmanager) and C(nvidia-persistenced), in that order) and records which were active in O(state_file)
    before stopping them. With O(state=started), loads again the kernel modules the stop unloaded (C(modprobe),
    each before its users), starts exactly the recorded units (the persistence daemon first) and removes the
    record. A run killed in between keeps the record, so the next O(state=started) still
    restarts them.
notes:
  - With O(unload_modules), unloads C(nvidia_drm), C(nvidia_modeset), C(nvidia_uvm), C(nvidia_peermem) and
    C(nvidia) in that order with C(rmmod), never forced. It first reads each loaded module's C(refcnt) and
    C(holders/) under O(sysfs_root)C(/module); when any module is held by a module outside that set or by open
    handles (a CUDA process, a container holding C(/dev/nvidia*)), nothing is unloaded and
    RV(reboot_required=true) comes back with the evidence and the processes holding C(/dev/nvidia*). The caller
    decides to reboot; this module never reboots. The modules to unload are recorded in O(state_file) before the
    first C(rmmod), so O(state=started) loads the driver installed meanwhile even after a run killed half-way;
    a module that does not load (for example an unsigned one under Secure Boot) fails the task with
    C(modprobe)'s error and keeps the record.
  - Used by role C(gpunode.nvidia.gpu_maintenance) between evicting a node's GPU pods and changing its driver or
    partitioning.
author:
  - gpunode.nvidia contributors (!UNKNOWN)
options:
  state:
    description: V(stopped) stops (and with O(unload_modules) unloads); V(started) restarts what was stopped.
    type: str
    choices: [stopped, started]
    required: true
  services:
    description:
      - For O(state=stopped), the units to stop instead of the GPU clients found on the node (with or without
        C(.service)). Each must be installed.
    type: list
    elements: str
  unload_modules:
    description: For O(state=stopped), also unload the NVIDIA kernel modules (see above).
    type: bool
    default: false
  state_file:
    description: Where the stopped units are recorded (under C(/run), so a reboot forgets them as it restarts them).
    type: path
    default: /run/gpunode/gpu-clients.json
  sysfs_root:
    description: Where sysfs is mounted (another directory holds a prepared tree in tests).
    type: path
    default: /sys
extends_documentation_fragment:
  - gpunode.nvidia.attributes
attributes:
  check_mode:
    support: full
    details: Reads unit states and /sys/module; RV(would) lists the systemctl and rmmod commands a real run would run.
  diff_mode:
    support: none
seealso:
  - module: gpunode.nvidia.gpu_node_maintenance
"""

EXAMPLES = r"""
- name: Stop the GPU clients and unload the driver before the upgrade
  gpunode.nvidia.gpu_clients:
    state: stopped
    unload_modules: true
  register: clients

- name: Reboot when the modules could not be unloaded
  ansible.builtin.reboot:
  when: clients.reboot_required

- name: Start again exactly what was stopped
  gpunode.nvidia.gpu_clients:
    state: started
"""

RETURN = r"""
stopped:
  description: The units stopped by this run.
  returned: state is stopped
  type: list
  elements: str
started:
  description: The units started by this run.
  returned: state is started
  type: list
  elements: str
recorded:
  description: The units recorded in O(state_file) (stopped by this or an earlier run).
  returned: always
  type: list
  elements: str
unloaded:
  description: The kernel modules unloaded, in order.
  returned: unload_modules is true
  type: list
  elements: str
would_unload:
  description: The kernel modules a real run would unload (check mode).
  returned: unload_modules is true
  type: list
  elements: str
reboot_required:
  description: A module could not be unloaded; the new driver or layout needs a reboot.
  returned: unload_modules is true
  type: bool
evidence:
  description: Why the modules cannot be unloaded (holders, reference counts, processes with C(/dev/nvidia*) open).
  returned: unload_modules is true
  type: list
  elements: str
  sample: ["nvidia is held by module nvidia_fs (/sys/module/nvidia/holders)"]
modules:
  description: The loaded NVIDIA modules with their C(refcnt) and C(holders) as read before unloading.
  returned: unload_modules is true
  type: dict
loaded:
  description: The kernel modules loaded again with C(modprobe), in order.
  returned: state is started
  type: list
  elements: str
  sample: [nvidia, nvidia_uvm, nvidia_modeset, nvidia_drm]
would_load:
  description: The kernel modules a real run would load (check mode).
  returned: state is started
  type: list
  elements: str
would:
  description: The commands a real run would run (check mode).
  returned: always
  type: list
  elements: str
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpunode.nvidia.plugins.module_utils.editors.filewrite import atomic_write, remove_file
from ansible_collections.gpunode.nvidia.plugins.module_utils.services.gpu_clients import ClientsError, manage
from ansible_collections.gpunode.nvidia.plugins.module_utils.editors.safe_exit import fail, run_and_exit


class StateFile(object):
    """The record of stopped units, written atomically."""

    def __init__(self, module, path):
        self.module = module
        self.path = path

    def read(self):
        try:
            with open(self.path) as handle:
                return handle.read()
        except (IOError, OSError):
            return None

    def write(self, text):
        atomic_write(self.module, self.path, text.encode("utf-8"), mode=0o644)

    def remove(self):
        remove_file(self.module, self.path)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            state=dict(type="str", required=True, choices=["stopped", "started"]),
            services=dict(type="list", elements="str"),
            unload_modules=dict(type="bool", default=False),
            state_file=dict(type="path", default="/run/gpunode/gpu-clients.json"),
            sysfs_root=dict(type="path", default="/sys"),
        ),
        supports_check_mode=True,
    )
    params = module.params

    def runner(argv):
        return module.run_command(argv)

    def run(module):
        try:
            return manage("/", runner, module.check_mode, params["state"], params["services"],
                          StateFile(module, params["state_file"]), params["unload_modules"], params["sysfs_root"])
        except ClientsError as exc:
            fail(module, str(exc))

    run_and_exit(module, "gpu_clients", params["state_file"], run)


if __name__ == "__main__":
    main()
