"""gpunode.nvidia.gpu_cluster_check against a Kubernetes API STAND-IN, plus explain.py's rules.

No kube-apiserver or kubelet can run on the test machines. tests/testbed/kube_api_standin.py
stands in for the API server: it speaks the REST subset the official `kubernetes` client uses
here (nodes, runtimeclasses, pods, pod log, events) and scripts what each node's kubelet and
the scheduler would do. The action plugin runs for real through `ansible localhost` with the
real client; the stand-in is the only thing that is not real.
"""
import json
import os
import subprocess
import sys
import time

import pytest

import daemons
from ansible_runner import REPO, run_module
from ansible_collections.gpunode.nvidia.plugins.module_utils.workload.explain import explain, explain_first

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "testbed"))
from kube_api_standin import KubeApiStandin, Node  # noqa: E402
import warm_ansible  # noqa: E402

MODULE = "gpunode.nvidia.gpu_cluster_check"
TOKEN = "standin-secret-token-123"
CONFIG = "/var/lib/k8s-containerd/k8s-containerd/etc/containerd/config.toml"


@pytest.fixture
def cluster(tmp_path):
    """Factory: cluster(nodes, pod_seconds) -> a started stand-in with a kubeconfig at .kubeconfig."""
    started = []

    def make(nodes, pod_seconds=0.5, **kwargs):
        api = KubeApiStandin(nodes, pod_seconds=pod_seconds, token=TOKEN, **kwargs).start()
        started.append(api)
        api.kubeconfig = api.write_kubeconfig(str(tmp_path / ("kubeconfig-%d" % len(started))))
        return api
    yield make
    for api in started:
        api.stop()


def verify(api, check=False, **args):
    params = dict(kubeconfig=api.kubeconfig, poll_interval=0.1, timeout=20)
    params.update(args)
    started = time.time()
    result = run_module(MODULE, params, check=check)
    result["wall_s"] = time.time() - started
    assert TOKEN not in json.dumps(result)  # credentials never come back
    return result


def test_one_node_passes_and_cleans_up(cluster, tmp_path):
    api = cluster([Node("gpu-1", gpus=8, driver="550.54.15"), "cpu-1"])
    report = str(tmp_path / "out" / "gpu-verify.json")
    result = verify(api, nodes=["gpu-1"], report_path=report)
    assert not result.get("failed"), result["msg"]
    assert result["changed"] is True and result["runtime_class_state"] == "created"
    assert api.runtimeclasses["nvidia"]["handler"] == "nvidia"
    node = result["nodes"][0]
    assert node["passed"] is True and node["result"] == "passed"
    assert node["gpu_allocatable"] == "8" and node["driver"] == "550.54.15"
    assert node["runtime"] == "containerd://1.7.24"
    # The pod as a real GPU pod: runtime class, one GPU, pinned by hostname, GPU taint tolerated.
    (key, body), = api.created_pod_bodies.items()
    spec = body["spec"]
    assert spec["runtimeClassName"] == "nvidia" and spec["restartPolicy"] == "Never"
    assert spec["nodeSelector"] == {"kubernetes.io/hostname": "gpu-1"}
    assert spec["containers"][0]["resources"] == {"requests": {"nvidia.com/gpu": "1"}, "limits": {"nvidia.com/gpu": "1"}}
    # The GPU taint, and the cluster stage's unproven taint: the proof is what lifts it.
    assert spec["tolerations"] == [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
                                   {"key": "gpunode.nvidia/unproven", "operator": "Exists", "effect": "NoSchedule"}]
    assert api.pods_deleted == [key] and api.pods == {}
    # Table and JSON report.
    assert result["table"][0].split() == ["NODE", "GPUS", "DRIVER", "RUNTIME", "RESULT", "TIME"]
    assert result["table"][1].split()[:5] == ["gpu-1", "8", "550.54.15", "containerd://1.7.24", "passed"]
    with open(report) as handle:
        written = json.load(handle)
    assert written["passed"] is True and written["nodes"][0]["node"] == "gpu-1"
    print("cluster check, 1 node (stand-in, pod takes 0.5s): %.2fs in the plugin, %.2fs as an ansible task" % (
        result["duration_s"], result["wall_s"]))

    again = verify(api, nodes=["gpu-1"])
    assert again["changed"] is False and again["runtime_class_state"] == "present"


# behaviour -> (result, rule, incident)
FAILURES = {
    "zero_allocatable": ("timeout", "insufficient-gpu", None),
    "no_runtime": ("failed", "no-runtime", "I1"),
    "glibc": ("failed", "glibc", "I4"),
    "image_pull": ("failed", "image-pull", None),
    "not_ready": ("timeout", "node-not-ready", "I3"),
    "cuda_fail": ("failed", "cuda-result-wrong", None),
    "hang": ("timeout", "timeout", None),
}


def bad_node(behaviour):
    return "gpu-bad-" + behaviour.replace("_", "-")


@pytest.fixture(scope="module")
def failures(tmp_path_factory):
    """One check of a cluster with a node of each failing behaviour (and one good node it does not check): the
    nodes are checked at once, as in a fleet, in one module run."""
    api = KubeApiStandin([Node("gpu-1")] + [Node(bad_node(b), b) for b in sorted(FAILURES)], pod_seconds=0.5,
                         token=TOKEN).start()
    try:
        api.kubeconfig = api.write_kubeconfig(str(tmp_path_factory.mktemp("failures") / "kubeconfig"))
        nodes = [{"name": bad_node(b), "config_path": CONFIG, "socket": "/run/containerd/containerd.sock"}
                 for b in sorted(FAILURES)]
        result = verify(api, nodes=nodes, timeout=3)
        yield api, result
    finally:
        api.stop()


@pytest.mark.parametrize("behaviour", sorted(FAILURES))
def test_failures_are_explained(failures, behaviour):
    api, result = failures
    expected_result, rule, incident = FAILURES[behaviour]
    name = bad_node(behaviour)
    assert result["failed"] is True and result["passed"] is False
    (node,) = [each for each in result["nodes"] if each["node"] == name]
    assert node["result"] == expected_result, node
    assert node["explanation"]["rule"] == rule and node["explanation"]["incident"] == incident
    assert name in node["explanation"]["cause"] + node["explanation"]["fix"]
    assert api.pods == {}, "the pod must be deleted also on failure"
    assert name in result["msg"] and node["explanation"]["cause"] in result["msg"]
    if behaviour == "no_runtime":
        assert CONFIG in node["explanation"]["cause"]  # I1 names the node's discovered config file
        assert any(e["reason"] == "FailedCreatePodSandBox" for e in node["events"])
        assert node["duration_s"] < 3, "a missing runtime is judged at once, not after the timeout"
    if behaviour == "zero_allocatable":
        assert node["gpu_allocatable"] == "0" and "device plugin" in node["explanation"]["cause"]
    if behaviour == "cuda_fail":
        assert "Result verification failed" in node["log"]


def test_twenty_nodes_run_in_parallel(cluster):
    pod_seconds = 2.0
    api = cluster([Node("gpu-%02d" % i) for i in range(20)], pod_seconds=pod_seconds)
    result = verify(api, node_selector="nvidia.com/gpu.present=true", poll_interval=0.2)
    assert not result.get("failed"), result["msg"]
    assert [n["result"] for n in result["nodes"]] == ["passed"] * 20
    serial = 20 * pod_seconds
    print("cluster check, 20 nodes (stand-in, each pod takes %.1fs; serial would be >= %.0fs): "
          "%.2fs in the plugin, %.2fs as an ansible task, %d pods at once" % (
              pod_seconds, serial, result["duration_s"], result["wall_s"], api.peak_pods))
    assert api.peak_pods == 20
    assert result["duration_s"] < serial / 4
    assert len(api.pods_deleted) == 20 and api.pods == {}
    assert len(result["table"]) == 21


def test_node_selector_skips_cpu_nodes(cluster):
    api = cluster([Node("gpu-1"), "cpu-1", "cpu-2"])
    result = verify(api, node_selector="nvidia.com/gpu.present=true")
    assert [n["node"] for n in result["nodes"]] == ["gpu-1"]


def test_unknown_node_is_an_error(cluster):
    api = cluster([Node("gpu-1")])
    result = verify(api, nodes=["gpu-1", "not-a-node"])
    assert result["failed"] is True
    by_node = dict((n["node"], n) for n in result["nodes"])
    assert by_node["gpu-1"]["passed"] is True
    assert by_node["not-a-node"]["result"] == "error" and "not in the cluster" in by_node["not-a-node"]["message"]


def test_runtime_class_with_another_handler_is_refused(cluster):
    api = cluster([Node("gpu-1")], runtimeclasses={"nvidia": "runc"})
    result = verify(api, nodes=["gpu-1"])
    assert result["failed"] is True and "handler runc" in result["msg"]
    assert api.pods_created == []


def test_check_mode_runs_no_pod(cluster):
    api = cluster([Node("gpu-1")])
    result = verify(api, check=True, nodes=["gpu-1"])
    assert result["changed"] is True and result["runtime_class_state"] == "would-create"
    assert api.runtimeclasses == {} and api.pods_created == []


def test_bad_token_is_reported(cluster, tmp_path):
    api = cluster([Node("gpu-1")])
    with open(api.kubeconfig) as handle:
        config = json.load(handle)
    config["users"][0]["user"]["token"] = "wrong"
    bad = str(tmp_path / "bad-kubeconfig")
    with open(bad, "w") as handle:
        json.dump(config, handle)
    result = run_module(MODULE, dict(kubeconfig=bad, nodes=["gpu-1"]))
    assert result["failed"] is True and "Unauthorized" in result["msg"]


# --------------------------------------------------------------------------
# the role: node level on a real containerd, cluster level on the stand-in
# --------------------------------------------------------------------------

def run_verify_playbook(extra_vars, path_prepend):
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(REPO, "ansible.cfg"),
               ANSIBLE_COLLECTIONS_PATH=os.path.join(REPO, ".cache", "collections"), ANSIBLE_FORCE_COLOR="0",
               PATH=os.pathsep.join(list(path_prepend) + [os.environ.get("PATH", "")]))
    extra = dict(extra_vars, gpunode_hosts="localhost", ansible_connection="local",
                 ansible_python_interpreter=sys.executable)
    argv = [os.path.join(os.path.dirname(sys.executable), "ansible-playbook"), "-i", "localhost,",
            os.path.join(REPO, "playbooks", "verify.yml"), "-e", json.dumps(extra)]
    return warm_ansible.run(argv, env=env, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            universal_newlines=True, timeout=300, check=False)


@pytest.fixture
def role_node(standin_images, tmp_path):
    """A private containerd 1.6.20 with the stand-in nvidia runtime: the play's one node."""
    with daemons.running_containerd("bookworm", images=("pause",),
                                    runtimes={"nvidia": daemons.STANDIN_RUNTIME}) as ctrd:
        ctrd.role_vars = dict(
            gpu_verify_engine="containerd", gpu_verify_socket=ctrd.socket, gpu_verify_config_path=ctrd.config_path,
            gpu_verify_image=daemons.VECTORADD_IMAGE, gpu_verify_image_tarball=standin_images["vectoradd"],
            gpu_verify_image_tarball_dir=str(tmp_path / "images"), gpu_verify_node_name="gpu-1",
            gpu_verify_poll_interval=0.1, gpu_verify_cluster_timeout=5)
        yield ctrd


def test_role_node_and_cluster_checks_pass_and_are_idempotent(role_node, cluster, tmp_path):
    api = cluster([Node("gpu-1")], runtimeclasses={"nvidia": "nvidia"})  # as site.yml's cluster stage leaves it
    report = str(tmp_path / "report.json")
    extra = dict(role_node.role_vars, gpunode_kubeconfig=api.kubeconfig, gpu_verify_report_path=report)
    first = run_verify_playbook(extra, [role_node.dist.bin_dir])
    assert first.returncode == 0, first.stdout[-4000:]
    assert "gpu-1: wiring-only (gpu none" in first.stdout
    assert "gpu-1  1     550.54.15  containerd://1.7.24  passed" in first.stdout
    with open(report) as handle:
        assert json.load(handle)["passed"] is True
    second = run_verify_playbook(extra, [role_node.dist.bin_dir])
    assert second.returncode == 0 and " changed=0 " in second.stdout, second.stdout[-3000:]
    assert TOKEN not in first.stdout + second.stdout


def test_role_cluster_failure_names_the_nodes_config_file(role_node, cluster):
    """I1 in the cluster: the explanation names the config file the node-level check discovered."""
    api = cluster([Node("gpu-1", "no_runtime")], runtimeclasses={"nvidia": "nvidia"})
    extra = dict(role_node.role_vars, gpunode_kubeconfig=api.kubeconfig)
    run = run_verify_playbook(extra, [role_node.dist.bin_dir])
    assert run.returncode != 0
    assert "failed (no-runtime)" in run.stdout
    assert "incident I1" in run.stdout and role_node.config_path in run.stdout
    assert api.pods == {}


def test_role_node_failure_stops_the_node_before_the_cluster_check(role_node, cluster):
    api = cluster([Node("gpu-1")])
    extra = dict(role_node.role_vars, gpunode_kubeconfig=api.kubeconfig, gpu_verify_runtime_handler="nvidia-x")
    run = run_verify_playbook(extra, [role_node.dist.bin_dir])
    assert run.returncode != 0
    assert "gpu-1: failed" in run.stdout and 'no runtime for "nvidia-x" is configured' in run.stdout
    assert "incident I1" in run.stdout
    assert api.pods_created == []  # the node failed: no cluster check for it


# --------------------------------------------------------------------------
# explain.py: real messages as daemons, kubelet and the scheduler write them
# --------------------------------------------------------------------------

CONTEXT = {"node": "gpu-7", "socket": "/run/k3s/containerd/containerd.sock",
           "config_path": "/var/lib/rancher/k3s/agent/etc/containerd/config.toml", "engine": "containerd"}

MESSAGES = [
    # containerd 1.6 / 2.1 RunPodSandbox (seen in tests/integration/test_gpu_verify_node.py)
    ('failed to get sandbox runtime: no runtime for "nvidia" is configured', "no-runtime", "I1"),
    ('unable to get OCI runtime for sandbox "c89": no runtime for "nvidia" is configured', "no-runtime", "I1"),
    ("docker: Error response from daemon: Unknown runtime specified nvidia.", "no-runtime", "I1"),
    ("/usr/bin/nvidia-container-cli.real: /lib64/libc.so.6: version `GLIBC_2.27' not found "
     "(required by /usr/bin/nvidia-container-cli.real)", "glibc", "I4"),
    ("OCI runtime create failed: unable to retrieve OCI runtime error (open /x/log.json: no such file or "
     "directory): fork/exec /usr/local/nvidia/toolkit/nvidia-container-runtime: no such file or directory: unknown",
     "missing-runtime-binary", "I5"),
    ('exec: "nvidia-container-runtime": executable file not found in $PATH', "missing-runtime-binary", "I5"),
    ('failed to get sandbox image "registry.k8s.io/pause:3.6": failed to pull image', "sandbox-image-pull", None),
    ('Failed to pull image "nvcr.io/nvidia/k8s/cuda-sample:x": dial tcp: lookup nvcr.io: no such host',
     "image-pull", None),
    ("Back-off pulling image: ImagePullBackOff", "image-pull", None),
    ("Result verification failed at element 12!", "cuda-result-wrong", None),
    ("nvidia-container-cli: initialization error: nvml error: driver not loaded", "no-driver", None),
    ("0/3 nodes are available: 1 Insufficient nvidia.com/gpu.", "insufficient-gpu", None),
    ("0/3 nodes are available: 1 node(s) had untolerated taint {node.kubernetes.io/not-ready: }",
     "node-not-ready", "I3"),
    ("0/3 nodes are available: 1 node(s) had untolerated taint {dedicated: gpu}", "untolerated-taint", None),
    ('pods "x" is forbidden: pod rejected: RuntimeClass "nvidia" not found', "runtimeclass-missing", None),
    ("cannot connect to /run/containerd/containerd.sock: No such file or directory", "runtime-unreachable", None),
    ("unknown service runtime.v1.RuntimeService", "cri-disabled", None),
    ("the workload did not finish within 300s", "timeout", None),
]


@pytest.mark.parametrize("message,rule,incident", MESSAGES, ids=[m[1] + "-%d" % i for i, m in enumerate(MESSAGES)])
def test_explain_known_messages(message, rule, incident):
    found = explain(message, CONTEXT)
    assert found is not None and found["rule"] == rule and found["incident"] == incident
    assert set(found) == {"rule", "cause", "incident", "fix"}
    assert found["cause"] and found["fix"]


def test_explain_names_node_socket_and_config():
    found = explain('no runtime for "nvidia" is configured', CONTEXT)
    text = found["cause"] + found["fix"]
    for named in CONTEXT.values():
        if named != "containerd":
            assert named in text


def test_explain_unknown_and_first():
    assert explain("everything is fine", CONTEXT) is None and explain("", None) is None
    assert explain_first(["nothing", "Insufficient nvidia.com/gpu"], {"allocatable_gpus": "0"})["rule"] == \
        "insufficient-gpu"
    assert "allocatable 0" in explain("Insufficient nvidia.com/gpu", {"allocatable_gpus": "0"})["cause"]
    assert "all of them taken" in explain("Insufficient nvidia.com/gpu", {"allocatable_gpus": "4"})["cause"]


def test_without_creating_it_a_missing_runtime_class_is_named_and_no_pod_runs(cluster):
    api = cluster([Node("gpu-1")])
    result = verify(api, nodes=["gpu-1"], create_runtime_class=False)
    assert result["failed"] is True
    assert result["msg"] == ("RuntimeClass nvidia does not exist: site.yml's cluster stage creates it "
                             "(gpunode_kubeconfig), or run the check with create_runtime_class")
    assert api.pods_created == [] and api.runtimeclasses == {}
