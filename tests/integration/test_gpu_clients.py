"""gpunode.nvidia.gpu_clients for real, and role gpu_maintenance end to end.

- On localhost against a prepared /sys/module tree (refcnt, holders/ as the kernel shows them): a module held by a
  module outside the NVIDIA set unloads nothing and returns reboot_required with the evidence.
- In one systemd node container: the GPU client services are STAND-INS (units of the real names running
  `sleep`: no NVIDIA daemon runs without a GPU); systemd, the state file and the module are real. The role's
  cluster half talks to the Kubernetes API STAND-IN (tests/testbed/kube_api_standin.py) with the real client.
"""
import json
import os
import sys

import pytest

import nvidia_node
from ansible_runner import run_module

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "testbed"))
from kube_api_standin import KubeApiStandin, Node  # noqa: E402

STAND_IN_UNITS = ("nvidia-persistenced", "nvidia-dcgm", "nvidia-fabricmanager")
STATE_FILE = "/run/gpunode/gpu-clients.json"


def test_unload_blocked_by_a_holder_requires_a_reboot_and_unloads_nothing(tmp_path):
    for name, refcnt, holders in (("nvidia_drm", 0, []), ("nvidia_modeset", 1, ["nvidia_drm"]),
                                  ("nvidia", 2, ["nvidia_modeset", "nvidia_fs"])):
        (tmp_path / "module" / name / "holders").mkdir(parents=True)
        (tmp_path / "module" / name / "refcnt").write_text("%d\n" % refcnt)
        for holder in holders:
            (tmp_path / "module" / name / "holders" / holder).mkdir()
    state_file = tmp_path / "state" / "gpu-clients.json"
    result = run_module("gpunode.nvidia.gpu_clients", dict(state="stopped", unload_modules=True,
                                                           sysfs_root=str(tmp_path), state_file=str(state_file)))
    assert not result.get("failed"), result["msg"]
    assert result["reboot_required"] is True and result["unloaded"] == []
    assert result["evidence"][0] == "nvidia is held by module nvidia_fs (/sys/module/nvidia/holders)"
    assert "kernel modules left loaded, a reboot is required: nvidia is held by module nvidia_fs" in result["msg"]
    assert (tmp_path / "module" / "nvidia_drm").is_dir()


@pytest.fixture(scope="module")
def node():
    nvidia_node.ensure_image()
    container = nvidia_node.NodeContainer(prefix="gpunode-maint-clients")
    try:
        container.start()
        for unit in STAND_IN_UNITS:  # stand-ins: the real unit names, a process that just waits
            container.sh("printf '[Unit]\\nDescription=stand-in %s\\n[Service]\\nExecStart=/bin/sleep infinity\\n' "
                         ">/etc/systemd/system/%s.service" % (unit, unit))
        container.sh("systemctl daemon-reload")
        yield container
    finally:
        container.close()


def active(node):
    return {unit for unit in STAND_IN_UNITS
            if node.sh("systemctl is-active %s.service" % unit, check=False).stdout.strip() == "active"}


def clients(node, check=False, **args):
    task = {"name": "clients", "gpunode.nvidia.gpu_clients": args, "register": "out"}
    play = node.play([], check=check, post_tasks=[task])
    return play.result_of("clients")


def test_services_stopped_then_exactly_those_started(node):
    node.sh("systemctl start nvidia-persistenced nvidia-dcgm && systemctl stop nvidia-fabricmanager")
    would = clients(node, check=True, state="stopped")
    assert would["would"] == ["systemctl stop nvidia-dcgm.service", "systemctl stop nvidia-persistenced.service"]
    assert active(node) == {"nvidia-persistenced", "nvidia-dcgm"} and node.read(STATE_FILE) is None
    result = clients(node, state="stopped")
    assert result["stopped"] == ["nvidia-dcgm", "nvidia-persistenced"] and active(node) == set()
    assert json.loads(node.read(STATE_FILE)) == {"stopped": ["nvidia-dcgm", "nvidia-persistenced"]}
    assert clients(node, state="stopped")["changed"] is False
    result = clients(node, state="started")
    assert result["started"] == ["nvidia-persistenced", "nvidia-dcgm"]
    assert active(node) == {"nvidia-persistenced", "nvidia-dcgm"}  # fabric manager was off: stays off
    assert node.read(STATE_FILE) is None
    assert clients(node, state="started")["changed"] is False


def test_role_enter_and_leave_with_the_cluster(node, tmp_path):
    node.sh("systemctl start nvidia-persistenced nvidia-dcgm")
    with KubeApiStandin([Node("gpu-1"), Node("gpu-2")], pod_seconds=0.3) as api:
        api.add_gpu_pod("ml", "train-1", "gpu-1", labels={"app": "train"})
        api.add_pdb("ml", "train", {"app": "train"}, disruptions_allowed=1, refuse_first=1)
        api.add_operands("gpu-1", ("device-plugin", "dcgm-exporter"))
        common = {"gpu_maintenance_node_name": "gpu-1", "gpu_maintenance_owner": "partitioning",
                  "gpunode_kubeconfig": api.write_kubeconfig(str(tmp_path / "kubeconfig")),
                  "gpu_maintenance_retry_interval": 0.2, "gpu_maintenance_timeout": 30}
        enter = node.play([], extra_vars=common, post_tasks=[{"ansible.builtin.include_role": {
            "name": "gpunode.nvidia.gpu_maintenance", "tasks_from": "enter"}}])
        assert not enter.failed, enter.failure_messages()
        assert api.node("gpu-1")["spec"]["unschedulable"] is True
        assert api.evictions == [("ml", "train-1")] and api.operand_pods("gpu-1") == []
        assert active(node) == set()
        leave = node.play([], extra_vars=common, post_tasks=[{"ansible.builtin.include_role": {
            "name": "gpunode.nvidia.gpu_maintenance", "tasks_from": "leave"}}])
        assert not leave.failed, leave.failure_messages()
        assert not api.node("gpu-1")["spec"].get("unschedulable")
        assert len(api.operand_pods("gpu-1")) == 2 and active(node) == {"nvidia-persistenced", "nvidia-dcgm"}
        assert api.peak_unavailable == 1


def test_role_without_a_kubeconfig_runs_the_node_half_only(node):
    node.sh("systemctl start nvidia-persistenced")
    enter = node.play([], post_tasks=[{"ansible.builtin.include_role": {
        "name": "gpunode.nvidia.gpu_maintenance", "tasks_from": "enter"}}])
    assert not enter.failed, enter.failure_messages()
    assert any("only their GPU clients are stopped" in str(m) for m in enter.messages())
    assert "nvidia-persistenced" not in active(node)
    leave = node.play([], post_tasks=[{"ansible.builtin.include_role": {
        "name": "gpunode.nvidia.gpu_maintenance", "tasks_from": "leave"}}])
    assert not leave.failed, leave.failure_messages()
    assert "nvidia-persistenced" in active(node)
