"""gpu_doctor's health rules (doctor_health.py): each fires on a GPU node tree with the problem and stays
silent on a healthy one.

Trees come from gpu_health_trees.py; the commands the rules run on a live node (journalctl -k -b,
nvidia-smi -q -x, systemctl) are answered by a recorded-output runner passed to diagnose(run=...):
kernel log lines in the format the driver logs Xids, and nvidia-smi XML in NVIDIA's documented layout.
No GPU, driver or fabric manager exists here: these are the recorded stand-ins, and the rule code
is the code that runs on a real node.
"""
from __future__ import absolute_import, division, print_function
__metaclass__ = type


import os
import sys

import pytest
from unit_paths import UNIT_DIR

sys.path.insert(0, UNIT_DIR)
import gpu_health_trees as trees  # noqa: E402
import node_trees  # noqa: E402

from ansible_collections.gpunode.nvidia.plugins.module_utils.doctor import health as doctor_health  # noqa: E402

from ansible_collections.gpunode.nvidia.plugins.module_utils.doctor import rules as doctor_rules  # noqa: E402

HEALTH = set(spec[0] for spec in doctor_health.RULES)
BOOT = "2026-11-23T08:00:01+0000 node1 kernel: Linux version 6.1.0-37-amd64 (debian-kernel@lists.debian.org)"


def xid_line(code, text, device="0000:65:00"):
    return "2026-11-23T09:12:44+0000 node1 kernel: NVRM: Xid (PCI:%s): %d, pid=4242, name=python3, %s" % (
        device, code, text)


class Recorded(object):
    """Recorded outputs of the commands the rules run; anything else is 'not found'."""

    def __init__(self, kernel_log=BOOT, smi=None, units=None):
        self.outputs = {"journalctl": (0, kernel_log + "\n", "")}
        if smi is not None:
            self.outputs["nvidia-smi"] = (0, smi, "")
        self.units = units or {}

    def __call__(self, argv):
        if argv[0] == "systemctl":
            state = self.units.get((argv[1], argv[2]))
            return (0 if state in ("active", "failed") else 3, (state or "inactive") + "\n", "")
        return self.outputs.get(os.path.basename(argv[0]), (127, "", "not found"))


def healthy(root):
    tree = trees.gpu_node(trees.new(root))
    tree.process(["/usr/bin/nvidia-persistenced", "--user", "nvidia-persistenced"],
                 service="nvidia-persistenced.service")
    tree.file("/boot/vmlinuz-" + trees.KERNEL, "stand-in kernel image")
    return tree


def health_findings(root, runner=None):
    result = doctor_rules.diagnose(str(root), query_cri=False, run=runner or Recorded(smi=trees.smi_xml()))
    fired = {}
    for item in result["findings"]:
        assert item["rule"] != "doctor-rule-error", item["message"]
        if item["rule"] in HEALTH:
            assert item["message"] and item["evidence"] and item["fix"]["summary"], item
            fired.setdefault(item["rule"], []).append(item)
    return fired


def test_health_rules_are_in_the_catalogue():
    assert HEALTH <= set(doctor_rules.RULES_BY_ID)


def test_healthy_gpu_node_is_silent(tmp_path):
    healthy(tmp_path)
    assert health_findings(tmp_path) == {}


def test_healthy_gpu_node_without_nvidia_smi_is_silent(tmp_path):
    healthy(tmp_path)
    assert health_findings(tmp_path, Recorded()) == {}


# --- Xid ---------------------------------------------------------------------------------------------

def test_xid_79_is_critical_with_its_meaning(tmp_path):
    healthy(tmp_path)
    log = "\n".join([BOOT, xid_line(79, "GPU has fallen off the bus.")])
    fired = health_findings(tmp_path, Recorded(kernel_log=log, smi=trees.smi_xml()))
    item = fired["gpu-xid-errors"][0]
    assert item["severity"] == "critical" and "Xid 79 (GPU has fallen off the bus) x1 on 0000:65:00" in item["message"]
    assert "fallen off the bus." in item["evidence"][0]["text"]
    assert "kubectl drain NODE --ignore-daemonsets" in item["fix"]["commands"]


def test_application_xids_are_warnings(tmp_path):
    healthy(tmp_path)
    log = "\n".join([BOOT, xid_line(13, "Graphics SM Warp Exception"), xid_line(31, "MMU Fault"),
                     xid_line(13, "Graphics Exception")])
    item = health_findings(tmp_path, Recorded(kernel_log=log, smi=trees.smi_xml()))["gpu-xid-errors"][0]
    assert item["severity"] == "warning" and "Xid 13 (Graphics engine exception) x2" in item["message"]
    assert item["fix"]["commands"] == []


@pytest.mark.parametrize("code", sorted(doctor_health.XID_MEANINGS))
def test_every_common_xid_has_a_meaning(tmp_path, code):
    healthy(tmp_path)
    log = "\n".join([BOOT, xid_line(code, "recorded")])
    item = health_findings(tmp_path, Recorded(kernel_log=log, smi=trees.smi_xml()))["gpu-xid-errors"][0]
    assert "Xid %d (%s)" % (code, doctor_health.XID_MEANINGS[code][0]) in item["message"]


def test_xids_of_an_earlier_boot_in_kern_log_are_ignored(tmp_path):
    tree = healthy(tmp_path)
    tree.file("/var/log/kern.log", "\n".join([BOOT, xid_line(79, "GPU has fallen off the bus."), BOOT, ""]))
    assert "gpu-xid-errors" not in health_findings(tmp_path, Recorded(kernel_log=""))
    tree.file("/var/log/kern.log", "\n".join([BOOT, BOOT, xid_line(48, "DBE (double bit error)"), ""]))
    assert "gpu-xid-errors" in health_findings(tmp_path, Recorded(kernel_log=""))


# --- ECC and remapping --------------------------------------------------------------------------------

@pytest.mark.parametrize("problem, text", [
    (dict(dram_unc="2"), "2 uncorrectable ECC error(s)"),
    (dict(remap_pending="Yes", remap_unc="1"), "row remap is pending"),
    (dict(remap_failure="Yes"), "row remap failed"),
    (dict(pending_retirement="Yes"), "retired pages are pending"),
])
def test_memory_errors_fire(tmp_path, problem, text):
    healthy(tmp_path)
    item = health_findings(tmp_path, Recorded(smi=trees.smi_xml(**problem)))["gpu-memory-errors"][0]
    assert text in item["message"] and "00000000:65:00.0" in item["message"]
    assert "nvidia-smi -r -i 00000000:65:00.0" in item["fix"]["commands"]


def test_pre_hopper_double_bit_layout_is_read(tmp_path):
    healthy(tmp_path)
    old = trees.smi_xml().replace("<dram_uncorrectable>0</dram_uncorrectable>\n      </volatile>",
                                  "<double_bit><device_memory>1</device_memory><total>1</total></double_bit>\n"
                                  "      </volatile>", 1)
    assert "gpu-memory-errors" in health_findings(tmp_path, Recorded(smi=old))


# --- persistence ----------------------------------------------------------------------------------------

def test_persistence_off_in_nvidia_smi(tmp_path):
    healthy(tmp_path)
    item = health_findings(tmp_path, Recorded(smi=trees.smi_xml(persistence="Disabled")))["persistence-mode-off"][0]
    assert "00000000:65:00.0" in item["message"] and item["fix"]["vars"] == {"gpunode_services_stage": True}


def test_persistence_daemon_installed_but_not_running(tmp_path):
    tree = trees.gpu_node(trees.new(tmp_path))  # unit installed, no daemon process
    assert "persistence-mode-off" not in health_findings(tmp_path, Recorded())  # an image: nothing runs
    tree.process(["/usr/sbin/sshd", "-D"])  # a booted node
    assert "persistence-mode-off" in health_findings(tmp_path, Recorded())


# --- fabric manager -------------------------------------------------------------------------------------

def nvswitch(root, **kwargs):
    tree = trees.nvswitch_node(trees.new(root), **kwargs)
    tree.process(["/usr/bin/nvidia-persistenced"], service="nvidia-persistenced.service")
    return tree


def test_fabric_manager_running_at_the_driver_version_is_silent(tmp_path):
    nvswitch(tmp_path)
    units = {("is-active", "nvidia-fabricmanager.service"): "active"}
    assert "fabricmanager-unhealthy" not in health_findings(tmp_path, Recorded(smi=trees.smi_xml(), units=units))


def test_fabric_manager_stopped(tmp_path):
    nvswitch(tmp_path)
    item = health_findings(tmp_path)["fabricmanager-unhealthy"][0]
    assert "not running" in item["message"]


def test_fabric_manager_at_another_version(tmp_path):
    nvswitch(tmp_path, fabricmanager="570.133.20")
    item = health_findings(tmp_path)["fabricmanager-unhealthy"][0]
    assert "570.133.20 is not the driver's version %s" % trees.DRIVER in item["message"]
    assert "nvidia-fabricmanager-570=%s-*" % trees.DRIVER in item["fix"]["summary"]


def test_fabric_manager_missing(tmp_path):
    nvswitch(tmp_path, fabricmanager=None)
    assert "without fabric manager" in health_findings(tmp_path)["fabricmanager-unhealthy"][0]["message"]


# --- CDI --------------------------------------------------------------------------------------------------

def test_stale_cdi_spec(tmp_path):
    tree = healthy(tmp_path)
    tree.file("/var/run/cdi/nvidia.yaml", trees.CDI_SPEC % {"driver": "550.163.01"})
    item = health_findings(tmp_path)["cdi-spec-stale"][0]
    assert "does not name the running driver %s" % trees.DRIVER in item["message"]
    assert item["fix"]["vars"] == {"node_services_refresh_cdi": True}


def test_missing_cdi_spec_while_the_refresh_unit_is_installed(tmp_path):
    tree = healthy(tmp_path)
    os.remove(tree.local("/var/run/cdi/nvidia.yaml"))
    assert "cdi-spec-stale" not in health_findings(tmp_path)  # nothing asks for CDI
    tree.unit("nvidia-cdi-refresh.service", exec_start="/usr/bin/nvidia-ctk cdi generate", enabled=False)
    assert "no CDI spec" in health_findings(tmp_path)["cdi-spec-stale"][0]["message"]


def test_failed_refresh_unit(tmp_path):
    tree = healthy(tmp_path)
    tree.unit("nvidia-cdi-refresh.service", exec_start="/usr/bin/nvidia-ctk cdi generate", enabled=False)
    units = {("is-failed", "nvidia-cdi-refresh.service"): "failed"}
    item = health_findings(tmp_path, Recorded(smi=trees.smi_xml(), units=units))["cdi-spec-stale"][0]
    assert "nvidia-cdi-refresh.service is failed" in item["message"]


# --- toolkit CVE ----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("version, fires", [("1.17.7-1", True), ("1.16.2-1", True), ("1.17.8~rc.1-1", True),
                                            ("1.17.8-1", False), ("1.18.0-1", False)])
def test_toolkit_cve_minimum(tmp_path, version, fires):
    tree = healthy(tmp_path)
    for name in ("nvidia-container-toolkit", "nvidia-container-toolkit-base", "libnvidia-container-tools",
                 "libnvidia-container1"):
        tree.package(name, version)
    fired = health_findings(tmp_path)
    assert ("toolkit-vulnerable" in fired) is fires
    if fires:
        assert "CVE-2025-23266" in fired["toolkit-vulnerable"][0]["message"]
        # The table's minimum, past every bulletin: the fix leaves no toolkit-below-security-minimum behind.
        assert fired["toolkit-vulnerable"][0]["fix"]["vars"]["nvidia_container_toolkit_version"] == "1.19.1-1"


# --- containerd 1.6 and the operator's CDI ------------------------------------------------------------------

OPERATOR_DROPIN = """version = 2
[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia-cdi]
  runtime_type = "io.containerd.runc.v2"
  [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia-cdi.options]
    BinaryName = "/usr/local/nvidia/toolkit/nvidia-container-runtime.cdi"
"""


def test_containerd_16_with_the_operators_cdi(tmp_path):
    tree, _expect = node_trees.build("kubeadm-containerd", tmp_path)
    tree.mkdir("/usr/local/nvidia/toolkit")
    tree.file("/etc/containerd/conf.d/99-nvidia.toml", OPERATOR_DROPIN)
    fired = health_findings(tmp_path, Recorded())
    item = fired["containerd-cdi-unsupported"][0]
    assert "containerd 1.6.20~ds1-1+deb12u3" in item["message"]
    assert item["fix"]["gpu_operator"]["helm_values"] == {"cdi": {"enabled": False}}
    assert any(e.get("path") == "/etc/containerd/conf.d/99-nvidia.toml" for e in item["evidence"])


def test_containerd_16_without_cdi_and_containerd_17_with_it_are_silent(tmp_path):
    node_trees.build("kubeadm-containerd", tmp_path / "a")
    assert "containerd-cdi-unsupported" not in health_findings(tmp_path / "a", Recorded())
    tree, _expect = node_trees.build("kubeadm-containerd", tmp_path / "b")
    tree.package("containerd", "1.7.24~ds1-6+deb13u1")
    tree.file("/etc/containerd/conf.d/99-nvidia.toml", OPERATOR_DROPIN)
    assert "containerd-cdi-unsupported" not in health_findings(tmp_path / "b", Recorded())


# --- DKMS and the newest kernel -----------------------------------------------------------------------------

def test_newest_kernel_without_the_module(tmp_path):
    tree = healthy(tmp_path)
    tree.file("/boot/vmlinuz-6.1.0-40-amd64", "stand-in kernel image")
    tree.mkdir("/lib/modules/6.1.0-40-amd64/kernel")
    item = health_findings(tmp_path)["dkms-newest-kernel-missing"][0]
    assert "6.1.0-40-amd64" in item["message"] and "dkms autoinstall -k 6.1.0-40-amd64" in item["fix"]["commands"]
    tree.file("/lib/modules/6.1.0-40-amd64/updates/dkms/nvidia.ko.xz", "stand-in module")
    assert "dkms-newest-kernel-missing" not in health_findings(tmp_path)


def test_an_older_kernel_without_the_module_is_not_a_finding(tmp_path):
    tree = healthy(tmp_path)
    tree.file("/boot/vmlinuz-6.1.0-9-amd64", "stand-in kernel image")
    tree.mkdir("/lib/modules/6.1.0-9-amd64/kernel")
    assert "dkms-newest-kernel-missing" not in health_findings(tmp_path)


# --- GPU operator coexistence ---------------------------------------------------------------------------------

def test_operator_toolkit_is_reported_with_the_helm_values(tmp_path):
    tree = healthy(tmp_path)
    tree.mkdir("/usr/local/nvidia/toolkit")
    item = health_findings(tmp_path)["gpu-operator-toolkit"][0]
    assert item["severity"] == "warning" and "two owners" in item["message"]  # host packages too
    assert item["fix"]["gpu_operator"]["helm_values"] == {"driver": {"enabled": False}, "toolkit": {"enabled": False}}
    assert "cdi-spec-stale" not in health_findings(tmp_path)  # the operator owns the spec
