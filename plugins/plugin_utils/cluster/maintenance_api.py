# -*- coding: utf-8 -*-
# Copyright: gpunode.nvidia contributors
# Apache License 2.0
"""Node maintenance through the Kubernetes API (controller side): cordon, wait for jobs, evict GPU pods, drain,
pause and resume the GPU operator's operands, validate, uncordon; and the labels other roles put on a node
(the driver role's Secure Boot enrollment state).

One implementation for every caller (rolling upgrades, partitioning). The decisions are in maintenance_plan.py;
the `NodeMaintenance` class does the reads and writes. Every write carries the node's resourceVersion: a
concurrent writer makes it a 409 Conflict, and the step reads the node again and decides again.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import time

from ansible_collections.gpunode.nvidia.plugins.plugin_utils.cluster import client
from ansible_collections.gpunode.nvidia.plugins.plugin_utils.cluster import verify as cv
from ansible_collections.gpunode.nvidia.plugins.plugin_utils.cluster.client import ApiException, TransportError
from ansible_collections.gpunode.nvidia.plugins.plugin_utils.cluster.maintenance_plan import (
    INITIAL_STATE_ANNOTATION, OPERAND_LABEL_PREFIX, OPERAND_PODS, MaintenanceError, NodeNotFound, blocking_budget_name,
    budget_for, cordon_patch, is_finished, label_patch, labels_of, operands_not_running, pause_patch, pod_key,
    pods_to_move, resume_patch, uncordon_patch, validation_gaps)

CONFLICT_RETRIES = 5


class NodeMaintenance:
    """The steps for one node. Each returns a result dict (changed, msg, and the step's own keys)."""

    def __init__(self, kube, node, owner, timeout=300, retry_interval=5.0, check_mode=False,
                 sleep=time.sleep, clock=time.monotonic):
        self.kube = kube
        self.core = kube.core
        self.policy = kube.policy
        self.node = node
        self.owner = owner
        self.timeout = timeout
        self.retry_interval = retry_interval
        self.check_mode = check_mode
        self.sleep = sleep
        self.clock = clock

    # reads
    def read_node(self):
        try:
            return self.kube.to_json(self.core.read_node(self.node))
        except ApiException as exc:
            if exc.status == 404:
                raise NodeNotFound("node %s is not in the cluster: give the Kubernetes node name (kubectl get "
                                   "nodes), e.g. through gpu_maintenance_node_name" % self.node)
            raise

    def pods_on_node(self, label_selector=None):
        listed = self.core.list_pod_for_all_namespaces(field_selector="spec.nodeName=%s" % self.node,
                                                       label_selector=label_selector or None)
        return [self.kube.to_json(pod) for pod in listed.items]

    def state_note(self):
        """How a failed step leaves the node, as read now (a message claims no cordon that is not there)."""
        try:
            cordoned = bool(self.read_node().get("spec", {}).get("unschedulable"))
        except (ApiException, MaintenanceError, TransportError):
            return "the node's state could not be read again"
        return "the node stays cordoned" if cordoned else "the node is not cordoned"

    def budgets(self):
        return [self.kube.to_json(b) for b in self.policy.list_pod_disruption_budget_for_all_namespaces().items]

    # writes
    def _update_node(self, decide):
        """Read, decide a patch, write it with the read resourceVersion; on a 409 Conflict read and decide again."""
        try:
            outcome, changed = client.patch_with_version(
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
        body = client.k8s.V1Eviction(metadata=client.k8s.V1ObjectMeta(name=meta["name"], namespace=meta["namespace"]))
        try:
            self.core.create_namespaced_pod_eviction(meta["name"], meta["namespace"], body)
        except ApiException as exc:
            if exc.status == 404:
                return None
            if exc.status == 429:
                return blocking_budget_name(exc.body, pod, self.budgets())
            raise MaintenanceError("cannot evict pod %s from node %s: %s" % (pod_key(pod), self.node,
                                                                             client.api_message(exc)))
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
