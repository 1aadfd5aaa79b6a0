# -*- coding: utf-8 -*-
# Copyright: gpunode.nvidia contributors
# Apache License 2.0
"""gpunode.nvidia.gpu_doctor_cluster runs here, on the controller.

It reads the Kubernetes API through the cluster client (plugin_utils/cluster/client.py)
of the controller's Python (requirements.txt), whatever host the task targets, and never
writes. The rules are in plugin_utils/doctor/cluster.py.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.gpunode.nvidia.plugins.plugin_utils.action import ValidatedAction
from ansible_collections.gpunode.nvidia.plugins.plugin_utils.cluster import client
from ansible_collections.gpunode.nvidia.plugins.plugin_utils.doctor.cluster import (
    cluster_findings, read_cluster, unreachable_finding)

ARGUMENT_SPEC = client.kube_options(
    kubeconfig=dict(type="path", required=True),
    gpu_nodes=dict(type="list", elements="str", default=[]),
    resource_name=dict(type="str", default="nvidia.com/gpu"),
    runtime_class=dict(type="str", default="nvidia"),
    runtime_handler=dict(type="str", default="nvidia"),
    timeout=dict(type="int", default=20),
)


class ActionModule(ValidatedAction):
    ARGUMENT_SPEC = ARGUMENT_SPEC

    def run(self, tmp=None, task_vars=None):
        result = super(ActionModule, self).run(tmp, task_vars)
        args = self.validated_args()
        client.require_client("to read the cluster")
        result["changed"] = False
        try:
            kube = client.connect(args["kubeconfig"], args["context"])
            nodes, runtimeclasses, pods, events = read_cluster(kube, args["resource_name"], args["timeout"])
        except Exception as exc:  # kubeconfig errors, HTTP errors, refused connections: all are "cannot read"
            result.update(checked=False, gpu_nodes=[], error="%s: %s" % (type(exc).__name__, exc),
                          findings=[unreachable_finding(args["kubeconfig"], exc)])
            return result
        found = cluster_findings(nodes, runtimeclasses, pods, events, args["gpu_nodes"], args["resource_name"],
                                 args["runtime_class"], args["runtime_handler"])
        result.update(checked=True, error=None, nodes=len(nodes), **found)
        return result
