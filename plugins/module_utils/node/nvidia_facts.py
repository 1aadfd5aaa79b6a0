# -*- coding: utf-8 -*-
# Copyright: gpunode.nvidia contributors
# Apache License 2.0
"""The node's NVIDIA stack as gpu_node_facts reports it: GPUs, driver, container toolkit and glibc.

GPUs come from sysfs (no lspci), the driver from /proc and the package
database, the toolkit from its binaries, libraries and packages, and the
glibc check from the ELF data of each toolkit file (elf.py): incident I4 was
a toolkit built for a newer glibc than the node's. Everything is read through
``root`` (node_reader.py).

Runs on managed nodes: standard library only.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import re

from ansible_collections.gpunode.nvidia.plugins.module_utils.node.elf import HostLibraries, check_glibc
from ansible_collections.gpunode.nvidia.plugins.module_utils.node.node_reader import binary_version

NVIDIA_VENDOR = "0x10de"
TOOLKIT_DIRS = ("/usr/bin", "/usr/local/bin", "/usr/local/nvidia/toolkit")
TOOLKIT_NAMES = ("nvidia-container-runtime", "nvidia-container-runtime-hook", "nvidia-container-toolkit",
                 "nvidia-ctk", "nvidia-cdi-hook", "nvidia-container-cli",
                 "nvidia-container-runtime.cdi", "nvidia-container-runtime.legacy")
VERSIONED_TOOLS = ("nvidia-ctk", "nvidia-container-cli", "nvidia-container-runtime")
TOOLKIT_PACKAGE_OF = {"nvidia-ctk": "nvidia-container-toolkit-base",
                      "nvidia-container-runtime": "nvidia-container-toolkit-base",
                      "nvidia-container-runtime.cdi": "nvidia-container-toolkit-base",
                      "nvidia-container-runtime.legacy": "nvidia-container-toolkit-base",
                      "nvidia-cdi-hook": "nvidia-container-toolkit-base",
                      "nvidia-container-cli": "libnvidia-container-tools"}
TOOLKIT_PACKAGES = ("nvidia-container-toolkit", "nvidia-container-toolkit-base",
                    "libnvidia-container-tools", "libnvidia-container1")
DRIVER_PACKAGE_RE = re.compile(
    r"^(nvidia-driver|nvidia-kernel|nvidia-dkms|nvidia-open|nvidia-utils|nvidia-compute-utils|"
    r"libnvidia-compute|libnvidia-gl|nvidia-headless|nvidia-fabricmanager|cuda-drivers|kmod-nvidia|"
    r"nvidia-kmod|nvidia-tesla|xserver-xorg-video-nvidia|firmware-nvidia)")


# --- GPUs and driver --------------------------------------------------------------

def gpus(node):
    """NVIDIA display/3D PCI functions from sysfs: no lspci needed."""
    found = []
    base = "/sys/bus/pci/devices"
    for address in node.listdir(base):
        device = base + "/" + address
        if (node.read(device + "/vendor") or "").strip().lower() != NVIDIA_VENDOR:
            continue
        pci_class = (node.read(device + "/class") or "").strip().lower()
        if not pci_class.startswith("0x03"):
            continue  # the GPU's audio or USB functions share the vendor id
        driver_link = node.readlink(device + "/driver")
        found.append({
            "pci_address": address,
            "vendor_id": NVIDIA_VENDOR,
            "device_id": (node.read(device + "/device") or "").strip().lower() or None,
            "class": pci_class,
            "driver": os.path.basename(driver_link) if driver_link else None,
        })
    return found


def loaded_modules(node):
    text = node.read("/proc/modules") or ""
    return set(line.split(" ", 1)[0] for line in text.splitlines() if line)


def driver(node):
    version_text = node.read("/proc/driver/nvidia/version")
    modules = loaded_modules(node)
    version, flavour = parse_nvidia_version(version_text)
    if version is None:
        version = (node.read("/sys/module/nvidia/version") or "").strip() or None
    packages = node.packages()
    installed = dict((name, ver) for name, ver in packages["packages"].items()
                     if DRIVER_PACKAGE_RE.match(name))
    return {
        "loaded": version_text is not None or "nvidia" in modules,
        "version": version,
        "flavour": flavour,
        "module_loaded": "nvidia" in modules,
        "nouveau_loaded": "nouveau" in modules,
        "packages": installed,
        "package_db": packages["db"],
    }


def parse_nvidia_version(text):
    """('535.129.03', 'proprietary'|'open') from /proc/driver/nvidia/version."""
    if not text:
        return None, None
    first = text.splitlines()[0]
    match = re.search(r"Kernel Module(?: for \S+)?\s+(\d+\.\d+(?:\.\d+)?)", first)
    flavour = "open" if "Open Kernel Module" in first else "proprietary"
    return (match.group(1) if match else None), flavour


# --- toolkit and glibc --------------------------------------------------------------

def toolkit_files(node):
    """(binaries, libraries): node paths of NVIDIA container toolkit files."""
    binaries = []
    for directory in TOOLKIT_DIRS:
        if directory == "/usr/local/nvidia/toolkit":
            names = [n for n in node.listdir(directory) if n.startswith("nvidia-")]
        else:
            names = [n for n in TOOLKIT_NAMES if node.isfile(directory + "/" + n)]
        binaries.extend(directory + "/" + n for n in names if node.isfile(directory + "/" + n))
    libraries = []
    for directory in _library_search_dirs():
        libraries.extend(p for p in node.glob(directory, "libnvidia-container*.so*") if node.isfile(p))
    return binaries, libraries


def _library_search_dirs():
    return ("/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu", "/lib/aarch64-linux-gnu",
            "/usr/lib/aarch64-linux-gnu", "/usr/lib64", "/lib64", "/usr/lib", "/usr/local/nvidia/toolkit")


def glibc(node, files=None):
    """Host glibc and, per toolkit binary and library, the highest GLIBC_x.y it needs."""
    binaries, libraries = files or toolkit_files(node)
    host = HostLibraries(node.root)
    checks, seen = [], set()
    for path in binaries + libraries:
        real = node.local(path) if not node.live else os.path.realpath(path)
        if real in seen:
            continue  # libnvidia-container.so.1 and .so.1.17.8 are one file
        seen.add(real)
        checks.append(check_glibc(node.root, path, host))
    result = dict(host.glibc)
    result["checks"] = checks
    result["ok"] = all(c["ok"] is not False for c in checks)
    result["failures"] = [c["message"] for c in checks if c["ok"] is False]
    return result


def toolkit(node, glibc_facts=None):
    binaries, libraries = toolkit_files(node)
    if glibc_facts is None:
        glibc_facts = glibc(node, (binaries, libraries))
    by_path = dict((c["path"], c) for c in glibc_facts["checks"])
    packages = node.packages()["packages"]
    pkg_versions = dict((p, packages[p]) for p in TOOLKIT_PACKAGES if p in packages)
    entries = [_toolkit_binary(node, path, by_path.get(path), pkg_versions) for path in binaries]
    runtime_paths = [b["path"] for b in entries if b["name"] == "nvidia-container-runtime"]
    return {
        "installed": bool(entries),
        "runtime_path": runtime_paths[0] if runtime_paths else None,
        "binaries": entries,
        "libraries": libraries,
        "packages": pkg_versions,
        "version": pkg_versions.get("nvidia-container-toolkit") or _first_version(entries),
        "glibc_ok": all(b["glibc_ok"] is not False for b in entries)
        and all(c["ok"] is not False for p, c in by_path.items() if p in libraries),
    }


def _toolkit_binary(node, path, check, pkg_versions):
    name = os.path.basename(path)
    entry = {"name": name, "path": path, "elf": bool(check and check["elf"]),
             "requires_glibc": check["requires"] if check else None,
             "glibc_ok": check["ok"] if check else None, "version": None, "version_source": None}
    package = TOOLKIT_PACKAGE_OF.get(name, "nvidia-container-toolkit") if path.startswith("/usr/bin/") else None
    if package not in pkg_versions and package:
        package = "nvidia-container-toolkit"  # the packages are pinned to one version together
    if package and package in pkg_versions:
        entry.update(version=pkg_versions[package], version_source="package " + package)
    elif node.run and entry["elf"] and entry["glibc_ok"] and name in VERSIONED_TOOLS:
        entry.update(version=binary_version(node, path), version_source="--version")
    return entry


def _first_version(entries):
    for entry in entries:
        if entry["version"]:
            return entry["version"]
    return None
