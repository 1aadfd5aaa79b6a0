# -*- coding: utf-8 -*-
# Copyright: gpunode.nvidia contributors
# Apache License 2.0
"""The rolling upgrade's reads and writes in the Kubernetes API (controller side, official client).

The decisions are in upgrade_rollout.py; this module only moves objects: GPU nodes, the state label, the
slot Lease (written with its resourceVersion: a 409 Conflict means another controller wrote first, and the
caller decides again on what is now there), and the pods and PodDisruptionBudgets check mode reports.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import random
import socket
import time

from ansible_collections.gpunode.nvidia.plugins.plugin_utils.cluster import client
from ansible_collections.gpunode.nvidia.plugins.plugin_utils.cluster import upgrade_rollout as ro

# The options gpu_upgrade_slot and gpu_upgrade_state share: the cluster, the node, and the slot Lease.
UPGRADE_OPTIONS = client.kube_options(
    node=dict(type="str", required=True),
    lease_namespace=dict(type="str", default="kube-system"),
    lease_name=dict(type="str", default="gpunode-upgrade"),
)
GPU_RESOURCE_PREFIX = "nvidia.com/"
CONFLICT_PATIENCE = 120  # seconds a state label write retries lost resourceVersion races
# A waiting node's pause between looks grows by this factor after each refusal, up to BACKOFF_CAP times the
# poll interval: a long wait costs few requests, a short one is still noticed within a poll or so.
BACKOFF_GROWTH = 1.5
BACKOFF_CAP = 4
# A waiting node lists the GPU nodes again at least every this many looks, even while the Lease alone refuses
# it: a node that became available again elsewhere (uncordoned, Ready) is noticed.
RELIST_LOOKS = 10


class Conflict(Exception):
    """Another writer changed the object since it was read (409)."""


def connect_task(args):
    """UpgradeApi for the task's UPGRADE_OPTIONS, or the task fails saying why."""
    kube = client.connect_task(args, "to run the rolling upgrade")
    return UpgradeApi(kube, args["lease_namespace"] or "kube-system", args["lease_name"] or "gpunode-upgrade")


def unreachable(args, exc):
    return "node %s: %s" % (args["node"], client.unreachable(
        args["kubeconfig"], exc, "nothing more was changed", "run the upgrade again: each node resumes at its label"))


def controller_identity():
    """host/pid/start-time of the ansible-playbook process this action runs under (its workers' parent)."""
    pid = os.getppid()
    return "%s/%d/%s" % (socket.gethostname(), pid, _start_time(pid) or "?")


def contention_pause(lost):
    """After the LOST-th lost race in a row on the Lease: a random pause, its bound doubling from 50 ms up to a second.
    Writers that lost together would collide again at once; spread out, most find the table settled."""
    time.sleep(random.uniform(0, min(1.0, 0.05 * 2 ** (lost - 1))))


def holder_alive(holder):
    """True or False when the holder ran on this machine (its process is still the same one), else None."""
    try:
        host, pid, started = str(holder).split("/")
        pid = int(pid)
    except ValueError:
        return None
    if host != socket.gethostname() or started == "?":
        return None
    return _start_time(pid) == started


def _start_time(pid):
    try:
        with open("/proc/%d/stat" % pid) as stat:
            return stat.read().rsplit(")", 1)[1].split()[19]
    except (IOError, OSError, IndexError):
        return None


class UpgradeApi(object):
    def __init__(self, kube, lease_namespace="kube-system", lease_name="gpunode-upgrade"):
        self.kube = kube
        self.core = kube.core
        self.coordination = kube.coordination
        self.policy = kube.policy
        self.lease_namespace = lease_namespace
        self.lease_name = lease_name

    # --- nodes ---

    def node(self, name):
        try:
            return client.answer(self.core.read_node, name)
        except client.ApiException as exc:
            if exc.status == 404:
                raise ro.RolloutError("node %s does not exist in the cluster (kubectl get node %s): give the Node "
                                      "name with gpunode_node_name when it differs from the inventory name"
                                      % (name, name))
            raise ro.RolloutError("cannot read node %s: %s" % (name, client.api_message(exc)))

    def gpu_nodes(self, selector):
        """node_view()s of the GPU nodes: the selector's label or nvidia.com/gpu capacity (one list of all nodes:
        a cluster without GPU feature discovery has no label to select by)."""
        try:
            nodes = client.answer(self.core.list_node)["items"]
        except client.ApiException as exc:
            raise ro.RolloutError("cannot list the nodes to find the GPU nodes: %s" % client.api_message(exc))
        return ro.gpu_views([ro.node_view(node) for node in nodes], selector)

    def move_state(self, name, state, dry_run=False, target=None):
        """(previous state, changed): the node's state label moved to STATE where the state machine allows it.

        The check and the write are one: the usual step forward is a JSON patch that tests the label, anything
        else is written with the resourceVersion it was checked on, and a 409 Conflict checks again on what is
        there now. A task of a killed run that still finishes, or a second controller, cannot move a node back or
        undo a finished one between the check and the write.
        target: the versions the upgrade moves to; with upgrade-required it is recorded on the Node, and a node
        already done for it is refused (ro.Replan)."""
        previous, changed, _node = self._move(name, state, dry_run, target)
        return previous, changed

    def _move(self, name, state, dry_run=False, target=None, annotations=None):
        """move_state(), with ANNOTATIONS written beside the label; (previous, changed, the node as it is now)."""
        seen = {}

        def decide(node):
            seen["node"] = node
            view = ro.node_view(node)
            current = view["state"]
            ro.check_transition(current, state, target is not None and ro.done_for(view, target))
            if current == state:
                return None, current
            patch = {"metadata": {"labels": {ro.STATE_LABEL: state}}}
            node_annotations = dict(annotations or {})
            if state == ro.REQUIRED and target is not None:
                node_annotations[ro.TARGET_ANNOTATION] = ro.target_key(target)
            if node_annotations:
                patch["metadata"]["annotations"] = node_annotations
            return patch, current

        def write(patch):
            seen["node"] = client.answer(self.core.patch_node, name, patch)

        written = None if dry_run or annotations else self._move_from_expected(name, state)
        if written is not None:
            return ro.expected_previous(state), True, written
        deadline = time.monotonic() + CONFLICT_PATIENCE
        try:
            previous, changed = client.patch_with_version(
                lambda: self.node(name), decide, write, dry_run,
                retry_conflict=lambda conflicts: time.monotonic() < deadline)
        except client.ApiException as exc:
            raise ro.RolloutError("cannot label node %s %s=%s: %s" % (name, ro.STATE_LABEL, state, client.api_message(exc)))
        return previous, changed, seen["node"]

    def _move_from_expected(self, name, state):
        """One request for the usual step forward: a JSON patch that tests the label is the expected previous state
        and replaces it, as one write (the test is the state machine's check: from that state the move is allowed).
        The node as written, or None when it is elsewhere (a resumed run, a step left out, another controller):
        then it is read and decided on."""
        previous = ro.expected_previous(state)
        if previous is None:
            return None
        path = "/metadata/labels/" + ro.STATE_LABEL.replace("~", "~0").replace("/", "~1")
        try:
            return client.answer(self.core.patch_node, name, [
                {"op": "test", "path": path, "value": previous}, {"op": "replace", "path": path, "value": state}])
        except client.ApiException as exc:
            if exc.status in (400, 404, 409, 422):  # the test failed (422); the read path explains the rest
                return None
            raise ro.RolloutError("cannot label node %s %s=%s: %s" % (name, ro.STATE_LABEL, state, client.api_message(exc)))

    # --- the slot Lease ---

    def read_slots(self):
        """(slots, lease body or None): the Lease's slot table, {} when the Lease does not exist yet."""
        try:
            body = client.answer(self.coordination.read_namespaced_lease, self.lease_name, self.lease_namespace)
        except client.ApiException as exc:
            if exc.status == 404:
                return {}, None
            raise ro.RolloutError("cannot read Lease %s/%s: %s" % (self.lease_namespace, self.lease_name,
                                                                   client.api_message(exc)))
        return ro.parse_slots((body.get("metadata") or {}).get("annotations")), body

    @staticmethod
    def paused(lease):
        """The pause annotation's value on the Lease (None: not paused)."""
        return (((lease or {}).get("metadata") or {}).get("annotations") or {}).get(ro.PAUSE_ANNOTATION)

    def write_slots(self, slots, lease):
        """Write the table; Conflict when the Lease changed (or was created) since `lease` was read."""
        annotations = {ro.SLOTS_ANNOTATION: ro.dump_slots(slots)}
        spec = {"holderIdentity": "gpunode.nvidia upgrade", "renewTime": _micro_time()}
        try:
            if lease is None:
                client.answer(self.coordination.create_namespaced_lease, self.lease_namespace, {
                    "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                    "metadata": {"name": self.lease_name, "annotations": annotations}, "spec": spec})
                return
            body = dict(lease)
            merged = dict(lease["metadata"].get("annotations") or {}, **annotations)
            body["metadata"] = dict(lease["metadata"], annotations=merged)
            body["spec"] = dict(lease.get("spec") or {}, **spec)
            client.answer(self.coordination.replace_namespaced_lease, self.lease_name, self.lease_namespace, body)
        except client.ApiException as exc:
            if exc.status == 409:
                raise Conflict(client.api_message(exc))
            raise ro.RolloutError("cannot write Lease %s/%s: %s" % (self.lease_namespace, self.lease_name,
                                                                    client.api_message(exc)))

    def update_slots(self, change):
        """Apply change(slots) -> new table or None, re-reading and re-applying on each conflict until it is written;
        returns the table written or None.

        Many nodes share one Lease. A conflict means another writer's change went in, so the writers as a whole
        always progress: a release or renewal is retried until done, never given up (a finished node whose release
        gave up would have been marked failed, and its slot held until the ttl)."""
        attempt = 0
        while True:
            slots, lease = self.read_slots()
            table = change(slots)
            if table is None:
                return None
            try:
                self.write_slots(table, lease)
                return table
            except Conflict:
                attempt += 1
                contention_pause(attempt)

    def release_slot(self, node, holder):
        """Give this controller's slot of the node back; False when it held none."""
        return self.update_slots(lambda slots: ro.release(node, slots, holder)) is not None

    def set_state(self, node, state, holder, target=None):
        """move_state(), and the node's slot renewed when due (ro.renewal_due). The start (upgrade-required) records
        on the node when the slot was taken and its ttl, read from the Lease; each later step tells from the node it
        has just written whether the Lease needs a renewal, so most steps are one request."""
        stamp = None
        if state == ro.REQUIRED:
            slots, _lease = self.read_slots()
            stamp = ro.slot_stamp(slots.get(node) if (slots.get(node) or {}).get("holder") == holder else None)
        current, changed, written = self._move(
            node, state, target=target, annotations={ro.SLOT_RENEWED_ANNOTATION: stamp} if stamp else None)
        now = time.time()
        if changed and not stamp and ro.renewal_due((written.get("metadata") or {}).get("annotations"), now):
            table = self.update_slots(lambda slots: ro.renew(node, slots, holder, now))
            stamp = ro.slot_stamp((table or {}).get(node))
            if stamp:
                self._annotate(node, {ro.SLOT_RENEWED_ANNOTATION: stamp})
        return current, changed

    def _annotate(self, name, annotations):
        try:
            client.answer(self.core.patch_node, name, {"metadata": {"annotations": annotations}})
        except client.ApiException as exc:
            raise ro.RolloutError("cannot annotate node %s: %s" % (name, client.api_message(exc)))

    # --- taking a slot ---

    def slot_attempt(self, request, known=None, write=True):
        """(outcome, known): one decision on the Lease as it is now, written when granted (and `write`).

        request: {node, holder, max_parallel, max_unavailable, selector, ttl}. known: what an earlier attempt
        listed (the GPU nodes, and the slots held then). The GPU nodes are listed (then the Lease read again) only
        when they may have changed in a way that matters: the Lease alone (max_parallel, the slots' own count, the
        pause, another controller's slot) does not refuse the node, and the slots held differ from those of the
        listing (a node finished, and was uncordoned before it gave its slot back). So a waiting node's look is one
        Lease read, and no slot is written on the strength of an old list. A lost race (409) reads the Lease again
        and decides again, on the same list, on what the other controller wrote."""
        if known is not None:
            slots, lease = self.read_slots()
            outcome = self._slot_decision(request, known["views"], slots, lease)
            if not outcome["granted"] and (self._refused_by_lease(request, len(known["views"]), slots, lease)
                                           or self._holders(request, slots) == known["holders"]):
                return outcome, known
        # The nodes first, then the Lease the write is decided on: listing takes long, and a Lease read before it
        # would be stale by then (a lost race, almost surely, when many nodes start together).
        views = self.gpu_nodes(request["selector"])
        slots, lease = self.read_slots()
        known = {"views": views, "holders": self._holders(request, slots)}
        lost = 0
        while True:
            outcome = self._slot_decision(request, known["views"], slots, lease)
            if not outcome["granted"] or not write:
                return dict(outcome, slots=None), known
            try:
                self.write_slots(outcome["slots"], lease)
                return dict(outcome, slots=None), known
            except Conflict:
                lost += 1
                contention_pause(lost)
                slots, lease = self.read_slots()

    def _slot_decision(self, request, views, slots, lease, gpu_count=None):
        limit = ro.max_unavailable_count(request["max_unavailable"], len(views) if gpu_count is None else gpu_count)
        now = time.time()
        paused = self.paused(lease)
        outcome = ro.acquire(request["node"], views, slots, request["holder"], request["max_parallel"], limit, now,
                             request["ttl"], holder_alive, paused=paused)
        live = ro.live_slots(slots, now, request["ttl"], holder_alive)
        return dict(outcome, max_unavailable=limit,
                    gpu_nodes=ro.how_found(views, request["selector"]) if views else "",
                    budget=ro.slot_budget(views, live, request["max_parallel"], limit), paused=paused)

    def _refused_by_lease(self, request, gpu_count, slots, lease):
        """The Lease alone refuses the node: no list of the nodes could grant it."""
        return not self._slot_decision(request, [], slots, lease, gpu_count)["granted"]

    @staticmethod
    def _holders(request, slots):
        return frozenset(ro.live_slots(slots, time.time(), request["ttl"], holder_alive))

    def wait_for_slot(self, request, timeout, poll_interval, sleep=time.sleep, clock=time.monotonic):
        """(outcome, seconds waited): slot attempts until the node is granted, halted or held elsewhere, or
        `timeout` passes. Between looks a pause that grows from poll_interval to BACKOFF_CAP times it, each with
        its own jitter (waiting controllers that looked together would look together again)."""
        started = clock()
        known = None
        looks = 0
        while True:
            outcome, known = self.slot_attempt(request, None if looks % RELIST_LOOKS == 0 else known)
            waited = clock() - started
            if outcome["granted"] or outcome["halted"] or outcome["held_elsewhere"] or waited >= timeout:
                return outcome, waited
            looks += 1
            sleep(poll_interval * min(BACKOFF_GROWTH ** looks, BACKOFF_CAP) * random.uniform(0.75, 1.25))

    # --- what check mode reports ---

    def pdb_waits(self, node):
        """{namespace/pod: namespace/pdb} for the GPU pods on the node whose budget allows no disruption now."""
        try:
            pods = self.core.list_pod_for_all_namespaces(field_selector="spec.nodeName=%s" % node).items
        except client.ApiException as exc:
            raise ro.RolloutError("cannot list the pods of node %s: %s" % (node, client.api_message(exc)))
        waits = {}
        budgets = {}
        for pod in (self.kube.to_json(p) for p in pods):
            if not uses_gpu(pod):
                continue
            namespace = pod["metadata"].get("namespace", "default")
            if namespace not in budgets:
                budgets[namespace] = self._budgets(namespace)
            for pdb in budgets[namespace]:
                if _selects(pdb, pod) and (pdb.get("status") or {}).get("disruptionsAllowed", 0) < 1:
                    waits["%s/%s" % (namespace, pod["metadata"]["name"])] = "%s/%s" % (namespace, pdb["metadata"]["name"])
        return waits

    def _budgets(self, namespace):
        try:
            return [self.kube.to_json(b) for b in
                    self.policy.list_namespaced_pod_disruption_budget(namespace).items]
        except client.ApiException as exc:
            raise ro.RolloutError("cannot list the PodDisruptionBudgets of namespace %s: %s"
                                  % (namespace, client.api_message(exc)))


def uses_gpu(pod):
    """A pod that requests an nvidia.com/* resource or holds a DRA resource claim."""
    spec = pod.get("spec") or {}
    if spec.get("resourceClaims"):
        return True
    for container in (spec.get("containers") or []) + (spec.get("initContainers") or []):
        resources = container.get("resources") or {}
        for amounts in (resources.get("limits") or {}, resources.get("requests") or {}):
            if any(name.startswith(GPU_RESOURCE_PREFIX) for name in amounts):
                return True
    return False


def _selects(pdb, pod):
    selector = (pdb.get("spec") or {}).get("selector") or {}
    labels = pod["metadata"].get("labels") or {}
    if not selector:
        return False
    if any(labels.get(key) != value for key, value in (selector.get("matchLabels") or {}).items()):
        return False
    for expression in selector.get("matchExpressions") or []:
        present = expression["key"] in labels
        value = labels.get(expression["key"])
        operator = expression["operator"]
        if ((operator == "In" and value not in expression.get("values", [])) or
                (operator == "NotIn" and value in expression.get("values", [])) or
                (operator == "Exists" and not present) or (operator == "DoesNotExist" and present)):
            return False
    return True


def _micro_time():
    return time.strftime("%Y-%m-%dT%H:%M:%S.000000Z", time.gmtime())
