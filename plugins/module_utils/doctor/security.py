# -*- coding: utf-8 -*-
# Copyright: gpunode.nvidia contributors
# Apache License 2.0
"""gpu_doctor rules over the security minimum table (security_minimums.py): a driver below the minimum of
its branch, and a toolkit below a bulletin's fixed version that the older toolkit-vulnerable rule does not
cover, each a finding naming the bulletins and the upgrade that fixes it.

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


def check_driver_minimum(rule, ctx):
    driver = ctx.facts.get("driver") or {}
    version = driver.get("version")
    gap = sm.shortfall(sm.DRIVER, version)
    if not gap:
        return []
    evidence = [{"kind": "version", "name": "nvidia kernel module", "version": version,
                 "source": "/proc/driver/nvidia/version"},
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
    ("driver-below-security-minimum", "warning", None,
     "Driver below the security minimum of its branch (NVIDIA security bulletins)", check_driver_minimum),
    ("toolkit-below-security-minimum", "warning", None,
     "Container toolkit below a security bulletin's fixed version", check_toolkit_minimum),
)
