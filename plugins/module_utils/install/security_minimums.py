# -*- coding: utf-8 -*-
# Copyright: gpunode.nvidia contributors
# Apache License 2.0
"""Minimum fixed versions from NVIDIA's security bulletins and the driver branches' lifecycle: one dated table.

Every guard reads this table: the toolkit role's version guard, the driver role's security-minimum check,
gpu_doctor's ``driver-below-security-minimum`` / ``toolkit-below-security-minimum`` rules and
``gpunode.nvidia.upgrade`` (``target: minimum``).

Updating it (docs/upgrade.md#security-minimums): append one row per product and branch a new bulletin names,
with the bulletin number, its date and its CVEs; bring ``_BRANCHES`` in line with NVIDIA's lifecycle page (a
new branch, its kind, first release and end of life; a branch the bulletins stopped naming); set ``TABLE_DATE``
to the day of the update (never older than a date in the table: a unit test holds it). Bulletin rows are never
edited or removed: the minimum of a branch is the highest fixed version of all its rows, and the messages name
every bulletin a node misses.

A branch past its end of life gets no fixes: no version of it meets a security minimum any more, whatever its
rows say, and every check names the supported branches instead. Whether a branch has ended depends on the day
of the check: the functions take it (``on``, 'YYYY-MM-DD'); ``check_date`` gives it from the clock of the
machine that checks, never earlier than ``TABLE_DATE`` (a node whose clock was never set still knows that
much).

Where the numbers come from: NVIDIA's bulletins (https://nvidia.custhelp.com/app/answers/detail/a_id/<N>)
and their machine-readable copies (github.com/NVIDIA/product-security). The driver rows give the Linux
data center (Tesla) driver fixed in each branch as the bulletins list them; they were transcribed, not
fetched by a program, so check a row against its bulletin before relying on it. A bulletin that names no
version for a branch has no row for it (R590 appears only in bulletin 5747; R535 and R570 are absent from
5861 and R570 from 5821). A branch with no row at all (R550, R560, ...) has no known minimum: the guards
say so instead of guessing.

``enforce``: ``refuse`` rows stop an install below them; ``warn`` rows are reported (the toolkit's
CVE-2026-24260 row warns until the refusal is switched on for it in a later release; driver rows are
enforced where the operator asks for it, nvidia_driver_security_minimum: refuse; the same switch governs a
driver on an ended branch).

Standard library only (runs on managed nodes).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import datetime
import re

from ansible_collections.gpunode.nvidia.plugins.module_utils.common.package_versions import branch_of

TABLE_DATE = "2026-11-29"
TOOLKIT = "nvidia-container-toolkit"
DRIVER = "nvidia-driver"

# (product, branch or None, fixed version, bulletin, published, CVEs, enforce)
_ROWS = (
    (TOOLKIT, None, "1.17.8", "5659", "2025-07", ("CVE-2025-23266", "CVE-2025-23267"), "refuse"),
    (TOOLKIT, None, "1.19.1", "5850", "2026-06", ("CVE-2026-24260",), "warn"),
    (DRIVER, "535", "535.261.03", "5670", "2025-07", (), "warn"),
    (DRIVER, "570", "570.172.08", "5670", "2025-07", (), "warn"),
    (DRIVER, "535", "535.274.02", "5703", "2025-10", (), "warn"),
    (DRIVER, "570", "570.195.03", "5703", "2025-10", (), "warn"),
    (DRIVER, "580", "580.95.05", "5703", "2025-10", (), "warn"),
    (DRIVER, "535", "535.288.01", "5747", "2026-01", (), "warn"),
    (DRIVER, "570", "570.211.01", "5747", "2026-01", (), "warn"),
    (DRIVER, "580", "580.126.09", "5747", "2026-01", (), "warn"),
    (DRIVER, "590", "590.48.01", "5747", "2026-01", (), "warn"),
    (DRIVER, "535", "535.309.01", "5821", "2026-05", (), "warn"),
    (DRIVER, "580", "580.159.03", "5821", "2026-05", (), "warn"),
    (DRIVER, "595", "595.71.05", "5821", "2026-05", (), "warn"),
    (DRIVER, "580", "580.178.04", "5861", "2026-09", ("CVE-2026-47501",), "warn"),
    (DRIVER, "595", "595.91.07", "5861", "2026-09", ("CVE-2026-47501",), "warn"),
    (DRIVER, "610", "610.57.04", "5861", "2026-09", ("CVE-2026-47501",), "warn"),
    (DRIVER, "615", "615.71.09", "5861", "2026-09", ("CVE-2026-47501",), "warn"),
)
MINIMUMS = tuple(dict(zip(("product", "branch", "version", "bulletin", "published", "cves", "enforce"), row))
                 for row in _ROWS)
BULLETIN_URL = "https://nvidia.custhelp.com/app/answers/detail/a_id/%s"

LONG_TERM, PRODUCTION, FEATURE = "long-term", "production", "feature"
LIFECYCLE_URL = "https://docs.nvidia.com/datacenter/tesla/drivers/"
# The data center driver branches from NVIDIA's lifecycle page: a branch is supported through its end-of-life
# month. R570 and R590 are not on the page as transcribed here; the bulletins since 5821 (2026-05) name neither,
# so they are taken as ended then. R615's end of life is not announced yet.
# (branch, kind, first release, its date, end of life, where the end of life comes from)
_BRANCH_ROWS = (
    ("535", LONG_TERM, None, None, "2026-06", "lifecycle"),
    ("570", PRODUCTION, None, None, "2026-05", "no fix in bulletins 5821 and 5861"),
    ("580", LONG_TERM, None, None, "2028-06", "lifecycle"),
    ("590", FEATURE, None, None, "2026-05", "no fix in bulletins 5821 and 5861"),
    ("595", PRODUCTION, None, None, "2027-03", "lifecycle"),
    ("610", FEATURE, None, None, "2026-08", "lifecycle"),
    ("615", FEATURE, None, None, None, "not announced"),
    ("620", LONG_TERM, "620.70.06", "2026-11-04", "2029-09", "lifecycle"),
)
BRANCHES = tuple(dict(zip(("branch", "kind", "first_release", "released", "end", "end_source"), row))
                 for row in _BRANCH_ROWS)


def version_key(text):
    """[535, 261, 3] from '535.261.03-1', '1:535.261.03-1ubuntu1' or 'v1.17.8'."""
    upstream = (text or "").split(":")[-1].split("-")[0].split("~")[0].lstrip("v")
    return [int(part) for part in re.findall(r"\d+", upstream)]


def is_below(version, minimum):
    """Whether an installed or wanted version is older than a fixed version (a pre-release counts as older)."""
    key, floor = version_key(version), version_key(minimum)
    if not key:
        return False
    prerelease = (version or "").split(":")[-1].partition("~")[2]
    if key[:len(floor)] == floor and prerelease:
        return not prerelease.startswith("ds")
    return key < floor


def rows_for(product, version):
    """The table's rows that apply to this product (and to the version's driver branch)."""
    branch = branch_of(version) if product == DRIVER else None
    return [row for row in MINIMUMS if row["product"] == product and row["branch"] == branch]


def minimum(product, version=None):
    """The highest fixed version of the product (driver: of the version's branch), or None when unknown."""
    rows = rows_for(product, version)
    return max((row["version"] for row in rows), key=version_key) if rows else None


def shortfall(product, version):
    """{minimum, branch, bulletins, cves, enforce, rows} of the rows a version is below; None when it is not.

    enforce is 'refuse' when any missed row refuses, else 'warn'."""
    if not version:
        return None
    missed = [row for row in rows_for(product, version) if is_below(version, row["version"])]
    if not missed:
        return None
    return {
        "product": product,
        "version": version,
        "branch": branch_of(version) if product == DRIVER else None,
        "minimum": max((row["version"] for row in missed), key=version_key),
        "bulletins": sorted(set(row["bulletin"] for row in missed), key=int),
        "cves": sorted(set(cve for row in missed for cve in row["cves"])),
        "enforce": "refuse" if any(row["enforce"] == "refuse" for row in missed) else "warn",
        "rows": missed,
    }


def describe(gap):
    """One sentence naming the version, the minimum and every bulletin it misses."""
    what = "driver %s (branch R%s)" % (gap["version"], gap["branch"]) if gap["product"] == DRIVER else (
        "container toolkit %s" % gap["version"])
    cves = " (%s)" % ", ".join(gap["cves"]) if gap["cves"] else ""
    return ("NVIDIA %s is below %s, the minimum fixed version of NVIDIA security bulletin%s %s%s (table of %s; "
            "%s)." % (what, gap["minimum"], "s" if len(gap["bulletins"]) > 1 else "", ", ".join(gap["bulletins"]),
                      cves, TABLE_DATE, BULLETIN_URL % gap["bulletins"][-1]))


def check_date(clock=None):
    """The day a check runs, 'YYYY-MM-DD': the machine's clock (or `clock`, a date), never before TABLE_DATE."""
    return max((clock or datetime.date.today()).isoformat(), TABLE_DATE)


def table_dates():
    """Every date the table records as past (bulletins published, first releases, ends the bulletins showed)."""
    dates = [row["published"] for row in MINIMUMS]
    dates += [row["released"] for row in BRANCHES if row["released"]]
    dates += [row["end"] for row in BRANCHES if row["end"] and row["end_source"] != "lifecycle"]
    return dates


def lifecycle(branch):
    """The branch's row of BRANCHES, or None."""
    return next((row for row in BRANCHES if row["branch"] == str(branch)), None)


def has_ended(row, on):
    return bool(row["end"]) and on[:7] > row["end"]


def supported_branches(on):
    """The branches released and not ended on that day, oldest first."""
    return [row for row in BRANCHES if not has_ended(row, on) and (row["released"] or "") <= on]


def ended_branch(version, on):
    """{branch, kind, end, end_source, supported} when the driver version's branch ended before `on`, else None."""
    row = lifecycle(branch_of(version))
    if not row or not has_ended(row, on):
        return None
    return dict(row, supported=supported_branches(on))


def _either(names):
    return " or ".join(names) if len(names) < 3 else "%s or %s" % (", ".join(names[:-1]), names[-1])


def _span(row):
    """'R580 to 2028-06', or 'R615 with no end of life announced'."""
    return "R%s %s" % (row["branch"], "to %s" % row["end"] if row["end"] else "with no end of life announced")


def ended_advice(ended):
    """'R535 ended 2026-06: no security fixes; move to R580 or R620 (...)': the long-term branches first."""
    supported = ended["supported"]
    long_term = [row for row in supported if row["kind"] == LONG_TERM]
    named = long_term or supported
    others = [row for row in supported if row not in named]
    when = ended["end"] if ended["end_source"] == "lifecycle" else "by %s (%s)" % (ended["end"], ended["end_source"])
    advice = "R%s ended %s: no security fixes; move to %s" % (
        ended["branch"], when, _either(["R%s" % row["branch"] for row in named]) or "a supported branch")
    if named:
        advice += " (%s%s%s)" % ("long-term: " if long_term else "", ", ".join(_span(row) for row in named),
                                 "; also supported: %s" % ", ".join(_span(row) for row in others) if others else "")
    return advice


def describe_ended(version, ended):
    """Two sentences: the version, its ended branch and the supported branches, never a minimum it meets."""
    return ("NVIDIA driver %s is on branch R%s. %s. Every vulnerability found from now on stays open on it "
            "(driver branch lifecycle in the security minimum table of %s; %s)."
            % (version, ended["branch"], ended_advice(ended), TABLE_DATE, LIFECYCLE_URL))


def unknown_branch(version, on):
    """A sentence when the driver's branch is in neither the bulletins' rows nor the lifecycle, else None."""
    branch = branch_of(version)
    if not branch or rows_for(DRIVER, version) or lifecycle(branch):
        return None
    return ("Driver branch R%s is in neither the bulletins nor the branch lifecycle of the security minimum table "
            "of %s: its minimum is unknown, most often because the branch ended before the table began. Move to "
            "a supported branch: %s." % (branch, TABLE_DATE, ", ".join(_span(row) for row in supported_branches(on))))


def unbulletined_branch(version, on):
    """A sentence for a supported branch no bulletin names yet (its minimum is unknown, none is missed), else None."""
    row = lifecycle(branch_of(version))
    if not row or rows_for(DRIVER, version) or has_ended(row, on):
        return None
    released = " (first release %s, %s)" % (row["first_release"], row["released"]) if row["first_release"] else ""
    return ("NVIDIA driver %s is on branch R%s, a %s branch%s supported %s; no bulletin in the security minimum "
            "table of %s names it yet, so it misses none." % (
                version, row["branch"], row["kind"], released,
                "to %s" % row["end"] if row["end"] else "(end of life not announced)", TABLE_DATE))
