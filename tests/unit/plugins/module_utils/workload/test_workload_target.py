"""workload.target: which runtime gpu_workload_check runs with, from its options and discovery's target."""
from __future__ import absolute_import, division, print_function
__metaclass__ = type

import pytest

from ansible_collections.gpunode.nvidia.plugins.module_utils.workload import target

K3S_TARGET = {"kind": "containerd", "socket": "/run/k3s/containerd/containerd.sock", "service": "k3s.service",
              "config_path": "/var/lib/rancher/k3s/agent/etc/containerd/config.toml",
              "binary": "/var/lib/rancher/k3s/data/current/bin/containerd"}
DOCKER_TARGET = {"kind": "docker", "socket": "/var/run/docker.sock", "service": "docker.service",
                 "config_path": "/etc/docker/daemon.json", "binary": "/usr/bin/dockerd"}


def facts(found=None, reason=None):
    return {"target": found, "target_reason": reason}


def test_auto_takes_every_part_from_the_target():
    assert target.resolve("auto", None, None, facts(K3S_TARGET)) == target.RuntimeTarget(
        "containerd", K3S_TARGET["socket"], K3S_TARGET["config_path"], "k3s.service", K3S_TARGET["binary"])


def test_the_targets_socket_in_another_spelling_is_still_the_target():
    found = target.resolve("containerd", "unix:///var/run/k3s/containerd/containerd.sock", None, facts(K3S_TARGET))
    assert found.socket == "/var/run/k3s/containerd/containerd.sock"
    assert (found.config_path, found.service, found.binary) == (
        K3S_TARGET["config_path"], "k3s.service", K3S_TARGET["binary"])


def test_another_socket_takes_nothing_from_the_target():
    found = target.resolve("containerd", "unix:///run/containerd/containerd.sock", None, facts(K3S_TARGET))
    assert found == target.RuntimeTarget("containerd", "/run/containerd/containerd.sock", None, None, None)


def test_another_engine_than_the_targets_gets_its_default_socket_and_nothing_else():
    found = target.resolve("crio", None, None, facts(DOCKER_TARGET))
    assert found == target.RuntimeTarget("crio", "/var/run/crio/crio.sock", None, None, None)


@pytest.mark.parametrize("engine, socket", [
    ("containerd", "/run/containerd/containerd.sock"),
    ("crio", "/var/run/crio/crio.sock"),
    ("docker", "/var/run/docker.sock"),
])
def test_without_a_target_each_engine_has_its_default_socket(engine, socket):
    assert target.resolve(engine, None, None, facts()) == target.RuntimeTarget(engine, socket, None, None, None)


def test_a_given_config_path_wins_over_the_targets():
    found = target.resolve("auto", None, "/etc/k3s-custom.toml", facts(K3S_TARGET))
    assert found.config_path == "/etc/k3s-custom.toml" and found.service == "k3s.service"


def test_auto_without_a_target_says_why_and_what_to_set():
    with pytest.raises(target.TargetUnknown) as caught:
        target.resolve("auto", None, None, facts(None, "no container runtime found on this node"))
    assert str(caught.value) == ("cannot tell which container runtime to check: no container runtime found on this "
                                 "node; set engine and socket")


def test_auto_without_a_target_or_a_reason():
    with pytest.raises(target.TargetUnknown, match="check: no runtime found; set engine and socket"):
        target.resolve("auto", None, None, {})


@pytest.mark.parametrize("engine, socket, config_path, reads_target", [
    ("auto", "/run/containerd/containerd.sock", "/etc/containerd/config.toml", True),
    ("containerd", None, "/etc/containerd/config.toml", True),
    ("containerd", "/run/containerd/containerd.sock", None, True),
    ("containerd", "/run/containerd/containerd.sock", "/etc/containerd/config.toml", False),
])
def test_discovery_reads_the_target_only_when_the_options_leave_something_to_it(engine, socket, config_path,
                                                                                reads_target):
    sections = target.sections_needed(engine, socket, config_path)
    assert sections[:3] == ["gpus", "driver", "toolkit"]
    assert ("target" in sections) is reads_target and ("runtimes" in sections) is reads_target
