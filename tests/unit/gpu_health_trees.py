"""GPU node trees for the node services and the health rules (tests/unit/node_trees.py style).

A healthy GPU node: one GPU in sysfs, the driver loaded (/proc/driver/nvidia/version as the
driver writes it), persistence daemon enabled, a CDI spec naming the driver's libraries, the
toolkit at 1.17.8 from dpkg status. Each test adds one problem. Kernel log excerpts and
``nvidia-smi -q -x`` outputs follow the formats NVIDIA documents (Xid catalogue, nvidia-smi XML);
they are recorded text, not output of a real GPU (none exists here).
"""

import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
from node_trees import NodeTree  # noqa: E402

DRIVER = "570.172.08"
KERNEL = "6.1.0-37-amd64"
PROC_VERSION = ("NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  %s  Release Build  "
                "(dvs-builder@U16-I3-B03-4-3)  Tue Jul  8 18:07:17 UTC 2025\n"
                "GCC version:  gcc version 12.2.0 (Debian 12.2.0-14)\n" % DRIVER)

CDI_SPEC = """---
cdiVersion: 0.5.0
kind: nvidia.com/gpu
devices:
- name: "0"
  containerEdits:
    deviceNodes:
    - path: /dev/nvidia0
containerEdits:
  mounts:
  - hostPath: /usr/lib/x86_64-linux-gnu/libcuda.so.%(driver)s
    containerPath: /usr/lib/x86_64-linux-gnu/libcuda.so.%(driver)s
  - hostPath: /usr/lib/x86_64-linux-gnu/libnvidia-ml.so.%(driver)s
    containerPath: /usr/lib/x86_64-linux-gnu/libnvidia-ml.so.%(driver)s
"""

SMI_GPU = """  <gpu id="00000000:65:00.0">
    <product_name>NVIDIA H100 80GB HBM3</product_name>
    <persistence_mode>%(persistence)s</persistence_mode>
    <uuid>GPU-5c1e8a44-0d0e-4a4b-9a57-0b4e1bd7f001</uuid>
    <ecc_mode>
      <current_ecc>Enabled</current_ecc>
      <pending_ecc>Enabled</pending_ecc>
    </ecc_mode>
    <ecc_errors>
      <volatile>
        <sram_correctable>0</sram_correctable>
        <sram_uncorrectable_parity>0</sram_uncorrectable_parity>
        <sram_uncorrectable_secded>0</sram_uncorrectable_secded>
        <dram_correctable>0</dram_correctable>
        <dram_uncorrectable>%(dram_unc)s</dram_uncorrectable>
      </volatile>
      <aggregate>
        <sram_correctable>0</sram_correctable>
        <sram_uncorrectable_parity>0</sram_uncorrectable_parity>
        <sram_uncorrectable_secded>0</sram_uncorrectable_secded>
        <dram_correctable>3</dram_correctable>
        <dram_uncorrectable>%(dram_unc)s</dram_uncorrectable>
        <sram_threshold_exceeded>No</sram_threshold_exceeded>
      </aggregate>
    </ecc_errors>
    <retired_pages>
      <multiple_single_bit_retirement>
        <retired_count>N/A</retired_count>
      </multiple_single_bit_retirement>
      <double_bit_retirement>
        <retired_count>N/A</retired_count>
      </double_bit_retirement>
      <pending_blacklist>N/A</pending_blacklist>
      <pending_retirement>%(pending_retirement)s</pending_retirement>
    </retired_pages>
    <remapped_rows>
      <remapped_row_corr>0</remapped_row_corr>
      <remapped_row_unc>%(remap_unc)s</remapped_row_unc>
      <remapped_row_pending>%(remap_pending)s</remapped_row_pending>
      <remapped_row_failure>%(remap_failure)s</remapped_row_failure>
    </remapped_rows>
  </gpu>
"""


def smi_xml(persistence="Enabled", dram_unc="0", pending_retirement="N/A", remap_unc="0", remap_pending="No",
            remap_failure="No"):
    """`nvidia-smi -q -x` of one H100, in NVIDIA's documented XML layout (nvsmi_device_v12.dtd)."""
    gpu = SMI_GPU % dict(persistence=persistence, dram_unc=dram_unc, pending_retirement=pending_retirement,
                         remap_unc=remap_unc, remap_pending=remap_pending, remap_failure=remap_failure)
    return ('<?xml version="1.0" ?>\n<!DOCTYPE nvidia_smi_log SYSTEM "nvsmi_device_v12.dtd">\n<nvidia_smi_log>\n'
            "  <timestamp>Mon Nov 23 17:00:00 2026</timestamp>\n  <driver_version>%s</driver_version>\n"
            "  <cuda_version>12.8</cuda_version>\n  <attached_gpus>1</attached_gpus>\n%s</nvidia_smi_log>\n"
            % (DRIVER, gpu))


def gpu_node(tree, driver=DRIVER, persistenced=True, cdi=True, toolkit="1.17.8-1"):
    """A healthy single-GPU node (no NVSwitch)."""
    tree.gpu()
    tree.modules("nvidia_uvm", "nvidia_modeset", "nvidia")
    tree.file("/proc/driver/nvidia/version", PROC_VERSION.replace(DRIVER, driver))
    tree.file("/sys/module/nvidia/version", driver + "\n")
    tree.file("/proc/sys/kernel/osrelease", KERNEL + "\n")
    tree.package("nvidia-open-kernel-dkms", driver + "-1")
    tree.package("linux-image-" + KERNEL, "6.1.140-1")
    tree.mkdir("/lib/modules/%s/updates/dkms" % KERNEL)
    tree.file("/lib/modules/%s/updates/dkms/nvidia.ko.xz" % KERNEL, "stand-in module\n")
    if toolkit:
        for name in ("nvidia-container-toolkit", "nvidia-container-toolkit-base", "libnvidia-container-tools",
                     "libnvidia-container1"):
            tree.package(name, toolkit)
        tree.file("/usr/bin/nvidia-ctk", "#!/bin/sh\n# stand-in nvidia-ctk\n", mode=0o755)
    if persistenced:
        tree.unit("nvidia-persistenced.service", exec_start="/usr/bin/nvidia-persistenced --user nvidia-persistenced")
    if cdi:
        tree.file("/var/run/cdi/nvidia.yaml", CDI_SPEC % {"driver": driver})
    return tree


def nvswitch_node(tree, fabricmanager="570.172.08", device="0x22a3", nvlsm=False):
    """An HGX node: the GPU node plus four NVSwitches (class 0x0680) and fabric manager."""
    gpu_node(tree)
    for index in range(4):
        tree.pci("0000:0%d:00.0" % (5 + index), "0x10de", device, "0x068000")
    if fabricmanager:
        tree.package("nvidia-fabricmanager-570", fabricmanager + "-1")
        tree.file("/usr/bin/nv-fabricmanager", "#!/bin/sh\n# stand-in nv-fabricmanager\n", mode=0o755)
        tree.unit("nvidia-fabricmanager.service", exec_start="/usr/bin/nv-fabricmanager -c /usr/share/nvidia/"
                  "nvswitch/fabricmanager.cfg", enabled=False)
    if nvlsm:
        tree.package("nvlsm", "2025.06.4-1")
    return tree


def new(root):
    return NodeTree(root)
