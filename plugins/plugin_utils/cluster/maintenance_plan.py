# -*- coding: utf-8 -*-
# Copyright: gpunode.nvidia contributors
# Apache License 2.0
"""Node maintenance, the decisions (controller side, no I/O): what cordons, uncordons, pauses and resumes a node,
which pods a step moves, which budget holds a pod, what keeps a node from GPU work. maintenance_api.py does the
reads and writes.

What a step must remember is kept on the Node object, never in the play, so a killed run resumes from the node:

  nvidia.com/gpu-driver-upgrade.node-initial-state.unschedulable  "true" when the node was already cordoned by
                                                                  someone else (the GPU operator's own name)
  gpunode.nvidia/maintenance-owner                                who cordoned it (upgrade, partitioning, ...)
  gpunode.nvidia/paused-operands                                  the nvidia.com/gpu.deploy.* labels set to "false"

Every function works on plain dicts (the API's JSON), so it is tested without a cluster.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import re

STEPS = ("cordon", "wait_for_jobs", "evict_gpu_pods", "drain", "pause_gpu_operands", "resume_gpu_operands",
         "validate", "uncordon", "label")
INITIAL_STATE_ANNOTATION = "nvidia.com/gpu-driver-upgrade.node-initial-state.unschedulable"
OWNER_ANNOTATION = "gpunode.nvidia/maintenance-owner"
PAUSED_ANNOTATION = "gpunode.nvidia/paused-operands"
OPERAND_LABEL_PREFIX = "nvidia.com/gpu.deploy."
# The operator's GPU clients, paused while the driver or the partitioning changes; the `app` label of their pods.
# driver and container-toolkit are not among them: they are the operator's own install of what the host provides.
OPERAND_PODS = {
    "device-plugin": "nvidia-device-plugin-daemonset", "gpu-feature-discovery": "gpu-feature-discovery",
    "dcgm": "nvidia-dcgm", "dcgm-exporter": "nvidia-dcgm-exporter", "mig-manager": "nvidia-mig-manager",
    "node-status-exporter": "nvidia-node-status-exporter", "operator-validator": "nvidia-operator-validator",
}
GPU_RESOURCE_PREFIXES = ("nvidia.com/gpu", "nvidia.com/mig-")
MIRROR_ANNOTATION = "kubernetes.io/config.mirror"
UNSCHEDULABLE_TOLERATION = {"key": "node.kubernetes.io/unschedulable", "operator": "Exists", "effect": "NoSchedule"}
BUDGET_CAUSE = re.compile(r"The disruption budget (\S+) ")


class MaintenanceError(Exception):
    """A step could not finish; the message says what, why and what to do."""


class NodeNotFound(MaintenanceError):
    """The Kubernetes API has no node of that name."""


def annotations_of(node):
    return node.get("metadata", {}).get("annotations") or {}


def labels_of(obj):
    return obj.get("metadata", {}).get("labels") or {}


def cordon_patch(node, owner):
    """(patch or None, was_unschedulable): the change that cordons NODE for OWNER, remembering a prior cordon."""
    annotations = annotations_of(node)
    holder = annotations.get(OWNER_ANNOTATION)
    if holder and holder != owner:
        raise MaintenanceError(
            "node %s is in maintenance by %s (annotation %s); finish or leave that maintenance first"
            % (node["metadata"]["name"], holder, OWNER_ANNOTATION))
    was_unschedulable = annotations.get(INITIAL_STATE_ANNOTATION) == "true"
    if holder == owner:
        return None, was_unschedulable
    if node.get("spec", {}).get("unschedulable"):
        return {"metadata": {"annotations": {INITIAL_STATE_ANNOTATION: "true", OWNER_ANNOTATION: owner}}}, True
    return {"metadata": {"annotations": {OWNER_ANNOTATION: owner}}, "spec": {"unschedulable": True}}, False


def uncordon_patch(node, owner):
    """(patch or None, what): undo our cordon; a node cordoned before us, or by someone else, stays cordoned."""
    annotations = annotations_of(node)
    holder = annotations.get(OWNER_ANNOTATION)
    if holder and holder != owner:
        raise MaintenanceError(
            "node %s is in maintenance by %s, not %s (annotation %s); leave it from that maintenance"
            % (node["metadata"]["name"], holder, owner, OWNER_ANNOTATION))
    ours = {INITIAL_STATE_ANNOTATION: None, OWNER_ANNOTATION: None}
    if annotations.get(INITIAL_STATE_ANNOTATION) == "true":
        return {"metadata": {"annotations": ours}}, "left cordoned: it was unschedulable before the maintenance"
    if holder:
        return {"metadata": {"annotations": ours}, "spec": {"unschedulable": None}}, "uncordoned"
    if node.get("spec", {}).get("unschedulable"):
        return None, "left cordoned: this maintenance did not cordon it"
    return None, "schedulable"


def operands_to_pause(node):
    """Operand names whose deploy label is "true" now, plus those this maintenance already paused."""
    labels = labels_of(node)
    paused = paused_operands(node)
    running = [name for name in OPERAND_PODS if labels.get(OPERAND_LABEL_PREFIX + name) == "true"]
    return sorted(set(running) | set(paused))


def paused_operands(node):
    text = annotations_of(node).get(PAUSED_ANNOTATION) or ""
    return sorted(name for name in text.split(",") if name)


def pause_patch(node):
    operands = operands_to_pause(node)
    labels = labels_of(node)
    if not [name for name in operands if labels.get(OPERAND_LABEL_PREFIX + name) != "false"] and (
            paused_operands(node) == operands):
        return None, operands
    return {"metadata": {"labels": dict((OPERAND_LABEL_PREFIX + name, "false") for name in operands),
                         "annotations": {PAUSED_ANNOTATION: ",".join(operands) or None}}}, operands


def resume_patch(node):
    operands = paused_operands(node)
    if not operands:
        return None, []
    return {"metadata": {"labels": dict((OPERAND_LABEL_PREFIX + name, "true") for name in operands),
                         "annotations": {PAUSED_ANNOTATION: None}}}, operands


def label_patch(node, wanted):
    """(patch or None, changed names): set each label of WANTED to its value, remove those whose value is None."""
    labels = labels_of(node)
    changes = dict((key, value) for key, value in wanted.items()
                   if labels.get(key) != value and (value is not None or key in labels))
    return ({"metadata": {"labels": changes}} if changes else None), sorted(changes)


def _resources(container):
    resources = container.get("resources") or {}
    return list((resources.get("limits") or {}).keys()) + list((resources.get("requests") or {}).keys())


def uses_gpu(pod):
    """The pod holds an NVIDIA GPU: a nvidia.com/gpu or MIG resource in any container, or a DRA resource claim."""
    spec = pod.get("spec") or {}
    if spec.get("resourceClaims"):
        return True
    containers = (spec.get("containers") or []) + (spec.get("initContainers") or [])
    return any(name.startswith(GPU_RESOURCE_PREFIXES) for c in containers for name in _resources(c))


def is_daemonset_pod(pod):
    return any(ref.get("kind") == "DaemonSet" for ref in pod.get("metadata", {}).get("ownerReferences") or [])


def is_mirror_pod(pod):
    return MIRROR_ANNOTATION in (pod.get("metadata", {}).get("annotations") or {})


def is_finished(pod):
    return (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")


def pods_to_move(pods, drain):
    """The pods a step must evict: GPU pods, or with DRAIN every pod a drain moves (no DaemonSet, no mirror pod)."""
    chosen = []
    for pod in pods:
        if is_finished(pod) or is_daemonset_pod(pod) or is_mirror_pod(pod):
            continue
        if drain or uses_gpu(pod):
            chosen.append(pod)
    return chosen


def pod_key(pod):
    return "%s/%s" % (pod["metadata"].get("namespace"), pod["metadata"]["name"])


def is_running(pod):
    """Running with every container ready (a pod without container statuses yet counts by its phase)."""
    status = pod.get("status") or {}
    return status.get("phase") == "Running" and all(c.get("ready") for c in status.get("containerStatuses") or [])


def _waiting_reason(pod):
    status = pod.get("status") or {}
    reasons = [c["state"]["waiting"].get("reason") for c in status.get("containerStatuses") or []
               if (c.get("state") or {}).get("waiting")]
    return ", ".join([status.get("phase") or "Unknown"] + [r for r in reasons if r])


def operands_not_running(pods, operands):
    """'nvidia-device-plugin-daemonset (Pending, ContainerCreating)' or '(no pod)' for each operand not running yet."""
    gaps = []
    for name in operands:
        app = OPERAND_PODS[name]
        mine = [pod for pod in pods if labels_of(pod).get("app") == app]
        if not any(is_running(pod) for pod in mine):
            gaps.append("%s (%s)" % (app, "; ".join(_waiting_reason(pod) for pod in mine) or "no pod"))
    return gaps


def selector_matches(selector, labels):
    """A LabelSelector (matchLabels, matchExpressions) against LABELS; an empty selector matches every pod."""
    selector = selector or {}
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    for expression in selector.get("matchExpressions") or []:
        key, operator, values = expression["key"], expression["operator"], expression.get("values") or []
        present = key in labels
        if (operator == "In" and labels.get(key) not in values) or (operator == "NotIn" and labels.get(key) in values) \
                or (operator == "Exists" and not present) or (operator == "DoesNotExist" and present):
            return False
    return True


def budget_for(pod, budgets):
    """The PodDisruptionBudget covering POD (same namespace, selector matches), or None."""
    for budget in budgets:
        meta = budget["metadata"]
        if meta.get("namespace") == pod["metadata"].get("namespace") and selector_matches(
                budget.get("spec", {}).get("selector"), labels_of(pod)):
            return budget
    return None


def blocking_budget_name(exc_body, pod, budgets):
    """Name the budget that refused an eviction: the API's cause, else the budget whose selector matches."""
    try:
        for cause in json.loads(exc_body).get("details", {}).get("causes") or []:
            found = BUDGET_CAUSE.search(cause.get("message") or "")
            if found:
                return "%s/%s" % (pod["metadata"].get("namespace"), found.group(1))
    except (TypeError, ValueError, AttributeError):
        pass
    budget = budget_for(pod, budgets)
    return "%s/%s" % (budget["metadata"]["namespace"], budget["metadata"]["name"]) if budget else "a PodDisruptionBudget"


def ready_condition(node):
    for condition in (node.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "Ready":
            return condition
    return {"status": "Unknown", "reason": "NoReadyCondition", "message": "the node reports no Ready condition"}


def quantity(text):
    """An extended resource count ("8", "0"); anything unparsable counts as 0."""
    try:
        return int(str(text))
    except ValueError:
        return 0


def validation_gaps(node, expected):
    """What keeps NODE from being ready for GPU work: NotReady, and each resource below its expected count."""
    gaps = []
    ready = ready_condition(node)
    if ready.get("status") != "True":
        gaps.append("Ready=%s (%s: %s)" % (ready.get("status"), ready.get("reason"), ready.get("message")))
    allocatable = (node.get("status") or {}).get("allocatable") or {}
    for resource, count in sorted(expected.items()):
        have = quantity(allocatable.get(resource, 0))
        if have < int(count):
            gaps.append("%s allocatable %d, expected at least %s" % (resource, have, count))
    return gaps
