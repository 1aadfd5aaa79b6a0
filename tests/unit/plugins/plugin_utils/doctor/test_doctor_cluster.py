"""Cluster-level diagnosis rules over API JSON (the items of NodeList, RuntimeClassList, PodList, EventList).

The objects are what the Kubernetes API STAND-IN (tests/testbed/kube_api_standin.py) serves for its scripted
nodes, taken as plain dicts; tests/integration/test_doctor_cluster_live.py runs the same rules through the
kubernetes client against the stand-in server.
"""
import os
import sys

import pytest
from unit_paths import UNIT_DIR

sys.path.insert(0, os.path.join(UNIT_DIR, "..", "testbed"))
from kube_api_standin import GLIBC_MESSAGE, NO_RUNTIME_MESSAGE, Node  # noqa: E402

from ansible_collections.gpunode.nvidia.plugins.plugin_utils.doctor.cluster import cluster_findings  # noqa: E402

RUNTIMECLASS = [{"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass", "metadata": {"name": "nvidia"},
                 "handler": "nvidia"}]


def gpu_pod(name, node, phase="Pending", waiting=None, namespace="ml"):
    pod = {"metadata": {"name": name, "namespace": namespace},
           "spec": {"nodeName": node, "runtimeClassName": "nvidia",
                    "containers": [{"name": "cuda", "image": "cuda-sample",
                                    "resources": {"limits": {"nvidia.com/gpu": "1"}}}]},
           "status": {"phase": phase}}
    if waiting:
        pod["status"]["containerStatuses"] = [{"name": "cuda", "state": {"waiting": {"reason": waiting}}}]
    return pod


def event(pod, reason, message, namespace="ml", type_="Warning", when="2024-08-14T19:00:00Z"):
    return {"involvedObject": {"kind": "Pod", "name": pod, "namespace": namespace}, "type": type_,
            "reason": reason, "message": message, "lastTimestamp": when}


def rules(found):
    return sorted(f["rule"] for f in found["findings"])


def test_healthy_cluster_has_no_finding():
    nodes = [Node("gpu-1").to_api(), Node("cpu-1", "cpu").to_api()]
    found = cluster_findings(nodes, RUNTIMECLASS, [gpu_pod("done", "gpu-1", phase="Succeeded")], [])
    assert found == {"gpu_nodes": ["gpu-1"], "findings": []}


def test_zero_allocatable_gpu_node():
    nodes = [Node("gpu-1").to_api(), Node("gpu-2", "zero_allocatable").to_api(), Node("cpu-1", "cpu").to_api()]
    found = cluster_findings(nodes, RUNTIMECLASS, [], [])
    (item,) = found["findings"]
    assert item["rule"] == "cluster-gpu-not-allocatable" and item["severity"] == "critical"
    assert "gpu-2" in item["message"] and "device plugin" in item["message"]
    assert item["evidence"][0] == {"kind": "api", "object": "node/gpu-2",
                                   "text": "status.allocatable[nvidia.com/gpu] = 0, capacity = 0"}


def test_inventory_names_a_gpu_node_without_labels():
    node = Node("plain", "cpu").to_api()  # no GPU labels, no capacity: the device plugin never ran
    assert cluster_findings([node], RUNTIMECLASS, [], [])["findings"] == []
    found = cluster_findings([node], RUNTIMECLASS, [], [], gpu_nodes=["plain"])
    assert rules(found) == ["cluster-gpu-not-allocatable"]
    assert "absent" in found["findings"][0]["evidence"][0]["text"]


def test_runtimeclass_missing_or_wrong_handler():
    nodes = [Node("gpu-1").to_api()]
    (item,) = cluster_findings(nodes, [], [], [])["findings"]
    assert item["rule"] == "cluster-runtimeclass-missing"
    assert item["fix"]["manifest"] == {"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass",
                                       "metadata": {"name": "nvidia"}, "handler": "nvidia"}
    wrong = [{"metadata": {"name": "nvidia"}, "handler": "nvidia-cdi"}]
    (item,) = cluster_findings(nodes, wrong, [], [])["findings"]
    assert "'nvidia-cdi'" in item["message"]


def test_no_runtimeclass_finding_without_gpus():
    assert cluster_findings([Node("cpu-1", "cpu").to_api()], [], [], [])["findings"] == []


@pytest.mark.parametrize("reason, message, incident, words", [
    ("FailedCreatePodSandBox", NO_RUNTIME_MESSAGE, "I1", 'no runtime "nvidia" loaded'),
    ("Failed", GLIBC_MESSAGE, "I4", "needs glibc 2.27"),
    ("FailedScheduling", "0/3 nodes are available: 1 Insufficient nvidia.com/gpu.", None, "nvidia.com/gpu"),
])
def test_pending_gpu_pod_with_the_event_that_explains_it(reason, message, incident, words):
    nodes = [Node("gpu-1").to_api()]
    pods = [gpu_pod("train", "gpu-1", waiting="ContainerCreating")]
    events = [event("train", "Scheduled", "Successfully assigned", type_="Normal"),
              event("train", reason, message, when="2024-08-14T19:00:05Z"),
              event("other", "FailedCreatePodSandBox", "not this pod")]
    (item,) = cluster_findings(nodes, RUNTIMECLASS, pods, events)["findings"]
    assert item["rule"] == "cluster-gpu-pod-pending" and item["incident"] == incident
    assert "ml/train" in item["message"] and words in item["message"]
    assert any(message in e["text"] for e in item["evidence"])
    assert not any("not this pod" in e["text"] for e in item["evidence"])


def test_pending_pod_without_gpu_request_is_ignored():
    pod = gpu_pod("web", "gpu-1")
    pod["spec"]["containers"][0]["resources"] = {}
    assert cluster_findings([Node("gpu-1").to_api()], RUNTIMECLASS, [pod], [])["findings"] == []


def test_not_ready_gpu_node_is_i3():
    found = cluster_findings([Node("gpu-1", "not_ready").to_api()], RUNTIMECLASS, [], [])
    (item,) = found["findings"]
    assert item["rule"] == "cluster-gpu-node-not-ready" and item["incident"] == "I3"
