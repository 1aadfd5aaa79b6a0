"""gpu_doctor's security minimum rules: a driver on an ended branch, a driver below its branch's minimum, a toolkit
below a bulletin's fix."""
from __future__ import absolute_import, division, print_function
__metaclass__ = type

import datetime
import sys

import pytest
from unit_paths import UNIT_DIR

sys.path.insert(0, UNIT_DIR)

import gpu_health_trees as trees  # noqa: E402

from ansible_collections.gpunode.nvidia.plugins.module_utils.doctor import rules as doctor_rules  # noqa: E402

RULES = ("driver-branch-ended", "driver-below-security-minimum", "toolkit-below-security-minimum")
ON = "2026-11-29"


def security_findings(root, on=ON):
    result = doctor_rules.diagnose(str(root), query_cri=False, run=lambda argv: (127, "", "not found"), on=on)
    return dict((item["rule"], item) for item in result["findings"] if item["rule"] in RULES + ("toolkit-vulnerable",))


def test_the_rules_are_in_the_catalogue():
    assert set(RULES) <= set(doctor_rules.RULES_BY_ID)


@pytest.mark.parametrize("driver, on, fires, bulletins", [
    ("570.172.08", "2026-04-30", True, "bulletins 5703, 5747"), ("535.261.03", "2026-06-30", True,
                                                                 "bulletins 5703, 5747, 5821"),
    ("580.159.03", ON, True, "bulletin 5861"), ("595.71.05", ON, True, "bulletin 5861"),
    ("570.211.01", "2026-04-30", False, None), ("580.178.04", ON, False, None), ("550.54.15", ON, False, None),
    ("620.70.06", ON, False, None),
])
def test_driver_below_its_branch_minimum(tmp_path, driver, on, fires, bulletins):
    trees.gpu_node(trees.new(tmp_path), driver=driver, toolkit="1.19.1-1")
    found = security_findings(tmp_path, on)
    assert ("driver-below-security-minimum" in found) is fires, found
    if fires:
        item = found["driver-below-security-minimum"]
        assert bulletins in item["message"] and driver in item["message"], item["message"]
        assert item["fix"]["playbook"] == "gpunode.nvidia.upgrade"
        assert item["fix"]["vars"] == {"gpunode_upgrade_target": "minimum"}


@pytest.mark.parametrize("driver, on", [
    ("535.309.01", ON), ("535.261.03", ON), ("610.57.04", ON), ("570.211.01", ON), ("580.178.04", "2028-07-01"),
])
def test_a_driver_on_an_ended_branch_is_a_finding_of_its_own(tmp_path, driver, on):
    trees.gpu_node(trees.new(tmp_path), driver=driver, toolkit="1.19.1-1")
    found = security_findings(tmp_path, on)
    assert sorted(found) == ["driver-branch-ended"], found  # never below (or at) a minimum of an ended branch
    item = found["driver-branch-ended"]
    assert item["severity"] == "warning" and driver in item["message"] and "no security fixes" in item["message"]
    assert "at or above" not in item["message"] and "minimum fixed version" not in item["message"]
    assert item["fix"]["playbook"] == "gpunode.nvidia.upgrade" and "gpunode_upgrade_driver" in item["fix"]["summary"]
    assert "gpunode_upgrade_target" not in item["fix"]["vars"]
    assert any("checked on %s" % on in e.get("text", "") for e in item["evidence"]), item["evidence"]


def test_r535_names_the_supported_branches(tmp_path):
    trees.gpu_node(trees.new(tmp_path), driver="535.309.01", toolkit="1.19.1-1")
    item = security_findings(tmp_path)["driver-branch-ended"]
    assert "R535 ended 2026-06: no security fixes; move to R580 or R620" in item["message"], item["message"]
    assert "(R580, R595, R615, R620)" in item["fix"]["summary"], item["fix"]
    # The same node before the end of life: the minimum of its branch, as before.
    assert sorted(security_findings(tmp_path, "2026-06-30")) == []


def test_without_a_day_the_node_clock_is_read_never_before_the_table(tmp_path, monkeypatch):
    trees.gpu_node(trees.new(tmp_path), driver="610.57.04", toolkit="1.19.1-1")

    class Clock(datetime.date):
        @classmethod
        def today(cls):
            return datetime.date(2020, 1, 1)
    monkeypatch.setattr(doctor_rules.security_minimums.datetime, "date", Clock)
    result = doctor_rules.diagnose(str(tmp_path), query_cri=False, run=lambda argv: (127, "", "not found"))
    assert "driver-branch-ended" in [item["rule"] for item in result["findings"]]


@pytest.mark.parametrize("toolkit, rule", [
    ("1.18.0-1", "toolkit-below-security-minimum"), ("1.17.8-1", "toolkit-below-security-minimum"),
    ("1.17.7-1", "toolkit-vulnerable"), ("1.19.1-1", None),
])
def test_toolkit_rows(tmp_path, toolkit, rule):
    trees.gpu_node(trees.new(tmp_path), driver="580.178.04", toolkit=toolkit)
    found = security_findings(tmp_path)
    assert sorted(found) == ([rule] if rule else []), found
    if rule == "toolkit-below-security-minimum":
        assert "CVE-2026-24260" in found[rule]["message"] and "bulletin 5850" in found[rule]["message"]
