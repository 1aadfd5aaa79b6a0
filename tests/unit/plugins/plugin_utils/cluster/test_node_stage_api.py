"""ClusterStage (plugins/plugin_utils/cluster/node_stage_api.py) in-process against the Kubernetes API STAND-IN
(tests/testbed/kube_api_standin.py: API server, DaemonSet controller and kubelet; it also stands in for the
device plugin's image, which cannot run here). The real `kubernetes` client; no ansible."""
import os
import sys

import pytest
from unit_paths import UNIT_DIR

pytest.importorskip("kubernetes")
from ansible_collections.gpunode.nvidia.plugins.plugin_utils.cluster import client  # noqa: E402
from ansible_collections.gpunode.nvidia.plugins.plugin_utils.cluster import device_plugin as dp  # noqa: E402
from ansible_collections.gpunode.nvidia.plugins.plugin_utils.cluster import node_stage as ns  # noqa: E402
from ansible_collections.gpunode.nvidia.plugins.plugin_utils.cluster.node_stage_api import ClusterStage  # noqa: E402
from ansible_collections.gpunode.nvidia.plugins.plugin_utils.cluster.verify import VerifyError  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(UNIT_DIR), "testbed"))
from kube_api_standin import KubeApiStandin, Node  # noqa: E402

FACTS = {"driver_version": "580.95.05", "toolkit_version": "1.19.1", "runtime": "containerd",
         "runtime_handler": "nvidia", "cuda_driver_api": "13.0", "mig_modes": ["Disabled"]}
UNPROVEN = {"key": ns.UNPROVEN_TAINT, "operator": "Exists", "effect": "NoSchedule"}
GPU_TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}


@pytest.fixture
def api(tmp_path):
    standin = KubeApiStandin([Node("gpu-1", bare=True, taints=[GPU_TAINT]), "cpu-1"]).start()
    standin.kube = client.connect(standin.write_kubeconfig(str(tmp_path / "kubeconfig")))
    yield standin
    standin.stop()


def stage(api, check_mode=False, node="gpu-1"):
    return ClusterStage(api.kube, node, timeout=1, retry_interval=0.05, check_mode=check_mode)


def objects(**options):
    args = dict(namespace="nvidia-device-plugin", image=dp.image_of(), tolerations=[UNPROVEN], runtime_class="nvidia")
    args.update(options)
    return dp.objects(**args)


def labels(api):
    return api.node("gpu-1")["metadata"]["labels"]


def test_labels_set_then_changed_and_removed_then_quiet(api):
    assert stage(api, check_mode=True).labels(FACTS)["changed"] is True and api.write_requests == []
    assert stage(api).labels(FACTS)["changed"] is True
    assert labels(api)["gpunode.nvidia/toolkit.version"] == "1.19.1" and labels(api)[ns.GPU_PRESENT] == "true"
    assert stage(api).labels(FACTS)["changed"] is False
    changed = stage(api).labels(dict(FACTS, toolkit_version="", driver_version="580.105.08"))
    assert changed["changed"] is True
    assert "gpunode.nvidia/toolkit.version" not in labels(api)
    assert labels(api)["gpunode.nvidia/driver.version"] == "580.105.08"


def test_feature_discovery_keeps_nvidia_s_labels(tmp_path):
    standin = KubeApiStandin([Node("gpu-1")]).start()  # GPU feature discovery's labels, as the stand-in's default
    try:
        standin.kube = client.connect(standin.write_kubeconfig(str(tmp_path / "kubeconfig")))
        standin.nodes["gpu-1"].labels["nvidia.com/gpu.present"] = None  # GFD would set it; we must not
        result = stage(standin).labels(FACTS)
        assert result["gfd_managed"] is True and "nvidia.com/gpu.present" not in labels(standin)
    finally:
        standin.stop()


def test_taint_keeps_the_node_s_own_taints_and_check_mode_writes_nothing(api):
    assert stage(api, check_mode=True).taint("setup")["changed"] is True and api.write_requests == []
    assert stage(api).taint("setup")["taint"] == "gpunode.nvidia/unproven=setup:NoSchedule"
    assert api.node("gpu-1")["spec"]["taints"] == [GPU_TAINT, {"key": ns.UNPROVEN_TAINT, "value": "setup",
                                                               "effect": "NoSchedule"}]
    assert stage(api).untaint()["changed"] is True
    assert api.node("gpu-1")["spec"]["taints"] == [GPU_TAINT]


def test_a_proven_node_is_not_tainted_at_the_start_of_a_run(api):
    stage(api).labels(FACTS, proven_at="20261129T030129Z")
    result = stage(api).taint("setup", unless_proven=True)
    assert result["changed"] is False and result["taint"] is None
    assert "proven at 20261129T030129Z" in result["msg"]
    assert stage(api).taint("proof-failed", unless_proven=False)["changed"] is True


def test_a_node_not_joined_yet_is_no_error(api):
    result = stage(api, node="gpu-9").taint("setup")
    assert result["changed"] is False and result["node_found"] is False and result["taint"] is None


def test_device_plugin_deployed_scheduled_on_the_gpu_node_only_then_quiet(api):
    stage(api).taint("setup")
    stage(api).labels(FACTS)
    stage(api).runtime_class("nvidia", "nvidia")
    checked = stage(api, check_mode=True).device_plugin(objects())
    assert checked["changed"] is True and checked["applied"] == [
        "create Namespace nvidia-device-plugin", "create DaemonSet nvidia-device-plugin-daemonset"]
    assert ("DaemonSet", "nvidia-device-plugin", dp.NAME) not in api.objects
    done = stage(api).device_plugin(objects())
    assert done["deployed"] is True and done["gpu_allocatable"] == {"nvidia.com/gpu": 1}
    pods = [key for key, pod in api.pods.items() if getattr(pod, "daemonset", None)]
    assert pods == [("nvidia-device-plugin", "nvidia-device-plugin-daemonset-gpu-1")]
    again = stage(api).device_plugin(objects())
    assert again["changed"] is False and again["applied"] == []
    newer = stage(api).device_plugin(objects(image=dp.image_of(version="v0.20.1")))
    assert newer["applied"] == ["updated DaemonSet nvidia-device-plugin-daemonset"]
    stored = api.objects[("DaemonSet", "nvidia-device-plugin", dp.NAME)]
    assert stored["spec"]["template"]["spec"]["containers"][0]["image"].endswith(":v0.20.1")


def test_without_the_runtime_class_the_plugin_gets_no_pod_and_the_wait_says_where_to_look(api):
    stage(api).labels(FACTS)
    with pytest.raises(ns.StageError, match="did not advertise nvidia.com/gpu on node gpu-1 within 1 s"):
        stage(api).device_plugin(objects())
    events = [e["message"] for e in api.events if e["involvedObject"]["name"] == dp.NAME]
    assert events == ['Error creating: pods "%s-" is forbidden: pod rejected: RuntimeClass "nvidia" not found' % dp.NAME]


def test_the_gpu_operator_or_another_plugin_is_left_alone(api):
    api.add_daemonset("gpu-operator", {"metadata": {"name": "nvidia-operator-validator",
                                                    "labels": {"app.kubernetes.io/managed-by": "gpu-operator"}},
                                       "spec": {"selector": {"matchLabels": {"app": "v"}}, "template": {
                                           "metadata": {"labels": {"app": "v"}},
                                           "spec": {"containers": [{"name": "v", "image": "nvcr.io/nvidia/v"}]}}}})
    writes = len(api.write_requests)
    result = stage(api).device_plugin(objects())
    assert result == {"changed": False, "deployed": False, "others": [
        "gpu-operator/nvidia-operator-validator (the GPU operator)"], "msg": (
        "NVIDIA's device plugin is left to what runs it already: gpu-operator/nvidia-operator-validator (the GPU "
        "operator); nothing deployed")}
    assert len(api.write_requests) == writes


def test_a_runtime_class_with_another_handler_is_refused(api):
    api.runtimeclasses["nvidia"] = {"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass",
                                    "metadata": {"name": "nvidia"}, "handler": "nvidia-cdi"}
    with pytest.raises(VerifyError, match="exists with handler nvidia-cdi, not nvidia"):
        stage(api).runtime_class("nvidia", "nvidia")
