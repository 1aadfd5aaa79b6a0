"""gpunode.nvidia.gpu_node_maintenance against the Kubernetes API STAND-IN (tests/testbed/kube_api_standin.py).

No kube-apiserver can run on the test machines: the stand-in serves nodes, pods, the Eviction API with
PodDisruptionBudgets and the GPU operator's operand pods as the API server and the operator's DaemonSets would.
The action plugin runs for real through `ansible localhost` with the real `kubernetes` client.
"""
import json
import os
import sys

import pytest

from ansible_runner import run_module, run_tasks

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "testbed"))
from kube_api_standin import KubeApiStandin, Node  # noqa: E402

MODULE = "gpunode.nvidia.gpu_node_maintenance"
TOKEN = "standin-maintenance-token-42"
INITIAL_STATE = "nvidia.com/gpu-driver-upgrade.node-initial-state.unschedulable"
OWNER = "gpunode.nvidia/maintenance-owner"


@pytest.fixture
def api(tmp_path):
    standin = KubeApiStandin([Node("gpu-1"), Node("gpu-2"), "cpu-1"], pod_seconds=0.3, token=TOKEN).start()
    standin.kubeconfig = standin.write_kubeconfig(str(tmp_path / "kubeconfig"))
    yield standin
    standin.stop()


def step_params(api, name, node="gpu-1", **args):
    params = dict(kubeconfig=api.kubeconfig, node=node, step=name, owner="upgrade", timeout=20, retry_interval=0.2)
    params.update(args)
    return params


def assert_no_secret_and_no_traceback(result):
    assert TOKEN not in json.dumps(result)
    assert "Traceback" not in json.dumps(result)


def step(api, name, node="gpu-1", check=False, **args):
    result = run_module(MODULE, step_params(api, name, node, **args), check=check)
    assert_no_secret_and_no_traceback(result)
    return result


def steps(api, names, check=False, **args):
    """Several steps in one ansible-playbook run (each a task of its own), by name."""
    results = run_tasks(MODULE, [(step_params(api, name, **args), check) for name in names])
    assert_no_secret_and_no_traceback(results)
    return dict(zip(names, results))


def test_eviction_waits_for_a_budget_that_allows_after_two_refusals(api):
    api.add_gpu_pod("ml", "train-1", "gpu-1", labels={"app": "train"})
    api.add_gpu_pod("ml", "web-1", "gpu-1", gpus=0, labels={"app": "web"})    # no GPU: stays
    api.add_gpu_pod("ml", "train-2", "gpu-2", labels={"app": "train"})        # another node: stays
    api.add_operands("gpu-1", ("device-plugin",))                             # DaemonSet pod: stays
    api.add_pdb("ml", "train-pdb", {"app": "train"}, disruptions_allowed=1, refuse_first=2)
    assert step(api, "cordon")["changed"] is True
    result = step(api, "evict_gpu_pods")
    assert not result.get("failed"), result["msg"]
    assert result["evicted"] == ["ml/train-1"] and result["blocked_by"] == {"ml/train-1": "ml/train-pdb"}
    assert api.evictions == [("ml", "train-1")]
    assert len(api.evictions_refused) == 2
    assert sorted(name for _ns, name in api.pods) == sorted(
        ["web-1", "train-2", "nvidia-device-plugin-daemonset-gpu-1"])


def test_a_budget_that_never_allows_fails_naming_pod_and_budget(api):
    api.add_gpu_pod("ml", "train-1", "gpu-1", labels={"app": "train"})
    api.add_pdb("ml", "train-pdb", "app=train", disruptions_allowed="never")
    step(api, "cordon")
    result = step(api, "evict_gpu_pods", timeout=1)
    assert result["failed"] is True
    assert result["msg"] == (
        "cannot evict ml/train-1 from node gpu-1 within 1s: ml/train-1 is held by PodDisruptionBudget ml/train-pdb. "
        "Cannot evict pod as it would violate the pod's disruption budget: free the budget (scale the workload up or "
        "relax the budget), move the pod yourself, or raise the timeout; the node stays cordoned")
    assert api.node("gpu-1")["spec"]["unschedulable"] is True
    assert ("ml", "train-1") in api.pods


def test_dra_claim_holder_and_mig_pod_are_evicted_drain_takes_the_rest(api):
    api.add_gpu_pod("ml", "dra-1", "gpu-1", gpus=0, claims=["gpu-claim"])
    api.add_gpu_pod("ml", "mig-1", "gpu-1", resource="nvidia.com/mig-1g.10gb")
    api.add_gpu_pod("ml", "web-1", "gpu-1", gpus=0)
    api.eviction_grace = 0.5  # evicted pods terminate for a while: the step waits for them to go
    result = step(api, "evict_gpu_pods")
    assert sorted(result["evicted"]) == ["ml/dra-1", "ml/mig-1"]
    assert ("ml", "dra-1") not in api.pods and ("ml", "web-1") in api.pods
    result = step(api, "drain")
    assert result["evicted"] == ["ml/web-1"] and not api.pods


def test_node_cordoned_by_someone_else_stays_cordoned_after_leave(api):
    api.nodes["gpu-1"].unschedulable = True
    result = step(api, "cordon")
    assert result["was_unschedulable"] is True
    assert api.node("gpu-1")["metadata"]["annotations"] == {INITIAL_STATE: "true", OWNER: "upgrade"}
    again = step(api, "cordon")  # a rerun after a killed run: nothing to do, the record stays
    assert again["changed"] is False and again["was_unschedulable"] is True
    result = step(api, "uncordon")
    assert result["uncordoned"] is False
    assert result["msg"] == "node gpu-1 left cordoned: it was unschedulable before the maintenance"
    node = api.node("gpu-1")
    assert node["spec"]["unschedulable"] is True and "annotations" not in node["metadata"]


def test_cordon_then_uncordon_and_another_owner_is_refused(api):
    step(api, "cordon")
    assert api.node("gpu-1")["spec"]["unschedulable"] is True
    refused = step(api, "cordon", owner="partitioning")
    assert refused["failed"] is True and refused["msg"] == (
        "node gpu-1 is in maintenance by upgrade (annotation gpunode.nvidia/maintenance-owner); finish or leave "
        "that maintenance first")
    result = step(api, "uncordon")
    assert result["uncordoned"] is True and not api.node("gpu-1")["spec"].get("unschedulable")
    assert api.peak_unavailable == 1 and api.unavailable_timeline[-1][1] == 0


def test_operands_paused_and_exactly_those_restored(api):
    api.add_operands("gpu-1", ("device-plugin", "dcgm-exporter"))
    api.nodes["gpu-1"].labels["nvidia.com/gpu.deploy.dcgm"] = "false"  # switched off by the admin: stays off
    result = step(api, "pause_gpu_operands")
    assert result["operands"] == ["dcgm-exporter", "device-plugin"]
    assert api.operand_pods("gpu-1") == []
    labels = api.node("gpu-1")["metadata"]["labels"]
    assert labels["nvidia.com/gpu.deploy.device-plugin"] == "false"
    assert step(api, "pause_gpu_operands")["changed"] is False
    result = step(api, "resume_gpu_operands")
    assert result["operands"] == ["dcgm-exporter", "device-plugin"]
    labels = api.node("gpu-1")["metadata"]["labels"]
    assert labels["nvidia.com/gpu.deploy.device-plugin"] == "true" and labels["nvidia.com/gpu.deploy.dcgm"] == "false"
    assert len(api.operand_pods("gpu-1")) == 2
    assert "annotations" not in api.node("gpu-1")["metadata"]


def test_resume_waits_until_the_operand_pods_run_again(api):
    api.add_operands("gpu-1", ("device-plugin", "dcgm-exporter"))
    step(api, "pause_gpu_operands")
    api.operand_start_seconds = 3  # the operator's DaemonSets take a while to start the pods again
    result = step(api, "resume_gpu_operands")
    assert not result.get("failed"), result["msg"]
    assert result["msg"].endswith("running again"), result["msg"]
    pods = [api.pod_view(api.pods[("gpu-operator", name)]) for name in api.operand_pods("gpu-1")]
    assert len(pods) == 2 and all(pod["status"]["phase"] == "Running" for pod in pods)
    # The step looked at the pods again until they ran: more than one listing after the labels went back to true.
    resumed = max(i for i, (_t, method, path) in enumerate(api.requests) if method == "PATCH")
    looks = [path for _t, method, path in api.requests[resumed:] if method == "GET" and path.startswith("/api/v1/pods")]
    assert len(looks) >= 2, api.requests[resumed:]


def test_resume_fails_naming_an_operand_pod_that_never_runs(api):
    api.add_operands("gpu-1", ("device-plugin",))
    step(api, "pause_gpu_operands")
    api.operand_start_seconds = None  # CrashLoopBackOff
    result = step(api, "resume_gpu_operands", timeout=1)
    assert result.get("failed"), result
    assert "GPU operator pods not running on node gpu-1 1s after their nvidia.com/gpu.deploy.* labels were set back" \
        in result["msg"], result["msg"]
    assert "nvidia-device-plugin-daemonset (Pending, CrashLoopBackOff)" in result["msg"], result["msg"]
    assert api.node("gpu-1")["metadata"]["labels"]["nvidia.com/gpu.deploy.device-plugin"] == "true"


def test_wait_for_jobs_times_out_naming_the_pods(api):
    api.add_gpu_pod("ml", "job-1", "gpu-1", labels={"app": "batch"})
    api.add_gpu_pod("ml", "job-0", "gpu-1", labels={"app": "batch"}, phase="Succeeded")
    result = step(api, "wait_for_jobs", job_selector="app=batch", timeout=1)
    assert result["failed"] is True
    assert result["msg"] == ("pods matching 'app=batch' still run on node gpu-1 after 1s: ml/job-1. Wait for them to "
                             "finish, stop them, or raise the timeout; the node is not cordoned")


def test_validate_waits_for_allocatable_and_runs_the_pod_on_the_cordoned_node(api):
    api.set_allocatable("gpu-1", "nvidia.com/gpu", 0)
    result = step(api, "validate", timeout=1)
    assert result["failed"] is True
    assert result["msg"].startswith("node gpu-1 is not ready for GPU work 1s after maintenance: "
                                    "nvidia.com/gpu allocatable 0, expected at least 1.")
    api.set_allocatable("gpu-1", "nvidia.com/gpu", 1)
    step(api, "cordon")
    result = step(api, "validate", validate_pod=True)
    assert not result.get("failed"), result["msg"]
    assert result["pod"]["passed"] is True and result["msg"].endswith("a GPU pod passed")


def test_check_mode_writes_nothing(api):
    api.add_gpu_pod("ml", "train-1", "gpu-1", labels={"app": "train"})
    api.add_pdb("ml", "train-pdb", {"app": "train"}, disruptions_allowed=0)
    api.add_operands("gpu-1", ("device-plugin",))
    results = steps(api, ("cordon", "wait_for_jobs", "pause_gpu_operands", "evict_gpu_pods", "drain",
                          "resume_gpu_operands", "validate", "uncordon"), check=True, job_selector="app=train")
    assert api.write_requests == []
    assert results["cordon"]["changed"] is True and results["cordon"]["would"] == "cordon node gpu-1"
    assert results["evict_gpu_pods"]["would"] == (
        "evict GPU pods from node gpu-1: ml/train-1 (waits for PodDisruptionBudget ml/train-pdb, 0 disruptions "
        "allowed now)")
    assert results["pause_gpu_operands"]["would"] == "set nvidia.com/gpu.deploy.device-plugin to false"
    assert results["wait_for_jobs"]["would"] == "wait for ml/train-1"
    assert not any(r.get("failed") for r in results.values()), results
