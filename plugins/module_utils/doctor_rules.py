# -*- coding: utf-8 -*-
# Copyright: gpunode.nvidia contributors
# Apache License 2.0
"""Diagnosis rules for one GPU node: what is wrong, the evidence, and the fix.

``diagnose(root)`` reads the node through ``discovery`` (kubelet, every runtime
instance, driver, toolkit, glibc) and ``runtime_views`` (what each runtime
instance really runs), then runs every rule of ``CATALOGUE``. A rule returns
findings; it never changes the node. A rule that raises is reported as the
finding ``doctor-rule-error`` and the other rules still run: a half-broken
node (containerd down, kubelet dead, a malformed config) must give findings,
never a crash.

The checks live with their kind: doctor_runtime_table.py (I1, I2, I5),
doctor_kubelet.py (I3), doctor_driver_toolkit.py (I4, I6),
doctor_containerd_config.py (imports, SystemdCgroup, generated files),
doctor_health.py and doctor_firstboot.py; what they read and the finding and
fix helpers are in doctor_context.py.

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

from ansible_collections.gpunode.nvidia.plugins.module_utils import discovery
from ansible_collections.gpunode.nvidia.plugins.module_utils import node_reader
from ansible_collections.gpunode.nvidia.plugins.module_utils.doctor_containerd_config import (
    check_cgroup_kubelet, check_cgroup_runtime, check_generated_edited, check_import_replaces_cri)
from ansible_collections.gpunode.nvidia.plugins.module_utils.doctor_context import Context, finding, manual_fix, note
from ansible_collections.gpunode.nvidia.plugins.module_utils.doctor_driver_integrity import RULES as INTEGRITY_RULES
from ansible_collections.gpunode.nvidia.plugins.module_utils.doctor_driver_toolkit import (
    check_driver_mismatch, check_glibc, check_gpu_without_driver, check_nouveau)
from ansible_collections.gpunode.nvidia.plugins.module_utils.doctor_firstboot import FIRSTBOOT_RULES
from ansible_collections.gpunode.nvidia.plugins.module_utils.doctor_health import HEALTH_RULES
from ansible_collections.gpunode.nvidia.plugins.module_utils.doctor_partitioning import RULES as PARTITIONING_RULES
from ansible_collections.gpunode.nvidia.plugins.module_utils.doctor_security import RULES as SECURITY_RULES
from ansible_collections.gpunode.nvidia.plugins.module_utils.doctor_kubelet import (
    check_cri_unavailable, check_endpoint_unserved, check_kubelet_legacy_flag, check_kubelet_not_running,
    check_kubelet_unhealthy, check_no_runtime, check_runtime_down, healthz_url, probe_healthz)
from ansible_collections.gpunode.nvidia.plugins.module_utils.doctor_runtime_table import (
    check_config_unreadable, check_cri_disabled, check_default_binary, check_default_undefined,
    check_nvidia_binary, check_nvidia_elsewhere, check_nvidia_missing, check_runc_dropped)
from ansible_collections.gpunode.nvidia.plugins.module_utils.runtime_views import build_view, new_view

SEVERITIES = ("critical", "warning", "info")


class Rule(object):
    def __init__(self, rule_id, severity, incident, title, check):
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


CATALOGUE = (
    Rule("nvidia-runtime-missing", "critical", "I1",
         "The runtime kubelet uses has no nvidia runtime", check_nvidia_missing),
    Rule("nvidia-in-other-instance", "critical", "I2",
         "nvidia runtime configured in a runtime instance kubelet does not use", check_nvidia_elsewhere),
    Rule("kubelet-not-running", "critical", "I3", "kubelet is installed but not running", check_kubelet_not_running),
    Rule("kubelet-unhealthy", "critical", "I3", "kubelet runs but is not healthy", check_kubelet_unhealthy),
    Rule("kubelet-legacy-docker-flag", "critical", "I3", "kubelet still started with --container-runtime docker",
         check_kubelet_legacy_flag),
    Rule("kubelet-endpoint-unserved", "critical", "I3", "kubelet's runtime endpoint is served by nobody",
         check_endpoint_unserved),
    Rule("runtime-not-running", "critical", None, "The runtime kubelet uses is not running", check_runtime_down),
    Rule("cri-unavailable", "critical", None, "The runtime kubelet uses does not answer CRI", check_cri_unavailable),
    Rule("no-container-runtime", "critical", None, "No container runtime on the node", check_no_runtime),
    Rule("toolkit-glibc-too-old", "critical", "I4", "Toolkit binaries need a newer glibc than the node's",
         check_glibc),
    Rule("default-runtime-undefined", "critical", "I5", "The default runtime is not defined",
         check_default_undefined),
    Rule("default-runtime-binary-missing", "critical", "I5", "The default runtime's binary does not exist",
         check_default_binary),
    Rule("nvidia-runtime-binary-missing", "critical", None, "The nvidia runtime's binary does not exist",
         check_nvidia_binary),
    Rule("gpu-without-driver", "critical", "I6", "NVIDIA GPU present but no driver loaded", check_gpu_without_driver),
    Rule("nouveau-loaded", "critical", "I6", "nouveau is loaded", check_nouveau),
    Rule("driver-version-mismatch", "critical", "I6", "Kernel module and user-space driver versions differ",
         check_driver_mismatch),
    Rule("containerd-import-replaces-cri", "critical", None,
         "An imported file replaces (1.x) or overrides the main file's CRI table", check_import_replaces_cri),
    Rule("containerd-runc-dropped", "critical", None, "Runtimes defined without runc while the default is runc (1.x)",
         check_runc_dropped),
    Rule("systemd-cgroup-runtime-mismatch", "warning", None,
         "SystemdCgroup of nvidia differs from the runtime pods use today", check_cgroup_runtime),
    Rule("systemd-cgroup-kubelet-mismatch", "critical", None, "SystemdCgroup disagrees with kubelet's cgroupDriver",
         check_cgroup_kubelet),
    Rule("generated-config-edited", "warning", None, "A platform-generated runtime config was edited by hand",
         check_generated_edited),
    Rule("cri-plugin-disabled", "critical", None, "disabled_plugins contains the CRI plugin", check_cri_disabled),
    Rule("config-unreadable", "critical", None, "A runtime config cannot be parsed", check_config_unreadable),
    Rule("doctor-rule-error", "warning", None, "A diagnosis rule could not finish", check_rule_error),
) + tuple(Rule(*spec) for spec in HEALTH_RULES + FIRSTBOOT_RULES + INTEGRITY_RULES + PARTITIONING_RULES + SECURITY_RULES)
# ^ from doctor_health.py, doctor_firstboot.py, doctor_driver_integrity.py, doctor_partitioning.py, doctor_security.py
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


def diagnose(root="/", query_cri=None, given_healthz_url=None, runtime_name="nvidia", cri_timeout=5.0, run=None):
    """Findings for the node under ROOT (see the module docstring)."""
    started = time.time()
    node = node_reader.Node(root, run)
    if query_cri is None:
        query_cri = node.live
    facts = discovery.gather(root, run=run)
    views = {}
    for instance in facts.get("runtimes") or []:
        views[instance["id"]] = safe_view(node, instance, query_cri and instance["kind"] == "containerd", cri_timeout)
    ctx = Context(facts, node, views, runtime_name)
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
            "cri": _cri_summary(view.get("live")),
            "skipped_tables": view.get("skipped_tables") or []}


def _cri_summary(live):
    if not live:
        return None
    if live.get("ok"):
        return "runtimes loaded: %s (default %s)" % (", ".join(sorted(live["runtimes"])), live.get("default_runtime"))
    return live.get("error") or live.get("reason")
