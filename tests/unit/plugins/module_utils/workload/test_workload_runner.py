"""workload.runner: the command lines it builds for the docker CLI and containerd's ctr."""
from __future__ import absolute_import, division, print_function
__metaclass__ = type

import pytest

from ansible_collections.gpunode.nvidia.plugins.module_utils.workload import runner


@pytest.mark.parametrize("with_gpus", [True, False])
def test_docker_run_asks_for_the_gpus_only_on_a_node_with_one(with_gpus):
    argv = runner.docker_run_argv("n", "nvidia", "img", with_gpus=with_gpus)
    assert ("--gpus" in argv) is with_gpus
    if with_gpus:
        assert argv[argv.index("--gpus") + 1] == "all"


def test_docker_run_uses_the_handler_the_label_and_no_network():
    argv = runner.docker_run_argv("gpunode-verify-1", "nvidia-cdi", "img", with_gpus=False)
    assert argv[:3] == ["run", "--rm", "--name"] and argv[3] == "gpunode-verify-1"
    assert argv[argv.index("--runtime") + 1] == "nvidia-cdi"
    assert argv[argv.index("--label") + 1] == "gpunode.nvidia/verify=1"
    assert argv[argv.index("--network") + 1] == "none"
    assert "NVIDIA_VISIBLE_DEVICES=all" in argv and "NVIDIA_DRIVER_CAPABILITIES=compute,utility" in argv
    assert argv[-1] == "img"


@pytest.mark.parametrize("socket, host", [
    ("unix:///var/run/docker.sock", ["-H", "unix:///var/run/docker.sock"]),
    ("/run/docker.sock", ["-H", "unix:///run/docker.sock"]),
    (None, []),
])
def test_the_docker_cli_talks_to_the_given_socket(socket, host):
    assert runner.Docker("/usr/bin/docker", socket).argv("info") == ["/usr/bin/docker"] + host + ["info"]


@pytest.mark.parametrize("socket", ["unix:///run/k3s/containerd/containerd.sock", "/run/k3s/containerd/containerd.sock"])
def test_ctr_imports_into_the_namespace_cri_reads_on_the_given_socket(socket):
    assert runner.ctr_import_argv("/usr/bin/ctr", socket, "/tmp/img.tar") == [
        "/usr/bin/ctr", "--address", "/run/k3s/containerd/containerd.sock", "-n", "k8s.io", "images", "import",
        "/tmp/img.tar"]


def test_ctr_is_looked_for_beside_the_runtime_binary_first(tmp_path, monkeypatch):
    for folder in ("k3s-bin", "usr-bin"):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "ctr").write_text("#!/bin/sh\n")
        (tmp_path / folder / "ctr").chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path / "usr-bin"))
    assert runner.find_ctr(str(tmp_path / "k3s-bin" / "containerd")) == str(tmp_path / "k3s-bin" / "ctr")
    assert runner.find_ctr(None) == str(tmp_path / "usr-bin" / "ctr")
