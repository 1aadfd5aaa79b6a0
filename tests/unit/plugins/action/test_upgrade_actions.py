"""The upgrade action plugins through ansible itself: faults a user can cause give a clear message, no traceback."""
import json
import os
import socket
import subprocess
import sys
from unit_paths import REPO

sys.path.insert(0, os.path.join(REPO, "tests", "testbed"))

from kube_api_standin import KubeApiStandin, Node, write_kubeconfig  # noqa: E402


def run_steps(steps, tmp_path):
    """Each (module, args, check) as a task of one ansible-playbook run (one start-up for them all), in order; a
    failed task does not stop the next. Returns each task's result."""
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(REPO, "ansible.cfg"), ANSIBLE_STDOUT_CALLBACK="json",
               ANSIBLE_LOAD_CALLBACK_PLUGINS="1", ANSIBLE_LOCALHOST_WARNING="0",
               ANSIBLE_COLLECTIONS_PATH=os.path.join(REPO, ".cache", "collections"))
    tasks = [{module: args, "check_mode": check, "ignore_errors": True} for module, args, check in steps]
    playbook = tmp_path / "steps.json"
    playbook.write_text(json.dumps([{"hosts": "localhost", "gather_facts": False, "tasks": tasks}]))
    argv = [os.path.join(os.path.dirname(sys.executable), "ansible-playbook"), "-i", "localhost,", "-c", "local",
            "-e", "ansible_python_interpreter=%s" % sys.executable, str(playbook)]
    proc = subprocess.run(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True,
                          timeout=120, check=False)
    assert "Traceback" not in proc.stdout + proc.stderr, proc.stdout + proc.stderr
    return [task["hosts"]["localhost"] for task in json.loads(proc.stdout)["plays"][0]["tasks"]]


def test_an_unreachable_api_is_named(tmp_path):
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    kubeconfig = str(tmp_path / "kubeconfig")
    write_kubeconfig(kubeconfig, "http://127.0.0.1:%d" % port)
    results = run_steps([(module, {"kubeconfig": kubeconfig, "node": "gpu-1"}, False)
                         for module in ("gpunode.nvidia.gpu_upgrade_slot", "gpunode.nvidia.gpu_upgrade_state")],
                        tmp_path)
    for result in results:
        assert result["failed"] and "cannot reach the Kubernetes API of kubeconfig %s" % kubeconfig in result["msg"]


def test_bad_limits_and_unknown_nodes_are_explained_and_check_mode_takes_no_slot(tmp_path):
    with KubeApiStandin([Node("gpu-1"), Node("gpu-2")]) as api:
        kubeconfig = api.write_kubeconfig(str(tmp_path / "kubeconfig"))
        slot = {"kubeconfig": kubeconfig, "node": "gpu-1", "max_unavailable": 1}
        state = {"kubeconfig": kubeconfig, "node": "gpu-1", "op": "set"}
        checked, bad, missing, backwards, jump = run_steps([
            ("gpunode.nvidia.gpu_upgrade_slot", slot, True),
            ("gpunode.nvidia.gpu_upgrade_slot", dict(slot, max_unavailable="0"), False),
            ("gpunode.nvidia.gpu_upgrade_state", {"kubeconfig": kubeconfig, "node": "gpu-9"}, False),
            ("gpunode.nvidia.gpu_upgrade_state", dict(state, state="upgrade-failed"), False),
            ("gpunode.nvidia.gpu_upgrade_state", dict(state, state="upgrade-done"), False),
        ], tmp_path)
        assert checked["granted"] and not checked["changed"]
        # No step took a slot: the check-mode one wrote nothing, the refused one stopped before any write.
        assert api.leases == {} and {path for _at, _method, path in api.write_requests} == {"/api/v1/nodes/gpu-1"}
        assert bad["failed"] and "max_unavailable 0 allows no unavailable node" in bad["msg"]
        assert missing["failed"] and "node gpu-9 does not exist in the cluster" in missing["msg"]
        assert backwards["changed"]
        assert jump["failed"] and "only a retry (back to upgrade-required) may move it" in jump["msg"]


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
