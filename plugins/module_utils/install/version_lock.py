# -*- coding: utf-8 -*-
# Copyright: gpunode.nvidia contributors
# Apache License 2.0
"""One locked version set for the NVIDIA driver: what is held, and how.

The kernel module, the user-space libraries (NVML, libcuda), fabric manager, NVLSM and IMEX
only work together at one version: an unattended upgrade that moves one of them alone leaves
NVML's "Driver/library version mismatch" or a fabric manager that refuses to start. The set is
every installed driver package (never the container toolkit, which has its own versions):

* Debian/Ubuntu: apt preferences pinning each package at its installed version, ``apt-mark
  hold``, and an ``Unattended-Upgrade::Package-Blacklist`` entry in a file of our own;
* EL/Amazon Linux: ``dnf versionlock`` (``yum versionlock`` on Amazon Linux 2) of each package
  at its installed version.

Only the driver role's install/upgrade path releases the set (before its package transaction)
and takes it again (after). The kernel hold is the guard's (``nvidia_node_guard check=kernel``).

Runs on managed nodes: standard library only.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

# Driver packages of every distribution and NVIDIA's repositories; the container toolkit's are not.
LOCKED_NAMES = re.compile(
    r"^(?!nvidia-container-|libnvidia-container)"
    r"(nvidia-[\w.+-]+|libnvidia-[\w.+-]+|libcuda1[\w.+-]*|libcudadebug1|firmware-nvidia-gsp[\w.+-]*|"
    r"xserver-xorg-video-nvidia[\w.+-]*|linux-(?:modules|objects|signatures)-nvidia-[\w.+-]+|kmod-nvidia-[\w.+-]+|"
    r"cuda-drivers[\w.+-]*|nvlsm|libnvsdm[\w.+-]*)$")
APT_PREFERENCES = "/etc/apt/preferences.d/gpunode-nvidia-lock"
APT_UNATTENDED = "/etc/apt/apt.conf.d/51gpunode-nvidia-lock"
HEADER = ("// Managed by gpunode.nvidia (nvidia_driver): the NVIDIA driver's locked version set. Only the role's\n"
          "// install/upgrade path releases it; remove it by running the role, not by hand.\n")


def locked_packages(installed):
    """{name: version} of the installed packages that belong to the driver's set."""
    return dict((name, version) for name, version in (installed or {}).items()
                if version and LOCKED_NAMES.match(name))


def apt_preferences(packages):
    """One stanza per package, at its installed version, above every other source (1001)."""
    lines = ["# Managed by gpunode.nvidia (nvidia_driver): the NVIDIA driver's locked version set."]
    for name in sorted(packages):
        lines += ["", "Package: %s" % name, "Pin: version %s" % packages[name], "Pin-Priority: 1001"]
    return "\n".join(lines) + "\n"


def unattended_blacklist(packages):
    """apt.conf entry: unattended-upgrades never touches these (each entry is a Python regex matched at the start)."""
    entries = "".join('    "%s$";\n' % re.escape(name) for name in sorted(packages))
    return HEADER + "Unattended-Upgrade::Package-Blacklist {\n" + entries + "};\n"


def dnf_lock_specs(packages):
    """`dnf versionlock add` arguments: NAME-VERSION (VERSION as rpm gives it, epoch included)."""
    return ["%s-%s" % (name, packages[name]) for name in sorted(packages)]


def versionlock_locked(list_text, names):
    """The names `dnf versionlock list` ("NAME-EPOCH:VERSION-RELEASE.*") or `yum versionlock list`
    ("EPOCH:NAME-VERSION-RELEASE.*") shows locked."""
    entries = [re.sub(r"^\d+:", "", line.strip()) for line in (list_text or "").splitlines()]
    return sorted(name for name in names
                  if any(re.match(re.escape(name) + r"-\d", entry) for entry in entries))


def lock_plan(manager, installed, run=None):
    """What holds the set: the files (apt), the package names to hold, and per package the versionlock commands
    that lock and release it (dnf, yum) and which names are locked now (`versionlock list` through RUN; none
    while the plugin is missing), so that check mode reports each lock it would add."""
    packages = locked_packages(installed)
    names = sorted(packages)
    plan = {"package_manager": manager, "packages": packages, "names": names,
            "preferences_path": None, "preferences": None, "unattended_path": None, "unattended": None,
            "versionlock": [], "versionlocked": []}
    if not names:
        return plan
    if manager == "apt":
        plan.update(preferences_path=APT_PREFERENCES, preferences=apt_preferences(packages),
                    unattended_path=APT_UNATTENDED, unattended=unattended_blacklist(packages))
    elif manager in ("dnf", "yum"):
        plan["versionlock"] = [{"name": name, "lock": [manager, "versionlock", "add", spec],
                                "release": [manager, "versionlock", "delete", name]}
                               for name, spec in zip(names, dnf_lock_specs(packages))]
        if run is not None:
            rc, out, _err = run([manager, "-q", "versionlock", "list"])
            plan["versionlocked"] = versionlock_locked(out, names) if rc == 0 else []
    return plan
