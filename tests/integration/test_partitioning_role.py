"""Role gpu_partitioning end to end with a kubeconfig: a MIG change inside the shared maintenance window
(role gpu_maintenance: cordon, evictions through the Eviction API with a PodDisruptionBudget, GPU clients stopped
and restarted, allocatable validated, uncordon), then a sharing config (ConfigMap and node label).

What is real: ansible-playbook running the role on a systemd node container, the modules, systemd, the kubernetes
client on the controller. What is a STAND-IN: the API server (tests/testbed/kube_api_standin.py: no kube-apiserver
can run here; the allocatable a device plugin would advertise is set by the test), and the NVIDIA tools of
tests/testbed/stand-ins (nvidia-smi and nvidia-mig-parted keep an A100-SXM4-40GB's MIG state in a JSON file,
nvidia-persistenced blocks the reset while it runs, nvidia-ctk records the CDI refresh), as in molecule/partitioning.
"""
import os
import subprocess
import sys

import pytest

import nvidia_node

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "testbed"))
from kube_api_standin import KubeApiStandin, Node  # noqa: E402

STANDINS = os.path.join(nvidia_node.REPO, "tests", "testbed", "stand-ins")
FAKE = "/srv/gpunode-fake-node"
PREPARE = r"""set -eu
for tool in nvidia-smi nvidia-mig-parted nvidia-persistenced nvidia-ctk nvidia-cdi-refresh; do
  install -m 0755 /opt/gpunode-standins/$tool /usr/bin/$tool
done
unit() {
  printf '[Unit]\nDescription=STAND-IN %s\n[Service]\n%s\n[Install]\nWantedBy=multi-user.target\n' "$1" "$2" \
    >/etc/systemd/system/$1
  mkdir -p FAKE/etc/systemd/system && ln -sfn /etc/systemd/system/$1 FAKE/etc/systemd/system/$1
}
unit nvidia-persistenced.service 'ExecStart=/usr/bin/nvidia-persistenced'
unit nvidia-cdi-refresh.service 'Type=oneshot
Environment=NVIDIA_STANDIN_ROOT=FAKE STANDIN_LOG=/var/log/nvidia-ctk-standin.log
ExecStart=/usr/bin/nvidia-cdi-refresh'
d=FAKE/sys/bus/pci/devices/0000:07:00.0
mkdir -p $d FAKE/proc/driver/nvidia && echo 0x10de >$d/vendor && echo 0x20b0 >$d/device && echo 0x030200 >$d/class
echo 'NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  570.172.08  Release Build  (stand-in)' \
  >FAKE/proc/driver/nvidia/version
nvidia-smi --standin-init A100-SXM4-40GB
systemctl daemon-reload
systemctl enable --now nvidia-persistenced.service
""".replace("FAKE", FAKE)
BALANCED = {"nvidia.com/mig-1g.5gb": 2, "nvidia.com/mig-2g.10gb": 1, "nvidia.com/mig-3g.20gb": 1}


@pytest.fixture(scope="module")
def node():
    nvidia_node.ensure_image()
    container = nvidia_node.NodeContainer(prefix="gpunode-part-role")
    try:
        container.start()
        subprocess.run(["docker", "cp", STANDINS, "%s:/opt/gpunode-standins" % container.name], check=True,
                       timeout=120)
        container.sh(PREPARE)
        yield container
    finally:
        container.close()


@pytest.fixture
def api(tmp_path):
    with KubeApiStandin([Node("gpu-1"), Node("gpu-2")], pod_seconds=0.3) as standin:
        standin.kubeconfig = standin.write_kubeconfig(str(tmp_path / "kubeconfig"))
        yield standin


def stage(node, api, check=False, **variables):
    variables = dict({"gpunode_kubeconfig": api.kubeconfig, "gpu_partitioning_node_name": "gpu-1",
                      "gpu_partitioning_gpu_operator": "node", "gpu_partitioning_timeout": 60,
                      "gpu_maintenance_retry_interval": 0.2, "node_services_root": FAKE}, **variables)
    return node.play([], extra_vars=variables, check=check, post_tasks=[
        {"ansible.builtin.include_role": {"name": "gpunode.nvidia.gpu_partitioning"}}])


def mig_devices(node):
    return sum(1 for line in node.sh("nvidia-smi -L").stdout.splitlines() if line.startswith("  MIG"))


def test_mig_change_drains_validates_and_uncordons_then_nothing_to_do(node, api):
    api.add_gpu_pod("ml", "train-1", "gpu-1", labels={"app": "train"})
    api.add_gpu_pod("ml", "train-2", "gpu-2", labels={"app": "train"})
    api.add_pdb("ml", "train", {"app": "train"}, disruptions_allowed=1, refuse_first=1)
    checked = stage(node, api, check=True, gpu_partitioning_mig_layout_name="all-balanced")
    assert not checked.failed, checked.failure_messages()
    assert mig_devices(node) == 0 and api.evictions == [] and not api.node("gpu-1")["spec"].get("unschedulable")

    for resource, count in BALANCED.items():  # what the device plugin (a stand-in here) advertises after the change
        api.set_allocatable("gpu-1", resource, count)
    done = stage(node, api, gpu_partitioning_mig_layout_name="all-balanced")
    assert not done.failed, done.failure_messages()
    assert mig_devices(node) == 4
    assert api.evictions == [("ml", "train-1")]  # after one refusal by the budget; the other node's pod stays
    assert not api.node("gpu-1")["spec"].get("unschedulable")
    assert node.sh("systemctl is-active nvidia-persistenced").stdout.strip() == "active"
    assert api.peak_unavailable == 1

    again = stage(node, api, gpu_partitioning_mig_layout_name="all-balanced")
    assert not again.failed, again.failure_messages()
    assert again.changed == 0, again.changed_tasks()
    assert api.evictions == [("ml", "train-1")]


def test_sharing_config_and_node_label_then_unchanged(node, api):
    node.sh("nvidia-smi --standin-init A100-SXM4-40GB")  # MIG off again: the node has one full GPU
    configs = {"a100-ts": {"strategy": "time-slicing", "replicas": 4}, "a100-mps": {"strategy": "mps", "replicas": 2}}
    api.set_allocatable("gpu-1", "nvidia.com/gpu", 4)  # the stand-in device plugin with the config applied
    done = stage(node, api, gpu_partitioning_sharing_configs=configs, gpu_partitioning_sharing_config="a100-ts")
    assert not done.failed, done.failure_messages()
    assert api.node("gpu-1")["metadata"]["labels"]["nvidia.com/device-plugin.config"] == "a100-ts"
    assert sorted(api.configmaps[("nvidia-device-plugin", "gpunode-device-plugin-configs")]["data"]) == [
        "a100-mps", "a100-ts"]
    again = stage(node, api, gpu_partitioning_sharing_configs=configs, gpu_partitioning_sharing_config="a100-ts")
    assert not again.failed and again.changed == 0, again.changed_tasks()


KUBELET_CONFIG = """apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
# written by kubeadm
authentication:
  anonymous:
    enabled: false
featureGates:
  KubeletTracing: true   # kept
cgroupDriver: systemd
"""


def test_dra_gate_on_1_33_written_in_kubeadms_config_and_kubelet_restarted(node, api):
    """kubelet is the STAND-IN of tests/testbed/stand-ins/kubelet (healthz, dies with its runtime) as kubelet.service
    over the node's real containerd 1.6 (Debian 12), which the DRA check then refuses, after the gate."""
    port = nvidia_node.free_port()
    subprocess.run(["docker", "cp", os.path.join(STANDINS, "kubelet"), "%s:/usr/bin/kubelet" % node.name], check=True,
                   timeout=60)
    node.sh("mkdir -p /var/lib/kubelet && cat >/var/lib/kubelet/config.yaml <<'EOF'\n%sEOF\n"
            "printf '[Service]\\nExecStart=/usr/bin/kubelet --config=/var/lib/kubelet/config.yaml "
            "--container-runtime-endpoint=unix:///run/containerd/containerd.sock --healthz-port=%d\\n' "
            ">/etc/systemd/system/kubelet.service && systemctl daemon-reload && systemctl start containerd kubelet"
            % (KUBELET_CONFIG, port))
    started = node.sh("systemctl show -p InvocationID --value kubelet").stdout.strip()
    dra = {"gpu_partitioning_dra": True, "gpu_partitioning_kubernetes_version": "1.33.4",
           "gpu_partitioning_kubelet_healthz_url": "http://127.0.0.1:%d/healthz" % port}

    checked = stage(node, api, check=True, **dra)
    assert node.read("/var/lib/kubelet/config.yaml") == KUBELET_CONFIG
    assert checked.result_of("Set kubelet's DynamicResourceAllocation gate where DRA is beta (Kubernetes 1.32, 1.33)")[
        "changed"] is True

    done = stage(node, api, **dra)
    assert node.read("/var/lib/kubelet/config.yaml") == KUBELET_CONFIG.replace(
        "   # kept\n", "   # kept\n  DynamicResourceAllocation: true\n")
    restarted = node.sh("systemctl show -p InvocationID --value kubelet").stdout.strip()
    assert restarted != started and node.sh("systemctl is-active kubelet").stdout.strip() == "active"
    assert done.result_of("Wait until kubelet reports healthy")["status"] == 200
    assert "containerd 1.6.20" in " ".join(done.failure_messages())  # the DRA check comes after the gate

    again = stage(node, api, **dra)
    assert again.result_of("Set kubelet's DynamicResourceAllocation gate where DRA is beta (Kubernetes 1.32, "
                           "1.33)")["changed"] is False
    assert node.sh("systemctl show -p InvocationID --value kubelet").stdout.strip() == restarted
