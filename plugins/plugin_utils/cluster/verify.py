# -*- coding: utf-8 -*-
# Copyright: gpunode.nvidia contributors
# Apache License 2.0
"""Cluster-level GPU verification (controller side), through the cluster client (client.py).

For each GPU node: one pod pinned to the node (nodeSelector kubernetes.io/hostname, so the
scheduler, taints and the device plugin's nvidia.com/gpu all take part, as for a real GPU
pod), with the RuntimeClass and `nvidia.com/gpu: 1`; wait for Succeeded, read the log for
`Test PASSED`, delete the pod. Nodes run in parallel threads. Failures are explained from
the pod's events, its container states, its log and the node (allocatable GPUs, Ready).

Only a kubeconfig is needed on the controller; nothing runs kubectl.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import re
import time
import uuid
from concurrent.futures import ThreadPoolExecutor

from ansible_collections.gpunode.nvidia.plugins.module_utils.workload.explain import explain, explain_first
from ansible_collections.gpunode.nvidia.plugins.module_utils.editors.masking import mask_text
from ansible_collections.gpunode.nvidia.plugins.plugin_utils.action import write_atomically
from ansible_collections.gpunode.nvidia.plugins.plugin_utils.cluster.client import ApiException, api_message, k8s

GPU_RESOURCE = "nvidia.com/gpu"
HOSTNAME_LABEL = "kubernetes.io/hostname"
SUCCESS_LINE = "Test PASSED"
POD_LABEL = "app.kubernetes.io/name"
POD_LABEL_VALUE = "gpunode-verify"
UNPROVEN_TAINT = "gpunode.nvidia/unproven"
DEFAULT_TOLERATIONS = [{"key": GPU_RESOURCE, "operator": "Exists", "effect": "NoSchedule"},
                       {"key": UNPROVEN_TAINT, "operator": "Exists", "effect": "NoSchedule"}]
# Waiting reasons and event rules that do not go away by waiting: stop at once and explain.
STUCK_REASONS = ("ErrImagePull", "ImagePullBackOff", "ErrImageNeverPull", "InvalidImageName",
                 "CreateContainerError", "CreateContainerConfigError", "RunContainerError", "CrashLoopBackOff")
PERMANENT_RULES = ("no-runtime", "glibc", "missing-runtime-binary", "image-pull", "sandbox-image-pull",
                   "runtimeclass-missing", "cri-disabled", "no-driver", "cuda-driver-too-old")
LOG_LIMIT = 4000


class VerifyError(Exception):
    pass


def pod_name(node):
    """DNS-1123 name, unique per run: gpunode-verify-<node>-<random>."""
    slug = re.sub(r"[^a-z0-9-]+", "-", node.lower()).strip("-")[:40].strip("-")
    return "gpunode-verify-%s-%s" % (slug or "node", uuid.uuid4().hex[:5])


def node_driver(labels):
    """Driver version from GPU feature discovery labels, if the node has them."""
    full = labels.get("nvidia.com/cuda.driver-version.full")
    if full:
        return full
    parts = [labels.get("nvidia.com/cuda.driver.%s" % p) for p in ("major", "minor", "rev")]
    return ".".join(p for p in parts if p) or None


def node_summary(node):
    """What the table and the explanations need from a V1Node."""
    status = node.status
    ready = [c for c in (status.conditions or []) if c.type == "Ready"]
    labels = node.metadata.labels or {}
    return {
        "hostname": labels.get(HOSTNAME_LABEL, node.metadata.name),
        "gpu_allocatable": (status.allocatable or {}).get(GPU_RESOURCE),
        "gpu_capacity": (status.capacity or {}).get(GPU_RESOURCE),
        "gpu_product": labels.get("nvidia.com/gpu.product"),
        "driver": node_driver(labels),
        "runtime": status.node_info.container_runtime_version if status.node_info else None,
        "ready": bool(ready) and ready[0].status == "True",
        "ready_message": ready[0].message if ready else "no Ready condition",
    }


class ClusterVerifier:
    """One verification run against one cluster."""

    def __init__(self, kube, namespace="default", runtime_class="nvidia", handler="nvidia",
                 image="nvcr.io/nvidia/k8s/cuda-sample:vectoradd-cuda12.5.0-ubuntu22.04",
                 pull_policy="IfNotPresent", tolerations=None, timeout=300, poll_interval=2.0, gpus=1):
        self.core = kube.core
        self.node_api = kube.node_api
        self.namespace = namespace
        self.runtime_class = runtime_class
        self.handler = handler
        self.image = image
        self.pull_policy = pull_policy
        self.tolerations = DEFAULT_TOLERATIONS if tolerations is None else tolerations
        self.timeout = timeout
        self.poll_interval = poll_interval
        self.gpus = gpus

    # --- RuntimeClass -------------------------------------------------------------------
    def require_runtime_class(self):
        """'present'; VerifyError when it is missing or has another handler (the check does not create it)."""
        if self.ensure_runtime_class(check_mode=True) == "would-create":
            raise VerifyError("RuntimeClass %s does not exist: site.yml's cluster stage creates it (gpunode_kubeconfig), "
                              "or run the check with create_runtime_class" % self.runtime_class)
        return "present"

    def ensure_runtime_class(self, check_mode=False):
        """'present', 'created' or 'would-create'; VerifyError when one exists with another handler."""
        try:
            found = self.node_api.read_runtime_class(self.runtime_class)
        except ApiException as exc:
            if exc.status != 404:
                raise VerifyError("cannot read RuntimeClass %s: %s" % (self.runtime_class, api_message(exc)))
            found = None
        if found is not None:
            if found.handler != self.handler:
                raise VerifyError("RuntimeClass %s exists with handler %s, not %s; its handler cannot be changed: "
                                  "delete it or set the runtime class name to another one"
                                  % (self.runtime_class, found.handler, self.handler))
            return "present"
        if check_mode:
            return "would-create"
        body = k8s.V1RuntimeClass(api_version="node.k8s.io/v1", kind="RuntimeClass", handler=self.handler,
                                  metadata=k8s.V1ObjectMeta(name=self.runtime_class))
        try:
            self.node_api.create_runtime_class(body)
        except ApiException as exc:
            if exc.status != 409:  # created meanwhile by someone else: fine
                raise VerifyError("cannot create RuntimeClass %s: %s" % (self.runtime_class, api_message(exc)))
        return "created"

    # --- which nodes --------------------------------------------------------------------
    def select_nodes(self, selector):
        try:
            return [n.metadata.name for n in self.core.list_node(label_selector=selector).items]
        except ApiException as exc:
            raise VerifyError("cannot list nodes with %r: %s" % (selector, api_message(exc)))

    # --- one node -----------------------------------------------------------------------
    def verify_node(self, target):
        """Run the pod on TARGET ({name, and optionally config_path, socket, engine, driver}); a result dict."""
        started = time.time()
        result = {"node": target["name"], "result": "error", "passed": False, "pod": None, "phase": None,
                  "gpu_allocatable": None, "gpu_capacity": None, "driver": target.get("driver"),
                  "runtime": None, "events": [], "log": "", "explanation": None, "message": ""}
        context = {"node": target["name"], "config_path": target.get("config_path"),
                   "socket": target.get("socket"), "engine": target.get("engine"),
                   "runtime_handler": self.handler, "runtime_class": self.runtime_class,
                   "image": self.image, "timeout": self.timeout}
        try:
            self._verify(target, result, context)
        except ApiException as exc:
            result.update(result="error", message=mask_text(api_message(exc)))
            result["explanation"] = explain(result["message"], context)
        except VerifyError as exc:
            result.update(result="error", message=str(exc))
        result["duration_s"] = round(time.time() - started, 3)
        return result

    def _verify(self, target, result, context):
        node = self._read_node(target["name"])
        summary = node_summary(node)
        result.update(gpu_allocatable=summary["gpu_allocatable"], gpu_capacity=summary["gpu_capacity"],
                      runtime=summary["runtime"], driver=summary["driver"] or result["driver"],
                      gpu_product=summary["gpu_product"])
        context["allocatable_gpus"] = summary["gpu_allocatable"] or "0"
        name = pod_name(target["name"])
        result["pod"] = name
        self.core.create_namespaced_pod(self.namespace, self.pod_body(name, summary["hostname"]))
        try:
            pod, timed_out = self._wait(name, context)
            self._judge(pod, timed_out, result, context, summary)
        finally:
            self._delete(name)

    def _read_node(self, name):
        try:
            return self.core.read_node(name)
        except ApiException as exc:
            if exc.status == 404:
                raise VerifyError("node %s is not in the cluster (is the Kubernetes node name different from the "
                                  "inventory name? set gpu_verify_node_name)" % name)
            raise

    def pod_body(self, name, hostname):
        container = k8s.V1Container(
            name="vectoradd", image=self.image, image_pull_policy=self.pull_policy,
            resources=k8s.V1ResourceRequirements(requests={GPU_RESOURCE: str(self.gpus)},
                                                 limits={GPU_RESOURCE: str(self.gpus)}))
        spec = k8s.V1PodSpec(
            restart_policy="Never", runtime_class_name=self.runtime_class, containers=[container],
            node_selector={HOSTNAME_LABEL: hostname}, automount_service_account_token=False,
            termination_grace_period_seconds=0,
            tolerations=[k8s.V1Toleration(**_snake(t)) for t in self.tolerations])
        meta = k8s.V1ObjectMeta(name=name, labels={POD_LABEL: POD_LABEL_VALUE})
        return k8s.V1Pod(api_version="v1", kind="Pod", metadata=meta, spec=spec)

    def _wait(self, name, context):
        """(pod, timed_out): until Succeeded/Failed, a failure that waiting cannot cure, or the timeout."""
        deadline = time.time() + self.timeout
        while True:
            pod = self.core.read_namespaced_pod(name, self.namespace)
            if pod.status.phase in ("Succeeded", "Failed") or self._stuck(pod, name, context):
                return pod, False
            if time.time() >= deadline:
                return pod, True
            time.sleep(min(self.poll_interval, max(deadline - time.time(), 0.01)))

    def _stuck(self, pod, name, context):
        for reason, message in waiting_states(pod):
            if reason in STUCK_REASONS:
                return True
            known = explain(message, context)
            if known and known["rule"] in PERMANENT_RULES:
                return True
        if pod.status.phase == "Pending" and not waiting_states(pod):
            for event in self._events(name):
                known = explain(event["message"], context)
                if event["type"] == "Warning" and known and known["rule"] in PERMANENT_RULES:
                    return True
        return False

    def _events(self, name):
        events = self.core.list_namespaced_event(self.namespace, field_selector="involvedObject.name=%s" % name)
        return [{"type": e.type, "reason": e.reason, "message": mask_text(e.message or ""), "count": e.count}
                for e in events.items]

    def _log(self, name):
        try:
            return self.core.read_namespaced_pod_log(name, self.namespace)
        except ApiException as exc:
            return "(no log: %s)" % api_message(exc)

    def _judge(self, pod, timed_out, result, context, summary):
        phase = pod.status.phase
        result["phase"] = phase
        log = self._log(result["pod"]) if phase in ("Succeeded", "Failed", "Running") else ""
        result["log"] = log[-LOG_LIMIT:]
        if phase == "Succeeded" and SUCCESS_LINE in log:
            result.update(result="passed", passed=True)
            return
        result["events"] = self._events(result["pod"])
        result["result"] = "timeout" if timed_out else "failed"
        result["message"] = failure_message(pod, timed_out, self.timeout, log, result["events"])
        result["explanation"] = explain_first(evidence(summary, pod, result["events"], log), context)
        if result["explanation"] is None and timed_out:
            result["explanation"] = explain("did not finish within %ss" % self.timeout, context)

    def _delete(self, name):
        try:
            self.core.delete_namespaced_pod(name, self.namespace, grace_period_seconds=0)
        except ApiException as exc:
            if exc.status != 404:
                raise

    # --- all nodes ----------------------------------------------------------------------
    def verify_all(self, targets, parallelism=32):
        """Results in the order of TARGETS; nodes run in parallel threads."""
        if not targets:
            return []
        workers = max(1, min(parallelism, len(targets)))
        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="gpu-verify") as pool:
            return list(pool.map(self.verify_node, targets))


def _snake(toleration):
    keys = {"tolerationSeconds": "toleration_seconds"}
    return dict((keys.get(k, k), v) for k, v in toleration.items())


def waiting_states(pod):
    states = []
    for status in (pod.status.container_statuses or []):
        waiting = status.state.waiting if status.state else None
        if waiting and waiting.reason not in (None, "ContainerCreating", "PodInitializing"):
            states.append((waiting.reason, waiting.message or waiting.reason))
    return states


def terminated_states(pod):
    states = []
    for status in (pod.status.container_statuses or []):
        done = status.state.terminated if status.state else None
        if done:
            states.append(done)
    return states


def evidence(summary, pod, events, log):
    """Messages that may explain a failure, most telling first."""
    messages = []
    if not summary["ready"]:
        messages.append("NotReady: %s" % summary["ready_message"])
    messages += [message for _reason, message in waiting_states(pod)]
    messages += [e["message"] for e in reversed(events) if e["type"] == "Warning"]
    messages.append(log)
    messages += [c.message for c in (pod.status.conditions or []) if c.message]
    return messages


def failure_message(pod, timed_out, timeout, log, events):
    """One line: what the pod did, with the container state or the latest warning event."""
    phase = pod.status.phase
    waiting = "; ".join("%s: %s" % state for state in waiting_states(pod))
    warnings = ["%s: %s" % (e["reason"], e["message"]) for e in events if e["type"] == "Warning"]
    detail = waiting or (warnings[-1] if warnings else "")
    if timed_out:
        return "pod still %s after %ss%s" % (phase, timeout, " (%s)" % detail if detail else "")
    for done in terminated_states(pod):
        return "pod %s, container exit code %s (%s)%s" % (
            phase, done.exit_code, done.reason, "" if SUCCESS_LINE in log else ", no \"%s\" in its log" % SUCCESS_LINE)
    return "pod %s%s" % (phase, ": " + detail if detail else "")


# --- reporting ---------------------------------------------------------------------------------

TABLE_COLUMNS = (("NODE", "node"), ("GPUS", "gpus"), ("DRIVER", "driver"), ("RUNTIME", "runtime"),
                 ("RESULT", "result"), ("TIME", "time"))


def table_rows(results):
    rows = []
    for r in results:
        rows.append({"node": r["node"], "gpus": "-" if r.get("gpu_allocatable") is None else str(r["gpu_allocatable"]),
                     "driver": r.get("driver") or "-", "runtime": r.get("runtime") or "-",
                     "result": r["result"] + (" (%s)" % r["explanation"]["rule"] if r.get("explanation") else ""),
                     "time": "%.1fs" % r.get("duration_s", 0)})
    return rows


def summary_table(results):
    """Lines of a fixed-width table: node, GPU count (allocatable), driver, runtime, result, duration."""
    rows = table_rows(results)
    widths = [max([len(title)] + [len(row[key]) for row in rows]) for title, key in TABLE_COLUMNS]

    def line(values):
        return "  ".join(value.ljust(width) for value, width in zip(values, widths)).rstrip()

    lines = [line([title for title, _key in TABLE_COLUMNS])]
    lines += [line([row[key] for _title, key in TABLE_COLUMNS]) for row in rows]
    return lines


def write_report(path, report):
    """The JSON report, written atomically."""
    write_atomically(path, json.dumps(report, indent=2, sort_keys=True) + "\n")
