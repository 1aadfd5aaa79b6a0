# -*- coding: utf-8 -*-
# Copyright: gpunode.nvidia contributors
# Apache License 2.0
"""Guards that run before the driver and toolkit stages change anything.

* ``toolkit_guard``: the toolkit stage refuses a version older than ``TOOLKIT_CVE_MINIMUM``
  (CVE-2025-23266 affects the NVIDIA container toolkit up to 1.17.7) unless the operator opts out.
* ``kernel_hold_packages`` / ``kernel_release_decision``: the kernel is held (apt-mark hold, dnf
  versionlock) so the NVIDIA module keeps matching it, and released only when the module exists for
  the kernel an upgrade would install (a prebuilt module package, or DKMS listing the module as
  installed for it, built now if needed).
* ``transitional_jumps``: an Ubuntu package named for one driver branch that is now a transitional
  package depending on another branch's (Ubuntu does this when a branch reaches its end of life)
  would move the node to that branch silently; it is refused.

Pure functions over text the package tools print: unit-tested without the archives.
Standard library only (runs on managed nodes).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

from ansible_collections.gpunode.nvidia.plugins.module_utils.install import security_minimums

# The refused floor is the table's: the highest toolkit row that refuses (1.17.8, CVE-2025-23266).
_TOOLKIT_REFUSED = [row for row in security_minimums.MINIMUMS
                    if row["product"] == security_minimums.TOOLKIT and row["enforce"] == "refuse"][-1]
TOOLKIT_CVE_MINIMUM = _TOOLKIT_REFUSED["version"]
TOOLKIT_CVE = _TOOLKIT_REFUSED["cves"][0]
BRANCH_PACKAGE = re.compile(r"^(?:nvidia-(?:driver|headless|headless-no-dkms|utils|dkms|kernel-common|"
                            r"kernel-source|compute-utils|firmware|fabricmanager)|libnvidia-(?:compute|gl|decode|"
                            r"encode|extra|cfg1)|linux-modules-nvidia|linux-objects-nvidia|linux-signatures-nvidia)"
                            r"-(\d{3})\b")
KERNEL_META_APT = re.compile(r"^linux-(?:image|headers|modules|generic|virtual|aws|azure|gcp|oracle|kvm|lowlatency|"
                             r"hwe)(?:-[a-z][a-z0-9.]*)*$")
# A `dkms status` line of the NVIDIA driver's module built for a kernel, dkms 3 ("nvidia-current/535.261.03,
# 6.1.0-40-amd64, x86_64: installed") and dkms 2 ("nvidia, 535.261.03, ..."); nvidia-fs is GPUDirect Storage's.
DKMS_STATUS_LINE = re.compile(r"^nvidia(?!-fs\b)[\w.+-]*(?:/|,\s*)[^,\s]+,\s*([^,\s]+),\s*[^:,]+:\s*installed")
KERNEL_RPM = ("kernel", "kernel-core", "kernel-modules", "kernel-modules-core", "kernel-modules-extra",
              "kernel-devel", "kernel-headers")


def version_key(text):
    return [int(part) for part in re.findall(r"\d+", text or "")]


def older_than(version, minimum):
    """'1.17.7-1' and '1.17.8~rc.1-1' are older than '1.17.8'; '1.6.20~ds1' is older than '1.7'."""
    if not version:
        return False
    upstream = version.split(":")[-1].split("-")[0].lstrip("v")
    release, _sep, prerelease = upstream.partition("~")
    key, floor = version_key(release), version_key(minimum)
    if key[:len(floor)] == floor and len(key) > len(floor):
        return False
    return key < floor or (key == floor and bool(prerelease) and not prerelease.startswith("ds"))


# --- toolkit -----------------------------------------------------------------------------------------

def apt_candidate(policy_text):
    """The Candidate: line of `apt-cache policy PACKAGE`, or None."""
    match = re.search(r"^\s*Candidate:\s*(\S+)", policy_text or "", re.M)
    return match.group(1) if match and match.group(1) != "(none)" else None


def toolkit_guard(action, wanted, installed, candidate, allow_vulnerable=False):
    """{ok, version, reason}: the toolkit version this run would leave on the node, and whether that is allowed.

    action is the toolkit plan's (install, change, keep, refused); wanted the pinned version or None;
    installed the installed nvidia-container-toolkit version or None; candidate what apt/dnf would install
    when nothing is pinned."""
    if action in ("install", "change"):
        version = wanted or candidate
    else:
        version = installed
    result = {"ok": True, "version": version, "minimum": TOOLKIT_CVE_MINIMUM, "reason": None}
    if not older_than(version, TOOLKIT_CVE_MINIMUM):
        result["reason"] = _toolkit_warning(version)
        return result
    what = ("would install toolkit %s" % version if action in ("install", "change")
            else "the installed toolkit %s would be kept" % version)
    if allow_vulnerable:
        result["reason"] = ("%s, older than %s (%s): allowed by nvidia_container_toolkit_allow_vulnerable"
                            % (what[0].upper() + what[1:], TOOLKIT_CVE_MINIMUM, TOOLKIT_CVE))
        return result
    result["ok"] = False
    result["reason"] = (
        "This run %s, older than %s: %s lets a container image escape to the host as root (NVIDIA security "
        "bulletin, July 2025). Nothing was changed. Set nvidia_container_toolkit_version to %s-1 or newer%s; "
        "to accept the risk knowingly, set nvidia_container_toolkit_allow_vulnerable: true."
        % (what, TOOLKIT_CVE_MINIMUM, TOOLKIT_CVE, TOOLKIT_CVE_MINIMUM,
           " with nvidia_container_toolkit_allow_upgrade: true" if installed else ""))
    return result


def _toolkit_warning(version):
    """A sentence when the version is below a row of the security table that warns, else None."""
    gap = security_minimums.shortfall(security_minimums.TOOLKIT, version)
    if not gap:
        return None
    return "%s Set nvidia_container_toolkit_version to %s-1 or newer." % (security_minimums.describe(gap), gap["minimum"])


# --- kernel hold and release ------------------------------------------------------------------------------

def kernel_hold_packages(manager, installed_names):
    """The kernel packages to hold: apt, the installed kernel metapackages (what pulls new kernels in);
    dnf/yum, the installed kernel packages by name (versionlock)."""
    if manager == "apt":
        return sorted(name for name in installed_names if KERNEL_META_APT.match(name))
    return sorted(name for name in installed_names if name in KERNEL_RPM)


def held_apt(selections_text):
    """Packages `apt-mark showhold` lists."""
    return sorted(line.strip() for line in (selections_text or "").splitlines() if line.strip())


def candidate_kernel_apt(depends_text):
    """Kernel release an upgrade of the image metapackage installs, from `apt-cache depends --important
    linux-image-amd64` (or linux-image-generic): 'Depends: linux-image-6.1.0-40-amd64' -> '6.1.0-40-amd64'."""
    match = re.search(r"Depends:\s*linux-image-(?:unsigned-)?(\d[^\s<>]*)", depends_text or "")
    return match.group(1) if match else None


def candidate_kernel_rpm(list_text):
    """Newest 'kernel.x86_64  5.14.0-503.el9  repo' of `dnf list --available kernel` as '5.14.0-503.el9.x86_64'."""
    found = []
    for line in (list_text or "").splitlines():
        parts = line.split()
        if len(parts) >= 2 and parts[0].startswith("kernel."):
            found.append("%s.%s" % (parts[1].split(":")[-1], parts[0].split(".", 1)[1]))
    return sorted(found, key=version_key)[-1] if found else None


def dkms_module_installed(status_text, kernel):
    """Whether `dkms status -k KERNEL` lists the NVIDIA module as installed for that kernel."""
    for line in (status_text or "").splitlines():
        match = DKMS_STATUS_LINE.match(line.strip())
        if match and match.group(1) == kernel:
            return True
    return False


def kernel_release_decision(candidate, running, module_path, prebuilt_available=None, dkms_result=None,
                            dkms_installed=False, check_mode=False, signature=None):
    """{ok, reason}: may the kernel hold be released?

    module_path: 'prebuilt' (Ubuntu's linux-modules-nvidia packages) or 'dkms' (or 'kmod', 'run').
    prebuilt_available: whether the prebuilt module package exists for the candidate kernel.
    dkms_result: (rc, output) of the DKMS build for the candidate kernel, None when it was not tried.
    dkms_installed: whether `dkms status` lists the NVIDIA module for the candidate kernel (before or after
    the build): `dkms autoinstall` exits 0 when it skips a module (BUILD_EXCLUSIVE_KERNEL), so its exit
    status alone proves nothing.
    check_mode: the build was not tried because nothing may change.
    signature: with Secure Boot on, (signer, what modinfo said) of the DKMS module installed for the candidate
    kernel (`modinfo -k KERNEL -F signer nvidia`); an empty signer keeps the kernel held. None: Secure Boot off."""
    if not candidate or candidate == running:
        return {"ok": True, "reason": "no newer kernel is available: releasing the hold changes nothing now"}
    if module_path == "prebuilt":
        if prebuilt_available:
            return {"ok": True, "reason": "the prebuilt NVIDIA module package exists for kernel %s" % candidate}
        return {"ok": False, "reason": "kernel %s has no prebuilt NVIDIA module package in the archive yet: an "
                "upgrade now would boot a kernel without the GPU driver. The kernel stays held; retry when the "
                "archive carries linux-modules-nvidia for it." % candidate}
    if module_path == "dkms":
        if dkms_installed:
            return _signed_module_decision(candidate, signature)
        if dkms_result is None:
            if check_mode:
                return {"ok": True, "reason": "check mode: the headers of kernel %s would be installed and the "
                        "NVIDIA DKMS module built for it%s; the kernel is released only if that succeeds" % (
                            candidate, " and signed (Secure Boot is on)" if signature is not None else "")}
            return {"ok": False, "reason": "the DKMS build for kernel %s was not tried; the kernel stays held"
                    % candidate}
        rc, output = dkms_result
        if rc == 0:
            return {"ok": False, "reason": "dkms autoinstall -k %s ended without an error, but DKMS lists no NVIDIA "
                    "module installed for that kernel (dkms status -k %s): %s. The module's dkms.conf excludes "
                    "the kernel (BUILD_EXCLUSIVE_KERNEL: this driver does not support it) or no NVIDIA module is "
                    "registered with DKMS. The kernel stays held; install a driver that supports kernel %s first."
                    % (candidate, candidate, (output or "no output").strip()[-400:], candidate)}
        return {"ok": False, "reason": "the NVIDIA DKMS module does not build for kernel %s (rc %s): %s. The "
                "kernel stays held; an upgrade would boot it without the GPU driver."
                % (candidate, rc, (output or "").strip()[-400:])}
    return {"ok": False, "reason": "the NVIDIA module was not installed through packages (%s): it cannot be "
            "checked for kernel %s; the kernel stays held" % (module_path, candidate)}


def _signed_module_decision(candidate, signature):
    """The DKMS module is installed for the candidate kernel: with Secure Boot on it must also be signed."""
    installed = "the NVIDIA DKMS module is installed for kernel %s" % candidate
    if signature is None:
        return {"ok": True, "reason": installed}
    signer, said = signature
    if signer:
        return {"ok": True, "reason": "%s and signed by %s" % (installed, signer)}
    return {"ok": False, "reason": "Secure Boot is on and %s but not signed (modinfo -k %s -F signer nvidia: %s): "
            "the kernel would refuse to load it and an upgrade would boot a node without its GPU. The kernel "
            "stays held. Sign DKMS builds with the organisation's key (nvidia_driver_secure_boot_strategy: "
            "dkms_sign, docs/secure-boot.md): the role then rebuilds and signs the module for every installed "
            "kernel; release the kernel after that run." % (installed, candidate, (said or "no signer").strip()[-300:])}


# --- Ubuntu transitional packages -------------------------------------------------------------------------

def parse_apt_show(text):
    """Stanzas of `apt-cache show` as dicts (Package, Version, Depends, Description)."""
    records = []
    for stanza in re.split(r"\n\s*\n", text or ""):
        fields, key = {}, None
        for line in stanza.splitlines():
            if line[:1] in (" ", "\t") and key:
                fields[key] += "\n" + line.strip()
            elif ":" in line:
                key, _sep, value = line.partition(":")
                key = key.strip()
                fields[key] = value.strip()
        if fields.get("Package"):
            records.append(fields)
    return records


def depends_names(depends):
    names = []
    for alternative in (depends or "").split(","):
        for choice in alternative.split("|"):
            name = choice.strip().split(" ", 1)[0].split(":", 1)[0]
            if name:
                names.append(name)
    return names


def transitional_jumps(records, branch):
    """[message] for each package named for `branch` whose candidate depends on another branch's packages
    (a transitional package): installing it would move the driver to that branch."""
    jumps = []
    for record in records:
        own = BRANCH_PACKAGE.match(record["Package"])
        if not own or own.group(1) != str(branch):
            continue
        matches = (BRANCH_PACKAGE.match(name) for name in depends_names(record.get("Depends")))
        others = sorted(set(match.group(1) for match in matches if match and match.group(1) != str(branch)))
        if not others:
            continue
        transitional = "transitional" in (record.get("Description") or record.get("Description-en") or "").lower()
        jumps.append("%s %s %sdepends on branch %s (%s): installing it would move the driver from branch %s to %s "
                     "without anyone asking." % (record["Package"], record.get("Version", "?"),
                                                 "is a transitional package that " if transitional else "",
                                                 ", ".join(others), record.get("Depends"), branch, others[-1]))
    return jumps


def transitional_message(jumps, branch):
    return ("Refused: %s Nothing was installed. Branch %s has been replaced in the archive: choose the branch "
            "explicitly (nvidia_driver_branch: %s) after checking it supports your GPUs and your fabric manager, "
            "or install from a mirror that still carries branch %s."
            % (" ".join(jumps), branch, _target_branch(jumps) or "NEW", branch))


def _target_branch(jumps):
    match = re.search(r"to (\d{3}) without", jumps[-1]) if jumps else None
    return match.group(1) if match else None
