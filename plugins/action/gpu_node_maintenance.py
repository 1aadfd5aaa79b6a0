# -*- coding: utf-8 -*-
# Copyright: gpunode.nvidia contributors
# Apache License 2.0
"""gpunode.nvidia.gpu_node_maintenance: runs on the controller only (kubeconfig + kubernetes client).

The documentation is in plugins/modules/gpu_node_maintenance.py; the decisions are in
plugins/plugin_utils/cluster/maintenance_plan.py, the API calls in plugins/plugin_utils/cluster/maintenance_api.py.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible.errors import AnsibleActionFail

from ansible_collections.gpunode.nvidia.plugins.plugin_utils.action import ValidatedAction
from ansible_collections.gpunode.nvidia.plugins.plugin_utils.cluster import client
from ansible_collections.gpunode.nvidia.plugins.plugin_utils.cluster import maintenance_plan as mp
from ansible_collections.gpunode.nvidia.plugins.plugin_utils.cluster import verify as cv
from ansible_collections.gpunode.nvidia.plugins.plugin_utils.cluster.maintenance_api import NodeMaintenance

ARGUMENT_SPEC = client.kube_options(
    node=dict(type="str", required=True),
    step=dict(type="str", required=True, choices=list(mp.STEPS)),
    owner=dict(type="str", default="maintenance"),
    job_selector=dict(type="str"),
    timeout=dict(type="int", default=300),
    retry_interval=dict(type="float", default=5.0),
    expected_allocatable=dict(type="dict"),
    validate_pod=dict(type="bool", default=False),
    pod_image=dict(type="str", default="nvcr.io/nvidia/k8s/cuda-sample:vectoradd-cuda12.5.0-ubuntu22.04"),
    labels=dict(type="dict"),
)


class ActionModule(ValidatedAction):
    ARGUMENT_SPEC = ARGUMENT_SPEC

    def run(self, tmp=None, task_vars=None):
        result = super(ActionModule, self).run(tmp, task_vars)
        args = self.validated_args()
        client.require_client("for node maintenance")
        if args["timeout"] <= 0 or args["retry_interval"] <= 0:
            raise AnsibleActionFail("timeout and retry_interval must be positive")
        if not args["owner"].strip():
            raise AnsibleActionFail("owner must name the maintenance (e.g. upgrade, partitioning)")
        result.update(step=args["step"], node=args["node"])
        try:
            result.update(self._step(args))
        except (mp.MaintenanceError, client.KubeconfigError) as exc:
            result.update(failed=True, changed=False, msg=str(exc))
        except client.ApiException as exc:
            result.update(failed=True, changed=False, msg="step %s on node %s: the Kubernetes API answered %s" % (
                args["step"], args["node"], client.api_message(exc)))
        except client.TransportError as exc:
            result.update(failed=True, changed=False, msg="step %s on node %s: %s" % (
                args["step"], args["node"], client.unreachable(args["kubeconfig"], exc, "the step stopped there",
                                                               "run it again")))
        return result

    def _step(self, args):
        kube = client.connect(args["kubeconfig"], args["context"])
        maintenance = NodeMaintenance(kube, args["node"], args["owner"].strip(), timeout=args["timeout"],
                                      retry_interval=args["retry_interval"], check_mode=self._task.check_mode)
        step = args["step"]
        if step == "cordon":
            return maintenance.cordon()
        if step == "uncordon":
            return maintenance.uncordon()
        if step == "wait_for_jobs":
            return maintenance.wait_for_jobs(args["job_selector"])
        if step in ("evict_gpu_pods", "drain"):
            return maintenance.evict(drain=step == "drain")
        if step == "pause_gpu_operands":
            return maintenance.pause_operands()
        if step == "resume_gpu_operands":
            return maintenance.resume_operands()
        if step == "label":
            return maintenance.label(self._labels(args["labels"]))
        return maintenance.validate(args["expected_allocatable"], self._verifier(kube, args))

    @staticmethod
    def _labels(labels):
        """name: value as the API stores it (a string), None to remove the label."""
        if not labels:
            raise AnsibleActionFail("step label needs labels: a mapping of label name to value (null removes it)")
        return dict((name, None if value is None else str(value).lower() if isinstance(value, bool) else str(value))
                    for name, value in labels.items())

    @staticmethod
    def _verifier(kube, args):
        """The vector-add pod of gpu_cluster_check, tolerating the cordon this maintenance holds."""
        if not args["validate_pod"]:
            return None
        return cv.ClusterVerifier(kube, image=args["pod_image"], timeout=args["timeout"],
                                  poll_interval=min(args["retry_interval"], 2.0),
                                  tolerations=cv.DEFAULT_TOLERATIONS + [mp.UNSCHEDULABLE_TOLERATION])
