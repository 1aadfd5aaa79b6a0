# -*- coding: utf-8 -*-
# Copyright: gpunode.nvidia contributors
# Apache License 2.0
"""Is this node ready for NVIDIA's DRA driver (kubernetes-sigs/dra-driver-nvidia-gpu)?

What the node must offer, from discovery's facts (the runtime kubelet uses, the kubelet, the driver):

* CDI in the runtime kubelet uses: containerd 2.x (on by default) or 1.7 (``enable_cdi = true``, which the
  container_runtime role writes); containerd 1.6 has no CDI (its ``config dump`` silently drops the key);
  CRI-O from 1.27; Docker is not a CRI runtime for DRA;
* Kubernetes 1.34.2 or newer (DRA stable), or 1.32/1.33 with the kubelet feature gate
  ``DynamicResourceAllocation=true`` in the distribution's own kubelet config place (which kubelet_gates.py writes);
* driver 565 or newer, 570.158.01 or newer for ComputeDomains (multi-node NVLink through IMEX).

Runs on managed nodes: standard library only.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

from ansible_collections.gpunode.nvidia.plugins.module_utils.install.guards import older_than, version_key
from ansible_collections.gpunode.nvidia.plugins.module_utils.partitioning.kubelet_gates import RANCHER_CONFIG, SNAP_ARGS

KUBERNETES_STABLE = "1.34.2"
KUBERNETES_GATED = ("1.32", "1.33")
DRIVER_MINIMUM = "565"
COMPUTE_DOMAINS_DRIVER_MINIMUM = "570.158.01"
GATE = "DynamicResourceAllocation"
# Where the GPU operator's driver container publishes its root on the host (the DRA chart's nvidiaDriverRoot).
OPERATOR_DRIVER_ROOT = "/run/nvidia/driver"
GATE_ON = re.compile(r"%s\s*[:=]\s*\"?true" % GATE, re.I)


def driver_root(node):
    """The DRA chart's nvidiaDriverRoot for this node: the operator's containerized driver, else the host's /."""
    return OPERATOR_DRIVER_ROOT if node.isfile(OPERATOR_DRIVER_ROOT + "/usr/bin/nvidia-smi") else "/"


def runtime_problem(kind, version):
    """Why the runtime cannot serve CDI devices, or None (containerd 1.7 gets enable_cdi from the runtime stage)."""
    if kind == "containerd" and older_than(version, "1.7"):
        return ("containerd %s has no CDI support (enable_cdi exists from 1.7; 1.6's config dump silently drops the "
                "key): DRA cannot inject devices. Upgrade containerd to 1.7 or newer first." % version)
    if kind == "crio" and older_than(version, "1.27"):
        return "CRI-O %s predates CDI by default (1.27): upgrade CRI-O first." % version
    if kind == "docker":
        return "kubelet uses Docker (cri-dockerd): DRA needs containerd 1.7+ or CRI-O 1.27+ as the CRI runtime."
    return None


def gate_place(kubelet):
    """(path, what to write) where this distribution's kubelet takes feature gates."""
    platform = kubelet.get("platform")
    if platform in ("k3s", "rke2"):
        return (RANCHER_CONFIG % platform, 'kubelet-arg: ["feature-gates=%s=true"]' % GATE)
    if platform in SNAP_ARGS:
        return (SNAP_ARGS[platform], "--feature-gates=%s=true" % GATE)
    if platform == "k0s":
        return ("/etc/k0s/k0s.yaml", "workerProfiles[].values.featureGates: {%s: true}" % GATE)
    return (kubelet.get("config_path") or "/var/lib/kubelet/config.yaml", "featureGates: {%s: true}" % GATE)


def kubernetes_problem(version, kubelet, read, gate_pending=False):
    """Why this Kubernetes cannot run DRA (or lacks its gate), or None. read(path) -> text or None.

    gate_pending: the gate is being written in this run (module kubelet_feature_gates), so it is not missing."""
    if not version:
        return None
    minor = ".".join(str(p) for p in version_key(version)[:2])
    if not older_than(version, KUBERNETES_STABLE):
        return None
    if minor in KUBERNETES_GATED:
        path, line = gate_place(kubelet)
        # flag_sources name the files (and /proc/PID/cmdline) kubelet's flags come from.
        if gate_pending or any(GATE_ON.search(read(place) or "") for place in [path] + kubelet.get("flag_sources", [])):
            return None
        return ("Kubernetes %s runs DRA only with the feature gate %s=true (stable from %s): set %s in %s and "
                "restart kubelet (the API server and scheduler need the gate too)."
                % (version, GATE, KUBERNETES_STABLE, line, path))
    return ("Kubernetes %s has no usable DRA: 1.34.2 or newer (or 1.32/1.33 with the %s gate) is needed."
            % (version, GATE))


def driver_problem(version, compute_domains):
    if not version:
        return "No NVIDIA driver is loaded: the DRA driver needs %s or newer." % DRIVER_MINIMUM
    minimum = COMPUTE_DOMAINS_DRIVER_MINIMUM if compute_domains else DRIVER_MINIMUM
    if older_than(version, minimum):
        return "NVIDIA driver %s is older than %s, the DRA driver's minimum%s." % (
            version, minimum, " for ComputeDomains" if compute_domains else "")
    return None


def problems(facts, kubernetes_version, read, compute_domains=False, gate_pending=False):
    """Every prerequisite this node misses; [] when it is ready."""
    target = facts.get("target") or {}
    runtime = next((r for r in facts.get("runtimes") or [] if r["id"] == target.get("id")), None)
    found = [runtime_problem(runtime["kind"], runtime.get("version")) if runtime and runtime.get("version") else None,
             kubernetes_problem(kubernetes_version, facts.get("kubelet") or {}, read, gate_pending),
             driver_problem((facts.get("driver") or {}).get("version"), compute_domains)]
    return [problem for problem in found if problem]
