#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpunode.nvidia contributors
# Apache License 2.0

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: gpu_node_facts
short_description: Discover GPUs, driver, toolkit, glibc, container runtimes and the runtime kubelet uses
version_added: "0.1.0"
description:
  - Read-only discovery of a Kubernetes GPU node. Returns C(ansible_facts.gpu_node).
author:
  - gpunode.nvidia contributors (!UNKNOWN)
extends_documentation_fragment:
  - gpunode.nvidia.attributes
  - gpunode.nvidia.attributes.read_only
options:
  root:
    description:
      - Directory where the node's C(/) is. C(/) reads the live node.
      - Any other directory reads a machine image mounted there for baking, or a test tree. Processes are
        then read from I(root)C(/proc) (empty for an image), symlinks with absolute targets are followed
        inside I(root), and no binary is executed.
    type: path
    default: /
  gather:
    description:
      - Sections to return. C(target) also needs the runtimes and kubelet to be read, but only the
        requested keys are returned.
    type: list
    elements: str
    choices: [all, gpus, driver, toolkit, glibc, runtimes, kubelet, target]
    default: [all]
  recall:
    description:
      - Also recall the node's recorded GPU workload proof in this call, as M(gpunode.nvidia.gpu_workload_check)
        does with its O(gpunode.nvidia.gpu_workload_check#module:recall) and these options, from the same
        reading of the node, and return it as RV(proof_recall). C(site.yml)'s discovery does, for the verify
        stage of a node where nothing in the proof's key changes later in the run; one module call fewer.
      - The recall never fails the task, whose facts the other stages need. What would fail
        M(gpunode.nvidia.gpu_workload_check)'s recall (no GPU while O(recall.require_gpu) is set, no runtime to
        check) is a proof that does not hold, with the message as its C(proof_reason) in RV(proof_recall); the
        verify stage then runs the workload, and fails there with that message.
      - Only on the live node (O(root=/)).
    type: dict
    suboptions:
      engine:
        description: M(gpunode.nvidia.gpu_workload_check)'s O(gpunode.nvidia.gpu_workload_check#module:engine).
        type: str
        choices: [auto, containerd, crio, docker]
        default: auto
      socket:
        description: M(gpunode.nvidia.gpu_workload_check)'s O(gpunode.nvidia.gpu_workload_check#module:socket).
        type: str
      config_path:
        description: M(gpunode.nvidia.gpu_workload_check)'s O(gpunode.nvidia.gpu_workload_check#module:config_path).
        type: path
      runtime_handler:
        description: M(gpunode.nvidia.gpu_workload_check)'s O(gpunode.nvidia.gpu_workload_check#module:runtime_handler).
        type: str
        default: nvidia
      image:
        description: M(gpunode.nvidia.gpu_workload_check)'s O(gpunode.nvidia.gpu_workload_check#module:image).
        type: str
        default: nvcr.io/nvidia/k8s/cuda-sample:vectoradd-cuda12.5.0-ubuntu22.04
      require_gpu:
        description: M(gpunode.nvidia.gpu_workload_check)'s O(gpunode.nvidia.gpu_workload_check#module:require_gpu).
        type: bool
        default: false
      node_name:
        description: M(gpunode.nvidia.gpu_workload_check)'s O(gpunode.nvidia.gpu_workload_check#module:node_name).
        type: str
      record_path:
        description: M(gpunode.nvidia.gpu_workload_check)'s O(gpunode.nvidia.gpu_workload_check#module:record_path).
        type: str
        default: ""
  runtime_record:
    description:
      - Also read the node's record of M(gpunode.nvidia.containerd_runtime)'s last run that changed nothing (its
        O(gpunode.nvidia.containerd_runtime#module:record) path) and compare what it was made from with the
        node now (the files containerd loads, what each C(imports) pattern matches, the containerd and runtime
        binaries). Returned as RV(runtime_record); passed on as
        O(gpunode.nvidia.containerd_runtime#module:discovered), it spares that task its reading of the node when
        nothing changed. C(site.yml)'s discovery and the C(container_runtime) role's do.
      - Only on the live node (O(root=/)). Reads and hashes a few files; never changes anything.
    type: path
notes:
  - Asks kubelet which container runtime it uses (its running command line, its flag files, its
    C(--config) file) and matches that endpoint against every runtime instance on the node, so that
    the C(nvidia) runtime is configured in the containerd, Docker or CRI-O that kubelet talks to, not in
    C(/etc/containerd/config.toml) by habit (incident I2 of the field guide).
  - Reads the glibc symbol versions that the NVIDIA container toolkit binaries require from their ELF
    C(.gnu.version_r) sections and compares them with the versions the node's C(libc.so.6) defines
    (incident I4), without running anything.
  - Never changes the node. Runs C(BINARY --version) only on the live node (I(root=/)) for binaries whose
    version no package database records.
  - Standard library only on the managed node.
  - C(docs/discovery.md) in the collection explains how the target is chosen, per platform.
  - Supports check mode; the module never changes anything, so check mode and normal mode return the same.
  - The rpm database is read best effort (the sqlite database of rpm 4.16 and later); the older Berkeley DB
    format of Amazon Linux 2 and CentOS 7 is not read, so I(driver.packages) and versions may be empty there.
"""

EXAMPLES = r"""
- name: Discover the node
  gpunode.nvidia.gpu_node_facts:

- name: Show which containerd kubelet uses and the file to edit
  ansible.builtin.debug:
    msg: "{{ gpu_node.target.config_path }} -> edit {{ gpu_node.target.edit_path }} ({{ gpu_node.target_reason }})"
  when: gpu_node.target is not none

- name: Stop before configuring anything when the toolkit cannot run on this glibc (incident I4)
  ansible.builtin.assert:
    that: gpu_node.glibc.ok
    fail_msg: "{{ gpu_node.glibc.failures | join('; ') }}"

- name: Check a machine image mounted at /mnt/image before it ever boots
  gpunode.nvidia.gpu_node_facts:
    root: /mnt/image
    gather: [toolkit, glibc, runtimes, kubelet, target]
"""

RETURN = r"""
ansible_facts:
  description: Facts added to the host.
  returned: always
  type: complex
  contains:
    gpu_node:
      description: Everything discovered; only the sections in I(gather) are present.
      returned: always
      type: complex
      contains:
        root:
          description: The directory the node was read through.
          type: str
          sample: /
        gpus:
          description: NVIDIA PCI functions of class display or 3D controller (C(0x03xxxx)) from sysfs.
          type: list
          elements: dict
          contains:
            pci_address: {description: "PCI address.", type: str, sample: "0000:65:00.0"}
            vendor_id: {description: "Always C(0x10de).", type: str}
            device_id: {description: "PCI device id.", type: str, sample: "0x2330"}
            class: {description: "PCI class.", type: str, sample: "0x030200"}
            driver: {description: "Kernel driver bound to the device (C(nvidia), C(nouveau), C(vfio-pci)) or null.", type: str}
        driver:
          description: The NVIDIA kernel driver.
          type: dict
          contains:
            loaded: {description: "C(/proc/driver/nvidia/version) exists or the C(nvidia) module is loaded.", type: bool}
            version: {description: "Loaded driver version.", type: str, sample: "535.129.03"}
            flavour: {description: "C(open) or C(proprietary) kernel modules, from the version banner.", type: str}
            module_loaded: {description: "C(nvidia) is listed in C(/proc/modules).", type: bool}
            nouveau_loaded: {description: "C(nouveau) is listed in C(/proc/modules).", type: bool}
            packages: {description: "Installed NVIDIA driver packages and their versions.", type: dict}
            package_db: {description: "C(dpkg), C(rpm) or null when no package database could be read.", type: str}
        toolkit:
          description: NVIDIA container toolkit files in C(/usr/bin), C(/usr/local/bin) and C(/usr/local/nvidia/toolkit).
          type: dict
          contains:
            installed: {description: "At least one toolkit binary exists.", type: bool}
            runtime_path: {description: "First C(nvidia-container-runtime) found (the C(BinaryName) to use).", type: str}
            binaries:
              description: One entry per binary.
              type: list
              elements: dict
              contains:
                name: {description: "File name.", type: str}
                path: {description: "Path on the node.", type: str}
                elf: {description: "An ELF file (false for wrapper scripts).", type: bool}
                requires_glibc: {description: "Highest C(GLIBC_x.y) it requires.", type: str, sample: "2.27"}
                glibc_ok: {description: "The node's glibc defines every version it requires.", type: bool}
                version: {description: "Version from the package database or from C(--version).", type: str}
                version_source: {description: "C(package NAME) or C(--version).", type: str}
            libraries: {description: "C(libnvidia-container*.so*) files found.", type: list, elements: str}
            packages: {description: "Installed toolkit packages and versions.", type: dict}
            version: {description: "Toolkit version (package C(nvidia-container-toolkit) or a binary's).", type: str}
            glibc_ok: {description: "Every toolkit binary and library can be loaded by the node's glibc.", type: bool}
        glibc:
          description: The node's glibc and the glibc check of every toolkit binary and library (incident I4).
          type: dict
          contains:
            version: {description: "Node glibc version.", type: str, sample: "2.36"}
            path: {description: "The C(libc.so.6) the loader uses, as it names it.", type: str, sample: /lib/x86_64-linux-gnu/libc.so.6}
            method:
              description: >-
                How the version was read: C(banner) (the release string inside libc), C(verdef) (the highest
                version libc defines) or C(file-name) (C(libc-2.17.so) on old distributions).
              type: str
            defined_max: {description: "Highest C(GLIBC_x.y) that C(libc.so.6) defines.", type: str}
            ok: {description: "No check failed.", type: bool}
            failures: {description: "The loader message of each failing file.", type: list, elements: str}
            checks:
              description: One per toolkit file.
              type: list
              elements: dict
              contains:
                path: {description: "File checked.", type: str}
                elf: {description: "An ELF file.", type: bool}
                requires: {description: "Highest C(GLIBC_x.y) required.", type: str}
                host: {description: "Node glibc version.", type: str}
                ok: {description: "Loadable; null when the ELF file could not be read.", type: bool}
                missing: {description: "Required versions the node's libraries do not define, in loader order.", type: list, elements: str}
                messages:
                  description: >-
                    One dynamic-loader message per missing version, in the loader's order, e.g.
                    C(/lib64/libc.so.6: version 'GLIBC_2.27' not found (required by /usr/bin/nvidia-container-cli)).
                  type: list
                  elements: str
                message: {description: "The message for the highest missing version.", type: str}
                summary: {description: "C(requires GLIBC_2.27, host has 2.26)", type: str}
        runtimes:
          description: Every container runtime instance on the node, running or installed as a service.
          type: list
          elements: dict
          contains:
            id: {description: "C(KIND:SOCKET)", type: str, sample: "containerd:/run/containerd/containerd.sock"}
            kind: {description: "C(containerd), C(docker) or C(crio).", type: str}
            platform:
              description: >-
                C(distro) (a distribution or upstream C(containerd.service)), C(eks-al2), C(eks-al2023), C(k8s-snap)
                (Canonical Kubernetes), C(microk8s), C(k3s), C(rke2), C(k0s), C(docker), C(docker-managed)
                (dockerd's private containerd) or C(crio).
              type: str
            service: {description: "systemd service that runs it (from the process's cgroup or the unit files).", type: str}
            running: {description: "A process serves it now.", type: bool}
            pid: {description: "Process id when running.", type: int}
            binary: {description: "Daemon binary.", type: str}
            version: {description: "Daemon version.", type: str}
            version_source: {description: "C(package NAME) or C(--version).", type: str}
            socket: {description: "Socket it serves, as configured.", type: str}
            cri_socket: {description: "For Docker, the cri-dockerd socket kubelet would use.", type: str}
            containerd_socket: {description: "For Docker, the containerd named by C(--containerd) or C(daemon.json).", type: str}
            config_path: {description: "The file the daemon reads.", type: str}
            config_exists: {description: "That file exists.", type: bool}
            config_version: {description: "containerd's C(version = N) (1 when the file has none); null for Docker and CRI-O", type: int}
            imports: {description: "containerd C(imports) globs.", type: list, elements: str}
            dropin_dir: {description: "Directory of drop-ins the daemon reads.", type: str}
            disabled_plugins: {description: "containerd C(disabled_plugins).", type: list, elements: str}
            edit_path: {description: "The file (or drop-in directory) to edit; null when the file must not be edited.", type: str}
            edit_mode: {description: "C(main), C(template) (MicroK8s, k3s, RKE2), C(dropin) (k0s, CRI-O) or C(none).", type: str}
            regenerated_by: {description: "What rewrites I(config_path) (C(microk8s), C(k3s), C(rke2), C(k0s), C(nodeadm), C(dockerd)).", type: str}
            platform_config: {description: "The platform's own config file (C(/etc/rancher/k3s/config.yaml)).", type: str}
            nvidia_autodetect: {description: "The platform adds an C(nvidia) runtime by itself when C(/usr/bin/nvidia-container-runtime) exists.", type: bool}
            used_by: {description: "Other daemons that use this instance (C(docker)).", type: list, elements: str}
            sources: {description: "Where it was found (C(process), C(unit), C(args-file)).", type: list, elements: str}
            enabled: {description: "The service is enabled.", type: bool}
            masked: {description: "The service is masked (a link to C(/dev/null)): systemd will not start it.", type: bool}
            missing_binary:
              description: The program the service starts, when it is not on the node (a removed package's unit); else null.
              type: str
            restart:
              description: How the instance picks up a changed config.
              type: dict
              contains:
                method: {description: "C(systemd), C(systemd-reload), C(snap), C(manual) or C(none).", type: str}
                service: {description: "Service to restart.", type: str}
                command: {description: "Command that does it.", type: str, sample: snap restart k8s.containerd}
                also_restarts: {description: "What restarts with it (C(kubelet) for k3s and RKE2).", type: list, elements: str}
                note: {description: "Anything else to know.", type: str}
            notes: {description: "Platform notes (regenerated files, where to put settings).", type: list, elements: str}
            is_target: {description: "This is the target.", type: bool}
            used_by_kubelet: {description: "kubelet's runtime endpoint is this instance's socket.", type: bool}
        kubelet:
          description: kubelet and the runtime endpoint it uses.
          type: dict
          contains:
            running: {description: "A kubelet (or a process embedding it) is running.", type: bool}
            pid: {description: "Its process id.", type: int}
            binary: {description: "Its binary.", type: str}
            installed: {description: "kubelet is installed or configured (unit, flag file, config file, binary).", type: bool}
            platform: {description: "C(k8s-snap), C(microk8s), C(k3s), C(rke2), C(k0s) or null for a plain kubelet.", type: str}
            embedded_in: {description: "C(k3s), C(rke2) or C(kubelite) when kubelet runs inside another process.", type: str}
            endpoint: {description: "Runtime endpoint.", type: str, sample: "unix:///run/containerd/containerd.sock"}
            endpoint_socket: {description: "The endpoint's socket path, C(/var/run) read as C(/run).", type: str}
            endpoint_source: {description: "C(flag), C(config), C(platform-default), C(kubelet-default) or C(legacy-dockershim)", type: str}
            endpoint_origin: {description: "The file (or C(/proc/PID/cmdline)) the endpoint was read from.", type: str}
            config_path: {description: "KubeletConfiguration file.", type: str}
            config_dir: {description: "C(--config-dir) of KubeletConfiguration drop-ins (EKS AL2023)", type: str}
            cgroup_driver: {description: "C(systemd) or C(cgroupfs) when set.", type: str}
            legacy_container_runtime: {description: "C(docker) when kubelet is still started with C(--container-runtime docker) (incident I3)", type: str}
            service: {description: "systemd service of the running kubelet (from its cgroup), or null", type: str}
            flag_sources: {description: "Files and command lines the flags were read from, in order.", type: list, elements: str}
        target:
          description: >-
            The runtime instance to configure (same keys as a I(runtimes) entry, plus C(selected_by):
            C(kubelet), C(only-instance) or C(only-running)); null when none can be chosen safely.
          type: dict
        elapsed_s:
          description: Seconds the discovery took on the node.
          type: float
        target_reason:
          description: Why this target was chosen, or why none was.
          type: str
          sample: >-
            kubelet's runtime endpoint unix:///var/lib/k8s-containerd/k8s-containerd/run/containerd/containerd.sock
            (flag, /proc/2211/cmdline) is served by containerd ... (k8s-snap, snap.k8s.containerd.service)
        systemd:
          description: >-
            Whether systemd runs the system read (C(/run/systemd/system) exists, as C(sd_booted) tests), with
            C(target) in O(gather). False for an image mounted at O(root), which does not run.
          type: bool
          returned: when O(gather) includes target
proof_recall:
  description:
    - The recall of the recorded proof, as M(gpunode.nvidia.gpu_workload_check) returns it with
      O(gpunode.nvidia.gpu_workload_check#module:recall) (RV(gpunode.nvidia.gpu_workload_check#module:proof) is
      V(recorded) when the proof holds, else V(none) with its RV(gpunode.nvidia.gpu_workload_check#module:proof_reason)).
    - Not a fact; its sections of the node that O(gather) did not ask for are not returned either.
  returned: when O(recall) is set
  type: dict
runtime_record:
  description:
    - The recall of the record at O(runtime_record) - C(path); C(found); C(holds) (every file, pattern and binary
      it was made from is the same now); C(reason) (why it does not hold, in words); and, when found, the
      C(key) and C(result) it keeps for M(gpunode.nvidia.containerd_runtime).
    - Not a fact.
  returned: when O(runtime_record) is set
  type: dict
  sample: {"path": "/var/lib/gpunode/containerd-runtime.json", "found": true, "holds": false,
           "reason": "changed since the record: /etc/containerd/config.toml changed"}
"""

import os
import time

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpunode.nvidia.plugins.module_utils.editors import runtime_record
from ansible_collections.gpunode.nvidia.plugins.module_utils.editors.masking import mask_data
from ansible_collections.gpunode.nvidia.plugins.module_utils.node.discovery import SECTIONS, gather
from ansible_collections.gpunode.nvidia.plugins.module_utils.workload import check
from ansible_collections.gpunode.nvidia.plugins.module_utils.workload.target import sections_needed

# What the target section adds beside its own key.
TARGET_EXTRAS = ("target_reason", "systemd")


def main():
    module = AnsibleModule(
        argument_spec=dict(
            root=dict(type="path", default="/"),
            gather=dict(type="list", elements="str", default=["all"], choices=["all"] + list(SECTIONS)),
            recall=dict(type="dict", options=check.RECALL_ARGUMENT_SPEC),
            runtime_record=dict(type="path"),
        ),
        supports_check_mode=True,
    )
    root = module.params["root"]
    recall = module.params["recall"]
    if not os.path.isdir(root):
        module.fail_json(msg="root %s is not a directory: give the directory where the node's / is mounted" % root)
    if recall is not None and root != "/":
        module.fail_json(msg="recall reads the live node's runtime and proof record: leave root at / to use it")
    if module.params["runtime_record"] and root != "/":
        module.fail_json(msg="runtime_record compares a record with the live node: leave root at / to use it")
    sections = SECTIONS if "all" in module.params["gather"] else module.params["gather"]
    started = time.time()
    read = set(sections)
    if recall is not None:
        read.update(sections_needed(recall["engine"], recall["socket"], recall["config_path"]))
    facts = gather(root, read)
    elapsed_s = round(time.time() - started, 3)
    result = {}
    if recall is not None:
        result["proof_recall"] = mask_data(check.recall_outcome(recall, facts, started))
    if module.params["runtime_record"]:
        result["runtime_record"] = runtime_record.recall(module.params["runtime_record"])
    facts = dict(only_sections(facts, sections), elapsed_s=elapsed_s)
    module.exit_json(changed=False, ansible_facts={"gpu_node": facts}, **result)


def only_sections(facts, sections):
    """FACTS without the sections read only for the recall: the facts are what `gather` asked for."""
    dropped = set(SECTIONS) - set(sections)
    if "target" in dropped:
        dropped.update(TARGET_EXTRAS)
    return dict((key, value) for key, value in facts.items() if key not in dropped)


if __name__ == "__main__":
    main()
