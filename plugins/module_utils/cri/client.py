# -*- coding: utf-8 -*-
# Copyright: gpunode.nvidia contributors
# Apache License 2.0
"""A minimal CRI client: gRPC over HTTP/2 (h2c) on a unix socket, standard library only.

Nodes have Python but no crictl and no grpcio, yet the only honest answer to
"which runtimes does the containerd that kubelet talks to really run?" comes
from asking that daemon over CRI, as kubelet does. A unary call of `runtime.v1`
takes three layers, each in its own module:

* HTTP/2 (RFC 9113) with prior knowledge and unary gRPC: http2_grpc.py.
* HPACK (RFC 7541): hpack.py.
* protobuf (proto3) for the messages listed in its SCHEMA: protobuf_wire.py.

This module is the client on top: ``CRIClient`` (RuntimeService and
ImageService), the sandbox and container configs kubelet would build, and
readers of a Status reply (ready, loaded runtimes, default runtime).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import time

from ansible_collections.gpunode.nvidia.plugins.module_utils.common.runtime_sockets import DEFAULT_SOCKETS
from ansible_collections.gpunode.nvidia.plugins.module_utils.cri.http2_grpc import (
    DEADLINE_EXCEEDED, DEFAULT_TIMEOUT, INTERNAL, CRIError, grpc_unary)
from ansible_collections.gpunode.nvidia.plugins.module_utils.cri.protobuf_wire import decode_message, encode_message

DEFAULT_SOCKET = DEFAULT_SOCKETS["containerd"]  # the client's address when none is given
RUNTIME_SERVICE = "runtime.v1.RuntimeService"
IMAGE_SERVICE = "runtime.v1.ImageService"

# NamespaceMode and ContainerState enums of api.proto.
NAMESPACE_POD, NAMESPACE_CONTAINER, NAMESPACE_NODE = 0, 1, 2
CONTAINER_STATES = {0: "CREATED", 1: "RUNNING", 2: "EXITED", 3: "UNKNOWN"}


class CRIClient:
    """RuntimeService and ImageService of CRI `runtime.v1` on a unix socket."""

    def __init__(self, address=DEFAULT_SOCKET, timeout=DEFAULT_TIMEOUT):
        self.address = address
        self.timeout = timeout

    def call(self, service, method, request_type, request, response_type, timeout=None):
        payload = encode_message(request_type, request)
        raw = grpc_unary(self.address, "/%s/%s" % (service, method), payload,
                         timeout=self.timeout if timeout is None else timeout)
        try:
            return decode_message(response_type, raw)
        except (ValueError, TypeError, UnicodeDecodeError) as exc:
            raise CRIError(INTERNAL, "cannot parse the %s reply from %s: %s" % (method, self.address, exc))

    def _runtime(self, method, request, timeout=None, request_type=None, response_type=None):
        return self.call(RUNTIME_SERVICE, method, request_type or method + "Request", request,
                         response_type or method + "Response", timeout)

    # -- runtime ----------------------------------------------------------
    def version(self):
        return self._runtime("Version", {"version": "v1"})

    def status(self, verbose=True):
        """conditions, info (values are JSON text, e.g. info["config"]) and runtime_handlers."""
        return self._runtime("Status", {"verbose": verbose})

    def run_pod_sandbox(self, config, runtime_handler="", timeout=None):
        reply = self._runtime("RunPodSandbox", {"config": config, "runtime_handler": runtime_handler}, timeout)
        return reply["pod_sandbox_id"]

    def stop_pod_sandbox(self, sandbox_id, timeout=None):
        self._runtime("StopPodSandbox", {"pod_sandbox_id": sandbox_id}, timeout, response_type="Empty")

    def remove_pod_sandbox(self, sandbox_id, timeout=None):
        self._runtime("RemovePodSandbox", {"pod_sandbox_id": sandbox_id}, timeout, response_type="Empty")

    def list_pod_sandboxes(self, labels=None, timeout=None):
        """Sandboxes (id, metadata, state 0=ready/1=not ready, labels, runtime_handler), optionally by label."""
        request = {"filter": {"label_selector": dict(labels)}} if labels else {}
        return self._runtime("ListPodSandbox", request, timeout)["items"]

    def list_containers(self, sandbox_id="", labels=None, timeout=None):
        request = {"filter": {"pod_sandbox_id": sandbox_id, "label_selector": dict(labels or {})}}
        return self._runtime("ListContainers", request, timeout)["containers"]

    def create_container(self, sandbox_id, config, sandbox_config, timeout=None):
        reply = self._runtime("CreateContainer", {"pod_sandbox_id": sandbox_id, "config": config,
                                                  "sandbox_config": sandbox_config}, timeout)
        return reply["container_id"]

    def start_container(self, container_id, timeout=None):
        self._runtime("StartContainer", {"container_id": container_id}, timeout, response_type="Empty")

    def stop_container(self, container_id, grace_seconds=0, timeout=None):
        self._runtime("StopContainer", {"container_id": container_id, "timeout": grace_seconds}, timeout,
                      response_type="Empty")

    def remove_container(self, container_id, timeout=None):
        self._runtime("RemoveContainer", {"container_id": container_id}, timeout, response_type="Empty")

    def container_status(self, container_id, timeout=None):
        """The ContainerStatus message, with `state_name` (CREATED/RUNNING/EXITED/UNKNOWN) added."""
        status = self._runtime("ContainerStatus", {"container_id": container_id}, timeout)["status"] or {}
        status["state_name"] = CONTAINER_STATES.get(status.get("state"), "UNKNOWN")
        return status

    # -- images -----------------------------------------------------------
    def list_images(self, timeout=None):
        return self.call(IMAGE_SERVICE, "ListImages", "ListImagesRequest", {}, "ListImagesResponse",
                         timeout)["images"]

    def image_status(self, image, timeout=None):
        """The Image message, or None when the runtime does not have the image."""
        return self.call(IMAGE_SERVICE, "ImageStatus", "ImageStatusRequest", {"image": {"image": image}},
                         "ImageStatusResponse", timeout)["image"]

    # -- helpers ------------------------------------------------------------
    def wait_container_exit(self, container_id, timeout, interval=0.2):
        """Poll ContainerStatus until the container has exited; return its status."""
        deadline = time.time() + timeout
        while True:
            status = self.container_status(container_id)
            if status["state_name"] == "EXITED":
                return status
            if time.time() + interval > deadline:
                raise CRIError(DEADLINE_EXCEEDED, "container %s still %s after %gs" % (
                    container_id[:12], status["state_name"].lower(), timeout))
            time.sleep(interval)


def sandbox_config(name, uid, namespace="default", attempt=0, hostname=None, log_directory="",
                   labels=None, host_network=True):
    """PodSandboxConfig for a pod on the node's network (no CNI needed), as kubelet builds it.

    Like kubelet, no hostname for a host-network pod: it shares the node's UTS
    namespace and runc refuses to set a hostname there.
    """
    mode = NAMESPACE_NODE if host_network else NAMESPACE_POD
    if hostname is None:
        hostname = "" if host_network else name
    return {
        "metadata": {"name": name, "uid": uid, "namespace": namespace, "attempt": attempt},
        "hostname": hostname,
        "log_directory": log_directory,
        "labels": dict(labels or {}),
        "linux": {"security_context": {"namespace_options": {"network": mode, "pid": NAMESPACE_CONTAINER}}},
    }


def container_config(name, image, command=None, args=None, envs=None, log_path="", labels=None,
                     host_network=True):
    """ContainerConfig; `envs` is a dict, `log_path` is relative to the sandbox's log_directory."""
    mode = NAMESPACE_NODE if host_network else NAMESPACE_POD
    return {
        "metadata": {"name": name, "attempt": 0},
        "image": {"image": image},
        "command": list(command or []),
        "args": list(args or []),
        "envs": [{"key": k, "value": v} for k, v in sorted((envs or {}).items())],
        "log_path": log_path,
        "labels": dict(labels or {}),
        "linux": {"security_context": {"namespace_options": {"network": mode, "pid": NAMESPACE_CONTAINER}}},
    }


def read_container_log(path):
    """Text of a CRI log file (`<time> <stream> <P|F> <text>` lines); partial lines are joined."""
    out = []
    with open(path, "rb") as handle:
        for line in handle.read().decode("utf-8", "replace").splitlines():
            parts = line.split(" ", 3)
            if len(parts) < 3:
                continue
            text = parts[3] if len(parts) == 4 else ""
            out.append(text if parts[2] == "P" else text + "\n")
    return "".join(out)


def runtime_ready(status):
    """True when the RuntimeReady condition of a Status reply is true."""
    conditions = ((status or {}).get("status") or {}).get("conditions", [])
    return any(c["type"] == "RuntimeReady" and c["status"] for c in conditions)


def _info_json(status, key):
    try:
        return json.loads(status.get("info", {}).get(key) or "null") or {}
    except ValueError:
        return {}


def runtime_config(status):
    """The CRI runtime settings from a verbose Status: the `containerd` table of the effective config.

    containerd 1.6/1.7 put the whole CRI plugin config in info["config"]
    (runtimes under `containerd.runtimes`); 2.x splits the plugin and returns
    the runtime plugin's config there too, with the same `containerd` table.
    """
    config = _info_json(status, "config")
    return config.get("containerd") or config.get("Containerd") or {}


def runtimes_from_status(status):
    """Runtimes the daemon loaded: name -> {runtime_type, binary_name, systemd_cgroup, options}."""
    runtimes = {}
    for name, runtime in sorted((runtime_config(status).get("runtimes") or {}).items()):
        options = runtime.get("options") or {}
        runtimes[name] = {
            "runtime_type": runtime.get("runtimeType") or runtime.get("runtime_type") or "",
            "binary_name": options.get("BinaryName") or "",
            "systemd_cgroup": bool(options.get("SystemdCgroup")),
            "options": options,
        }
    for handler in status.get("runtime_handlers") or []:
        if handler["name"] and handler["name"] not in runtimes:
            runtimes[handler["name"]] = {"runtime_type": "", "binary_name": "", "systemd_cgroup": False,
                                         "options": {}}
    return runtimes


def default_runtime_from_status(status):
    config = runtime_config(status)
    return config.get("defaultRuntimeName") or config.get("default_runtime_name") or ""
