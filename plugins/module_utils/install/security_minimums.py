# -*- coding: utf-8 -*-
# Copyright: gpunode.nvidia contributors
# Apache License 2.0
"""Minimum fixed versions from NVIDIA's security bulletins: one dated table, per product and driver branch.

Every guard reads this table: the toolkit role's version guard, the driver role's security-minimum check,
gpu_doctor's ``driver-below-security-minimum`` / ``toolkit-below-security-minimum`` rules and
``gpunode.nvidia.upgrade`` (``target: minimum``).

Updating it is one step (docs/upgrade.md#security-minimums): append one row per product and branch a new
bulletin names, with the bulletin number, its date and its CVEs, and set ``TABLE_DATE``. Rows are never
edited or removed: the minimum of a branch is the highest fixed version of all its rows, and the messages
name every bulletin a node misses.

Where the numbers come from: NVIDIA's bulletins (https://nvidia.custhelp.com/app/answers/detail/a_id/<N>)
and their machine-readable copies (github.com/NVIDIA/product-security). The driver rows give the Linux
data center (Tesla) driver fixed in each branch as the bulletins list them; they were transcribed, not
fetched by a program, so check a row against its bulletin before relying on it. A bulletin that names no
version for a branch has no row for it (R590 appears only in bulletin 5747; R535 and R570 are absent from
5861 and R570 from 5821). A branch with no row at all (R550, R560, ...) has no known minimum: the guards
say so instead of guessing.

``enforce``: ``refuse`` rows stop an install below them; ``warn`` rows are reported (the toolkit's
CVE-2026-24260 row warns until the refusal is switched on for it in a later release; driver rows are
enforced where the operator asks for it, nvidia_driver_security_minimum: refuse).

Standard library only (runs on managed nodes).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

TABLE_DATE = "2026-09-30"
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


def branch_of(version):
    """'535' from '535.261.03'; None when there is no version."""
    key = version_key(version)
    return str(key[0]) if key else None


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


def unknown_branch(version):
    """A sentence when the driver's branch has no row (no known minimum), else None."""
    branch = branch_of(version)
    if not branch or rows_for(DRIVER, version):
        return None
    listed = sorted(set(row["branch"] for row in MINIMUMS if row["product"] == DRIVER), key=int)
    return ("Driver branch R%s has no row in the security minimum table of %s (the bulletins through 5861 name "
            "R%s): its minimum is unknown, most often because the branch reached its end of life. Move to a "
            "listed branch." % (branch, TABLE_DATE, ", R".join(listed)))
