# -*- coding: utf-8 -*-
# Copyright: gpunode.nvidia contributors
# Apache License 2.0
"""Package versions for the driver and toolkit plans, and how apt, dnf and yum are told to install them.

Versions compare in dpkg's order (close enough for rpm's NVIDIA versions);
a driver version names its branch ('535' of '535.261.03-1'); a version glob
('535.*', '1.17.8-1') selects package versions and files. Runs on managed
nodes: standard library only.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import functools
import re

# Package file names: NAME_VERSION_ARCH.deb and NAME-VERSION-RELEASE.ARCH.rpm.
DEB_FILE_RE = re.compile(r"^([a-z0-9][a-z0-9+.-]*)_([^_]+)_([a-z0-9]+)\.deb$")
RPM_FILE_RE = re.compile(r"^(.+)-([^-]+)-([^-]+)\.([a-z0-9_]+)\.rpm$")


def compare_versions(left, right):
    """-1, 0 or 1, as dpkg compares versions ('~' sorts before everything, even the end)."""
    left_epoch, left_rest = _split_epoch(left)
    right_epoch, right_rest = _split_epoch(right)
    if left_epoch != right_epoch:
        return -1 if left_epoch < right_epoch else 1
    left_upstream, _s, left_revision = left_rest.rpartition("-") if "-" in left_rest else (left_rest, "", "")
    right_upstream, _s, right_revision = right_rest.rpartition("-") if "-" in right_rest else (right_rest, "", "")
    return _compare_part(left_upstream, right_upstream) or _compare_part(left_revision, right_revision)


def version_key(version):
    """Sort key for package versions (dpkg order; close enough for rpm's NVIDIA versions)."""
    return functools.cmp_to_key(compare_versions)(version or "")


def _split_epoch(version):
    epoch, sep, rest = (version or "").partition(":")
    if sep and epoch.isdigit():
        return int(epoch), rest
    return 0, version or ""


def _char_order(char):
    if char == "~":
        return -1
    if char.isalpha():
        return ord(char)
    return ord(char) + 256


def _compare_part(left, right):
    """dpkg's verrevcmp: alternate non-digit runs (by character order) and digit runs (numerically)."""
    while left or right:
        left_text = re.match(r"\D*", left).group(0)
        right_text = re.match(r"\D*", right).group(0)
        for index in range(max(len(left_text), len(right_text))):
            a = _char_order(left_text[index]) if index < len(left_text) else 0
            b = _char_order(right_text[index]) if index < len(right_text) else 0
            if a != b:
                return -1 if a < b else 1
        left, right = left[len(left_text):], right[len(right_text):]
        left_digits = re.match(r"\d*", left).group(0)
        right_digits = re.match(r"\d*", right).group(0)
        if int(left_digits or 0) != int(right_digits or 0):
            return -1 if int(left_digits or 0) < int(right_digits or 0) else 1
        left, right = left[len(left_digits):], right[len(right_digits):]
    return 0


def upstream(version):
    """'535.261.03' from '535.261.03-1', '3:550.54.15-1.el9' or '1.17.8-1'."""
    if not version:
        return None
    rest = version.rpartition(":")[2]
    return rest.split("-", 1)[0]


def branch_of(version):
    """The driver branch of a driver version: its first component ('580' from '580.95.05', '1:580.95.05-1' or
    'v580.95.05'), or None for no version and for other products' versions (the toolkit's '1.17.8-1': a
    branch has three digits or more)."""
    match = re.match(r"^v?(\d{3,})(?:\.|$)", upstream(version) or "")
    return match.group(1) if match else None


def lockstep_version(versions, branch):
    """Upstream version of the newest candidate in branch: every driver package must match it
    (a kernel module and libcuda/NVML of different versions do not talk to each other)."""
    for version in sorted(versions, key=version_key, reverse=True):
        if not branch or branch_of(version) == branch:
            return upstream(version)
    return None


def version_matches(version, version_glob):
    if not version_glob:
        return True
    bare = version.rpartition(":")[2]
    if version_glob.endswith("*"):
        return bare.startswith(version_glob[:-1])
    return bare == version_glob or upstream(bare) == version_glob


def install_command(manager, packages, allow_change=False):
    if manager == "apt":
        return "apt-get install -y --no-install-recommends %s%s" % (
            "--allow-downgrades " if allow_change else "", " ".join(packages))
    if manager == "yum":
        return "yum install -y %s" % " ".join(packages)
    return "dnf install -y %s%s" % ("--allowerasing " if allow_change else "", " ".join(packages))
