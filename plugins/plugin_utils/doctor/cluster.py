# -*- coding: utf-8 -*-
# Copyright: gpunode.nvidia contributors
# Apache License 2.0
"""Cluster-level diagnosis rules (controller side), over the JSON the Kubernetes API returns.

``cluster_findings(nodes, runtimeclasses, pods, events)`` takes plain dicts (the
``items`` of NodeList, RuntimeClassList, PodList and EventList) so the rules can
be tested with recorded JSON and run against any client. ``read_cluster(kube)``
fetches them through the cluster client (plugin_utils/cluster/client.py). Rules and
findings are the node doctor's own (module_utils/doctor/rules.py ``Rule``,
module_utils/doctor/context.py ``finding``); their evidence kind is ``api``.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json

from ansible_collections.gpunode.nvidia.plugins.module_utils.doctor.context import finding
from ansible_collections.gpunode.nvidia.plugins.module_utils.doctor.rules import Rule
from ansible_collections.gpunode.nvidia.plugins.module_utils.workload.explain import explain

GPU_LABELS = (("nvidia.com/gpu.present", "true"), ("feature.node.kubernetes.io/pci-10de.present", "true"))
MAX_POD_FINDINGS = 20


# The cluster rules have no check of their own: cluster_findings runs them on the API's JSON, on the controller.
CLUSTER_CATALOGUE = (
    Rule("cluster-unreachable", "critical", None, "The Kubernetes API could not be read"),
    Rule("cluster-gpu-not-allocatable", "critical", None,
         "GPU node advertises no nvidia.com/gpu (device plugin not registered)"),
    Rule("cluster-gpu-node-not-ready", "critical", "I3", "GPU node is NotReady"),
    Rule("cluster-runtimeclass-missing", "critical", None, "The nvidia RuntimeClass is missing or wrong"),
    Rule("cluster-gpu-pod-pending", "critical", None, "GPU pod pending"),
)
CLUSTER_RULES = dict((rule.id, rule) for rule in CLUSTER_CATALOGUE)


def unreachable_finding(kubeconfig, exc):
    """The finding when the API cannot be read: a kubeconfig that cannot be loaded, no answer, or a refusal."""
    text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return finding(
        CLUSTER_RULES["cluster-unreachable"],
        "The Kubernetes API named by %s could not be read: %s" % (kubeconfig, text),
        [api_evidence(kubeconfig, type(exc).__name__)],
        _fix("Check the kubeconfig (server, credentials, context) and that the API server answers from the "
             "controller.", ["kubectl --kubeconfig %s get nodes" % kubeconfig]))


def api_evidence(obj, text):
    return {"kind": "api", "object": obj, "text": text}


def _fix(summary, commands=None, manifest=None):
    fix = {"summary": summary, "playbook": None, "vars": {}, "commands": list(commands or [])}
    if manifest:
        fix["manifest"] = manifest
    return fix


# --- which nodes have GPUs ----------------------------------------------------------------------------

def is_gpu_node(node, resource, gpu_nodes):
    meta, status = node.get("metadata") or {}, node.get("status") or {}
    labels = meta.get("labels") or {}
    if meta.get("name") in gpu_nodes:
        return True
    if any(labels.get(key) == value for key, value in GPU_LABELS):
        return True
    return resource in (status.get("capacity") or {})


def quantity(value):
    try:
        return int(str(value))
    except (TypeError, ValueError):
        return 0


# --- rules --------------------------------------------------------------------------------------------

def not_allocatable(node, resource):
    name = node["metadata"]["name"]
    status = node.get("status") or {}
    allocatable = (status.get("allocatable") or {}).get(resource)
    if quantity(allocatable) > 0:
        return None
    capacity = (status.get("capacity") or {}).get(resource)
    evidence = [api_evidence("node/%s" % name, "status.allocatable[%s] = %s, capacity = %s" % (
        resource, allocatable if allocatable is not None else "absent", capacity if capacity is not None else "absent"))]
    labels = (node.get("metadata") or {}).get("labels") or {}
    gpu_labels = dict((k, v) for k, v in labels.items() if k.startswith("nvidia.com/"))
    if gpu_labels:
        evidence.append(api_evidence("node/%s" % name, "labels: %s" % ", ".join(
            "%s=%s" % kv for kv in sorted(gpu_labels.items()))))
    return finding(
        CLUSTER_RULES["cluster-gpu-not-allocatable"],
        "Node %s has GPUs but advertises no %s: the NVIDIA device plugin is not registered with its kubelet "
        "(not running there, or it cannot see the GPUs because the runtime has no nvidia runtime)." % (name, resource),
        evidence, _fix("Run gpunode.nvidia.diagnose for the node's runtime findings; check the device plugin pod on "
                       "%s (it needs runtimeClassName nvidia or nvidia as the default runtime)." % name,
                       ["ansible-playbook -i INVENTORY gpunode.nvidia.diagnose -l %s" % name,
                        "kubectl get pods -A -o wide --field-selector spec.nodeName=%s" % name,
                        "kubectl describe node %s" % name]))


def not_ready(node):
    name = node["metadata"]["name"]
    for condition in (node.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "Ready" and condition.get("status") != "True":
            message = condition.get("message") or condition.get("reason") or ""
            known = explain(message, {"node": name}) or explain("NotReady", {"node": name})
            return finding(
                CLUSTER_RULES["cluster-gpu-node-not-ready"], "GPU node %s is NotReady: %s" % (name, message),
                [api_evidence("node/%s" % name, "Ready=%s reason=%s: %s" % (
                    condition.get("status"), condition.get("reason"), message))],
                _fix(known["fix"], ["systemctl status kubelet", "journalctl -u kubelet -n 50"]),
                incident=known.get("incident") or "I3")
    return None


def runtimeclass_problem(runtimeclasses, name, handler):
    found = next((rc for rc in runtimeclasses if (rc.get("metadata") or {}).get("name") == name), None)
    manifest = {"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass", "metadata": {"name": name},
                "handler": handler}
    command = "kubectl apply -f - <<'EOF'\n%s\nEOF" % json.dumps(manifest)
    if found is None:
        return finding(
            CLUSTER_RULES["cluster-runtimeclass-missing"],
            "The cluster has no RuntimeClass %s: pods with runtimeClassName: %s are "
            "rejected (found: %s)." % (name, name, ", ".join(sorted(
                (rc.get("metadata") or {}).get("name", "?") for rc in runtimeclasses)) or "none"),
            [api_evidence("runtimeclasses.node.k8s.io", "no object named %s" % name)],
            _fix("Create the RuntimeClass (the role gpu_verify does when gpunode_kubeconfig is set).", [command],
                 manifest))
    if found.get("handler") != handler:
        return finding(
            CLUSTER_RULES["cluster-runtimeclass-missing"],
            "RuntimeClass %s has handler %r, not %r: its pods ask the runtime for a "
            "runtime the nodes do not have." % (name, found.get("handler"), handler),
            [api_evidence("runtimeclass/%s" % name, "handler: %s" % found.get("handler"))],
            _fix("Recreate it with handler %s (handler is immutable)." % handler,
                 ["kubectl delete runtimeclass %s" % name, command], manifest))
    return None


def requests_gpu(pod, resource):
    for container in (pod.get("spec") or {}).get("containers") or []:
        resources = container.get("resources") or {}
        for section in ("limits", "requests"):
            if quantity((resources.get(section) or {}).get(resource)) > 0:
                return True
    return False


def pod_node(pod):
    spec = pod.get("spec") or {}
    return spec.get("nodeName") or (spec.get("nodeSelector") or {}).get("kubernetes.io/hostname")


def pod_messages(pod, events):
    """Why the pod waits, newest first: its Warning events, then its containers' waiting messages."""
    meta = pod.get("metadata") or {}
    mine = [e for e in events if (e.get("involvedObject") or {}).get("name") == meta.get("name")
            and (e.get("involvedObject") or {}).get("namespace", meta.get("namespace")) == meta.get("namespace")]
    mine.sort(key=lambda e: e.get("lastTimestamp") or e.get("eventTime") or "", reverse=True)
    messages = [(e.get("reason") or "", e.get("message") or "") for e in mine if e.get("type") == "Warning"]
    for status in (pod.get("status") or {}).get("containerStatuses") or []:
        waiting = (status.get("state") or {}).get("waiting") or {}
        if waiting:
            messages.append((waiting.get("reason") or "", waiting.get("message") or waiting.get("reason") or ""))
    for condition in (pod.get("status") or {}).get("conditions") or []:
        if condition.get("status") == "False" and condition.get("message"):
            messages.append((condition.get("reason") or "", condition["message"]))
    return messages


def pending_pod(pod, events, nodes_by_name, resource, runtime_class):
    meta = pod.get("metadata") or {}
    ref = "%s/%s" % (meta.get("namespace"), meta.get("name"))
    node_name = pod_node(pod)
    node = nodes_by_name.get(node_name) or {}
    allocatable = ((node.get("status") or {}).get("allocatable") or {}).get(resource)
    context = {"node": node_name, "runtime_class": runtime_class,
               "runtime_handler": (pod.get("spec") or {}).get("runtimeClassName") or runtime_class,
               "allocatable_gpus": allocatable}
    messages = pod_messages(pod, events)
    known, why = None, None
    for reason, message in messages:
        known = explain(message, context)
        if known:
            why = (reason, message)
            break
    if why is None and messages:
        why = messages[0]
    evidence = [api_evidence("pod/%s" % ref, "phase Pending%s" % (" on node %s" % node_name if node_name else ""))]
    evidence += [api_evidence("event/%s" % ref, "%s: %s" % m) for m in messages[:3]]
    cause = known["cause"] if known else (why[1] if why else "no event explains it yet")
    return finding(
        CLUSTER_RULES["cluster-gpu-pod-pending"],
        "GPU pod %s is Pending%s: %s" % (ref, " on %s" % node_name if node_name else "", cause),
        evidence, _fix(known["fix"] if known else "Read the pod's events (kubectl describe pod).",
                       ["kubectl -n %s describe pod %s" % (meta.get("namespace"), meta.get("name"))]),
        incident=known.get("incident") if known else None)


def cluster_findings(nodes, runtimeclasses, pods, events, gpu_nodes=(), resource="nvidia.com/gpu",
                     runtime_class="nvidia", handler="nvidia"):
    """Findings for the cluster from the API's JSON items (see the module docstring)."""
    findings = []
    gpu = [n for n in nodes if is_gpu_node(n, resource, set(gpu_nodes))]
    for node in gpu:
        for problem in (not_allocatable(node, resource), not_ready(node)):
            if problem:
                findings.append(problem)
    if gpu or any(requests_gpu(p, resource) for p in pods):
        problem = runtimeclass_problem(runtimeclasses, runtime_class, handler)
        if problem:
            findings.append(problem)
    by_name = dict(((n.get("metadata") or {}).get("name"), n) for n in nodes)
    pending = [p for p in pods if (p.get("status") or {}).get("phase") == "Pending" and requests_gpu(p, resource)]
    for pod in pending[:MAX_POD_FINDINGS]:
        findings.append(pending_pod(pod, events, by_name, resource, runtime_class))
    if len(pending) > MAX_POD_FINDINGS:
        findings.append(finding(CLUSTER_RULES["cluster-gpu-pod-pending"], "%d more GPU pods are Pending." % (
            len(pending) - MAX_POD_FINDINGS), [], _fix("kubectl get pods -A --field-selector status.phase=Pending")))
    return {"gpu_nodes": sorted((n.get("metadata") or {}).get("name") for n in gpu), "findings": findings}


# --- reading the API ------------------------------------------------------------------------------------

def read_cluster(kube, resource="nvidia.com/gpu", timeout=20):
    """(nodes, runtimeclasses, pending GPU pods, their events) as JSON items, read through a client.Kube."""
    core, node_api = kube.core, kube.node_api

    def items(call, **kwargs):
        response = call(_preload_content=False, _request_timeout=timeout, **kwargs)
        return json.loads(response.data).get("items") or []

    nodes = items(core.list_node)
    runtimeclasses = items(node_api.list_runtime_class)
    pods = [p for p in items(core.list_pod_for_all_namespaces, field_selector="status.phase=Pending")
            if requests_gpu(p, resource)]
    events = []
    for pod in pods:
        meta = pod.get("metadata") or {}
        events += items(core.list_namespaced_event, namespace=meta.get("namespace"),
                        field_selector="involvedObject.name=%s" % meta.get("name"))
    return nodes, runtimeclasses, pods, events
