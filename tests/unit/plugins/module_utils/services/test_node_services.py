"""node_services over GPU node trees with a recording systemctl stand-in (no GPU, no systemd here).

The systemd stand-in keeps enabled/active/failed per unit and answers systemctl as systemd does
(is-enabled/is-active rc 0 or not); the tree gives sysfs, /proc, unit files and dpkg status.
"""
from __future__ import absolute_import, division, print_function
__metaclass__ = type


import os
import sys

import pytest
from unit_paths import UNIT_DIR

sys.path.insert(0, UNIT_DIR)
import gpu_health_trees as trees  # noqa: E402

from ansible_collections.gpunode.nvidia.plugins.module_utils.services import node_services  # noqa: E402


class FakeSystemd(object):
    def __init__(self, enabled=(), active=(), fail_start=(), tree=None, spec_driver=trees.DRIVER):
        self.enabled, self.active = set(enabled), set(active)
        self.failed, self.fail_start = set(), set(fail_start)
        self.calls, self.tree, self.spec_driver = [], tree, spec_driver

    def __call__(self, argv):
        self.calls.append(argv)
        if argv[0] != "systemctl":
            if argv[1:3] == ["cdi", "generate"]:
                path = argv[3].split("=", 1)[1]
                os.makedirs(os.path.dirname(path), exist_ok=True)
                with open(path, "w") as handle:
                    handle.write(trees.CDI_SPEC % {"driver": self.spec_driver})
                return 0, "", ""
            return 127, "", "not found"
        verb, unit = argv[1], argv[2]
        if verb == "is-enabled":
            return (0, "enabled\n", "") if unit in self.enabled else (1, "disabled\n", "")
        if verb == "is-active":
            return (0, "active\n", "") if unit in self.active else (3, "inactive\n", "")
        if verb == "enable":
            self.enabled.add(unit)
        elif verb in ("start", "restart"):
            if unit in self.fail_start:
                self.failed.add(unit)
                return 1, "", "Job for %s failed because the control process exited with error code." % unit
            self.active.add(unit)
        elif verb == "reset-failed":
            self.failed.discard(unit)
        return 0, "", ""

    def verbs(self, unit=None):
        return [" ".join(c[1:2]) for c in self.calls if c[0] == "systemctl" and (unit is None or c[2] == unit)
                and c[1] not in ("is-enabled", "is-active")]


def ensure(root, runner, **kwargs):
    return node_services.ensure_node_services(root=str(root), runner=runner, **kwargs)


def test_no_gpu_skips_with_a_clear_message(tmp_path):
    tree = trees.new(tmp_path)
    tree.unit("nvidia-persistenced.service", exec_start="/usr/bin/nvidia-persistenced", enabled=False)
    systemd = FakeSystemd()
    result = ensure(tmp_path, systemd)
    assert result["gpu"] is False and result["failed"] is False and result["changed"] is False
    assert "No NVIDIA GPU" in result["msg"]
    assert systemd.calls == []


def test_bake_enables_persistenced_without_gpu_and_starts_nothing(tmp_path):
    tree = trees.new(tmp_path)
    tree.unit("nvidia-persistenced.service", exec_start="/usr/bin/nvidia-persistenced", enabled=False)
    systemd = FakeSystemd()
    result = ensure(tmp_path, systemd, start=False)
    assert result["failed"] is False and result["changed"] is True
    assert systemd.verbs() == ["enable"]
    assert result["cdi"] is None and "first boot" in result["msg"]
    again = ensure(tmp_path, systemd, start=False)
    assert again["changed"] is False


def test_gpu_node_starts_persistenced_and_keeps_a_matching_spec(tmp_path):
    trees.gpu_node(trees.new(tmp_path))
    systemd = FakeSystemd(enabled=["nvidia-persistenced.service"])
    result = ensure(tmp_path, systemd)
    assert result["failed"] is False, result["msg"]
    assert result["persistenced"]["active"] is True and systemd.verbs() == ["start"]
    assert result["cdi"]["matches_driver"] and not result["cdi"]["refreshed"]
    assert ensure(tmp_path, systemd)["changed"] is False


def test_check_mode_changes_nothing(tmp_path):
    trees.gpu_node(trees.new(tmp_path), cdi=False)
    systemd = FakeSystemd()
    result = ensure(tmp_path, systemd, check_mode=True)
    assert result["changed"] is True
    assert "systemctl enable nvidia-persistenced.service" in result["actions"]
    assert any("cdi generate" in action for action in result["actions"])
    assert systemd.verbs() == [] and not os.path.exists(tmp_path / "var/run/cdi/nvidia.yaml")


def test_missing_spec_is_generated_with_nvidia_ctk(tmp_path):
    trees.gpu_node(trees.new(tmp_path), cdi=False)
    systemd = FakeSystemd(enabled=["nvidia-persistenced.service"], active=["nvidia-persistenced.service"])
    result = ensure(tmp_path, systemd)
    assert result["cdi"]["method"] == "nvidia-ctk cdi generate" and result["cdi"]["refreshed"]
    assert (tmp_path / "var/run/cdi/nvidia.yaml").read_text().count(trees.DRIVER) == 4
    assert ensure(tmp_path, systemd)["changed"] is False


def test_stale_spec_is_refreshed(tmp_path):
    trees.gpu_node(trees.new(tmp_path))
    (tmp_path / "var/run/cdi/nvidia.yaml").write_text(trees.CDI_SPEC % {"driver": "550.163.01"})
    systemd = FakeSystemd(enabled=["nvidia-persistenced.service"], active=["nvidia-persistenced.service"])
    result = ensure(tmp_path, systemd)
    assert result["cdi"]["refreshed"] and "does not describe" in result["cdi"]["reason"]


def test_refresh_asked_regenerates_a_matching_spec(tmp_path):
    trees.gpu_node(trees.new(tmp_path))
    systemd = FakeSystemd(enabled=["nvidia-persistenced.service"], active=["nvidia-persistenced.service"])
    result = ensure(tmp_path, systemd, refresh_cdi=True)
    assert result["cdi"]["refreshed"] and result["changed"]


def test_refresh_unit_is_reset_then_restarted(tmp_path):
    tree = trees.gpu_node(trees.new(tmp_path), cdi=False)
    tree.unit("nvidia-cdi-refresh.service", exec_start="/usr/bin/nvidia-ctk cdi generate", enabled=False)
    systemd = FakeSystemd(enabled=["nvidia-persistenced.service"], active=["nvidia-persistenced.service"])
    systemd.failed.add("nvidia-cdi-refresh.service")  # failed at boot, before the driver was usable
    result = ensure(tmp_path, systemd)
    assert systemd.verbs("nvidia-cdi-refresh.service") == ["reset-failed", "restart"]
    assert result["cdi"]["method"] == "nvidia-cdi-refresh.service" and not result["failed"]
    assert "nvidia-cdi-refresh.service" not in systemd.failed


def test_failed_refresh_unit_is_not_left_failed(tmp_path):
    tree = trees.gpu_node(trees.new(tmp_path), cdi=False)
    tree.unit("nvidia-cdi-refresh.service", exec_start="/usr/bin/nvidia-ctk cdi generate", enabled=False)
    systemd = FakeSystemd(enabled=["nvidia-persistenced.service"], active=["nvidia-persistenced.service"],
                          fail_start=["nvidia-cdi-refresh.service"])
    result = ensure(tmp_path, systemd)
    assert result["failed"] and "journalctl -u nvidia-cdi-refresh.service" in result["msg"]
    assert systemd.verbs("nvidia-cdi-refresh.service") == ["reset-failed", "restart", "reset-failed"]
    assert "nvidia-cdi-refresh.service" not in systemd.failed


def test_driver_not_loaded_enables_but_starts_nothing(tmp_path):
    tree = trees.gpu_node(trees.new(tmp_path), cdi=False)
    os.remove(tree.local("/proc/driver/nvidia/version"))
    os.remove(tree.local("/sys/module/nvidia/version"))
    systemd = FakeSystemd()
    result = ensure(tmp_path, systemd)
    assert not result["failed"] and systemd.verbs() == ["enable"]
    assert result["cdi"] is None and "not loaded" in result["msg"]


def test_nvswitch_node_starts_fabric_manager_at_the_driver_version(tmp_path):
    trees.nvswitch_node(trees.new(tmp_path))
    systemd = FakeSystemd(enabled=["nvidia-persistenced.service"], active=["nvidia-persistenced.service"])
    result = ensure(tmp_path, systemd)
    assert result["nvswitch"] and not result["failed"], result["msg"]
    assert result["fabricmanager"]["version"] == trees.DRIVER
    assert systemd.verbs("nvidia-fabricmanager.service") == ["enable", "start"]


def test_fabric_manager_at_another_version_fails_and_starts_nothing(tmp_path):
    trees.nvswitch_node(trees.new(tmp_path), fabricmanager="570.133.20")
    systemd = FakeSystemd(enabled=["nvidia-persistenced.service"], active=["nvidia-persistenced.service"])
    result = ensure(tmp_path, systemd)
    assert result["failed"] and "570.133.20" in result["msg"] and trees.DRIVER in result["msg"]
    assert systemd.verbs("nvidia-fabricmanager.service") == []


def test_nvswitch_without_fabric_manager_fails(tmp_path):
    trees.nvswitch_node(trees.new(tmp_path), fabricmanager=None)
    result = ensure(tmp_path, FakeSystemd())
    assert result["failed"] and "without fabric manager" in result["msg"]


def test_fourth_generation_nvswitch_needs_nvlsm(tmp_path):
    trees.nvswitch_node(trees.new(tmp_path), device="0x2901")
    result = ensure(tmp_path, FakeSystemd())
    assert result["failed"] and "NVLSM" in result["msg"]
    other = tmp_path / "with-nvlsm"
    trees.nvswitch_node(trees.new(other), device="0x2901", nvlsm=True)
    assert not ensure(other, FakeSystemd())["failed"]


def test_gpu_operator_toolkit_keeps_its_cdi_spec(tmp_path):
    tree = trees.gpu_node(trees.new(tmp_path), cdi=False)
    tree.mkdir("/usr/local/nvidia/toolkit")
    systemd = FakeSystemd(enabled=["nvidia-persistenced.service"], active=["nvidia-persistenced.service"])
    result = ensure(tmp_path, systemd)
    assert result["cdi"] is None and "GPU operator" in result["msg"]
    assert result["operator_toolkit"] == ["install directory /usr/local/nvidia/toolkit"]


def test_missing_persistence_daemon_is_a_warning_not_a_failure(tmp_path):
    trees.gpu_node(trees.new(tmp_path), persistenced=False)
    result = ensure(tmp_path, FakeSystemd())
    assert not result["failed"] and result["persistenced"]["present"] is False
    assert result["warnings"] and "nvidia-persistenced" in result["warnings"][0]


# --- fabric manager install (install_fabricmanager: the role installs what the module computed) -------------

def test_missing_fabric_manager_is_planned_at_the_driver_version(tmp_path):
    trees.nvswitch_node(trees.new(tmp_path), fabricmanager=None)
    systemd = FakeSystemd(enabled=["nvidia-persistenced.service"], active=["nvidia-persistenced.service"])
    result = ensure(tmp_path, systemd, install_fabricmanager=True)
    fabric = result["fabricmanager"]
    assert not result["failed"], result["msg"]
    assert fabric["package_manager"] == "apt"
    assert fabric["install"] == ["nvidia-fabricmanager-570=%s-*" % trees.DRIVER]
    assert systemd.verbs("nvidia-fabricmanager.service") == []  # started once installed, not before
    assert "fabric manager to install at the driver's version %s" % trees.DRIVER in result["msg"]


def test_fabric_manager_at_another_version_is_stopped_and_planned_at_the_driver_version(tmp_path):
    trees.nvswitch_node(trees.new(tmp_path), fabricmanager="570.133.20")
    systemd = FakeSystemd(enabled=["nvidia-persistenced.service", "nvidia-fabricmanager.service"],
                          active=["nvidia-persistenced.service", "nvidia-fabricmanager.service"])
    result = ensure(tmp_path, systemd, install_fabricmanager=True)
    fabric = result["fabricmanager"]
    assert not result["failed"] and result["changed"], result["msg"]
    assert fabric["install"] == ["nvidia-fabricmanager-570=%s-*" % trees.DRIVER] and fabric["active"] is False
    assert systemd.verbs("nvidia-fabricmanager.service") == ["stop"]


def test_check_mode_plans_the_install_and_stops_nothing(tmp_path):
    trees.nvswitch_node(trees.new(tmp_path), fabricmanager="570.133.20")
    systemd = FakeSystemd(enabled=["nvidia-persistenced.service", "nvidia-fabricmanager.service"],
                          active=["nvidia-persistenced.service", "nvidia-fabricmanager.service"])
    result = ensure(tmp_path, systemd, check_mode=True, install_fabricmanager=True)
    assert result["fabricmanager"]["install"] and "systemctl stop nvidia-fabricmanager.service" in result["actions"]
    assert systemd.verbs() == []


def test_matching_fabric_manager_plans_no_install(tmp_path):
    trees.nvswitch_node(trees.new(tmp_path))
    systemd = FakeSystemd(enabled=["nvidia-persistenced.service"], active=["nvidia-persistenced.service"])
    result = ensure(tmp_path, systemd, install_fabricmanager=True)
    assert not result["failed"] and result["fabricmanager"]["install"] == []
    assert systemd.verbs("nvidia-fabricmanager.service") == ["enable", "start"]


def test_fourth_generation_plans_nvlsm_beside_a_matching_fabric_manager(tmp_path):
    trees.nvswitch_node(trees.new(tmp_path), device="0x2901")
    result = ensure(tmp_path, FakeSystemd(), install_fabricmanager=True)
    assert not result["failed"] and result["fabricmanager"]["install"] == ["nvlsm"]
    missing = tmp_path / "missing"
    trees.nvswitch_node(trees.new(missing), device="0x2901", fabricmanager=None)
    assert ensure(missing, FakeSystemd(), install_fabricmanager=True)["fabricmanager"]["install"] == [
        "nvidia-fabricmanager-570=%s-*" % trees.DRIVER, "nvlsm"]


def test_driver_not_loaded_plans_nothing_and_says_why(tmp_path):
    tree = trees.nvswitch_node(trees.new(tmp_path), fabricmanager=None)
    os.remove(tree.local("/proc/driver/nvidia/version"))
    os.remove(tree.local("/sys/module/nvidia/version"))
    result = ensure(tmp_path, FakeSystemd(), install_fabricmanager=True)
    assert result["failed"] and result["fabricmanager"]["install"] == []
    assert "driver is not loaded" in result["msg"]


def test_without_the_install_option_the_message_names_the_exact_packages(tmp_path):
    trees.nvswitch_node(trees.new(tmp_path), fabricmanager=None)
    result = ensure(tmp_path, FakeSystemd())
    assert result["failed"] and result["fabricmanager"]["install"] == []
    assert "apt: nvidia-fabricmanager-570=%s-*, dnf: nvidia-fabric-manager-%s" % (trees.DRIVER, trees.DRIVER) in \
        result["msg"]


@pytest.mark.parametrize("manager, driver, fabric, nvlsm, specs", [
    ("apt", "570.172.08", True, False, ["nvidia-fabricmanager-570=570.172.08-*"]),
    ("apt", "590.44.01", True, True, ["nvidia-fabricmanager=590.44.01-*", "nvlsm"]),
    ("dnf", "570.172.08", True, False, ["nvidia-fabric-manager-570.172.08"]),
    ("yum", "535.261.03", False, True, ["nvlsm"]),
])
def test_fabricmanager_packages(manager, driver, fabric, nvlsm, specs):
    assert node_services.fabricmanager_packages(manager, driver, fabric, nvlsm) == specs


def test_package_manager_of_a_tree(tmp_path):
    assert node_services.package_manager(str(tmp_path)) is None
    (tmp_path / "usr/bin").mkdir(parents=True)
    (tmp_path / "usr/bin/dnf").write_text("")
    assert node_services.package_manager(str(tmp_path)) == "dnf"
    trees.gpu_node(trees.new(tmp_path))  # writes dpkg status
    assert node_services.package_manager(str(tmp_path)) == "apt"
