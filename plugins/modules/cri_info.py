#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpunode.nvidia contributors
# Apache License 2.0

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: cri_info
short_description: Ask a live container runtime over CRI whether it is ready and which runtimes it loaded
version_added: 0.1.0
description:
  - Calls C(runtime.v1.RuntimeService) C(Version) and C(Status) (verbose) on the runtime's CRI socket, the
    same way kubelet does, and reports whether the runtime is ready and which runtime handlers
    (such as C(nvidia)) the B(running) daemon has loaded.
author:
  - gpunode.nvidia contributors (!UNKNOWN)
options:
  socket:
    description:
      - The CRI endpoint, a unix socket path, optionally written as kubelet does (C(unix:///path)).
      - Use the endpoint kubelet uses (its C(--container-runtime-endpoint) flag or C(containerRuntimeEndpoint)
        setting), for example C(/var/snap/microk8s/common/run/containerd.sock) on MicroK8s or
        C(/run/k3s/containerd/containerd.sock) on k3s.
    type: str
    default: /run/containerd/containerd.sock
  timeout:
    description: Seconds allowed for each CRI call.
    type: float
    default: 10
  wait_ready:
    description:
      - Seconds to wait until the runtime answers and C(Status) reports C(RuntimeReady) true, for example
        right after a restart. Connection errors are retried during that time.
      - V(0) asks once and does not wait; a runtime that answers but is not ready then gives RV(ready=false)
        without failing.
      - When the time runs out the task fails with the last error or the runtime's conditions.
    type: int
    default: 0
extends_documentation_fragment:
  - gpunode.nvidia.attributes
  - gpunode.nvidia.attributes.read_only
notes:
  - This is the honest answer to "will a pod with runtime class C(nvidia) start here?". A config file
    may say otherwise when the edit went to another file, to another containerd instance, or the daemon
    was never restarted (pods then fail with C(no runtime for "nvidia" is configured)).
  - The runtime list is read from the effective CRI configuration that containerd 1.6, 1.7 and 2.x return
    in C(Status) (C(containerd.runtimes) of C(info.config)); handlers that only appear in the C(Status)
    runtime handler list (other CRI runtimes) are listed without details.
  - Needs only Python's standard library on the node (a built-in gRPC/HTTP/2 client); no C(crictl).
  - Read-only; never changes anything.
  - C(NetworkReady) is false on a node without CNI configuration; that does not make RV(ready) false,
    which follows C(RuntimeReady) as kubelet's runtime check does.
  - Tested against Debian's containerd 1.6.20, 1.7.24 and 2.1.9. CRI-O and cri-dockerd speak the same API
    but were not available for testing.
seealso:
  - module: gpunode.nvidia.containerd_runtime
  - name: CRI API (runtime.v1)
    description: The Kubernetes Container Runtime Interface definition.
    link: https://github.com/kubernetes/cri-api
"""

EXAMPLES = r"""
- name: Which runtimes does the containerd that kubelet uses run?
  gpunode.nvidia.cri_info:
  register: cri

- name: Fail early when the nvidia runtime is not loaded
  ansible.builtin.assert:
    that: "'nvidia' in cri.runtimes"
    fail_msg: >-
      containerd on {{ cri.socket }} has no nvidia runtime loaded (runtimes: {{ cri.runtimes | list }});
      GPU pods would fail with: no runtime for "nvidia" is configured

- name: Wait for containerd after a restart (k3s socket)
  gpunode.nvidia.cri_info:
    socket: unix:///run/k3s/containerd/containerd.sock
    wait_ready: 60
"""

RETURN = r"""
socket:
  description: The socket path that was asked.
  returned: always
  type: str
  sample: /run/containerd/containerd.sock
ready:
  description: Whether C(Status) reported the C(RuntimeReady) condition true.
  returned: always
  type: bool
  sample: true
conditions:
  description: The runtime conditions from C(Status).
  returned: success
  type: list
  elements: dict
  sample:
    - {type: RuntimeReady, status: true, reason: "", message: ""}
    - {type: NetworkReady, status: false, reason: NetworkPluginNotReady,
       message: "Network plugin returns error: cni plugin not initialized"}
runtimes:
  description:
    - Runtime handlers the running daemon loaded, by name.
    - C(runtime_type) is the shim (for example C(io.containerd.runc.v2)), C(binary_name) the runtime's
      C(options.BinaryName) (empty means C(runc) from PATH), C(systemd_cgroup) its C(options.SystemdCgroup).
  returned: always
  type: dict
  sample:
    runc: {runtime_type: io.containerd.runc.v2, binary_name: "", systemd_cgroup: true}
    nvidia: {runtime_type: io.containerd.runc.v2, binary_name: /usr/bin/nvidia-container-runtime,
             systemd_cgroup: true}
default_runtime:
  description: The runtime used for pods without a runtime class (C(default_runtime_name)).
  returned: success
  type: str
  sample: runc
runtime_name:
  description: Runtime name from C(Version).
  returned: success
  type: str
  sample: containerd
runtime_version:
  description: Runtime version from C(Version).
  returned: success
  type: str
  sample: 1.6.20~ds1
runtime_api_version:
  description: CRI API version from C(Version).
  returned: success
  type: str
  sample: v1
"""

import time

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpunode.nvidia.plugins.module_utils.common.runtime_sockets import DEFAULT_SOCKETS
from ansible_collections.gpunode.nvidia.plugins.module_utils.cri.client import (
    CRIClient,
    default_runtime_from_status,
    runtime_ready,
    runtimes_from_status,
)
from ansible_collections.gpunode.nvidia.plugins.module_utils.cri.http2_grpc import CRIError, UNAVAILABLE, UNIMPLEMENTED
from ansible_collections.gpunode.nvidia.plugins.module_utils.editors.masking import mask_data

POLL_INTERVAL = 0.5


def explain(error, socket):
    """A CRIError as an operator-facing sentence with what to check."""
    if error.code == UNAVAILABLE:
        return ("%s. Is the container runtime running, and is %s the endpoint kubelet uses "
                "(--container-runtime-endpoint / containerRuntimeEndpoint)?" % (error.message, socket))
    if error.code == UNIMPLEMENTED:
        return ("the daemon on %s does not serve CRI runtime.v1 (%s); on containerd check that "
                "disabled_plugins does not list the CRI plugin" % (socket, error.message))
    return "CRI call on %s failed: %s" % (socket, error)


def ask(client, wait_ready):
    """Version and Status, retried until RuntimeReady or WAIT_READY seconds; (version, status, error)."""
    deadline = time.time() + wait_ready
    while True:
        version = status = error = None
        try:
            version = client.version()
            status = client.status(verbose=True)
        except CRIError as exc:
            error = exc
        left = deadline - time.time()
        if (status is not None and runtime_ready(status)) or left <= 0:
            return version, status, error
        time.sleep(min(POLL_INTERVAL, left))


def summarise(version, status):
    runtimes = runtimes_from_status(status)
    for runtime in runtimes.values():
        runtime.pop("options", None)
    return {
        "ready": runtime_ready(status),
        "conditions": (status.get("status") or {}).get("conditions", []),
        "runtimes": mask_data(runtimes),
        "default_runtime": default_runtime_from_status(status),
        "runtime_name": version["runtime_name"],
        "runtime_version": version["runtime_version"],
        "runtime_api_version": version["runtime_api_version"],
    }


def main():
    module = AnsibleModule(
        argument_spec=dict(
            socket=dict(type="str", default=DEFAULT_SOCKETS["containerd"]),
            timeout=dict(type="float", default=10),
            wait_ready=dict(type="int", default=0),
        ),
        supports_check_mode=True,
    )
    socket = module.params["socket"]
    if module.params["timeout"] <= 0 or module.params["wait_ready"] < 0:
        module.fail_json(msg="timeout must be positive and wait_ready zero or more", socket=socket,
                         ready=False, runtimes={})
    client = CRIClient(socket, timeout=module.params["timeout"])
    version, status, error = ask(client, module.params["wait_ready"])
    if error is not None:
        waited = " (waited %ds)" % module.params["wait_ready"] if module.params["wait_ready"] else ""
        module.fail_json(msg=explain(error, socket) + waited, socket=socket, ready=False, runtimes={},
                         grpc_code=error.code_name)
    result = dict(changed=False, socket=socket, **summarise(version, status))
    if module.params["wait_ready"] and not result["ready"]:
        reasons = ["RuntimeReady=false (%s) %s" % (c["reason"], c["message"])
                   for c in result["conditions"] if c["type"] == "RuntimeReady"]
        module.fail_json(msg="the runtime on %s is not ready after %ds: %s" % (
            socket, module.params["wait_ready"], "; ".join(reasons) or "no RuntimeReady condition reported"),
            **result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
