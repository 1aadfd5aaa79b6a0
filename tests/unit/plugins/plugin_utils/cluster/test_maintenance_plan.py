"""The decisions of node maintenance (plugins/plugin_utils/cluster/maintenance_plan.py) on plain API objects."""
import copy

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ansible_collections.gpunode.nvidia.plugins.plugin_utils.cluster import maintenance_plan as mp


def node(unschedulable=False, annotations=None, labels=None):
    return {"metadata": {"name": "gpu-1", "resourceVersion": "7", "annotations": dict(annotations or {}),
                         "labels": dict(labels or {})},
            "spec": {"unschedulable": True} if unschedulable else {}}


def merge(target, patch):
    """What the API server does with a merge patch."""
    if not isinstance(patch, dict):
        return patch
    result = dict(target or {})
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge(result.get(key), value)
    return result


def pod(name, limits=None, claims=None, owner=None, phase="Running", annotations=None, labels=None):
    spec = {"containers": [{"name": "c", "resources": {"limits": dict(limits or {})}}]}
    if claims:
        spec["resourceClaims"] = [{"name": c} for c in claims]
    meta = {"name": name, "namespace": "ml", "labels": dict(labels or {}), "annotations": dict(annotations or {})}
    if owner:
        meta["ownerReferences"] = [{"kind": owner, "name": "x"}]
    return {"metadata": meta, "spec": spec, "status": {"phase": phase}}


def test_cordon_records_a_prior_cordon_and_uncordon_leaves_it():
    patch, was = mp.cordon_patch(node(unschedulable=True), "upgrade")
    assert was is True and "spec" not in patch
    assert patch["metadata"]["annotations"] == {mp.INITIAL_STATE_ANNOTATION: "true", mp.OWNER_ANNOTATION: "upgrade"}
    cordoned = merge(node(unschedulable=True), patch)
    assert mp.cordon_patch(cordoned, "upgrade") == (None, True)  # a rerun changes nothing
    patch, what = mp.uncordon_patch(cordoned, "upgrade")
    assert "spec" not in patch and what.startswith("left cordoned")


def test_another_owner_is_refused_and_unknown_cordons_are_left():
    held = node(unschedulable=True, annotations={mp.OWNER_ANNOTATION: "partitioning"})
    with pytest.raises(mp.MaintenanceError, match="in maintenance by partitioning"):
        mp.cordon_patch(held, "upgrade")
    assert mp.uncordon_patch(node(unschedulable=True), "upgrade") == (
        None, "left cordoned: this maintenance did not cordon it")


@given(st.booleans(), st.dictionaries(st.text(min_size=1, max_size=8).filter(lambda k: "gpunode" not in k
                                                                             and "nvidia" not in k),
                                      st.text(max_size=8), max_size=4), st.booleans())
def test_cordon_then_uncordon_restores_the_node(initially_cordoned, others, rerun):
    start = node(unschedulable=initially_cordoned, annotations=others)
    current = copy.deepcopy(start)
    for _time in range(2 if rerun else 1):
        patch, _was = mp.cordon_patch(current, "upgrade")
        current = merge(current, patch) if patch else current
    assert current["spec"].get("unschedulable") is True
    patch, _what = mp.uncordon_patch(current, "upgrade")
    current = merge(current, patch) if patch else current
    assert bool(current["spec"].get("unschedulable")) == initially_cordoned
    assert current["metadata"].get("annotations", {}) == others


def test_pods_to_move_chooses_gpu_and_claim_holders():
    pods = [pod("gpu", {"nvidia.com/gpu": "1"}), pod("mig", {"nvidia.com/mig-1g.10gb": "1"}),
            pod("dra", claims=["c"]), pod("cpu", {"cpu": "1"}), pod("done", {"nvidia.com/gpu": "1"}, phase="Succeeded"),
            pod("ds", {"nvidia.com/gpu": "1"}, owner="DaemonSet"),
            pod("mirror", annotations={mp.MIRROR_ANNOTATION: "x"})]
    assert [p["metadata"]["name"] for p in mp.pods_to_move(pods, drain=False)] == ["gpu", "mig", "dra"]
    assert [p["metadata"]["name"] for p in mp.pods_to_move(pods, drain=True)] == ["gpu", "mig", "dra", "cpu"]


def test_pause_takes_true_operands_only_and_resume_restores_exactly_those():
    labels = {"nvidia.com/gpu.deploy.device-plugin": "true", "nvidia.com/gpu.deploy.dcgm": "false",
              "nvidia.com/gpu.deploy.driver": "true", "nvidia.com/gpu.deploy.dcgm-exporter": "true"}
    patch, operands = mp.pause_patch(node(labels=labels))
    assert operands == ["dcgm-exporter", "device-plugin"]  # driver is the operator's install: never paused
    paused = merge(node(labels=labels), patch)
    assert mp.pause_patch(paused) == (None, operands)
    patch, restored = mp.resume_patch(paused)
    resumed = merge(paused, patch)
    assert restored == operands and resumed["metadata"]["labels"] == labels
    assert mp.resume_patch(resumed) == (None, [])


def test_budget_named_from_the_api_cause_else_by_selector():
    body = '{"details": {"causes": [{"reason": "DisruptionBudget", "message": "The disruption budget web needs 2 healthy pods and has 2 currently"}]}}'  # noqa: E501
    target = pod("p", labels={"app": "web", "tier": "a"})
    assert mp.blocking_budget_name(body, target, []) == "ml/web"
    budgets = [{"metadata": {"name": "other", "namespace": "ml"},
                "spec": {"selector": {"matchExpressions": [{"key": "tier", "operator": "In", "values": ["b"]}]}}},
               {"metadata": {"name": "web-pdb", "namespace": "ml"},
                "spec": {"selector": {"matchLabels": {"app": "web"},
                                      "matchExpressions": [{"key": "tier", "operator": "Exists"}]}}}]
    assert mp.blocking_budget_name("not json", target, budgets) == "ml/web-pdb"
    assert mp.blocking_budget_name(None, pod("q"), budgets) == "a PodDisruptionBudget"


def test_validation_gaps_name_readiness_and_each_short_resource():
    ready = {"status": {"conditions": [{"type": "Ready", "status": "True"}],
                        "allocatable": {"nvidia.com/gpu": "8", "nvidia.com/mig-1g.10gb": "3"}}}
    assert mp.validation_gaps(ready, {"nvidia.com/gpu": 8}) == []
    assert mp.validation_gaps(ready, {"nvidia.com/mig-1g.10gb": 7, "nvidia.com/gpu": 1}) == [
        "nvidia.com/mig-1g.10gb allocatable 3, expected at least 7"]
    not_ready = {"status": {"conditions": [{"type": "Ready", "status": "False", "reason": "KubeletNotReady",
                                            "message": "runtime down"}]}}
    assert mp.validation_gaps(not_ready, {"nvidia.com/gpu": 1}) == [
        "Ready=False (KubeletNotReady: runtime down)", "nvidia.com/gpu allocatable 0, expected at least 1"]


PENDING = "gpunode.nvidia/secure-boot-enrollment-pending"


def test_label_patch_sets_and_removes_only_what_differs():
    pending = node(labels={"kubernetes.io/os": "linux"})
    patch, names = mp.label_patch(pending, {PENDING: "true"})
    assert patch == {"metadata": {"labels": {PENDING: "true"}}} and names == [PENDING]
    labelled = merge(pending, patch)
    assert mp.label_patch(labelled, {PENDING: "true"}) == (None, [])
    patch, names = mp.label_patch(labelled, {PENDING: None})
    assert patch == {"metadata": {"labels": {PENDING: None}}} and names == [PENDING]
    assert merge(labelled, patch)["metadata"]["labels"] == {"kubernetes.io/os": "linux"}
    assert mp.label_patch(pending, {PENDING: None}) == (None, [])  # nothing to remove


def test_operands_not_running_names_each_missing_or_waiting_pod():
    def pod(app, phase, waiting=None, ready=True):
        statuses = [{"ready": ready, "state": {"waiting": {"reason": waiting}} if waiting else {"running": {}}}]
        return {"metadata": {"name": app + "-x", "labels": {"app": app}},
                "status": {"phase": phase, "containerStatuses": statuses}}
    pods = [pod("nvidia-device-plugin-daemonset", "Pending", "ContainerCreating", ready=False),
            pod("nvidia-dcgm-exporter", "Running")]
    assert mp.operands_not_running(pods, ["device-plugin", "dcgm-exporter", "dcgm"]) == [
        "nvidia-device-plugin-daemonset (Pending, ContainerCreating)", "nvidia-dcgm (no pod)"]
    assert mp.operands_not_running([pod("nvidia-dcgm", "Running", ready=False)], ["dcgm"]) == ["nvidia-dcgm (Running)"]
    assert mp.operands_not_running(pods[1:], ["dcgm-exporter"]) == []
