#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpunode.nvidia contributors
# Apache License 2.0

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: gpu_workload_check
short_description: Prove that a GPU workload runs on this node, through the path kubelet uses
version_added: "0.1.0"
description:
  - Runs NVIDIA's CUDA vector-add sample once on the node and reports, with evidence, whether a GPU pod
    would run here, and why not when it would not.
author:
  - gpunode.nvidia contributors (!UNKNOWN)
options:
  engine:
    description:
      - The container runtime to run the workload with. V(auto) uses the runtime kubelet uses, as
        M(gpunode.nvidia.gpu_node_facts) discovers it (C(gpu_node.target)).
      - V(containerd) and V(crio) go through CRI on O(socket); V(docker) through the C(docker) CLI.
    type: str
    choices: [auto, containerd, crio, docker]
    default: auto
  socket:
    description:
      - The runtime's socket (C(unix:///path) or a path). Default, the discovered target's socket.
    type: str
  config_path:
    description:
      - The runtime's config file, only used to name it in explanations. Default, the discovered one.
    type: path
  runtime_handler:
    description: The runtime handler (containerd/CRI-O runtime name, Docker C(--runtime)) to run with.
    type: str
    default: nvidia
  image:
    description:
      - The workload image. Air-gapped sites use a mirror of it or O(image_tarball).
    type: str
    default: nvcr.io/nvidia/k8s/cuda-sample:vectoradd-cuda12.5.0-ubuntu22.04
  pull_policy:
    description:
      - V(if_not_present) pulls (or imports) only when the runtime does not have O(image).
      - V(always) pulls (or imports) every time, and so always reports a change.
      - V(never) fails when the image is not there.
    type: str
    choices: [always, if_not_present, never]
    default: if_not_present
  image_tarball:
    description:
      - A C(docker save) or OCI archive on the node holding O(image), imported instead of pulling, with
        C(ctr -n k8s.io images import) on containerd (C(ctr) is looked for beside the containerd binary,
        then on C(PATH)) or C(docker load) on Docker.
    type: path
  timeout:
    description: Seconds the workload may run before it counts as hung.
    type: int
    default: 300
  pull_timeout:
    description: Seconds allowed for pulling or importing the image.
    type: int
    default: 600
  require_gpu:
    description:
      - Fail when the node has no NVIDIA GPU. By default a node without one is checked for its runtime
        wiring only (image bakes, CPU-only build hosts).
    type: bool
    default: false
  node_name:
    description: The node's name in messages. Default, the host name.
    type: str
  record_path:
    description:
      - Where the node keeps the record of its last successful proof (JSON), keyed on what the proof depends
        on, the runtime's config file (SHA-256), the runtime's version, the NVIDIA driver version, the container
        toolkit version, the engine, socket, handler and image.
      - A run that passes writes it (this is not reported as a change). Empty (the default), no record is kept;
        the role C(gpunode.nvidia.gpu_verify) keeps it in C(/var/lib/gpunode/last-proof.json).
    type: str
    default: ""
  recall:
    description:
      - Report the recorded proof instead of running the workload, when it still holds, every part of its key
        is as it is now and the live runtime has O(runtime_handler) loaded. RV(proof) is then V(recorded).
      - When it does not hold, nothing is run, RV(verdict) is V(not-run), RV(proof) is V(none) and
        RV(proof_reason) says why; run the module again without O(recall) for a fresh proof.
    type: bool
    default: false
extends_documentation_fragment:
  - gpunode.nvidia.attributes
attributes:
  check_mode:
    support: partial
    details:
      - Asks the runtime whether it has the handler and the image, and reports what it would pull or import;
        runs no workload and changes nothing.
  diff_mode:
    support: full
    details: Shows the image that is pulled or imported.
notes:
  - On containerd and CRI-O it speaks CRI on the runtime's socket, as kubelet does, C(RunPodSandbox) with
    the runtime handler (C(nvidia)), then one container with C(NVIDIA_VISIBLE_DEVICES=all), waits for it to
    exit within O(timeout), reads its log, and removes the container and the sandbox in every case, also when
    a step failed.
  - On Docker hosts it runs C(docker run --rm --runtime nvidia --gpus all IMAGE).
  - Success is the sample's own criterion, exit code 0 and C(Test PASSED) in the output. A wrong result
    (C(Result verification failed at element N!)), a non-zero exit or a timeout is a failure, with the output
    attached.
  - Failures are explained, with a cause and a fix naming the node, the socket and the config file
    (for example incident I1 C(no runtime for "nvidia" is configured), I4 C(GLIBC_2.27 not found),
    I5 a missing C(BinaryName) binary, image pull errors).
  - Without an NVIDIA GPU in sysfs it does not pretend, it reports RV(gpu=none) and RV(cuda_verified=false),
    and still proves the runtime wiring, that a sandbox starts through the runtime handler. A container
    failure that only says the driver is missing is then expected and does not fail the task, any other
    failure does.
  - Standard library only on the node (a built-in CRI client); no C(crictl) or C(kubectl).
  - The sandbox uses the node's network namespace, so no CNI plugin is needed, and is labelled
    C(gpunode.nvidia/verify=1). Container logs go to C(/var/log/pods/gpunode-verify_*), which is removed after.
  - On Docker without a GPU, C(--gpus all) is left out, because dockerd refuses such a device request without
    NVIDIA's hook and a GPU. The run then proves only that dockerd knows the runtime and that the runtime
    starts containers.
  - Tested against Debian's containerd 1.6.20 and 2.1.9 and dockerd 20.10, with a stand-in
    C(nvidia-container-runtime) and stand-in sample images, since the test machines have no GPU.
seealso:
  - module: gpunode.nvidia.gpu_node_facts
  - module: gpunode.nvidia.cri_info
  - module: gpunode.nvidia.gpu_cluster_check
"""

EXAMPLES = r"""
- name: Will a GPU pod run on this node?
  gpunode.nvidia.gpu_workload_check:
  register: gpu_check

- name: Air-gapped node, sample image shipped as a tarball
  gpunode.nvidia.gpu_workload_check:
    image: registry.example.com/nvidia/cuda-sample:vectoradd-cuda12.5.0-ubuntu22.04
    image_tarball: /var/cache/images/vectoradd.tar
    pull_policy: never

- name: k3s node, explicit socket
  gpunode.nvidia.gpu_workload_check:
    engine: containerd
    socket: unix:///run/k3s/containerd/containerd.sock
    timeout: 120

- name: A GPU node must really have a GPU
  gpunode.nvidia.gpu_workload_check:
    require_gpu: true

- name: Nothing changed on the node, report its recorded proof if it still holds
  gpunode.nvidia.gpu_workload_check:
    record_path: /var/lib/gpunode/last-proof.json
    recall: true
  register: gpu_recalled
"""

RETURN = r"""
node:
  description: The node's name.
  returned: always
  type: str
  sample: gpu-node-1
engine:
  description: The runtime used (containerd, crio or docker).
  returned: always
  type: str
  sample: containerd
socket:
  description: The runtime socket used.
  returned: always
  type: str
  sample: /run/containerd/containerd.sock
config_path:
  description: The runtime's config file (discovered or given), named in explanations.
  returned: always
  type: str
  sample: /etc/containerd/config.toml
runtime_handler:
  description: The runtime handler the workload ran with.
  returned: always
  type: str
  sample: nvidia
image:
  description: The workload image.
  returned: always
  type: str
  sample: nvcr.io/nvidia/k8s/cuda-sample:vectoradd-cuda12.5.0-ubuntu22.04
image_source:
  description: How the image was obtained, V(present), V(pulled), V(imported), or V(would-pull)/V(would-import)
    in check mode.
  returned: when the image step ran
  type: str
  sample: present
gpu:
  description: V(present) when sysfs shows an NVIDIA GPU, V(none) otherwise.
  returned: always
  type: str
  sample: none
gpus:
  description: NVIDIA GPUs found in sysfs (PCI address, device id, kernel driver).
  returned: always
  type: list
  elements: dict
driver:
  description: The loaded NVIDIA driver version from C(/proc/driver/nvidia/version), or null.
  returned: always
  type: str
  sample: 550.54.15
nvidia_smi:
  description: GPUs and driver as C(nvidia-smi) reports them; null when it is not installed.
  returned: always
  type: dict
  sample: {ok: true, driver_version: 550.54.15, gpus: [{index: "0", name: NVIDIA A100-SXM4-40GB,
           uuid: GPU-5d3c..., driver_version: 550.54.15, memory_mib: "40960"}]}
runtimes_loaded:
  description: Runtime handlers the live daemon reports (CRI C(Status), C(docker info)).
  returned: when the runtime answered
  type: list
  elements: str
  sample: [nvidia, runc]
runtime_wiring_verified:
  description: The runtime accepted and started a sandbox (CRI) or a container (Docker) through the handler.
  returned: always
  type: bool
cuda_verified:
  description: A GPU is present and the sample passed. Never true on a node without a GPU.
  returned: always
  type: bool
passed:
  description: The sample exited 0 and printed C(Test PASSED).
  returned: always
  type: bool
verdict:
  description: V(cuda-verified), V(wiring-only) (no GPU, runtime wiring proven), V(not-run) (check mode)
    or V(failed).
  returned: always
  type: str
  sample: cuda-verified
workload:
  description: The run, exit code, reason, message, output (last 8000 characters), timed_out, seconds.
  returned: when the workload ran
  type: dict
explanation:
  description: Cause, incident number and fix of a known failure, else null.
  returned: always
  type: dict
  sample: {rule: no-runtime, incident: I1, cause: "containerd on /run/containerd/containerd.sock has no runtime
           \"nvidia\" loaded ...", fix: "On node gpu-1 add the \"nvidia\" runtime to /etc/containerd/config.toml ..."}
error:
  description: The failing step (image, sandbox, container, run) and the runtime's message verbatim.
  returned: on failure
  type: dict
cleanup:
  description: Whether everything the check created is gone; problems met while removing it.
  returned: when the workload ran or failed after creating something
  type: dict
  sample: {removed: true, problems: [], leftovers: []}
proof:
  description: V(fresh) (the workload ran now), V(recorded) (the node's recorded proof still holds, see O(recall))
    or V(none) (no proof, see RV(proof_reason)).
  returned: always
  type: str
  sample: recorded
proof_reason:
  description: Why the recorded proof does not hold (with O(recall)).
  returned: when O(recall) found no valid record
  type: str
  sample: "changed since the recorded proof: runtime config file"
proof_recorded_at:
  description: When the reported proof was recorded (UTC, ISO 8601).
  returned: when RV(proof) is V(recorded), or V(fresh) and the record was written
  type: str
  sample: "2026-11-23T17:40:02Z"
proof_key:
  description: What the proof depends on, as the node is now (the record's key).
  returned: when the runtime answered
  type: dict
  sample: {engine: containerd, socket: /run/containerd/containerd.sock, runtime_handler: nvidia,
           image: "nvcr.io/nvidia/k8s/cuda-sample:vectoradd-cuda12.5.0-ubuntu22.04", config_sha256: 3b0c...,
           runtime_version: 1.6.20~ds1, driver_version: 550.54.15, toolkit_version: 1.17.8-1}
duration_s:
  description: Wall time of the whole check.
  returned: always
  type: float
"""

import time

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpunode.nvidia.plugins.module_utils.editors import filewrite
from ansible_collections.gpunode.nvidia.plugins.module_utils.editors.masking import mask_data
from ansible_collections.gpunode.nvidia.plugins.module_utils.node.discovery import gather
from ansible_collections.gpunode.nvidia.plugins.module_utils.workload import check
from ansible_collections.gpunode.nvidia.plugins.module_utils.workload.judge import CheckFailed
from ansible_collections.gpunode.nvidia.plugins.module_utils.workload.target import sections_needed


def run(module):
    params = module.params
    if params["timeout"] <= 0 or params["pull_timeout"] <= 0:
        module.fail_json(msg="timeout and pull_timeout must be positive numbers of seconds")
    started = time.time()
    facts = gather("/", sections_needed(params["engine"], params["socket"], params["config_path"]))
    try:
        result = check.check(params, module.check_mode, facts, started)
    except CheckFailed as exc:
        module.fail_json(msg=exc.msg, **mask_data(exc.result))
    if result["proof"] == "fresh" and params["record_path"]:
        warning = check.record(params, result, facts,
                               lambda path, data: filewrite.atomic_write(module, path, data, mode=0o644))
        if warning:
            module.warn(warning)
    diff = check.image_diff(result)
    if diff and module._diff:
        result["diff"] = diff
    module.exit_json(**mask_data(result))


def main():
    module = AnsibleModule(
        argument_spec=dict(
            check.RECALL_ARGUMENT_SPEC,
            pull_policy=dict(type="str", default="if_not_present", choices=["always", "if_not_present", "never"]),
            image_tarball=dict(type="path"),
            timeout=dict(type="int", default=300),
            pull_timeout=dict(type="int", default=600),
            recall=dict(type="bool", default=False),
        ),
        supports_check_mode=True,
    )
    run(module)


if __name__ == "__main__":
    main()
