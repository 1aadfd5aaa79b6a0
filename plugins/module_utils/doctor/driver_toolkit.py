# -*- coding: utf-8 -*-
# Copyright: gpunode.nvidia contributors
# Apache License 2.0
"""gpu_doctor rules about the NVIDIA driver and container toolkit (incidents I4 and I6).

Toolkit binaries that need a newer glibc than the node's (I4); a GPU without
a loaded driver, nouveau holding the GPU, and a loaded kernel module whose
version differs from the user-space driver (I6). The checks are listed in
doctor_rules.CATALOGUE.

Runs on managed nodes: standard library only.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

from ansible_collections.gpunode.nvidia.plugins.module_utils.doctor.context import PLAYBOOK, finding, manual_fix, note


def check_glibc(rule, ctx):
    glibc = ctx.facts.get("glibc") or {}
    failing = [c for c in glibc.get("checks") or [] if c.get("ok") is False]
    if not failing:
        return []
    evidence = [{"kind": "version", "name": "glibc", "version": glibc.get("version"), "source": glibc.get("path")}]
    evidence += [ctx.file_evidence(c["path"], note=c.get("message") or c.get("summary")) for c in failing]
    return [finding(rule, "%d NVIDIA container toolkit file(s) need a newer glibc than the node's %s: %s" % (
        len(failing), glibc.get("version"), "; ".join(c.get("summary") or c["path"] for c in failing)), evidence,
        manual_fix("Install the toolkit build for this distribution (NVIDIA's repository for this OS release; "
                   "role nvidia_container_toolkit), not binaries from a newer OS or a toolkit image for another OS."))]


def check_gpu_without_driver(rule, ctx):
    gpus = ctx.facts.get("gpus") or []
    driver = ctx.facts.get("driver") or {}
    if not gpus or driver.get("loaded") or not ctx.booted:
        return []
    evidence = [{"kind": "file", "path": "/sys/bus/pci/devices/%s" % g["pci_address"],
                 "text": "NVIDIA %s, bound to %s" % (g.get("device_id"), g.get("driver") or "no driver")} for g in gpus]
    evidence.append(note("no nvidia module in /proc/modules and no /proc/driver/nvidia/version"))
    return [finding(rule, "%d NVIDIA GPU(s) but no NVIDIA driver loaded." % len(gpus), evidence, {
        "summary": "Install and load the driver (role nvidia_driver; it leaves a loaded driver alone).",
        "playbook": PLAYBOOK, "vars": {}, "commands": []})]


def check_nouveau(rule, ctx):
    driver = ctx.facts.get("driver") or {}
    bound = [g for g in ctx.facts.get("gpus") or [] if g.get("driver") == "nouveau"]
    if not driver.get("nouveau_loaded") and not bound:
        return []
    evidence = [{"kind": "file", "path": "/proc/modules", "text": "nouveau"}]
    evidence += [{"kind": "file", "path": "/sys/bus/pci/devices/%s/driver" % g["pci_address"], "text": "nouveau"}
                 for g in bound]
    return [finding(rule, "The open-source nouveau driver is loaded: the NVIDIA driver cannot bind the GPU.", evidence,
                    _nouveau_fix(ctx, driver))]


NOUVEAU_BLACKLIST = "/etc/modprobe.d/blacklist-nouveau.conf"


def _nouveau_fix(ctx, driver):
    """The driver stage blacklists nouveau only when it installs the driver: with the driver's packages
    already there (it keeps them) or the blacklist written, what is left is done by hand."""
    if not driver.get("packages") and not ctx.node.isfile(NOUVEAU_BLACKLIST):
        return {"summary": "Install the driver: the driver stage blacklists nouveau, installs the driver and reboots "
                           "(nvidia_driver_reboot).", "playbook": PLAYBOOK, "vars": {}, "commands": []}
    initramfs = ("update-initramfs -u -k all" if ctx.node.isfile("/usr/sbin/update-initramfs")
                 else "dracut -f --regenerate-all")
    commands = [] if ctx.node.isfile(NOUVEAU_BLACKLIST) else [
        "printf 'blacklist nouveau\\noptions nouveau modeset=0\\n' > %s" % NOUVEAU_BLACKLIST]
    return manual_fix("Blacklist nouveau, rebuild the initramfs and reboot: the NVIDIA driver is installed already, "
                      "so the driver stage keeps it and does not do this.", commands + [initramfs, "reboot"])


VERSION_IN = re.compile(r"(\d{3}\.\d+(?:\.\d+)?)")


def userspace_versions(ctx):
    """[(version, evidence)] of the driver's user-space parts: libnvidia-ml.so.X files and packages."""
    found = []
    for directory in ("/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/usr/lib64", "/usr/lib"):
        for path in ctx.node.glob(directory, "libnvidia-ml.so.*"):
            match = re.search(r"\.so\.(\d+\.\d+(?:\.\d+)?)$", path)
            if match:
                found.append((match.group(1), ctx.file_evidence(path)))
    driver = ctx.facts.get("driver") or {}
    for name, version in sorted((driver.get("packages") or {}).items()):
        match = VERSION_IN.search(version or "")
        if match:
            found.append((match.group(1), {"kind": "version", "name": name, "version": version,
                                           "source": "package"}))
    return found


def check_driver_mismatch(rule, ctx):
    driver = ctx.facts.get("driver") or {}
    loaded = driver.get("version")
    if not loaded:
        return []
    different = [(v, e) for v, e in userspace_versions(ctx) if v != loaded]
    if not different:
        return []
    evidence = [{"kind": "version", "name": "nvidia kernel module", "version": loaded,
                 "source": "/proc/driver/nvidia/version"}] + [e for _v, e in different]
    return [finding(rule, "The loaded NVIDIA kernel module is %s but the user-space driver is %s: nvidia-smi and "
                    "containers fail with 'Driver/library version mismatch'." % (
                        loaded, ", ".join(sorted(set(v for v, _e in different)))), evidence,
                    manual_fix("Reboot to load the kernel module that matches the installed user-space driver (or "
                               "reinstall the matching version); drain the node first.",
                               ["kubectl drain NODE --ignore-daemonsets", "reboot"]))]


# (id, severity, incident, title, check) of each rule, as in every rule module of this package: rules.py runs them.
RULES = (
    ("toolkit-glibc-too-old", "critical", "I4", "Toolkit binaries need a newer glibc than the node's", check_glibc),
    ("gpu-without-driver", "critical", "I6", "NVIDIA GPU present but no driver loaded", check_gpu_without_driver),
    ("nouveau-loaded", "critical", "I6", "nouveau is loaded", check_nouveau),
    ("driver-version-mismatch", "critical", "I6", "Kernel module and user-space driver versions differ",
     check_driver_mismatch),
)
