# -*- coding: utf-8 -*-
# Copyright: gpunode.nvidia contributors
# Apache License 2.0
"""gpunode.nvidia.gpu_cluster_stage: runs on the controller only (kubeconfig + kubernetes client).

The documentation is in plugins/modules/gpu_cluster_stage.py; the decisions are in
plugins/plugin_utils/cluster/node_stage.py and device_plugin.py, the reads and writes in node_stage_api.py.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.gpunode.nvidia.plugins.plugin_utils.action import ValidatedAction
from ansible_collections.gpunode.nvidia.plugins.plugin_utils.cluster import client
from ansible_collections.gpunode.nvidia.plugins.plugin_utils.cluster import device_plugin as dp
from ansible_collections.gpunode.nvidia.plugins.plugin_utils.cluster import node_stage as ns
from ansible_collections.gpunode.nvidia.plugins.plugin_utils.cluster import verify as cv
from ansible_collections.gpunode.nvidia.plugins.plugin_utils.cluster.maintenance_plan import MaintenanceError
from ansible_collections.gpunode.nvidia.plugins.plugin_utils.cluster.node_stage_api import ClusterStage

ARGUMENT_SPEC = client.kube_options(
    node=dict(type="str", required=True),
    step=dict(type="str", required=True, choices=["taint", "untaint", "labels", "runtime_class", "device_plugin"]),
    reason=dict(type="str", default="setup", choices=list(ns.TAINT_REASONS)),
    unless_proven=dict(type="bool", default=False),
    facts=dict(type="dict", default={}),
    proven=dict(type="bool", default=False),
    runtime_class=dict(type="str", default="nvidia"),
    runtime_handler=dict(type="str", default="nvidia"),
    namespace=dict(type="str", default="nvidia-device-plugin"),
    image=dict(type="str"),
    registry=dict(type="str", default=dp.REGISTRY),
    version=dict(type="str", default=dp.VERSION),
    image_pull_secrets=dict(type="list", elements="str", default=[]),
    device_plugin_runtime_class=dict(type="str", default="nvidia"),
    tolerations=dict(type="list", elements="dict", default=[]),
    config_map=dict(type="str"),
    default_config=dict(type="str", default=""),
    wait=dict(type="bool", default=True),
    timeout=dict(type="int", default=300),
    retry_interval=dict(type="float", default=2.0),
)


class ActionModule(ValidatedAction):
    ARGUMENT_SPEC = ARGUMENT_SPEC

    def run(self, tmp=None, task_vars=None):
        result = super(ActionModule, self).run(tmp, task_vars)
        args = self.validated_args()
        kube = client.connect_task(args, "for the cluster stage")
        stage = ClusterStage(kube, args["node"], timeout=args["timeout"], retry_interval=args["retry_interval"],
                             check_mode=self._task.check_mode)
        try:
            result.update(self._step(stage, args))
        except (ns.StageError, cv.VerifyError, MaintenanceError) as exc:
            result.update(failed=True, changed=False, msg="node %s, step %s: %s" % (args["node"], args["step"], exc))
        except client.ApiException as exc:
            result.update(failed=True, changed=False, msg="Kubernetes API: %s (node %s, step %s)" % (
                client.api_message(exc), args["node"], args["step"]))
        except client.TransportError as exc:
            result.update(failed=True, changed=False, msg="node %s, step %s: %s" % (
                args["node"], args["step"], kube.unreachable(exc, "the step stopped there", "run it again")))
        return result

    def _step(self, stage, args):
        step = args["step"]
        if step == "taint":
            return stage.taint(args["reason"], args["unless_proven"])
        if step == "untaint":
            return stage.untaint()
        if step == "labels":
            return stage.labels(args["facts"], ns.proof_time() if args["proven"] else None)
        if step == "runtime_class":
            return stage.runtime_class(args["runtime_class"], args["runtime_handler"])
        image = dp.image_of(args["registry"], args["version"], args["image"])
        tolerations = args["tolerations"] + [{"key": ns.UNPROVEN_TAINT, "operator": "Exists", "effect": "NoSchedule"}]
        objects = dp.objects(args["namespace"], image, tolerations, args["device_plugin_runtime_class"] or None,
                             args["image_pull_secrets"], args["config_map"], args["default_config"])
        result = stage.device_plugin(objects, wait=args["wait"])
        result["image"] = image
        return result
