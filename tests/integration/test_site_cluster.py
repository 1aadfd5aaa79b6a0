"""site.yml's cluster stage against the Kubernetes API STAND-IN (tests/testbed/kube_api_standin.py): no
kube-apiserver, kubelet or GPU can run here. The stand-in is the API server, the scheduler, the DaemonSet
controller and the kubelet; it also stands in for NVIDIA's device plugin image (a bare node advertises
nvidia.com/gpu while a pod of a DaemonSet running the k8s-device-plugin image runs on it) and for the vector-add
pod's run. nvidia-smi is the stand-in of tests/testbed/stand-ins, and the node's driver and toolkit are read
from a node tree (tests/unit/gpu_health_trees.py). The playbook, roles, action plugins and the real kubernetes
client are what is under test.

The node stages are off (each has its own tests); the verify stage runs its cluster check only.
"""
import json
import os
import subprocess
import sys

import pytest

from ansible_runner import REPO

sys.path.insert(0, os.path.join(REPO, "tests", "testbed"))
sys.path.insert(0, os.path.join(REPO, "tests", "unit"))
from kube_api_standin import KubeApiStandin, Node  # noqa: E402
import gpu_health_trees  # noqa: E402
import warm_ansible  # noqa: E402

SITE = os.path.join(REPO, "playbooks", "site.yml")
STANDINS = os.path.join(REPO, "tests", "testbed", "stand-ins")
TOKEN = "standin-cluster-stage-token-1f3c"
UNPROVEN = "gpunode.nvidia/unproven"
STAGES_OFF = dict((stage, False) for stage in (
    "gpunode_driver_stage", "gpunode_toolkit_stage", "gpunode_services_stage", "gpunode_runtime_stage"))


def run_site(tmp_path, api, check=False, expect_rc=0):
    (tmp_path / "inventory.ini").write_text(
        "[gpu_nodes]\ngpu-1 ansible_connection=local ansible_python_interpreter=%s\n" % sys.executable)
    extra = dict(STAGES_OFF, gpunode_kubeconfig=api.kubeconfig, gpu_cluster_node_root=str(tmp_path / "node"),
                 gpu_verify_node_check=False, gpu_verify_cluster_timeout=30, gpu_verify_poll_interval=0.2,
                 # What the runtime stage (off here) leaves for the labels.
                 container_runtime_engine_selected="containerd")
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(REPO, "ansible.cfg"),
               ANSIBLE_COLLECTIONS_PATH=os.path.join(REPO, ".cache", "collections"),
               ANSIBLE_STDOUT_CALLBACK="json", ANSIBLE_LOAD_CALLBACK_PLUGINS="1",
               PATH=STANDINS + os.pathsep + os.environ["PATH"], NVIDIA_STANDIN_SMI_XML=str(tmp_path / "smi.xml"))
    argv = [os.path.join(os.path.dirname(sys.executable), "ansible-playbook"), "-i", str(tmp_path / "inventory.ini"),
            SITE, "-e", json.dumps(extra)] + (["--check", "--diff"] if check else [])
    proc = warm_ansible.run(argv, env=env, cwd=str(tmp_path), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            universal_newlines=True, timeout=300, check=False)
    assert proc.returncode == expect_rc, proc.stdout[-6000:] + proc.stderr[-3000:]
    assert TOKEN not in proc.stdout + proc.stderr
    report = json.loads(proc.stdout)
    with open(str(tmp_path / "gpunode-summary.json")) as handle:
        summary = json.load(handle)["nodes"][0]
    return report, summary


def changed_tasks(report):
    return [task["task"]["name"] for play in report["plays"] for task in play["tasks"]
            if task["hosts"].get("gpu-1", {}).get("changed")]


def gpu_taints(api):
    return [t for t in api.node("gpu-1")["spec"].get("taints", []) if t["key"] == UNPROVEN]


@pytest.fixture
def api(tmp_path):
    node = gpu_health_trees.new(str(tmp_path / "node"))
    gpu_health_trees.gpu_node(node, driver="580.95.05", toolkit="1.19.1-1")
    # With the MIG mode element of NVIDIA's XML layout (nvsmi_device_v12.dtd), which the health trees leave out.
    (tmp_path / "smi.xml").write_text(gpu_health_trees.smi_xml().replace(
        gpu_health_trees.DRIVER, "580.95.05").replace("<cuda_version>12.8", "<cuda_version>13.0").replace(
        "  </gpu>", "    <mig_mode>\n      <current_mig>Disabled</current_mig>\n"
        "      <pending_mig>Disabled</pending_mig>\n    </mig_mode>\n  </gpu>"))
    yield node


def start(behaviour):
    standin = KubeApiStandin([Node("gpu-1", behaviour, bare=True), "cpu-1"], pod_seconds=0.3, token=TOKEN).start()
    return standin


@pytest.fixture
def cluster(tmp_path, api):
    standin = start("success")
    standin.kubeconfig = standin.write_kubeconfig(str(tmp_path / "kubeconfig"))
    yield standin
    standin.stop()


def test_a_bare_node_is_labelled_gets_the_device_plugin_and_is_untainted_after_its_proof(tmp_path, cluster):
    _report, checked = run_site(tmp_path, cluster, check=True)
    assert cluster.write_requests == [] and checked["check_mode"]

    _report, summary = run_site(tmp_path, cluster)
    node = cluster.node("gpu-1")
    labels = node["metadata"]["labels"]
    assert {k: v for k, v in labels.items() if k.startswith("gpunode.nvidia/") and k != "gpunode.nvidia/proven-at"} == {
        "gpunode.nvidia/driver.version": "580.95.05", "gpunode.nvidia/driver.branch": "580",
        "gpunode.nvidia/toolkit.version": "1.19.1-1", "gpunode.nvidia/runtime": "containerd",
        "gpunode.nvidia/runtime.handler": "nvidia", "gpunode.nvidia/cuda.driver-api": "13.0",
        "gpunode.nvidia/mig.mode": "disabled"}
    assert labels["nvidia.com/gpu.present"] == "true" and labels["gpunode.nvidia/proven-at"].endswith("Z")
    # The device plugin runs on the GPU node only, and the node advertises its GPU through it.
    plugin_pods = [key for key, pod in cluster.pods.items() if getattr(pod, "daemonset", None)]
    assert plugin_pods == [("nvidia-device-plugin", "nvidia-device-plugin-daemonset-gpu-1")]
    assert node["status"]["allocatable"]["nvidia.com/gpu"] == "1"
    assert cluster.runtimeclasses["nvidia"]["handler"] == "nvidia"
    # The proof's pod requested a GPU, tolerated the unproven taint and ran while the node carried it.
    (key, body), = cluster.created_pod_bodies.items()
    assert body["spec"]["containers"][0]["resources"]["requests"] == {"nvidia.com/gpu": "1"}
    assert {"key": UNPROVEN, "operator": "Exists", "effect": "NoSchedule"} in body["spec"]["tolerations"]
    created_at = [t for t, method, path in cluster.requests if method == "POST" and path.endswith("/pods")][0]
    first_write = cluster.write_requests[0]
    assert first_write[1:] == ("PATCH", "/api/v1/nodes/gpu-1")
    taints_then = [taints for t, name, taints in cluster.taint_timeline if t < created_at][-1]
    assert taints_then == [UNPROVEN + "=setup"]
    assert cluster.taint_timeline[0][2] == [UNPROVEN + "=setup"]  # the run's first change on the node
    assert gpu_taints(cluster) == [] and summary["status"] == "ok" and summary["unproven_taint"] is None

    writes = len(cluster.write_requests)
    report, _summary = run_site(tmp_path, cluster)
    assert changed_tasks(report) == []
    assert [w for w in cluster.write_requests[writes:] if "/pods" not in w[2]] == []


def test_a_failed_proof_leaves_the_node_tainted_with_the_reason(tmp_path, api):
    cluster = start("cuda_fail")
    try:
        cluster.kubeconfig = cluster.write_kubeconfig(str(tmp_path / "kubeconfig"))
        _report, summary = run_site(tmp_path, cluster, expect_rc=2)
        assert gpu_taints(cluster) == [{"key": UNPROVEN, "value": "proof-failed", "effect": "NoSchedule"}]
        assert summary["status"] == "failed" and summary["unproven_taint"] == UNPROVEN + "=proof-failed:NoSchedule"
        assert "gpunode.nvidia/proven-at" not in cluster.node("gpu-1")["metadata"]["labels"]
    finally:
        cluster.stop()


def test_diagnose_taints_a_node_whose_recorded_proof_no_longer_holds(tmp_path, cluster):
    """The record site.yml left names a driver this node no longer has (here: no runtime answers at all)."""
    record = tmp_path / "last-proof.json"
    record.write_text(json.dumps({"verdict": "cuda-verified", "recorded_at": "2026-11-23T18:24:32Z",
                                  "key": {"driver_version": "570.172.08"}}))
    (tmp_path / "inventory.ini").write_text(
        "[gpu_nodes]\ngpu-1 ansible_connection=local ansible_python_interpreter=%s\n" % sys.executable)
    extra = dict(gpunode_kubeconfig=cluster.kubeconfig, gpunode_diagnose_taint=True, gpunode_diagnose_fail_on="never",
                 gpu_verify_proof_record=str(record))
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(REPO, "ansible.cfg"),
               ANSIBLE_COLLECTIONS_PATH=os.path.join(REPO, ".cache", "collections"))
    proc = warm_ansible.run([os.path.join(os.path.dirname(sys.executable), "ansible-playbook"), "-i",
                             str(tmp_path / "inventory.ini"), os.path.join(REPO, "playbooks", "diagnose.yml"),
                             "-e", json.dumps(extra)], env=env, cwd=str(tmp_path), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, universal_newlines=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stdout[-5000:]
    assert "gpu-1: its proof no longer holds (" in " ".join(proc.stdout.split())
    assert gpu_taints(cluster) == [{"key": UNPROVEN, "value": "proof-void", "effect": "NoSchedule"}]


def test_the_image_s_kubeadm_kubelet_registers_with_the_taint_and_keeps_its_other_arguments(tmp_path):
    """image_bake's kubeadm step on an environment file of the test's own (the distribution's detection is forced:
    no kubeadm is installed here); run twice, the second changes nothing."""
    env_file = tmp_path / "kubelet"
    env_file.write_text('KUBELET_EXTRA_ARGS="--node-ip=10.0.0.5"\nOTHER=1\n')
    (tmp_path / "bake.yml").write_text(
        "- hosts: localhost\n  gather_facts: false\n  tasks:\n"
        "    - ansible.builtin.include_role: {name: gpunode.nvidia.image_bake, tasks_from: unproven-taint}\n"
        "      vars: {image_bake_kubelet_env_file: %s, image_bake_has_kubeadm: true}\n" % env_file)
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(REPO, "ansible.cfg"),
               ANSIBLE_COLLECTIONS_PATH=os.path.join(REPO, ".cache", "collections"))
    argv = [os.path.join(os.path.dirname(sys.executable), "ansible-playbook"), "-i", "localhost,", "-c", "local",
            "-e", "ansible_python_interpreter=" + sys.executable, str(tmp_path / "bake.yml")]
    for changed in (1, 0):
        proc = warm_ansible.run(argv, env=env, cwd=str(tmp_path), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                universal_newlines=True, timeout=300, check=False)
        assert proc.returncode == 0 and " changed=%d " % changed in proc.stdout, proc.stdout[-3000:]
    assert env_file.read_text() == ('KUBELET_EXTRA_ARGS="--node-ip=10.0.0.5 '
                                    '--register-with-taints=gpunode.nvidia/unproven=first-boot:NoSchedule"\nOTHER=1\n')
