# -*- coding: utf-8 -*-
# Copyright: gpunode.nvidia contributors
# Apache License 2.0
"""gpu_workload_check's run, from its options and the node's discovery to its result.

The runtime comes from target.py, the run from runner.py (CRI or the docker CLI), its judgment from
judge.py, the recorded proof from proof.py. Nothing here ends the task: a failure is a CheckFailed
carrying the result, which the module turns into its failure. Standard library only (node side).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import socket as socket_module
import time

from ansible_collections.gpunode.nvidia.plugins.module_utils.cri import client as cri
from ansible_collections.gpunode.nvidia.plugins.module_utils.cri import http2_grpc
from ansible_collections.gpunode.nvidia.plugins.module_utils.editors import filewrite
from ansible_collections.gpunode.nvidia.plugins.module_utils.workload import proof
from ansible_collections.gpunode.nvidia.plugins.module_utils.workload import runner as wl
from ansible_collections.gpunode.nvidia.plugins.module_utils.workload import target as runtime_target
from ansible_collections.gpunode.nvidia.plugins.module_utils.workload.target import ENGINES
from ansible_collections.gpunode.nvidia.plugins.module_utils.workload.judge import (
    CheckFailed, judge_into, step_failed, with_explanation)

CRI_CALL_TIMEOUT = 60

# What a recall of the recorded proof reads: gpu_workload_check's options, and gpu_node_facts' `recall`.
RECALL_ARGUMENT_SPEC = dict(
    engine=dict(type="str", default="auto", choices=["auto"] + list(ENGINES)),
    socket=dict(type="str"),
    config_path=dict(type="path"),
    runtime_handler=dict(type="str", default="nvidia"),
    image=dict(type="str", default=wl.DEFAULT_IMAGE),
    require_gpu=dict(type="bool", default=False),
    node_name=dict(type="str"),
    record_path=dict(type="str", default=""),
)


def check(params, check_mode, facts, started):
    """The result of one check (with `recall`, of the recorded proof); CheckFailed, its `result` set, when
    the check fails. STARTED: when the task began, for duration_s."""
    result = base_result(params, facts)
    try:
        if params["require_gpu"] and result["gpu"] == "none":
            raise CheckFailed("no NVIDIA GPU on %s (sysfs lists none) and require_gpu is set" % result["node"])
        try:
            runtime = runtime_target.resolve(params["engine"], params["socket"], params["config_path"], facts)
        except runtime_target.TargetUnknown as exc:
            raise CheckFailed(str(exc))
        result.update(engine=runtime.engine, socket=runtime.socket, config_path=runtime.config_path)
        if params["recall"]:
            recall(params, result, facts)
        else:
            run_and_judge(params, check_mode, result, runtime)
    except CheckFailed as exc:
        result["duration_s"] = round(time.time() - started, 3)
        raise CheckFailed(with_explanation(exc.msg, result["explanation"]), result)
    result["duration_s"] = round(time.time() - started, 3)
    return result


def recall_outcome(params, facts, started):
    """The recall's result, for a caller that reports it instead of failing on it: a recall that would fail
    (no GPU under require_gpu, no runtime to check) is a proof that does not hold, its failure the reason, so
    that the fresh check run next fails with the same message in a task of its own."""
    try:
        return check(dict(params, recall=True), False, facts, started)
    except CheckFailed as exc:
        return dict(exc.result, proof="none", verdict="not-run", proof_reason=exc.msg)


def base_result(params, facts):
    gpus = facts.get("gpus") or []
    return {
        "changed": False, "node": params["node_name"] or socket_module.gethostname(),
        "runtime_handler": params["runtime_handler"], "image": params["image"],
        "gpu": "present" if gpus else "none", "gpus": gpus,
        "driver": (facts.get("driver") or {}).get("version"), "nvidia_smi": wl.nvidia_smi_summary(),
        "runtime_wiring_verified": False, "cuda_verified": False, "passed": False, "verdict": "failed",
        "explanation": None, "proof": "none",
    }


def run_and_judge(params, check_mode, result, runtime):
    """Run the workload (in check mode, only the image step) and judge it into RESULT."""
    context = {"node": result["node"], "socket": runtime.socket, "config_path": runtime.config_path,
               "engine": runtime.engine, "service": runtime.service, "runtime_handler": params["runtime_handler"],
               "image": params["image"], "timeout": params["timeout"], "binary": runtime.binary}
    runner = run_docker if runtime.engine == "docker" else run_cri
    run = runner(params, check_mode, result, context)
    failure = None
    if run is None:
        result["verdict"] = "not-run"
    else:
        failure = judge_into(result, run, context)
        result["proof"] = "fresh"
    result["changed"] = result.get("image_source", "present") != "present"
    if failure:
        raise CheckFailed(failure)


def run_cri(params, check_mode, result, context):
    """containerd or CRI-O, through CRI on the socket: the run, or None in check mode."""
    client = cri.CRIClient(result["socket"], timeout=CRI_CALL_TIMEOUT)
    try:
        status = client.status(verbose=True)
    except http2_grpc.CRIError as exc:
        raise step_failed(result, context, "runtime", exc.message)
    result["runtimes_loaded"] = sorted(cri.runtimes_from_status(status))
    try:
        ctr = wl.find_ctr(context["binary"]) if params["image_tarball"] else None
        result["image_source"] = wl.ensure_image_cri(
            client, params["image"], params["pull_policy"], params["image_tarball"], ctr, check_mode,
            params["pull_timeout"])
    except http2_grpc.CRIError as exc:
        raise step_failed(result, context, "image", exc.message)
    except wl.WorkloadError as exc:
        raise step_failed(result, context, exc.stage, exc.message)
    if check_mode:
        return None
    try:
        run = wl.run_cri(client, params["runtime_handler"], params["image"], params["timeout"])
    except wl.WorkloadError as exc:
        result["cleanup"] = cleanup_report(exc.cleanup, cri_leftovers(client))
        result["runtime_wiring_verified"] = exc.stage != "sandbox"
        raise step_failed(result, context, exc.stage, exc.message, exc.output)
    result["cleanup"] = cleanup_report(run.pop("cleanup"), cri_leftovers(client))
    return run


def cri_leftovers(client):
    try:
        return wl.leftover_sandboxes(client)
    except http2_grpc.CRIError as exc:
        return ["cannot list sandboxes: %s" % exc.message]


def run_docker(params, check_mode, result, context):
    """Docker, through the docker CLI on the socket: the run, or None in check mode."""
    binary = wl.which("docker")
    if binary is None:
        raise CheckFailed("engine docker: the docker CLI is not installed on %s" % result["node"])
    docker = wl.Docker(binary, result["socket"])
    try:
        result["runtimes_loaded"] = docker.runtimes()
        result["image_source"] = wl.ensure_image_docker(
            docker, params["image"], params["pull_policy"], params["image_tarball"], check_mode,
            params["pull_timeout"])
        if check_mode:
            return None
        run = wl.run_docker(docker, params["runtime_handler"], params["image"], params["timeout"],
                            with_gpus=result["gpu"] == "present")
    except wl.WorkloadError as exc:
        if exc.stage == "container":
            result["cleanup"] = cleanup_report([], wl.docker_leftovers(docker))
        raise step_failed(result, context, exc.stage, exc.message, exc.output)
    result["cleanup"] = cleanup_report([], wl.docker_leftovers(docker))
    return run


def cleanup_report(problems, leftovers):
    return {"removed": not problems and not leftovers, "problems": problems, "leftovers": leftovers}


def image_diff(result):
    """The diff of a run that pulled or imported the image, else None."""
    source = result.get("image_source", "present")
    if source == "present":
        return None
    how = "imported from the tarball" if "import" in source else "pulled"
    return {"before": "image %s: absent\n" % result["image"], "after": "image %s: %s\n" % (result["image"], how)}


# --- the recorded proof ------------------------------------------------------------------------

def current_key(params, result, facts):
    """(the proof's key as the node is now, handlers the live runtime has loaded); CheckFailed when it does not answer."""
    content = filewrite.read_bytes(result["config_path"]) if result["config_path"] else None
    try:
        if result["engine"] == "docker":
            docker = wl.Docker(wl.which("docker") or "docker", result["socket"])
            version, handlers = docker.version(), docker.runtimes()
        else:
            client = cri.CRIClient(result["socket"], timeout=CRI_CALL_TIMEOUT)
            version = client.version().get("runtime_version")
            handlers = cri.runtimes_from_status(client.status(verbose=True))
    except (http2_grpc.CRIError, wl.WorkloadError) as exc:
        raise CheckFailed("the runtime on %s does not answer: %s" % (result["socket"], getattr(exc, "message", exc)))
    key = proof.proof_key(
        result["engine"], result["socket"], params["runtime_handler"], params["image"],
        filewrite.sha256_bytes(content) if content is not None else None, version,
        (facts.get("driver") or {}).get("version"), (facts.get("toolkit") or {}).get("version"))
    return key, handlers


def recall(params, result, facts):
    """RESULT reports the recorded proof when it still holds, else verdict not-run and the reason; nothing runs."""
    try:
        key, handlers = current_key(params, result, facts)
        result["proof_key"] = key
        record = proof.parse((filewrite.read_bytes(params["record_path"]) or b"").decode("utf-8", "replace")) \
            if params["record_path"] else None
        valid, reason = proof.holds(record, key, handlers)
    except CheckFailed as exc:
        valid, reason = False, exc.msg
    except filewrite.FileFault as exc:  # names the file, the cause and what to do
        valid, reason = False, str(exc)
    except (IOError, OSError) as exc:
        valid, reason = False, "cannot read %s: %s" % (params["record_path"], exc)
    if valid:
        result.update(proof="recorded", proof_recorded_at=record["recorded_at"], verdict=record["verdict"],
                      passed=True, cuda_verified=record["cuda_verified"],
                      runtime_wiring_verified=record["runtime_wiring_verified"])
    else:
        result.update(proof="none", proof_reason=reason, verdict="not-run")


def record(params, result, facts, write):
    """Keep a fresh proof in params' record_path through WRITE(path, data); return a warning when it was not
    kept (the proof stands), else None."""
    try:
        key, _handlers = current_key(params, result, facts)
        kept = proof.make_record(key, result)
        if kept is None:
            return None
        write(params["record_path"], proof.dumps(kept).encode("utf-8"))
    except (CheckFailed, filewrite.FileFault, IOError, OSError) as exc:
        return "the proof passed but was not recorded in %s: %s" % (params["record_path"], getattr(exc, "msg", exc))
    result.update(proof_key=key, proof_recorded_at=kept["recorded_at"])
    return None
