"""The standard-library CRI client and gpunode.nvidia.cri_info against real containerd.

Debian's containerd 1.6.20 (bookworm), 1.7.24 (trixie) and 2.1.9 (sid), each a
private daemon on a non-standard socket. Parts that cannot exist here are
STAND-INS, named so: the `nvidia` runtime is tests/testbed/stand-ins/
nvidia-container-runtime (logs its argv, injects NVIDIA_STANDIN_INJECTED=1,
execs runc) and the vectoradd images are stand-ins for NVIDIA's CUDA sample
that pass only when that marker is present (tests/testbed/images.sh).
"""
import json
import os
import subprocess
import sys
import time

import pytest

import daemons
from daemons import cri, http2_grpc
import warm_ansible

NO_RUNTIME = 'no runtime for "nvidia" is configured'
SUCCESS_LINES = ["[Vector addition of 50000 elements]", "Test PASSED", "Done"]
FAILURE_LINE = "Result verification failed at element 0!"


@pytest.fixture
def plain_containerd(cri_containerd):
    """The release's daemon running the minimal config: runc only."""
    cri_containerd.configure(cri_containerd.minimal_config())
    return cri_containerd


@pytest.fixture
def nvidia_containerd(cri_containerd):
    """The release's daemon running the minimal config plus an `nvidia` runtime whose
    BinaryName is the stand-in nvidia-container-runtime."""
    cri_containerd.configure(cri_containerd.minimal_config(runtimes={"nvidia": daemons.STANDIN_RUNTIME}))
    return cri_containerd


def test_version_and_status_on_a_private_socket(plain_containerd):
    client = plain_containerd.client()
    assert plain_containerd.socket != cri.DEFAULT_SOCKET
    version = client.version()
    assert version["runtime_name"] == "containerd"
    assert version["runtime_version"].startswith(plain_containerd.dist.version)
    assert version["runtime_api_version"] == "v1"
    status = client.status(verbose=True)
    assert cri.runtime_ready(status)
    conditions = dict((c["type"], c) for c in status["status"]["conditions"])
    assert conditions["NetworkReady"]["status"] is False  # no CNI here, RuntimeReady is what counts
    assert set(cri.runtimes_from_status(status)) == {"runc"}
    assert cri.default_runtime_from_status(status) == "runc"
    # the effective config the daemon reports is this private one
    config = json.loads(status["info"]["config"])
    assert config["containerdEndpoint"] == plain_containerd.socket
    assert config["containerdRootDir"] == plain_containerd.root


def test_nvidia_sandbox_without_the_runtime_fails_like_incident_i1(plain_containerd):
    client = plain_containerd.client()
    sandbox = cri.sandbox_config("i1", "uid-i1", log_directory=plain_containerd.pod_logs)
    with pytest.raises(http2_grpc.CRIError) as caught:
        client.run_pod_sandbox(sandbox, runtime_handler="nvidia")
    assert caught.value.code_name == "UNKNOWN"
    assert caught.value.message.endswith(NO_RUNTIME)  # verbatim, Huffman-decoded from grpc-message
    assert not [s for s in client.list_pod_sandboxes() if s["state"] == 0]
    assert not plain_containerd.standin_invocations()


def test_nvidia_runtime_is_listed_and_used_after_restart(plain_containerd):
    ctrd = plain_containerd
    old_pid = ctrd.pid
    assert ctrd.configure(ctrd.minimal_config(runtimes={"nvidia": daemons.STANDIN_RUNTIME}))
    assert ctrd.pid != old_pid
    client = ctrd.client()
    status = client.status(verbose=True)
    runtimes = cri.runtimes_from_status(status)
    assert runtimes["nvidia"]["binary_name"] == daemons.STANDIN_RUNTIME
    assert runtimes["nvidia"]["runtime_type"] == "io.containerd.runc.v2"
    assert cri.default_runtime_from_status(status) == "runc"

    sandbox = cri.sandbox_config("through-nvidia", "uid-nv", log_directory=ctrd.pod_logs)
    sandbox_id = client.run_pod_sandbox(sandbox, runtime_handler="nvidia")
    try:
        [listed] = [s for s in client.list_pod_sandboxes() if s["id"] == sandbox_id]
        assert listed["state"] == 0 and listed["metadata"]["name"] == "through-nvidia"
        assert listed["runtime_handler"] == "nvidia"
        creates = [line for line in ctrd.standin_invocations() if " create " in line and sandbox_id in line]
        assert creates, "the stand-in runtime never created the sandbox:\n%s" % "\n".join(
            ctrd.standin_invocations())
        assert "--bundle" in creates[0]
    finally:
        client.stop_pod_sandbox(sandbox_id)
        client.remove_pod_sandbox(sandbox_id)
    assert sandbox_id not in [s["id"] for s in client.list_pod_sandboxes()]


@pytest.mark.parametrize("handler, exit_code, expected", [
    ("nvidia", 0, SUCCESS_LINES),
    ("runc", 1, [FAILURE_LINE]),
], ids=["nvidia", "runc"])
def test_vectoradd_standin_passes_only_through_the_nvidia_handler(nvidia_containerd, handler, exit_code, expected):
    run = daemons.run_workload(nvidia_containerd, handler, daemons.VECTORADD_IMAGE, name="vectoradd",
                               envs={"NVIDIA_VISIBLE_DEVICES": "all"})
    assert run.exit_code == exit_code, run.output
    lines = run.output.splitlines()
    for line in expected:
        assert line in lines
    assert ("Test PASSED" in lines) == (handler == "nvidia")
    invoked = any(run.container_id in line for line in nvidia_containerd.standin_invocations())
    assert invoked == (handler == "nvidia")


def test_vectoradd_fail_standin_reports_the_wrong_result(nvidia_containerd):
    run = daemons.run_workload(nvidia_containerd, "nvidia", daemons.VECTORADD_FAIL_IMAGE, name="vectoradd-fail")
    assert run.exit_code == 1
    assert FAILURE_LINE in run.output.splitlines() and "Test PASSED" not in run.output


def test_large_request_and_images_on_the_real_daemon(plain_containerd):
    client = plain_containerd.client()
    # ~200 kB: several DATA frames, beyond the server's initial 64 KiB flow-control window
    labels = dict(("gpunode.test/label-%04d" % i, "v" * 100) for i in range(1500))
    assert client.list_pod_sandboxes(labels=labels) == []
    tags = [tag for image in client.list_images() for tag in image["repo_tags"]]
    assert daemons.PAUSE_IMAGE in tags and daemons.VECTORADD_IMAGE in tags
    assert client.image_status(daemons.VECTORADD_IMAGE)["repo_tags"] == [daemons.VECTORADD_IMAGE]
    assert client.image_status("localhost/gpunode/absent:1") is None


def _start_cri_info(args, check_mode=True):
    """Start the module file as Ansible would, with ARGS on stdin; finish with _result()."""
    module = os.path.join(daemons.REPO, "plugins", "modules", "cri_info.py")
    payload = dict(args, _ansible_check_mode=check_mode)
    env = dict(os.environ, PYTHONPATH=os.path.join(daemons.REPO, ".cache", "collections"))
    process = subprocess.Popen([sys.executable, module], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, env=env)
    process.stdin.write(json.dumps({"ANSIBLE_MODULE_ARGS": payload}).encode())
    process.stdin.close()
    return process


def _result(process):
    out = process.stdout.read()
    process.wait(60)
    return json.loads(out.decode())


def _cri_info(args, check_mode=True):
    return _result(_start_cri_info(args, check_mode))


def test_cri_info_module_reports_the_live_runtimes(nvidia_containerd):
    result = _cri_info({"socket": "unix://" + nvidia_containerd.socket, "wait_ready": 10})
    assert not result.get("failed"), result
    assert result["changed"] is False and result["ready"] is True
    assert result["runtimes"]["nvidia"] == {"runtime_type": "io.containerd.runc.v2",
                                            "binary_name": daemons.STANDIN_RUNTIME, "systemd_cgroup": False}
    assert result["default_runtime"] == "runc"
    assert result["runtime_name"] == "containerd"
    assert result["runtime_version"].startswith(nvidia_containerd.dist.version)
    assert "RuntimeReady" in [c["type"] for c in result["conditions"]]


def test_cri_info_module_explains_a_wrong_socket(tmp_path):
    socket = str(tmp_path / "containerd.sock")
    result = _cri_info({"socket": socket, "timeout": 2})
    assert result["failed"] and result["ready"] is False
    assert socket in result["msg"] and "kubelet" in result["msg"]


def test_cri_info_explains_a_containerd_without_cri(private_containerd):
    ctrd = private_containerd("bookworm")
    # what some distro packages ship (disabled_plugins = ["cri"]): Kubernetes cannot use such a daemon
    ctrd.start('version = 2\ndisabled_plugins = ["io.containerd.grpc.v1.cri"]\n', wait_cri=False)
    result = _cri_info({"socket": ctrd.socket})
    assert result["failed"] and result["grpc_code"] == "UNIMPLEMENTED"
    assert "does not serve CRI runtime.v1" in result["msg"] and "disabled_plugins" in result["msg"]


def test_cri_info_waits_for_a_restarting_daemon(private_containerd):
    ctrd = private_containerd("bookworm")
    ctrd.start(ctrd.minimal_config())
    ctrd.stop()
    started = time.time()
    waiting = _start_cri_info({"socket": ctrd.socket, "wait_ready": 30})
    time.sleep(1.0)
    ctrd.start()
    result = _result(waiting)
    assert not result.get("failed"), result
    assert result["ready"] is True and list(result["runtimes"]) == ["runc"]
    assert 1.0 <= time.time() - started < 10


def test_cri_info_gives_up_after_wait_ready(tmp_path):
    started = time.time()
    result = _cri_info({"socket": str(tmp_path / "gone.sock"), "wait_ready": 1})
    assert result["failed"] and result["ready"] is False and "(waited 1s)" in result["msg"]
    assert 1.0 <= time.time() - started < 10


def test_cri_info_by_fqcn_through_ansible_in_check_mode(private_containerd):
    ctrd = private_containerd("sid")
    ctrd.start(ctrd.minimal_config(runtimes={"nvidia": daemons.STANDIN_RUNTIME}))
    env = dict(os.environ, ANSIBLE_LOAD_CALLBACK_PLUGINS="1", ANSIBLE_STDOUT_CALLBACK="ansible.builtin.json",
               ANSIBLE_COLLECTIONS_PATH=os.path.join(daemons.REPO, ".cache", "collections"))
    ansible = os.path.join(os.path.dirname(sys.executable), "ansible")
    completed = warm_ansible.run(
        [ansible, "localhost", "--check", "-m", "gpunode.nvidia.cri_info",
         "-a", "socket=%s wait_ready=5" % ctrd.socket],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, cwd=daemons.REPO, timeout=120, check=False)
    result = json.loads(completed.stdout.decode())["plays"][0]["tasks"][0]["hosts"]["localhost"]
    assert completed.returncode == 0, result
    assert result["ready"] is True and result["changed"] is False
    assert sorted(result["runtimes"]) == ["nvidia", "runc"]
    assert result["runtime_version"].startswith("2.1.9")
