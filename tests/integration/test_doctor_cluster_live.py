"""Cluster diagnosis through the kubernetes client, and playbooks/diagnose.yml end to end.

No kube-apiserver can run here: the cluster is the Kubernetes API STAND-IN of
tests/testbed/kube_api_standin.py (a local HTTP server with scripted node behaviours), spoken to
by the real `kubernetes` client exactly as a cluster would be. The nodes diagnosed by the playbook
are fake node trees (tests/unit/node_trees.py) read through gpu_doctor's `root` option on localhost.
"""
import json
import os
import subprocess
import sys
import time

import pytest
import yaml

from ansible_runner import ANSIBLE, REPO, run_module

sys.path.insert(0, os.path.join(REPO, "tests", "testbed"))
sys.path.insert(0, os.path.join(REPO, "tests", "unit"))
import node_trees  # noqa: E402
from kube_api_standin import KubeApiStandin, Node  # noqa: E402
import warm_ansible  # noqa: E402

PLAYBOOK = os.path.join(REPO, "playbooks", "diagnose.yml")


def gpu_pod(name, node):
    return {"metadata": {"name": name},
            "spec": {"nodeName": node, "runtimeClassName": "nvidia", "restartPolicy": "Never",
                     "containers": [{"name": "cuda", "image": "registry.example/cuda-sample:vectoradd",
                                     "resources": {"limits": {"nvidia.com/gpu": 1}}}]}}


@pytest.fixture
def cluster(tmp_path):
    nodes = [Node("gpu-1"), Node("gpu-2", "zero_allocatable"), Node("gpu-3", "no_runtime"),
             Node("gpu-4", "not_ready"), "cpu-1"]
    with KubeApiStandin(nodes, pod_seconds=0.5, token="s3cret") as api:
        api.create_pod("ml", gpu_pod("train", "gpu-3"))
        yield api, api.write_kubeconfig(str(tmp_path / "kubeconfig"))


def test_cluster_rules_through_the_kubernetes_client(cluster):
    api, kubeconfig = cluster
    result = run_module("gpunode.nvidia.gpu_doctor_cluster", {"kubeconfig": kubeconfig}, check=True)
    assert result["checked"] is True and result["changed"] is False, result
    assert result["gpu_nodes"] == ["gpu-1", "gpu-2", "gpu-3", "gpu-4"]
    by_rule = {}
    for item in result["findings"]:
        by_rule.setdefault(item["rule"], []).append(item)
    assert [f["message"].split()[1] for f in by_rule["cluster-gpu-not-allocatable"]] == ["gpu-2"]
    assert "gpu-4" in by_rule["cluster-gpu-node-not-ready"][0]["message"]
    assert by_rule["cluster-runtimeclass-missing"][0]["fix"]["manifest"]["handler"] == "nvidia"
    (pending,) = by_rule["cluster-gpu-pod-pending"]
    assert pending["incident"] == "I1" and "ml/train" in pending["message"]
    assert any('no runtime for "nvidia" is configured' in e["text"] for e in pending["evidence"])
    assert all(method == "GET" for _t, method, _p in api.requests)  # read-only

    api._store_runtimeclass({"metadata": {"name": "nvidia"}, "handler": "nvidia"})
    result = run_module("gpunode.nvidia.gpu_doctor_cluster", {"kubeconfig": kubeconfig})
    assert "cluster-runtimeclass-missing" not in [f["rule"] for f in result["findings"]]


def test_unreachable_api_is_a_finding(tmp_path):
    with KubeApiStandin([Node("gpu-1")], token="right") as api:
        kubeconfig = str(tmp_path / "kubeconfig")
        api.write_kubeconfig(kubeconfig)
    # The server is gone now.
    result = run_module("gpunode.nvidia.gpu_doctor_cluster", {"kubeconfig": kubeconfig, "timeout": 5})
    assert result.get("failed") is not True and result["checked"] is False
    assert [f["rule"] for f in result["findings"]] == ["cluster-unreachable"]


# --- the playbook -------------------------------------------------------------------------------------------

def fleet_inventory(tmp_path, with_unreachable=True):
    """Three tree nodes (kubeadm, EKS AL2 with a too-new toolkit, k8s snap) on localhost, one unreachable."""
    hosts = {}
    for name, platform in (("node-kubeadm", "kubeadm-containerd"), ("node-al2", "eks-al2"),
                           ("node-snap", "k8s-snap-default")):
        tree, _expect = node_trees.build(platform, tmp_path / name)
        hosts[name] = {"gpunode_doctor_root": str(tmp_path / name)}
    group_vars = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}
    inventory = {"gpu_nodes": {"hosts": hosts, "vars": group_vars}}
    if with_unreachable:
        hosts["node-gone"] = {"ansible_connection": "ssh", "ansible_host": "127.0.0.1", "ansible_port": 1}
    path = str(tmp_path / "inventory.yml")
    with open(path, "w") as handle:
        yaml.safe_dump(inventory, handle)
    return path


def run_playbook(inventory, *extra):
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(REPO, "ansible.cfg"),
               ANSIBLE_COLLECTIONS_PATH=os.path.join(REPO, ".cache", "collections"), ANSIBLE_FORCE_COLOR="0")
    started = time.time()
    proc = warm_ansible.run([os.path.join(os.path.dirname(ANSIBLE), "ansible-playbook"), "-i", inventory, PLAYBOOK]
                            + list(extra), cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            universal_newlines=True, timeout=600, check=False)
    return proc, time.time() - started


def test_diagnose_playbook_in_check_mode_fails_on_critical(tmp_path, cluster):
    _api, kubeconfig = cluster
    inventory = fleet_inventory(tmp_path)
    report_json, report_html = str(tmp_path / "out" / "diagnose.json"), str(tmp_path / "out" / "diagnose.html")
    proc, wall = run_playbook(inventory, "--check", "-e", "gpunode_kubeconfig=" + kubeconfig,
                              "-e", "gpunode_diagnose_json=" + report_json, "-e", "gpunode_diagnose_html=" + report_html)
    assert proc.returncode != 0, proc.stdout[-4000:]
    assert "critical" in proc.stdout and "node-unreachable" in proc.stdout
    with open(report_json) as handle:
        report = json.load(handle)
    assert report["schema"] == "gpunode.nvidia/diagnose-report"
    nodes = dict((n["name"], n) for n in report["nodes"])
    assert set(nodes) == {"node-kubeadm", "node-al2", "node-snap", "node-gone"}
    assert "toolkit-glibc-too-old" in [f["rule"] for f in nodes["node-al2"]["findings"]]
    assert nodes["node-gone"]["reachable"] is False
    assert report["cluster"]["checked"] is True
    assert "cluster-gpu-pod-pending" in [f["rule"] for f in report["cluster"]["findings"]]
    with open(report_html) as handle:
        assert 'data-node="node-al2"' in handle.read()
    sys.stderr.write("\ndiagnose.yml, 4 nodes (3 trees + 1 unreachable) + stand-in cluster, --check: %.1fs\n" % wall)


def test_diagnose_playbook_fail_on_setting(tmp_path):
    inventory = fleet_inventory(tmp_path, with_unreachable=False)
    proc, _wall = run_playbook(inventory, "-e", "gpunode_diagnose_fail_on=never")
    assert proc.returncode == 0, proc.stdout[-4000:]
    proc, _wall = run_playbook(inventory, "-e", "gpunode_diagnose_fail_on=critical")
    assert proc.returncode != 0  # the trees have no nvidia runtime: critical
