# -*- coding: utf-8 -*-
# Copyright: gpunode.nvidia contributors
# Apache License 2.0
"""gpunode.nvidia.gpu_upgrade_slot: runs on the controller only (kubeconfig + kubernetes client).

The documentation is in plugins/modules/gpu_upgrade_slot.py; the decisions are in
plugins/plugin_utils/cluster/upgrade_rollout.py, the API calls in plugins/plugin_utils/cluster/upgrade_api.py.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import random
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
        started = time.time()
        while True:
            outcome = self._try_once(api, args, holder)
            waited = round(time.time() - started, 1)
            if outcome["granted"] or outcome["halted"] or outcome["held_elsewhere"]:
                return dict(outcome, changed=outcome["granted"] and not self._task.check_mode, waited_s=waited,
                            msg=outcome["reason"])
            if self._task.check_mode:
                return dict(outcome, changed=False, waited_s=0, msg="would wait: %s" % outcome["reason"])
            if waited >= args["timeout"]:
                return dict(outcome, failed=True, changed=False, waited_s=waited,
                            msg="no upgrade slot for node %s within %ds: %s. Raise max_unavailable or timeout, or "
                                "bring the unavailable nodes back." % (args["node"], args["timeout"], outcome["reason"]))
            # Waiting controllers that looked together would look together again: each waits a little more or less.
            time.sleep(args["poll_interval"] * random.uniform(0.75, 1.25))

    def _try_once(self, api, args, holder):
        """One decision on what the API holds now, written with the Lease's resourceVersion."""
        for _attempt in range(20):
            views = api.gpu_nodes(args["gpu_node_selector"])
            limit = ro.max_unavailable_count(args["max_unavailable"], len(views))
            slots, lease = api.read_slots()
            now = time.time()
            outcome = ro.acquire(args["node"], views, slots, holder, args["max_parallel"], limit, now,
                                 args["ttl"], upgrade_api.holder_alive, paused=api.paused(lease))
            live = ro.live_slots(slots, now, args["ttl"], upgrade_api.holder_alive)
            outcome = dict(outcome, max_unavailable=limit, gpu_nodes=ro.how_found(views, args["gpu_node_selector"]),
                           budget=ro.slot_budget(views, live, args["max_parallel"], limit),
                           paused=api.paused(lease))
            if not outcome["granted"] or self._task.check_mode:
                return dict(outcome, slots=None)
            try:
                api.write_slots(outcome["slots"], lease)
                return dict(outcome, slots=None)
            except upgrade_api.Conflict:
                continue  # another controller wrote first: decide again on what it wrote
        raise ro.RolloutError("Lease %s/%s changed under every one of 20 attempts: too many writers"
                              % (args["lease_namespace"], args["lease_name"]))

    def _release_or_renew(self, api, args, holder):
        if self._task.check_mode:
            return dict(changed=False, msg="check mode: the slot of %s would be %sd" % (args["node"], args["op"]))
        if args["op"] == "release":
            table = api.update_slots(lambda slots: ro.release(args["node"], slots, holder))
        else:
            table = api.update_slots(lambda slots: ro.renew(args["node"], slots, holder, time.time()))
        done = table is not None
        what = "%sd" % args["op"] if done else "not held by this controller: nothing to %s" % args["op"]
        return dict(changed=done, msg="slot of %s %s" % (args["node"], what))
