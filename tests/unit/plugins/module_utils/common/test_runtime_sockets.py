"""One table of default runtime sockets (common/runtime_sockets.py): every reader, module and role default that
names a runtime's socket when the node names none is that table's."""
from __future__ import absolute_import, division, print_function
__metaclass__ = type

import os

import yaml

from ansible_collections.gpunode.nvidia.plugins.module_utils.common.runtime_sockets import (
    CRI_DOCKERD_SOCKET, DEFAULT_SOCKETS, KUBELET_DEFAULT_ENDPOINT, PLATFORM_CONTAINERD_SOCKETS)
from ansible_collections.gpunode.nvidia.plugins.module_utils.cri import client as cri
from ansible_collections.gpunode.nvidia.plugins.module_utils.doctor import context
from ansible_collections.gpunode.nvidia.plugins.module_utils.node import discovery, runtime_instances
from ansible_collections.gpunode.nvidia.plugins.module_utils.node.node_reader import Node
from ansible_collections.gpunode.nvidia.plugins.modules import cri_info
from unit_paths import REPO

ROLE = os.path.join(REPO, "roles", "container_runtime")


def test_the_defaults_are_each_runtimes_own():
    assert DEFAULT_SOCKETS == {"containerd": "/run/containerd/containerd.sock", "crio": "/var/run/crio/crio.sock",
                               "docker": "/var/run/docker.sock"}
    assert KUBELET_DEFAULT_ENDPOINT == "unix:///run/containerd/containerd.sock"
    assert PLATFORM_CONTAINERD_SOCKETS["k3s"] == PLATFORM_CONTAINERD_SOCKETS["rke2"] == (
        "/run/k3s/containerd/containerd.sock")


def test_the_cri_client_and_cri_info_default_to_containerds_socket():
    assert cri.CRIClient().address == cri.DEFAULT_SOCKET == DEFAULT_SOCKETS["containerd"]
    documented = yaml.safe_load(cri_info.DOCUMENTATION)["options"]["socket"]["default"]
    assert documented == DEFAULT_SOCKETS["containerd"]


def test_discovery_fills_in_the_tables_sockets(tmp_path):
    node = Node(str(tmp_path), run=False)
    assert runtime_instances.containerd_instance(node, [], "containerd")["socket"] == DEFAULT_SOCKETS["containerd"]
    assert runtime_instances.containerd_instance(
        node, [], "k3s", runtime_instances.rancher_defaults("k3s"))["socket"] == PLATFORM_CONTAINERD_SOCKETS["k3s"]
    for platform, socket in (("kubeadm", DEFAULT_SOCKETS["containerd"]), ("k0s", PLATFORM_CONTAINERD_SOCKETS["k0s"]),
                             ("microk8s", PLATFORM_CONTAINERD_SOCKETS["microk8s"])):
        facts = {"legacy_container_runtime": None, "platform": platform}
        discovery._apply_default_endpoint(facts)
        assert facts["endpoint"] == "unix://" + socket
    facts = {"legacy_container_runtime": "docker", "platform": None}
    discovery._apply_default_endpoint(facts)
    assert facts["endpoint"] == "unix://" + DEFAULT_SOCKETS["docker"]
    assert CRI_DOCKERD_SOCKET == "/run/cri-dockerd.sock"


def test_the_doctor_leaves_the_operator_at_its_defaults_only_for_the_tables_containerd():
    stock = {"kind": "containerd", "platform": "containerd", "socket": "unix://" + DEFAULT_SOCKETS["containerd"],
             "config_path": "/etc/containerd/config.toml"}
    assert context.operator_values(stock) is None
    moved = dict(stock, socket=PLATFORM_CONTAINERD_SOCKETS["k0s"])
    assert context.operator_values(moved) is not None


def test_the_roles_name_no_socket_of_their_own_beyond_the_documented_crio_variable():
    with open(os.path.join(ROLE, "defaults", "main.yml")) as handle:
        defaults = yaml.safe_load(handle)
    assert defaults["container_runtime_crio_socket"] == DEFAULT_SOCKETS["crio"]
    assert defaults["container_runtime_containerd_socket"] == ""  # empty: discovered, else cri_info's default
    for directory, _dirs, files in os.walk(os.path.join(REPO, "roles")):
        for name in files:
            if name.endswith(".yml") and name != "argument_specs.yml" and "defaults" not in directory:
                with open(os.path.join(directory, name)) as handle:
                    text = handle.read()
                assert not [s for s in DEFAULT_SOCKETS.values() if s in text], os.path.join(directory, name)
