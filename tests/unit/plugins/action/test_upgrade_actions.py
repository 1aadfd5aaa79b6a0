"""The upgrade action plugins through ansible itself: faults a user can cause give a clear message, no traceback."""
import json
import os
import socket
import subprocess
import sys
from unit_paths import REPO

sys.path.insert(0, os.path.join(REPO, "tests", "testbed"))

from kube_api_standin import KubeApiStandin, Node, write_kubeconfig  # noqa: E402


def run(module, args, check=False):
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(REPO, "ansible.cfg"), ANSIBLE_STDOUT_CALLBACK="json",
               ANSIBLE_LOAD_CALLBACK_PLUGINS="1", ANSIBLE_LOCALHOST_WARNING="0",
               ANSIBLE_COLLECTIONS_PATH=os.path.join(REPO, ".cache", "collections"))
    argv = [os.path.join(os.path.dirname(sys.executable), "ansible"), "localhost", "-m", module, "-a", json.dumps(args),
            "-e", "ansible_python_interpreter=%s" % sys.executable] + (["--check"] if check else [])
    proc = subprocess.run(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True,
                          timeout=120, check=False)
    assert "Traceback" not in proc.stdout + proc.stderr, proc.stdout + proc.stderr
    return json.loads(proc.stdout)["plays"][0]["tasks"][0]["hosts"]["localhost"]


def test_an_unreachable_api_is_named(tmp_path):
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    kubeconfig = str(tmp_path / "kubeconfig")
    write_kubeconfig(kubeconfig, "http://127.0.0.1:%d" % port)
    for module in ("gpunode.nvidia.gpu_upgrade_slot", "gpunode.nvidia.gpu_upgrade_state"):
        result = run(module, {"kubeconfig": kubeconfig, "node": "gpu-1"})
        assert result["failed"] and "cannot reach the Kubernetes API of kubeconfig %s" % kubeconfig in result["msg"]


def test_bad_limits_and_unknown_nodes_are_explained(tmp_path):
    with KubeApiStandin([Node("gpu-1")]) as api:
        kubeconfig = api.write_kubeconfig(str(tmp_path / "kubeconfig"))
        bad = run("gpunode.nvidia.gpu_upgrade_slot", {"kubeconfig": kubeconfig, "node": "gpu-1", "max_unavailable": "0"})
        assert bad["failed"] and "max_unavailable 0 allows no unavailable node" in bad["msg"]
        missing = run("gpunode.nvidia.gpu_upgrade_state", {"kubeconfig": kubeconfig, "node": "gpu-9"})
        assert missing["failed"] and "node gpu-9 does not exist in the cluster" in missing["msg"]
        state = {"kubeconfig": kubeconfig, "node": "gpu-1", "op": "set"}
        backwards = run("gpunode.nvidia.gpu_upgrade_state", dict(state, state="upgrade-failed"))
        assert backwards["changed"]
        jump = run("gpunode.nvidia.gpu_upgrade_state", dict(state, state="upgrade-done"))
        assert jump["failed"] and "only a retry (back to upgrade-required) may move it" in jump["msg"]


def test_check_mode_takes_no_slot(tmp_path):
    with KubeApiStandin([Node("gpu-1"), Node("gpu-2")]) as api:
        kubeconfig = api.write_kubeconfig(str(tmp_path / "kubeconfig"))
        args = {"kubeconfig": kubeconfig, "node": "gpu-1", "max_unavailable": 1}
        result = run("gpunode.nvidia.gpu_upgrade_slot", args, check=True)
        assert result["granted"] and not result["changed"]
        assert api.write_requests == [] and api.leases == {}


def test_loading_an_action_defines_the_client_api_classes_once_for_every_task_worker():
    """Ansible loads an action plugin in its main process and forks a worker per host and task: the kubernetes
    client's API classes (CoreV1Api alone is about a second of CPU) must be defined at load, not in each worker."""
    probe = ("import sys; sys.path.insert(0, %r)\n"
             "import ansible_collections.gpunode.nvidia.plugins.action.gpu_upgrade_state\n"
             "print(sorted(name.rsplit('.', 1)[1] for name in sys.modules if name.startswith('kubernetes.client.api.')))"
             % os.path.join(REPO, ".cache", "collections"))
    loaded = subprocess.run([sys.executable, "-c", probe], stdout=subprocess.PIPE, universal_newlines=True,
                            timeout=120, check=True).stdout
    for api in ("core_v1_api", "coordination_v1_api", "policy_v1_api", "node_v1_api"):
        assert api in loaded, loaded
