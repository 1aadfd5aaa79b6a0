# -*- coding: utf-8 -*-
# Copyright: gpunode.nvidia contributors
# Apache License 2.0
"""NVIDIA's k8s-device-plugin DaemonSet for clusters without the GPU operator (controller side, no I/O).

Rendered from NVIDIA's published static manifest of the pinned version
(https://github.com/NVIDIA/k8s-device-plugin/blob/v0.20.0/deployments/static/nvidia-device-plugin.yml), and
where it differs, as NVIDIA's Helm chart of that version does it (deployments/helm/nvidia-device-plugin):

  namespace            its own (default nvidia-device-plugin, where the partitioning stage writes its
                       ConfigMap), not kube-system
  tolerations          also the unproven taint: the device plugin is part of what the proof proves
  nodeSelector         nvidia.com/gpu.present=true (the cluster stage's label, or GPU feature discovery's)
  runtimeClassName     nvidia, unless the node's default runtime is nvidia (the chart's runtimeClassName)
  image                overridable (a private registry mirror), with its pull secrets
  sharing configs      with the partitioning stage's ConfigMap: the chart's config-manager init container and
                       sidecar (they follow the node label nvidia.com/device-plugin.config), CONFIG_FILE, the
                       ServiceAccount and the ClusterRole that reads nodes
  annotation           gpunode.nvidia/manifest-sha256: what the stage compares (the API server adds defaults
                       to what it stores, so the stored spec never equals the rendered one)
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import copy
import hashlib
import json

VERSION = "v0.20.0"
REGISTRY = "nvcr.io/nvidia"
NAME = "nvidia-device-plugin-daemonset"
POD_LABELS = {"name": "nvidia-device-plugin-ds"}
MANAGED_BY = {"app.kubernetes.io/managed-by": "gpunode.nvidia"}
HASH_ANNOTATION = "gpunode.nvidia/manifest-sha256"
SERVICE_ACCOUNT = "nvidia-device-plugin-service-account"
CLUSTER_ROLE = "gpunode-nvidia-device-plugin-role"
CONFIG_LABEL = "nvidia.com/device-plugin.config"
GPU_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
CONFIG_DIR, AVAILABLE_DIR = "/config", "/available-configs"


def image_of(registry=REGISTRY, version=VERSION, image=None):
    """The plugin's image: IMAGE as given, else REGISTRY/k8s-device-plugin:VERSION (a mirror keeps NVIDIA's path)."""
    return image or "%s/k8s-device-plugin:%s" % (registry.rstrip("/"), version)


def _config_manager(name, image, oneshot, default_config):
    """The chart's config-manager container: writes the config the node label names to /config/config.yaml."""
    env = [("ONESHOT", "true" if oneshot else "false"), ("KUBECONFIG", ""), ("NODE_NAME", None),
           ("NODE_LABEL", CONFIG_LABEL), ("CONFIG_FILE_SRCDIR", AVAILABLE_DIR),
           ("CONFIG_FILE_DST", CONFIG_DIR + "/config.yaml"), ("DEFAULT_CONFIG", default_config),
           ("FALLBACK_STRATEGIES", "named,single"), ("SEND_SIGNAL", "false" if oneshot else "true"),
           ("SIGNAL", "" if oneshot else "1"), ("PROCESS_TO_SIGNAL", "" if oneshot else "nvidia-device-plugin")]
    return {"image": image, "name": name, "command": ["config-manager"],
            "env": [{"name": key, "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}} if value is None
                    else {"name": key, "value": value} for key, value in env],
            "volumeMounts": [{"name": "available-configs", "mountPath": AVAILABLE_DIR},
                             {"name": "config", "mountPath": CONFIG_DIR}]}


def daemonset(namespace, image, tolerations, runtime_class=None, pull_secrets=(), config_map=None,
              default_config=""):
    """The DaemonSet (a dict of the API's JSON), without its hash annotation."""
    container = {
        "image": image, "name": "nvidia-device-plugin-ctr", "env": [],
        "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}},
        "volumeMounts": [{"name": "kubelet-device-plugins-dir", "mountPath": "/var/lib/kubelet/device-plugins"}],
    }
    spec = {
        "tolerations": [GPU_TOLERATION] + [t for t in tolerations if t != GPU_TOLERATION],
        "priorityClassName": "system-node-critical",
        "nodeSelector": {"nvidia.com/gpu.present": "true"},
        "containers": [container],
        "volumes": [{"name": "kubelet-device-plugins-dir",
                     "hostPath": {"path": "/var/lib/kubelet/device-plugins", "type": "Directory"}}],
    }
    if runtime_class:
        spec["runtimeClassName"] = runtime_class
    if pull_secrets:
        spec["imagePullSecrets"] = [{"name": secret} for secret in pull_secrets]
    if config_map:
        container["env"] = [{"name": "CONFIG_FILE", "value": CONFIG_DIR + "/config.yaml"}]
        container["volumeMounts"] += [{"name": "available-configs", "mountPath": AVAILABLE_DIR},
                                      {"name": "config", "mountPath": CONFIG_DIR}]
        spec.update(serviceAccountName=SERVICE_ACCOUNT, shareProcessNamespace=True,
                    initContainers=[_config_manager("nvidia-device-plugin-init", image, True, default_config)])
        sidecar = _config_manager("nvidia-device-plugin-sidecar", image, False, default_config)
        sidecar["securityContext"] = copy.deepcopy(container["securityContext"])
        spec["containers"] = [sidecar, container]
        spec["volumes"] += [{"name": "available-configs", "configMap": {"name": config_map}},
                            {"name": "config", "emptyDir": {}}]
    return {
        "apiVersion": "apps/v1", "kind": "DaemonSet",
        "metadata": {"name": NAME, "namespace": namespace, "labels": dict(MANAGED_BY)},
        "spec": {"selector": {"matchLabels": dict(POD_LABELS)}, "updateStrategy": {"type": "RollingUpdate"},
                 "template": {"metadata": {"labels": dict(POD_LABELS)}, "spec": spec}},
    }


def rbac(namespace):
    """The ServiceAccount, ClusterRole and binding the config-manager needs to read its node's labels."""
    meta = {"labels": dict(MANAGED_BY)}
    return [
        {"apiVersion": "v1", "kind": "ServiceAccount",
         "metadata": dict(meta, name=SERVICE_ACCOUNT, namespace=namespace)},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": dict(meta, name=CLUSTER_ROLE),
         "rules": [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "watch"]}]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
         "metadata": dict(meta, name=CLUSTER_ROLE + "-binding"),
         "subjects": [{"kind": "ServiceAccount", "name": SERVICE_ACCOUNT, "namespace": namespace}],
         "roleRef": {"kind": "ClusterRole", "name": CLUSTER_ROLE, "apiGroup": "rbac.authorization.k8s.io"}},
    ]


def manifest_hash(obj):
    """The sha256 of an object as rendered (sorted JSON, without its own hash annotation)."""
    plain = copy.deepcopy(obj)
    (plain.get("metadata") or {}).get("annotations", {}).pop(HASH_ANNOTATION, None)
    return hashlib.sha256(json.dumps(plain, sort_keys=True).encode("utf-8")).hexdigest()


def with_hash(obj):
    """OBJ with its hash annotation, which the stage compares with the stored object's."""
    obj = copy.deepcopy(obj)
    obj["metadata"].setdefault("annotations", {})[HASH_ANNOTATION] = manifest_hash(obj)
    return obj


def objects(namespace, image, tolerations, runtime_class=None, pull_secrets=(), config_map=None, default_config=""):
    """Every object of the deployment in the order they are applied: the Namespace, the RBAC objects when a
    sharing ConfigMap is used, the DaemonSet; each with its hash annotation."""
    rendered = [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace, "labels": dict(MANAGED_BY)}}]
    if config_map:
        rendered += rbac(namespace)
    rendered.append(daemonset(namespace, image, tolerations, runtime_class, pull_secrets, config_map, default_config))
    return [with_hash(obj) for obj in rendered]


def is_current(stored, wanted):
    """The stored object is the one rendered (same hash annotation)."""
    annotations = ((stored or {}).get("metadata") or {}).get("annotations") or {}
    return annotations.get(HASH_ANNOTATION) == wanted["metadata"]["annotations"][HASH_ANNOTATION]
