"""DRA prerequisites of a node, from discovery's facts."""
from __future__ import absolute_import, division, print_function
__metaclass__ = type

import pytest

from ansible_collections.gpunode.nvidia.plugins.module_utils.partitioning import dra_readiness


def facts(kind="containerd", version="1.7.24", driver="570.172.08", platform=None, config_path=None):
    return {"target": {"id": "a"}, "runtimes": [{"id": "a", "kind": kind, "version": version}],
            "kubelet": {"platform": platform, "config_path": config_path, "flag_sources": []},
            "driver": {"version": driver}}


def nothing(_path):
    return None


def test_a_ready_node():
    assert dra_readiness.problems(facts(), "1.34.2", nothing) == []
    assert dra_readiness.problems(facts("containerd", "2.1.9"), "1.35.0", nothing, compute_domains=True) == []


def test_containerd_1_6_is_refused_clearly():
    assert dra_readiness.problems(facts("containerd", "1.6.20~ds1"), "1.34.2", nothing) == [
        "containerd 1.6.20~ds1 has no CDI support (enable_cdi exists from 1.7; 1.6's config dump silently drops the "
        "key): DRA cannot inject devices. Upgrade containerd to 1.7 or newer first."]


@pytest.mark.parametrize("platform, config_path, place", [
    (None, "/var/lib/kubelet/config.yaml", "featureGates: {DynamicResourceAllocation: true} in "
                                           "/var/lib/kubelet/config.yaml"),
    ("k3s", None, 'kubelet-arg: ["feature-gates=DynamicResourceAllocation=true"] in /etc/rancher/k3s/config.yaml'),
    ("microk8s", None, "--feature-gates=DynamicResourceAllocation=true in /var/snap/microk8s/current/args/kubelet"),
])
def test_kubernetes_1_33_needs_the_gate_in_the_distributions_own_place(platform, config_path, place):
    found = dra_readiness.problems(facts(platform=platform, config_path=config_path), "1.33.4", nothing)
    assert found == ["Kubernetes 1.33.4 runs DRA only with the feature gate DynamicResourceAllocation=true (stable "
                     "from 1.34.2): set %s and restart kubelet (the API server and scheduler need the gate too)."
                     % place]


def test_the_gate_once_set_is_found():
    text = {"/var/lib/kubelet/config.yaml": "kind: KubeletConfiguration\nfeatureGates:\n  DynamicResourceAllocation: "
                                            "true\n"}
    assert dra_readiness.problems(facts(config_path="/var/lib/kubelet/config.yaml"), "1.32.9", text.get) == []


def test_old_kubernetes_and_drivers_are_named():
    found = dra_readiness.problems(facts(driver="570.86.15"), "1.31.0", nothing, compute_domains=True)
    assert found == [
        "Kubernetes 1.31.0 has no usable DRA: 1.34.2 or newer (or 1.32/1.33 with the DynamicResourceAllocation gate) "
        "is needed.",
        "NVIDIA driver 570.86.15 is older than 570.158.01, the DRA driver's minimum for ComputeDomains."]
    assert dra_readiness.problems(facts(driver="560.35.03"), "1.34.2", nothing) == [
        "NVIDIA driver 560.35.03 is older than 565, the DRA driver's minimum."]


def test_the_gate_on_kubelets_command_line_or_pending_in_this_run():
    kubelet = facts(config_path="/var/lib/kubelet/config.yaml")
    kubelet["kubelet"]["flag_sources"] = ["/proc/412/cmdline", "/var/lib/kubelet/kubeadm-flags.env"]
    text = {"/proc/412/cmdline": "/usr/bin/kubelet\0--feature-gates=KubeletTracing=true,DynamicResourceAllocation=true"}
    assert dra_readiness.problems(kubelet, "1.33.4", text.get) == []
    assert len(dra_readiness.problems(kubelet, "1.33.4", nothing)) == 1
    assert dra_readiness.problems(kubelet, "1.33.4", nothing, gate_pending=True) == []


def test_driver_root_for_the_chart_values(tmp_path):
    from ansible_collections.gpunode.nvidia.plugins.module_utils.node.node_reader import Node
    assert dra_readiness.driver_root(Node(str(tmp_path))) == "/"
    operator = tmp_path / "run/nvidia/driver/usr/bin"
    operator.mkdir(parents=True)
    (operator / "nvidia-smi").write_text("driver container's binary")
    assert dra_readiness.driver_root(Node(str(tmp_path))) == "/run/nvidia/driver"
