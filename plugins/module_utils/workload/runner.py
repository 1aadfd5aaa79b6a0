# -*- coding: utf-8 -*-
# Copyright: gpunode.nvidia contributors
# Apache License 2.0
"""Run a GPU workload on the node the way kubelet would (judge.py judges the run).

Two paths, chosen by the runtime kubelet (or the operator) uses:

* CRI (containerd, CRI-O): RunPodSandbox with the runtime handler (`nvidia`),
  then one container with NVIDIA_VISIBLE_DEVICES=all, wait for it to exit,
  read its log, and remove container and sandbox always, also on failure.
* Docker: `docker run --rm --runtime nvidia --gpus all ...`.

Images come from the runtime's store, a pull (CRI PullImage / docker pull), or
a tarball (`ctr -n k8s.io images import`, `docker load`) for air-gapped nodes.
Standard library only: runs on managed nodes.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os
import shutil
import subprocess
import tempfile
import time
import uuid

from ansible_collections.gpunode.nvidia.plugins.module_utils.common.binaries import find_binary
from ansible_collections.gpunode.nvidia.plugins.module_utils.cri import client as cri
from ansible_collections.gpunode.nvidia.plugins.module_utils.cri import http2_grpc
from ansible_collections.gpunode.nvidia.plugins.module_utils.cri import protobuf_wire

DEFAULT_IMAGE = "nvcr.io/nvidia/k8s/cuda-sample:vectoradd-cuda12.5.0-ubuntu22.04"
VERIFY_LABEL = "gpunode.nvidia/verify"
SANDBOX_NAME = "gpunode-verify"
SANDBOX_NAMESPACE = "gpunode-verify"
CONTAINER_NAME = "vectoradd"
POD_LOG_ROOT = "/var/log/pods"
WORKLOAD_ENV = {"NVIDIA_VISIBLE_DEVICES": "all", "NVIDIA_DRIVER_CAPABILITIES": "compute,utility"}
OUTPUT_LIMIT = 8000  # characters of workload output kept in results
IMPORT_SETTLE_SECONDS = 10
NVIDIA_SMI_QUERY = "index,name,uuid,driver_version,memory.total"


class WorkloadError(Exception):
    """A failed step: `stage` (image, sandbox, container, run, cleanup) and the daemon's message verbatim."""

    def __init__(self, stage, message, output=""):
        super(WorkloadError, self).__init__(message)
        self.stage = stage
        self.message = message
        self.output = output
        self.cleanup = []  # problems met while removing what the run created


def tail(text, limit=OUTPUT_LIMIT):
    return text if len(text) <= limit else "...\n" + text[-limit:]


def run_command(argv, timeout, env=None):
    """(rc, combined output); rc 124 on timeout, 127 when the program is missing."""
    try:
        # Not AnsibleModule.run_command, which has no timeout: a workload or ctr import that hangs must end in
        # a failed step that says so, not in a task that never returns.
        proc = subprocess.Popen(  # pylint: disable=ansible-bad-function
            argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env)
    except OSError as exc:
        return 127, "%s: %s" % (argv[0], exc)
    try:
        out, _err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, _err = proc.communicate()
        return 124, out.decode("utf-8", "replace")
    return proc.returncode, out.decode("utf-8", "replace")


def which(name, extra_dirs=()):
    """Path of NAME (EXTRA_DIRS, then PATH, then a service's PATH), or None: the collection's one lookup."""
    return find_binary(name, extra_dirs)


# --- node facts ------------------------------------------------------------------------------

def nvidia_smi_summary(timeout=20):
    """GPUs and driver as nvidia-smi reports them, or None when nvidia-smi is not installed."""
    binary = which("nvidia-smi")
    if binary is None:
        return None
    rc, out = run_command([binary, "--query-gpu=" + NVIDIA_SMI_QUERY, "--format=csv,noheader,nounits"], timeout)
    if rc != 0:
        return {"path": binary, "ok": False, "error": out.strip(), "gpus": [], "driver_version": None}
    gpus = []
    for line in out.strip().splitlines():
        fields = [f.strip() for f in line.split(",")]
        if len(fields) == 5:
            gpus.append({"index": fields[0], "name": fields[1], "uuid": fields[2],
                         "driver_version": fields[3], "memory_mib": fields[4]})
    driver = gpus[0]["driver_version"] if gpus else None
    return {"path": binary, "ok": True, "error": "", "gpus": gpus, "driver_version": driver}


# --- CRI images ------------------------------------------------------------------------------

def _bytes_field(number, payload):
    return protobuf_wire.encode_varint(number << 3 | 2) + protobuf_wire.encode_varint(len(payload)) + payload


def pull_image(client, image, sandbox_config=None, timeout=600):
    """CRI ImageService.PullImage (no auth: registries needing credentials are configured in the
    runtime); return the image reference the runtime stored."""
    request = _bytes_field(1, protobuf_wire.encode_message("ImageSpec", {"image": image}))
    if sandbox_config:
        request += _bytes_field(3, protobuf_wire.encode_message("PodSandboxConfig", sandbox_config))
    raw = http2_grpc.grpc_unary(client.address, "/%s/PullImage" % cri.IMAGE_SERVICE, request, timeout=timeout)
    for number, _wire, value in protobuf_wire.iter_fields(raw):
        if number == 1:
            return value.decode("utf-8", "replace")
    return ""


def find_ctr(runtime_binary=None):
    """containerd's `ctr`: beside the runtime's binary first (k3s, k0s), then on PATH."""
    extra = [os.path.dirname(runtime_binary)] if runtime_binary else []
    return which("ctr", extra)


def ctr_import_argv(ctr, socket, tarball):
    """`ctr -n k8s.io images import`: k8s.io is the namespace where the CRI plugin looks for images."""
    return [ctr, "--address", http2_grpc.socket_path(socket), "-n", "k8s.io", "images", "import", tarball]


def import_tarball_ctr(ctr, socket, tarball, timeout):
    rc, out = run_command(ctr_import_argv(ctr, socket, tarball), timeout)
    if rc != 0:
        raise WorkloadError("image", "ctr images import %s failed (exit %d): %s" % (tarball, rc, out.strip()))
    return out


def _refuse_pull_if_never(policy, image):
    """The image is missing: stop when the pull policy forbids fetching it."""
    if policy == "never":
        raise WorkloadError("image", "image \"%s\" is not present with pull policy of Never: import it "
                                     "(image_tarball) or allow pulling" % image)


def ensure_image_cri(client, image, policy, tarball=None, ctr=None, check_mode=False, pull_timeout=600):
    """Make IMAGE available to the runtime per POLICY; return how: present, pulled, imported
    (or would-pull / would-import in check mode)."""
    present = client.image_status(image) is not None
    if present and policy != "always":
        return "present"
    if tarball:
        if check_mode:  # the tarball may be copied there by the same (checked) play
            return "would-import"
        if not os.path.isfile(tarball):
            raise WorkloadError("image", "image tarball %s does not exist on the node" % tarball)
        if ctr is None:
            raise WorkloadError("image", "cannot import %s: containerd's ctr is not on this node (CRI-O: "
                                         "load it with podman or skopeo into containers-storage)" % tarball)
        out = import_tarball_ctr(ctr, client.address, tarball, pull_timeout)
        if not wait_image_cri(client, image, IMPORT_SETTLE_SECONDS):
            raise WorkloadError("image", "the tarball %s did not hold image %s; ctr imported: %s" % (
                tarball, image, out.strip() or "nothing"))
        return "imported"
    _refuse_pull_if_never(policy, image)
    if check_mode:
        return "would-pull"
    try:
        pull_image(client, image, timeout=pull_timeout)
    except http2_grpc.CRIError as exc:
        raise WorkloadError("image", exc.message)
    return "pulled"


def wait_image_cri(client, image, seconds):
    """True once CRI sees IMAGE. containerd 2.x updates the CRI image store from import events,
    a moment after `ctr images import` returned."""
    deadline = time.time() + seconds
    while client.image_status(image) is None:
        if time.time() > deadline:
            return False
        time.sleep(0.1)
    return True


# --- CRI run ---------------------------------------------------------------------------------

def _log_directory(uid):
    """A kubelet-like pod log directory the runtime can write to."""
    path = os.path.join(POD_LOG_ROOT, "%s_%s_%s" % (SANDBOX_NAMESPACE, SANDBOX_NAME, uid))
    try:
        os.makedirs(path)
        return path
    except OSError:
        return tempfile.mkdtemp(prefix="gpunode-verify-")


def _read_log(path):
    try:
        return cri.read_container_log(path)
    except (IOError, OSError):
        return ""


# A slice that exists on every systemd node, for runtimes driven by the systemd cgroup driver.
SYSTEMD_SLICE = "system.slice"


def run_cri(client, handler, image, timeout, envs=None):
    """Run IMAGE once in a new sandbox through runtime HANDLER; always remove what was created.

    Returns a dict: sandbox_started, exit_code, reason, message, output, timed_out, seconds and
    cleanup (problems met while removing; empty when all is gone). Raises WorkloadError, with
    `cleanup` set, when the sandbox or the container cannot be created or started."""
    uid = uuid.uuid4().hex
    log_dir = _log_directory(uid)
    created = {"sandbox_id": None, "container_id": None}
    try:
        result = _run_in_sandbox(client, handler, image, timeout, envs, uid, log_dir, created)
    except WorkloadError as exc:
        exc.cleanup = remove_pod(client, created["sandbox_id"], created["container_id"])
        raise
    finally:
        shutil.rmtree(log_dir, ignore_errors=True)
    result["cleanup"] = remove_pod(client, created["sandbox_id"], created["container_id"])
    return result


def _cgroup_parent(client, handler):
    """The slice kubelet's systemd cgroup driver would pass: runc refuses a cgroupfs-style path for a
    runtime with SystemdCgroup = true ("expected cgroupsPath to be of format slice:prefix:name")."""
    try:
        runtimes = cri.runtimes_from_status(client.status(verbose=True))
    except http2_grpc.CRIError:
        return ""
    return SYSTEMD_SLICE if runtimes.get(handler, {}).get("systemd_cgroup") else ""


def _run_in_sandbox(client, handler, image, timeout, envs, uid, log_dir, created):
    labels = {VERIFY_LABEL: "1"}
    sandbox = cri.sandbox_config(SANDBOX_NAME, uid, namespace=SANDBOX_NAMESPACE, log_directory=log_dir,
                                 labels=labels)
    cgroup_parent = _cgroup_parent(client, handler)
    if cgroup_parent:
        sandbox["linux"]["cgroup_parent"] = cgroup_parent
    log_path = os.path.join(log_dir, CONTAINER_NAME + ".log")
    started = time.time()
    try:
        created["sandbox_id"] = client.run_pod_sandbox(sandbox, handler)
    except http2_grpc.CRIError as exc:
        raise WorkloadError("sandbox", exc.message)
    config = cri.container_config(CONTAINER_NAME, image, envs=envs or WORKLOAD_ENV,
                                  log_path=CONTAINER_NAME + ".log", labels=labels)
    try:
        created["container_id"] = client.create_container(created["sandbox_id"], config, sandbox)
        client.start_container(created["container_id"])
    except http2_grpc.CRIError as exc:
        raise WorkloadError("container", exc.message, _read_log(log_path))
    result = _wait(client, created["container_id"], timeout)
    result.update(output=_read_log(log_path), seconds=round(time.time() - started, 3), sandbox_started=True)
    return result


def _wait(client, container_id, timeout):
    try:
        status = client.wait_container_exit(container_id, timeout)
    except http2_grpc.CRIError as exc:
        if exc.code != http2_grpc.DEADLINE_EXCEEDED:
            raise WorkloadError("run", exc.message)
        return {"exit_code": None, "reason": "Timeout", "timed_out": True,
                "message": "the workload did not finish within %gs" % timeout}
    return {"exit_code": status["exit_code"], "reason": status["reason"], "timed_out": False,
            "message": status["message"]}


def remove_pod(client, sandbox_id, container_id):
    """Stop and remove the container and the sandbox; return the problems met (empty: all gone)."""
    problems = []
    steps = []
    if container_id:
        steps += [("stop container", client.stop_container, (container_id, 0)),
                  ("remove container", client.remove_container, (container_id,))]
    if sandbox_id:
        steps += [("stop sandbox", client.stop_pod_sandbox, (sandbox_id,)),
                  ("remove sandbox", client.remove_pod_sandbox, (sandbox_id,))]
    for what, call, args in steps:
        try:
            call(*args)
        except http2_grpc.CRIError as exc:
            if exc.code != 5:  # NOT_FOUND: already gone
                problems.append("%s %s: %s" % (what, args[0][:12], exc.message))
    return problems


def leftover_sandboxes(client):
    """Sandboxes of this check still known to the runtime (should be none after a run)."""
    return [s["id"] for s in client.list_pod_sandboxes(labels={VERIFY_LABEL: "1"})]


# --- Docker ----------------------------------------------------------------------------------

class Docker:
    """The docker CLI against one daemon socket."""

    def __init__(self, binary, socket=None):
        self.binary = binary
        self.socket = socket

    def argv(self, *args):
        host = ["-H", "unix://" + http2_grpc.socket_path(self.socket)] if self.socket else []
        return [self.binary] + host + list(args)

    def run(self, args, timeout=60):
        return run_command(self.argv(*args), timeout)

    def runtimes(self):
        rc, out = self.run(["info", "--format", "{{json .Runtimes}}"], 30)
        if rc != 0:
            raise WorkloadError("runtime", out.strip())
        try:
            return sorted(json.loads(out.strip() or "{}"))
        except ValueError:
            return []

    def version(self):
        rc, out = self.run(["version", "--format", "{{.Server.Version}}"], 30)
        if rc != 0:
            raise WorkloadError("runtime", out.strip())
        return out.strip()

    def image_present(self, image):
        return self.run(["image", "inspect", "--format", "{{.Id}}", image], 30)[0] == 0


def ensure_image_docker(docker, image, policy, tarball=None, check_mode=False, pull_timeout=600):
    present = docker.image_present(image)
    if present and policy != "always":
        return "present"
    if tarball:
        if check_mode:
            return "would-import"
        if not os.path.isfile(tarball):
            raise WorkloadError("image", "image tarball %s does not exist on the node" % tarball)
        rc, out = docker.run(["load", "-i", tarball], pull_timeout)
        if rc != 0:
            raise WorkloadError("image", "docker load -i %s failed (exit %d): %s" % (tarball, rc, out.strip()))
        if not docker.image_present(image):
            raise WorkloadError("image", "the tarball %s did not hold image %s; docker loaded: %s" % (
                tarball, image, out.strip()))
        return "imported"
    _refuse_pull_if_never(policy, image)
    if check_mode:
        return "would-pull"
    rc, out = docker.run(["pull", image], pull_timeout)
    if rc != 0:
        raise WorkloadError("image", out.strip())
    return "pulled"


def docker_run_argv(name, handler, image, with_gpus):
    """`docker run` arguments. Without a GPU, `--gpus all` is left out: dockerd can only satisfy
    that device request through NVIDIA's hook and a GPU, and would refuse the container outright.
    The sample needs no network: `--network none` also works where dockerd runs without a bridge."""
    args = ["run", "--rm", "--name", name, "--label", VERIFY_LABEL + "=1", "--network", "none",
            "--runtime", handler]
    if with_gpus:
        args += ["--gpus", "all"]
    for key, value in sorted(WORKLOAD_ENV.items()):
        args += ["-e", "%s=%s" % (key, value)]
    return args + [image]


def run_docker(docker, handler, image, timeout, with_gpus):
    """Run IMAGE once with `docker run --rm`; the container is removed also on timeout."""
    name = "gpunode-verify-%s" % uuid.uuid4().hex[:12]
    started = time.time()
    try:
        rc, out = docker.run(docker_run_argv(name, handler, image, with_gpus), timeout)
    finally:
        docker.run(["rm", "-f", name], 60)
    seconds = round(time.time() - started, 3)
    if rc == 125:  # dockerd refused the container: the message is the daemon's
        raise WorkloadError("container", out.strip())
    if rc == 124:
        return {"exit_code": None, "reason": "Timeout", "timed_out": True, "output": out, "seconds": seconds,
                "message": "the workload did not finish within %gs" % timeout, "sandbox_started": True}
    return {"exit_code": rc, "reason": "Completed" if rc == 0 else "Error", "timed_out": False, "output": out,
            "seconds": seconds, "message": "", "sandbox_started": True}


def docker_leftovers(docker):
    rc, out = docker.run(["ps", "-aq", "--filter", "label=%s=1" % VERIFY_LABEL], 30)
    return out.split() if rc == 0 else []
