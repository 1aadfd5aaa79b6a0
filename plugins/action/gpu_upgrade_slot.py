# -*- coding: utf-8 -*-
# Copyright: gpunode.nvidia contributors
# Apache License 2.0
"""gpunode.nvidia.gpu_upgrade_slot: runs on the controller only (kubeconfig + kubernetes client).

The documentation is in plugins/modules/gpu_upgrade_slot.py; the decisions are in
plugins/plugin_utils/cluster/upgrade_rollout.py, the API calls in plugins/plugin_utils/cluster/upgrade_api.py.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import time

from ansible.errors import AnsibleActionFail

from ansible_collections.gpunode.nvidia.plugins.plugin_utils.cluster import upgrade_api
from ansible_collections.gpunode.nvidia.plugins.plugin_utils.cluster.client import TransportError
from ansible_collections.gpunode.nvidia.plugins.plugin_utils.cluster import upgrade_rollout as ro
from ansible_collections.gpunode.nvidia.plugins.plugin_utils.action import ValidatedAction

ARGUMENT_SPEC = dict(
    upgrade_api.UPGRADE_OPTIONS,
    op=dict(type="str", default="acquire", choices=["acquire", "release", "renew"]),
    max_parallel=dict(type="int", default=1),
    max_unavailable=dict(type="raw", default="25%"),
    gpu_node_selector=dict(type="str", default="nvidia.com/gpu.present=true"),
    timeout=dict(type="int", default=3600),
    poll_interval=dict(type="float", default=5.0),
    ttl=dict(type="int", default=3600),
)


class ActionModule(ValidatedAction):
    ARGUMENT_SPEC = ARGUMENT_SPEC

    def run(self, tmp=None, task_vars=None):
        result = super(ActionModule, self).run(tmp, task_vars)
        args = self.validated_args()
        if args["timeout"] < 0 or args["poll_interval"] <= 0 or args["ttl"] <= 0:
            raise AnsibleActionFail("timeout must not be negative; poll_interval and ttl must be positive")
        api = upgrade_api.connect_task(args)
        holder = upgrade_api.controller_identity()
        try:
            if args["op"] == "acquire":
                result.update(self._acquire(api, args, holder))
            else:
                result.update(self._release_or_renew(api, args, holder))
        except ro.RolloutError as exc:
            result.update(failed=True, changed=False, msg=str(exc))
        except TransportError as exc:
            result.update(failed=True, changed=False, msg=upgrade_api.unreachable(args, exc))
        result["holder"] = holder
        return result

    def _acquire(self, api, args, holder):
        ro.check_max_parallel(args["max_parallel"])
        request = dict(node=args["node"], holder=holder, max_parallel=args["max_parallel"],
                       max_unavailable=args["max_unavailable"], selector=args["gpu_node_selector"], ttl=args["ttl"])
        if self._task.check_mode:
            outcome, _known = api.slot_attempt(request, write=False)
            if outcome["granted"] or outcome["halted"] or outcome["held_elsewhere"]:
                return dict(outcome, changed=False, waited_s=0, msg=outcome["reason"])
            return dict(outcome, changed=False, waited_s=0, msg="would wait: %s" % outcome["reason"])
        outcome, waited = api.wait_for_slot(request, args["timeout"], args["poll_interval"])
        waited = round(waited, 1)
        if outcome["granted"] or outcome["halted"] or outcome["held_elsewhere"]:
            return dict(outcome, changed=outcome["granted"], waited_s=waited, msg=outcome["reason"])
        return dict(outcome, failed=True, changed=False, waited_s=waited,
                    msg="no upgrade slot for node %s within %ds: %s. Raise max_unavailable or timeout, or bring the "
                        "unavailable nodes back." % (args["node"], args["timeout"], outcome["reason"]))

    def _release_or_renew(self, api, args, holder):
        if self._task.check_mode:
            return dict(changed=False, msg="check mode: the slot of %s would be %sd" % (args["node"], args["op"]))
        if args["op"] == "release":
            done = api.release_slot(args["node"], holder)
        else:
            done = api.update_slots(lambda slots: ro.renew(args["node"], slots, holder, time.time())) is not None
        what = "%sd" % args["op"] if done else "not held by this controller: nothing to %s" % args["op"]
        return dict(changed=done, msg="slot of %s %s" % (args["node"], what))
