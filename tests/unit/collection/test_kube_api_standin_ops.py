"""The Kubernetes API STAND-IN's write paths, spoken to by the official `kubernetes` client as a real cluster is.

No containers: the stand-in is an in-process HTTP server (tests/testbed/kube_api_standin.py). These tests pin the
API behaviour the node-maintenance and upgrade code relies on: node patches and optimistic concurrency, pods by
node, the Eviction API with PodDisruptionBudgets, Leases, unavailability accounting and operator operand pods.
"""
import json
import os
import sys

import pytest
from unit_paths import UNIT_DIR

kubernetes = pytest.importorskip("kubernetes")
from kubernetes import client as k8s  # noqa: E402
from kubernetes import config as k8s_config  # noqa: E402
from kubernetes.client.rest import ApiException  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(UNIT_DIR), "testbed"))
from kube_api_standin import EVICTION_REFUSED, KubeApiStandin, Node  # noqa: E402

INITIAL_STATE = "nvidia.com/gpu-driver-upgrade.node-initial-state.unschedulable"


@pytest.fixture
def cluster(tmp_path):
    api = KubeApiStandin([Node("gpu-1"), Node("gpu-2"), Node("gpu-3"), "cpu-1"]).start()
    configuration = k8s.Configuration()
    k8s_config.load_kube_config(config_file=api.write_kubeconfig(str(tmp_path / "kubeconfig")),
                                client_configuration=configuration, persist_config=False)
    api.core = k8s.CoreV1Api(k8s.ApiClient(configuration))
    api.policy = k8s.PolicyV1Api(api.core.api_client)
    api.coordination = k8s.CoordinationV1Api(api.core.api_client)
    yield api
    api.stop()


def status_of(exc):
    return exc.value.status, json.loads(exc.value.body)


def test_strategic_merge_patch_sets_and_deletes_labels_annotations_and_unschedulable(cluster):
    before = cluster.core.read_node("gpu-1").metadata.resource_version
    cluster.core.patch_node("gpu-1", {"metadata": {"labels": {"team": "ml"}, "annotations": {"a": "1"}},
                                      "spec": {"unschedulable": True}})
    node = cluster.core.read_node("gpu-1")
    assert node.metadata.labels["team"] == "ml" and node.metadata.annotations == {"a": "1"}
    assert node.spec.unschedulable is True
    assert {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"} in [
        {"key": t.key, "effect": t.effect} for t in node.spec.taints]
    assert int(node.metadata.resource_version) > int(before)
    cluster.core.patch_node("gpu-1", {"metadata": {"labels": {"team": None}, "annotations": {"a": None}},
                                      "spec": {"unschedulable": None}})
    node = cluster.core.read_node("gpu-1")
    assert "team" not in node.metadata.labels and not node.metadata.annotations and not node.spec.unschedulable
    assert node.metadata.labels["nvidia.com/gpu.present"] == "true"  # the discovered labels stay
    assert cluster.requests[-2][1] == "PATCH"


def test_merge_patch_and_json_patch_content_types(cluster):
    cluster.core.patch_node("gpu-1", {"metadata": {"labels": {"x": "1"}}},
                            _content_type="application/merge-patch+json")
    cluster.core.patch_node("gpu-1", [{"op": "add", "path": "/metadata/labels/nvidia.com~1gpu.deploy.dcgm",
                                       "value": "false"},
                                      {"op": "remove", "path": "/metadata/labels/x"}])
    labels = cluster.core.read_node("gpu-1").metadata.labels
    assert labels["nvidia.com/gpu.deploy.dcgm"] == "false" and "x" not in labels


def test_stale_resource_version_is_a_real_conflict_for_patch_and_put(cluster):
    node = cluster.core.read_node("gpu-2")
    stale = node.metadata.resource_version
    cluster.core.patch_node("gpu-2", {"metadata": {"resourceVersion": stale, "labels": {"slot": "a"}}})
    with pytest.raises(ApiException) as exc:
        cluster.core.patch_node("gpu-2", {"metadata": {"resourceVersion": stale, "labels": {"slot": "b"}}})
    code, body = status_of(exc)
    assert code == 409 and body["reason"] == "Conflict"
    assert body["message"] == ('Operation cannot be fulfilled on nodes "gpu-2": the object has been modified; '
                               'please apply your changes to the latest version and try again')
    node.spec.unschedulable = True
    with pytest.raises(ApiException) as exc:
        cluster.core.replace_node("gpu-2", node)
    assert exc.value.status == 409
    fresh = cluster.core.read_node("gpu-2")
    fresh.spec.unschedulable = True
    assert cluster.core.replace_node("gpu-2", fresh).spec.unschedulable is True
    assert cluster.core.read_node("gpu-2").metadata.labels["slot"] == "a"


def test_set_ready_and_unavailability_accounting(cluster):
    cluster.set_ready("gpu-3", False)
    node = cluster.core.read_node("gpu-3")
    ready = [c for c in node.status.conditions if c.type == "Ready"][0]
    assert ready.status == "False" and ready.reason == "KubeletNotReady"
    assert ("node.kubernetes.io/not-ready", "NoExecute") in [(t.key, t.effect) for t in node.spec.taints]
    cluster.core.patch_node("gpu-1", {"spec": {"unschedulable": True}})
    cluster.core.patch_node("cpu-1", {"spec": {"unschedulable": True}})  # not a GPU node: not counted
    cluster.core.patch_node("gpu-1", {"spec": {"unschedulable": False}})
    assert [count for _at, count in cluster.unavailable_timeline] == [1, 2, 2, 1]
    assert cluster.peak_unavailable == 2
    assert cluster.node("gpu-3")["status"]["conditions"][0]["status"] == "False"


def test_pods_by_node_field_selector(cluster):
    cluster.add_gpu_pod("ml", "train-1", "gpu-1")
    cluster.add_gpu_pod("ml", "train-2", "gpu-2")
    cluster.add_gpu_pod("ml", "done-1", "gpu-1", phase="Succeeded")
    names = [p.metadata.name for p in cluster.core.list_pod_for_all_namespaces(
        field_selector="spec.nodeName=gpu-1,status.phase!=Succeeded").items]
    assert names == ["train-1"]


def test_eviction_refused_by_budget_then_allowed(cluster):
    cluster.add_gpu_pod("ml", "train-1", "gpu-1", labels={"app": "train"})
    cluster.add_pdb("ml", "train-pdb", {"app": "train"}, disruptions_allowed=1, refuse_first=2)
    eviction = k8s.V1Eviction(metadata=k8s.V1ObjectMeta(name="train-1", namespace="ml"))
    for _attempt in range(2):
        with pytest.raises(ApiException) as exc:
            cluster.core.create_namespaced_pod_eviction("train-1", "ml", eviction)
        code, body = status_of(exc)
        assert code == 429 and body["message"] == EVICTION_REFUSED and body["reason"] == "TooManyRequests"
        assert body["details"]["causes"][0]["reason"] == "DisruptionBudget"
        assert "train-pdb" in body["details"]["causes"][0]["message"]
    cluster.core.create_namespaced_pod_eviction("train-1", "ml", eviction)
    assert cluster.evictions == [("ml", "train-1")]
    assert [r[:2] for r in cluster.evictions_refused] == [("ml", "train-1")] * 2
    assert cluster.core.list_namespaced_pod("ml").items == []
    budget = cluster.policy.list_namespaced_pod_disruption_budget("ml").items[0]
    assert budget.status.disruptions_allowed == 0


def test_eviction_never_allowed_and_grace_delay(cluster):
    cluster.add_gpu_pod("ml", "a", "gpu-1", labels={"app": "a"})
    cluster.add_gpu_pod("ml", "b", "gpu-1", labels={"app": "b"})
    cluster.add_pdb("ml", "a-pdb", "app=a", disruptions_allowed="never")
    eviction = k8s.V1Eviction(metadata=k8s.V1ObjectMeta(name="a", namespace="ml"))
    with pytest.raises(ApiException) as exc:
        cluster.core.create_namespaced_pod_eviction("a", "ml", eviction)
    assert exc.value.status == 429
    cluster.eviction_grace = 30
    cluster.core.create_namespaced_pod_eviction("b", "ml", k8s.V1Eviction(metadata=k8s.V1ObjectMeta(name="b")))
    terminating = cluster.core.read_namespaced_pod("b", "ml")
    assert terminating.metadata.deletion_timestamp is not None
    with pytest.raises(ApiException) as exc:
        cluster.core.create_namespaced_pod_eviction("gone", "ml", eviction)
    assert exc.value.status == 404


def test_dra_claim_pod_is_listed_with_its_claims(cluster):
    cluster.add_gpu_pod("ml", "dra-1", "gpu-1", gpus=0, claims=["gpu-claim"])
    pod = cluster.core.read_namespaced_pod("dra-1", "ml")
    assert pod.spec.resource_claims[0].name == "gpu-claim"


def test_leases_create_conflict_and_stale_update(cluster):
    body = k8s.V1Lease(metadata=k8s.V1ObjectMeta(name="slot-0"), spec=k8s.V1LeaseSpec(holder_identity="a"))
    created = cluster.coordination.create_namespaced_lease("kube-system", body)
    with pytest.raises(ApiException) as exc:
        cluster.coordination.create_namespaced_lease("kube-system", body)
    code, status = status_of(exc)
    assert code == 409 and status["reason"] == "AlreadyExists"
    created.spec.holder_identity = "b"
    updated = cluster.coordination.replace_namespaced_lease("slot-0", "kube-system", created)
    assert updated.spec.holder_identity == "b"
    created.spec.holder_identity = "c"  # still carries the first resourceVersion
    with pytest.raises(ApiException) as exc:
        cluster.coordination.replace_namespaced_lease("slot-0", "kube-system", created)
    code, status = status_of(exc)
    assert code == 409 and status["reason"] == "Conflict" and "leases.coordination.k8s.io" in status["message"]
    with pytest.raises(ApiException) as exc:
        cluster.coordination.patch_namespaced_lease("slot-0", "kube-system", {
            "metadata": {"resourceVersion": created.metadata.resource_version}, "spec": {"holderIdentity": "d"}})
    assert exc.value.status == 409
    assert [l.spec.holder_identity for l in cluster.coordination.list_namespaced_lease("kube-system").items] == ["b"]
    cluster.coordination.delete_namespaced_lease("slot-0", "kube-system")
    assert cluster.leases == {}


def test_operand_pods_follow_the_deploy_labels(cluster):
    cluster.add_operands("gpu-1", ("device-plugin", "dcgm-exporter"))
    assert cluster.operand_pods("gpu-1") == ["nvidia-dcgm-exporter-gpu-1", "nvidia-device-plugin-daemonset-gpu-1"]
    cluster.core.patch_node("gpu-1", {"metadata": {"labels": {"nvidia.com/gpu.deploy.device-plugin": "false"}}})
    assert cluster.operand_pods("gpu-1") == ["nvidia-dcgm-exporter-gpu-1"]
    cluster.core.patch_node("gpu-1", {"metadata": {"labels": {"nvidia.com/gpu.deploy.device-plugin": "true"}}})
    pods = cluster.core.list_namespaced_pod("gpu-operator", field_selector="spec.nodeName=gpu-1").items
    assert sorted(p.metadata.name for p in pods) == cluster.operand_pods("gpu-1")
    assert pods[0].metadata.owner_references[0].kind == "DaemonSet"


def test_cordoned_node_refuses_new_pods_that_do_not_tolerate_it(cluster):
    cluster.core.patch_node("gpu-1", {"spec": {"unschedulable": True}})
    spec = {"nodeSelector": {"kubernetes.io/hostname": "gpu-1"}, "containers": [{"name": "c", "image": "i"}]}
    pod = {"metadata": {"name": "p"}, "spec": spec}
    cluster.core.create_namespaced_pod("default", pod)
    status = cluster.core.read_namespaced_pod("p", "default").status
    assert status.phase == "Pending" and "1 node(s) were unschedulable" in status.conditions[0].message
