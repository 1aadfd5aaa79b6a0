# -*- coding: utf-8 -*-
# Copyright: gpunode.nvidia contributors
# Apache License 2.0
"""gpunode.nvidia.gpu_upgrade_state: runs on the controller only (kubeconfig + kubernetes client).

The documentation is in plugins/modules/gpu_upgrade_state.py; the decisions are in
plugins/plugin_utils/cluster/upgrade_rollout.py, the API calls in plugins/plugin_utils/cluster/upgrade_api.py.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.gpunode.nvidia.plugins.module_utils.install import security_minimums as sm
from ansible_collections.gpunode.nvidia.plugins.plugin_utils.cluster import upgrade_api
from ansible_collections.gpunode.nvidia.plugins.plugin_utils.cluster.client import TransportError
from ansible_collections.gpunode.nvidia.plugins.plugin_utils.cluster import upgrade_rollout as ro
from ansible_collections.gpunode.nvidia.plugins.plugin_utils.action import ValidatedAction

ARGUMENT_SPEC = dict(
    upgrade_api.UPGRADE_OPTIONS,
    op=dict(type="str", default="read", choices=["read", "set", "plan"]),
    state=dict(type="str", choices=list(ro.ALL_STATES)),
    current=dict(type="dict", default={}),
    target=dict(type="dict", default={}),
    minimum=dict(type="bool", default=False),
    allow_below_minimum=dict(type="bool", default=False),
    allow_downgrade=dict(type="bool", default=False),
    retry_failed=dict(type="bool", default=False),
    job_selector=dict(type="str"),
    drain=dict(type="bool", default=False),
    reboot=dict(type="bool", default=False),
    branch=dict(type="str", default=""),
    timeouts=dict(type="dict", default={}),
)


class ActionModule(ValidatedAction):
    ARGUMENT_SPEC = ARGUMENT_SPEC

    def run(self, tmp=None, task_vars=None):
        result = super(ActionModule, self).run(tmp, task_vars)
        args = self.validated_args()
        api = upgrade_api.connect_task(args)
        try:
            if args["op"] == "set":
                result.update(self._set(api, args))
            else:
                result.update(self._read(api, args))
        except ro.Replan as exc:
            result.update(failed=True, changed=False, replan=True, msg="%s: %s" % (args["node"], exc))
        except ro.RolloutError as exc:
            result.update(failed=True, changed=False, msg=str(exc))
        except TransportError as exc:
            result.update(failed=True, changed=False, msg=upgrade_api.unreachable(args, exc))
        return result

    def _read(self, api, args):
        ro.check_target(args["target"], args["branch"])
        view = ro.node_view(api.node(args["node"]))
        target = ro.resolve_target(args["current"], args["target"], args["minimum"])
        changes = ro.needs(args["current"], target)
        managed = view["labels"].get(ro.OPERATOR_DRIVER_LABEL) == "true" and "driver" in changes
        below = [] if args["allow_below_minimum"] else ro.below_minimum(
            target, changes, sm.check_date(), args["minimum"], args["current"])  # the controller's date
        downgrade = [] if args["allow_downgrade"] else ro.downgrades(args["current"], target, changes)
        decision = ro.decide(view, changes, operator_managed=managed, retry_failed=args["retry_failed"], below=below,
                             target=target, downgrade=downgrade)
        steps = ro.steps_from(decision["start"], args["job_selector"], args["drain"]) if decision["start"] else []
        report = dict(changed=False, state=view["state"], skip=view["skip"], unschedulable=view["unschedulable"],
                      ready=view["ready"], changes=changes, target=target,
                      driver_install=ro.driver_install(target["driver"]), light=ro.light_path(changes), decision=decision,
                      steps=steps, operator_managed=managed, msg="%s: %s" % (args["node"], decision["reason"]))
        if args["op"] == "plan":
            waits = api.pdb_waits(args["node"]) if decision["action"] == "upgrade" else {}
            report.update(pdb_waits=waits, plan=ro.plan_lines(
                args["node"], decision, steps, report["light"], waits, args["reboot"], args["current"], target,
                args["timeouts"]))
        return report

    def _set(self, api, args):
        if not args["state"]:
            return dict(failed=True, changed=False, msg="op=set needs state (one of %s)" % ", ".join(ro.ALL_STATES))
        target = args["target"] or None  # as op=read resolved it
        if self._task.check_mode:
            current, changed = api.move_state(args["node"], args["state"], dry_run=True, target=target)
        else:
            current, changed = api.set_state(args["node"], args["state"], upgrade_api.controller_identity(), target)
        if not changed:
            return dict(changed=False, state=current, msg="%s is already %s" % (args["node"], current))
        if self._task.check_mode:
            return dict(changed=True, state=current, msg="check mode: %s would be labelled %s=%s"
                        % (args["node"], ro.STATE_LABEL, args["state"]))
        moved = "%s: %s -> %s" % (args["node"], current or "(none)", args["state"])
        return dict(changed=True, state=args["state"], previous=current, msg=moved)
