"""Module gpu_mig_layout for real (ansible's executor on localhost) against the STAND-IN nvidia-smi and
nvidia-mig-parted (tests/testbed/stand-ins/: no GPU here; they keep the MIG state in a JSON file)."""
import os
import subprocess

import pytest

from ansible_runner import REPO, run_module

STANDINS = os.path.join(REPO, "tests", "testbed", "stand-ins")


@pytest.fixture
def node(tmp_path, monkeypatch):
    monkeypatch.setenv("NVIDIA_STANDIN_MIG_STATE", str(tmp_path / "mig.json"))
    monkeypatch.setenv("NVIDIA_STANDIN_SYSFS", str(tmp_path / "sys"))
    monkeypatch.setenv("ANSIBLE_PYTHON_INTERPRETER", "/usr/bin/python3")

    def smi(*args):
        return subprocess.run([os.path.join(STANDINS, "nvidia-smi")] + list(args), stdout=subprocess.PIPE,
                              universal_newlines=True, check=False).stdout

    def layout(name, check=False, **args):
        args.update(name=name, state="applied", config_path=str(tmp_path / "mig-parted.yaml"))
        return run_module("gpunode.nvidia.gpu_mig_layout", args, path_prepend=[STANDINS], check=check)

    def modes():
        return smi("--query-gpu=index,mig.mode.current,mig.mode.pending", "--format=csv,noheader").split("\n")[0]

    smi("--standin-init", "H100-80GB")
    layout.modes = modes
    layout.config = tmp_path / "mig-parted.yaml"
    layout.sysfs = tmp_path / "sys"
    return layout


def test_check_mode_then_apply_then_unchanged(node):
    checked = node("all-balanced", check=True)
    assert checked["changed"] is True
    assert checked["msg"] == "MIG layout all-balanced is not applied; MIG mode changes on GPU 0 (a GPU reset)."
    assert node.modes() == "0, Disabled, Disabled"
    assert not node.config.exists()
    applied = node("all-balanced")
    assert applied["changed"] is True
    assert applied["msg"] == "MIG layout all-balanced applied; GPU 0 reset for the new MIG mode."
    assert applied["expected_allocatable"] == {"nvidia.com/mig-1g.10gb": 2, "nvidia.com/mig-2g.20gb": 1,
                                               "nvidia.com/mig-3g.40gb": 1}
    assert node.modes() == "0, Enabled, Enabled"
    again = node("all-balanced")
    assert again["changed"] is False and again["msg"] == "MIG layout all-balanced is applied."
    changed = node("all-1g.10gb")
    assert changed["changed"] is True and changed["reset"] == []


def test_a_profile_the_gpu_lacks_fails_before_any_change(node):
    result = node("mine", layout=[{"devices": "all", "mig-enabled": True, "mig-devices": {"1g.5gb": 7}}])
    assert result["failed"] is True
    assert result["msg"].startswith("The MIG layout mine cannot be applied; nothing was changed: GPU 0 (NVIDIA H100 "
                                    "80GB HBM3) has no MIG profile 1g.5gb; it offers 1g.10gb (up to 7), ")
    assert node.modes() == "0, Disabled, Disabled"


def test_a_blocked_reset_leaves_the_node_as_it_was(node):
    (node.sysfs / "module" / "nvidia_drm").mkdir(parents=True)
    result = node("all-balanced")
    assert result["failed"] is True
    assert "In use by another client" in result["msg"]
    assert "The MIG mode change was withdrawn: the GPUs are as before." in result["msg"]
    assert "Traceback" not in result.get("module_stderr", "")
    assert node.modes() == "0, Disabled, Disabled"
    assert not node.config.exists()
