# -*- coding: utf-8 -*-
# Copyright: gpunode.nvidia contributors
# Apache License 2.0
"""Node maintenance through the Kubernetes API (controller side): cordon, wait for jobs, evict GPU pods, drain,
pause and resume the GPU operator's operands, validate, uncordon; and the labels other roles put on a node
(the driver role's Secure Boot enrollment state).

One implementation for every caller (rolling upgrades, partitioning). What a step must remember is kept on the
Node object, never in the play, so a killed run resumes from the node:

  nvidia.com/gpu-driver-upgrade.node-initial-state.unschedulable  "true" when the node was already cordoned by
                                                                  someone else (the GPU operator's own name)
  gpunode.nvidia/maintenance-owner                                who cordoned it (upgrade, partitioning, ...)
  gpunode.nvidia/paused-operands                                  the nvidia.com/gpu.deploy.* labels set to "false"

The decision functions work on plain dicts (the API's JSON) so they are tested without a cluster; the
`NodeMaintenance` class does the reads and writes. Every write carries the node's resourceVersion: a concurrent
writer makes it a 409 Conflict, and the step reads the node again and decides again.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import re
import time

from ansible_collections.gpunode.nvidia.plugins.plugin_utils.cluster import verify as cv

ApiException = cv.ApiException
try:
    from urllib3.exceptions import HTTPError as TransportError  # the kubernetes client's transport
except ImportError:  # without the kubernetes client the action stops before any request
    class TransportError(Exception):
        """Never raised: keeps the except clauses valid without urllib3."""

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
CONFLICT_RETRIES = 5


class MaintenanceError(Exception):
    """A step could not finish; the message says what, why and what to do."""


class NodeNotFound(MaintenanceError):
    """The Kubernetes API has no node of that name."""


# --- decisions on plain objects ------------------------------------------------------------------------------

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


# --- the API side ----------------------------------------------------------------------------------------------

class NodeMaintenance:
    """The steps for one node. Each returns a result dict (changed, msg, and the step's own keys)."""

    def __init__(self, api_client, node, owner, timeout=300, retry_interval=5.0, check_mode=False,
                 sleep=time.sleep, clock=time.monotonic):
        self.api_client = api_client
        self.core = cv.k8s.CoreV1Api(api_client)
        self.policy = cv.k8s.PolicyV1Api(api_client)
        self.node = node
        self.owner = owner
        self.timeout = timeout
        self.retry_interval = retry_interval
        self.check_mode = check_mode
        self.sleep = sleep
        self.clock = clock

    # reads
    def _json(self, obj):
        return self.api_client.sanitize_for_serialization(obj)

    def read_node(self):
        try:
            return self._json(self.core.read_node(self.node))
        except ApiException as exc:
            if exc.status == 404:
                raise NodeNotFound("node %s is not in the cluster: give the Kubernetes node name (kubectl get "
                                   "nodes), e.g. through gpu_maintenance_node_name" % self.node)
            raise

    def pods_on_node(self, label_selector=None):
        listed = self.core.list_pod_for_all_namespaces(field_selector="spec.nodeName=%s" % self.node,
                                                       label_selector=label_selector or None)
        return [self._json(pod) for pod in listed.items]

    def state_note(self):
        """How a failed step leaves the node, as read now (a message claims no cordon that is not there)."""
        try:
            cordoned = bool(self.read_node().get("spec", {}).get("unschedulable"))
        except (ApiException, MaintenanceError, TransportError):
            return "the node's state could not be read again"
        return "the node stays cordoned" if cordoned else "the node is not cordoned"

    def budgets(self):
        return [self._json(b) for b in self.policy.list_pod_disruption_budget_for_all_namespaces().items]

    # writes
    def _update_node(self, decide):
        """Read, decide a patch, write it with the read resourceVersion; on a 409 Conflict read and decide again."""
        try:
            outcome, changed = cv.patch_with_version(
                self.read_node, decide, lambda patch: self.core.patch_node(self.node, patch), self.check_mode,
                retry_conflict=lambda conflicts: conflicts < CONFLICT_RETRIES)
        except ApiException as exc:
            if exc.status != 409:
                raise
            raise MaintenanceError("node %s changed under every one of %d attempts to update it (409 Conflict each "
                                   "time); another controller is writing it: try again" % (self.node, CONFLICT_RETRIES))
        return changed, outcome

    def _would(self, changed, text):
        return dict(changed=changed, would=text, msg="check mode: would " + text) if self.check_mode else {}

    # --- steps ---
    def cordon(self):
        changed, was_unschedulable = self._update_node(lambda node: cordon_patch(node, self.owner))
        if was_unschedulable:
            text = "leave node %s cordoned as it was (recorded in %s)" % (self.node, INITIAL_STATE_ANNOTATION)
        else:
            text = "cordon node %s" % self.node
        result = dict(changed=changed, was_unschedulable=was_unschedulable,
                      msg=("node %s was already unschedulable: recorded, left cordoned" % self.node
                           if was_unschedulable else "node %s cordoned" % self.node) if changed
                      else "node %s already cordoned for %s" % (self.node, self.owner))
        result.update(self._would(changed, text if changed else "change nothing"))
        return result

    def uncordon(self):
        changed, outcome = self._update_node(lambda node: uncordon_patch(node, self.owner))
        result = dict(changed=changed, msg="node %s %s" % (self.node, outcome), uncordoned=outcome == "uncordoned")
        result.update(self._would(changed, "%s node %s" % (outcome, self.node) if changed else "change nothing"))
        if self.check_mode:
            result["uncordoned"] = False
        return result

    def wait_for_jobs(self, selector):
        if not selector:
            return dict(changed=False, msg="no job selector: nothing to wait for", waited_for=[])
        deadline = self.clock() + self.timeout
        while True:
            running = [pod_key(p) for p in self.pods_on_node(selector) if not is_finished(p)]
            if not running or self.check_mode:
                break
            if self.clock() >= deadline:
                raise MaintenanceError(
                    "pods matching %r still run on node %s after %ss: %s. Wait for them to finish, stop them, or "
                    "raise the timeout; %s" % (selector, self.node, self.timeout, ", ".join(running),
                                               self.state_note()))
            self.sleep(self.retry_interval)
        result = dict(changed=False, waited_for=running, msg="no pod matching %r runs on node %s" % (selector, self.node))
        if self.check_mode:
            result.update(would="wait for %s" % (", ".join(running) or "nothing"),
                          msg="check mode: would wait for %s" % (", ".join(running) or "nothing"))
        return result

    def evict(self, drain=False):
        """Evict through the Eviction API until no such pod is left; 429 (a budget) is retried until the timeout."""
        what = "pods" if drain else "GPU pods"
        if self.check_mode:
            return self._eviction_plan(drain, what)
        deadline = self.clock() + self.timeout
        evicted, waited_for = [], {}
        while True:
            moving = pods_to_move(self.pods_on_node(), drain)
            if not moving:
                break
            blocked_by = {}
            for pod in moving:
                if pod["metadata"].get("deletionTimestamp"):
                    continue  # evicted, terminating: wait for it to go
                refusal = self._evict_one(pod)
                if refusal is None and pod_key(pod) not in evicted:
                    evicted.append(pod_key(pod))
                elif refusal is not None:
                    blocked_by[pod_key(pod)] = refusal
            waited_for.update(blocked_by)
            if self.clock() >= deadline:
                raise MaintenanceError(self._eviction_timeout(moving, blocked_by))
            self.sleep(self.retry_interval)
        # blocked_by: the budgets that made the step wait before they allowed the eviction
        return dict(changed=bool(evicted), evicted=evicted, blocked_by=waited_for,
                    msg="evicted %d %s from node %s" % (len(evicted), what, self.node) if evicted
                    else "no %s on node %s" % (what, self.node))

    def _evict_one(self, pod):
        """None when the API took the eviction (or the pod is gone); else the name of the blocking budget."""
        meta = pod["metadata"]
        body = cv.k8s.V1Eviction(metadata=cv.k8s.V1ObjectMeta(name=meta["name"], namespace=meta["namespace"]))
        try:
            self.core.create_namespaced_pod_eviction(meta["name"], meta["namespace"], body)
        except ApiException as exc:
            if exc.status == 404:
                return None
            if exc.status == 429:
                return blocking_budget_name(exc.body, pod, self.budgets())
            raise MaintenanceError("cannot evict pod %s from node %s: %s" % (pod_key(pod), self.node,
                                                                             cv.api_message(exc)))
        return None

    def _eviction_timeout(self, moving, blocked_by):
        if blocked_by:
            return ("cannot evict %s from node %s within %ss: %s. Cannot evict pod as it would violate the pod's "
                    "disruption budget: free the budget (scale the workload up or relax the budget), move the pod "
                    "yourself, or raise the timeout; %s" % (
                        ", ".join(sorted(blocked_by)), self.node, self.timeout,
                        "; ".join("%s is held by PodDisruptionBudget %s" % item for item in sorted(blocked_by.items())),
                        self.state_note()))
        return ("evicted pods still terminating on node %s after %ss: %s; %s"
                % (self.node, self.timeout, ", ".join(pod_key(p) for p in moving), self.state_note()))

    def _eviction_plan(self, drain, what):
        budgets = self.budgets()
        moving = pods_to_move(self.pods_on_node(), drain)
        plan, waits = [], {}
        for pod in moving:
            budget = budget_for(pod, budgets)
            if budget and not (budget.get("status") or {}).get("disruptionsAllowed"):
                waits[pod_key(pod)] = "%s/%s" % (budget["metadata"]["namespace"], budget["metadata"]["name"])
                plan.append("%s (waits for PodDisruptionBudget %s, 0 disruptions allowed now)"
                            % (pod_key(pod), waits[pod_key(pod)]))
            else:
                plan.append(pod_key(pod))
        text = "evict %s from node %s: %s" % (what, self.node, ", ".join(plan)) if plan else "evict nothing"
        return dict(changed=bool(plan), evicted=[], would_evict=[pod_key(p) for p in moving], blocked_by=waits,
                    would=text, msg="check mode: would " + text)

    def pause_operands(self):
        changed, operands = self._update_node(pause_patch)
        if not self.check_mode:
            self._wait_operands_gone(operands)
        text = "set %s to false" % ", ".join(OPERAND_LABEL_PREFIX + o for o in operands)
        result = dict(changed=changed, operands=operands,
                      msg=("paused operands on node %s: %s" % (self.node, ", ".join(operands))) if operands
                      else "no GPU operator operand deployed on node %s" % self.node)
        result.update(self._would(changed, text if changed else "change nothing"))
        return result

    def _wait_operands(self, look, failure):
        """Poll the node's pods until look(pods) lists nothing left; after the timeout fail with `failure` % what is."""
        deadline = self.clock() + self.timeout
        while True:
            left = look(self.pods_on_node())
            if not left:
                return
            if self.clock() >= deadline:
                raise MaintenanceError("%s; %s" % (failure % ", ".join(left), self.state_note()))
            self.sleep(self.retry_interval)

    def _wait_operands_gone(self, operands):
        apps = [OPERAND_PODS[name] for name in operands]
        if apps:
            self._wait_operands(
                lambda pods: [pod_key(p) for p in pods if labels_of(p).get("app") in apps],
                "GPU operator pods still on node %s %ss after their %s labels were set to false: %%s. Check the "
                "operator's DaemonSets (app in (%s))" % (self.node, self.timeout, OPERAND_LABEL_PREFIX + "*",
                                                         ",".join(apps)))

    def resume_operands(self):
        changed, operands = self._update_node(resume_patch)
        if changed and not self.check_mode:
            # Validation must see the device plugin back: wait until the operator's DaemonSets run them again.
            self._wait_operands(
                lambda pods: operands_not_running(pods, operands),
                "GPU operator pods not running on node %s %ss after their %s labels were set back to true: %%s. "
                "Look at the operator's DaemonSets and these pods' events (kubectl -n <operator namespace> describe "
                "pod)" % (self.node, self.timeout, OPERAND_LABEL_PREFIX + "*"))
        text = "set %s back to true" % ", ".join(OPERAND_LABEL_PREFIX + o for o in operands)
        result = dict(changed=changed, operands=operands,
                      msg="resumed operands on node %s: %s%s" % (self.node, ", ".join(operands),
                                                                 ", running again" if changed else "") if operands
                      else "no operand was paused on node %s" % self.node)
        result.update(self._would(changed, text if changed else "change nothing"))
        return result

    def label(self, wanted):
        """Set or remove node labels. A node not in the cluster (yet) is no error: a node prepared before it
        joins gets its labels from the first run after it has joined."""
        try:
            changed, names = self._update_node(lambda node: label_patch(node, wanted))
        except NodeNotFound:
            return dict(changed=False, labels=[], node_found=False,
                        msg="node %s is not in the cluster (kubectl get nodes): no label set or removed; a run "
                            "after it has joined does it" % self.node)
        text = "; ".join("set %s=%s" % (key, wanted[key]) if wanted[key] is not None else "remove %s" % key
                         for key in names)
        result = dict(changed=changed, labels=names, node_found=True,
                      msg="node %s: %s" % (self.node, text) if changed
                      else "node %s already has the labels asked for" % self.node)
        result.update(self._would(changed, "%s on node %s" % (text, self.node) if changed else "change nothing"))
        return result

    def validate(self, expected, verifier=None):
        """Node Ready and each expected allocatable restored (waiting up to the timeout); then the optional pod."""
        expected = expected or {cv.GPU_RESOURCE: 1}
        deadline = self.clock() + self.timeout
        while True:
            gaps = validation_gaps(self.read_node(), expected)
            if not gaps or self.check_mode:
                break
            if self.clock() >= deadline:
                raise MaintenanceError("node %s is not ready for GPU work %ss after maintenance: %s. Look at the "
                                       "device plugin's pod and the kubelet on the node; %s"
                                       % (self.node, self.timeout, "; ".join(gaps), self.state_note()))
            self.sleep(self.retry_interval)
        result = dict(changed=False, validated=not self.check_mode, pod=None,
                      msg="node %s is Ready with %s" % (self.node, ", ".join(
                          "%s >= %s" % item for item in sorted(expected.items()))))
        if self.check_mode:
            result.update(would="check node %s: %s" % (self.node, "; ".join(gaps) or "ready now"),
                          msg="check mode: nothing run")
            return result
        if verifier is not None:
            outcome = verifier.verify_node({"name": self.node})
            result["pod"] = outcome
            if not outcome["passed"]:
                raise MaintenanceError("the GPU pod on node %s did not pass: %s; %s" % (
                    self.node, outcome["message"] or outcome["result"], self.state_note()))
            result["msg"] += "; a GPU pod passed"
        return result
