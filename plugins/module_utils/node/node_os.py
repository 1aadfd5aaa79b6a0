# -*- coding: utf-8 -*-
# Copyright: gpunode.nvidia contributors
# Apache License 2.0
"""The node's operating system as the driver and toolkit plans read it, through ``root``.

The distribution and its package manager (os-release), the installed and
running kernels and the NVIDIA kernel module files built for them, Secure
Boot and the Machine Owner Key DKMS signs with, apt's sources and candidate
versions, and package files in an offline directory. ``PlanError`` says why
a request cannot be planned on this node. Runs on managed nodes: standard
library only.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import gzip
import os
import re

try:  # some minimal Python builds lack _lzma; .ko.xz modules are then not read
    import lzma
except ImportError:
    lzma = None

from ansible_collections.gpunode.nvidia.plugins.module_utils.common.package_versions import (
    DEB_FILE_RE, RPM_FILE_RE, version_key, version_matches)

EFI_GLOBAL_GUID = "8be4df61-93ca-11d2-aa0d-00e098032b8c"
MOK_KEYS = ("/var/lib/dkms/mok.pub", "/var/lib/shim-signed/mok/MOK.der")
RHEL_IDS = ("rhel", "centos", "rocky", "almalinux", "ol")
MODULE_FILE_RE = re.compile(r"^nvidia(-current)?(-open)?\.ko(\.xz|\.zst|\.gz)?$")
# How much of a module is read for its .modinfo `version=`.
MODINFO_READ_LIMIT = 64 * 1024 * 1024


class PlanError(ValueError):
    """The request cannot be planned on this node; the message says what to do."""


def read_os_release(node):
    text = node.read("/etc/os-release") or node.read("/usr/lib/os-release") or ""
    fields = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep:
            fields[key.strip()] = value.strip().strip("\"'")
    return fields


def distribution(os_release, arch):
    """Family, setup path and package manager from os-release fields."""
    dist_id = os_release.get("ID", "").lower()
    version = os_release.get("VERSION_ID", "")
    major = version.split(".")[0]
    codename = os_release.get("VERSION_CODENAME") or os_release.get("UBUNTU_CODENAME") or ""
    like = os_release.get("ID_LIKE", "").lower().split()
    if dist_id == "ubuntu":
        family, setup, manager = "ubuntu", "Ubuntu", "apt"
    elif dist_id == "debian" or ("debian" in like and dist_id != "ubuntu"):
        family, setup, manager = "debian", "Debian", "apt"
    elif dist_id == "amzn" and major == "2":
        family, setup, manager = "amazon", "Amazon-2", "yum"
    elif dist_id == "amzn":
        family, setup, manager = "amazon", "RedHat", "dnf"
    elif dist_id in RHEL_IDS or "rhel" in like:
        family, setup, manager = "redhat", "RedHat", "dnf" if major != "7" else "yum"
    else:
        raise PlanError("unsupported distribution %r (os-release ID=%s VERSION_ID=%s): supported are Debian 12/13, "
                        "Ubuntu 20.04-24.04, RHEL-compatible 8/9/10, Amazon Linux 2 and 2023"
                        % (os_release.get("PRETTY_NAME", dist_id), dist_id, version))
    return {"id": dist_id, "version": version, "major": major, "codename": codename, "family": family,
            "setup": setup, "package_manager": manager, "arch": arch,
            "deb_arch": {"x86_64": "amd64", "aarch64": "arm64"}.get(arch, arch)}


def kernels(node, running):
    """Running kernel, installed kernels, and the one the machine boots next.

    A kernel counts as installed when its image is in /boot or in its module
    directory (RHEL, Amazon Linux). In a container or an image chroot the
    running kernel is the build host's: it is not installed, and no module is
    built for it.
    """
    installed = set()
    for name in node.listdir("/boot"):
        if name.startswith("vmlinuz-"):
            installed.add(name[len("vmlinuz-"):])
    for name in node.listdir("/lib/modules"):
        if node.isfile("/lib/modules/%s/vmlinuz" % name):
            installed.add(name)
    ordered = sorted(installed, key=version_key)
    boot = ordered[-1] if ordered else None
    targets = sorted(set([k for k in (running, boot) if k in installed]), key=version_key)
    return {"running": running, "installed": ordered, "boot": boot,
            "running_installed": running in installed, "dkms_targets": targets}


def module_files(node, kernel_list):
    """nvidia.ko files (any compression, DKMS, kmod or .run install) for these kernels."""
    found = []
    for kernel in kernel_list:
        base = "/lib/modules/%s" % kernel
        local = node.local(base)
        for directory, _dirs, files in os.walk(local):
            for name in files:
                if MODULE_FILE_RE.match(name):
                    found.append(base + directory[len(local):] + "/" + name)
    return sorted(found)


def read_module(local_path, head=None, tail=None):
    """A kernel module file's bytes, decompressed (.xz, .gz; any other name is read as it is), or None when it
    cannot be read (missing, unreadable, corrupt, .xz without lzma): never a failed plan or rule. HEAD: at most
    that many bytes from the start. TAIL: of an uncompressed file, only its last TAIL bytes (the signature is at
    the end; a compressed stream is read from its start)."""
    if local_path.endswith(".xz") and lzma is None:
        return None
    opener = lzma.open if local_path.endswith(".xz") else gzip.open if local_path.endswith(".gz") else open
    try:
        with opener(local_path, "rb") as handle:
            if tail and opener is open:
                handle.seek(0, 2)
                handle.seek(max(0, handle.tell() - tail))
            return handle.read(head or -1)
    except Exception:  # unreadable or corrupt (compressed) module: unknown
        return None


def module_version(local_path):
    """The `version=` of a kernel module's .modinfo (plain, .xz or .gz), as modinfo shows it."""
    data = read_module(local_path, head=MODINFO_READ_LIMIT)
    match = re.search(br"(?:^|\0)version=(\d+\.\d+(?:\.\d+)?)\0", data or b"")
    return match.group(1).decode("ascii") if match else None


def secure_boot(node, run=None):
    """{'enabled': True/False/None, 'source': how it was read}. Read from efivars through root;
    on the live node mokutil answers when efivars cannot be read."""
    if not node.isdir("/sys/firmware/efi"):
        return {"enabled": False, "source": "no EFI firmware (legacy BIOS boot)"}
    state = _efi_variable(node, "SecureBoot")
    if state is not None:
        setup_mode = _efi_variable(node, "SetupMode")
        return {"enabled": state == 1 and setup_mode != 1,
                "source": "efivars SecureBoot-%s=%d SetupMode=%s" % (EFI_GLOBAL_GUID, state, setup_mode)}
    if run is not None:
        rc, out, err = run(["mokutil", "--sb-state"])
        text = (out or "") + (err or "")
        if "SecureBoot enabled" in text:
            return {"enabled": True, "source": "mokutil --sb-state"}
        if "SecureBoot disabled" in text:
            return {"enabled": False, "source": "mokutil --sb-state"}
    return {"enabled": None, "source": "unknown: efivars not readable and mokutil gave no answer"}


def _efi_variable(node, name):
    """The value byte of an EFI global variable (after its 4 attribute bytes), or None."""
    try:
        with open(node.local("/sys/firmware/efi/efivars/%s-%s" % (name, EFI_GLOBAL_GUID)), "rb") as handle:
            data = handle.read(16)
    except (IOError, OSError):
        return None
    return bytearray(data)[4] if len(data) >= 5 else None


def mok_key(node, run=None, enrolled=None):
    """The Machine Owner Key DKMS signs modules with, and whether it is enrolled."""
    for path in MOK_KEYS:
        if node.isfile(path):
            if enrolled is None and run is not None:
                rc, out, err = run(["mokutil", "--test-key", path])
                enrolled = "already enrolled" in (out or "") + (err or "")
            return {"path": path, "enrolled": bool(enrolled)}
    return {"path": None, "enrolled": False}


def apt_components(node, suite):
    """Components that enabled apt sources (one-line or deb822) already carry for suite."""
    found = set()
    for path in ["/etc/apt/sources.list"] + node.glob("/etc/apt/sources.list.d", "*.list"):
        for line in (node.read(path) or "").splitlines():
            words = re.sub(r"\[[^]]*\]", "", line.split("#", 1)[0]).split()
            if len(words) >= 4 and words[0] == "deb" and words[2] == suite:
                found.update(words[3:])
    for path in node.glob("/etc/apt/sources.list.d", "*.sources"):
        for stanza in (node.read(path) or "").split("\n\n"):
            fields = dict((k.strip().lower(), v.split()) for k, _s, v in
                          (line.partition(":") for line in stanza.splitlines() if not line.startswith("#")))
            if (suite in fields.get("suites", []) and "deb" in fields.get("types", [])
                    and fields.get("enabled", ["yes"])[0] != "no"):
                found.update(fields.get("components", []))
    return found


def apt_candidates(run, package):
    """Versions of package that apt can install (apt-cache madison), highest first."""
    rc, out, _err = run(["apt-cache", "madison", package])
    if rc != 0:
        return []
    versions = set(line.split("|")[1].strip() for line in (out or "").splitlines() if line.count("|") >= 2)
    return sorted(versions, key=version_key, reverse=True)


def offline_files(node, directory, names, version_glob, manager):
    """{package: node path} of the package files to install from an offline directory.

    Per package, the file whose version matches version_glob ('535.*', '1.17.8-1'),
    the highest such version. Missing packages are an error naming the directory.
    """
    pattern = DEB_FILE_RE if manager == "apt" else RPM_FILE_RE
    candidates = {}
    for name in node.listdir(directory):
        match = pattern.match(name)
        if not match:
            continue
        package, version = match.group(1), match.group(2)
        if manager != "apt":
            version = "%s-%s" % (match.group(2), match.group(3))
        if package in names and version_matches(version, version_glob):
            candidates.setdefault(package, []).append((version_key(version), directory.rstrip("/") + "/" + name))
    missing = [n for n in names if n not in candidates]
    if missing:
        raise PlanError("offline directory %s has no package file for %s%s (files are named like %s); copy them "
                        "there or change the version pin" % (
                            directory, ", ".join(missing),
                            " at version %s" % version_glob if version_glob else "",
                            "NAME_VERSION_ARCH.deb" if manager == "apt" else "NAME-VERSION-RELEASE.ARCH.rpm"))
    return [max(candidates[n])[1] for n in names]
