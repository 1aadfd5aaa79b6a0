"""The security minimum table: per product and driver branch, the bulletins a version misses, and the driver
branches' lifecycle (which branches ended, on a given day)."""
from __future__ import absolute_import, division, print_function
__metaclass__ = type

import datetime

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


ON = "2026-11-29"  # the day this table was last updated; each test names its day, none reads the clock


def test_unknown_branch_has_no_invented_minimum():
    assert sm.minimum(sm.DRIVER, "550.54.15") is None and sm.shortfall(sm.DRIVER, "550.54.15") is None
    message = sm.unknown_branch("550.54.15", ON)
    assert "R550 is in neither the bulletins nor the branch lifecycle" in message, message
    assert "Move to a supported branch: R580 to 2028-06, R595 to 2027-03, R615 with no end of life announced, " \
           "R620 to 2029-09." in message, message
    assert sm.unknown_branch("535.261.03", ON) is None and sm.unknown_branch("620.70.06", ON) is None


@pytest.mark.parametrize("branch, kind, end", [
    ("535", sm.LONG_TERM, "2026-06"), ("570", sm.PRODUCTION, "2026-05"), ("580", sm.LONG_TERM, "2028-06"),
    ("590", sm.FEATURE, "2026-05"), ("595", sm.PRODUCTION, "2027-03"), ("610", sm.FEATURE, "2026-08"),
    ("615", sm.FEATURE, None), ("620", sm.LONG_TERM, "2029-09"),
])
def test_each_branch_has_its_kind_and_end_of_life(branch, kind, end):
    row = sm.lifecycle(branch)
    assert (row["kind"], row["end"]) == (kind, end), row


def test_r620_is_a_new_long_term_branch_without_bulletins():
    assert sm.lifecycle("620")["first_release"] == "620.70.06" and sm.lifecycle("620")["released"] == "2026-11-04"
    assert sm.minimum(sm.DRIVER, "620.70.06") is None and sm.shortfall(sm.DRIVER, "620.70.06") is None
    assert sm.ended_branch("620.70.06", ON) is None
    message = sm.unbulletined_branch("620.70.06", ON)
    assert "R620, a long-term branch (first release 620.70.06, 2026-11-04) supported to 2029-09" in message, message
    assert "misses none" in message and sm.unbulletined_branch("580.178.04", ON) is None


def test_every_bulletin_branch_has_a_lifecycle():
    assert set(row["branch"] for row in sm.MINIMUMS if row["product"] == sm.DRIVER) <= set(
        row["branch"] for row in sm.BRANCHES)


@pytest.mark.parametrize("version, on, ended", [
    ("535.309.01", "2026-06-30", False),   # supported through its end-of-life month
    ("535.309.01", "2026-07-01", True),
    ("535.261.03", ON, True),
    ("610.57.04", "2026-08-31", False),
    ("610.57.04", "2026-09-01", True),
    ("570.211.01", ON, True),              # absent from the newest bulletins: taken as ended
    ("590.48.01", ON, True),
    ("580.178.04", ON, False),
    ("580.178.04", "2028-07-01", True),
    ("595.91.07", "2027-03-31", False),
    ("595.91.07", "2027-04-01", True),
    ("615.71.09", "2040-01-01", False),    # no end of life announced
    ("620.70.06", ON, False),
    ("550.54.15", ON, False),              # not in the lifecycle: unknown, said by unknown_branch
])
def test_a_branch_has_ended_or_not_on_a_given_day(version, on, ended):
    assert bool(sm.ended_branch(version, on)) is ended


def test_an_ended_branch_names_the_supported_long_term_branches_never_a_minimum():
    message = sm.describe_ended("535.309.01", sm.ended_branch("535.309.01", ON))
    assert "R535 ended 2026-06: no security fixes; move to R580 or R620 (long-term: R580 to 2028-06, R620 to " \
           "2029-09; also supported: R595 to 2027-03, R615 with no end of life announced)" in message, message
    assert "minimum" not in message.replace("security minimum table", "") and "at or above" not in message
    inferred = sm.ended_advice(sm.ended_branch("570.211.01", ON))
    assert inferred.startswith("R570 ended by 2026-05 (no fix in bulletins 5821 and 5861): no security fixes"), inferred


def test_the_supported_branches_depend_on_the_day():
    assert [row["branch"] for row in sm.supported_branches(ON)] == ["580", "595", "615", "620"]
    # Before R620's first release, R580 is the one long-term branch to move to.
    assert "move to R580 (long-term: R580 to 2028-06; also supported: R595 to 2027-03, R610 to 2026-08, R615 " \
           "with no end of life announced)" in sm.ended_advice(sm.ended_branch("535.309.01", "2026-08-15"))
    # Once no long-term branch is left, every supported branch is named.
    assert "move to R615 (R615 with no end of life announced)" in sm.ended_advice(
        sm.ended_branch("620.70.06", "2029-10-01"))


def test_the_check_date_is_the_clock_never_before_the_table():
    assert sm.check_date(datetime.date(2020, 1, 1)) == sm.TABLE_DATE  # a node whose clock was never set
    assert sm.check_date(datetime.date(2027, 5, 1)) == "2027-05-01"


def rows_newer_than(table_date):
    """The dates the table records as past that are later than `table_date` (months count from their first day)."""
    return [date for date in sm.table_dates() if (date + "-01")[:10] > table_date]


def test_the_table_date_is_not_older_than_its_newest_row():
    assert rows_newer_than(sm.TABLE_DATE) == [], "set TABLE_DATE to the day of the update"
    assert rows_newer_than("2026-09-30") == ["2026-11-04"]  # the table's date before R620 was added
    assert all(len(date) in (7, 10) and date[:2] == "20" for date in sm.table_dates())


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
