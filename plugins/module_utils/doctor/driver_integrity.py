# -*- coding: utf-8 -*-
# Copyright: gpunode.nvidia contributors
# Apache License 2.0
"""gpu_doctor rules on the driver's integrity: Secure Boot signatures and the locked version set.

* ``secure-boot-module-unsigned``: Secure Boot is on and the NVIDIA module of the running kernel carries no
  signature, or is signed with a DKMS key the machine has not enrolled;
* ``secure-boot-enrollment-pending``: a key waits in shim's MokNew for confirmation at the console;
* ``secure-boot-newest-kernel-unsigned``: the newest installed kernel's NVIDIA module is unsigned;
* ``driver-set-split``: the next upgrade would move part of the driver's version set (driver_drift.py).

Each entry of ``RULES`` is ``(id, severity, incident, title, check)`` as in health.py.

Runs on managed nodes: standard library only.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.gpunode.nvidia.plugins.module_utils.services import node_services
from ansible_collections.gpunode.nvidia.plugins.module_utils.doctor.context import finding, manual_fix, note
from ansible_collections.gpunode.nvidia.plugins.module_utils.doctor.health import command, gpu_node, installed_kernels
from ansible_collections.gpunode.nvidia.plugins.module_utils.install.driver_drift import node_drift
from ansible_collections.gpunode.nvidia.plugins.module_utils.node.node_os import MOK_KEYS, module_files, secure_boot
from ansible_collections.gpunode.nvidia.plugins.module_utils.install.secure_boot import (
    MOK_NEW, SIGNING_CERT, enrollment_pending, enrollment_state, module_file_signed)

SIGN_FIX = ("Sign the NVIDIA modules with a key the machine trusts: role nvidia_driver with "
            "nvidia_driver_secure_boot_strategy: dkms_sign and the organisation's key (docs/secure-boot.md), or "
            "the distribution's signed packages (precompiled).")


def secure_boot_on(ctx):
    return bool(gpu_node(ctx) and secure_boot(ctx.node, ctx.node.run)["enabled"])


def unsigned_modules(ctx, kernel):
    files = module_files(ctx.node, [kernel]) if kernel else []
    return [path for path in files if module_file_signed(ctx.node.local(path)) is False]


def signing_certificates(ctx):
    return [path for path in (SIGNING_CERT,) + tuple(MOK_KEYS) if ctx.node.isfile(path)]


def check_module_unsigned(rule, ctx):
    if not secure_boot_on(ctx):
        return []
    running = (ctx.node.read("/proc/sys/kernel/osrelease") or "").strip()
    unsigned = unsigned_modules(ctx, running)
    if unsigned:
        return [finding(rule, "Secure Boot is on and the NVIDIA module %s carries no signature: the kernel refuses "
                        "to load it and the node has no GPU." % unsigned[0],
                        [{"kind": "file", "path": path, "line": None, "text": "no appended module signature"}
                         for path in unsigned], manual_fix(SIGN_FIX))]
    findings = []
    for cert in signing_certificates(ctx):
        result = command(ctx, ["mokutil", "--test-key", cert])
        if result and result[0] in (0, 1) and enrollment_state(result[1] + result[2]) == "not_enrolled":
            findings.append(finding(
                rule, "Secure Boot is on and DKMS signs the NVIDIA module with %s, which this machine has not "
                "enrolled: the kernel refuses the module." % cert,
                [note("mokutil --test-key %s: %s" % (cert, (result[1] + result[2]).strip()))],
                manual_fix("Enroll the certificate (mokutil --import, confirmed in MokManager at the console, or "
                           "into db through the BMC); docs/secure-boot.md.", ["mokutil --import %s" % cert])))
    return findings


def check_enrollment_pending(rule, ctx):
    if not enrollment_pending(ctx.node):
        return []
    return [finding(rule, "A Machine Owner Key waits for confirmation in MokManager: until someone confirms it at "
                    "the console on the next boot, modules signed with it are refused.",
                    [{"kind": "file", "path": MOK_NEW, "line": None, "text": "shim's MokNew variable is set"}],
                    manual_fix("Reboot with console (or BMC virtual console) access and confirm the enrollment with "
                               "the one-time password, or enroll the certificate into db through the BMC.",
                               ["mokutil --list-new"]))]


def check_newest_kernel_unsigned(rule, ctx):
    kernels = installed_kernels(ctx.node)
    if not kernels or not secure_boot_on(ctx):
        return []
    unsigned = unsigned_modules(ctx, kernels[-1])
    if not unsigned:
        return []
    return [finding(rule, "The newest installed kernel %s has an unsigned NVIDIA module %s: with Secure Boot on, "
                    "the next reboot boots it and the node loses its GPU." % (kernels[-1], unsigned[0]),
                    [{"kind": "file", "path": "/boot/vmlinuz-" + kernels[-1], "line": None,
                      "text": "newest installed kernel"}] +
                    [{"kind": "file", "path": path, "line": None, "text": "no appended module signature"}
                     for path in unsigned],
                    manual_fix(SIGN_FIX + " Rebuild for that kernel after the key is configured.",
                               ["dkms autoinstall -k %s" % kernels[-1]]))]


def check_set_split(rule, ctx):
    loaded = (ctx.facts.get("driver") or {}).get("version")
    manager = node_services.package_manager(ctx.node.root)
    if not loaded or not manager or ctx.node.run is None:
        return []
    splits = [s for s in node_drift(ctx.node, loaded, manager)["splits"] if s["package"]]
    if not splits:
        return []
    message = "The next package upgrade would split the NVIDIA driver's version set: %s." % (
        "; ".join(s["text"] for s in splits))
    return [finding(rule, message,
                    [{"kind": "version", "name": s["package"], "version": s["version"], "source": "upgrade candidate"}
                     for s in splits] + [{"kind": "version", "name": "nvidia kernel module", "version": loaded,
                                          "source": "/proc/driver/nvidia/version"}],
                    manual_fix("Lock the set (role nvidia_driver, nvidia_driver_version_lock: true, the default); "
                               "upgrade the driver only through the role.", ["apt-mark showhold"]))]


RULES = (
    ("secure-boot-module-unsigned", "critical", None, "Secure Boot is on and the NVIDIA module is unsigned or its "
     "key is not enrolled", check_module_unsigned),
    ("secure-boot-enrollment-pending", "warning", None, "A Secure Boot key enrollment waits for the console",
     check_enrollment_pending),
    ("secure-boot-newest-kernel-unsigned", "critical", None, "The newest kernel's NVIDIA module is unsigned under "
     "Secure Boot", check_newest_kernel_unsigned),
    ("driver-set-split", "critical", None, "The next upgrade would split the driver's version set", check_set_split),
)
