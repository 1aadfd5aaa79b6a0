"""Every driver and toolkit version the documentation tells a user to pin is at or above the security minimum
and on a supported driver branch (plugins/module_utils/install/security_minimums.py), judged on the table's own
date, never the clock.

Read: every text file under docs/ and examples/, README.md, and each role's defaults and README. A pin is a
setting given a version: `name: value`, `name=value` or `"name": "value"` (YAML, JSON, command lines, the Packer
templates' strings), where the name is a driver, toolkit or fabric manager `..._version` or `..._branch`,
upgrade.yml's `gpunode_upgrade_driver` / `_toolkit` / `_fabricmanager`, or a module's `branch`; and the example
values in backticks of a variables table row that names such a setting.
"""
import os
import re

import pytest
from unit_paths import REPO

from ansible_collections.gpunode.nvidia.plugins.module_utils.install import security_minimums as sm

SETTING = (r"(?:\w*(?:driver|toolkit|fabricmanager)\w*_(?:version|branch)|gpunode_upgrade_(?:driver|toolkit|"
           r"fabricmanager)|branch)")
ASSIGNMENT = re.compile(r"(?<![\w-])(?P<name>%s)[\"']?\s*[:=]\s*[\"']?(?P<value>\d[\w.~+:-]*)" % SETTING)
TABLE_ROW = re.compile(r"^\|\s*`(?P<name>%s)`\s*\|(?P<rest>.*)$" % SETTING)
BACKTICKED_VERSION = re.compile(r"`(?P<value>\d+(?:\.\d+)+[\w.~+-]*)`")


def scanned_files():
    for top in ("docs", "examples"):
        for folder, _dirs, names in os.walk(os.path.join(REPO, top)):
            for name in sorted(names):
                yield os.path.join(folder, name)
    yield os.path.join(REPO, "README.md")
    roles = os.path.join(REPO, "roles")
    for role in sorted(os.listdir(roles)):
        yield os.path.join(roles, role, "README.md")
        for folder, _dirs, names in os.walk(os.path.join(roles, role, "defaults")):
            for name in sorted(names):
                yield os.path.join(folder, name)


def pins(text):
    """(line number, setting, value) of every pinned version in a text."""
    for number, line in enumerate(text.splitlines(), 1):
        for match in ASSIGNMENT.finditer(line):
            yield number, match.group("name"), match.group("value")
        row = TABLE_ROW.match(line)
        if row:
            for match in BACKTICKED_VERSION.finditer(row.group("rest")):
                yield number, row.group("name"), match.group("value")


def problem(name, value, on=sm.TABLE_DATE):
    """Why a pinned value is not fit to copy, or None."""
    if "toolkit" in name:
        gap = sm.shortfall(sm.TOOLKIT, value)
        return sm.describe(gap) if gap else None
    ended = sm.ended_branch(value, on)
    if ended:
        return sm.ended_advice(ended)
    branch = sm.branch_of(value)
    if not sm.lifecycle(branch):
        return "driver branch R%s is not in the table's lifecycle: pin a supported branch" % branch
    gap = sm.shortfall(sm.DRIVER, value) if "." in value else None
    return sm.describe(gap) if gap else None


def read_text(path):
    try:
        with open(path, encoding="utf-8") as handle:
            return handle.read()
    except (UnicodeDecodeError, FileNotFoundError):
        return None  # an image, or a role without a README


def test_every_pinned_version_is_at_or_above_the_minimum_on_a_supported_branch():
    found, bad = 0, []
    for path in scanned_files():
        for number, name, value in pins(read_text(path) or ""):
            found += 1
            why = problem(name, value)
            if why:
                bad.append("%s:%d: %s %s: %s" % (os.path.relpath(path, REPO), number, name, value, why))
    assert not bad, "\n".join(bad)
    assert found >= 10, "the scan found %d pins: the patterns no longer match the docs" % found


@pytest.mark.parametrize("text, expected", [
    ("  nvidia_container_toolkit_version: 1.17.8-1\n", [("nvidia_container_toolkit_version", "1.17.8-1")]),
    ('default = "nvidia_driver_branch=580 nvidia_container_toolkit_version=1.19.1-1"\n',
     [("nvidia_driver_branch", "580"), ("nvidia_container_toolkit_version", "1.19.1-1")]),
    ('      nvidia_driver_branch: "535"\n', [("nvidia_driver_branch", "535")]),
    ("    -e gpunode_upgrade_driver=535.309.01 -e gpunode_upgrade_max_unavailable=2\n",
     [("gpunode_upgrade_driver", "535.309.01")]),
    ('{"nvidia_container_toolkit_version": "1.18.0-1"}\n', [("nvidia_container_toolkit_version", "1.18.0-1")]),
    ("ansible gpu_nodes -m gpunode.nvidia.gpu_install_plan -a 'stage=driver branch=570'\n", [("branch", "570")]),
    ("| `nvidia_driver_version` | str | `''` | Exact version (`535.309.01`) |\n",
     [("nvidia_driver_version", "535.309.01")]),
    ("nvidia_driver_reboot_timeout: 1200\n", []),
    ("Debian 12 carries nvidia-smi 535.309.01 beside nvidia-open-kernel-dkms 535.261.03\n", []),
])
def test_what_counts_as_a_pin(text, expected):
    assert [(name, value) for _number, name, value in pins(text)] == expected


@pytest.mark.parametrize("name, value, why", [
    ("nvidia_container_toolkit_version", "1.17.8-1", "below 1.19.1"),
    ("nvidia_driver_branch", "535", "R535 ended 2026-06: no security fixes; move to R580 or R620"),
    ("gpunode_upgrade_driver", "535.309.01", "R535 ended 2026-06"),
    ("nvidia_driver_version", "580.159.03", "below 580.178.04"),
    ("nvidia_driver_branch", "550", "R550 is not in the table's lifecycle"),
    ("branch", "570", "R570 ended by 2026-05"),
])
def test_a_pin_below_the_minimum_or_on_an_ended_branch_is_refused(name, value, why):
    assert why in (problem(name, value) or ""), problem(name, value)


@pytest.mark.parametrize("name, value", [
    ("nvidia_container_toolkit_version", "1.19.1-1"), ("nvidia_driver_branch", "580"),
    ("nvidia_driver_version", "580.178.04"), ("gpunode_upgrade_driver", "620"), ("nvidia_driver_branch", "595"),
])
def test_a_supported_pin_passes(name, value):
    assert problem(name, value) is None
