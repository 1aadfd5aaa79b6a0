# -*- coding: utf-8 -*-
# Copyright: gpunode.nvidia contributors
# Apache License 2.0
"""Drift of the NVIDIA driver's version set, caught before it bites.

Compares the loaded kernel module (``/proc/driver/nvidia/version``), the user-space library
(NVML's package, or its ``libnvidia-ml.so.VERSION`` file), fabric manager, and what the package
manager would upgrade next (``apt-get -s dist-upgrade``, ``dnf check-update``), and names each
package that would leave the set at two versions. Used by the driver role's preflight (through
the driver plan) and by gpu_doctor (doctor/driver_integrity.py).

Runs on managed nodes: standard library only.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

from ansible_collections.gpunode.nvidia.plugins.module_utils.common.package_versions import branch_of, upstream
from ansible_collections.gpunode.nvidia.plugins.module_utils.install.version_lock import locked_packages

APT_SIMULATE = ["apt-get", "-s", "-q", "-o", "Debug::NoLocking=1", "dist-upgrade"]
DNF_SIMULATE = ["dnf", "-q", "check-update"]
APT_INST = re.compile(r"^Inst (\S+) \[([^\]]+)\] \((\S+)", re.MULTILINE)
LIBRARY_PACKAGES = re.compile(r"^(libnvidia-ml1|libnvidia-compute-\d+|nvidia-driver-cuda-libs|nvidia-driver-libs|"
                              r"libcuda1)$")
LIBRARY_FILE = re.compile(r"^libnvidia-ml\.so\.(\d{3}\.\d+(?:\.\d+)?)$")
FABRIC_PACKAGES = re.compile(r"^(nvidia-fabricmanager(-\d+)?|nvidia-fabric-manager|cuda-drivers-fabricmanager(-\d+)?)$")
LIBRARY_DIRS = ("/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/usr/lib64", "/usr/lib")


def simulate_command(manager):
    return APT_SIMULATE if manager == "apt" else [manager, "-q", "check-update"] if manager in ("dnf", "yum") else None


def apt_upgrades(simulate_text):
    """{name: new version} from `apt-get -s` ('Inst libnvidia-ml1 [535.261.03-1] (535.309.01-0+deb12u1 ...')."""
    return dict((name.split(":", 1)[0], new) for name, _old, new in APT_INST.findall(simulate_text or ""))


def dnf_upgrades(check_update_text):
    """{name: new version} from `dnf check-update` ('nvidia-driver-cuda.x86_64  3:580.82.07-1.el9  cuda')."""
    found = {}
    for line in (check_update_text or "").splitlines():
        parts = line.split()
        if len(parts) == 3 and "." in parts[0] and parts[1][:1].isdigit():
            found[parts[0].rsplit(".", 1)[0]] = parts[1]
    return found


def library_version(node, installed):
    """(version, source) of the user-space driver library, NVML's package first (what reports the mismatch)."""
    for name in sorted(installed, key=lambda n: ("nvidia-ml" not in n, n)):
        if LIBRARY_PACKAGES.match(name) and upstream(installed[name]):
            return upstream(installed[name]), "package %s" % name
    for directory in LIBRARY_DIRS:
        for name in node.listdir(directory):
            match = LIBRARY_FILE.match(name)
            if match:
                return match.group(1), directory + "/" + name
    return None, None


def fabricmanager_version(installed):
    for name in sorted(installed):
        if FABRIC_PACKAGES.match(name) and upstream(installed[name]):
            return upstream(installed[name]), "package %s" % name
    return None, None


def drift(loaded_version, library, fabricmanager, installed, upgrades):
    """{'set_version', 'components', 'splits'}: each split names the component or package and both versions."""
    components = [("loaded kernel module", loaded_version, "/proc/driver/nvidia/version"),
                  ("user-space library", library[0], library[1]),
                  ("fabric manager", fabricmanager[0], fabricmanager[1])]
    present = [c for c in components if c[1]]
    set_version = loaded_version or (present[0][1] if present else None)
    splits = []
    for name, version, source in present:
        if version != set_version:
            splits.append({"component": name, "package": None, "version": version, "set_version": set_version,
                           "text": "%s is %s (%s), not the set's %s" % (name, version, source, set_version)})
    splits += upgrade_splits(locked_packages(installed), upgrades, loaded_version)
    return {"set_version": set_version, "components": [{"name": c[0], "version": c[1], "source": c[2]}
                                                       for c in components], "splits": splits}


def upgrade_splits(driver_set, upgrades, loaded_version=None):
    """The upgrades that would leave the set's driver-versioned packages at two versions, or move them away from
    the loaded kernel module (NVML's "Driver/library version mismatch" until a reboot), by package."""
    versioned = dict((name, version) for name, version in driver_set.items() if branch_of(version))
    after = dict((name, upgrades.get(name, version)) for name, version in versioned.items())
    if len(set(upstream(v) for v in after.values())) < 2 and not (
            loaded_version and set(upstream(v) for v in after.values()) - set([loaded_version])):
        return []
    splits = []
    for name in sorted(n for n in versioned if n in upgrades):
        staying = sorted(n for n in versioned if upstream(after[n]) != upstream(upgrades[name]))
        if staying:
            rest = "%s stay%s at %s" % (_few(staying), "" if len(staying) > 1 else "s",
                                        ", ".join(sorted(set(upstream(after[n]) for n in staying))))
        else:
            rest = "the loaded kernel module stays at %s until a reboot" % loaded_version
        splits.append({"component": "upgrade", "package": name, "version": upgrades[name],
                       "set_version": upstream(versioned[name]),
                       "text": "the next upgrade would move %s from %s to %s while %s" % (
                           name, versioned[name], upgrades[name], rest)})
    return splits


def _few(names):
    return ", ".join(names[:3]) + (" and %d more" % (len(names) - 3) if len(names) > 3 else "")


def node_drift(node, loaded_version, manager):
    """Drift of this node; the simulation runs only where the node can run commands (not an image or a tree)."""
    installed = node.packages()["packages"]
    command = simulate_command(manager)
    upgrades = {}
    if node.run is not None and command:
        rc, out, _err = node.run(command)
        # dnf check-update exits 100 when upgrades exist.
        if rc in (0, 100):
            upgrades = apt_upgrades(out) if manager == "apt" else dnf_upgrades(out)
    return drift(loaded_version, library_version(node, installed), fabricmanager_version(installed), installed,
                 upgrades)
