"""The device plugin DaemonSet, compared field by field with NVIDIA's published static manifest of the pinned
version (tests/unit/corpus/k8s-device-plugin, copied from NVIDIA/k8s-device-plugin at tag v0.20.0): every field
is NVIDIA's except the differences listed in device_plugin.py's docstring, each asserted here."""
import copy
import os

import yaml

from ansible_collections.gpunode.nvidia.plugins.plugin_utils.cluster import device_plugin as dp
from ansible_collections.gpunode.nvidia.plugins.plugin_utils.cluster import node_stage as ns
from unit_paths import UNIT_DIR

PUBLISHED = os.path.join(UNIT_DIR, "corpus", "k8s-device-plugin", "nvidia-device-plugin-%s.yml" % dp.VERSION)
UNPROVEN = {"key": ns.UNPROVEN_TAINT, "operator": "Exists", "effect": "NoSchedule"}


def published():
    with open(PUBLISHED) as handle:
        return yaml.safe_load(handle)


def rendered(**options):
    args = dict(namespace="nvidia-device-plugin", image=dp.image_of(), tolerations=[UNPROVEN], runtime_class="nvidia")
    args.update(options)
    return dp.daemonset(**args)


def test_the_pin_is_the_published_manifest_s_image():
    assert published()["spec"]["template"]["spec"]["containers"][0]["image"] == dp.image_of()
    assert dp.image_of() == "nvcr.io/nvidia/k8s-device-plugin:v0.20.0"


def test_every_field_is_nvidia_s_except_the_documented_differences():
    ours, theirs = rendered(), published()
    # Differences, each explained in device_plugin.py: own namespace, managed-by label.
    assert ours["metadata"].pop("namespace") == "nvidia-device-plugin"
    assert theirs["metadata"].pop("namespace") == "kube-system"
    assert ours["metadata"].pop("labels") == {"app.kubernetes.io/managed-by": "gpunode.nvidia"}
    ours_pod, theirs_pod = ours["spec"]["template"].pop("spec"), theirs["spec"]["template"].pop("spec")
    # The unproven taint tolerated after NVIDIA's own GPU toleration; GPU nodes selected; the runtime class.
    assert ours_pod.pop("tolerations") == theirs_pod.pop("tolerations") + [UNPROVEN]
    assert ours_pod.pop("nodeSelector") == {"nvidia.com/gpu.present": "true"}
    assert ours_pod.pop("runtimeClassName") == "nvidia"
    assert ours_pod == theirs_pod
    assert ours == theirs


def test_a_node_whose_default_runtime_is_nvidia_gets_no_runtime_class():
    assert "runtimeClassName" not in rendered(runtime_class=None)["spec"]["template"]["spec"]


def test_a_mirror_keeps_nvidia_s_path_and_pulls_with_its_secrets():
    image = dp.image_of("registry.example.com/nvidia/", "v0.20.0")
    assert image == "registry.example.com/nvidia/k8s-device-plugin:v0.20.0"
    assert dp.image_of(image="mirror.example.com/dp:pinned") == "mirror.example.com/dp:pinned"
    spec = rendered(image=image, pull_secrets=["mirror-pull"])["spec"]["template"]["spec"]
    assert spec["containers"][0]["image"] == image
    assert spec["imagePullSecrets"] == [{"name": "mirror-pull"}]


def test_sharing_configs_run_the_chart_s_config_manager():
    """As NVIDIA's Helm chart of the same version (templates/daemonset-device-plugin.yml) with a config map."""
    spec = rendered(config_map="gpunode-device-plugin-configs", default_config="h100-ts")["spec"]["template"]["spec"]
    assert [c["name"] for c in spec["initContainers"]] == ["nvidia-device-plugin-init"]
    assert [c["name"] for c in spec["containers"]] == ["nvidia-device-plugin-sidecar", "nvidia-device-plugin-ctr"]
    assert spec["shareProcessNamespace"] is True and spec["serviceAccountName"] == dp.SERVICE_ACCOUNT
    env = dict((e["name"], e.get("value")) for e in spec["containers"][0]["env"])
    assert env["NODE_LABEL"] == "nvidia.com/device-plugin.config" and env["DEFAULT_CONFIG"] == "h100-ts"
    assert env["PROCESS_TO_SIGNAL"] == "nvidia-device-plugin" and env["SIGNAL"] == "1"
    assert spec["containers"][1]["env"] == [{"name": "CONFIG_FILE", "value": "/config/config.yaml"}]
    assert {"name": "available-configs", "configMap": {"name": "gpunode-device-plugin-configs"}} in spec["volumes"]


def test_objects_in_order_with_their_hash():
    plain = dp.objects("gpu", dp.image_of(), [])
    assert [o["kind"] for o in plain] == ["Namespace", "DaemonSet"]
    shared = dp.objects("gpu", dp.image_of(), [], config_map="cm")
    assert [o["kind"] for o in shared] == ["Namespace", "ServiceAccount", "ClusterRole", "ClusterRoleBinding",
                                           "DaemonSet"]
    binding = shared[3]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": dp.SERVICE_ACCOUNT, "namespace": "gpu"}]
    for obj in shared:
        assert dp.is_current(copy.deepcopy(obj), obj)
    changed = dp.objects("gpu", dp.image_of(version="v0.19.3"), [])[-1]
    assert not dp.is_current(changed, plain[-1])
    assert not dp.is_current({"metadata": {}}, plain[-1])
