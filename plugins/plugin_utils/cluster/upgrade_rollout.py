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
# On the Node: the versions its upgrade moves it to, written with upgrade-required; with upgrade-done it says
# the node reached them, so no controller enters the same upgrade again.
TARGET_ANNOTATION = "gpunode.nvidia/upgrade-target"
# On the Node, beside its state: when its slot was last renewed and the slot's ttl ({"renewed": t, "ttl": s}), so
# that a state change tells from the node it has just written whether the slot is due for renewal, without
# reading the Lease.
SLOT_RENEWED_ANNOTATION = "gpunode.nvidia/upgrade-slot-renewed"
# On the rollout's Lease: while present, no node starts (nodes in progress finish); its value says why.
PAUSE_ANNOTATION = "gpunode.nvidia/upgrade-paused"
GPU_RESOURCE = "nvidia.com/gpu"
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


class Replan(RolloutError):
    """The state machine refused a move because the node changed under this run (another controller finished
    or took it): the node is read and planned again, never labelled upgrade-failed."""


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
    """{name, labels, annotations, unschedulable, ready, state, skip, gpus} of a Node (a dict as the API returns it).

    gpus: the node's nvidia.com/gpu capacity (0 when it has none)."""
    metadata = node.get("metadata") or {}
    labels = metadata.get("labels") or {}
    status = node.get("status") or {}
    conditions = status.get("conditions") or []
    ready = [c for c in conditions if c.get("type") == "Ready"]
    return {
        "gpus": _count((status.get("capacity") or {}).get(GPU_RESOURCE)),
        "name": metadata.get("name"),
        "labels": labels,
        "annotations": metadata.get("annotations") or {},
        "unschedulable": bool((node.get("spec") or {}).get("unschedulable")),
        "ready": bool(ready) and ready[0].get("status") == "True",
        "state": labels.get(STATE_LABEL) or None,
        "skip": str(labels.get(SKIP_LABEL, "")).lower() == "true",
    }


def _count(quantity):
    try:
        return int(str(quantity or 0))
    except ValueError:
        return 0


def label_selector_matches(selector, labels):
    """Whether an equality-based label selector ('k=v,k2!=v2,k3,!k4') selects these labels."""
    for term in (t.strip() for t in (selector or "").split(",")):
        if not term:
            continue
        match = re.match(r"^(!?)([^=!]+?)\s*(?:(==?|!=)\s*(.*))?$", term)
        if not match:
            raise RolloutError("gpunode_upgrade_gpu_node_selector %r: give equality-based terms (key=value, key, "
                               "!key, key!=value) separated by commas" % selector)
        negated, key, operator, value = match.groups()
        if operator == "!=":
            found = labels.get(key) != value
        elif operator:
            found = labels.get(key) == value
        else:
            found = key in labels
        if found == bool(negated):
            return False
    return True


def gpu_views(views, selector):
    """The GPU nodes among node_view()s: the selector's label or nvidia.com/gpu capacity; each with found_by."""
    found = []
    for view in views:
        how = [why for why, hit in (("label", label_selector_matches(selector, view["labels"])),
                                    ("capacity", view["gpus"] > 0)) if hit]
        if how:
            found.append(dict(view, found_by=how))
    if not found:
        raise RolloutError("no GPU node found: no Node has the label %s (gpunode_upgrade_gpu_node_selector) or %s "
                           "capacity. Label the GPU nodes, or set gpunode_upgrade_gpu_node_selector to the label they "
                           "carry." % (selector, GPU_RESOURCE))
    return found


def how_found(views, selector):
    """'N GPU node(s): a by the label S, b by nvidia.com/gpu capacity' for the plan."""
    by_label = sum(1 for v in views if "label" in v.get("found_by", ()))
    by_capacity = sum(1 for v in views if v.get("found_by") == ["capacity"])
    return ("%d GPU node(s): %d by the label %s, %d more by %s capacity alone"
            % (len(views), by_label, selector, by_capacity, GPU_RESOURCE))


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


DRIVER_FORMAT = re.compile(r"^(\d+:)?\d{3}(\.\d+){0,2}(-[0-9A-Za-z.~+]+)?$")
PACKAGE_FORMAT = re.compile(r"^(\d+:)?\d+\.\d+(\.\d+)*(-[0-9A-Za-z.~+]+)?$")


def check_target(target, branch=""):
    """Refuse a target that is no version (58O, latest, 5800) or a driver outside nvidia_driver_branch."""
    words = {"driver": ("gpunode_upgrade_driver", DRIVER_FORMAT, "a driver branch (580) or version (580.95.05)"),
             "toolkit": ("gpunode_upgrade_toolkit", PACKAGE_FORMAT, "a toolkit version (1.19.1)"),
             "fabricmanager": ("gpunode_upgrade_fabricmanager", DRIVER_FORMAT, "the driver's version (580.95.05)")}
    for part, (variable, form, example) in sorted(words.items()):
        wanted = str((target or {}).get(part) or "")
        if wanted and not form.match(wanted):
            raise RolloutError("%s is %r: no version. Give %s, as the packages name it; nothing was changed."
                               % (variable, wanted, example))
    driver = str((target or {}).get("driver") or "")
    branch = str(branch or "")
    if driver and branch and driver_install(driver)["branch"] != branch:
        raise RolloutError("gpunode_upgrade_driver %s is not on nvidia_driver_branch %s, the branch site.yml keeps "
                           "the nodes on: an upgrade moves within it (docs/upgrade.md, the pin). Give a version of "
                           "branch %s, or change nvidia_driver_branch first; nothing was changed."
                           % (driver, branch, branch))


def target_key(target):
    """The target as the Node's annotation records it: the parts given, in a stable order."""
    return json.dumps(dict((k, v) for k, v in sorted((target or {}).items()) if v), sort_keys=True,
                      separators=(",", ":"))


def downgrades(current, target, changes):
    """The parts (of those that change) whose target is an older full version than the node's, within its branch;
    one sentence each. A move to another driver branch is no rollback: check_target keeps the run on one."""
    found = []
    for part in ("driver", "toolkit"):
        have, wanted = _upstream(current.get(part) or ""), _upstream((target or {}).get(part) or "")
        if part in changes and "." in wanted and have and _numbers(wanted) < _numbers(have):
            found.append("%s %s -> %s" % (part, have, wanted))
    return found


def _numbers(version):
    return tuple(int(n) for n in re.findall(r"\d+", version))


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


def decide(view, changes, operator_managed=False, retry_failed=False, below=(), target=None, downgrade=()):
    """{action, start, reason} for one node at the start of a run.

    action: skip | at-target | refused | failed | upgrade. start: the state to begin (or resume) at.
    below: below_minimum()'s sentences when the operator did not allow a target below the security minimum (or
    on an ended driver branch); downgrade: downgrades()'s, when the operator did not allow a rollback; target: the
    resolved target, so that a node upgrade-done for this very target is at it."""
    state = view["state"]
    if view["skip"]:
        return _decision("skip", None, "the node has %s=true" % SKIP_LABEL)
    if operator_managed:
        return _decision("refused", None, "NVIDIA's GPU operator manages the driver on this node (label %s): upgrade "
                         "it through the operator's own upgrade policy, %s" % (OPERATOR_DRIVER_LABEL, OPERATOR_POLICY))
    if below:
        return _decision("refused", None, "nothing was changed: %s Or set gpunode_upgrade_allow_below_minimum=true to "
                         "go ahead knowingly." % " ".join(below))
    if downgrade:
        return _decision("refused", None, "nothing was changed: the target is older than what the node runs (%s), a "
                         "downgrade. Set gpunode_upgrade_allow_downgrade=true to roll back through the same states "
                         "(docs/upgrade.md, rollback)." % ", ".join(downgrade))
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
    if target is not None and done_for(view, target):
        return _decision("at-target", None,
                         "already upgraded to this target (%s, annotation %s)" % (DONE, TARGET_ANNOTATION))
    return _decision("upgrade", REQUIRED, "needs %s" % ", ".join(changes))


def done_for(view, target):
    """The node finished an upgrade to exactly this target."""
    return view["state"] == DONE and view["annotations"].get(TARGET_ANNOTATION) == target_key(target)


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


def expected_previous(state):
    """The state a node is in just before STATE on the default walk (no job selector, no drain), None for the start
    and for upgrade-failed: what a label write may assume, and check, without reading the node first."""
    if state not in IN_PROGRESS + (DONE,):
        return None
    walk = steps_from(REQUIRED)
    return [step for step in walk if STATES.index(step) < STATES.index(state)][-1]


def check_transition(current, new, done_same_target=False):
    """Refuse the transitions the state machine does not have: a failed node jumping to done, a step back, a
    node at rest (no state, or done) entering mid-way (every upgrade begins at upgrade-required), and a node
    done for this very target entering it again. So a late write (a task of a killed run still finishing,
    another controller) cannot undo or repeat a finished node. Refusals other than a failed node's are Replan."""
    if new == current or new == FAILED:
        return
    if current == DONE and done_same_target:
        raise Replan("the node is already %s for this target: not entered again" % DONE)
    if new == REQUIRED:
        return
    if current == FAILED:
        raise RolloutError("node is %s: only a retry (back to %s) may move it" % (FAILED, REQUIRED))
    if current in (None, DONE):
        raise Replan("cannot go from %s to %s: an upgrade begins at %s" % (current or "no state", new, REQUIRED))
    if current not in STATES or new not in STATES or STATES.index(new) < STATES.index(current):
        raise Replan("cannot go from %s to %s" % (current, new))


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


def acquire(candidate, views, slots, holder, max_parallel, max_unavailable, now, ttl, holder_alive, paused=None):
    """{granted, halted, held_elsewhere, slots, reason, unavailable, in_progress} for one node asking for a slot.

    views: node_view() of every GPU node; slots: the Lease's table; holder: this controller's identity;
    paused: the Lease's pause annotation (None: not paused). Refused without waiting when another live
    controller holds the node (held_elsewhere: it is that controller's) or a node failed (halted); refused to
    wait otherwise. The returned slots (when granted) are the table to write back: dead holders dropped, the
    node's slot renewed."""
    live = live_slots(slots, now, ttl, holder_alive)
    mine = live.get(candidate)
    if mine and mine.get("holder") != holder:
        result = _refusal(live, views, "node %s is being upgraded by another controller (%s, renewed %ds ago): left "
                          "to it" % (candidate, mine.get("holder"), now - float(mine.get("renewed", 0))))
        result["held_elsewhere"] = True
        return result
    unavailable_nodes = sorted(v["name"] for v in views if unavailable(v))
    failed = sorted(v["name"] for v in views if v["state"] == FAILED and v["name"] != candidate)
    if failed and not mine:
        result = _refusal(live, views, halt_reason(failed))
        result["halted"] = True
        return result
    if paused is not None and not mine:
        return _refusal(live, views, "the rollout is paused (annotation %s on the Lease: %s); remove it to resume"
                        % (PAUSE_ANNOTATION, paused or "no reason given"))
    others = dict((node, slot) for node, slot in live.items() if node != candidate)
    if not mine and len(others) >= max_parallel:
        return _refusal(live, views, "max_parallel %d reached: %s in progress" % (max_parallel, ", ".join(sorted(others))))
    counted = set(unavailable_nodes) | set(others) | {candidate}
    if not mine and len(counted) > max_unavailable:
        return _refusal(live, views, "max_unavailable %d reached: %s unavailable (cordoned, NotReady or in "
                        "progress)" % (max_unavailable, ", ".join(sorted(set(counted) - {candidate}))))
    table = dict(live)
    table[candidate] = {"holder": holder, "renewed": round(now, 3), "ttl": ttl}
    return {"granted": True, "halted": False, "held_elsewhere": False, "slots": table, "reason": "slot taken",
            "unavailable": unavailable_nodes, "in_progress": sorted(table)}


def halt_reason(failed):
    return ("the rollout stopped: %s %s %s (it stays cordoned until someone looks); no new node starts. Retry with "
            "gpunode_upgrade_retry_failed=true once the cause is fixed"
            % (", ".join(failed), "is" if len(failed) == 1 else "are", FAILED))


def _refusal(live, views, reason):
    return {"granted": False, "halted": False, "held_elsewhere": False, "slots": None, "reason": reason,
            "unavailable": sorted(v["name"] for v in views if unavailable(v)), "in_progress": sorted(live)}


def slot_budget(views, live, max_parallel, max_unavailable):
    """How many nodes may be in progress at once now: the limits less the nodes unavailable for other reasons."""
    elsewhere = set(v["name"] for v in views if unavailable(v)) - set(live)
    return max(0, min(max_parallel, max_unavailable - len(elsewhere)))


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
    table[candidate] = dict(slot, renewed=round(now, 3))
    return table


def slot_stamp(slot):
    """The SLOT_RENEWED_ANNOTATION value for a slot of the table (None for a slot without its ttl: an older
    release took it, and it is renewed at every state change as then)."""
    if not slot or not slot.get("ttl"):
        return None
    return json.dumps({"renewed": slot.get("renewed", 0), "ttl": slot["ttl"]}, sort_keys=True, separators=(",", ":"))


def renewal_due(annotations, now):
    """Whether a state change renews the node's slot: a quarter of the slot's ttl has passed since the renewal the
    node records (SLOT_RENEWED_ANNOTATION), or the node records none. So a node writes the shared Lease a few times
    an hour, not at every step, and its slot stays live for three quarters of a ttl after its last renewal."""
    try:
        stamp = json.loads((annotations or {}).get(SLOT_RENEWED_ANNOTATION) or "")
        return now - float(stamp["renewed"]) >= float(stamp["ttl"]) / 4
    except (ValueError, TypeError, KeyError):
        return True


# --- the plan check mode prints -------------------------------------------------------------------------

def worst_case_seconds(steps, light, timeouts):
    """The longest the waiting steps of a node may take by their timeouts (the install's own time is on top).

    timeouts: {job, eviction, validation, reboot} in seconds. A driver change counts a reboot: the modules may
    refuse to unload."""
    waits = {"wait-for-jobs-required": ["job"], "pod-deletion-required": ["eviction"], "drain-required": ["eviction"],
             "pod-restart-required": ["validation"] + ([] if light else ["reboot"]),
             "validation-required": ["validation"]}
    return sum(int(timeouts.get(name) or 0) for step in steps for name in waits.get(step, ()))


def duration(seconds):
    hours, rest = divmod(int(seconds), 3600)
    return ("%dh%02dm" % (hours, rest // 60)) if hours else ("%dm%02ds" % divmod(rest, 60))


def versions_line(current, target):
    """'driver 580.159.03 -> 580.178.04, toolkit 1.17.8 (kept)' for the parts the run manages."""
    parts = []
    for part in ("driver", "toolkit", "fabricmanager"):
        have, wanted = (current or {}).get(part) or "", (target or {}).get(part) or ""
        if wanted and not same_version(have, wanted):
            parts.append("%s %s -> %s" % (part, have or "(none)", wanted))
        elif have:
            parts.append("%s %s (kept)" % (part, have))
    return ", ".join(parts) or "no versions managed"


def plan_lines(node, decision, steps, light, pdb_waits=None, reboot=False, current=None, target=None, timeouts=None):
    """Lines saying what a real run would do on one node, in order."""
    lines = ["%s: %s (%s)" % (node, decision["action"], decision["reason"]),
             "  versions: %s" % versions_line(current, target)]
    if decision["action"] != "upgrade":
        return lines
    if timeouts:
        lines.append("  worst case %s by the timeouts (%s), plus the install itself"
                     % (duration(worst_case_seconds(steps, light, timeouts)),
                        ", ".join("%s %ss" % item for item in sorted(timeouts.items()))))
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
