"""gpu_doctor's security minimum rules: a driver below its branch's minimum, a toolkit below a bulletin's fix."""
import sys

import pytest
from unit_paths import UNIT_DIR

sys.path.insert(0, UNIT_DIR)

import gpu_health_trees as trees  # noqa: E402

from ansible_collections.gpunode.nvidia.plugins.module_utils.doctor import rules as doctor_rules  # noqa: E402

RULES = ("driver-below-security-minimum", "toolkit-below-security-minimum")


def security_findings(root):
    result = doctor_rules.diagnose(str(root), query_cri=False, run=lambda argv: (127, "", "not found"))
    return dict((item["rule"], item) for item in result["findings"] if item["rule"] in RULES + ("toolkit-vulnerable",))


def test_the_rules_are_in_the_catalogue():
    assert set(RULES) <= set(doctor_rules.RULES_BY_ID)


@pytest.mark.parametrize("driver, fires, bulletins", [
    ("570.172.08", True, "bulletins 5703, 5747"), ("535.261.03", True, "bulletins 5703, 5747, 5821"), ("580.159.03", True, "bulletin 5861"),
    ("570.211.01", False, None), ("580.178.04", False, None), ("550.54.15", False, None),
])
def test_driver_below_its_branch_minimum(tmp_path, driver, fires, bulletins):
    trees.gpu_node(trees.new(tmp_path), driver=driver, toolkit="1.19.1-1")
    found = security_findings(tmp_path)
    assert ("driver-below-security-minimum" in found) is fires, found
    if fires:
        item = found["driver-below-security-minimum"]
        assert bulletins in item["message"] and driver in item["message"], item["message"]
        assert item["fix"]["playbook"] == "gpunode.nvidia.upgrade"
        assert item["fix"]["vars"] == {"gpunode_upgrade_target": "minimum"}


@pytest.mark.parametrize("toolkit, rule", [
    ("1.18.0-1", "toolkit-below-security-minimum"), ("1.17.8-1", "toolkit-below-security-minimum"),
    ("1.17.7-1", "toolkit-vulnerable"), ("1.19.1-1", None),
])
def test_toolkit_rows(tmp_path, toolkit, rule):
    trees.gpu_node(trees.new(tmp_path), driver="570.211.01", toolkit=toolkit)
    found = security_findings(tmp_path)
    assert sorted(found) == ([rule] if rule else []), found
    if rule == "toolkit-below-security-minimum":
        assert "CVE-2026-24260" in found[rule]["message"] and "bulletin 5850" in found[rule]["message"]
