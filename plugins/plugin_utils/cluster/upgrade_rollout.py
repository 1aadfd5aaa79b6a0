# -*- coding: utf-8 -*-
# Copyright: gpunode.nvidia contributors
# Apache License 2.0
"""The rolling upgrade's decisions, without I/O: node states, what a node needs, and the slot arithmetic.

State is kept on the Node object with the GPU operator's names (NVIDIA/k8s-operator-libs,
pkg/upgrade/consts.go, driver name ``gpu``), so dashboards and runbooks made for the operator read it:

    upgrade-required -> cordon-required -> wait-for-jobs-required -> pod-deletion-required -> drain-required
      -> pod-restart-required -> validation-required -> uncordon-required -> upgrade-done   (| upgrade-failed)

Each label names the step about to run; it is written before the step, so a run killed anywhere resumes at
that step. ``upgrade-failed`` is left only by a retry, which starts again at ``upgrade-required`` (preflight
included): a failed node never jumps to done.

Slots live in the cluster, in one Lease (``SLOTS_ANNOTATION``: node -> holder and renewal time) written with
its resourceVersion, so two controllers never exceed the limits together. A node may take a slot when

* no GPU node is ``upgrade-failed`` (a failure stops new starts; nodes in progress finish),
* fewer than ``max_parallel`` live slots are held, and
* the GPU nodes unavailable for any reason (unschedulable or NotReady) together with the slot holders and the
  node itself number at most ``max_unavailable`` (a count, or a percentage of the GPU nodes rounded up).

A slot is live while its controller is: renewed within ``ttl`` seconds and, when the controller ran on this
machine, its process still the same one.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import math
import re

from ansible_collections.gpunode.nvidia.plugins.module_utils.install import security_minimums as sm

STATE_LABEL = "nvidia.com/gpu-driver-upgrade-state"
SKIP_LABEL = "nvidia.com/gpu-driver-upgrade.skip"
INITIAL_STATE_ANNOTATION = "nvidia.com/gpu-driver-upgrade.node-initial-state.unschedulable"
SLOTS_ANNOTATION = "gpunode.nvidia/upgrade-slots"
TARGET_ANNOTATION = "gpunode.nvidia/upgrade-target"
# The GPU operator labels the nodes whose driver its driver DaemonSet runs on.
OPERATOR_DRIVER_LABEL = "nvidia.com/gpu.deploy.driver"

REQUIRED = "upgrade-required"
DONE = "upgrade-done"
FAILED = "upgrade-failed"
STATES = (REQUIRED, "cordon-required", "wait-for-jobs-required", "pod-deletion-required", "drain-required",
          "pod-restart-required", "validation-required", "uncordon-required", DONE)
IN_PROGRESS = STATES[1:-1]
ALL_STATES = STATES + (FAILED,)

OPERATOR_POLICY = ("https://docs.nvidia.com/datacenter/cloud-native/gpu-operator/latest/gpu-driver-upgrades.html "
                   "(ClusterPolicy driver.upgradePolicy)")


class RolloutError(Exception):
    pass


# --- limits ---------------------------------------------------------------------------------------------

def max_unavailable_count(value, gpu_nodes):
    """max_unavailable as a node count: an integer, or 'N%' of the GPU nodes rounded up (the operator's rule)."""
    text = str(value).strip()
    match = re.match(r"^(\d+)(%?)$", text)
    if not match:
        raise RolloutError("max_unavailable is %r: give a node count (2) or a percentage of the GPU nodes (25%%)"
                           % (value,))
    number = int(match.group(1))
    count = int(math.ceil(gpu_nodes * number / 100.0)) if match.group(2) else number
    if count < 1:
        raise RolloutError("max_unavailable %s allows no unavailable node among %d GPU node(s): no node could ever "
                           "be upgraded. Give at least 1 (or a percentage that rounds up to 1)." % (text, gpu_nodes))
    return count


def check_max_parallel(value):
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise RolloutError("max_parallel is %r: give the number of nodes upgraded at once (1 or more)" % (value,))
    return value


# --- the Node object as the rollout sees it -------------------------------------------------------------

def node_view(node):
    """{name, labels, annotations, unschedulable, ready, state, skip} of a Node (a dict as the API returns it)."""
    metadata = node.get("metadata") or {}
    labels = metadata.get("labels") or {}
    conditions = (node.get("status") or {}).get("conditions") or []
    ready = [c for c in conditions if c.get("type") == "Ready"]
    return {
        "name": metadata.get("name"),
        "labels": labels,
        "annotations": metadata.get("annotations") or {},
        "unschedulable": bool((node.get("spec") or {}).get("unschedulable")),
        "ready": bool(ready) and ready[0].get("status") == "True",
        "state": labels.get(STATE_LABEL) or None,
        "skip": str(labels.get(SKIP_LABEL, "")).lower() == "true",
    }


def unavailable(view):
    return view["unschedulable"] or not view["ready"]


# --- what a node needs ----------------------------------------------------------------------------------

def needs(current, target):
    """What differs between the node's versions and the target: a list of 'driver', 'toolkit', 'fabricmanager'.

    current / target: {driver, toolkit, fabricmanager}; a target value None or '' means "not managed"."""
    changes = []
    for part in ("driver", "toolkit", "fabricmanager"):
        wanted = (target or {}).get(part)
        if wanted and not same_version(current.get(part), wanted):
            changes.append(part)
    return changes


def same_version(installed, wanted):
    """'535.309.01' matches wanted '535.309.01', '535.309.01-1', or a branch '535' when installed is on it."""
    if not installed:
        return False
    have = _upstream(installed)
    want = _upstream(wanted)
    return have == want or (re.match(r"^\d+$", want) is not None and have.split(".")[0] == want)


def _upstream(version):
    return str(version).rsplit(":", 1)[-1].split("-")[0].lstrip("v")


def light_path(changes):
    """Toolkit-only and fabric-manager-only upgrades neither unload the driver nor reboot."""
    return "driver" not in changes


def below_minimum(target, changes, on, minimum=False, current=None):
    """One sentence per target version (of those that change) below the security minimum table, naming the
    bulletins, and one for a target driver on a branch past its end of life on the day `on` (changed or not:
    such a branch gets no fixes), naming the supported branches.

    minimum: the target is each node's security minimum, which stays on the branch of its driver (`current`).
    A driver branch alone ('535') is no version: the packages' newest of the branch is installed."""
    found = []
    driver = (target or {}).get("driver") or (minimum and (current or {}).get("driver")) or ""
    ended = sm.ended_branch(driver, on) if driver else None
    if ended:
        found.append(_ended_target(driver, ended, minimum))
    for part, product in (("driver", sm.DRIVER), ("toolkit", sm.TOOLKIT)):
        wanted = (target or {}).get(part) or ""
        gap = sm.shortfall(product, wanted) if part in changes and "." in wanted else None
        if gap and not (part == "driver" and ended):
            found.append("The target is below the security minimum: %s Choose a fixed version "
                         "(gpunode_upgrade_target=minimum picks it)." % sm.describe(gap))
    return found


def _ended_target(driver, ended, minimum):
    where = ("gpunode_upgrade_target=minimum keeps a node on its driver's branch, and this node runs %s"
             % driver) if minimum else "The target driver %s is on a branch past its end of life" % driver
    return ("%s. %s. Set gpunode_upgrade_driver to one of the supported branches (%s) after checking that it supports "
            "the nodes' GPUs and fabric manager." % (where, sm.ended_advice(ended), ", ".join(
                row["branch"] for row in ended["supported"])))


def resolve_target(current, target, minimum):
    """The versions this node moves to: the given target, or (minimum) the security minimum of what it runs.

    Fabric manager follows the driver (it must be exactly the driver's version) on nodes that have it."""
    resolved = dict((key, target.get(key) or "") for key in ("driver", "toolkit", "fabricmanager"))
    if minimum:
        for key, product in (("driver", sm.DRIVER), ("toolkit", sm.TOOLKIT)):
            gap = sm.shortfall(product, current.get(key))
            resolved[key] = gap["minimum"] if gap else ""
    if current.get("fabricmanager") and not resolved["fabricmanager"]:
        resolved["fabricmanager"] = resolved["driver"] or current.get("driver") or ""
    return resolved


def driver_install(driver):
    """{branch, version} the driver role installs for a target driver: a full version ('1:535.309.01-1') exactly
    as '535.309.01' (epoch and package revision are the packages' business), a branch alone ('535') as the
    branch's newest (version '')."""
    upstream = _upstream(driver) if driver else ""
    return {"branch": upstream.split(".")[0], "version": upstream if "." in upstream else ""}


def decide(view, changes, operator_managed=False, retry_failed=False, below=()):
    """{action, start, reason} for one node at the start of a run.

    action: skip | at-target | refused | failed | upgrade. start: the state to begin (or resume) at.
    below: below_minimum()'s sentences when the operator did not allow a target below the security minimum (or
    on an ended driver branch)."""
    state = view["state"]
    if view["skip"]:
        return _decision("skip", None, "the node has %s=true" % SKIP_LABEL)
    if operator_managed:
        return _decision("refused", None, "NVIDIA's GPU operator manages the driver on this node (label %s): upgrade "
                         "it through the operator's own upgrade policy, %s" % (OPERATOR_DRIVER_LABEL, OPERATOR_POLICY))
    if below:
        return _decision("refused", None, "nothing was changed: %s Or set gpunode_upgrade_allow_below_minimum=true to "
                         "go ahead knowingly." % " ".join(below))
    if state == FAILED:
        if retry_failed:
            return _decision("upgrade", REQUIRED, "retry of a failed upgrade: from the beginning")
        return _decision("failed", None, "the node is %s from an earlier run: it stays cordoned and stops the "
                         "rollout; retry it with gpunode_upgrade_retry_failed=true once its cause is fixed" % FAILED)
    if state in IN_PROGRESS or state == REQUIRED:
        # REQUIRED too: a retried node may already run the target and still be cordoned from its failure
        return _decision("upgrade", state, "resuming at %s (an earlier run stopped there)" % state)
    if not changes:
        return _decision("at-target", None, "already at the target")
    return _decision("upgrade", REQUIRED, "needs %s" % ", ".join(changes))


def _decision(action, start, reason):
    return {"action": action, "start": start, "reason": reason}


def steps_from(start, job_selector=None, drain=False):
    """The states still to walk from `start` (inclusive) to done, leaving out the steps that do nothing."""
    if start not in STATES:
        raise RolloutError("unknown upgrade state %r; the states are %s" % (start, ", ".join(ALL_STATES)))
    steps = list(STATES[STATES.index(start):])
    if not job_selector and "wait-for-jobs-required" in steps:
        steps.remove("wait-for-jobs-required")
    if not drain and "drain-required" in steps:
        steps.remove("drain-required")
    return steps


def check_transition(current, new):
    """Refuse the transitions the state machine does not have: a failed node jumping to done, a step back, and
    a node at rest (no state, or done) entering mid-way: every upgrade begins at upgrade-required. So a late
    write (a task of a killed run still finishing, another controller) cannot undo a finished node."""
    if new == current or new == FAILED or new == REQUIRED:
        return
    if current == FAILED:
        raise RolloutError("node is %s: only a retry (back to %s) may move it" % (FAILED, REQUIRED))
    if current in (None, DONE):
        raise RolloutError("cannot go from %s to %s: an upgrade begins at %s" % (current or "no state", new, REQUIRED))
    if current not in STATES or new not in STATES or STATES.index(new) < STATES.index(current):
        raise RolloutError("cannot go from %s to %s" % (current, new))


# --- slots ----------------------------------------------------------------------------------------------

def parse_slots(annotations):
    """The slot table of the Lease: {node: {holder, renewed}}; an unreadable table is an error, never empty."""
    text = (annotations or {}).get(SLOTS_ANNOTATION)
    if not text:
        return {}
    try:
        slots = json.loads(text)
    except ValueError as exc:
        raise RolloutError("the Lease's annotation %s is not JSON (%s): someone edited it; delete the annotation "
                           "when no upgrade runs" % (SLOTS_ANNOTATION, exc))
    if not isinstance(slots, dict):
        raise RolloutError("the Lease's annotation %s is not a JSON object" % SLOTS_ANNOTATION)
    return slots


def dump_slots(slots):
    return json.dumps(slots, sort_keys=True, separators=(",", ":"))


def live_slots(slots, now, ttl, holder_alive):
    """The slots whose controller still runs (renewed within ttl, and alive where that can be told)."""
    return dict((node, slot) for node, slot in slots.items()
                if now - float(slot.get("renewed", 0)) <= ttl and holder_alive(slot.get("holder")) is not False)


def acquire(candidate, views, slots, holder, max_parallel, max_unavailable, now, ttl, holder_alive):
    """{granted, halted, slots, reason, unavailable, in_progress} for one node asking for a slot.

    views: node_view() of every GPU node; slots: the Lease's table; holder: this controller's identity.
    The returned slots (when granted) are the table to write back: dead holders dropped, the node's slot renewed."""
    live = live_slots(slots, now, ttl, holder_alive)
    mine = live.get(candidate)
    if mine and mine.get("holder") != holder:
        return _refusal(live, views, "node %s is being upgraded by another controller (%s, renewed %ds ago)"
                        % (candidate, mine.get("holder"), now - float(mine.get("renewed", 0))))
    unavailable_nodes = sorted(v["name"] for v in views if unavailable(v))
    failed = sorted(v["name"] for v in views if v["state"] == FAILED and v["name"] != candidate)
    if failed and not mine:
        result = _refusal(live, views, "the rollout stopped: %s %s %s (it stays cordoned until someone looks); no "
                          "new node starts" % (", ".join(failed), "is" if len(failed) == 1 else "are", FAILED))
        result["halted"] = True
        return result
    others = dict((node, slot) for node, slot in live.items() if node != candidate)
    if not mine and len(others) >= max_parallel:
        return _refusal(live, views, "max_parallel %d reached: %s in progress" % (max_parallel, ", ".join(sorted(others))))
    counted = set(unavailable_nodes) | set(others) | {candidate}
    if not mine and len(counted) > max_unavailable:
        return _refusal(live, views, "max_unavailable %d reached: %s unavailable (cordoned, NotReady or in "
                        "progress)" % (max_unavailable, ", ".join(sorted(set(counted) - {candidate}))))
    table = dict(live)
    table[candidate] = {"holder": holder, "renewed": round(now, 3)}
    return {"granted": True, "halted": False, "slots": table, "reason": "slot taken",
            "unavailable": unavailable_nodes, "in_progress": sorted(table)}


def _refusal(live, views, reason):
    return {"granted": False, "halted": False, "slots": None, "reason": reason,
            "unavailable": sorted(v["name"] for v in views if unavailable(v)), "in_progress": sorted(live)}


def release(candidate, slots, holder):
    """The table without this controller's slot for the node (None when there is nothing to write)."""
    slot = slots.get(candidate)
    if not slot or slot.get("holder") != holder:
        return None
    table = dict(slots)
    del table[candidate]
    return table


def renew(candidate, slots, holder, now):
    """The table with this controller's slot renewed (None when it holds none for the node)."""
    slot = slots.get(candidate)
    if not slot or slot.get("holder") != holder:
        return None
    table = dict(slots)
    table[candidate] = {"holder": holder, "renewed": round(now, 3)}
    return table


# --- the plan check mode prints -------------------------------------------------------------------------

def plan_lines(node, decision, steps, light, pdb_waits=None, reboot=False):
    """Lines saying what a real run would do on one node, in order."""
    lines = ["%s: %s (%s)" % (node, decision["action"], decision["reason"])]
    if decision["action"] != "upgrade":
        return lines
    words = {
        REQUIRED: "preflight: target packages for the running kernel, fabric manager, Secure Boot, security minimum",
        "cordon-required": "cordon (a node someone else cordoned stays cordoned afterwards)",
        "wait-for-jobs-required": "wait for the pods of the job selector to finish",
        "pod-deletion-required": "evict GPU and DRA-claim pods through the Eviction API",
        "drain-required": "drain the other pods",
        "pod-restart-required": "pause GPU operands, stop GPU clients, %s, install, start clients, resume operands" % (
            "keep the modules loaded (light path, no reboot)" if light else
            "reboot (asked)" if reboot else "unload the modules (reboot only when they cannot be unloaded)"),
        "validation-required": "validate: driver version, fabric manager, Ready, allocatable, vector-add pod",
        "uncordon-required": "uncordon if this run cordoned it",
        DONE: "label %s" % DONE,
    }
    for step in steps:
        lines.append("  %s -> %s" % (step, words[step]))
    for pod, pdb in sorted((pdb_waits or {}).items()):
        lines.append("  would wait for PodDisruptionBudget %s before evicting %s" % (pdb, pod))
    return lines
