"""Without tomlkit or kubernetes on the controller, the tasks that need them fail with the install line.

The import failure is simulated with a package of the same name that raises ImportError, put first
on the controller's PYTHONPATH; every other task of the play still runs.
"""
import json
import os
import subprocess
import sys

import pytest
from unit_paths import REPO


@pytest.fixture()
def without(tmp_path):
    def hide(*packages):
        shadow = tmp_path / "shadow"
        for package in packages:
            (shadow / package).mkdir(parents=True)
            (shadow / package / "__init__.py").write_text("raise ImportError(%r)\n" % ("No module named %s" % package))
        return str(shadow)
    return hide


def run_play(tmp_path, shadow, tasks):
    playbook = tmp_path / "play.yml"
    playbook.write_text(json.dumps([{"hosts": "localhost", "gather_facts": False, "tasks": tasks}]))
    env = dict(os.environ, PYTHONPATH=shadow, ANSIBLE_STDOUT_CALLBACK="ansible.builtin.json",
               ANSIBLE_COLLECTIONS_PATH=os.path.join(REPO, ".cache", "collections"))
    proc = subprocess.run([os.path.join(os.path.dirname(sys.executable), "ansible-playbook"), "-i", "localhost,",
                           "-c", "local", "-e", "ansible_python_interpreter=%s" % sys.executable, str(playbook)],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True, env=env,
                          timeout=300, check=False)
    assert "Unexpected Exception" not in proc.stdout + proc.stderr
    assert "Traceback" not in proc.stdout + proc.stderr
    return {task["task"]["name"]: task["hosts"]["localhost"] for task in json.loads(proc.stdout)["plays"][0]["tasks"]}


def test_containerd_runtime_without_tomlkit_names_the_package_and_pip_line(tmp_path, without):
    config = tmp_path / "config.toml"
    config.write_text('version = 2\n[plugins."io.containerd.grpc.v1.cri".containerd]\n  snapshotter = "overlayfs"\n')
    results = run_play(tmp_path, without("tomlkit"), [
        {"name": "before", "ansible.builtin.debug": {"msg": "runs"}},
        # allow_path_mismatch: whatever containerd or kubelet this machine runs (make test starts some beside
        # the unit tests), the edit of this file gets as far as needing tomlkit.
        {"name": "edit", "gpunode.nvidia.containerd_runtime": {"path": str(config), "validate": False,
                                                               "allow_path_mismatch": True},
         "ignore_errors": True},
        {"name": "after", "ansible.builtin.debug": {"msg": "still runs"}},
    ])
    assert results["edit"]["failed"] is True
    assert "(tomlkit)" in results["edit"]["msg"]
    assert "-m pip install tomlkit" in results["edit"]["msg"]
    assert results["after"]["msg"] == "still runs"
    assert "snapshotter" in config.read_text() and "nvidia" not in config.read_text()


def test_cluster_check_without_kubernetes_names_the_package_and_pip_line(tmp_path, without):
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text("apiVersion: v1\nkind: Config\n")
    results = run_play(tmp_path, without("kubernetes"), [
        {"name": "check", "gpunode.nvidia.gpu_cluster_check": {"kubeconfig": str(kubeconfig), "nodes": []},
         "ignore_errors": True},
        {"name": "doctor", "gpunode.nvidia.gpu_doctor_cluster": {"kubeconfig": str(kubeconfig)},
         "ignore_errors": True},
        {"name": "after", "ansible.builtin.debug": {"msg": "still runs"}},
    ])
    for name in ("check", "doctor"):
        assert results[name]["failed"] is True
        assert "(kubernetes)" in results[name]["msg"]
        assert "-m pip install kubernetes" in results[name]["msg"]
    assert results["after"]["msg"] == "still runs"
