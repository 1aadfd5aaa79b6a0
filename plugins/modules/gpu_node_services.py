#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpunode.nvidia contributors
# Apache License 2.0

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: gpu_node_services
short_description: Persistence daemon, fabric manager (NVSwitch systems) and CDI spec of a GPU node
version_added: "0.2.0"
description:
  - Enables (and, with O(start), starts) C(nvidia-persistenced.service).
author:
  - gpunode.nvidia contributors (!UNKNOWN)
extends_documentation_fragment:
  - gpunode.nvidia.attributes
options:
  root:
    description:
      - Directory under which sysfs, C(/proc), unit files, the package database and the CDI spec are read (and the
        spec written). C(systemctl) always acts on the running system.
      - Anything other than C(/) is for tests with a recorded node tree.
    type: path
    default: /
  start:
    description: Start the services (site.yml, first boot). V(false) only enables them (image bakes).
    type: bool
    default: true
  enable:
    description: Enable the units so that they start at boot.
    type: bool
    default: true
  refresh_cdi:
    description: Regenerate the CDI spec even when it matches the running driver (the driver or toolkit changed).
    type: bool
    default: false
  install_fabricmanager:
    description:
      - On an NVSwitch system whose fabric manager is missing or at another version than the loaded driver (or
        that lacks NVLSM where the NVSwitch generation needs it), return the packages to install in
        RV(fabricmanager.install) (apt C(nvidia-fabricmanager-BRANCH=VERSION-*), from branch 590 on
        C(nvidia-fabricmanager=VERSION-*); dnf/yum C(nvidia-fabric-manager-VERSION); C(nvlsm)) instead of failing,
        and stop a fabric manager that runs at another version.
      - V(false) fails the task with the same packages named.
    type: bool
    default: false
attributes:
  check_mode:
    support: full
    details: Reports which units would be enabled or started and whether the CDI spec would be regenerated; runs no
      systemctl change and writes no spec.
  diff_mode:
    support: none
notes:
  - On NVSwitch systems (NVIDIA PCI functions of class C(0x0680) in sysfs) checks that fabric manager is installed
    at exactly the loaded driver's version, and that NVLSM is installed where the NVSwitch generation needs it
    (fourth generation, HGX B200/B100), then enables and starts C(nvidia-fabricmanager.service) once the kernel
    module is loaded. A missing fabric manager, or one at another version, fails the task with the exact packages
    to install. With O(install_fabricmanager) it does not fail; the package specs that install it at the loaded driver's
    version are returned in RV(fabricmanager.install) and a fabric manager running at another version is stopped.
    The module itself installs no package (role C(gpunode.nvidia.node_services) installs them, then runs the
    module again to start fabric manager).
  - Generates the CDI spec once the driver is loaded, when it is missing, when it does not describe the running
    driver, or when O(refresh_cdi) says the driver or toolkit changed in this run. Where the toolkit ships
    C(nvidia-cdi-refresh.service) it runs C(systemctl reset-failed) then a synchronous C(systemctl restart) of that
    unit (a unit failed by a boot race is recovered, and a failed refresh is reset again, never left failed);
    otherwise it runs C(nvidia-ctk cdi generate --output=/var/run/cdi/nvidia.yaml).
  - Without a GPU and with O(start) nothing is done and C(gpu=false) says why (not a failure). With O(start=false)
    (image bakes) the units are only enabled, even without a GPU; the image's first boot starts them.
  - Where NVIDIA's GPU operator manages the toolkit (C(/usr/local/nvidia/toolkit), its containerd drop-in with the
    C(nvidia-cdi)/C(nvidia-legacy) runtimes) the CDI spec is left to it.
  - The same code (C(module_utils/services/node_services.py), standard library only) runs at an image's first boot.
  - Supports check mode; the actions that would run are listed in RV(actions).
  - Standard library only on the managed node (Python 3.6+).
seealso:
  - module: gpunode.nvidia.gpu_doctor
"""

EXAMPLES = r"""
- name: Persistence daemon, fabric manager and CDI spec
  gpunode.nvidia.gpu_node_services:

- name: In an image bake, enable the units for the first boot and start nothing
  gpunode.nvidia.gpu_node_services:
    start: false

- name: Regenerate the CDI spec after a driver upgrade
  gpunode.nvidia.gpu_node_services:
    refresh_cdi: true

- name: Plan fabric manager at the driver's version instead of failing
  gpunode.nvidia.gpu_node_services:
    install_fabricmanager: true
  register: services

- name: Install it (apt)
  ansible.builtin.apt:
    name: "{{ services.fabricmanager.install }}"
    allow_downgrade: true
  when: services.fabricmanager.install | default([]) | length > 0
"""

RETURN = r"""
gpu:
  description: Whether an NVIDIA GPU was found in sysfs.
  returned: always
  type: bool
nvswitch:
  description: Whether NVSwitch devices were found (fabric manager is then required).
  returned: always
  type: bool
gpus:
  description: PCI addresses of the GPUs.
  returned: always
  type: list
  elements: str
driver_version:
  description: Version of the loaded NVIDIA kernel module, null when none is loaded.
  returned: always
  type: str
msg:
  description: What was done, or why nothing was (no GPU, driver not loaded, GPU operator), or what is wrong.
  returned: always
  type: str
actions:
  description: The commands run (in check mode, that would run).
  returned: always
  type: list
  elements: str
  sample: ["systemctl enable nvidia-persistenced.service", "systemctl restart nvidia-cdi-refresh.service"]
operator_toolkit:
  description: Evidence that NVIDIA's GPU operator manages the toolkit here (empty when it does not).
  returned: always
  type: list
  elements: str
persistenced:
  description: >-
    C(unit), C(present), C(enabled), C(active), C(changed), C(error), C(warning) (the unit is not installed: a
    warning of the task, not a failure); null when skipped.
  returned: always
  type: dict
fabricmanager:
  description: >-
    C(required) (NVSwitch system), C(nvswitches), C(unit), C(version) and C(version_source) of fabric manager,
    C(driver_version), C(nvlsm_required), C(nvlsm_installed), C(install) and C(package_manager) (see below),
    C(enabled), C(active), C(changed), C(error); null when skipped.
  returned: always
  type: dict
  contains:
    install:
      description:
        - With O(install_fabricmanager), the package specs that install fabric manager at exactly the loaded
          driver's version and NVLSM where needed; empty when nothing is to be installed.
      returned: always
      type: list
      elements: str
      sample: ["nvidia-fabricmanager-570=570.172.08-*"]
    package_manager:
      description: C(apt), C(dnf) or C(yum), for RV(fabricmanager.install); null when nothing is to be installed.
      returned: always
      type: str
cdi:
  description: >-
    C(spec) path, C(exists), C(matches_driver), C(method) (C(nvidia-cdi-refresh.service) or
    C(nvidia-ctk cdi generate)), C(refreshed), C(reason), C(changed), C(error); null when the spec was not
    considered (no GPU, bake, driver not loaded, GPU operator).
  returned: always
  type: dict
"""

import os

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpunode.nvidia.plugins.module_utils.services.node_services import ensure_node_services


def main():
    module = AnsibleModule(
        argument_spec=dict(
            root=dict(type="path", default="/"),
            start=dict(type="bool", default=True),
            enable=dict(type="bool", default=True),
            refresh_cdi=dict(type="bool", default=False),
            install_fabricmanager=dict(type="bool", default=False),
        ),
        supports_check_mode=True,
    )
    root = module.params["root"]
    if not os.path.isdir(root):
        module.fail_json(msg="root %s is not a directory" % root)

    def runner(argv):
        rc, out, err = module.run_command(argv)
        return rc, out, err

    result = ensure_node_services(root=root, runner=runner, check_mode=module.check_mode,
                                  refresh_cdi=module.params["refresh_cdi"], start=module.params["start"],
                                  enable=module.params["enable"],
                                  install_fabricmanager=module.params["install_fabricmanager"])
    failed = result.pop("failed")
    for warning in result.pop("warnings"):
        module.warn(warning)
    if failed:
        module.fail_json(**result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
