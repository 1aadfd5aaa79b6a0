# -*- coding: utf-8 -*-
# Copyright: gpunode.nvidia contributors
# Apache License 2.0
"""The cluster stage through the Kubernetes API (controller side): the unproven taint, the node's labels, the
RuntimeClass and NVIDIA's device plugin. The decisions are in node_stage.py and device_plugin.py; node writes
go through NodeMaintenance's read-decide-write with the node's resourceVersion (a 409 Conflict decides again).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.gpunode.nvidia.plugins.plugin_utils.cluster import device_plugin as dp
from ansible_collections.gpunode.nvidia.plugins.plugin_utils.cluster import node_stage as ns
from ansible_collections.gpunode.nvidia.plugins.plugin_utils.cluster import verify as cv
from ansible_collections.gpunode.nvidia.plugins.plugin_utils.cluster.client import ApiException
from ansible_collections.gpunode.nvidia.plugins.plugin_utils.cluster.maintenance_api import NodeMaintenance
from ansible_collections.gpunode.nvidia.plugins.plugin_utils.cluster.maintenance_plan import (
    GPU_RESOURCE_PREFIXES, NodeNotFound, label_patch)

OWNER = "cluster-stage"


class ClusterStage(NodeMaintenance):
    """The cluster stage's steps for one node; each returns a result dict (changed, msg and its own keys)."""

    def __init__(self, kube, node, timeout=300, retry_interval=2.0, check_mode=False):
        super(ClusterStage, self).__init__(kube, node, OWNER, timeout=timeout, retry_interval=retry_interval,
                                           check_mode=check_mode)

    def _node_step(self, decide, describe):
        """Write the patch DECIDE makes; a node not in the cluster yet is no error (the next run does it)."""
        try:
            changed, outcome = self._update_node(decide)
        except NodeNotFound:
            return dict(changed=False, node_found=False, msg="node %s is not in the cluster (kubectl get nodes): "
                        "nothing done; a run after it has joined does it" % self.node)
        text = describe(outcome)
        result = dict(changed=changed, node_found=True, msg=text)
        result.update(self._would(changed, text if changed else "change nothing"))
        return result

    def taint(self, reason, unless_proven=False):
        node = {}

        def decide(read):
            node.update(read)
            return ns.taint_patch(read, reason, unless_proven)

        def describe(previous):
            if previous == reason:
                return "node %s already tainted %s=%s" % (self.node, ns.UNPROVEN_TAINT, reason)
            if unless_proven and ns.proven(node):
                return ("node %s was proven at %s and is not tainted: a run that changes its driver or runtime "
                        "proves it again" % (self.node, ns.proven(node)))
            was = " (was %s)" % previous if previous is not None else ""
            return "node %s tainted %s=%s:NoSchedule%s" % (self.node, ns.UNPROVEN_TAINT, reason, was)

        result = self._node_step(decide, describe)
        tainted = result["node_found"] and not (unless_proven and ns.proven(node))
        result["taint"] = "%s=%s:NoSchedule" % (ns.UNPROVEN_TAINT, reason) if tainted else None
        return result

    def untaint(self):
        result = self._node_step(ns.untaint_patch, lambda previous: (
            "node %s: taint %s=%s removed after its proof passed" % (self.node, ns.UNPROVEN_TAINT, previous)
            if previous is not None else "node %s has no %s taint" % (self.node, ns.UNPROVEN_TAINT)))
        result["taint"] = None
        return result

    def labels(self, facts, proven_at=None):
        managed = []

        def decide(node):
            managed[:] = [ns.gfd_manages(node)]
            return label_patch(node, ns.wanted_labels(node, facts, proven_at))

        result = self._node_step(decide, lambda names: "node %s: labels %s" % (
            self.node, ", ".join(names)) if names else "node %s already has its labels" % self.node)
        result["gfd_managed"] = managed[0] if managed else None
        return result

    def runtime_class(self, name, handler):
        state = cv.ClusterVerifier(self.kube, runtime_class=name, handler=handler).ensure_runtime_class(
            self.check_mode)
        changed = state in ("created", "would-create")
        text = "RuntimeClass %s (handler %s) %s" % (name, handler, "present" if not changed else "created")
        result = dict(changed=changed, runtime_class_state=state, msg=text)
        result.update(self._would(changed, "create RuntimeClass %s (handler %s)" % (name, handler)
                                  if changed else "change nothing"))
        return result

    # --- the device plugin ---
    def device_plugin(self, objects, wait=True):
        """Apply OBJECTS (device_plugin.objects) unless the GPU operator or another device plugin is there; then
        wait until the node advertises GPUs."""
        daemonset = objects[-1]["metadata"]
        ours = (daemonset["namespace"], daemonset["name"])
        others = ns.other_device_plugins(
            [self.kube.to_json(d) for d in self.kube.apps.list_daemon_set_for_all_namespaces().items], ours)
        if others:
            return dict(changed=False, deployed=False, others=others, msg=(
                "NVIDIA's device plugin is left to what runs it already: %s; nothing deployed" % "; ".join(others)))
        applied = [self._apply(obj) for obj in objects]
        changed = [text for text in applied if text]
        result = dict(changed=bool(changed), deployed=True, others=[], applied=changed,
                      msg="device plugin %s/%s: %s" % (ours + ("; ".join(changed) or "unchanged",)))
        result.update(self._would(bool(changed), "; ".join(changed) or "change nothing"))
        if wait and not self.check_mode:
            result["gpu_allocatable"] = self._wait_for_gpus(ours[0])
        return result

    def _apply(self, obj):
        """Create OBJ, or replace it when its hash annotation differs; what was done, or None."""
        kind, meta = obj["kind"], obj["metadata"]
        read, create, replace = self._calls(kind, meta)
        try:
            stored = self.kube.to_json(read())
        except ApiException as exc:
            if exc.status != 404:
                raise
            stored = None
        if stored is not None and (kind == "Namespace" or dp.is_current(stored, obj)):
            return None  # a namespace that exists is enough (another tool may own it)
        if self.check_mode:
            return "%s %s %s" % ("update" if stored else "create", kind, meta["name"])
        if stored is None:
            create(obj)
        else:
            replace(dict(obj, metadata=dict(meta, resourceVersion=stored["metadata"]["resourceVersion"])))
        return "%s %s %s" % ("updated" if stored else "created", kind, meta["name"])

    def _calls(self, kind, meta):
        name, namespace = meta["name"], meta.get("namespace")
        core, apps, rbac = self.kube.core, self.kube.apps, self.kube.rbac
        calls = {
            "Namespace": (lambda: core.read_namespace(name), core.create_namespace, None),
            "ServiceAccount": (lambda: core.read_namespaced_service_account(name, namespace),
                               lambda body: core.create_namespaced_service_account(namespace, body),
                               lambda body: core.replace_namespaced_service_account(name, namespace, body)),
            "ClusterRole": (lambda: rbac.read_cluster_role(name), rbac.create_cluster_role,
                            lambda body: rbac.replace_cluster_role(name, body)),
            "ClusterRoleBinding": (lambda: rbac.read_cluster_role_binding(name), rbac.create_cluster_role_binding,
                                   lambda body: rbac.replace_cluster_role_binding(name, body)),
            "DaemonSet": (lambda: apps.read_namespaced_daemon_set(name, namespace),
                          lambda body: apps.create_namespaced_daemon_set(namespace, body),
                          lambda body: apps.replace_namespaced_daemon_set(name, namespace, body)),
        }
        return calls[kind]

    def _wait_for_gpus(self, namespace):
        """{resource: count} of the GPU resources the node advertises once the device plugin runs there
        (nvidia.com/gpu, its .shared name, MIG resources); StageError when none came within the timeout."""
        deadline = self.clock() + self.timeout
        while True:
            allocatable = (self.read_node().get("status") or {}).get("allocatable") or {}
            gpus = dict((key, int(value)) for key, value in allocatable.items()
                        if key.startswith(GPU_RESOURCE_PREFIXES) and int(value or 0))
            if gpus or self.clock() >= deadline:
                break
            self.sleep(self.retry_interval)
        if not gpus:
            raise ns.StageError(
                "the device plugin did not advertise %s on node %s within %d s: find its pod there (kubectl -n %s "
                "get pods -l name=%s -o wide) and read its log (kubectl -n %s logs POD --all-containers)"
                % (cv.GPU_RESOURCE, self.node, self.timeout, namespace, dp.POD_LABELS["name"], namespace))
        return gpus
