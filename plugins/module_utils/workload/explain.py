# -*- coding: utf-8 -*-
# Copyright: gpunode.nvidia contributors
# Apache License 2.0
"""Known failure messages of GPU workloads, mapped to their cause and fix.

Pure functions, standard library only, no I/O: used on nodes (the workload
check) and on the controller (cluster check, diagnosis).

    explain(message, context=None) -> {"rule", "cause", "incident", "fix"} or None
    explain_first(messages, context=None) -> the explanation of the first message that has one

`message` is text as a daemon, kubelet or the scheduler wrote it (a CRI error,
a pod event, a container log). `context` names what was involved so that the
explanation can name it too; every key is optional:

    node             node name                      socket       runtime socket (CRI or Docker)
    config_path      the runtime's config file      engine       containerd, crio or docker
    runtime_handler  runtime / RuntimeClass handler (default nvidia)
    runtime_class    RuntimeClass name              image        workload image
    service          the runtime's service          timeout      seconds allowed
    allocatable_gpus the node's nvidia.com/gpu allocatable (cluster level)

`incident` is the field guide's number (I1, I3, I4, I5) or None. `rule` is a
stable short name of the rule that matched, for tests and for tools.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

DEFAULT_HANDLER = "nvidia"


class _Context(dict):
    """The caller's context with readable fallbacks for what it did not say."""

    def __init__(self, context):
        super(_Context, self).__init__((k, v) for k, v in (context or {}).items() if v not in (None, ""))

    def node(self):
        return "node %s" % self["node"] if "node" in self else "the node"

    def runtime(self):
        engine = self.get("engine") or "the container runtime"
        if "socket" in self:
            return "%s on %s" % (engine, self["socket"])
        return engine

    def config(self):
        if "config_path" in self:
            return self["config_path"]
        return {"docker": "/etc/docker/daemon.json", "crio": "/etc/crio/crio.conf.d/"}.get(
            self.get("engine"), "the runtime's config file")

    def restart(self):
        if "service" in self:
            return "systemctl restart %s" % self["service"]
        return {"docker": "systemctl reload docker", "crio": "systemctl restart crio"}.get(
            self.get("engine"), "restart the runtime (systemctl restart containerd, snap restart k8s.containerd, "
                                "systemctl restart k3s, ...)")


def _result(rule, incident, cause, fix):
    return {"rule": rule, "cause": cause, "incident": incident, "fix": fix}


# --- one function per known failure ------------------------------------------------------------

def _no_runtime(match, ctx):
    handler = match.group("handler") or ctx.get("runtime_handler", DEFAULT_HANDLER)
    return _result(
        "no-runtime", "I1",
        "%s has no runtime \"%s\" loaded, so every pod with that runtime handler fails to start its "
        "sandbox. Either %s never got the runtime, the edit went to another file or another runtime "
        "instance than the one kubelet talks to, or the daemon was not restarted after the edit."
        % (ctx.runtime(), handler, ctx.config()),
        "On %s add the \"%s\" runtime to %s (role gpunode.nvidia.container_runtime), then %s. "
        "Check which socket kubelet uses (gpunode.nvidia.gpu_node_facts: gpu_node.target) and that "
        "gpunode.nvidia.cri_info on that socket lists \"%s\"." % (
            ctx.node(), handler, ctx.config(), ctx.restart(), handler))


def _docker_no_runtime(match, ctx):
    handler = match.group("handler")
    return _result(
        "no-runtime", "I1",
        "dockerd%s does not know a runtime named \"%s\": %s has no runtimes.%s entry, or dockerd "
        "was not reloaded after it was added." % (
            " on %s" % ctx["socket"] if "socket" in ctx else "", handler, ctx.config(), handler),
        "On %s add runtimes.%s to %s (role gpunode.nvidia.container_runtime with engine docker), then "
        "systemctl reload docker (dockerd re-reads its runtimes on SIGHUP)." % (
            ctx.node(), handler, ctx.config()))


def _glibc(match, ctx):
    binary = match.group("binary") or "an NVIDIA container toolkit binary"
    return _result(
        "glibc", "I4",
        "%s needs glibc %s but %s has an older glibc: the OCI prestart hook fails and every GPU "
        "container fails to start." % (binary, match.group("version"), ctx.node()),
        "Install the NVIDIA container toolkit build for this distribution's glibc (the distribution's "
        "own packages from NVIDIA's repository for this OS release, not binaries copied from a newer "
        "host or a toolkit image for another OS); gpunode.nvidia.gpu_node_facts reports each toolkit "
        "binary's glibc need under gpu_node.glibc.")


def _missing_binary(match, ctx):
    binary = match.group("binary")
    return _result(
        "missing-runtime-binary", "I5",
        "The runtime binary %s that %s names (options.BinaryName of the \"%s\" runtime in %s) does "
        "not exist on %s. If \"%s\" is the default runtime, every pod on the node fails, not only GPU pods."
        % (binary, ctx.runtime(), ctx.get("runtime_handler", DEFAULT_HANDLER), ctx.config(), ctx.node(),
           ctx.get("runtime_handler", DEFAULT_HANDLER)),
        "Install the NVIDIA container toolkit so that %s exists (role gpunode.nvidia.nvidia_container_toolkit), "
        "or point BinaryName at the installed nvidia-container-runtime; do not make \"%s\" the default "
        "runtime before its binary exists (container_runtime_set_as_default), then %s." % (
            binary, ctx.get("runtime_handler", DEFAULT_HANDLER), ctx.restart()))


def _sandbox_image(match, ctx):
    image = match.group("image")
    return _result(
        "sandbox-image-pull", None,
        "%s cannot get its sandbox (pause) image %s: no pod can start on %s. The node has no access "
        "to that registry (air-gapped site, proxy, DNS)." % (ctx.runtime(), image, ctx.node()),
        "Mirror the pause image to a reachable registry and set sandbox_image (containerd 1.x) or "
        "pinned_images.sandbox (containerd 2.x) in %s, or import it on the node with "
        "`ctr -n k8s.io images import pause.tar`." % ctx.config())


def _pull_cause(text):
    lowered = text.lower()
    if "no such host" in lowered or "i/o timeout" in lowered or "connection refused" in lowered \
            or "network is unreachable" in lowered or "dial tcp" in lowered:
        return "the registry cannot be reached from the node (DNS, proxy, firewall or an air-gapped site)"
    if "unauthorized" in lowered or "denied" in lowered or "authentication required" in lowered:
        return "the registry refused the node's credentials"
    if "x509" in lowered or "certificate" in lowered:
        return "the registry's TLS certificate is not trusted by the node"
    if "not found" in lowered or "manifest unknown" in lowered:
        return "the image or tag does not exist in that registry"
    if "does not exist locally" in lowered or "not present" in lowered or "never pull" in lowered:
        return "the image is not on the node and the pull policy forbids pulling it"
    return "the image could not be pulled"


def _image_pull(match, ctx):
    text = match.string
    image = match.groupdict().get("image") or ctx.get("image") or "the workload image"
    return _result(
        "image-pull", None,
        "%s could not get image %s: %s." % (ctx.node().capitalize(), image, _pull_cause(text)),
        "Mirror %s to a registry the node reaches and set the image variable (gpu_verify_image) to the "
        "mirror, add registry credentials (imagePullSecrets or the runtime's registry config in %s), or "
        "import the image from a tarball (gpu_verify_image_tarball) on air-gapped nodes." % (image, ctx.config()))


def _cuda_result(match, ctx):
    return _result(
        "cuda-result-wrong", None,
        "The CUDA vector-add sample ran on %s but computed a wrong result (element %s): the GPU, its "
        "memory or the driver is faulty; the runtime wiring itself works." % (ctx.node(), match.group("element")),
        "Run nvidia-smi -q (ECC errors, retired pages), look for Xid errors in the kernel log "
        "(dmesg | grep -i xid), reset or drain the GPU, and check that the driver matches the CUDA version "
        "of the image.")


def _cuda_driver_old(match, ctx):
    return _result(
        "cuda-driver-too-old", None,
        "The driver on %s is older than the CUDA version the image %s was built for."
        % (ctx.node(), ctx.get("image", "")),
        "Use a sample image built for an older CUDA (a cuda-sample:vectoradd tag that matches the driver's "
        "CUDA version in nvidia-smi), or upgrade the driver (role gpunode.nvidia.nvidia_driver).")


def _no_driver(match, ctx):
    return _result(
        "no-driver", None,
        "The NVIDIA driver is not usable on %s (%s): the container toolkit cannot set up the GPU for "
        "the container." % (ctx.node(), match.group(0).strip()),
        "Install or load the NVIDIA driver (role gpunode.nvidia.nvidia_driver, then nvidia-smi must work "
        "on the node); on a node without a GPU, GPU workloads cannot run.")


def _timeout(match, ctx):
    seconds = match.groupdict().get("seconds") or ctx.get("timeout") or "the allowed time"
    return _result(
        "timeout", None,
        "The GPU workload on %s did not finish within %s seconds: it hung (GPU or driver hang), was "
        "still pulling its image, or waited for a GPU." % (ctx.node(), seconds),
        "Look at the output attached, at nvidia-smi on the node and at the kernel log (Xid errors); "
        "pull or import the image beforehand, or raise the timeout (gpu_verify_timeout).")


def _unreachable(match, ctx):
    return _result(
        "runtime-unreachable", None,
        "Nothing answers on %s: the container runtime is not running there, or it is not the socket "
        "kubelet uses (incident I2: another runtime instance)." % (ctx.get("socket") or "the runtime socket"),
        "Start the runtime (%s) or pass the socket kubelet uses (its --container-runtime-endpoint; "
        "gpunode.nvidia.gpu_node_facts reports it as gpu_node.kubelet.endpoint)." % ctx.restart())


def _cri_disabled(match, ctx):
    return _result(
        "cri-disabled", None,
        "%s does not serve the CRI API: its config %s disables the CRI plugin (disabled_plugins = "
        "[\"cri\"]), so kubelet cannot use it at all." % (ctx.runtime(), ctx.config()),
        "Remove \"cri\" from disabled_plugins in %s, then %s." % (ctx.config(), ctx.restart()))


def _insufficient_gpu(match, ctx):
    allocatable = ctx.get("allocatable_gpus")
    if allocatable is not None and str(allocatable) in ("0", ""):
        cause = ("%s advertises no nvidia.com/gpu (allocatable 0): the NVIDIA device plugin is not "
                 "registered with kubelet there." % ctx.node().capitalize())
    elif allocatable is not None:
        cause = ("%s has nvidia.com/gpu %s allocatable, all of them taken by other pods." % (
            ctx.node().capitalize(), allocatable))
    else:
        cause = ("No node had a free nvidia.com/gpu for the pod: the NVIDIA device plugin is not registered "
                 "on %s, or its GPUs are all in use." % ctx.node())
    return _result(
        "insufficient-gpu", None, cause,
        "Check the NVIDIA device plugin daemonset pod on %s (kubectl -n <ns> logs): it must run with runtime "
        "class %s (or with nvidia as the default runtime) to see the GPUs, and the node's "
        "status.allocatable must show nvidia.com/gpu." % (ctx.node(), ctx.get("runtime_class", DEFAULT_HANDLER)))


def _not_ready(match, ctx):
    return _result(
        "node-not-ready", "I3",
        "%s is NotReady: kubelet lost its container runtime, typically after the runtime was restarted "
        "under it or when kubelet still points at another runtime (legacy --container-runtime docker)."
        % ctx.node().capitalize(),
        "On %s check systemctl status kubelet and journalctl -u kubelet (\"failed to write client preface\", "
        "\"broken pipe\"), make sure its runtime endpoint is the socket of the runtime that was configured, "
        "then systemctl restart kubelet. The role gpunode.nvidia.container_runtime restarts the runtime "
        "under the node lock and brings kubelet back." % ctx.node())


def _taint(match, ctx):
    return _result(
        "untolerated-taint", None,
        "The verification pod does not tolerate a taint of %s: %s." % (ctx.node(), match.group("taint")),
        "Add the taint to the pod's tolerations (gpu_verify_tolerations) or remove it from the node.")


def _runtimeclass_missing(match, ctx):
    return _result(
        "runtimeclass-missing", None,
        "The cluster has no RuntimeClass %s, so pods naming it are rejected." % match.group("name"),
        "Create it (apiVersion node.k8s.io/v1, kind RuntimeClass, handler %s); the role "
        "gpunode.nvidia.gpu_verify does when gpunode_kubeconfig is set."
        % ctx.get("runtime_handler", DEFAULT_HANDLER))


_BINARY = r"(?P<binary>/[^\s:\"']+|[A-Za-z0-9._-]+)"

# (pattern, builder). Order matters: the most specific message first (a GLIBC error also
# contains "OCI runtime create failed", a missing sandbox image also "failed to pull").
RULES = (
    (r"no runtime for \"?(?P<handler>[^\s\"]+)\"? is configured", _no_runtime),
    (r"failed to find runtime handler (?P<handler>\S+)", _no_runtime),
    (r"runtime handler \"?(?P<handler>[^\s\"]+)\"? (?:is )?not supported", _no_runtime),
    (r"(?:unknown or invalid runtime name:|Unknown runtime specified) (?P<handler>[^\s.]+)", _docker_no_runtime),
    (r"(?:(?P<binary>/\S+): )?(?:/\S*/)?libc\.so\.6: version [`'\"]?GLIBC_(?P<version>\d+\.\d+)", _glibc),
    (r"GLIBC_(?P<version>\d+\.\d+)['`\"]? not found(?: \(required by (?P<binary>[^)\s]+)\))?", _glibc),
    (r"fork/exec " + _BINARY + r": no such file or directory", _missing_binary),
    (r"exec: \"" + _BINARY + r"\": (?:executable file not found|stat [^:]+: no such file)", _missing_binary),
    (r"failed to (?:get|pull) sandbox image \"(?P<image>[^\"]+)\"", _sandbox_image),
    (r"Result verification failed at element (?P<element>\d+)", _cuda_result),
    (r"CUDA driver version is insufficient for CUDA runtime version", _cuda_driver_old),
    (r"nvml error: driver not loaded|driver/library version mismatch|"
     r"load library failed: libnvidia-ml\.so\.1[^\n]*|no NVIDIA devices? found|"
     r"NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver", _no_driver),
    (r"(?:failed to pull and unpack image|Failed to pull image|failed to resolve reference|"
     r"pull access denied|ErrImagePull|ImagePullBackOff|ErrImageNeverPull|manifest unknown)"
     r"(?: \"(?P<image>[^\"]+)\")?", _image_pull),
    (r"image \"(?P<image>[^\"]+)\" (?:is )?not present(?: with pull policy of Never)?", _image_pull),
    (r"(?:did not finish|timed out|no answer) (?:with)?in (?P<seconds>\d+(?:\.\d+)?) ?s", _timeout),
    (r"cannot connect to (?P<socket>\S+)|Cannot connect to the Docker daemon", _unreachable),
    (r"unknown service runtime\.v1\.RuntimeService", _cri_disabled),
    (r"Insufficient nvidia\.com/gpu|OutOfnvidia\.com/gpu|"
     r"Node didn't have enough resource: nvidia\.com/gpu", _insufficient_gpu),
    (r"untolerated taint \{node\.kubernetes\.io/(?:not-ready|unreachable)|\bNotReady\b|"
     r"KubeletNotReady|container runtime is down|PLEG is not healthy", _not_ready),
    (r"untolerated taint (?P<taint>\{[^}]*\})", _taint),
    (r"RuntimeClass \"(?P<name>[^\"]+)\" not found", _runtimeclass_missing),
)
_COMPILED = tuple((re.compile(pattern), builder) for pattern, builder in RULES)


def explain(message, context=None):
    """{rule, cause, incident, fix} for a known failure MESSAGE, or None when it is not known."""
    if not message:
        return None
    text = message if isinstance(message, str) else str(message)
    ctx = _Context(context)
    for regex, builder in _COMPILED:
        match = regex.search(text)
        if match:
            return builder(match, ctx)
    return None


def explain_first(messages, context=None):
    """The explanation of the first of MESSAGES that has one (events, logs, errors in order), or None."""
    for message in messages or ():
        found = explain(message, context)
        if found:
            return found
    return None
