"""Guards before change (module_utils/install/guards.py): toolkit CVE minimum, kernel hold/release, Ubuntu transitional
packages. The package tools' outputs are recorded in their formats (apt-cache policy/depends/show, dnf list):
Ubuntu's archive and RHEL's repositories cannot be reached here."""
from __future__ import absolute_import, division, print_function
__metaclass__ = type


import pytest

from ansible_collections.gpunode.nvidia.plugins.module_utils.install import guards

# --- toolkit ------------------------------------------------------------------------------------------

POLICY = """nvidia-container-toolkit:
  Installed: (none)
  Candidate: 1.17.7-1
  Version table:
     1.17.7-1 500
        500 http://127.0.0.1:8000/libnvidia-container/stable/deb/amd64  Packages
"""


@pytest.mark.parametrize("action, wanted, installed, candidate, ok", [
    ("install", "1.17.7-1", None, None, False),
    ("install", "1.17.8-1", None, None, True),
    ("install", None, None, "1.17.7-1", False),        # nothing pinned: apt's candidate counts
    ("install", None, None, "1.18.0-1", True),
    ("keep", None, "1.16.2-1", None, False),           # an installed vulnerable toolkit is not kept silently
    ("keep", None, "1.18.0-1", None, True),
    ("change", "1.17.8~rc.1-1", "1.17.7-1", None, False),
    ("install", None, None, None, True),               # unknown candidate (dnf): the doctor rule reports later
])
def test_toolkit_guard(action, wanted, installed, candidate, ok):
    result = guards.toolkit_guard(action, wanted, installed, candidate)
    assert result["ok"] is ok, result
    if not ok:
        assert "CVE-2025-23266" in result["reason"] and "nvidia_container_toolkit_allow_vulnerable" in result["reason"]
        allowed = guards.toolkit_guard(action, wanted, installed, candidate, allow_vulnerable=True)
        assert allowed["ok"] and "allowed by nvidia_container_toolkit_allow_vulnerable" in allowed["reason"]


def test_apt_candidate():
    assert guards.apt_candidate(POLICY) == "1.17.7-1"
    assert guards.apt_candidate("x:\n  Installed: (none)\n  Candidate: (none)\n") is None


# --- kernel -------------------------------------------------------------------------------------------

def test_kernel_hold_packages_apt_are_the_metapackages():
    installed = ["linux-image-amd64", "linux-image-6.1.0-37-amd64", "linux-headers-amd64",
                 "linux-headers-6.1.0-37-amd64", "linux-base", "linux-libc-dev", "nvidia-open-kernel-dkms"]
    assert guards.kernel_hold_packages("apt", installed) == ["linux-headers-amd64", "linux-image-amd64"]
    ubuntu = ["linux-generic", "linux-image-generic", "linux-headers-generic", "linux-image-6.8.0-60-generic",
              "linux-modules-6.8.0-60-generic", "linux-aws", "linux-image-aws"]
    assert guards.kernel_hold_packages("apt", ubuntu) == ["linux-aws", "linux-generic", "linux-headers-generic",
                                                          "linux-image-aws", "linux-image-generic"]


def test_kernel_hold_packages_rpm():
    assert guards.kernel_hold_packages("dnf", ["kernel", "kernel-core", "kernel-tools", "kernel-devel", "bash"]) == [
        "kernel", "kernel-core", "kernel-devel"]


def test_candidate_kernel_apt_and_rpm():
    depends = "linux-image-amd64\n  Depends: linux-image-6.1.0-40-amd64\n"
    assert guards.candidate_kernel_apt(depends) == "6.1.0-40-amd64"
    assert guards.candidate_kernel_apt("linux-image-generic\n  Depends: linux-image-6.8.0-64-generic\n"
                                       "  Depends: linux-firmware\n") == "6.8.0-64-generic"
    assert guards.candidate_kernel_apt("") is None
    listing = ("Available Packages\nkernel.x86_64    5.14.0-503.40.1.el9_5    baseos\n"
               "kernel.x86_64    5.14.0-570.12.1.el9_6    baseos\n")
    assert guards.candidate_kernel_rpm(listing) == "5.14.0-570.12.1.el9_6.x86_64"


@pytest.mark.parametrize("kwargs, ok, text", [
    (dict(candidate=None, running="6.1.0-37-amd64", module_path="dkms"), True, "no newer kernel"),
    (dict(candidate="6.1.0-37-amd64", running="6.1.0-37-amd64", module_path="dkms"), True, "no newer kernel"),
    (dict(candidate="6.1.0-40-amd64", running="6.1.0-37-amd64", module_path="dkms", dkms_result=(0, ""),
          dkms_installed=True), True, "installed for kernel 6.1.0-40-amd64"),
    (dict(candidate="6.1.0-40-amd64", running="6.1.0-37-amd64", module_path="dkms", dkms_installed=True),
     True, "installed for kernel 6.1.0-40-amd64"),
    # autoinstall skipped the module (BUILD_EXCLUSIVE_KERNEL) and still exited 0
    (dict(candidate="6.1.0-40-amd64", running="6.1.0-37-amd64", module_path="dkms",
          dkms_result=(0, "includes a BUILD_EXCLUSIVE directive which does not match this kernel"),
          dkms_installed=False), False, "lists no NVIDIA module installed for that kernel"),
    (dict(candidate="6.1.0-40-amd64", running="6.1.0-37-amd64", module_path="dkms", check_mode=True),
     True, "check mode"),
    (dict(candidate="6.1.0-40-amd64", running="6.1.0-37-amd64", module_path="dkms",
          dkms_result=(10, "Error! Bad return status for module build on kernel: 6.1.0-40-amd64")),
     False, "does not build for kernel 6.1.0-40-amd64"),
    (dict(candidate="6.1.0-40-amd64", running="6.1.0-37-amd64", module_path="dkms"), False, "was not tried"),
    (dict(candidate="6.8.0-64-generic", running="6.8.0-60-generic", module_path="prebuilt",
          prebuilt_available=True), True, "prebuilt"),
    (dict(candidate="6.8.0-64-generic", running="6.8.0-60-generic", module_path="prebuilt",
          prebuilt_available=False), False, "no prebuilt NVIDIA module package"),
    (dict(candidate="6.8.0-64-generic", running="6.8.0-60-generic", module_path="run"), False, "stays held"),
    # Secure Boot on: the module DKMS installed for the new kernel must be signed too
    (dict(candidate="6.1.0-40-amd64", running="6.1.0-37-amd64", module_path="dkms", dkms_installed=True,
          signature=("Example Corp GPU fleet signing", "")), True,
     "installed for kernel 6.1.0-40-amd64 and signed by Example Corp GPU fleet signing"),
    (dict(candidate="6.1.0-40-amd64", running="6.1.0-37-amd64", module_path="dkms", dkms_installed=True,
          signature=("", "")), False,
     "Secure Boot is on and the NVIDIA DKMS module is installed for kernel 6.1.0-40-amd64 but not signed "
     "(modinfo -k 6.1.0-40-amd64 -F signer nvidia: no signer)"),
    (dict(candidate="6.1.0-40-amd64", running="6.1.0-37-amd64", module_path="dkms", dkms_installed=True,
          signature=("", "modinfo: ERROR: Module nvidia not found.")), False,
     "-F signer nvidia: modinfo: ERROR: Module nvidia not found.): the kernel would refuse"),
    (dict(candidate="6.1.0-40-amd64", running="6.1.0-37-amd64", module_path="dkms", check_mode=True,
          signature=(None, None)), True, "built for it and signed (Secure Boot is on)"),
])
def test_kernel_release_decision(kwargs, ok, text):
    decision = guards.kernel_release_decision(**kwargs)
    assert decision["ok"] is ok and text in decision["reason"], decision


def test_dkms_module_installed_reads_dkms_3_and_2_status_lines():
    status = ("nvidia-current/535.261.03, 6.1.0-40-amd64, x86_64: installed\n"
              "nvidia-current/535.261.03: added\n"
              "nvidia-fs/2.20.5, 6.1.0-41-amd64, x86_64: installed\n")
    assert guards.dkms_module_installed(status, "6.1.0-40-amd64")
    assert not guards.dkms_module_installed(status, "6.1.0-41-amd64")  # only GPUDirect Storage's module
    assert guards.dkms_module_installed("nvidia, 580.95.05, 6.8.0-64-generic, x86_64: installed\n",
                                        "6.8.0-64-generic")
    assert guards.dkms_module_installed("nvidia-open/575.57.08, 5.14.0-570.el9.x86_64, x86_64: installed "
                                        "(WARNING! Diff between built and installed module!)",
                                        "5.14.0-570.el9.x86_64")
    assert not guards.dkms_module_installed("nvidia/580.95.05, 6.8.0-64-generic, x86_64: built\n",
                                            "6.8.0-64-generic")
    assert not guards.dkms_module_installed("", "6.8.0-64-generic")


# --- Ubuntu transitional packages ------------------------------------------------------------------

# `apt-cache show --no-all-versions` as Ubuntu prints it for a branch that reached its end of life and
# for a live one (fields trimmed to those the guard reads).
TRANSITIONAL = """Package: nvidia-headless-no-dkms-535-server-open
Architecture: amd64
Version: 550.163.01-0ubuntu0.24.04.1
Priority: optional
Section: restricted/oldlibs
Source: nvidia-graphics-drivers-550-server
Depends: nvidia-headless-no-dkms-550-server-open
Description-en: Transitional package for nvidia-headless-no-dkms-550-server-open
 This is a transitional package. It can safely be removed.

Package: nvidia-utils-535-server
Architecture: amd64
Version: 550.163.01-0ubuntu0.24.04.1
Section: restricted/oldlibs
Depends: nvidia-utils-550-server
Description-en: Transitional package for nvidia-utils-550-server
"""

LIVE = """Package: nvidia-headless-no-dkms-580-server-open
Architecture: amd64
Version: 580.95.05-0ubuntu0.24.04.2
Section: restricted/libs
Depends: nvidia-kernel-common-580-server (= 580.95.05-0ubuntu0.24.04.2),
 libnvidia-compute-580-server (= 580.95.05-0ubuntu0.24.04.2),
 nvidia-firmware-580-server-580.95.05,
 nvidia-compute-utils-580-server
Description-en: NVIDIA headless metapackage - no DKMS (open kernel module)

Package: linux-modules-nvidia-580-server-open-6.8.0-60-generic
Architecture: amd64
Version: 6.8.0-60.63+1
Depends: linux-image-6.8.0-60-generic | linux-image-unsigned-6.8.0-60-generic,
 linux-signatures-nvidia-6.8.0-60-generic (= 6.8.0-60.63+1),
 linux-objects-nvidia-580-server-open-6.8.0-60-generic (= 6.8.0-60.63+1),
 nvidia-kernel-common-580-server (>= 580.95.05)
Description-en: Linux kernel nvidia modules for version 6.8.0-60
"""


def test_transitional_package_jump_is_refused():
    jumps = guards.transitional_jumps(guards.parse_apt_show(TRANSITIONAL), "535")
    assert len(jumps) == 2
    assert jumps[0].startswith("nvidia-headless-no-dkms-535-server-open 550.163.01-0ubuntu0.24.04.1 is a "
                               "transitional package that depends on branch 550")
    message = guards.transitional_message(jumps, "535")
    assert "Nothing was installed" in message and "nvidia_driver_branch: 550" in message


def test_live_branch_packages_pass():
    assert guards.transitional_jumps(guards.parse_apt_show(LIVE), "580") == []


def test_a_dependency_on_another_branch_without_the_word_transitional_is_also_a_jump():
    record = "Package: nvidia-driver-470-server\nVersion: 535.1-0\nDepends: nvidia-driver-535-server\n" \
             "Description-en: NVIDIA driver metapackage\n"
    jumps = guards.transitional_jumps(guards.parse_apt_show(record), "470")
    assert jumps and "depends on branch 535" in jumps[0] and "transitional package" not in jumps[0]
