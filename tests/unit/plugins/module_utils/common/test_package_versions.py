"""One branch_of for the install plans and the security minimum table: a driver version's branch is its first
component."""
from __future__ import absolute_import, division, print_function
__metaclass__ = type

import pytest

from ansible_collections.gpunode.nvidia.plugins.module_utils.common.package_versions import branch_of
from ansible_collections.gpunode.nvidia.plugins.module_utils.install import driver_drift
from ansible_collections.gpunode.nvidia.plugins.module_utils.install import security_minimums as sm


@pytest.mark.parametrize("version, branch", [
    ("580.95.05", "580"), ("580.95.05-0ubuntu0.24.04.2", "580"), ("3:550.54.15-1.el9", "550"),
    ("535.216.01-1~deb12u1", "535"), ("v580.95.05", "580"), ("1000.1", "1000"), ("580", "580"),
    ("1.17.8-1", None), ("v1.17.8", None), ("12.8", None), ("", None), (None, None),
])
def test_a_driver_versions_branch_is_its_first_component(version, branch):
    assert branch_of(version) == branch


def test_the_security_table_and_the_plans_read_the_same_branch():
    assert sm.branch_of is branch_of
    assert driver_drift.branch_of is branch_of
    for row in sm.MINIMUMS:
        if row["product"] == sm.DRIVER:
            assert branch_of(row["version"]) == row["branch"]
    assert sm.shortfall(sm.DRIVER, "1:535.216.01-1")["branch"] == "535"
    assert "Driver branch R550 is in neither" in sm.unknown_branch("550.54.15-1", sm.TABLE_DATE)
    assert sm.unknown_branch("1.17.8", sm.TABLE_DATE) is None  # a toolkit version names no driver branch
    assert sm.lifecycle(branch_of("1:580.95.05-1"))["branch"] == "580"
