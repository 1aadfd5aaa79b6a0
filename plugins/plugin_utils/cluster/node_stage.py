# -*- coding: utf-8 -*-
# Copyright: gpunode.nvidia contributors
# Apache License 2.0
"""The cluster stage, the decisions (controller side, no I/O): the node's labels, the unproven taint, and who
else runs a device plugin. node_stage_api.py does the reads and writes; device_plugin.py renders the DaemonSet.

The taint `gpunode.nvidia/unproven=<reason>:NoSchedule` keeps GPU work off a node from the start of site.yml (or
its image's first boot) until its vector-add proof passes; the reason says why it is there:

  setup         site.yml is configuring the node            first-boot    the image's kubelet registered with it
  proof-failed  the proof failed: the node is not fit        setup-failed  a stage failed before the proof
  proof-void    diagnose.yml found the proof no longer holds (driver changed, runtime entry gone)

Every function works on plain dicts (the API's JSON), so it is tested without a cluster.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re
import time

from ansible_collections.gpunode.nvidia.plugins.plugin_utils.cluster.maintenance_plan import labels_of

PREFIX = "gpunode.nvidia/"
UNPROVEN_TAINT = PREFIX + "unproven"
TAINT_REASONS = ("setup", "first-boot", "proof-failed", "setup-failed", "proof-void")
GPU_PRESENT = "nvidia.com/gpu.present"
# Labels only GPU feature discovery writes: where one is there, NVIDIA's labels are its business.
GFD_LABELS = ("nvidia.com/gfd.timestamp", "nvidia.com/cuda.driver.major", "nvidia.com/cuda.driver-version.full")
LABELS = {
    "driver_version": PREFIX + "driver.version",
    "driver_branch": PREFIX + "driver.branch",
    "toolkit_version": PREFIX + "toolkit.version",
    "runtime": PREFIX + "runtime",
    "runtime_handler": PREFIX + "runtime.handler",
    "cuda_driver_api": PREFIX + "cuda.driver-api",
    "mig_mode": PREFIX + "mig.mode",
}
PROVEN_AT = PREFIX + "proven-at"
LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
# The GPU operator's marks on its DaemonSets, and the container image every NVIDIA device plugin runs.
OPERATOR_VALIDATOR = "nvidia-operator-validator"
OPERATOR_LABEL = "app.kubernetes.io/managed-by"
DEVICE_PLUGIN_IMAGE = re.compile(r"(^|/)k8s-device-plugin[:@]")


class StageError(Exception):
    """A value the cluster cannot hold, or a node the stage cannot work on; the message says what to do."""


def label_value(value, what):
    """VALUE as a label value (a string of at most 63 characters of the label alphabet); StageError names WHAT."""
    text = "" if value is None else str(value)
    if len(text) > 63 or not LABEL_VALUE.match(text):
        raise StageError("%s %r cannot be a Kubernetes label value (at most 63 characters: letters, digits, '-', "
                         "'_', '.', starting and ending with a letter or digit)" % (what, text))
    return text


def mig_mode(modes):
    """One word for the node's GPUs' current MIG modes (nvidia-smi's Enabled/Disabled/N/A per GPU)."""
    words = set(str(mode).strip().lower() for mode in modes or [])
    words.discard("")
    if not words:
        return None
    if words <= {"n/a", "[n/a]", "not supported"}:
        return "unsupported"
    if words == {"enabled"}:
        return "enabled"
    if words <= {"disabled", "n/a", "[n/a]", "not supported"}:
        return "disabled"
    return "mixed"


def fact_labels(facts):
    """{label: value or None} from the node's facts (driver_version, toolkit_version, runtime, runtime_handler,
    cuda_driver_api, mig_modes); a fact that is not known removes its label."""
    values = dict(facts)
    version = values.get("driver_version") or None
    values["driver_branch"] = version.split(".")[0] if version else None
    values["mig_mode"] = mig_mode(values.get("mig_modes"))
    return dict((label, label_value(values[key], key) if values.get(key) else None) for key, label in LABELS.items())


def gfd_manages(node):
    """GPU feature discovery labels the node (then nvidia.com/gpu.present is left to it)."""
    labels = labels_of(node)
    return any(label in labels for label in GFD_LABELS)


def wanted_labels(node, facts, proven_at=None):
    """{label: value or None} for NODE: the fact labels, nvidia.com/gpu.present=true unless GPU feature discovery
    manages the node, and the proof time when PROVEN_AT is given and the node has none or a fact label changes
    (so that a second run over an unchanged node changes nothing)."""
    wanted = fact_labels(facts)
    if not gfd_manages(node):
        wanted[GPU_PRESENT] = "true"
    if proven_at is not None:
        labels = labels_of(node)
        stale = any(labels.get(key) != value for key, value in wanted.items() if key in LABELS.values())
        if stale or PROVEN_AT not in labels:
            wanted[PROVEN_AT] = label_value(proven_at, "proof time")
    return wanted


def proof_time(now=None):
    """A proof time as a label value: ISO 8601 basic format in UTC (20261129T030129Z; ':' is not allowed)."""
    return time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(now))


def taints_of(node):
    return list((node.get("spec") or {}).get("taints") or [])


def unproven_reason(node):
    """The reason of the node's unproven taint, or None."""
    for taint in taints_of(node):
        if taint.get("key") == UNPROVEN_TAINT:
            return taint.get("value") or ""
    return None


def proven(node):
    """The node's proof time when an earlier run proved it and nothing tainted it since, else None."""
    if unproven_reason(node) is not None:
        return None
    return labels_of(node).get(PROVEN_AT)


def taint_patch(node, reason, unless_proven=False):
    """(patch or None, previous reason): the change that puts the unproven taint with REASON on NODE. The node's
    other taints stay as they are (the list is written whole, with the read resourceVersion). UNLESS_PROVEN: a
    node an earlier run proved is left as it is (a second run over an unchanged node changes nothing)."""
    if reason not in TAINT_REASONS:
        raise StageError("unknown reason %r for the %s taint (one of %s)" % (reason, UNPROVEN_TAINT,
                                                                             ", ".join(TAINT_REASONS)))
    previous = unproven_reason(node)
    if previous == reason or (unless_proven and proven(node)):
        return None, previous
    others = [taint for taint in taints_of(node) if taint.get("key") != UNPROVEN_TAINT]
    taint = {"key": UNPROVEN_TAINT, "value": reason, "effect": "NoSchedule"}
    return {"spec": {"taints": others + [taint]}}, previous


def untaint_patch(node):
    """(patch or None, previous reason): the change that removes the unproven taint; other taints stay."""
    previous = unproven_reason(node)
    if previous is None:
        return None, None
    return {"spec": {"taints": [taint for taint in taints_of(node) if taint.get("key") != UNPROVEN_TAINT]}}, previous


def _images(daemonset):
    spec = ((daemonset.get("spec") or {}).get("template") or {}).get("spec") or {}
    return [c.get("image") or "" for c in (spec.get("containers") or []) + (spec.get("initContainers") or [])]


def other_device_plugins(daemonsets, ours):
    """"namespace/name (why)" of each DaemonSet that is the GPU operator's or runs NVIDIA's device plugin and is
    not OURS ((namespace, name)): where one is there, the stage deploys no device plugin of its own."""
    found = []
    for daemonset in daemonsets:
        meta = daemonset.get("metadata") or {}
        key = (meta.get("namespace"), meta.get("name"))
        if key == tuple(ours):
            continue
        labels = meta.get("labels") or {}
        if labels.get(OPERATOR_LABEL) == "gpu-operator" or meta.get("name") == OPERATOR_VALIDATOR:
            found.append("%s/%s (the GPU operator)" % key)
        elif any(DEVICE_PLUGIN_IMAGE.search(image) for image in _images(daemonset)):
            found.append("%s/%s (runs %s)" % (key + (", ".join(sorted(set(_images(daemonset)))),)))
    return found
