# -*- coding: utf-8 -*-
# Copyright: gpunode.nvidia contributors
# Apache License 2.0
"""gpunode.nvidia.gpu_cluster_check: runs on the controller only (kubeconfig + kubernetes client).

The documentation is in plugins/modules/gpu_cluster_check.py; the work is in
plugins/plugin_utils/cluster/verify.py.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import time

from ansible.errors import AnsibleActionFail

from ansible_collections.gpunode.nvidia.plugins.plugin_utils.action import ValidatedAction
from ansible_collections.gpunode.nvidia.plugins.plugin_utils.cluster import client
from ansible_collections.gpunode.nvidia.plugins.plugin_utils.cluster import verify as cv

ARGUMENT_SPEC = client.kube_options(
    namespace=dict(type="str", default="default"),
    runtime_class=dict(type="str", default="nvidia"),
    runtime_handler=dict(type="str", default="nvidia"),
    create_runtime_class=dict(type="bool", default=True),
    nodes=dict(type="list", elements="raw", default=[]),
    node_selector=dict(type="str"),
    image=dict(type="str", default="nvcr.io/nvidia/k8s/cuda-sample:vectoradd-cuda12.5.0-ubuntu22.04"),
    image_pull_policy=dict(type="str", default="IfNotPresent", choices=["Always", "IfNotPresent", "Never"]),
    tolerations=dict(type="list", elements="dict"),
    gpus_per_pod=dict(type="int", default=1),
    timeout=dict(type="int", default=300),
    poll_interval=dict(type="float", default=2.0),
    parallelism=dict(type="int", default=32),
    report_path=dict(type="path"),
)


def node_targets(nodes):
    """[{name, config_path, socket, engine, driver}] from names or dicts."""
    targets = []
    for node in nodes:
        if isinstance(node, dict):
            if not node.get("name"):
                raise AnsibleActionFail("each entry of nodes needs a name: %r" % (node,))
            targets.append(dict(node))
        elif node:
            targets.append({"name": str(node)})
    return targets


class ActionModule(ValidatedAction):
    ARGUMENT_SPEC = ARGUMENT_SPEC

    def run(self, tmp=None, task_vars=None):
        result = super(ActionModule, self).run(tmp, task_vars)
        args = self.validated_args()
        client.require_client("to run the cluster check")
        if args["timeout"] <= 0 or args["parallelism"] <= 0 or args["poll_interval"] <= 0:
            raise AnsibleActionFail("timeout, parallelism and poll_interval must be positive")
        try:
            result.update(self._check(args))
        except (cv.VerifyError, client.KubeconfigError) as exc:
            result.update(failed=True, changed=False, msg=str(exc))
        except client.TransportError as exc:
            result.update(failed=True, changed=False, msg=client.unreachable(
                args["kubeconfig"], exc, "the check stopped there", "run it again"))
        return result

    def _check(self, args):
        started = time.time()
        kube = client.connect(args["kubeconfig"], args["context"], pool_size=args["parallelism"])
        verifier = cv.ClusterVerifier(
            kube, namespace=args["namespace"], runtime_class=args["runtime_class"], handler=args["runtime_handler"],
            image=args["image"], pull_policy=args["image_pull_policy"], tolerations=args["tolerations"],
            timeout=args["timeout"], poll_interval=args["poll_interval"], gpus=args["gpus_per_pod"])
        targets = node_targets(args["nodes"])
        if not targets and args["node_selector"]:
            targets = [{"name": name} for name in verifier.select_nodes(args["node_selector"])]
        if not targets:
            raise cv.VerifyError("no GPU nodes to verify: give nodes, or a node_selector that matches some")
        if args["create_runtime_class"]:
            runtime_class = verifier.ensure_runtime_class(self._task.check_mode)
        else:
            runtime_class = verifier.require_runtime_class()
        if self._task.check_mode:
            return dict(changed=runtime_class == "would-create", runtime_class_state=runtime_class, passed=False,
                        nodes=[dict(node=t["name"], result="not-run") for t in targets], table=[],
                        msg="check mode: no pods were run")
        results = verifier.verify_all(targets, args["parallelism"])
        return self._report(args, runtime_class, results, time.time() - started)

    def _report(self, args, runtime_class, results, seconds):
        failed = [r for r in results if not r["passed"]]
        report = dict(runtime_class=args["runtime_class"], runtime_class_state=runtime_class, image=args["image"],
                      passed=not failed, nodes=results, duration_s=round(seconds, 3),
                      table=cv.summary_table(results))
        if args["report_path"]:
            cv.write_report(args["report_path"], report)
            report["report_path"] = args["report_path"]
        report["changed"] = runtime_class == "created"
        if failed:
            report["failed"] = True
            report["msg"] = "GPU verification failed on %d of %d nodes: %s" % (
                len(failed), len(results), "; ".join(_why(r) for r in failed))
        else:
            report["msg"] = "GPU workload passed on %d node(s) in %.1fs" % (len(results), seconds)
        return report


def _why(result):
    text = "%s: %s" % (result["node"], result["message"] or result["result"])
    explanation = result.get("explanation")
    if explanation:
        incident = " (incident %s)" % explanation["incident"] if explanation["incident"] else ""
        text += " -> cause%s: %s fix: %s" % (incident, explanation["cause"], explanation["fix"])
    return text
