# -*- coding: utf-8 -*-
# Copyright: gpunode.nvidia contributors
# Apache License 2.0
"""gpunode.nvidia.gpu_partitioning_cluster: runs on the controller only (kubeconfig + kubernetes client).

The documentation is in plugins/modules/gpu_partitioning_cluster.py; rendering is in
plugins/plugin_utils/cluster/device_plugin_config.py.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import time

from ansible_collections.gpunode.nvidia.plugins.plugin_utils.cluster import client
from ansible_collections.gpunode.nvidia.plugins.plugin_utils.cluster import verify as cv
from ansible_collections.gpunode.nvidia.plugins.plugin_utils.cluster import device_plugin_config as dpc
from ansible_collections.gpunode.nvidia.plugins.plugin_utils.action import ValidatedAction

MIG_CONFIG_LABEL = "nvidia.com/mig.config"
MIG_STATE_LABEL = "nvidia.com/mig.config.state"
DEVICE_PLUGIN_DEPLOY = "nvidia.com/gpu.deploy.device-plugin"
OPERATOR_LABEL_PREFIX = "nvidia.com/gpu.deploy."
ARGUMENT_SPEC = client.kube_options(
    node=dict(type="str", required=True),
    step=dict(type="str", required=True, choices=["detect_operator", "mig_config", "sharing", "dra"]),
    mig_config=dict(type="str"),
    sharing_configs=dict(type="dict", default={}),
    sharing_config=dict(type="str"),
    configmap=dict(type="str", default="gpunode-device-plugin-configs"),
    namespace=dict(type="str", default="nvidia-device-plugin"),
    physical=dict(type="dict", default={}),
    timeout=dict(type="int", default=600),
    retry_interval=dict(type="float", default=5.0),
)


class ActionModule(ValidatedAction):
    ARGUMENT_SPEC = ARGUMENT_SPEC

    def run(self, tmp=None, task_vars=None):
        result = super(ActionModule, self).run(tmp, task_vars)
        args = self.validated_args()
        kube = client.connect_task(args, "to label the node")
        step = {"detect_operator": self._detect_operator, "mig_config": self._mig_config,
                "sharing": self._sharing, "dra": self._dra}[args["step"]]
        try:
            result.update(step(kube.core, args))
        except (dpc.SharingError, cv.VerifyError) as exc:
            result.update(failed=True, changed=False, msg=str(exc))
        except client.ApiException as exc:
            result.update(failed=True, changed=False, msg="Kubernetes API: %s (node %s, step %s)" % (
                client.api_message(exc), args["node"], args["step"]))
        except client.TransportError as exc:
            result.update(failed=True, changed=False, msg="node %s, step %s: %s" % (
                args["node"], args["step"], kube.unreachable(exc, "the step stopped there", "run it again")))
        return result

    def _labels(self, core, name):
        return core.read_node(name).metadata.labels or {}

    def _set_label(self, core, name, key, value):
        if self._labels(core, name).get(key) == value:
            return False
        if not self._task.check_mode:
            core.patch_node(name, {"metadata": {"labels": {key: value}}})
        return True

    def _detect_operator(self, core, args):
        labels = self._labels(core, args["node"])
        operands = sorted(k for k in labels if k.startswith(OPERATOR_LABEL_PREFIX))
        return {"changed": False, "operator": bool(operands) or MIG_STATE_LABEL in labels, "operator_labels": operands,
                "mig_config": labels.get(MIG_CONFIG_LABEL), "mig_config_state": labels.get(MIG_STATE_LABEL)}

    def _mig_config(self, core, args):
        """The GPU operator's MIG manager applies the layout the label names; wait for its state label."""
        name, wanted = args["node"], args["mig_config"]
        if not wanted:
            raise cv.VerifyError("step mig_config needs mig_config (a layout name of the operator's MIG manager)")
        changed = self._set_label(core, name, MIG_CONFIG_LABEL, wanted)
        if self._task.check_mode:
            return {"changed": changed, "would": "label %s=%s and wait for %s=success" % (
                MIG_CONFIG_LABEL, wanted, MIG_STATE_LABEL) if changed else ""}
        deadline = time.time() + args["timeout"]
        state = None
        while time.time() < deadline:
            state = self._labels(core, name).get(MIG_STATE_LABEL)
            if state == "success":
                return {"changed": changed, "mig_config_state": state,
                        "msg": "The GPU operator's MIG manager applied %s on %s." % (wanted, name)}
            if state == "failed":
                break
            time.sleep(args["retry_interval"])
        raise cv.VerifyError(
            "The GPU operator's MIG manager did not apply %s on node %s: %s=%s after %s. Read the "
            "nvidia-mig-manager pod's log on that node (namespace of the GPU operator)." % (
                wanted, name, MIG_STATE_LABEL, state or "(not set)",
                "it failed" if state == "failed" else "%d s" % args["timeout"]))

    def _sharing(self, core, args):
        """The ConfigMap with every named config, the node's selection label, and the allocatable to expect."""
        # Names as the ConfigMap keys and the node label hold them (YAML may read a name such as 2 as a number).
        configs = dict((str(name), config) for name, config in args["sharing_configs"].items())
        selected = args["sharing_config"]
        if selected not in configs:
            raise dpc.SharingError("sharing config %r is not among gpu_partitioning_sharing_configs (%s)"
                                   % (selected, ", ".join(sorted(configs)) or "none given"))
        wanted = dpc.configmap(configs, args["configmap"], args["namespace"])
        expected = dpc.expected_allocatable(dpc.render(configs[selected], "sharing config %s" % selected),
                                            args["physical"])
        changed = self._ensure_configmap(core, wanted)
        changed = self._set_label(core, args["node"], dpc.NODE_LABEL, selected) or changed
        # No GPU advertised yet: no device plugin runs on the node (site.yml's cluster stage deploys it later in
        # the run), so there is no restart to wait for; the proof's pod then checks the allocation.
        allocatable = core.read_node(args["node"]).status.allocatable or {}
        plugin_running = any(int(count or 0) for resource, count in allocatable.items()
                             if resource.startswith(("nvidia.com/gpu", "nvidia.com/mig-")))
        return {"changed": changed, "expected_allocatable": expected, "configmap": wanted["metadata"]["name"],
                "device_plugin_running": plugin_running}

    def _ensure_configmap(self, core, wanted):
        namespace, name = wanted["metadata"]["namespace"], wanted["metadata"]["name"]
        try:
            current = core.read_namespaced_config_map(name, namespace)
        except client.ApiException as exc:
            if exc.status != 404:
                raise
            current = None
        if current is not None and all((current.data or {}).get(k) == v for k, v in wanted["data"].items()):
            return False
        if self._task.check_mode:
            return True
        if current is None:
            core.create_namespaced_config_map(namespace, wanted)
        else:
            # Keys other tools put into the ConfigMap stay; ours are replaced.
            core.patch_namespaced_config_map(name, namespace, {"data": wanted["data"]})
        return True

    def _dra(self, core, args):
        """The DRA driver hands out this node's GPUs: the device plugin must not advertise them too."""
        name = args["node"]
        node = core.read_node(name)
        labels = node.metadata.labels or {}
        if any(k.startswith(OPERATOR_LABEL_PREFIX) for k in labels):
            changed = self._set_label(core, name, DEVICE_PLUGIN_DEPLOY, "false")
            return {"changed": changed, "msg": "The GPU operator's device plugin is kept off %s (%s=false)." % (
                name, DEVICE_PLUGIN_DEPLOY)}
        advertised = int((node.status.allocatable or {}).get(cv.GPU_RESOURCE, "0") or 0)
        if advertised:
            raise cv.VerifyError(
                "The device plugin advertises %d %s on node %s: with the DRA driver's GPU plugin the same GPUs "
                "would be handed out twice. Keep the device plugin off DRA nodes (its chart's nodeSelector or "
                "affinity) and run again." % (advertised, cv.GPU_RESOURCE, name))
        return {"changed": False, "msg": "No device plugin advertises GPUs on %s." % name}
