# -*- coding: utf-8 -*-
# Copyright: gpunode.nvidia contributors
# Apache License 2.0
"""A baked image's first boot on its GPU machine: the steps a bake cannot do without the GPU.

Run once per instance by gpunode-firstboot.service (before kubelet, after the container
runtime), with the collection's own node code installed beside it:

1. load the NVIDIA kernel module, checking that the installed flavour (open or proprietary)
   can drive the GPU generation (driver_plan.choose_flavour: the open modules need Turing or
   newer) or is the one asked for;
2. node services (node_services.ensure_node_services): persistence daemon, fabric manager on
   NVSwitch systems, the CDI spec refreshed now that the driver is usable;
3. re-enable the toolkit units the bake deferred (nvidia-cdi-refresh.path);
4. the node-level vector-add check through the runtime kubelet will use, judged as
   gpu_workload_check judges it (wiring-only without a GPU);
5. the status file (firstboot_status.STATUS_PATH) and one journal line.

Standard library only: runs on the node, without Ansible.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import subprocess
import time

from ansible_collections.gpunode.nvidia.plugins.module_utils.cri import client as cri
from ansible_collections.gpunode.nvidia.plugins.module_utils.node import discovery
from ansible_collections.gpunode.nvidia.plugins.module_utils.install import driver_plan
from ansible_collections.gpunode.nvidia.plugins.module_utils.services import firstboot_status as fs
from ansible_collections.gpunode.nvidia.plugins.module_utils.cri import http2_grpc
from ansible_collections.gpunode.nvidia.plugins.module_utils.common.node_paths import in_root
from ansible_collections.gpunode.nvidia.plugins.module_utils.common.runtime_sockets import DEFAULT_SOCKETS
from ansible_collections.gpunode.nvidia.plugins.module_utils.services.node_services import ensure_node_services
from ansible_collections.gpunode.nvidia.plugins.module_utils.common import package_versions
from ansible_collections.gpunode.nvidia.plugins.module_utils.workload import runner as wl
from ansible_collections.gpunode.nvidia.plugins.module_utils.workload.judge import judge_run

DEFAULTS = {
    "engine": "auto",            # auto: the runtime kubelet uses (discovery's target)
    "socket": "",
    "runtime_handler": "nvidia",
    "driver_flavour": "auto",    # auto, open, proprietary
    "driver_modules": ["nvidia", "nvidia_uvm"],
    "node_services": True,
    "deferred_units": [],
    "check": True,
    "image": wl.DEFAULT_IMAGE,
    "image_tarball": "",
    "pull_policy": "if_not_present",
    "timeout": 300,
    "runtime_wait": 60,
    "require_gpu": False,
}
LICENSE_FLAVOUR = {"Dual MIT/GPL": "open", "NVIDIA": "proprietary"}


class StepFailed(Exception):
    def __init__(self, step, message, details=None):
        super(StepFailed, self).__init__(message)
        self.step = step
        self.message = message
        self.details = details or {}


def run_command(argv, timeout=120):
    """(rc, stdout, stderr); 127 when the program is missing, 124 on timeout."""
    try:
        # Not AnsibleModule.run_command: the first boot runs as a systemd service of the baked node, with no
        # module (and each step needs its timeout, which run_command has not).
        proc = subprocess.Popen(  # pylint: disable=ansible-bad-function
            argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    except OSError as exc:
        return 127, "", "%s: %s" % (argv[0], exc)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        return 124, out.decode("utf-8", "replace"), err.decode("utf-8", "replace")
    return proc.returncode, out.decode("utf-8", "replace"), err.decode("utf-8", "replace")


def load_config(path=fs.CONFIG_PATH):
    """DEFAULTS overlaid with the JSON file the bake wrote (missing file: the defaults)."""
    config = dict(DEFAULTS)
    try:
        with open(path) as handle:
            given = json.load(handle)
    except (IOError, OSError) as exc:
        if getattr(exc, "errno", None) == 2:
            return config
        raise StepFailed("config", "cannot read %s: %s" % (path, exc))
    except ValueError as exc:
        raise StepFailed("config", "%s is not valid JSON (%s): fix it or bake the image again" % (path, exc))
    unknown = sorted(set(given) - set(DEFAULTS))
    if unknown:
        raise StepFailed("config", "%s has unknown settings %s; known: %s"
                         % (path, ", ".join(unknown), ", ".join(sorted(DEFAULTS))))
    config.update(given)
    return config


# --- 1. the kernel module ------------------------------------------------------------------------

def installed_flavour(runner):
    """open / proprietary from the license of the module modprobe would load, or None."""
    rc, out, _err = runner(["modinfo", "-F", "license", "nvidia"])
    return LICENSE_FLAVOUR.get(out.strip()) if rc == 0 else None


def load_driver(facts, config, runner):
    gpus = facts.get("gpus") or []
    driver = facts.get("driver") or {}
    if not gpus:
        if config["require_gpu"]:
            raise StepFailed("driver", "no NVIDIA GPU in sysfs and require_gpu is set")
        return {"state": "skipped", "msg": "no NVIDIA GPU in sysfs: no kernel module to load"}
    branch = next((package_versions.branch_of(v) for v in sorted((driver.get("packages") or {}).values())
                   if package_versions.branch_of(v)), None)
    wanted, why = driver_plan.choose_flavour(config["driver_flavour"], gpus, branch)
    have = driver.get("flavour") if driver.get("loaded") else installed_flavour(runner)
    # auto: the proprietary module drives every generation; only the open one needs Turing or newer.
    unusable = have == "open" if config["driver_flavour"] == "auto" else have != wanted
    if have and have != wanted and unusable:
        raise StepFailed("driver", "the %s NVIDIA kernel module is %s, but this machine needs the %s one (%s): "
                         "bake the image with nvidia_driver_flavour=%s, or a variant per GPU generation"
                         % (have, "loaded" if driver.get("loaded") else "installed", wanted, why, wanted))
    if have and have != wanted:
        why = "the %s module drives this GPU; the %s one is recommended (%s)" % (have, wanted, why)
    if driver.get("loaded"):
        return {"state": "loaded", "flavour": have, "version": driver.get("version"), "msg": why}
    for module in config["driver_modules"]:
        rc, out, err = runner(["modprobe", module])
        if rc != 0:
            raise StepFailed("driver", "modprobe %s failed (exit %d): %s" % (module, rc, (err or out).strip()))
    return {"state": "loaded-now", "flavour": have or wanted, "msg": why}


# --- 2. and 3. node services, deferred units -----------------------------------------------------

def node_services(root, runner):
    """The collection's node services (persistenced, fabric manager, CDI), started and refreshed."""
    result = ensure_node_services(root=root, runner=runner, check_mode=False, refresh_cdi=True, start=True,
                                  enable=True)
    if result.get("failed"):
        raise StepFailed("node_services", result.get("msg") or "node services failed", result)
    return result


def enable_deferred(units, runner):
    """The toolkit units the bake disabled (they would have started before the driver was usable)."""
    enabled = []
    for unit in units:
        rc, out, _err = runner(["systemctl", "list-unit-files", "--no-legend", unit])
        if rc != 0 or not out.strip():
            continue  # not installed on this image
        now = ["--now"] if unit.endswith((".path", ".timer", ".socket")) else []
        rc, out, err = runner(["systemctl", "enable"] + now + [unit])
        if rc != 0:
            raise StepFailed("deferred_units", "systemctl enable %s failed: %s" % (unit, (err or out).strip()))
        enabled.append(unit)
    return enabled


# --- 4. the vector-add check ---------------------------------------------------------------------

def resolve_target(facts, config):
    target = facts.get("target") or {}
    engine = target.get("kind") if config["engine"] == "auto" else config["engine"]
    if engine not in ("containerd", "crio", "docker"):
        raise StepFailed("check", "cannot tell which container runtime kubelet will use: %s; set engine and "
                         "socket in %s" % (facts.get("target_reason") or "no runtime found", fs.CONFIG_PATH))
    socket = config["socket"] or (target.get("kind") == engine and target.get("socket")) or DEFAULT_SOCKETS[engine]
    return engine, http2_grpc.socket_path(socket), target.get("binary") if target.get("kind") == engine else None


def wait_for_cri(client, seconds):
    deadline = time.time() + seconds
    while True:
        try:
            return client.status(verbose=True)
        except http2_grpc.CRIError as exc:
            if time.time() > deadline:
                raise StepFailed("check", "the runtime does not answer CRI on %s: %s" % (client.address, exc.message))
            time.sleep(0.5)


def check_cri(config, socket, binary):
    client = cri.CRIClient(socket, timeout=60)
    loaded = sorted(cri.runtimes_from_status(wait_for_cri(client, config["runtime_wait"])))
    if config["runtime_handler"] not in loaded:
        raise StepFailed("check", "the runtime on %s has no %r runtime on its first start (it has %s): the image "
                         "was baked without it" % (socket, config["runtime_handler"], ", ".join(loaded) or "none"))
    tarball = config["image_tarball"] or None
    source = wl.ensure_image_cri(client, config["image"], config["pull_policy"], tarball,
                                 wl.find_ctr(binary) if tarball else None)
    run = wl.run_cri(client, config["runtime_handler"], config["image"], config["timeout"])
    return loaded, source, run


def check_docker(config, socket):
    binary = wl.which("docker")
    if binary is None:
        raise StepFailed("check", "engine docker: the docker CLI is not installed")
    docker = wl.Docker(binary, socket)
    loaded = docker.runtimes()
    source = wl.ensure_image_docker(docker, config["image"], config["pull_policy"], config["image_tarball"] or None)
    run = wl.run_docker(docker, config["runtime_handler"], config["image"], config["timeout"], with_gpus=False)
    return loaded, source, run


def workload_check(facts, config, node):
    engine, socket, binary = resolve_target(facts, config)
    has_gpu = bool(facts.get("gpus"))
    context = {"node": node, "socket": socket, "engine": engine, "runtime_handler": config["runtime_handler"],
               "image": config["image"], "timeout": config["timeout"], "binary": binary, "config_path": None,
               "service": None}
    try:
        if engine == "docker":
            loaded, source, run = check_docker(config, socket)
        else:
            loaded, source, run = check_cri(config, socket, binary)
    except (http2_grpc.CRIError, wl.WorkloadError) as exc:
        raise StepFailed("check", "%s failed: %s" % (getattr(exc, "stage", "runtime"), exc.message),
                         {"engine": engine, "socket": socket, "output": wl.tail(getattr(exc, "output", ""), 2000)})
    outcome = judge_run(run, has_gpu, node, context)
    details = {"engine": engine, "socket": socket, "runtimes_loaded": loaded, "image_source": source,
               "verdict": outcome["verdict"], "exit_code": run["exit_code"], "seconds": run["seconds"],
               "output": wl.tail(run["output"], 2000), "explanation": outcome["explanation"]}
    if outcome["failure"]:
        raise StepFailed("check", outcome["failure"], details)
    return details


# --- the whole first boot ------------------------------------------------------------------------

def first_boot(config_path=fs.CONFIG_PATH, runner=run_command, node="localhost", force=False, root="/"):
    """Run the first boot unless it already succeeded on this instance; return the status written.
    ROOT is where the node's files are read and the status written (tests use a node tree)."""
    started = time.time()
    source, instance = fs.instance_id(root)
    previous, _problem = fs.read_status(root)
    if not force and fs.done_for(previous, source, instance):
        return dict(previous, skipped=True)
    status = {"ok": False, "instance_id": instance, "instance_id_source": source, "verdict": "failed",
              "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(started)), "steps": {},
              "failed_step": None, "error": None, "skipped": False}
    try:
        if instance is None:
            raise StepFailed("instance", "neither cloud-init's instance id nor /etc/machine-id is set: "
                                         "the first boot cannot tell one machine from another")
        config = load_config(in_root(root, config_path))
        facts = discovery.gather(root, ["gpus", "driver", "runtimes", "kubelet", "target"])
        status["gpu"] = "present" if facts.get("gpus") else "none"
        status["steps"]["driver"] = load_driver(facts, config, runner)
        if config["node_services"]:
            status["steps"]["node_services"] = node_services(root, runner)
        status["steps"]["deferred_units"] = enable_deferred(config["deferred_units"], runner)
        if config["check"]:
            status["steps"]["check"] = workload_check(facts, config, node)
            status["verdict"] = status["steps"]["check"]["verdict"]
        else:
            status["verdict"] = "not-run"
        status["ok"] = True
    except StepFailed as exc:
        status.update(failed_step=exc.step, error=exc.message)
        status["steps"][exc.step] = exc.details
    except Exception as exc:  # a bug or a broken node: still a status file and a failed unit
        status.update(failed_step="unexpected", error="%s: %s" % (type(exc).__name__, exc))
    status["duration_s"] = round(time.time() - started, 3)
    fs.write_status(status, root)
    return status


def journal_line(status):
    if status.get("skipped"):
        return "gpunode-firstboot: already done for %s %s (%s); nothing to do" % (
            status["instance_id_source"], status["instance_id"], fs.STATUS_PATH)
    if status["ok"]:
        return "gpunode-firstboot: ok in %.1fs: GPU %s, verdict %s (%s)" % (
            status["duration_s"], status.get("gpu", "?"), status["verdict"], fs.STATUS_PATH)
    return "gpunode-firstboot: FAILED at %s after %.1fs: %s (%s)" % (
        status["failed_step"], status["duration_s"], status["error"], fs.STATUS_PATH)
