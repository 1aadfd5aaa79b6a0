# -*- coding: utf-8 -*-
# Copyright: gpunode.nvidia contributors
# Apache License 2.0
"""Plan the NVIDIA container toolkit installation of one node.

From what the node holds (read through ``root``, like gpu_node_facts) and the
operator's request: the repository, one version pin for the toolkit's four
packages, and whether the installed version may be changed (install, keep,
change or refused). The plan is data, like the driver's (driver_plan.py): the
role nvidia_container_toolkit carries it out. Runs on managed nodes: standard
library only.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.gpunode.nvidia.plugins.module_utils.node.discovery import gather
from ansible_collections.gpunode.nvidia.plugins.module_utils.node.node_os import (
    PlanError, distribution, offline_files, read_os_release)
from ansible_collections.gpunode.nvidia.plugins.module_utils.common.package_versions import (
    install_command, version_key, version_matches)

TOOLKIT_PACKAGES = ("nvidia-container-toolkit", "nvidia-container-toolkit-base",
                    "libnvidia-container-tools", "libnvidia-container1")
# Install order for offline files: dependencies first.
TOOLKIT_INSTALL_ORDER = ("libnvidia-container1", "libnvidia-container-tools",
                         "nvidia-container-toolkit-base", "nvidia-container-toolkit")
TOOLKIT_REPO_BASE = "https://nvidia.github.io/libnvidia-container"


def toolkit_action(request, installed):
    """(action, reason): install, keep, change or refused."""
    wanted = request.get("version") or None
    present = dict((n, installed[n]) for n in TOOLKIT_PACKAGES if installed.get(n))
    if not present:
        return "install", "the container toolkit is not installed"
    versions = sorted(set(present.values()), key=version_key)
    if wanted is None:
        if len(present) < len(TOOLKIT_PACKAGES):
            return "install", "only %s of the four toolkit packages are installed" % ", ".join(sorted(present))
        if len(versions) > 1:
            return "keep", ("the toolkit packages are at different versions (%s): set nvidia_container_toolkit_version "
                            "to align them" % ", ".join("%s %s" % i for i in sorted(present.items())))
        return "keep", "toolkit %s is installed and no version is pinned" % versions[0]
    differ = dict((n, v) for n, v in present.items() if not version_matches(v, wanted))
    if not differ and len(present) == len(TOOLKIT_PACKAGES):
        return "keep", "toolkit %s is installed as pinned" % wanted
    if not differ:
        return "install", "completing the toolkit packages at %s" % wanted
    if request.get("allow_upgrade"):
        return "change", "moving %s to %s (upgrades allowed)" % (
            ", ".join("%s %s" % i for i in sorted(differ.items())), wanted)
    return "refused", ("toolkit %s is installed and %s is asked for; the packages were not changed. Set "
                       "nvidia_container_toolkit_allow_upgrade: true to move all four packages to %s" % (
                           ", ".join(sorted(set(differ.values()), key=version_key)), wanted, wanted))


def toolkit_repository(dist, request):
    if request.get("source") == "offline":
        return None
    base = (request.get("repo_base") or TOOLKIT_REPO_BASE).rstrip("/")
    channel = request.get("channel") or "stable"
    key = request.get("repo_key_url") or base + "/gpgkey"
    if dist["package_manager"] == "apt":
        return {"kind": "deb822", "name": "nvidia-container-toolkit", "types": ["deb"],
                "uris": [request.get("repo_url") or "%s/%s/deb/$(ARCH)" % (base, channel)],
                "suites": ["/"], "components": [], "signed_by": key}
    return {"kind": "yum", "name": "nvidia-container-toolkit", "description": "NVIDIA container toolkit",
            "baseurl": request.get("repo_url") or "%s/%s/rpm/$basearch" % (base, channel),
            "gpgkey": key, "gpgcheck": bool(request.get("gpgcheck", True)),
            "repo_gpgcheck": bool(request.get("repo_gpgcheck", True)), "enabled": True}


def apt_pin_file(version):
    """apt preferences that hold the four packages at one version (protects against `apt upgrade`)."""
    if not version:
        return None
    pin = version if "-" in version else version + "-*"
    return ("# Managed by gpunode.nvidia (nvidia_container_toolkit_version): the four container toolkit\n"
            "# packages move together; mismatched versions are a known breakage.\n"
            "Package: %s\nPin: version %s\nPin-Priority: 1001\n" % (" ".join(TOOLKIT_PACKAGES), pin))


def toolkit_specs(manager, version):
    if not version:
        return list(TOOLKIT_PACKAGES)
    if manager == "apt":
        return ["%s=%s" % (n, version if "-" in version else version + "-*") for n in TOOLKIT_PACKAGES]
    return ["%s-%s" % (n, version) for n in TOOLKIT_PACKAGES]


def plan_toolkit(node, request, env):
    dist = distribution(read_os_release(node), env["arch"])
    facts = gather(node.root, ("gpus", "toolkit"), run=node.run)
    installed = facts["toolkit"]["packages"]
    version = request.get("version") or None
    action, reason = toolkit_action(request, installed)
    source = request.get("source") or "nvidia"
    if source == "offline" and not request.get("offline_dir"):
        raise PlanError("source offline needs nvidia_container_toolkit_offline_dir: a directory on the node "
                        "holding the four packages")
    manager = dist["package_manager"]
    plan = {"action": action, "reason": reason, "distribution": dist, "package_manager": manager,
            "source": source, "version": version, "installed": installed, "gpus": facts["gpus"],
            "repository": toolkit_repository(dist, dict(request, source=source)),
            "packages": toolkit_specs(manager, version),
            "apt_pin": apt_pin_file(version) if manager == "apt" else None,
            "apt_pin_path": "/etc/apt/preferences.d/nvidia-container-toolkit" if manager == "apt" else None,
            "offline_files": [], "commands": []}
    if source == "offline" and action in ("install", "change"):
        wanted = version or installed.get("nvidia-container-toolkit")
        plan["offline_files"] = offline_files(node, request["offline_dir"], list(TOOLKIT_INSTALL_ORDER),
                                              wanted, manager)
    plan["commands"] = toolkit_commands(plan)
    return plan


def toolkit_commands(plan):
    manager, repo = plan["package_manager"], plan["repository"]
    commands = []
    if repo and repo["kind"] == "deb822":
        commands.append("write /etc/apt/sources.list.d/%s.sources (%s, Suites: /, Signed-By: key from %s)"
                        % (repo["name"], repo["uris"][0], repo["signed_by"]))
        commands.append("apt-get update (this source only)")
    elif repo:
        commands.append("write /etc/yum.repos.d/%s.repo (baseurl %s, gpgcheck=%d, repo_gpgcheck=%d, gpgkey %s)" % (
            repo["name"], repo["baseurl"], repo["gpgcheck"], repo["repo_gpgcheck"], repo["gpgkey"]))
    if plan["apt_pin"]:
        commands.append("write %s (Pin: version %s)" % (plan["apt_pin_path"], plan["version"]))
    if plan["action"] in ("install", "change"):
        targets = plan["offline_files"] or plan["packages"]
        commands.append(install_command(manager, targets, allow_change=plan["action"] == "change"))
    return commands
