"""gpu_doctor's driver integrity rules (doctor_driver_integrity.py): Secure Boot signatures, a pending key
enrollment, the newest kernel's module, and an upgrade that would split the driver's version set.

The Secure Boot firmware and shim are STAND-INS: their EFI variables (SecureBoot, SetupMode, MokNew) are files
of the node tree; modules are files with or without the kernel's appended signature marker; `mokutil` and
`apt-get -s` answers are recorded text.
"""
from __future__ import absolute_import, division, print_function
__metaclass__ = type

import lzma
import struct
import sys
from unit_paths import UNIT_DIR

sys.path.insert(0, UNIT_DIR)
import gpu_health_trees as trees  # noqa: E402

from ansible_collections.gpunode.nvidia.plugins.module_utils.doctor import rules as doctor_rules  # noqa: E402

from ansible_collections.gpunode.nvidia.plugins.module_utils.install import secure_boot  # noqa: E402
from ansible_collections.gpunode.nvidia.plugins.module_utils.install.driver_drift import APT_SIMULATE  # noqa: E402

from test_doctor_health import Recorded, healthy  # noqa: E402

EFI = "/sys/firmware/efi/efivars/%s-8be4df61-93ca-11d2-aa0d-00e098032b8c"
MODULE = "/lib/modules/%s/updates/dkms/nvidia.ko.xz"
SIGNED = lzma.compress(b"\x7fELF stand-in module" + secure_boot.MODULE_SIGNATURE)
UNSIGNED = lzma.compress(b"\x7fELF stand-in module")


class Answers(Recorded):
    """Recorded outputs, plus mokutil --test-key and apt-get's simulation."""

    def __init__(self, test_key="", simulate=""):
        super(Answers, self).__init__(smi=trees.smi_xml())
        self.test_key, self.simulate = test_key, simulate

    def __call__(self, argv):
        if argv[:2] == ["mokutil", "--test-key"]:
            return 1, self.test_key, ""
        if argv == APT_SIMULATE:
            return 0, self.simulate, ""
        return super(Answers, self).__call__(argv)


def secure_boot_node(root, enabled=1, module=SIGNED):
    tree = healthy(root)
    tree.file(EFI % "SecureBoot", struct.pack("<IB", 6, enabled))
    tree.file(EFI % "SetupMode", struct.pack("<IB", 6, 0))
    tree.file(MODULE % trees.KERNEL, module)
    return tree


def findings(root, runner=None):
    result = doctor_rules.diagnose(str(root), query_cri=False, run=runner or Answers())
    fired = {}
    for item in result["findings"]:
        assert item["rule"] != "doctor-rule-error", item["message"]
        fired.setdefault(item["rule"], []).append(item)
    return fired


def test_unsigned_module_under_secure_boot(tmp_path):
    secure_boot_node(tmp_path, module=UNSIGNED)
    item = findings(tmp_path)["secure-boot-module-unsigned"][0]
    assert item["message"] == ("Secure Boot is on and the NVIDIA module %s carries no signature: the kernel refuses "
                               "to load it and the node has no GPU." % (MODULE % trees.KERNEL))


def test_signed_module_or_secure_boot_off_is_quiet(tmp_path):
    secure_boot_node(tmp_path / "signed")
    assert "secure-boot-module-unsigned" not in findings(tmp_path / "signed")
    secure_boot_node(tmp_path / "off", enabled=0, module=UNSIGNED)
    assert "secure-boot-module-unsigned" not in findings(tmp_path / "off")


def test_signed_with_a_key_the_machine_has_not_enrolled(tmp_path):
    tree = secure_boot_node(tmp_path)
    tree.file(secure_boot.SIGNING_CERT, b"0\x82 stand-in certificate")
    item = findings(tmp_path, Answers(test_key="%s is not enrolled\n" % secure_boot.SIGNING_CERT))[
        "secure-boot-module-unsigned"][0]
    assert "which this machine has not enrolled" in item["message"]
    assert item["fix"]["commands"] == ["mokutil --import %s" % secure_boot.SIGNING_CERT]
    enrolled = Answers(test_key="%s is already enrolled\n" % secure_boot.SIGNING_CERT)
    assert "secure-boot-module-unsigned" not in findings(tmp_path, enrolled)


def test_enrollment_pending(tmp_path):
    tree = secure_boot_node(tmp_path)
    assert "secure-boot-enrollment-pending" not in findings(tmp_path)
    tree.file("/sys/firmware/efi/efivars/MokNew-" + secure_boot.MOK_GUID, b"\x07\x00\x00\x00key")
    item = findings(tmp_path)["secure-boot-enrollment-pending"][0]
    assert item["severity"] == "warning" and "MokManager" in item["message"]


def test_newest_kernel_with_an_unsigned_module(tmp_path):
    tree = secure_boot_node(tmp_path)
    tree.file("/boot/vmlinuz-6.1.0-40-amd64", "stand-in kernel image")
    tree.file(MODULE % "6.1.0-40-amd64", UNSIGNED)
    item = findings(tmp_path)["secure-boot-newest-kernel-unsigned"][0]
    assert "6.1.0-40-amd64" in item["message"] and item["fix"]["commands"] == ["dkms autoinstall -k 6.1.0-40-amd64"]
    tree.file(MODULE % "6.1.0-40-amd64", SIGNED)
    assert "secure-boot-newest-kernel-unsigned" not in findings(tmp_path)


def test_an_upgrade_that_splits_the_set_names_the_package(tmp_path):
    tree = healthy(tmp_path)
    tree.package("libnvidia-ml1", trees.DRIVER + "-1")
    simulate = "Inst libnvidia-ml1 [%s-1] (999.1.1-1 Debian:12/stable [amd64])\n" % trees.DRIVER
    item = findings(tmp_path, Answers(simulate=simulate))["driver-set-split"][0]
    assert item["message"] == (
        "The next package upgrade would split the NVIDIA driver's version set: the next upgrade would move "
        "libnvidia-ml1 from %s-1 to 999.1.1-1 while nvidia-open-kernel-dkms stays at %s." % (
            trees.DRIVER, trees.DRIVER))
    assert "driver-set-split" not in findings(tmp_path)  # nothing to upgrade
