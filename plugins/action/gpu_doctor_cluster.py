# -*- coding: utf-8 -*-
# Copyright: gpunode.nvidia contributors
# Apache License 2.0
"""gpunode.nvidia.gpu_doctor_cluster runs here, on the controller.

It reads the Kubernetes API with the `kubernetes` client of the controller's
Python (requirements.txt), whatever host the task targets, and never writes.
The rules are in plugin_utils/doctor/cluster.py.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import sys

from ansible.errors import AnsibleActionFail
from ansible.module_utils.basic import missing_required_lib

from ansible_collections.gpunode.nvidia.plugins.plugin_utils.action import ValidatedAction
from ansible_collections.gpunode.nvidia.plugins.plugin_utils.doctor.cluster import (
    cluster_finding, cluster_findings, read_cluster)

ARGUMENT_SPEC = dict(
    kubeconfig=dict(type="path", required=True),
    context=dict(type="str"),
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
        try:
            from kubernetes import config as kube_config
        except ImportError:
            kube_config = None
        if kube_config is None:  # raised outside the except clause: the result carries no traceback
            raise AnsibleActionFail("%s Install it on the controller: %s -m pip install kubernetes" % (
                missing_required_lib("kubernetes", reason="to read the cluster"), sys.executable))
        result["changed"] = False
        try:
            api = kube_config.new_client_from_config(config_file=args["kubeconfig"], context=args["context"])
            nodes, runtimeclasses, pods, events = read_cluster(api, args["resource_name"], args["timeout"])
        except Exception as exc:  # config errors, HTTP errors, refused connections: all are "cannot read"
            result.update(checked=False, gpu_nodes=[], error="%s: %s" % (type(exc).__name__, exc),
                          findings=[cluster_finding(
                              "cluster-unreachable", "The Kubernetes API named by %s could not be read: %s" % (
                                  args["kubeconfig"], str(exc).splitlines()[0] if str(exc) else type(exc).__name__),
                              [{"kind": "api", "object": args["kubeconfig"], "text": type(exc).__name__}],
                              {"summary": "Check the kubeconfig (server, credentials, context) and that the API "
                                          "server answers from the controller.", "playbook": None, "vars": {},
                               "commands": ["kubectl --kubeconfig %s get nodes" % args["kubeconfig"]]})])
            return result
        found = cluster_findings(nodes, runtimeclasses, pods, events, args["gpu_nodes"], args["resource_name"],
                                 args["runtime_class"], args["runtime_handler"])
        result.update(checked=True, error=None, nodes=len(nodes), **found)
        return result
