"""gpunode.nvidia.gpu_partitioning_cluster against the Kubernetes API STAND-IN (tests/testbed/kube_api_standin.py:
no kube-apiserver can run here; it also stands in for the GPU operator's MIG manager, which answers a new
nvidia.com/mig.config label with nvidia.com/mig.config.state). The action plugin runs for real through
`ansible localhost` with the real kubernetes client."""
import json
import os
import sys

import pytest
import yaml

from ansible_runner import run_module, run_tasks

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "testbed"))
from kube_api_standin import KubeApiStandin, Node  # noqa: E402

MODULE = "gpunode.nvidia.gpu_partitioning_cluster"
TOKEN = "standin-secret-token-456"
CONFIGS = {"h100-ts": {"strategy": "time-slicing", "replicas": 4},
           "h100-mps": {"strategy": "mps", "replicas": 2, "rename_by_default": True}}


@pytest.fixture
def api(tmp_path):
    standin = KubeApiStandin([Node("gpu-1", gpus=8)], token=TOKEN).start()
    standin.kubeconfig = standin.write_kubeconfig(str(tmp_path / "kubeconfig"))
    yield standin
    standin.stop()


def step_params(api, name, **args):
    args.update(kubeconfig=api.kubeconfig, node="gpu-1", step=name, retry_interval=0.1)
    return args


def step(api, name, check=False, **args):
    result = run_module(MODULE, step_params(api, name, **args), check=check)
    assert TOKEN not in json.dumps(result)
    return result


def step_twice(api, name, **args):
    """The same step twice in one ansible-playbook run: its first result and the rerun's."""
    params = step_params(api, name, **args)
    results = run_tasks(MODULE, [(params, False), (params, False)])
    assert TOKEN not in json.dumps(results)
    return results


def test_sharing_configmap_and_label_then_unchanged(api):
    checked = step(api, "sharing", check=True, sharing_configs=CONFIGS, sharing_config="h100-ts",
                   physical={"nvidia.com/gpu": 8})
    assert checked["changed"] is True and api.configmaps == {}
    assert "nvidia.com/device-plugin.config" not in api.node("gpu-1")["metadata"]["labels"]
    done, again = step_twice(api, "sharing", sharing_configs=CONFIGS, sharing_config="h100-ts",
                             physical={"nvidia.com/gpu": 8})
    assert done["changed"] is True, done.get("msg")
    assert done["expected_allocatable"] == {"nvidia.com/gpu": 32} and done["device_plugin_running"] is True
    stored = api.configmaps[("nvidia-device-plugin", "gpunode-device-plugin-configs")]["data"]
    assert yaml.safe_load(stored["h100-mps"])["sharing"]["mps"] == {
        "renameByDefault": True, "resources": [{"name": "nvidia.com/gpu", "replicas": 2}]}
    assert api.node("gpu-1")["metadata"]["labels"]["nvidia.com/device-plugin.config"] == "h100-ts"
    assert again["changed"] is False


def test_a_sharing_config_the_node_cannot_satisfy_changes_nothing(api):
    result = step(api, "sharing", sharing_configs={"mig-ts": {"strategy": "time-slicing", "resources": [
        {"name": "nvidia.com/mig-1g.10gb", "replicas": 2}]}}, sharing_config="mig-ts", physical={"nvidia.com/gpu": 8})
    assert result["failed"] is True
    assert result["msg"] == ("the time-slicing config shares nvidia.com/mig-1g.10gb, but the node has none "
                             "(it has 8 nvidia.com/gpu)")
    assert api.configmaps == {}


def test_operator_mig_manager_label_and_state(api):
    assert step(api, "detect_operator")["operator"] is False
    api.mig_manager("gpu-1", "success")
    result, again = step_twice(api, "mig_config", mig_config="all-balanced", timeout=10)
    assert result["changed"] is True and result["mig_config_state"] == "success"
    assert again["changed"] is False
    api.mig_manager("gpu-1", "failed")
    failed = step(api, "mig_config", mig_config="all-1g.10gb", timeout=10)
    assert failed["failed"] is True
    assert failed["msg"].startswith("The GPU operator's MIG manager did not apply all-1g.10gb on node gpu-1: "
                                    "nvidia.com/mig.config.state=failed after it failed.")


def test_dra_node_is_not_double_advertised(api):
    failed = step(api, "dra")
    assert failed["failed"] is True
    assert failed["msg"].startswith("The device plugin advertises 8 nvidia.com/gpu on node gpu-1: with the DRA "
                                    "driver's GPU plugin the same GPUs would be handed out twice.")
    api.add_operands("gpu-1", ("device-plugin",))
    labelled = step(api, "dra")
    assert labelled["changed"] is True, labelled.get("msg")
    assert api.node("gpu-1")["metadata"]["labels"]["nvidia.com/gpu.deploy.device-plugin"] == "false"


def test_sharing_on_a_node_without_a_device_plugin_yet_has_no_restart_to_wait_for(tmp_path):
    """A bare node (no device plugin yet: site.yml's cluster stage deploys it after this stage)."""
    standin = KubeApiStandin([Node("gpu-1", gpus=8, bare=True)], token=TOKEN).start()
    try:
        standin.kubeconfig = standin.write_kubeconfig(str(tmp_path / "kubeconfig"))
        done = step(standin, "sharing", sharing_configs=CONFIGS, sharing_config="h100-ts",
                    physical={"nvidia.com/gpu": 8})
        assert done["changed"] is True and done["device_plugin_running"] is False
    finally:
        standin.stop()
