# -*- coding: utf-8 -*-
# Copyright: gpunode.nvidia contributors
# Apache License 2.0
"""gpu_doctor rule for nodes started from a baked image: did their first boot succeed?

``RULES`` holds ``(id, severity, incident, title, check)`` entries, as in every rule module of this package, that
``doctor_rules`` turns into catalogue rules. The check reads the status file gpunode-firstboot.service writes
(firstboot_status.STATUS_PATH) through the diagnosis context, so it works on a live node and
on a node tree alike. Runs on managed nodes: standard library only.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json

from ansible_collections.gpunode.nvidia.plugins.module_utils.services import firstboot_status as fs
from ansible_collections.gpunode.nvidia.plugins.module_utils.doctor.context import finding, manual_fix


def _finding(rule, message, evidence, commands):
    return finding(rule, message, evidence, manual_fix("Read the first boot's journal, fix the cause, then run it "
                                                       "again: kubelet waits for it (docs/bake.md).", commands))


def _unit_state(ctx):
    if not ctx.node.live or ctx.node.run is None:
        return None
    rc, out, _err = ctx.node.run(["systemctl", "is-failed", fs.UNIT])
    return out.strip() or None


def check_firstboot_failed(rule, ctx):
    status, problem = fs.parse_status(ctx.node.read(fs.STATUS_PATH))
    commands = ["journalctl -b -u %s" % fs.UNIT, "systemctl restart %s" % fs.UNIT]
    if problem:
        return [_finding(rule, "The first-boot status file cannot be used: %s." % problem,
                         [{"kind": "file", "path": fs.STATUS_PATH, "line": None}], commands)]
    if status is None or status.get("ok"):
        return []  # not a baked image, or its first boot succeeded
    step = status.get("failed_step") or "unknown"
    evidence = [{"kind": "file", "path": fs.STATUS_PATH, "line": None,
                 "text": "failed_step=%s error=%s" % (step, status.get("error"))}]
    details = (status.get("steps") or {}).get(step)
    if details:
        evidence.append({"kind": "note", "text": json.dumps(details, sort_keys=True)[:1500]})
    state = _unit_state(ctx)
    if state:
        evidence.append({"kind": "note", "text": "%s is %s" % (fs.UNIT, state)})
    return [_finding(rule, "The first boot of this image failed at step %s: %s. kubelet, which waits for it, "
                           "has not started." % (step, status.get("error")), evidence, commands)]


RULES = (
    ("firstboot-failed", "critical", None, "The first boot of a baked GPU node image failed",
     check_firstboot_failed),
)
