# -*- coding: utf-8 -*-
# Copyright: gpunode.nvidia contributors
# Apache License 2.0
"""Diagnosis rules for one GPU node: what is wrong, the evidence, and the fix.

``diagnose(root)`` reads the node through ``discovery`` (kubelet, every runtime
instance, driver, toolkit, glibc) and ``runtime_views`` (what each runtime
instance really runs), then runs every rule of ``CATALOGUE``: the ``RULES`` of
every module in ``RULE_MODULES``, each entry ``(id, severity, incident, title,
check)``, with findings built by context.py's ``finding``. A rule returns
findings; it never changes the node. A rule that raises is reported as the
finding ``doctor-rule-error`` and the other rules still run: a half-broken
node (containerd down, kubelet dead, a malformed config) must give findings,
never a crash.

The rules live with their kind, in this package: runtime_table.py (I1, I2,
I5), kubelet.py (I3), driver_toolkit.py (I4, I6), containerd_config.py
(imports, SystemdCgroup, generated files), health.py, firstboot.py,
driver_integrity.py, partitioning.py and security.py; what they read and the
one finding and fix builder are in context.py.

A finding::

    {"rule": "nvidia-runtime-missing", "severity": "critical", "incident": "I1",
     "title": "...", "message": "...",
     "evidence": [{"kind": "file", "path": "/etc/containerd/config.toml", "line": 12, "text": "..."},
                  {"kind": "process", "pid": 812, "command": "..."},
                  {"kind": "socket", "path": "...", "state": "..."},
                  {"kind": "version", "name": "containerd", "version": "1.6.20", "source": "..."},
                  {"kind": "cri", "socket": "...", "text": "..."}, {"kind": "note", "text": "..."}],
     "fix": {"summary": "...", "playbook": "gpunode.nvidia.site", "vars": {...}, "commands": [...],
             "gpu_operator": {"helm_values": {...}, "note": "..."}}}

Runs on managed nodes: standard library only.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import time
import traceback

from ansible_collections.gpunode.nvidia.plugins.module_utils.install import security_minimums
from ansible_collections.gpunode.nvidia.plugins.module_utils.node import discovery
from ansible_collections.gpunode.nvidia.plugins.module_utils.node import node_reader
from ansible_collections.gpunode.nvidia.plugins.module_utils.doctor import (
    containerd_config, driver_integrity, driver_toolkit, firstboot, health, kubelet, partitioning, runtime_table,
    security)
from ansible_collections.gpunode.nvidia.plugins.module_utils.doctor.context import Context, finding, manual_fix, note
from ansible_collections.gpunode.nvidia.plugins.module_utils.doctor.kubelet import healthz_url, probe_healthz
from ansible_collections.gpunode.nvidia.plugins.module_utils.node.runtime_views import build_view, new_view

SEVERITIES = ("critical", "warning", "info")


class Rule(object):
    """A catalogue entry; CHECK(rule, ctx) runs it on a node (the cluster rules, plugin_utils/doctor/cluster.py, have
    none: they run on the controller over the API's JSON)."""

    def __init__(self, rule_id, severity, incident, title, check=None):
        self.id = rule_id
        self.severity = severity
        self.incident = incident
        self.title = title
        self.check = check

    def describe(self):
        return {"id": self.id, "severity": self.severity, "incident": self.incident, "title": self.title}


# --- the catalogue --------------------------------------------------------------------------------

def check_rule_error(rule, ctx):
    return []  # emitted by run_rules when another rule raises


# Every rule module of this package exports RULES in one form; the catalogue is their concatenation, plus the runner's own rule.
RULE_MODULES = (runtime_table, kubelet, driver_toolkit, containerd_config, health, firstboot, driver_integrity,
                partitioning, security)
CATALOGUE = tuple(Rule(*spec) for module in RULE_MODULES for spec in module.RULES) + (
    Rule("doctor-rule-error", "warning", None, "A diagnosis rule could not finish", check_rule_error),
)
RULES_BY_ID = dict((rule.id, rule) for rule in CATALOGUE)


# --- running the rules --------------------------------------------------------------------------------

def run_rules(ctx, rules=CATALOGUE):
    findings = []
    for rule in rules:
        try:
            findings.extend(rule.check(rule, ctx))
        except Exception as exc:  # a rule must never take the diagnosis down
            findings.append(finding(RULES_BY_ID["doctor-rule-error"], "rule %s failed: %s: %s" % (
                rule.id, type(exc).__name__, exc), [note(traceback.format_exc(limit=3)[-800:])],
                manual_fix("Report this with the evidence; the other rules ran.")))
    order = dict((s, i) for i, s in enumerate(SEVERITIES))
    findings.sort(key=lambda f: (order[f["severity"]], f["rule"]))
    return findings


def summarize(findings):
    counts = dict((s, sum(1 for f in findings if f["severity"] == s)) for s in SEVERITIES)
    counts["status"] = next((s for s in SEVERITIES[:2] if counts[s]), "ok")
    return counts


def diagnose(root="/", query_cri=None, given_healthz_url=None, runtime_name="nvidia", cri_timeout=5.0, run=None,
             on=None):
    """Findings for the node under ROOT (see the module docstring), on the day `on` ('YYYY-MM-DD'; default: the
    node's clock, never earlier than the security table's date)."""
    started = time.time()
    node = node_reader.Node(root, run)
    if query_cri is None:
        query_cri = node.live
    facts = discovery.gather(root, run=run)
    views = {}
    for instance in facts.get("runtimes") or []:
        views[instance["id"]] = safe_view(node, instance, query_cri and instance["kind"] == "containerd", cri_timeout)
    ctx = Context(facts, node, views, runtime_name, on=on or security_minimums.check_date())
    url = healthz_url(ctx, given_healthz_url)
    if url and ctx.kubelet.get("running"):
        ok, detail = probe_healthz(url)
        ctx.health = {"url": url, "ok": ok, "detail": detail}
    findings = run_rules(ctx)
    return {
        "findings": findings,
        "summary": summarize(findings),
        "rules": [rule.id for rule in CATALOGUE],
        "target": {"id": facts["target"]["id"], "selected_by": facts["target"].get("selected_by")}
        if facts.get("target") else None,
        "target_reason": facts.get("target_reason"),
        "kubelet": dict((k, ctx.kubelet.get(k)) for k in ("installed", "running", "endpoint", "endpoint_source",
                                                          "cgroup_driver")),
        "kubelet_health": ctx.health,
        "sources": [_source_summary(views[i["id"]]) for i in facts.get("runtimes") or []],
        "elapsed_s": round(time.time() - started, 3),
    }


def safe_view(node, instance, query_cri, cri_timeout):
    """build_view, with anything unexpected in a file (a string where a table belongs) as a config error."""
    try:
        return build_view(node, instance, query_cri=query_cri, cri_timeout=cri_timeout)
    except Exception as exc:
        view = new_view(instance)
        view["config_error"] = {"path": instance.get("config_path"), "line": None,
                                "message": "unexpected content (%s: %s)" % (type(exc).__name__, exc)}
        return view


def diagnose_safely(root="/", **kwargs):
    """diagnose(), or when even discovery fails, one critical finding saying so: never an exception."""
    try:
        return diagnose(root, **kwargs)
    except Exception as exc:
        item = finding(RULES_BY_ID["doctor-rule-error"], "the node could not be diagnosed: %s: %s" % (
            type(exc).__name__, exc), [note(traceback.format_exc(limit=4)[-1200:])],
            manual_fix("Report this with the evidence."), severity="critical")
        return {"findings": [item], "summary": summarize([item]), "rules": [r.id for r in CATALOGUE],
                "target": None, "target_reason": None, "kubelet": None, "kubelet_health": None, "sources": [],
                "elapsed_s": None}


def _source_summary(view):
    return {"instance": view["instance"], "source": view.get("source"), "reader": view.get("reader"),
            "files": [f["path"] for f in view.get("files") or [] if f.get("exists")],
            "dump": (view.get("dump") or {}).get("command") if (view.get("dump") or {}).get("ok") else
            (view.get("dump") or {}).get("error") or (view.get("dump") or {}).get("reason"),
            "cri": _cri_summary(view.get("live"))}


def _cri_summary(live):
    if not live:
        return None
    if live.get("ok"):
        return "runtimes loaded: %s (default %s)" % (", ".join(sorted(live["runtimes"])), live.get("default_runtime"))
    return live.get("error") or live.get("reason")
