"""Secure Boot strategies, the driver's locked version set and its drift (secure_boot.py, version_lock.py,
driver_drift.py), as plans and parsers.

The Secure Boot firmware and shim are STAND-INS here: EFI variables (SecureBoot, SetupMode, MokNew) are files
of a node tree, and `mokutil` / `apt-get -s` / `dnf` answers are canned text. The real DKMS signing and
unattended-upgrades' own dry run are in tests/integration/test_driver_integrity.py.
"""
from __future__ import absolute_import, division, print_function
__metaclass__ = type

import binascii
import lzma
import os
import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ansible_collections.gpunode.nvidia.plugins.module_utils.install import driver_drift

from ansible_collections.gpunode.nvidia.plugins.module_utils.install import secure_boot

from ansible_collections.gpunode.nvidia.plugins.module_utils.install import version_lock
from ansible_collections.gpunode.nvidia.plugins.module_utils.node.node_reader import Node

# tree: the node tree fixture, used by name
from test_driver_plan import driver, tree  # noqa: F401  pylint: disable=unused-import
from unit_paths import UNIT_DIR

DEBIAN_SET = {"nvidia-open-kernel-dkms": "535.261.03-1", "nvidia-smi": "535.261.03-1", "libcuda1": "535.261.03-1",
              "libnvidia-ml1": "535.261.03-1", "firmware-nvidia-gsp": "535.261.03-1",
              "nvidia-fabricmanager-535": "535.261.03-1", "nvidia-container-toolkit": "1.17.8-1",
              "libnvidia-container1": "1.17.8-1", "nvidia-support": "20151021+13", "containerd": "1.6.20~ds1-1"}
SIMULATE_SPLIT = """NOTE: This is only a simulation!
Inst libnvidia-ml1 [535.261.03-1] (535.309.01-0+deb12u1 Debian:12.12/stable [amd64])
Inst nvidia-smi [535.261.03-1] (535.309.01-0+deb12u1 Debian:12.12/stable [amd64])
Inst containerd [1.6.20~ds1-1] (1.6.20~ds1-1+deb12u2 Debian-Security:12/stable-security [amd64])
Conf libnvidia-ml1 (535.309.01-0+deb12u1 Debian:12.12/stable [amd64])
"""


def runner(answers):
    """A node's command runner answering from a table {argv prefix: (rc, out)} (a STAND-IN for the node's tools)."""
    def run(argv):
        for prefix, answer in answers.items():
            if tuple(argv[:len(prefix)]) == prefix:
                return answer[0], answer[1], ""
        return 127, "", "not found"
    return run


# --- Secure Boot: state, strategy, enrollment, signatures -------------------------------------------------

@pytest.mark.parametrize("requested, enabled, path, key, enrolled, expected", [
    ("auto", False, "dkms", False, False, "none"),
    ("auto", True, "prebuilt", False, False, "precompiled"),
    ("auto", True, "dkms", True, False, "dkms_sign"),
    ("auto", True, "dkms", False, True, "dkms_sign"),
    ("auto", True, "dkms", False, False, "refuse"),
    ("refuse", True, "prebuilt", False, False, "refuse"),
    ("dkms_sign", False, "dkms", True, False, "dkms_sign"),
])
def test_strategy_follows_the_secure_boot_state_and_what_is_given(requested, enabled, path, key, enrolled, expected):
    assert secure_boot.choose_strategy(requested, enabled, path, key, enrolled)["strategy"] == expected


@pytest.mark.parametrize("answer, state", [
    ("/var/lib/gpunode/secure-boot/signing.der is already enrolled\n", "enrolled"),
    ("/var/lib/gpunode/secure-boot/signing.der is not enrolled\n", "not_enrolled"),
    ("/var/lib/gpunode/secure-boot/signing.der is already in the enrollment request\n", "pending"),
    ("", "not_enrolled"),
])
def test_mokutil_test_key_answers(answer, state):
    assert secure_boot.enrollment_state(answer) == state


def test_enrollment_pending_is_shims_moknew_variable(tree):
    node = tree().efi(1)
    assert not secure_boot.enrollment_pending(node.node())
    node.write("/sys/firmware/efi/efivars/MokNew-" + secure_boot.MOK_GUID, "\x07\x00\x00\x00key")
    assert secure_boot.enrollment_pending(node.node())


def test_loaded_module_signature_from_modinfo_and_taint():
    signed = secure_boot.loaded_module_signature("Example Corp GPU fleet module signing\n", "4096\n")
    assert signed == {"signed": True, "signer": "Example Corp GPU fleet module signing", "unsigned_loaded": False}
    unsigned = secure_boot.loaded_module_signature("\n", str(4096 | secure_boot.TAINT_UNSIGNED_MODULE))
    assert unsigned["signed"] is False and unsigned["unsigned_loaded"] is True


def test_module_file_signature_plain_and_compressed(tmp_path):
    plain, signed_xz, bare = tmp_path / "nvidia.ko", tmp_path / "nvidia-signed.ko.xz", tmp_path / "nvidia-bare.ko"
    plain.write_bytes(b"\x7fELF...." + b"sig" + secure_boot.MODULE_SIGNATURE)
    signed_xz.write_bytes(lzma.compress(b"\x7fELF...." + secure_boot.MODULE_SIGNATURE))
    bare.write_bytes(b"\x7fELF....")
    assert secure_boot.module_file_signed(str(plain)) is True
    assert secure_boot.module_file_signed(str(signed_xz)) is True
    assert secure_boot.module_file_signed(str(bare)) is False
    assert secure_boot.module_file_signed(str(tmp_path / "missing.ko")) is None


def test_the_upgrade_kernel_is_read_from_apts_simulation():
    text = ("Inst linux-image-6.8.0-51-generic (6.8.0-51.52 Ubuntu:24.04/noble-updates [amd64])\n"
            "Inst linux-image-generic [6.8.0-50.51] (6.8.0-51.52 Ubuntu:24.04/noble-updates [amd64])\n")
    assert secure_boot.simulated_kernel(text) == "6.8.0-51-generic"
    assert secure_boot.simulated_kernel("linux-image-generic is already the newest version\n") is None


def test_dkms_signing_configuration_names_the_organisation_key():
    conf = secure_boot.dkms_signing_conf()
    assert 'mok_signing_key="/var/lib/gpunode/secure-boot/signing.key"' in conf
    assert 'mok_certificate="/var/lib/gpunode/secure-boot/signing.der"' in conf


# --- the driver plan's Secure Boot decision ------------------------------------------------------------

def test_auto_on_debian_with_an_organisation_key_signs_with_dkms(tree):
    plan = driver(tree().gpu(), secure_boot=True, signing_key_given=True)
    assert plan["secure_boot"]["strategy"] == "dkms_sign" and not plan["secure_boot"]["blocks_install"]
    assert plan["secure_boot"]["signing"]["dkms_conf_path"] == "/etc/dkms/framework.conf.d/gpunode-signing.conf"


SIGNED = os.path.join(UNIT_DIR, "corpus", "secure-boot")


def signed_sample(name, mode="rb"):
    with open(os.path.join(SIGNED, name), mode) as handle:
        return handle.read()


def test_the_signing_certificate_is_read_from_sign_files_own_signature():
    serial = secure_boot.certificate_serial(signed_sample("org.pem", "r"))
    assert binascii.hexlify(serial) == b"71f31e2ffd0a0d18e1029804ec3f031e166cbc1c"
    assert secure_boot.module_signer_serial(os.path.join(SIGNED, "org.ko")) == serial
    other = secure_boot.module_signer_serial(os.path.join(SIGNED, "dkms.ko"))
    assert other and other != serial
    assert secure_boot.module_signer_serial(os.path.join(SIGNED, "plain.ko")) is None
    assert secure_boot.certificate_serial("not a certificate") is None


def test_dkms_sign_lists_builds_unsigned_or_signed_by_another_key_for_a_signed_rebuild(tree):
    build = "/var/lib/dkms/nvidia-current/535.261.03/%s/x86_64/module/nvidia-current.ko"
    node_tree = tree().gpu()
    for kernel, sample in (("6.1.0-28-amd64", "plain.ko"), ("6.1.0-40-amd64", "org.ko"),
                           ("6.1.0-41-amd64", "dkms.ko"), ("6.1.0-9-amd64", "plain.ko")):
        node_tree.write(build % kernel, signed_sample(sample), mode="wb")
    for kernel in ("6.1.0-28-amd64", "6.1.0-40-amd64", "6.1.0-41-amd64"):  # 6.1.0-9: no longer installed
        node_tree.kernel(kernel)
    plan = driver(node_tree, secure_boot=True, signing_key_given=True,
                  signing_certificate=signed_sample("org.pem", "r"))
    assert plan["secure_boot"]["dkms_to_sign"] == [{"module": "nvidia-current/535.261.03", "kernel": kernel}
                                                   for kernel in ("6.1.0-28-amd64", "6.1.0-41-amd64")]
    assert driver(node_tree, secure_boot=False)["secure_boot"]["dkms_to_sign"] == []  # no dkms_sign: not read


def test_dkms_sign_without_a_key_refuses_naming_the_variables(tree):
    plan = driver(tree().gpu(), secure_boot=True, secure_boot_strategy="dkms_sign")
    assert plan["secure_boot"]["blocks_install"]
    assert "nvidia_driver_signing_key and nvidia_driver_signing_certificate" in plan["secure_boot"]["message"]


def test_precompiled_on_debian_refuses_there_is_no_signed_package(tree):
    plan = driver(tree().gpu(), secure_boot=True, secure_boot_strategy="precompiled")
    assert plan["secure_boot"]["blocks_install"]
    assert plan["secure_boot"]["message"].startswith(
        "Secure Boot strategy precompiled uses the distribution's signed module packages, which this collection "
        "installs on Ubuntu (nvidia_driver_ubuntu_modules: prebuilt); debian 12 builds its modules with DKMS. "
        "Nothing was installed.")


def test_secure_boot_off_never_blocks(tree):
    plan = driver(tree().gpu(), secure_boot=False, secure_boot_strategy="dkms_sign")
    assert not plan["secure_boot"]["blocks_install"]


def test_precompiled_needs_the_package_for_the_kernel_an_upgrade_installs(tree):
    node_tree = tree("ubuntu2404").gpu().dpkg({"linux-image-generic": "6.8.0-50.51"})
    run = runner({("apt-get", "-s", "-q", "-o", "Debug::NoLocking=1", "install", "linux-image-generic"): (
        0, "Inst linux-image-6.8.0-51-generic (6.8.0-51.52 Ubuntu:24.04/noble-updates [amd64])\n"),
        ("apt-cache", "show", "linux-modules-nvidia-580-server-open-6.8.0-50-generic"): (0, "Package: x\n"),
        ("apt-cache", "pkgnames"): (0, "nvidia-utils-580-server\n"),
        ("apt-get", "-s"): (0, "")})
    node = Node(node_tree.root, run)
    from ansible_collections.gpunode.nvidia.plugins.module_utils.install import driver_plan as dp
    env = {"running_kernel": "6.8.0-50-generic", "arch": "x86_64", "mok_enrolled": None,
           "secure_boot": {"enabled": True, "source": "test"}}
    plan = dp.plan_driver(node, {"default_branch": "580", "secure_boot_strategy": "precompiled"}, env)
    assert plan["secure_boot"]["precompiled"]["kernels"] == ["6.8.0-50-generic", "6.8.0-51-generic"]
    assert plan["secure_boot"]["precompiled"]["missing"] == ["linux-modules-nvidia-580-server-open-6.8.0-51-generic"]
    assert plan["secure_boot"]["blocks_install"]
    assert plan["secure_boot"]["message"].startswith(
        "Secure Boot strategy precompiled: the archive has no signed NVIDIA module package "
        "linux-modules-nvidia-580-server-open-6.8.0-51-generic (kernels 6.8.0-50-generic, 6.8.0-51-generic).")


# --- the locked version set ------------------------------------------------------------------------------

def test_the_set_is_the_driver_never_the_toolkit_or_others():
    assert sorted(version_lock.locked_packages(DEBIAN_SET)) == [
        "firmware-nvidia-gsp", "libcuda1", "libnvidia-ml1", "nvidia-fabricmanager-535", "nvidia-open-kernel-dkms",
        "nvidia-smi", "nvidia-support"]


def test_apt_lock_files():
    plan = version_lock.lock_plan("apt", {"libnvidia-ml1": "535.261.03-1", "nvidia-smi": "535.261.03-1"})
    assert plan["preferences_path"] == "/etc/apt/preferences.d/gpunode-nvidia-lock"
    assert plan["preferences"].split("\n")[1:] == [
        "", "Package: libnvidia-ml1", "Pin: version 535.261.03-1", "Pin-Priority: 1001",
        "", "Package: nvidia-smi", "Pin: version 535.261.03-1", "Pin-Priority: 1001", ""]
    assert plan["unattended_path"] == "/etc/apt/apt.conf.d/51gpunode-nvidia-lock"
    assert plan["unattended"].endswith(
        'Unattended-Upgrade::Package-Blacklist {\n    "libnvidia\\-ml1$";\n    "nvidia\\-smi$";\n};\n')
    assert plan["versionlock"] == [] and plan["names"] == ["libnvidia-ml1", "nvidia-smi"]


def test_dnf_versionlock_plan():
    installed = {"nvidia-driver-cuda": "3:580.65.06-1.el9", "kmod-nvidia-open-dkms": "3:580.65.06-1.el9",
                 "nvidia-fabric-manager": "580.65.06-1", "nvidia-container-toolkit": "1.17.8-1", "kernel": "5.14.0"}
    plan = version_lock.lock_plan("dnf", installed)
    assert [entry["lock"] for entry in plan["versionlock"]] == [
        ["dnf", "versionlock", "add", "kmod-nvidia-open-dkms-3:580.65.06-1.el9"],
        ["dnf", "versionlock", "add", "nvidia-driver-cuda-3:580.65.06-1.el9"],
        ["dnf", "versionlock", "add", "nvidia-fabric-manager-580.65.06-1"]]
    assert plan["versionlock"][1]["release"] == ["dnf", "versionlock", "delete", "nvidia-driver-cuda"]
    assert plan["preferences"] is None and plan["unattended"] is None
    assert version_lock.lock_plan("yum", installed)["versionlock"][0]["lock"][:3] == ["yum", "versionlock", "add"]


DNF_INSTALLED = {"nvidia-driver-cuda": "3:580.65.06-1.el9", "kmod-nvidia-open-dkms": "3:580.65.06-1.el9",
                 "nvidia-fabric-manager": "580.65.06-1"}


def test_versionlock_list_is_read_so_check_mode_reports_each_lock_it_would_add():
    listing = "Last metadata expiration check: 0:01:02 ago.\nnvidia-driver-cuda-3:580.65.06-1.el9.*\n"
    plan = version_lock.lock_plan("dnf", DNF_INSTALLED, runner({("dnf", "-q", "versionlock", "list"): (0, listing)}))
    assert plan["versionlocked"] == ["nvidia-driver-cuda"]  # the role locks the two others, in check mode too
    yum = version_lock.lock_plan("yum", DNF_INSTALLED, runner({("yum", "-q", "versionlock", "list"): (
        0, "0:nvidia-fabric-manager-580.65.06-1.*\n3:kmod-nvidia-open-dkms-580.65.06-1.el9.*\n")}))
    assert yum["versionlocked"] == ["kmod-nvidia-open-dkms", "nvidia-fabric-manager"]
    no_plugin = version_lock.lock_plan("dnf", DNF_INSTALLED, runner({}))  # 'No such command: versionlock'
    assert no_plugin["versionlocked"] == [] and len(no_plugin["versionlock"]) == 3


def test_versionlock_list_matches_whole_names_only():
    assert version_lock.versionlock_locked("nvidia-driver-cuda-libs-3:580.65.06-1.el9.*\n",
                                           ["nvidia-driver-cuda", "nvidia-driver-cuda-libs"]) == ["nvidia-driver-cuda-libs"]


def test_nothing_installed_nothing_locked():
    plan = version_lock.lock_plan("apt", {"containerd": "1.6.20~ds1-1"})
    assert plan["names"] == [] and plan["preferences"] is None and plan["unattended"] is None


PACKAGE_NAME = st.from_regex(r"\A(nvidia|libnvidia|libcuda1)-?[a-z0-9][a-z0-9.+-]{0,20}\Z")


@given(st.dictionaries(PACKAGE_NAME, st.just("535.261.03-1"), max_size=8), PACKAGE_NAME)
def test_blacklist_entries_match_exactly_the_locked_names(packages, other):
    """unattended-upgrades matches each entry with re.match: every locked name, and no other name."""
    locked = version_lock.locked_packages(packages)
    entries = re.findall(r'^    "(.*)";$', version_lock.unattended_blacklist(locked), re.M)
    for name in locked:
        assert any(re.match(entry, name) for entry in entries)
    if other not in locked:
        assert not any(re.match(entry, other) for entry in entries)


# --- drift -------------------------------------------------------------------------------------------------

def test_an_upgrade_of_the_libraries_alone_is_named():
    result = driver_drift.drift("535.261.03", ("535.261.03", "package libnvidia-ml1"),
                                ("535.261.03", "package nvidia-fabricmanager-535"), DEBIAN_SET,
                                driver_drift.apt_upgrades(SIMULATE_SPLIT))
    assert [s["package"] for s in result["splits"]] == ["libnvidia-ml1", "nvidia-smi"]
    assert result["splits"][0]["text"] == (
        "the next upgrade would move libnvidia-ml1 from 535.261.03-1 to 535.309.01-0+deb12u1 while "
        "firmware-nvidia-gsp, libcuda1, nvidia-fabricmanager-535 and 1 more stay at 535.261.03")


def test_an_upgrade_of_the_whole_set_with_no_module_loaded_is_no_split():
    upgrades = dict((name, "535.309.01-1") for name in DEBIAN_SET if name.startswith(("nvidia-", "lib", "firmware")))
    result = driver_drift.drift(None, (None, None), (None, None), DEBIAN_SET, upgrades)
    assert result["splits"] == []


def test_fabric_manager_one_patch_away_is_a_split():
    result = driver_drift.drift("535.261.03", ("535.261.03", "package libnvidia-ml1"),
                                ("535.309.01", "package nvidia-fabricmanager-535"), {}, {})
    assert result["splits"][0]["text"] == (
        "fabric manager is 535.309.01 (package nvidia-fabricmanager-535), not the set's 535.261.03")


def test_dnf_check_update_is_read():
    text = ("\nnvidia-driver-cuda.x86_64    3:580.82.07-1.el9   cuda-rhel9-x86_64\n"
            "Obsoleting Packages\n")
    assert driver_drift.dnf_upgrades(text) == {"nvidia-driver-cuda": "3:580.82.07-1.el9"}


def test_node_drift_reads_the_tree_and_simulates_on_the_live_node(tree):
    node_tree = tree().loaded_driver("535.261.03").dpkg(DEBIAN_SET)
    node = Node(node_tree.root, runner({tuple(driver_drift.APT_SIMULATE): (0, SIMULATE_SPLIT)}))
    result = driver_drift.node_drift(node, "535.261.03", "apt")
    assert result["components"][1] == {"name": "user-space library", "version": "535.261.03",
                                       "source": "package libnvidia-ml1"}
    assert [s["package"] for s in result["splits"]] == ["libnvidia-ml1", "nvidia-smi"]
    assert driver_drift.node_drift(node_tree.node(), "535.261.03", "apt")["splits"] == []  # a tree runs nothing


def test_library_version_from_the_library_file(tree):
    node_tree = tree().write("/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.550.163.01", "")
    assert driver_drift.library_version(node_tree.node(), {}) == (
        "550.163.01", "/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.550.163.01")


@given(st.lists(st.tuples(st.from_regex(r"\A[a-z][a-z0-9.+-]{1,15}\Z"),
                          st.from_regex(r"\A[0-9][0-9a-z.+~-]{0,12}\Z"),
                          st.from_regex(r"\A[0-9][0-9a-z.+~:-]{0,12}\Z")), max_size=6))
def test_apt_simulation_lines_are_read_back(entries):
    text = "".join("Inst %s [%s] (%s Debian:12/stable [amd64])\nConf %s (%s Debian:12/stable [amd64])\n"
                   % (name, old, new, name, new) for name, old, new in entries)
    assert driver_drift.apt_upgrades(text) == dict((name, new) for name, _old, new in entries)


def test_efi_fake_tree_for_the_three_cases(tree):
    """Secure Boot off, on with the key enrolled, on with it not enrolled: the plan's decision for each."""
    from ansible_collections.gpunode.nvidia.plugins.module_utils.node import node_os
    assert node_os.secure_boot(tree().efi(0).node())["enabled"] is False
    on = tree().gpu().efi(1).write("/var/lib/dkms/mok.pub", "cert")
    enrolled = driver(on, mok_enrolled=True)["secure_boot"]
    assert enrolled["enabled"] and enrolled["strategy"] == "dkms_sign" and not enrolled["blocks_install"]
    not_enrolled = driver(on, mok_enrolled=False)["secure_boot"]
    assert not_enrolled["strategy"] == "refuse" and not_enrolled["blocks_install"]


def test_a_whole_set_upgrade_away_from_the_loaded_module_is_named():
    installed = {"nvidia-open-kernel-dkms": "535.261.03-1", "libnvidia-ml1": "535.261.03-1"}
    upgrades = {"nvidia-open-kernel-dkms": "550.163.01-1", "libnvidia-ml1": "550.163.01-1"}
    assert driver_drift.upgrade_splits(installed, upgrades) == []  # an image: nothing loaded, the set moves as one
    splits = driver_drift.upgrade_splits(installed, upgrades, "535.261.03")
    assert [s["text"] for s in splits] == [
        "the next upgrade would move libnvidia-ml1 from 535.261.03-1 to 550.163.01-1 while the loaded kernel module "
        "stays at 535.261.03 until a reboot",
        "the next upgrade would move nvidia-open-kernel-dkms from 535.261.03-1 to 550.163.01-1 while the loaded "
        "kernel module stays at 535.261.03 until a reboot"]
