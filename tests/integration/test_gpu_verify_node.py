"""gpunode.nvidia.gpu_workload_check against real containerd 1.6.20 and 2.1.9 and real dockerd 20.10.

These machines have no GPU and no NVIDIA software, so two STAND-INS take their place:

* tests/testbed/stand-ins/nvidia-container-runtime: the `nvidia` runtime's binary; it logs each
  call, adds NVIDIA_STANDIN_INJECTED=1 to the container's environment and execs runc;
* the stand-in vector-add images of tests/testbed/images.sh: `vectoradd-standin` prints the CUDA
  sample's success lines only when that marker is there (so a run that did not go through the
  `nvidia` handler fails), `vectoradd-fail-standin` prints the sample's failure line.

The module runs for real through `ansible localhost`, with the daemons' real sockets; the
daemons, the CRI calls, the image imports and pulls are real.
"""
import glob
import json
import os
import signal
import subprocess
import tempfile
import time

import pytest

import daemons
from ansible_runner import run_module, run_tasks

MODULE = "gpunode.nvidia.gpu_workload_check"
RELEASES = ("bookworm", "sid")  # containerd 1.6.20 and 2.1.9
MISSING_BINARY = "/usr/local/nvidia/toolkit/nvidia-container-runtime"  # incident I5
TIMINGS = {}


def creates(invocations):
    return sum(1 for line in invocations if " create " in line)


def pod_log_dirs():
    return glob.glob("/var/log/pods/gpunode-verify_*")


# --------------------------------------------------------------------------
# containerd
# --------------------------------------------------------------------------

@pytest.fixture(scope="module", params=RELEASES, ids=["containerd-1.6.20", "containerd-2.1.9"])
def node(request, standin_images):
    """A private containerd with the stand-in `nvidia` runtime, an `nvidia-i5` runtime whose
    binary does not exist, and only the sandbox image imported (the check imports the rest)."""
    runtimes = {"nvidia": daemons.STANDIN_RUNTIME, "nvidia-i5": MISSING_BINARY}
    with daemons.running_containerd(request.param, images=("pause",), runtimes=runtimes) as ctrd:
        ctrd.images = standin_images
        yield ctrd


def check_params(ctrd, **args):
    params = dict(engine="containerd", socket=ctrd.socket, config_path=ctrd.config_path,
                  image=daemons.VECTORADD_IMAGE, timeout=60, node_name="node-under-test")
    params.update(args)
    return params


def check(ctrd, check_mode=False, diff=False, **args):
    started = time.time()
    result = run_module(MODULE, check_params(ctrd, **args), path_prepend=[ctrd.dist.bin_dir], check=check_mode,
                        diff=diff)
    result["wall_s"] = time.time() - started
    return result


def assert_nothing_left(ctrd, result):
    client = ctrd.client()
    assert client.list_pod_sandboxes() == [] and client.list_containers() == []
    assert result["cleanup"] == {"removed": True, "problems": [], "leftovers": []}
    assert pod_log_dirs() == []


def has_image(ctrd, image):
    return ctrd.client().image_status(image) is not None


def test_check_mode_runs_nothing(node):
    result = check(node, check_mode=True, diff=True, image_tarball=node.images["vectoradd"])
    assert not result.get("failed"), result["msg"]
    assert result["changed"] is True and result["image_source"] == "would-import"
    assert result["verdict"] == "not-run" and "workload" not in result
    assert result["diff"]["after"].endswith("imported from the tarball\n")
    assert not has_image(node, daemons.VECTORADD_IMAGE)
    assert creates(node.standin_invocations()) == 0 and node.client().list_pod_sandboxes() == []


def test_vectoradd_passes_through_the_nvidia_handler(node):
    result = check(node, diff=True, image_tarball=node.images["vectoradd"])
    assert not result.get("failed"), result["msg"]
    assert result["changed"] is True and result["image_source"] == "imported"
    assert "diff" in result
    assert result["passed"] is True and result["runtime_wiring_verified"] is True
    # No GPU here: the pass proves the wiring, not CUDA, and the module says so.
    assert result["gpu"] == "none" and result["cuda_verified"] is False and result["verdict"] == "wiring-only"
    assert "Test PASSED" in result["workload"]["output"] and result["workload"]["exit_code"] == 0
    assert result["runtimes_loaded"] == ["nvidia", "nvidia-i5", "runc"]
    # Sandbox and container were both created by the stand-in nvidia-container-runtime.
    assert creates(node.standin_invocations()) == 2
    assert_nothing_left(node, result)

    again = check(node, image_tarball=node.images["vectoradd"])
    assert again["changed"] is False and again["image_source"] == "present" and again["passed"] is True
    TIMINGS.setdefault("node check (module, containerd %s)" % node.dist.version, again["duration_s"])
    TIMINGS.setdefault("node check (ansible task, containerd %s)" % node.dist.version, round(again["wall_s"], 2))
    print("node-level check on containerd %s: %.3fs in the module, %.2fs as an ansible task" % (
        node.dist.version, again["duration_s"], again["wall_s"]))


def test_a_recorded_proof_is_reported_while_it_holds_and_only_then(node, tmp_path):
    """recall: the node's last proof stands in for a run until the config file or the image changes."""
    record = str(tmp_path / "gpunode" / "last-proof.json")
    invocations = len(node.standin_invocations())
    assert check(node, record_path=record, recall=True)["proof"] == "none"  # nothing recorded yet

    fresh = check(node, record_path=record, image_tarball=node.images["vectoradd"])
    assert fresh["proof"] == "fresh" and fresh["verdict"] == "wiring-only", fresh.get("msg")
    assert json.load(open(record))["key"] == fresh["proof_key"]
    assert fresh["proof_key"]["runtime_version"] and fresh["proof_key"]["config_sha256"]
    ran = len(node.standin_invocations())
    assert ran > invocations

    recalled = check(node, record_path=record, recall=True)
    assert not recalled.get("failed") and recalled["changed"] is False
    assert recalled["proof"] == "recorded" and recalled["verdict"] == "wiring-only" and recalled["passed"] is True
    assert recalled["proof_recorded_at"] == fresh["proof_recorded_at"] and "workload" not in recalled
    assert len(node.standin_invocations()) == ran  # nothing ran through the runtime

    other_image = check(node, record_path=record, recall=True, image=daemons.VECTORADD_FAIL_IMAGE)
    assert other_image["proof"] == "none" and "workload image" in other_image["proof_reason"]
    with open(node.config_path) as handle:
        original = handle.read()
    try:
        with open(node.config_path, "a") as handle:
            handle.write("\n# an operator's comment\n")
        edited = check(node, record_path=record, recall=True)
        assert edited["proof"] == "none" and edited["verdict"] == "not-run"
        assert "runtime config file" in edited["proof_reason"]
    finally:
        with open(node.config_path, "w") as handle:
            handle.write(original)
    assert len(node.standin_invocations()) == ran


def discovery_recalls(ctrd, *each_recall):
    """site.yml's discovery: gpu_node_facts with the recall of check()'s options, in one module call; one task per
    recall, in one ansible-playbook run."""
    options = dict(engine="containerd", socket=ctrd.socket, config_path=ctrd.config_path,
                   image=daemons.VECTORADD_IMAGE, node_name="node-under-test")
    return run_tasks("gpunode.nvidia.gpu_node_facts",
                     [({"gather": ["gpus"], "recall": dict(options, **recall)}, False) for recall in each_recall],
                     path_prepend=[ctrd.dist.bin_dir])


def check_recalls(ctrd, *each_args):
    """check() with recall=True once per argument set, in one ansible-playbook run."""
    return run_tasks(MODULE, [(check_params(ctrd, recall=True, **args), False) for args in each_args],
                     path_prepend=[ctrd.dist.bin_dir])


def test_the_discovery_recalls_the_proof_as_the_check_does_and_never_fails_for_it(node, tmp_path):
    """One module call for site.yml's discovery and the recall, with the recall's answer; what would fail the
    check's recall (no GPU under require_gpu) is a proof that does not hold, with the check's message."""
    record = str(tmp_path / "last-proof.json")
    fresh = check(node, record_path=record, image_tarball=node.images["vectoradd"])
    assert fresh["proof"] == "fresh", fresh.get("msg")
    ran = len(node.standin_invocations())

    found, strict = discovery_recalls(node, dict(record_path=record), dict(record_path=record, require_gpu=True))
    alone, refused = check_recalls(node, dict(record_path=record), dict(record_path=record, require_gpu=True))
    assert not found.get("failed") and found["changed"] is False, found.get("msg")
    recalled = found["proof_recall"]
    for field in ("proof", "verdict", "passed", "proof_recorded_at", "proof_key", "engine", "socket", "config_path",
                  "node", "gpu", "runtime_handler", "image"):
        assert recalled[field] == alone[field], field
    assert recalled["proof"] == "recorded" and recalled["proof_recorded_at"] == fresh["proof_recorded_at"]
    assert sorted(found["ansible_facts"]["gpu_node"]) == ["elapsed_s", "gpus", "root"]

    assert not strict.get("failed") and refused["failed"] is True
    assert (strict["proof_recall"]["proof"], strict["proof_recall"]["verdict"]) == ("none", "not-run")
    assert strict["proof_recall"]["proof_reason"] == refused["msg"] == (
        "no NVIDIA GPU on node-under-test (sysfs lists none) and require_gpu is set")
    assert len(node.standin_invocations()) == ran  # nothing ran through the runtime


@pytest.fixture(scope="module")
def failed(node):
    """Each failure case's result. The cases are the tasks of one ansible-playbook run (one start-up for all), in
    this order; each starts from what the one before it left, which assert_nothing_left checks."""
    cases = {
        "runc": dict(runtime_handler="runc"),
        "wrong-result": dict(image=daemons.VECTORADD_FAIL_IMAGE, image_tarball=node.images["vectoradd-fail"]),
        "i5": dict(runtime_handler="nvidia-i5"),
        "timeout": dict(image=daemons.PAUSE_IMAGE, timeout=2),  # the sandbox image never exits: a hung workload
        "pull-error": dict(image="127.0.0.1:1/nvidia/cuda-sample:vectoradd"),
        "pull-never": dict(image="localhost/gpunode/absent:1", pull_policy="never"),
    }
    results = run_tasks(MODULE, [(check_params(node, **args), False) for args in cases.values()],
                        path_prepend=[node.dist.bin_dir])
    return dict(zip(cases, results))


def test_without_the_nvidia_handler_the_standin_fails(node, failed):
    """The same image through plain runc: no marker, no pass. A pass above is real evidence."""
    result = failed["runc"]
    assert result["failed"] is True and result["passed"] is False
    assert "Test PASSED" not in result["workload"]["output"]
    assert result["workload"]["exit_code"] == 1
    assert_nothing_left(node, result)


def test_wrong_result_fails_with_output_and_explanation(node, failed):
    result = failed["wrong-result"]
    assert result["failed"] is True and result["verdict"] == "failed"
    assert "Result verification failed at element 0!" in result["workload"]["output"]
    assert result["explanation"]["rule"] == "cuda-result-wrong"
    assert "node-under-test" in result["explanation"]["cause"]
    assert "exit code 1" in result["msg"]
    assert_nothing_left(node, result)


def test_missing_binaryname_is_incident_i5(node, failed):
    result = failed["i5"]
    assert result["failed"] is True and result["error"]["stage"] == "sandbox"
    assert MISSING_BINARY in result["error"]["message"]  # containerd's own words
    explanation = result["explanation"]
    assert explanation["incident"] == "I5" and MISSING_BINARY in explanation["cause"]
    assert node.config_path in explanation["cause"]
    assert result["runtime_wiring_verified"] is False
    assert_nothing_left(node, result)


def test_timeout_kills_and_removes_the_workload(node, failed):
    result = failed["timeout"]
    assert result["failed"] is True and result["workload"]["timed_out"] is True
    assert result["explanation"]["rule"] == "timeout" and "2 seconds" in result["explanation"]["cause"]
    assert_nothing_left(node, result)


def test_pull_error_is_explained(node, failed):
    # A registry that refuses connections: a real CRI PullImage and containerd's real error.
    result = failed["pull-error"]
    assert result["failed"] is True and result["error"]["stage"] == "image"
    assert "connection refused" in result["error"]["message"]
    assert result["explanation"]["rule"] == "image-pull"
    assert "cannot be reached" in result["explanation"]["cause"]


def test_pull_policy_never_without_image(node, failed):
    result = failed["pull-never"]
    assert result["failed"] is True and result["explanation"]["rule"] == "image-pull"
    assert "pull policy" in result["error"]["message"]


def test_no_nvidia_runtime_is_incident_i1(private_containerd, standin_images):
    """A containerd that never loaded the nvidia runtime: containerd's own I1 message, explained."""
    ctrd = private_containerd("bookworm")
    ctrd.start(ctrd.minimal_config())
    ctrd.import_image(standin_images["pause"])
    ctrd.import_image(standin_images["vectoradd"])
    result = check(ctrd)
    assert result["failed"] is True and result["error"]["stage"] == "sandbox"
    assert 'no runtime for "nvidia" is configured' in result["error"]["message"]
    explanation = result["explanation"]
    assert explanation["incident"] == "I1"
    for named in (ctrd.socket, ctrd.config_path, "node-under-test"):
        assert named in explanation["cause"] + explanation["fix"]
    assert "incident I1" in result["msg"] and result["runtimes_loaded"] == ["runc"]
    assert_nothing_left(ctrd, result)


def test_unreachable_socket_is_explained(tmp_path):
    socket = str(tmp_path / "nothing.sock")
    result = run_module(MODULE, dict(engine="containerd", socket=socket, node_name="node-under-test"))
    assert result["failed"] is True and result["explanation"]["rule"] == "runtime-unreachable"
    assert socket in result["explanation"]["cause"]


# --------------------------------------------------------------------------
# Docker
# --------------------------------------------------------------------------

class PrivateDockerd:
    """dockerd 20.10 (Debian bookworm) on a private containerd, in a network namespace of its own:
    with --bridge=none dockerd would delete the machine's docker0 bridge in the host namespace."""

    def __init__(self, ctrd):
        self.ctrd = ctrd
        self.dir = tempfile.mkdtemp(prefix="gpn-vd-")
        self.socket = os.path.join(self.dir, "docker.sock")
        self.config = os.path.join(self.dir, "daemon.json")
        tree = daemons.fetch_package("docker.io", "bookworm")
        self.dockerd = os.path.join(tree, "usr", "sbin", "dockerd")
        self.cli = next((p for p in ("/usr/bin/docker", "/usr/local/bin/docker") if os.access(p, os.X_OK)),
                        os.path.join(tree, "usr", "bin", "docker"))
        self.process = None

    def start(self):
        with open(self.config, "w") as handle:
            json.dump({"runtimes": {"nvidia": {"path": daemons.STANDIN_RUNTIME}}}, handle)
        argv = ["unshare", "--net", "--", self.dockerd, "--config-file", self.config,
                "--containerd", self.ctrd.socket, "--data-root", os.path.join(self.dir, "data"),
                "--exec-root", os.path.join(self.dir, "exec"), "--pidfile", os.path.join(self.dir, "pid"),
                "-H", "unix://" + self.socket, "--bridge=none", "--iptables=false", "--ip6tables=false"]
        with open(os.path.join(self.dir, "dockerd.log"), "ab") as log:
            self.process = subprocess.Popen(argv, env=self.ctrd.environment(), stdout=log,
                                            stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.time() + 60
        while self.docker("info").returncode != 0:
            assert self.process.poll() is None and time.time() < deadline, self.log()
            time.sleep(0.2)

    def docker(self, *args):
        return subprocess.run([self.cli, "-H", "unix://" + self.socket] + list(args), stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, universal_newlines=True, timeout=120, check=False)

    def log(self):
        with open(os.path.join(self.dir, "dockerd.log")) as handle:
            return handle.read()[-3000:]

    def close(self):
        if self.process and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(60)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        daemons.unmount_under(self.dir)
        subprocess.run(["rm", "-rf", self.dir], check=False)


@pytest.fixture(scope="module")
def dockerd(standin_images):
    if os.geteuid() != 0:
        pytest.skip("a private dockerd needs root")
    with daemons.PrivateContainerd(daemons.ensure_containerd("bookworm")) as ctrd:
        ctrd.start(ctrd.minimal_config())
        daemon = PrivateDockerd(ctrd)
        try:
            daemon.start()
            daemon.images = standin_images
            yield daemon
        finally:
            daemon.close()


def docker_check(daemon, **args):
    params = dict(engine="docker", socket=daemon.socket, config_path=daemon.config,
                  image=daemons.VECTORADD_IMAGE, timeout=60, node_name="docker-host")
    params.update(args)
    return run_module(MODULE, params)


def test_docker_vectoradd_passes_through_the_nvidia_runtime(dockerd):
    result = docker_check(dockerd, image_tarball=dockerd.images["vectoradd"])
    assert not result.get("failed"), result["msg"]
    assert result["image_source"] == "imported" and result["changed"] is True
    assert result["passed"] is True and result["verdict"] == "wiring-only" and result["cuda_verified"] is False
    assert "nvidia" in result["runtimes_loaded"]
    assert creates(dockerd.ctrd.standin_invocations()) == 1
    assert result["cleanup"]["removed"] is True
    assert dockerd.docker("ps", "-aq").stdout.strip() == ""
    again = docker_check(dockerd, image_tarball=dockerd.images["vectoradd"])
    assert again["changed"] is False and again["passed"] is True
    TIMINGS.setdefault("node check (module, dockerd 20.10)", again["duration_s"])


def test_docker_unknown_runtime_is_explained(dockerd):
    result = docker_check(dockerd, runtime_handler="nvidia-absent")
    assert result["failed"] is True and result["error"]["stage"] == "container"
    # dockerd 20.10 says "Unknown runtime specified nvidia-absent" (newer: "unknown or invalid runtime name").
    assert "runtime specified nvidia-absent" in result["error"]["message"]
    assert result["explanation"]["incident"] == "I1"
    assert dockerd.config in result["explanation"]["cause"]
    assert dockerd.docker("ps", "-aq").stdout.strip() == ""


def test_docker_wrong_result_fails(dockerd):
    result = docker_check(dockerd, image=daemons.VECTORADD_FAIL_IMAGE, image_tarball=dockerd.images["vectoradd-fail"])
    assert result["failed"] is True and result["explanation"]["rule"] == "cuda-result-wrong"
    assert "Result verification failed" in result["workload"]["output"]
    assert dockerd.docker("ps", "-aq").stdout.strip() == ""


def test_report_timings():
    """Prints the measured node-level check times (pytest -s shows them)."""
    for what, seconds in sorted(TIMINGS.items()):
        print("%-45s %6.2fs" % (what, seconds))
