"""Auto mode (incident I2): with no path, containerd_runtime configures the containerd kubelet uses.

Two real private containerd daemons run side by side; a STAND-IN kubelet process
(tests/testbed/stand-ins/kubelet, shown in /proc as `kubelet`) talks to the first. The
module, left to discover, must edit the first one's file only; given the second's file
explicitly, it must refuse and name both.
"""
import json
import os
import socket
import subprocess
import sys

import pytest

import daemons
from ansible_runner import run_module, run_tasks
from ansible_collections.gpunode.nvidia.plugins.module_utils.cri import client as cri

STANDIN_KUBELET = os.path.join(daemons.REPO, "tests", "testbed", "stand-ins", "kubelet")


def free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture
def kubelet_on():
    started = []

    def start(ctrd):
        argv = ["bash", "-c", 'exec -a kubelet "$0" "$@"', sys.executable, STANDIN_KUBELET,
                "--container-runtime-endpoint=unix://" + ctrd.socket, "--healthz-port=%d" % free_port()]
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        assert b"healthy" in proc.stdout.readline()
        started.append(proc)
        return proc
    yield start
    for proc in started:
        proc.kill()
        proc.wait()


@pytest.mark.parametrize("release", ["bookworm", "sid"], ids=["containerd-1.6.20", "containerd-2.1.9"])
def test_auto_mode_configures_the_instance_kubelet_uses(release, private_containerd, kubelet_on):
    used, other = private_containerd(release), private_containerd(release)
    used.start(used.minimal_config())
    other.start(other.minimal_config())
    kubelet_on(used)
    other_before = other.read_config()

    # In one ansible-playbook run: auto mode, then the second instance's file named outright.
    result, refused = run_tasks("gpunode.nvidia.containerd_runtime", [
        ({"binary": daemons.STANDIN_RUNTIME}, False),
        ({"path": other.config_path, "binary": daemons.STANDIN_RUNTIME}, False)])
    assert result["changed"] and result["validated"], result
    assert result["path"] == used.config_path
    assert result["target"]["socket"] == used.socket
    assert result["target"]["selected_by"] == "kubelet"
    assert result["containerd_version"].split()[2].startswith(used.dist.version)

    # While kubelet talks to the first instance, the second one's file is refused.
    assert refused.get("failed")
    assert other.config_path in refused["msg"] and used.config_path in refused["msg"]
    assert "incident I2" in refused["msg"]
    assert other.read_config() == other_before

    used.restart()
    assert "nvidia" in cri.runtimes_from_status(used.client().status(verbose=True))
    assert "nvidia" not in cri.runtimes_from_status(other.client().status(verbose=True))
    assert other.read_config() == other_before


def test_discovery_passed_in_and_lock_taken_in_the_read_call(private_containerd, kubelet_on, tmp_path):
    """The role's way: its own gpu_node_facts result as `discovered`, the node lock in the module's read call."""
    used, other = private_containerd("bookworm"), private_containerd("bookworm")
    used.start(used.minimal_config())
    other.start(other.minimal_config())
    kubelet_on(used)
    discovery = run_module("gpunode.nvidia.gpu_node_facts", {"gather": ["runtimes", "kubelet", "target"]})
    lock = str(tmp_path / "gpunode-nvidia.lock")
    args = {"binary": daemons.STANDIN_RUNTIME, "discovered": discovery, "lock": {"path": lock, "owner": "run-1"}}

    checked = run_module("gpunode.nvidia.containerd_runtime", args, check=True)
    assert checked["changed"] and checked["lock_held"] is False and not os.path.exists(lock), checked
    result = run_module("gpunode.nvidia.containerd_runtime", args)
    assert result["changed"] and result["validated"] and result["path"] == used.config_path, result
    assert result["lock_held"] is True and json.load(open(lock))["owner"] == "run-1"
    os.unlink(lock)  # the role gives it back after the restart
    used.restart()
    again = run_module("gpunode.nvidia.containerd_runtime", args)
    assert not again["changed"] and again["lock_held"] is False and not os.path.exists(lock), again
    assert "nvidia" in cri.runtimes_from_status(used.client().status(verbose=True))
