"""The cluster stage's decisions: labels, the unproven taint, other device plugins."""
import pytest
from hypothesis import given
from hypothesis import strategies as st

from ansible_collections.gpunode.nvidia.plugins.plugin_utils.cluster import node_stage as ns

FACTS = {"driver_version": "580.95.05", "toolkit_version": "1.19.1", "runtime": "containerd",
         "runtime_handler": "nvidia", "cuda_driver_api": "13.0", "mig_modes": ["Disabled", "Disabled"]}
GPU_TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}


def node(labels=None, taints=None):
    return {"metadata": {"name": "gpu-1", "labels": dict(labels or {})}, "spec": {"taints": list(taints or [])}}


def test_fact_labels():
    assert ns.fact_labels(FACTS) == {
        "gpunode.nvidia/driver.version": "580.95.05", "gpunode.nvidia/driver.branch": "580",
        "gpunode.nvidia/toolkit.version": "1.19.1", "gpunode.nvidia/runtime": "containerd",
        "gpunode.nvidia/runtime.handler": "nvidia", "gpunode.nvidia/cuda.driver-api": "13.0",
        "gpunode.nvidia/mig.mode": "disabled"}


def test_an_unknown_fact_removes_its_label():
    labels = ns.fact_labels(dict(FACTS, toolkit_version="", mig_modes=[]))
    assert labels["gpunode.nvidia/toolkit.version"] is None and labels["gpunode.nvidia/mig.mode"] is None


@pytest.mark.parametrize("modes, word", [(["Enabled"], "enabled"), (["Enabled", "Disabled"], "mixed"),
                                         (["N/A"], "unsupported"), (["Disabled", "N/A"], "disabled"), ([], None)])
def test_mig_mode(modes, word):
    assert ns.mig_mode(modes) == word


def test_a_value_the_cluster_cannot_hold_is_refused_naming_it():
    with pytest.raises(ns.StageError, match="toolkit_version '1.19.1 beta' cannot be a Kubernetes label value"):
        ns.fact_labels(dict(FACTS, toolkit_version="1.19.1 beta"))


def test_gpu_present_unless_feature_discovery_labels_the_node():
    assert ns.wanted_labels(node(), FACTS)[ns.GPU_PRESENT] == "true"
    managed = node({"nvidia.com/gfd.timestamp": "1700000000", ns.GPU_PRESENT: "true"})
    assert ns.GPU_PRESENT not in ns.wanted_labels(managed, FACTS)


def test_the_proof_time_moves_only_when_what_was_proven_changed():
    fresh = ns.wanted_labels(node(), FACTS, proven_at="20261129T030129Z")
    assert fresh[ns.PROVEN_AT] == "20261129T030129Z"
    proven = node(dict(fresh))
    assert ns.PROVEN_AT not in ns.wanted_labels(proven, FACTS, proven_at="20261130T000000Z")
    newer_driver = ns.wanted_labels(proven, dict(FACTS, driver_version="580.105.08"), proven_at="20261130T000000Z")
    assert newer_driver[ns.PROVEN_AT] == "20261130T000000Z"


def test_proof_time_is_a_label_value():
    assert ns.proof_time(0) == "19700101T000000Z"
    assert ns.label_value(ns.proof_time(), "proof time")


def test_taint_keeps_the_other_taints_and_is_quiet_when_there():
    patch, previous = ns.taint_patch(node(taints=[GPU_TAINT]), "setup")
    assert previous is None
    assert patch == {"spec": {"taints": [GPU_TAINT, {"key": ns.UNPROVEN_TAINT, "value": "setup",
                                                     "effect": "NoSchedule"}]}}
    tainted = node(taints=patch["spec"]["taints"])
    assert ns.taint_patch(tainted, "setup") == (None, "setup")
    failed, previous = ns.taint_patch(tainted, "proof-failed")
    assert previous == "setup" and failed["spec"]["taints"][-1]["value"] == "proof-failed"
    assert len(failed["spec"]["taints"]) == 2


def test_untaint_removes_only_ours():
    tainted = node(taints=[GPU_TAINT, {"key": ns.UNPROVEN_TAINT, "value": "setup", "effect": "NoSchedule"}])
    assert ns.untaint_patch(tainted) == ({"spec": {"taints": [GPU_TAINT]}}, "setup")
    assert ns.untaint_patch(node(taints=[GPU_TAINT])) == (None, None)


def test_an_unknown_reason_is_refused():
    with pytest.raises(ns.StageError, match="unknown reason 'later'"):
        ns.taint_patch(node(), "later")


@given(st.lists(st.fixed_dictionaries({"key": st.sampled_from(["a", "b", ns.UNPROVEN_TAINT]),
                                       "effect": st.sampled_from(["NoSchedule", "NoExecute"])}), max_size=5),
       st.sampled_from(ns.TAINT_REASONS))
def test_taint_then_untaint_leaves_every_other_taint(taints, reason):
    others = [t for t in taints if t["key"] != ns.UNPROVEN_TAINT]
    patch, _previous = ns.taint_patch(node(taints=taints), reason)
    after = patch["spec"]["taints"] if patch else taints
    assert [t for t in after if t["key"] != ns.UNPROVEN_TAINT] == others
    assert ns.unproven_reason(node(taints=after)) == reason
    cleared, _previous = ns.untaint_patch(node(taints=after))
    assert cleared["spec"]["taints"] == others


def daemonset(namespace, name, image, labels=None):
    return {"metadata": {"namespace": namespace, "name": name, "labels": labels or {}},
            "spec": {"template": {"spec": {"containers": [{"image": image}]}}}}


def test_other_device_plugins_are_found_and_ours_is_not():
    ours = daemonset("nvidia-device-plugin", "nvidia-device-plugin-daemonset", "nvcr.io/nvidia/k8s-device-plugin:v0.20.0")
    operator = daemonset("gpu-operator", "nvidia-operator-validator", "nvcr.io/nvidia/cloud-native/gpu-operator-validator:v25.3.0")
    helm = daemonset("kube-system", "nvdp-nvidia-device-plugin", "registry.example.com/nvidia/k8s-device-plugin@sha256:ab")
    other = daemonset("kube-system", "kube-proxy", "registry.k8s.io/kube-proxy:v1.30.4")
    key = ("nvidia-device-plugin", "nvidia-device-plugin-daemonset")
    assert ns.other_device_plugins([ours, other], key) == []
    assert ns.other_device_plugins([ours, operator, helm, other], key) == [
        "gpu-operator/nvidia-operator-validator (the GPU operator)",
        "kube-system/nvdp-nvidia-device-plugin (runs registry.example.com/nvidia/k8s-device-plugin@sha256:ab)"]
