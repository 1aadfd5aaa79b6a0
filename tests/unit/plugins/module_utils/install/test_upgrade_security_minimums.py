"""The security minimum table: per product and driver branch, the bulletins a version misses."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ansible_collections.gpunode.nvidia.plugins.module_utils.install import guards
from ansible_collections.gpunode.nvidia.plugins.module_utils.install import security_minimums as sm


@pytest.mark.parametrize("version, minimum, bulletins", [
    ("535.261.03", "535.309.01", ["5703", "5747", "5821"]),
    ("535.288.01-1", "535.309.01", ["5821"]),
    ("570.172.08", "570.211.01", ["5703", "5747"]),
    ("580.126.09", "580.178.04", ["5821", "5861"]),
    ("595.71.05", "595.91.07", ["5861"]),
    ("610.50.01", "610.57.04", ["5861"]),
    ("615.71.09~rc1", "615.71.09", ["5861"]),
])
def test_driver_below_its_branch_minimum(version, minimum, bulletins):
    gap = sm.shortfall(sm.DRIVER, version)
    assert gap["minimum"] == minimum and gap["bulletins"] == bulletins, gap
    assert "bulletin" in sm.describe(gap) and minimum in sm.describe(gap)


@pytest.mark.parametrize("version", ["535.309.01", "580.178.04-1", "1:615.80.01-1", "595.91.07"])
def test_driver_at_or_above_its_branch_minimum(version):
    assert sm.shortfall(sm.DRIVER, version) is None


def test_unknown_branch_has_no_invented_minimum():
    assert sm.minimum(sm.DRIVER, "550.54.15") is None and sm.shortfall(sm.DRIVER, "550.54.15") is None
    assert "R550 has no row" in sm.unknown_branch("550.54.15")
    assert sm.unknown_branch("535.261.03") is None


def test_toolkit_rows():
    assert sm.minimum(sm.TOOLKIT) == "1.19.1"
    refused = sm.shortfall(sm.TOOLKIT, "1.17.7-1")
    assert refused["enforce"] == "refuse" and "CVE-2025-23266" in refused["cves"] and "CVE-2026-24260" in refused["cves"]
    warned = sm.shortfall(sm.TOOLKIT, "1.18.0-1")
    assert warned["enforce"] == "warn" and warned["bulletins"] == ["5850"] and warned["minimum"] == "1.19.1"
    assert sm.shortfall(sm.TOOLKIT, "1.19.1-1") is None


def test_the_toolkit_guard_reads_the_table():
    assert guards.TOOLKIT_CVE_MINIMUM == "1.17.8" and guards.TOOLKIT_CVE == "CVE-2025-23266"
    kept = guards.toolkit_guard("install", "1.18.0-1", None, None)
    assert kept["ok"] and "CVE-2026-24260" in kept["reason"] and "1.19.1-1 or newer" in kept["reason"]
    assert guards.toolkit_guard("install", "1.19.1-1", None, None)["reason"] is None


def test_rows_are_dated_and_sourced():
    for row in sm.MINIMUMS:
        assert row["bulletin"].isdigit() and row["published"][:2] == "20" and row["enforce"] in ("refuse", "warn")
        assert row["product"] == sm.TOOLKIT or sm.branch_of(row["version"]) == row["branch"]


versions = st.lists(st.integers(0, 999), min_size=1, max_size=4).map(lambda parts: ".".join(map(str, parts)))


@given(versions, versions)
def test_is_below_is_a_strict_order(one, other):
    assert not (sm.is_below(one, other) and sm.is_below(other, one))
    assert not sm.is_below(one, one)
    if sm.version_key(one) < sm.version_key(other):
        assert sm.is_below(one, other)
