# -*- coding: utf-8 -*-
# Copyright: gpunode.nvidia contributors
# Apache License 2.0
"""gpu_doctor rules over the security minimum table (security_minimums.py): a driver on a branch past its end
of life (no fixes at all: the supported branches to move to), a driver below the minimum of its (supported)
branch, and a toolkit below a bulletin's fixed version that the older toolkit-vulnerable rule does not cover,
each a finding naming the bulletins or branches and the upgrade that fixes it. A branch has ended or not on
the node's date (``ctx.on``).

Runs on managed nodes: standard library only.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.gpunode.nvidia.plugins.module_utils.install import security_minimums as sm
from ansible_collections.gpunode.nvidia.plugins.module_utils.doctor.context import finding, note
from ansible_collections.gpunode.nvidia.plugins.module_utils.install.guards import TOOLKIT_CVE_MINIMUM, older_than

UPGRADE_PLAYBOOK = "gpunode.nvidia.upgrade"


def upgrade_fix(summary):
    """Fix through the rolling upgrade, which moves exactly the nodes below the table's minimums."""
    return {"summary": summary, "playbook": UPGRADE_PLAYBOOK, "vars": {"gpunode_upgrade_target": "minimum"},
            "commands": []}


def driver_evidence(version):
    return {"kind": "version", "name": "nvidia kernel module", "version": version,
            "source": "/proc/driver/nvidia/version"}


def check_driver_branch_ended(rule, ctx):
    version = (ctx.facts.get("driver") or {}).get("version")
    ended = sm.ended_branch(version, ctx.on) if version else None
    if not ended:
        return []
    evidence = [driver_evidence(version),
                note("driver branch lifecycle of %s: R%s is a %s branch, end of life %s (%s); checked on %s" % (
                    sm.TABLE_DATE, ended["branch"], ended["kind"], ended["end"], ended["end_source"], ctx.on))]
    branches = [row["branch"] for row in ended["supported"]]
    return [finding(rule, sm.describe_ended(version, ended), evidence, {
        "summary": "Move the driver to a supported branch (%s), node by node with the cluster up, after checking "
                   "that it supports the node's GPUs and fabric manager: gpunode_upgrade_driver set to the branch "
                   "(docs/upgrade.md). gpunode_upgrade_target=minimum stays on the node's branch and cannot fix "
                   "this." % ", ".join("R%s" % branch for branch in branches),
        "playbook": UPGRADE_PLAYBOOK, "vars": {}, "commands": []})]


def check_driver_minimum(rule, ctx):
    driver = ctx.facts.get("driver") or {}
    version = driver.get("version")
    gap = sm.shortfall(sm.DRIVER, version)
    if not gap or sm.ended_branch(version, ctx.on):
        return []  # on an ended branch no version is a fix: driver-branch-ended says where to go
    evidence = [driver_evidence(version),
                note("security minimum table of %s: %s" % (sm.TABLE_DATE, ", ".join(
                    "bulletin %s (%s): %s" % (row["bulletin"], row["published"], row["version"]) for row in gap["rows"])))]
    return [finding(rule, sm.describe(gap), evidence,
                    upgrade_fix("Upgrade the driver to %s or newer on branch R%s, node by node with the cluster up "
                                "(docs/upgrade.md)." % (gap["minimum"], gap["branch"])))]


def check_toolkit_minimum(rule, ctx):
    version = (ctx.facts.get("toolkit") or {}).get("version")
    gap = sm.shortfall(sm.TOOLKIT, version)
    if not gap or older_than(version, TOOLKIT_CVE_MINIMUM):
        return []  # below 1.17.8 the toolkit-vulnerable rule reports it (critical)
    evidence = [{"kind": "version", "name": "nvidia-container-toolkit", "version": version, "source": "package"}]
    return [finding(rule, sm.describe(gap), evidence,
                    upgrade_fix("Upgrade the four toolkit packages together to %s or newer (a toolkit-only upgrade "
                                "takes the light path: no module unload, no reboot)." % gap["minimum"]))]


RULES = (
    ("driver-branch-ended", "warning", None,
     "Driver on a branch past its end of life (no security fixes)", check_driver_branch_ended),
    ("driver-below-security-minimum", "warning", None,
     "Driver below the security minimum of its branch (NVIDIA security bulletins)", check_driver_minimum),
    ("toolkit-below-security-minimum", "warning", None,
     "Container toolkit below a security bulletin's fixed version", check_toolkit_minimum),
)
