"""A Kubernetes API STAND-IN for tests: no kube-apiserver or kubelet can run on the test machines.

It is a small threaded HTTP server on 127.0.0.1 that speaks the subset of the
Kubernetes REST API that the project's cluster code uses, through the official
`kubernetes` Python client, exactly as a real cluster would be spoken to:

    GET    /version
    GET    /api/v1/nodes[?labelSelector=k=v,k2]          GET /api/v1/nodes/{name}
    PUT    /api/v1/nodes/{name}                          PATCH /api/v1/nodes/{name}
           (strategic-merge, merge and JSON patch of metadata.labels, metadata.annotations and
           spec.unschedulable; every change bumps metadata.resourceVersion; a body naming another
           resourceVersion gets the real 409 Conflict)
    GET    /apis/node.k8s.io/v1/runtimeclasses[/{name}]  POST /apis/node.k8s.io/v1/runtimeclasses
    GET    /api/v1/pods  (all namespaces)                [?fieldSelector=spec.nodeName=X,status.phase!=Y]
    GET    /api/v1/namespaces/{ns}/pods                  POST /api/v1/namespaces/{ns}/pods
    POST   /api/v1/namespaces/{ns}/pods/{name}/eviction  (policy/v1 Eviction: PodDisruptionBudgets
           decide; a refusal is the real 429 "Cannot evict pod as it would violate the pod's
           disruption budget.")
    GET    /apis/policy/v1[/namespaces/{ns}]/poddisruptionbudgets
    GET, POST /apis/coordination.k8s.io/v1/namespaces/{ns}/leases
    GET, PUT, PATCH, DELETE .../leases/{name}         (409 AlreadyExists / Conflict as the API server)
    GET    /api/v1/namespaces/{ns}/pods/{name}           DELETE /api/v1/namespaces/{ns}/pods/{name}
    GET    /api/v1/namespaces/{ns}/pods/{name}/log       (text/plain)
    GET    /api/v1/namespaces/{ns}/events[?fieldSelector=involvedObject.name=X]
    GET    /api/v1/events  (all namespaces)
    GET, POST /api/v1/namespaces/{ns}/configmaps      GET, PATCH .../configmaps/{name}  (merge of data)
    GET, POST /api/v1/namespaces                      GET /api/v1/namespaces/{name}
    GET, POST /api/v1/namespaces/{ns}/serviceaccounts GET, PUT .../serviceaccounts/{name}
    GET, POST /apis/rbac.authorization.k8s.io/v1/clusterroles[bindings]   GET, PUT .../{name}
    GET    /apis/apps/v1/daemonsets (all namespaces)  GET, POST /apis/apps/v1/namespaces/{ns}/daemonsets
    GET, PUT /apis/apps/v1/namespaces/{ns}/daemonsets/{name}
           (every object: 409 AlreadyExists on a second create, 409 Conflict on a stale resourceVersion,
           404 NotFound with the API's message; a POST into a namespace that does not exist is the
           real 404 'namespaces "x" not found' for these kinds)

Node taints (spec.taints) are stored as written; the scheduler stand-in keeps a pod off a node
whose NoSchedule/NoExecute taints it does not tolerate ("untolerated taint {key: value}").
DaemonSets are run as the DaemonSet controller does: one pod per node that matches the template's
nodeSelector and whose taints it tolerates (plus the controller's own tolerations), none elsewhere;
a template naming a RuntimeClass that does not exist gets no pod (FailedCreate event, as the API
server's admission rejects it). A bare node (`Node(..., bare=True)`: no GPU feature discovery labels,
and no device plugin yet) advertises nvidia.com/gpu only while a pod of a DaemonSet running the
`k8s-device-plugin` image runs on it: it stands in for the kubelet's device plugin registration and
for the device plugin's image itself, which cannot run here.

Pods are not run: a pod's status is computed from its age and the scripted
behaviour of the node it is pinned to (`spec.nodeName`, or `spec.nodeSelector`
`kubernetes.io/hostname`). Behaviours (NODE_BEHAVIOURS):

    success           Pending -> Running -> Succeeded after `pod_seconds`; log has "Test PASSED"
    cuda_fail         like success but Failed (exit 1), log "Result verification failed at element 0!"
    zero_allocatable  node allocatable nvidia.com/gpu "0"; pod stays Pending, event
                      FailedScheduling "0/N nodes are available: 1 Insufficient nvidia.com/gpu."
    no_runtime        pod stays Pending (ContainerCreating), event FailedCreatePodSandBox
                      '... no runtime for "nvidia" is configured'                       (incident I1)
    glibc             container RunContainerError, event Failed with the prestart hook's
                      "version `GLIBC_2.27' not found"                                  (incident I4)
    image_pull        container ErrImagePull/ImagePullBackOff, event Failed "Failed to pull image"
    not_ready         node Ready=False with the not-ready taint; pod stays Pending, event
                      FailedScheduling "... untolerated taint {node.kubernetes.io/not-ready: }" (I3)
    hang              pod Running forever (for timeouts)

Scenario API (for any test, cluster verification or diagnosis):

    sys.path.insert(0, "<repo>/tests/testbed"); from kube_api_standin import KubeApiStandin, Node

    with KubeApiStandin([Node("gpu-1"), Node("gpu-2", "no_runtime"), "cpu-1"],
                        pod_seconds=0.5, token="secret") as api:
        api.write_kubeconfig(path)         # kubeconfig for the kubernetes client
        api.add_pod("kube-system", {...})  # seed any object (e.g. a Pending device-plugin pod)
        api.add_event("kube-system", "pod-name", "Warning", "Reason", "message")
        ...
        api.add_gpu_pod("ml", "train-1", "gpu-1", labels={"app": "train"})   # or claims=["claim-1"] (DRA)
        api.add_pdb("ml", "train", {"app": "train"}, disruptions_allowed=1, refuse_first=2)  # or "never"
        api.add_operands("gpu-1", ("device-plugin", "dcgm-exporter"))  # operator DaemonSet pods that follow
                                                   # the node's nvidia.com/gpu.deploy.<operand> labels
        api.operand_start_seconds = 2              # operand pods created from now on are Pending this long
                                                   # (None: never Running, CrashLoopBackOff)
        api.set_ready("gpu-2", False); api.set_allocatable("gpu-1", "nvidia.com/gpu", 0); api.node("gpu-1")
        api.add_daemonset("gpu-operator", {...})    # seed a DaemonSet (the GPU operator's, another plugin)
        api.objects[("DaemonSet", ns, name)]        # every stored Namespace, ServiceAccount, ClusterRole,
                                                   # ClusterRoleBinding and DaemonSet (ns None: cluster-scoped)
        api.eviction_grace = 0.5                   # evicted pods stay terminating this long
        api.mig_manager("gpu-1", "success")        # as the GPU operator's MIG manager: a new nvidia.com/mig.config
                                                   # label is answered with nvidia.com/mig.config.state=success
                                                   # (or "failed"); api.configmaps[(ns, name)] holds ConfigMaps
        ...
        api.pods_created, api.created_pod_bodies, api.pods_deleted, api.peak_pods,
        api.evictions, api.evictions_refused, api.leases,
        api.peak_unavailable, api.unavailable_timeline,  # GPU nodes unschedulable or NotReady, per change
        api.requests, api.write_requests                                   # what the client did
        api.taint_timeline                          # (time, node, ["key=value", ...]) after each node write

`Node(name, behaviour="success", gpus=1, ...)`; a plain string is a node without
GPUs or behaviour ("cpu" nodes: no nvidia.com/gpu, no GPU labels). When `token`
is set, requests without `Authorization: Bearer <token>` get 401.

Run by hand:  python3 tests/testbed/kube_api_standin.py --kubeconfig /tmp/kc \
                  --node gpu-1=success --node gpu-2=no_runtime --pod-seconds 2
"""

import argparse
import copy
import json
import re
import signal
import threading
import time
import uuid
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

NODE_BEHAVIOURS = (
    "success", "cuda_fail", "zero_allocatable", "no_runtime", "glibc", "image_pull",
    "not_ready", "hang", "cpu",
)

SUCCESS_LOG = (
    "[Vector addition of 50000 elements]\n"
    "Copy input data from the host memory to the CUDA device\n"
    "CUDA kernel launch with 196 blocks of 256 threads\n"
    "Copy output data from the CUDA device to the host memory\n"
    "Test PASSED\n"
    "Done\n"
)
CUDA_FAIL_LOG = "[Vector addition of 50000 elements]\nResult verification failed at element 0!\n"

NO_RUNTIME_MESSAGE = (
    'Failed to create pod sandbox: rpc error: code = Unknown desc = failed to get sandbox '
    'runtime: no runtime for "nvidia" is configured'
)
GLIBC_MESSAGE = (
    "Error: failed to create containerd task: failed to create shim task: OCI runtime create "
    "failed: runc create failed: unable to start container process: error during container "
    "init: error running hook #0: error running hook: exit status 1, stdout: , stderr: "
    "/usr/bin/nvidia-container-cli.real: /lib64/libc.so.6: version `GLIBC_2.27' not found "
    "(required by /usr/bin/nvidia-container-cli.real): unknown"
)
PULL_MESSAGE = (
    'Failed to pull image "{image}": rpc error: code = Unknown desc = failed to pull and unpack '
    'image "{image}": failed to resolve reference "{image}": failed to do request: Head '
    '"https://{registry}/v2/": dial tcp: lookup {registry}: no such host'
)
EVICTION_REFUSED = "Cannot evict pod as it would violate the pod's disruption budget."
CONFLICT_MESSAGE = ('Operation cannot be fulfilled on %s "%s": the object has been modified; '
                    'please apply your changes to the latest version and try again')
OPERAND_LABEL = "nvidia.com/gpu.deploy.%s"
CONTROLLER_TAINTS = ("node.kubernetes.io/not-ready", "node.kubernetes.io/unschedulable")
# The tolerations the DaemonSet controller adds to every DaemonSet pod (pkg/controller/daemon/util).
DAEMONSET_TOLERATIONS = [
    {"key": key, "operator": "Exists", "effect": effect} for key, effect in (
        ("node.kubernetes.io/not-ready", "NoExecute"), ("node.kubernetes.io/unreachable", "NoExecute"),
        ("node.kubernetes.io/disk-pressure", "NoSchedule"), ("node.kubernetes.io/memory-pressure", "NoSchedule"),
        ("node.kubernetes.io/pid-pressure", "NoSchedule"), ("node.kubernetes.io/unschedulable", "NoSchedule"))]
DEVICE_PLUGIN_IMAGE = re.compile(r"(^|/)k8s-device-plugin[:@]")
# kind -> (API path of its collection, namespaced, apiVersion) of the generic object store.
STORED_KINDS = {
    "Namespace": ("namespaces", False, "v1"),
    "ServiceAccount": ("serviceaccounts", True, "v1"),
    "ClusterRole": ("clusterroles", False, "rbac.authorization.k8s.io/v1"),
    "ClusterRoleBinding": ("clusterrolebindings", False, "rbac.authorization.k8s.io/v1"),
    "DaemonSet": ("daemonsets", True, "apps/v1"),
}
# The GPU operator's DaemonSet for each operand label (what `kubectl -n gpu-operator get ds` lists).
OPERAND_DAEMONSETS = {
    "device-plugin": "nvidia-device-plugin-daemonset", "dcgm-exporter": "nvidia-dcgm-exporter",
    "dcgm": "nvidia-dcgm", "container-toolkit": "nvidia-container-toolkit-daemonset",
    "driver": "nvidia-driver-daemonset", "gpu-feature-discovery": "gpu-feature-discovery",
    "operator-validator": "nvidia-operator-validator", "mig-manager": "nvidia-mig-manager",
    "node-status-exporter": "nvidia-node-status-exporter",
}
NOT_READY_MESSAGE = (
    "container runtime network not ready: NetworkReady=false reason:NetworkPluginNotReady "
    "message:Network plugin returns error: cni plugin not initialized; "
    "container runtime is down"
)


def now_iso(at=None):
    stamp = datetime.fromtimestamp(at if at is not None else time.time(), timezone.utc)
    return stamp.strftime("%Y-%m-%dT%H:%M:%SZ")


class Node:
    """One scripted node: its behaviour, GPU count and what GPU feature discovery would label."""

    def __init__(self, name, behaviour="success", gpus=1, driver="550.54.15",
                 runtime="containerd://1.7.24", product="NVIDIA-A100-SXM4-40GB", labels=None, bare=False,
                 taints=None):
        if behaviour not in NODE_BEHAVIOURS:
            raise ValueError("unknown behaviour %r, one of %s" % (behaviour, NODE_BEHAVIOURS))
        self.name = name
        self.behaviour = behaviour
        self.gpus = 0 if behaviour == "cpu" else gpus
        self.driver = driver
        self.runtime = runtime
        self.product = product
        self.labels = dict(labels or {})  # over the discovered ones; None: removed by a patch
        self.annotations = {}
        self.unschedulable = False
        self.ready_override = None         # set_ready(); None: as the behaviour says
        self.extra_allocatable = {}        # set_allocatable(); e.g. {"nvidia.com/gpu": "0"}
        self.resource_version = 1
        self.bare = bare                   # no GPU feature discovery, no device plugin until one runs here
        self.taints = list(taints or [])   # spec.taints as written (registerWithTaints, patches)
        self.device_plugin_running = False  # set by the DaemonSet stand-in for a bare node

    @property
    def allocatable_gpus(self):
        if "nvidia.com/gpu" in self.extra_allocatable:
            return int(self.extra_allocatable["nvidia.com/gpu"])
        if self.bare and not self.device_plugin_running:
            return 0
        return 0 if self.behaviour in ("zero_allocatable", "cpu") else self.gpus

    @property
    def ready(self):
        return self.behaviour != "not_ready" if self.ready_override is None else self.ready_override

    @property
    def is_gpu(self):
        return self.behaviour != "cpu"

    @property
    def unavailable(self):
        return self.unschedulable or not self.ready

    def discovered_labels(self):
        """The labels the kubelet and GPU feature discovery put on the node."""
        labels = {"kubernetes.io/hostname": self.name, "kubernetes.io/os": "linux"}
        if self.behaviour != "cpu" and not self.bare:
            major, minor, rev = (self.driver.split(".") + ["", "", ""])[:3]
            labels.update({
                "nvidia.com/gpu.present": "true",
                "nvidia.com/gpu.count": str(self.gpus),
                "nvidia.com/gpu.product": self.product,
                "nvidia.com/cuda.driver.major": major,
                "nvidia.com/cuda.driver.minor": minor,
                "nvidia.com/cuda.driver.rev": rev,
            })
        return labels

    def to_api(self):
        labels = self.discovered_labels()
        labels.update(self.labels)
        labels = {key: value for key, value in labels.items() if value is not None}
        resources = {"cpu": "8", "memory": "32Gi", "pods": "110"}
        capacity, allocatable = dict(resources), dict(resources)
        if self.behaviour != "cpu" and (self.allocatable_gpus or not self.bare):
            capacity["nvidia.com/gpu"] = str(self.allocatable_gpus)
            allocatable["nvidia.com/gpu"] = str(self.allocatable_gpus)
        capacity.update(self.extra_allocatable)
        allocatable.update(self.extra_allocatable)
        ready = self.ready
        metadata = {"name": self.name, "uid": str(uuid.uuid5(uuid.NAMESPACE_DNS, self.name)),
                    "labels": labels, "creationTimestamp": now_iso(0),
                    "resourceVersion": str(self.resource_version)}
        if self.annotations:
            metadata["annotations"] = dict(self.annotations)
        node = {
            "apiVersion": "v1", "kind": "Node",
            "metadata": metadata,
            "spec": {},
            "status": {
                "capacity": capacity, "allocatable": allocatable,
                "conditions": [{
                    "type": "Ready", "status": "True" if ready else "False",
                    "reason": "KubeletReady" if ready else "KubeletNotReady",
                    "message": "kubelet is posting ready status" if ready else NOT_READY_MESSAGE,
                    "lastHeartbeatTime": now_iso(), "lastTransitionTime": now_iso(0),
                }],
                "nodeInfo": {
                    "containerRuntimeVersion": self.runtime, "kubeletVersion": "v1.30.4",
                    "kubeProxyVersion": "v1.30.4", "operatingSystem": "linux",
                    "architecture": "amd64", "osImage": "Debian GNU/Linux 12 (bookworm)",
                    "kernelVersion": "6.1.0-28-amd64", "machineID": "", "systemUUID": "",
                    "bootID": "",
                },
            },
        }
        taints = [dict(taint) for taint in self.taints]
        if not ready:  # the kubelet's NoSchedule, then the node lifecycle controller's NoExecute
            taints += [{"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"},
                       {"key": "node.kubernetes.io/not-ready", "effect": "NoExecute"}]
        if self.unschedulable:
            node["spec"]["unschedulable"] = True
            taints.append({"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"})
        if taints:
            node["spec"]["taints"] = taints
        return node


class _Pod:
    def __init__(self, namespace, body, created):
        self.body = body
        self.namespace = namespace
        self.created = created
        self.events_posted = False

    @property
    def name(self):
        return self.body["metadata"]["name"]


class _Pdb:
    """A PodDisruptionBudget reduced to what the Eviction API decides with."""

    def __init__(self, namespace, name, selector, disruptions_allowed, refuse_first):
        self.namespace, self.name, self.selector = namespace, name, dict(selector)
        self.allowed = None if disruptions_allowed == "never" else int(disruptions_allowed)
        self.refuse_first = refuse_first
        self.uid = str(uuid.uuid4())

    def covers(self, labels):
        return all(labels.get(key) == value for key, value in self.selector.items())

    def allowed_now(self):
        return 0 if self.refuse_first or not self.allowed else self.allowed

    def take(self):
        """One eviction against the budget: True (and one disruption used) or False (refused)."""
        if self.refuse_first:
            self.refuse_first -= 1
            return False
        if not self.allowed:
            return False
        self.allowed -= 1
        return True


def _label_selector_matches(selector, labels):
    for term in filter(None, (t.strip() for t in (selector or "").split(","))):
        if "!=" in term:
            key, value = term.split("!=", 1)
            if labels.get(key) == value:
                return False
        elif "=" in term:
            key, value = term.replace("==", "=").split("=", 1)
            if labels.get(key) != value:
                return False
        elif term.startswith("!"):
            if term[1:] in labels:
                return False
        elif term not in labels:
            return False
    return True


def _field_selector(selector):
    pairs = {}
    for term in filter(None, (t.strip() for t in (selector or "").split(","))):
        key, _unused, value = term.replace("==", "=").partition("=")
        pairs[key] = value
    return pairs


class _Server(ThreadingHTTPServer):
    request_queue_size = 256  # hundreds of clients connect at once in the benchmarks (the default 5 resets them)


class KubeApiStandin:
    """The stand-in API server; see the module docstring for the scenario API."""

    def __init__(self, nodes=(), pod_seconds=1.0, token=None, runtimeclasses=None):
        self.nodes = {}
        for node in nodes:
            node = Node(node, "cpu") if isinstance(node, str) else node
            self.nodes[node.name] = node
        self.pod_seconds = pod_seconds
        self.token = token
        self.runtimeclasses = {}
        for name, handler in (runtimeclasses or {}).items():
            self._store_runtimeclass({"metadata": {"name": name}, "handler": handler})
        self.pods = {}          # (namespace, name) -> _Pod
        self.events = []        # event objects (dicts)
        self.requests = []      # (time, method, path)
        self.conflicts = 0      # writes answered 409 Conflict (a stale resourceVersion)
        self.pods_created = []  # (namespace, name) in creation order
        self.created_pod_bodies = {}  # (namespace, name) -> the body as the client sent it
        self.pods_deleted = []
        self.peak_pods = 0      # most pods that existed at one time: parallel clients show >1
        self.revision = 1       # the cluster-wide counter resourceVersions come from, as etcd's
        self.pdbs = {}          # (namespace, name) -> _Pdb
        self.evictions = []     # (namespace, name) evicted, in order
        self.evictions_refused = []  # (namespace, name, pdb name) answered 429
        self.eviction_grace = 0.0    # seconds an evicted pod stays terminating before it is gone
        self.leases = {}        # (namespace, name) -> Lease body
        self.operands = {}      # node name -> {operand: namespace} of seeded operator DaemonSet pods
        self.unavailable_timeline = []  # (monotonic time, GPU nodes unschedulable or NotReady)
        self.taint_timeline = []  # (time.time() as in requests, node, [taint keys=values]) per node change
        self.configmaps = {}    # (namespace, name) -> ConfigMap body
        self.mig_managers = {}  # node name -> the state the MIG manager reports for a new nvidia.com/mig.config
        self.peak_unavailable = 0
        self.objects = {}       # (kind, namespace or None, name) -> body, for STORED_KINDS
        for namespace in ("default", "kube-system", "kube-public", "kube-node-lease"):
            self.store_object("Namespace", None, {"metadata": {"name": namespace}})
        self.operand_start_seconds = 0  # a recreated operand pod is Pending this long; None: it never runs
        self.lock = threading.RLock()
        self.server = None
        self.thread = None

    # ---- lifecycle -------------------------------------------------------
    def start(self):
        standin = self

        class Handler(_Handler):
            api = standin

        self.server = _Server(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        return self

    def stop(self):
        if self.server:
            self.server.shutdown()
            self.server.server_close()
            self.server = None

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()

    @property
    def url(self):
        return "http://127.0.0.1:%d" % self.server.server_address[1]

    def write_kubeconfig(self, path, context="standin", namespace="default"):
        write_kubeconfig(path, self.url, token=self.token, context=context, namespace=namespace)
        return path

    # ---- seeding -----------------------------------------------------------
    def add_pod(self, namespace, body):
        body = copy.deepcopy(body)
        body.setdefault("apiVersion", "v1")
        body.setdefault("kind", "Pod")
        body.setdefault("metadata", {}).setdefault("namespace", namespace)
        body["metadata"].setdefault("uid", str(uuid.uuid4()))
        body["metadata"].setdefault("creationTimestamp", now_iso())
        body.setdefault("status", {"phase": "Pending"})
        pod = _Pod(namespace, body, time.time())
        pod.seeded = True
        with self.lock:
            self.pods[(namespace, pod.name)] = pod
        return body

    def add_event(self, namespace, object_name, type_, reason, message, kind="Pod", count=1):
        event = {
            "apiVersion": "v1", "kind": "Event",
            "metadata": {"name": "%s.%s" % (object_name, uuid.uuid4().hex[:12]),
                         "namespace": namespace},
            "involvedObject": {"kind": kind, "name": object_name, "namespace": namespace},
            "type": type_, "reason": reason, "message": message, "count": count,
            "firstTimestamp": now_iso(), "lastTimestamp": now_iso(),
            "source": {"component": "kubelet"},
        }
        with self.lock:
            self.events.append(event)
        return event

    def add_gpu_pod(self, namespace, name, node, gpus=1, resource="nvidia.com/gpu", labels=None,
                    claims=None, owner_kind="ReplicaSet", phase="Running"):
        """A workload pod running on `node` that requests `gpus` of `resource`, or holds DRA `claims`."""
        limits = {resource: str(gpus)} if gpus else {}
        spec = {"nodeName": node, "containers": [{"name": "main", "image": "cuda:12",
                                                  "resources": {"limits": limits}}]}
        if claims:
            spec["resourceClaims"] = [{"name": claim, "resourceClaimName": claim} for claim in claims]
        metadata = {"name": name, "labels": dict(labels or {"app": name})}
        if owner_kind:
            metadata["ownerReferences"] = [{"apiVersion": "apps/v1", "kind": owner_kind, "name": name + "-owner",
                                            "uid": str(uuid.uuid4()), "controller": True}]
        return self.add_pod(namespace, {"metadata": metadata, "spec": spec,
                                        "status": {"phase": phase, "hostIP": "10.0.0.1"}})

    def add_pdb(self, namespace, name, selector, disruptions_allowed=1, refuse_first=0):
        """A policy/v1 PodDisruptionBudget over pods matching `selector` (dict of matchLabels or "k=v,...").

        `disruptions_allowed`: how many evictions it allows in all, or "never"; `refuse_first`: answer the
        first N evictions it covers with 429 all the same (a budget that frees up later)."""
        if isinstance(selector, str):
            selector = dict(term.split("=", 1) for term in selector.split(","))
        with self.lock:
            self.pdbs[(namespace, name)] = _Pdb(namespace, name, selector, disruptions_allowed, refuse_first)

    def add_operands(self, node, operands=("device-plugin", "dcgm-exporter"), namespace="gpu-operator"):
        """GPU operator DaemonSet pods on `node`, following its `nvidia.com/gpu.deploy.<operand>` labels."""
        with self.lock:
            target = self.nodes[node]
            for operand in operands:
                target.labels[OPERAND_LABEL % operand] = "true"
                self.operands.setdefault(node, {})[operand] = namespace
            self._reconcile_operands(target)

    def operand_pods(self, node):
        """Names of the operator DaemonSet pods now on `node`."""
        with self.lock:
            return sorted(name for (ns, name), pod in self.pods.items()
                          if getattr(pod, "operand", None) and pod.body["spec"].get("nodeName") == node)

    def set_ready(self, name, ready):
        """The node's kubelet goes NotReady (with the real condition and taints) or comes back."""
        with self.lock:
            self.nodes[name].ready_override = bool(ready)
            self._node_changed(self.nodes[name])

    def set_allocatable(self, name, resource, count):
        """What the node's device plugin advertises now (e.g. "0" while it is paused)."""
        with self.lock:
            self.nodes[name].extra_allocatable[resource] = str(count)
            self._node_changed(self.nodes[name])

    def node(self, name):
        """The Node object as a client would read it now."""
        with self.lock:
            return self.nodes[name].to_api()

    @property
    def write_requests(self):
        """Every request that could change something (all but GET)."""
        with self.lock:
            return [request for request in self.requests if request[1] != "GET"]

    # ---- objects -----------------------------------------------------------
    def next_revision(self):
        self.revision += 1
        return self.revision

    def update_node(self, name, wanted):
        """Store a node object as a PUT or a patch left it: labels, annotations, spec.unschedulable."""
        node = self.nodes[name]
        discovered = node.discovered_labels()
        labels = wanted.get("metadata", {}).get("labels") or {}
        node.labels = {key: value for key, value in labels.items() if discovered.get(key) != value}
        node.labels.update({key: None for key in discovered if key not in labels})
        node.annotations = dict(wanted.get("metadata", {}).get("annotations") or {})
        node.unschedulable = bool((wanted.get("spec") or {}).get("unschedulable"))
        # The kubelet's and the node controller's own taints follow Ready and unschedulable, not the writer.
        node.taints = [taint for taint in (wanted.get("spec") or {}).get("taints") or []
                       if taint.get("key") not in CONTROLLER_TAINTS]
        self._node_changed(node)
        return node.to_api()

    def mig_manager(self, node, outcome="success"):
        self.mig_managers[node] = outcome

    def _node_changed(self, node):
        node.resource_version = self.next_revision()
        self.taint_timeline.append((time.time(), node.name, ["%s=%s" % (t["key"], t.get("value", "")) for t in node.taints]))
        self._reconcile_operands(node)
        self._reconcile_mig_config(node)
        unavailable = sum(1 for n in self.nodes.values() if n.is_gpu and n.unavailable)
        self.unavailable_timeline.append((time.monotonic(), unavailable))
        self.peak_unavailable = max(self.peak_unavailable, unavailable)

    def _reconcile_mig_config(self, node):
        """As the operator's MIG manager: a node whose nvidia.com/mig.config changed reports the outcome."""
        outcome = self.mig_managers.get(node.name)
        wanted = node.labels.get("nvidia.com/mig.config")
        if outcome and wanted and node.labels.get("nvidia.com/mig.config.applied") != wanted:
            node.labels.update({"nvidia.com/mig.config.state": outcome, "nvidia.com/mig.config.applied": wanted})

    def _reconcile_operands(self, node):
        """As the operator's DaemonSets do: a pod where the deploy label is "true", none elsewhere."""
        labels = node.to_api()["metadata"]["labels"]
        for operand, namespace in self.operands.get(node.name, {}).items():
            key = (namespace, "%s-%s" % (OPERAND_DAEMONSETS.get(operand, "nvidia-" + operand), node.name))
            wanted = labels.get(OPERAND_LABEL % operand) == "true"
            if wanted and key not in self.pods:
                self._seed_operand_pod(key, operand, node.name)
            elif not wanted and key in self.pods:
                self.pods.pop(key)
                self.pods_deleted.append(key)

    def _seed_operand_pod(self, key, operand, node):
        namespace, name = key
        daemonset = OPERAND_DAEMONSETS.get(operand, "nvidia-" + operand)
        self.add_pod(namespace, {
            "metadata": {"name": name, "labels": {"app": daemonset},
                         "ownerReferences": [{"apiVersion": "apps/v1", "kind": "DaemonSet", "name": daemonset,
                                              "uid": str(uuid.uuid5(uuid.NAMESPACE_DNS, daemonset)),
                                              "controller": True}]},
            "spec": {"nodeName": node, "containers": [{"name": operand, "image": "nvcr.io/nvidia/" + operand}],
                     "tolerations": [{"key": "node.kubernetes.io/unschedulable", "operator": "Exists",
                                      "effect": "NoSchedule"}]},
            "status": {"phase": "Running"}})
        self.pods[key].operand = operand
        self.pods[key].starts_after = self.operand_start_seconds

    # ---- stored objects and the DaemonSet controller -------------------------
    def add_daemonset(self, namespace, body):
        """Seed a DaemonSet (and its namespace), e.g. the GPU operator's; its pods follow as for any other."""
        with self.lock:
            if ("Namespace", None, namespace) not in self.objects:
                self.store_object("Namespace", None, {"metadata": {"name": namespace}})
            return self.store_object("DaemonSet", namespace, body)

    def store_object(self, kind, namespace, body):
        """Store BODY as the API server would: apiVersion, kind, uid, creationTimestamp, a new resourceVersion."""
        _path, _namespaced, api_version = STORED_KINDS[kind]
        body = copy.deepcopy(body)
        body.update({"apiVersion": api_version, "kind": kind})
        meta = body.setdefault("metadata", {})
        key = (kind, namespace, meta["name"])
        previous = self.objects.get(key, {}).get("metadata", {})
        meta.update({"uid": previous.get("uid") or str(uuid.uuid4()),
                     "creationTimestamp": previous.get("creationTimestamp") or now_iso(),
                     "resourceVersion": str(self.next_revision())})
        if namespace is not None:
            meta["namespace"] = namespace
        if kind == "Namespace":
            body["status"] = {"phase": "Active"}
        if kind == "DaemonSet":
            meta["generation"] = previous.get("generation", 0) + 1
            self._delete_daemonset_pods(namespace, meta["name"])  # a new template rolls every pod
        self.objects[key] = body
        return copy.deepcopy(body)

    def _delete_daemonset_pods(self, namespace, name):
        for key, pod in list(self.pods.items()):
            if getattr(pod, "daemonset", None) == (namespace, name):
                self.pods.pop(key)
                self.pods_deleted.append(key)

    def reconcile_daemonsets(self):
        """As the DaemonSet controller and the kubelet: a pod of each DaemonSet on every node it selects and
        tolerates, none elsewhere; a bare node advertises GPUs while a device plugin pod runs on it."""
        plugin_nodes = set()
        for (kind, namespace, name), daemonset in list(self.objects.items()):
            if kind != "DaemonSet":
                continue
            template = daemonset["spec"]["template"]
            spec = template.get("spec") or {}
            runtime_class = spec.get("runtimeClassName")
            scheduled = 0
            for node in self.nodes.values():
                key = (namespace, "%s-%s" % (name, node.name))
                wanted = (_label_selector_matches(",".join("%s=%s" % kv for kv in (spec.get("nodeSelector") or {})
                                                           .items()), node.to_api()["metadata"]["labels"])
                          and not _untolerated(template, node.taints, DAEMONSET_TOLERATIONS))
                if wanted and runtime_class and runtime_class not in self.runtimeclasses:
                    if key not in self.pods and not any(e["involvedObject"]["name"] == name for e in self.events):
                        self.add_event(namespace, name, "Warning", "FailedCreate", (
                            'Error creating: pods "%s-" is forbidden: pod rejected: RuntimeClass "%s" not found'
                            % (name, runtime_class)), kind="DaemonSet")
                    wanted = False
                if wanted and key not in self.pods:
                    self._seed_daemonset_pod(key, (namespace, name), daemonset, node.name)
                elif not wanted and key in self.pods:
                    self.pods.pop(key)
                    self.pods_deleted.append(key)
                if wanted:
                    scheduled += 1
                    images = [c.get("image", "") for c in spec.get("containers") or []]
                    if any(DEVICE_PLUGIN_IMAGE.search(image) for image in images):
                        plugin_nodes.add(node.name)
            daemonset["status"] = {"desiredNumberScheduled": scheduled, "currentNumberScheduled": scheduled,
                                   "numberReady": scheduled, "numberAvailable": scheduled, "numberMisscheduled": 0,
                                   "updatedNumberScheduled": scheduled,
                                   "observedGeneration": daemonset["metadata"]["generation"]}
        for node in self.nodes.values():
            if node.bare and node.device_plugin_running != (node.name in plugin_nodes):
                node.device_plugin_running = node.name in plugin_nodes
                node.resource_version = self.next_revision()

    def _seed_daemonset_pod(self, key, daemonset_key, daemonset, node):
        template = copy.deepcopy(daemonset["spec"]["template"])
        spec = template.get("spec") or {}
        spec["nodeName"] = node
        spec["tolerations"] = list(spec.get("tolerations") or []) + DAEMONSET_TOLERATIONS
        meta = dict(template.get("metadata") or {}, name=key[1], ownerReferences=[{
            "apiVersion": "apps/v1", "kind": "DaemonSet", "name": daemonset_key[1],
            "uid": daemonset["metadata"]["uid"], "controller": True}])
        self.add_pod(key[0], {"metadata": meta, "spec": spec, "status": {"phase": "Running", "hostIP": "10.0.0.1"}})
        self.pods[key].daemonset = daemonset_key

    def evict(self, namespace, name):
        """(code, Status body) of an eviction, as the Eviction API answers it."""
        pod = self.pods.get((namespace, name))
        if pod is None:
            return 404, _status_body(404, "NotFound", 'pods "%s" not found' % name)
        if pod.body["metadata"].get("deletionTimestamp"):
            return 201, _success_body()
        labels = pod.body["metadata"].get("labels") or {}
        budgets = [b for b in self.pdbs.values() if b.namespace == namespace and b.covers(labels)]
        if len(budgets) > 1:
            return 500, _status_body(500, "InternalError", (
                "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support."))
        running = self.pod_view(pod)["status"].get("phase") == "Running"
        if budgets and running and not budgets[0].take():
            self.evictions_refused.append((namespace, name, budgets[0].name))
            healthy = self._healthy(budgets[0])
            return 429, dict(_status_body(429, "TooManyRequests", EVICTION_REFUSED), details={"causes": [{
                "reason": "DisruptionBudget",
                "message": "The disruption budget %s needs %d healthy pods and has %d currently" % (
                    budgets[0].name, healthy, healthy)}]})
        self.evictions.append((namespace, name))
        self._delete_gracefully(pod)
        return 201, _success_body()

    def _healthy(self, budget):
        return sum(1 for pod in self.pods.values()
                   if pod.namespace == budget.namespace and budget.covers(pod.body["metadata"].get("labels") or {}))

    def _delete_gracefully(self, pod):
        if self.eviction_grace <= 0:
            self.pods.pop((pod.namespace, pod.name), None)
            self.pods_deleted.append((pod.namespace, pod.name))
            return
        pod.body["metadata"]["deletionTimestamp"] = now_iso()
        pod.body["metadata"]["deletionGracePeriodSeconds"] = int(self.eviction_grace)
        pod.gone_at = time.time() + self.eviction_grace

    def purge_terminated(self):
        """Terminating pods whose grace period is over are gone."""
        for key, pod in list(self.pods.items()):
            if getattr(pod, "gone_at", None) and pod.gone_at <= time.time():
                self.pods.pop(key)
                self.pods_deleted.append(key)

    def budget_view(self, budget):
        healthy = self._healthy(budget)
        allowed = budget.allowed_now()
        return {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
                "metadata": {"name": budget.name, "namespace": budget.namespace, "uid": budget.uid,
                             "resourceVersion": "1", "generation": 1, "creationTimestamp": now_iso(0)},
                "spec": {"selector": {"matchLabels": dict(budget.selector)}, "maxUnavailable": allowed},
                "status": {"currentHealthy": healthy, "desiredHealthy": max(healthy - allowed, 0),
                           "disruptionsAllowed": allowed, "expectedPods": healthy, "observedGeneration": 1}}

    def _store_runtimeclass(self, body):
        body = copy.deepcopy(body)
        body.update({"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass"})
        body["metadata"].setdefault("uid", str(uuid.uuid4()))
        body["metadata"].setdefault("creationTimestamp", now_iso())
        self.runtimeclasses[body["metadata"]["name"]] = body
        return body

    def create_pod(self, namespace, body):
        meta = body.setdefault("metadata", {})
        if not meta.get("name"):
            meta["name"] = meta.get("generateName", "pod-") + uuid.uuid4().hex[:5]
        key = (namespace, meta["name"])
        with self.lock:
            if key in self.pods:
                return None
            meta.update({"namespace": namespace, "uid": str(uuid.uuid4()),
                         "creationTimestamp": now_iso(), "resourceVersion": "1"})
            body.update({"apiVersion": "v1", "kind": "Pod", "status": {"phase": "Pending"}})
            self.created_pod_bodies[key] = copy.deepcopy(body)
            self.pods[key] = _Pod(namespace, body, time.time())
            self.pods_created.append(key)
            self.peak_pods = max(self.peak_pods, self._created_pods_alive())
        return body

    def _created_pods_alive(self):
        return sum(1 for pod in self.pods.values() if not getattr(pod, "seeded", False))

    def node_of(self, pod_body):
        spec = pod_body.get("spec", {})
        if spec.get("nodeName"):
            return self.nodes.get(spec["nodeName"])
        wanted = (spec.get("nodeSelector") or {})
        for node in self.nodes.values():
            if _label_selector_matches(",".join("%s=%s" % kv for kv in wanted.items()),
                                       node.to_api()["metadata"]["labels"]):
                return node
        return None

    def pod_view(self, pod):
        """The pod as the API would show it now: status computed from age and node behaviour."""
        body = copy.deepcopy(pod.body)
        starts_after = getattr(pod, "starts_after", 0)
        if starts_after is None or time.time() - pod.created < starts_after:  # an operand pod not started yet
            name, image = _container_name(pod)
            body["status"] = {"phase": "Pending", "containerStatuses": [
                _waiting(name, image, "CrashLoopBackOff" if starts_after is None else "ContainerCreating", "")]}
        if getattr(pod, "seeded", False):
            return body
        node = self.node_of(body)
        status, events, log = _scripted_status(self, pod, node, time.time() - pod.created)
        body["status"] = status
        if "hostIP" in status:  # scheduled: the scheduler binds the pod to its node
            body["spec"].setdefault("nodeName", node.name)
        pod.log = log
        if events and not pod.events_posted:
            pod.events_posted = True
            for type_, reason, message in events:
                self.add_event(pod.namespace, pod.name, type_, reason, message)
        return body


def _container_name(pod):
    containers = pod.body.get("spec", {}).get("containers") or [{"name": "main"}]
    return containers[0].get("name", "main"), containers[0].get("image", "")


def _scripted_status(api, pod, node, age):
    """(status, events to post once, log) for a created pod of `age` seconds on `node`."""
    name, image = _container_name(pod)
    started = now_iso(pod.created)
    condition = {"type": "PodScheduled", "status": "True", "lastTransitionTime": started}
    if node is None:
        message = "0/%d nodes are available: %d node(s) didn't match Pod's node affinity/selector." % (
            len(api.nodes), len(api.nodes))
        return _unschedulable(started, message), [("Warning", "FailedScheduling", message)], ""
    behaviour = node.behaviour
    requested = int(((pod.body["spec"]["containers"][0].get("resources") or {}).get("limits") or {})
                    .get("nvidia.com/gpu", 0))
    if not node.ready:
        message = _scheduler_message(api, "1 node(s) had untolerated taint {node.kubernetes.io/not-ready: }")
        return _unschedulable(started, message), [("Warning", "FailedScheduling", message)], ""
    if node.unschedulable and not _tolerates(pod.body, "node.kubernetes.io/unschedulable"):
        message = _scheduler_message(api, "1 node(s) were unschedulable")
        return _unschedulable(started, message), [("Warning", "FailedScheduling", message)], ""
    untolerated = _untolerated(pod.body, node.taints)
    if untolerated:
        message = _scheduler_message(api, "1 node(s) had untolerated taint {%s: %s}" % (
            untolerated["key"], untolerated.get("value", "")))
        return _unschedulable(started, message), [("Warning", "FailedScheduling", message)], ""
    if requested > node.allocatable_gpus:
        message = _scheduler_message(api, "1 Insufficient nvidia.com/gpu")
        return _unschedulable(started, message), [("Warning", "FailedScheduling", message)], ""
    base = {"phase": "Pending", "conditions": [condition], "hostIP": "10.0.0.%d" % (
        1 + sorted(api.nodes).index(node.name)), "startTime": started}
    scheduled = ("Normal", "Scheduled", "Successfully assigned %s/%s to %s" % (
        pod.namespace, pod.name, node.name))
    if behaviour == "no_runtime":
        base["containerStatuses"] = [_waiting(name, image, "ContainerCreating", "")]
        return base, [scheduled, ("Warning", "FailedCreatePodSandBox", NO_RUNTIME_MESSAGE)], ""
    if behaviour == "glibc":
        base["containerStatuses"] = [_waiting(name, image, "RunContainerError", GLIBC_MESSAGE)]
        return base, [scheduled, ("Warning", "Failed", GLIBC_MESSAGE)], ""
    if behaviour == "image_pull":
        registry = image.split("/")[0] if "/" in image else "registry-1.docker.io"
        message = PULL_MESSAGE.format(image=image, registry=registry)
        reason = "ErrImagePull" if age < api.pod_seconds else "ImagePullBackOff"
        base["containerStatuses"] = [_waiting(name, image, reason, message)]
        return base, [scheduled, ("Warning", "Failed", message),
                      ("Warning", "Failed", "Error: ErrImagePull")], ""
    running_at = api.pod_seconds * 0.3
    pulled = [scheduled, ("Normal", "Pulled", 'Container image "%s" already present on machine' % image),
              ("Normal", "Created", "Created container %s" % name),
              ("Normal", "Started", "Started container %s" % name)]
    if age < running_at:
        base["containerStatuses"] = [_waiting(name, image, "ContainerCreating", "")]
        return base, [], ""
    if behaviour == "hang" or age < api.pod_seconds:
        base["phase"] = "Running"
        base["containerStatuses"] = [_state(name, image, {"running": {"startedAt": started}})]
        return base, pulled, SUCCESS_LOG.split("Test PASSED", 1)[0]
    failed = behaviour == "cuda_fail"
    base["phase"] = "Failed" if failed else "Succeeded"
    base["containerStatuses"] = [_state(name, image, {"terminated": {
        "exitCode": 1 if failed else 0, "reason": "Error" if failed else "Completed",
        "startedAt": started, "finishedAt": now_iso()}})]
    return base, pulled, CUDA_FAIL_LOG if failed else SUCCESS_LOG


def _tolerates(body, key):
    return any(t.get("key") == key or (not t.get("key") and t.get("operator") == "Exists")
               for t in body.get("spec", {}).get("tolerations") or [])


def _toleration_matches(toleration, taint):
    """As the scheduler (k8s.io/api core/v1 Toleration.ToleratesTaint)."""
    if toleration.get("effect") and toleration["effect"] != taint.get("effect"):
        return False
    if toleration.get("key") and toleration["key"] != taint.get("key"):
        return False
    if not toleration.get("key") and toleration.get("operator") != "Exists":
        return False
    if toleration.get("operator") == "Exists":
        return True
    return (toleration.get("value") or "") == (taint.get("value") or "")


def _untolerated(body, taints, extra=()):
    """The first NoSchedule/NoExecute taint the pod does not tolerate, or None."""
    tolerations = list((body.get("spec") or {}).get("tolerations") or []) + list(extra)
    for taint in taints:
        if taint.get("effect") in ("NoSchedule", "NoExecute") and not any(
                _toleration_matches(t, taint) for t in tolerations):
            return taint
    return None


def _scheduler_message(api, reason):
    others = len(api.nodes) - 1
    if others:
        reason += ", %d node(s) didn't match Pod's node affinity/selector" % others
    return "0/%d nodes are available: %s." % (len(api.nodes), reason)


def _unschedulable(started, message):
    return {"phase": "Pending", "conditions": [{
        "type": "PodScheduled", "status": "False", "reason": "Unschedulable",
        "message": message, "lastTransitionTime": started}]}


def _waiting(name, image, reason, message):
    state = {"waiting": {"reason": reason}}
    if message:
        state["waiting"]["message"] = message
    return _state(name, image, state)


def _state(name, image, state):
    return {"name": name, "image": image, "imageID": "", "ready": False, "restartCount": 0,
            "started": "running" in state, "state": state}


def _status_body(code, reason, message):
    return {"apiVersion": "v1", "kind": "Status", "status": "Failure", "code": code,
            "reason": reason, "message": message, "metadata": {}}


def _success_body():
    return {"apiVersion": "v1", "kind": "Status", "status": "Success", "code": 201, "metadata": {}}


def _conflict(resource, name):
    return dict(_status_body(409, "Conflict", CONFLICT_MESSAGE % (resource, name)),
                details={"name": name, "kind": resource.split(".")[0]})


def _list(kind, items, api_version="v1"):
    return {"apiVersion": api_version, "kind": kind, "metadata": {"resourceVersion": "1"}, "items": items}


def _merge_patch(target, patch):
    """RFC 7386 merge patch (for labels, annotations and spec fields also what a strategic merge does)."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = _merge_patch(result.get(key), value)
    return result


class PatchTestFailed(Exception):
    pass


def _json_patch(target, operations):
    """RFC 6902 JSON patch: add, replace, remove, test (the operations clients send for these objects)."""
    result = copy.deepcopy(target)
    for operation in operations:
        parts = [p.replace("~1", "/").replace("~0", "~") for p in operation["path"].lstrip("/").split("/")]
        parent = result
        for part in parts[:-1]:
            parent = parent.setdefault(part, {})
        last, op = parts[-1], operation["op"]
        if op == "test":
            if parent.get(last) != operation.get("value"):
                raise PatchTestFailed(operation["path"])
        elif op == "remove":
            if last not in parent:
                raise PatchTestFailed(operation["path"])
            del parent[last]
        elif op in ("add", "replace"):
            parent[last] = copy.deepcopy(operation["value"])
    return result


def _apply_patch(content_type, current, patch):
    if (content_type or "").startswith("application/json-patch+json"):
        return _json_patch(current, patch)
    return _merge_patch(current, patch)


def _stale(wanted, current):
    """True when the body names a resourceVersion other than the stored one (optimistic concurrency)."""
    version = (wanted.get("metadata") or {}).get("resourceVersion")
    return bool(version) and str(version) != current["metadata"]["resourceVersion"]


def _field_selector_matches(selector, obj):
    for term in filter(None, (t.strip() for t in (selector or "").split(","))):
        negate = "!=" in term
        key, value = term.split("!=" if negate else "=", 1)
        if (_dig(obj, key.split(".")) == value.lstrip("=")) == negate:
            return False
    return True


class _Handler(BaseHTTPRequestHandler):
    api = None  # set by KubeApiStandin.start
    protocol_version = "HTTP/1.1"
    # Headers and body go out in two writes: without TCP_NODELAY, Nagle's algorithm and the
    # client's delayed ACK add ~40 ms to every keep-alive request (a Go apiserver has no such delay).
    disable_nagle_algorithm = True

    def log_message(self, *args):  # quiet: tests read api.requests instead
        pass

    def _send(self, code, body, content_type="application/json"):
        if code == 409:
            with self.api.lock:
                self.api.conflicts += 1
        data = body.encode() if isinstance(body, str) else json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _not_found(self, what, name):
        self._send(404, _status_body(404, "NotFound", '%s "%s" not found' % (what, name)))

    def _body(self):
        length = int(self.headers.get("Content-Length") or 0)
        return json.loads(self.rfile.read(length) or b"{}") if length else {}

    def _dispatch(self, method):
        url = urlsplit(self.path)
        query = {k: v[0] for k, v in parse_qs(url.query).items()}
        with self.api.lock:
            self.api.requests.append((time.time(), method, url.path))
        if self.api.token and self.headers.get("Authorization") != "Bearer " + self.api.token:
            return self._send(401, _status_body(401, "Unauthorized", "Unauthorized"))
        with self.api.lock:
            self.api.purge_terminated()
            self.api.reconcile_daemonsets()
        for pattern, handler in ROUTES:
            match = re.fullmatch(pattern, url.path)
            if match and handler[0] == method:
                return handler[1](self, query, self._body() if method in ("POST", "PUT", "PATCH") else None,
                                  **match.groupdict())
        self._send(404, _status_body(404, "NotFound", "the server could not find the requested resource"))

    def do_GET(self):
        self._dispatch("GET")

    def do_POST(self):
        self._dispatch("POST")

    def do_DELETE(self):
        self._dispatch("DELETE")

    def do_PUT(self):
        self._dispatch("PUT")

    def do_PATCH(self):
        self._dispatch("PATCH")

    # ---- routes ------------------------------------------------------------
    def version(self, query, body):
        self._send(200, {"major": "1", "minor": "30", "gitVersion": "v1.30.4-standin",
                         "gitCommit": "0" * 40, "gitTreeState": "clean",
                         "buildDate": "2024-08-14T19:00:00Z", "goVersion": "go1.22.5",
                         "compiler": "gc", "platform": "linux/amd64"})

    def list_nodes(self, query, body):
        items = [n.to_api() for n in self.api.nodes.values()]
        items = [n for n in items
                 if _label_selector_matches(query.get("labelSelector"), n["metadata"]["labels"])]
        self._send(200, _list("NodeList", items))

    def get_node(self, query, body, name):
        node = self.api.nodes.get(name)
        if node is None:
            return self._not_found("nodes", name)
        self._send(200, node.to_api())

    def replace_node(self, query, body, name):
        self._write_node(name, lambda current: body)

    def patch_node(self, query, body, name):
        content_type = self.headers.get("Content-Type")
        self._write_node(name, lambda current: _apply_patch(content_type, current, body))

    def _write_node(self, name, wanted_from):
        with self.api.lock:
            node = self.api.nodes.get(name)
            if node is None:
                return self._not_found("nodes", name)
            current = node.to_api()
            try:
                wanted = wanted_from(current)
            except PatchTestFailed as exc:
                return self._send(422, _status_body(422, "Invalid", "the server rejected our request due to an "
                                                    "error in our request: test failed at %s" % exc))
            if _stale(wanted, current):
                return self._send(409, _conflict("nodes", name))
            self._send(200, self.api.update_node(name, wanted))

    def evict_pod(self, query, body, ns, name):
        with self.api.lock:
            code, status = self.api.evict(ns, name)
        self._send(code, status)

    def list_pdbs(self, query, body, ns=None):
        with self.api.lock:
            items = [self.api.budget_view(b) for b in self.api.pdbs.values() if ns is None or b.namespace == ns]
        self._send(200, _list("PodDisruptionBudgetList", items, "policy/v1"))

    def list_leases(self, query, body, ns):
        with self.api.lock:
            items = [copy.deepcopy(v) for (lease_ns, _n), v in self.api.leases.items() if lease_ns == ns]
        self._send(200, _list("LeaseList", items, "coordination.k8s.io/v1"))

    def create_lease(self, query, body, ns):
        name = (body.get("metadata") or {}).get("name")
        with self.api.lock:
            if (ns, name) in self.api.leases:
                return self._send(409, dict(_status_body(
                    409, "AlreadyExists", 'leases.coordination.k8s.io "%s" already exists' % name),
                    details={"name": name, "group": "coordination.k8s.io", "kind": "leases"}))
            self._send(201, self._store_lease(ns, name, body))

    def _store_lease(self, ns, name, body):
        body = copy.deepcopy(body)
        body.update({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease"})
        meta = body.setdefault("metadata", {})
        previous = self.api.leases.get((ns, name), {}).get("metadata", {})
        meta.update({"name": name, "namespace": ns, "resourceVersion": str(self.api.next_revision()),
                     "uid": previous.get("uid") or str(uuid.uuid4()),
                     "creationTimestamp": previous.get("creationTimestamp") or now_iso()})
        self.api.leases[(ns, name)] = body
        return copy.deepcopy(body)

    def list_configmaps(self, query, body, ns):
        with self.api.lock:
            items = [copy.deepcopy(v) for (cm_ns, _n), v in self.api.configmaps.items() if cm_ns == ns]
        self._send(200, _list("ConfigMapList", items))

    def create_configmap(self, query, body, ns):
        name = (body.get("metadata") or {}).get("name")
        with self.api.lock:
            if (ns, name) in self.api.configmaps:
                return self._send(409, dict(_status_body(409, "AlreadyExists", 'configmaps "%s" already exists' % name),
                                            details={"name": name, "kind": "configmaps"}))
            self._send(201, self._store_configmap(ns, name, body))

    def get_configmap(self, query, body, ns, name):
        with self.api.lock:
            found = copy.deepcopy(self.api.configmaps.get((ns, name)))
        if found is None:
            return self._not_found("configmaps", name)
        self._send(200, found)

    def patch_configmap(self, query, body, ns, name):
        content_type = self.headers.get("Content-Type")
        with self.api.lock:
            current = self.api.configmaps.get((ns, name))
            if current is None:
                return self._not_found("configmaps", name)
            self._send(200, self._store_configmap(ns, name, _apply_patch(content_type, copy.deepcopy(current), body)))

    def _store_configmap(self, ns, name, body):
        body = copy.deepcopy(body)
        body.update({"apiVersion": "v1", "kind": "ConfigMap"})
        body.setdefault("metadata", {}).update({"name": name, "namespace": ns,
                                                "resourceVersion": str(self.api.next_revision())})
        self.api.configmaps[(ns, name)] = body
        return copy.deepcopy(body)

    def get_lease(self, query, body, ns, name):
        with self.api.lock:
            found = copy.deepcopy(self.api.leases.get((ns, name)))
        if found is None:
            return self._not_found("leases.coordination.k8s.io", name)
        self._send(200, found)

    def replace_lease(self, query, body, ns, name):
        self._write_lease(ns, name, lambda current: body)

    def patch_lease(self, query, body, ns, name):
        content_type = self.headers.get("Content-Type")
        self._write_lease(ns, name, lambda current: _apply_patch(content_type, current, body))

    def _write_lease(self, ns, name, wanted_from):
        with self.api.lock:
            current = self.api.leases.get((ns, name))
            if current is None:
                return self._not_found("leases.coordination.k8s.io", name)
            try:
                wanted = wanted_from(copy.deepcopy(current))
            except PatchTestFailed as exc:
                return self._send(422, _status_body(422, "Invalid", "test failed at %s" % exc))
            if _stale(wanted, current):
                return self._send(409, _conflict("leases.coordination.k8s.io", name))
            self._send(200, self._store_lease(ns, name, wanted))

    def delete_lease(self, query, body, ns, name):
        with self.api.lock:
            found = self.api.leases.pop((ns, name), None)
        if found is None:
            return self._not_found("leases.coordination.k8s.io", name)
        self._send(200, dict(_success_body(), code=200))

    def list_runtimeclasses(self, query, body):
        with self.api.lock:
            items = list(self.api.runtimeclasses.values())
        self._send(200, _list("RuntimeClassList", items))

    def get_runtimeclass(self, query, body, name):
        with self.api.lock:
            found = self.api.runtimeclasses.get(name)
        if found is None:
            return self._not_found("runtimeclasses.node.k8s.io", name)
        self._send(200, found)

    def create_runtimeclass(self, query, body):
        name = body.get("metadata", {}).get("name")
        with self.api.lock:
            if name in self.api.runtimeclasses:
                return self._send(409, _status_body(
                    409, "AlreadyExists", 'runtimeclasses.node.k8s.io "%s" already exists' % name))
            self._send(201, self.api._store_runtimeclass(body))

    def list_pods(self, query, body, ns=None):
        with self.api.lock:
            pods = [p for p in self.api.pods.values() if ns is None or p.namespace == ns]
            items = [self.api.pod_view(p) for p in pods]
        items = [p for p in items
                 if _label_selector_matches(query.get("labelSelector"), p["metadata"].get("labels") or {})
                 and _field_selector_matches(query.get("fieldSelector"), p)]
        self._send(200, _list("PodList", items))

    def create_pod(self, query, body, ns):
        created = self.api.create_pod(ns, body)
        if created is None:
            return self._send(409, _status_body(
                409, "AlreadyExists", 'pods "%s" already exists' % body["metadata"]["name"]))
        self._send(201, created)

    def get_pod(self, query, body, ns, name):
        with self.api.lock:
            pod = self.api.pods.get((ns, name))
            view = self.api.pod_view(pod) if pod else None
        if view is None:
            return self._not_found("pods", name)
        self._send(200, view)

    def delete_pod(self, query, body, ns, name):
        with self.api.lock:
            pod = self.api.pods.pop((ns, name), None)
            if pod is not None:
                self.api.pods_deleted.append((ns, name))
                view = self.api.pod_view(pod)
        if pod is None:
            return self._not_found("pods", name)
        self._send(200, view)

    def pod_log(self, query, body, ns, name):
        with self.api.lock:
            pod = self.api.pods.get((ns, name))
            if pod is not None:
                view = self.api.pod_view(pod)
        if pod is None:
            return self._not_found("pods", name)
        if view["status"].get("phase") == "Pending":
            container, _unused = _container_name(pod)
            return self._send(400, _status_body(400, "BadRequest", (
                'container "%s" in pod "%s" is waiting to start: ContainerCreating') % (container, name)))
        self._send(200, getattr(pod, "log", ""), "text/plain")

    def list_events(self, query, body, ns=None):
        wanted = _field_selector(query.get("fieldSelector"))
        with self.api.lock:
            for pod in list(self.api.pods.values()):  # pods post their events when observed
                self.api.pod_view(pod)
            events = [e for e in self.api.events if ns is None or e["metadata"]["namespace"] == ns]
        for key, value in wanted.items():
            path = key.split(".")
            events = [e for e in events if _dig(e, path) == value]
        self._send(200, _list("EventList", events))


def _object_routes(kind):
    """The list, create, get and replace routes of a stored kind (409 and 404 as the API server answers)."""
    path, namespaced, api_version = STORED_KINDS[kind]
    resource = path if "/" not in api_version else "%s.%s" % (path, api_version.split("/")[0])

    def list_objects(handler, query, body, ns=None):
        with handler.api.lock:
            items = [copy.deepcopy(v) for (k, o_ns, _n), v in handler.api.objects.items()
                     if k == kind and (ns is None or o_ns == ns)]
        handler._send(200, _list(kind + "List", items, api_version))

    def create(handler, query, body, ns=None):
        name = (body.get("metadata") or {}).get("name")
        with handler.api.lock:
            if namespaced and ("Namespace", None, ns) not in handler.api.objects:
                return handler._not_found("namespaces", ns)
            if (kind, ns, name) in handler.api.objects:
                return handler._send(409, dict(_status_body(409, "AlreadyExists", '%s "%s" already exists' % (
                    resource, name)), details={"name": name, "kind": path}))
            handler._send(201, handler.api.store_object(kind, ns, body))

    def get(handler, query, body, name, ns=None):
        with handler.api.lock:
            found = copy.deepcopy(handler.api.objects.get((kind, ns, name)))
        if found is None:
            return handler._not_found(resource, name)
        handler._send(200, found)

    def replace(handler, query, body, name, ns=None):
        with handler.api.lock:
            current = handler.api.objects.get((kind, ns, name))
            if current is None:
                return handler._not_found(resource, name)
            if _stale(body, current):
                return handler._send(409, _conflict(resource, name))
            handler._send(200, handler.api.store_object(kind, ns, body))

    prefix = ("/api/v1" if api_version == "v1" else "/apis/" + api_version)
    scoped = prefix + (r"/namespaces/(?P<ns>[^/]+)/" if namespaced else "/") + path
    routes = [(scoped, ("GET", list_objects)), (scoped, ("POST", create)),
              (scoped + r"/(?P<name>[^/]+)", ("GET", get))]
    if kind != "Namespace":
        routes.append((scoped + r"/(?P<name>[^/]+)", ("PUT", replace)))
    if namespaced:
        routes.append((prefix + "/" + path, ("GET", list_objects)))
    return tuple(routes)


def _dig(obj, path):
    for part in path:
        obj = obj.get(part) if isinstance(obj, dict) else None
    return "" if obj is None else str(obj)


_NS = r"/api/v1/namespaces/(?P<ns>[^/]+)"
_POLICY_NS = r"/apis/policy/v1/namespaces/(?P<ns>[^/]+)"
_LEASES = r"/apis/coordination.k8s.io/v1/namespaces/(?P<ns>[^/]+)/leases"
ROUTES = (
    (r"/version/?", ("GET", _Handler.version)),
    (r"/api/v1/nodes", ("GET", _Handler.list_nodes)),
    (r"/api/v1/nodes/(?P<name>[^/]+)", ("GET", _Handler.get_node)),
    (r"/api/v1/nodes/(?P<name>[^/]+)", ("PUT", _Handler.replace_node)),
    (r"/api/v1/nodes/(?P<name>[^/]+)", ("PATCH", _Handler.patch_node)),
    (r"/apis/node.k8s.io/v1/runtimeclasses", ("GET", _Handler.list_runtimeclasses)),
    (r"/apis/node.k8s.io/v1/runtimeclasses", ("POST", _Handler.create_runtimeclass)),
    (r"/apis/node.k8s.io/v1/runtimeclasses/(?P<name>[^/]+)", ("GET", _Handler.get_runtimeclass)),
    (r"/api/v1/pods", ("GET", _Handler.list_pods)),
    (_NS + r"/pods", ("GET", _Handler.list_pods)),
    (_NS + r"/pods", ("POST", _Handler.create_pod)),
    (_NS + r"/pods/(?P<name>[^/]+)", ("GET", _Handler.get_pod)),
    (_NS + r"/pods/(?P<name>[^/]+)", ("DELETE", _Handler.delete_pod)),
    (_NS + r"/pods/(?P<name>[^/]+)/log", ("GET", _Handler.pod_log)),
    (_NS + r"/pods/(?P<name>[^/]+)/eviction", ("POST", _Handler.evict_pod)),
    (r"/apis/policy/v1/poddisruptionbudgets", ("GET", _Handler.list_pdbs)),
    (_POLICY_NS + r"/poddisruptionbudgets", ("GET", _Handler.list_pdbs)),
    (_LEASES, ("GET", _Handler.list_leases)),
    (_LEASES, ("POST", _Handler.create_lease)),
    (_LEASES + r"/(?P<name>[^/]+)", ("GET", _Handler.get_lease)),
    (_LEASES + r"/(?P<name>[^/]+)", ("PUT", _Handler.replace_lease)),
    (_LEASES + r"/(?P<name>[^/]+)", ("PATCH", _Handler.patch_lease)),
    (_LEASES + r"/(?P<name>[^/]+)", ("DELETE", _Handler.delete_lease)),
    (r"/api/v1/events", ("GET", _Handler.list_events)),
    (_NS + r"/configmaps", ("GET", _Handler.list_configmaps)),
    (_NS + r"/configmaps", ("POST", _Handler.create_configmap)),
    (_NS + r"/configmaps/(?P<name>[^/]+)", ("GET", _Handler.get_configmap)),
    (_NS + r"/configmaps/(?P<name>[^/]+)", ("PATCH", _Handler.patch_configmap)),
    (_NS + r"/events", ("GET", _Handler.list_events)),
) + sum((_object_routes(kind) for kind in STORED_KINDS), ())


def requests_by_kind(requests):
    """{'GET nodes': n, 'LIST nodes': n, 'PUT leases': n, 'POST pods/eviction': n, ...}: what the clients asked."""
    counts = {}
    for _at, method, path in requests:
        parts = [part for part in path.split("/") if part]
        rest = parts[2:] if parts[:1] == ["api"] else parts[3:]  # after /api/v1 or /apis/GROUP/VERSION
        if rest[:1] == ["namespaces"] and len(rest) > 2:
            rest = rest[2:]
        if not rest:
            key = "%s %s" % (method, path)
        else:
            verb = "LIST" if method == "GET" and len(rest) == 1 else method
            key = "%s %s" % (verb, "/".join([rest[0]] + rest[2:]))
        counts[key] = counts.get(key, 0) + 1
    return counts


def write_kubeconfig(path, server, token=None, context="standin", namespace="default"):
    """A kubeconfig (JSON is valid YAML) pointing the kubernetes client at `server`."""
    user = {"token": token} if token else {}
    config = {
        "apiVersion": "v1", "kind": "Config", "current-context": context,
        "clusters": [{"name": context, "cluster": {"server": server}}],
        "users": [{"name": context, "user": user}],
        "contexts": [{"name": context, "context": {"cluster": context, "user": context,
                                                   "namespace": namespace}}],
    }
    with open(path, "w") as handle:
        json.dump(config, handle, indent=2)
    return path


def main():
    parser = argparse.ArgumentParser(description="Kubernetes API stand-in (see module docstring)")
    parser.add_argument("--node", action="append", default=[], metavar="NAME=BEHAVIOUR")
    parser.add_argument("--pod-seconds", type=float, default=2.0)
    parser.add_argument("--token")
    parser.add_argument("--kubeconfig", required=True)
    parser.add_argument("--report", metavar="PATH",
                        help="on SIGTERM, write what the clients did (requests, peak_unavailable) here as JSON")
    args = parser.parse_args()
    nodes = [Node(*spec.split("=", 1)) if "=" in spec else Node(spec) for spec in args.node]
    api = KubeApiStandin(nodes, pod_seconds=args.pod_seconds, token=args.token).start()
    api.write_kubeconfig(args.kubeconfig)
    print("Kubernetes API stand-in on %s, kubeconfig %s (Ctrl-C stops)" % (api.url, args.kubeconfig), flush=True)
    # SIGTERM ends the wait like Ctrl-C, so a benchmark running the stand-in as its own process gets the report.
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        api.stop()
    if args.report:
        with open(args.report, "w") as handle:
            json.dump({"requests": len(api.requests), "write_requests": len(api.write_requests),
                       "conflicts": api.conflicts, "by_kind": requests_by_kind(api.requests),
                       "peak_unavailable": api.peak_unavailable}, handle)


if __name__ == "__main__":
    main()
