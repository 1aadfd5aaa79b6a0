# -*- coding: utf-8 -*-
# Copyright: gpunode.nvidia contributors
# Apache License 2.0
"""The diagnosis report (controller side): JSON document, console summary, self-contained HTML.

``build_report(node_results, cluster_result)`` turns what gpu_doctor returned per
node (or why it could not run there) and what gpu_doctor_cluster returned into
the report document (schema in docs/diagnose.md, ``SCHEMA``/``SCHEMA_VERSION``).
``render_console`` and ``render_html`` only read that document.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import datetime
import json
import textwrap

import jinja2
import markupsafe

from ansible_collections.gpunode.nvidia.plugins.module_utils.doctor.rules import CATALOGUE, SEVERITIES
from ansible_collections.gpunode.nvidia.plugins.plugin_utils.doctor.cluster import CLUSTER_CATALOGUE
from ansible_collections.gpunode.nvidia.plugins.plugin_utils.doctor.report_html import CSS, JS, TEMPLATE

SCHEMA = "gpunode.nvidia/diagnose-report"
SCHEMA_VERSION = 1
CLUSTER_ROW = "(cluster)"
NODE_UNREACHABLE = {"id": "node-unreachable", "severity": "critical", "incident": None,
                    "title": "The node could not be diagnosed"}


def rule_catalogue():
    rules = [dict(rule.describe(), scope="node") for rule in CATALOGUE]
    rules.append(dict(NODE_UNREACHABLE, scope="node"))
    rules += [dict(rule.describe(), scope="cluster") for rule in CLUSTER_CATALOGUE]
    return rules


def status_of(findings):
    for severity in ("critical", "warning"):
        if any(f["severity"] == severity for f in findings):
            return severity
    return "ok"


def counts(findings):
    return dict((s, sum(1 for f in findings if f["severity"] == s)) for s in SEVERITIES)


# --- building the document ------------------------------------------------------------------------

def node_entry(name, result):
    """One node's entry from its registered gpu_doctor result (or the failure in its place)."""
    result = result or {}
    reachable = not result.get("unreachable") and not result.get("skipped")
    failed = result.get("failed") or "findings" not in result
    if not reachable or failed:
        why = result.get("msg") or ("unreachable" if not reachable else "the gpu_doctor task did not run")
        findings = [{"rule": "node-unreachable", "severity": "critical", "incident": None,
                     "title": NODE_UNREACHABLE["title"], "message": "%s could not be diagnosed: %s" % (name, why),
                     "evidence": [{"kind": "note", "text": why}],
                     "fix": {"summary": "Make the node reachable by Ansible (SSH, Python 3) and run the diagnosis "
                                        "again.", "playbook": None, "vars": {}, "commands": []}}]
        return {"name": name, "reachable": reachable, "error": why, "status": "critical", "target": None,
                "target_reason": None, "kubelet": None, "elapsed_s": None, "counts": counts(findings),
                "findings": findings}
    findings = list(result["findings"])
    return {"name": name, "reachable": True, "error": None, "status": status_of(findings),
            "target": (result.get("target") or {}).get("id"), "target_reason": result.get("target_reason"),
            "kubelet": result.get("kubelet"), "elapsed_s": result.get("elapsed_s"), "counts": counts(findings),
            "findings": findings}


def cluster_entry(result):
    if not result or result.get("skipped") or "findings" not in result:
        return {"checked": False, "error": (result or {}).get("msg"), "status": "ok", "gpu_nodes": [],
                "counts": counts([]), "findings": []}
    findings = list(result["findings"])
    return {"checked": bool(result.get("checked")), "error": result.get("error"), "status": status_of(findings),
            "gpu_nodes": result.get("gpu_nodes") or [], "counts": counts(findings), "findings": findings}


def build_report(node_results, cluster_result=None, generated_at=None):
    """The report document. node_results: [(inventory name, gpu_doctor result or failure)]."""
    nodes = [node_entry(name, result) for name, result in node_results]
    cluster = cluster_entry(cluster_result)
    every = [f for n in nodes for f in n["findings"]] + cluster["findings"]
    summary = dict(counts(every), nodes=len(nodes), nodes_ok=sum(1 for n in nodes if n["status"] == "ok"),
                   status=status_of(every))
    stamp = generated_at or datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {"schema": SCHEMA, "schema_version": SCHEMA_VERSION, "generated_at": stamp, "summary": summary,
            "rules": rule_catalogue(), "nodes": nodes, "cluster": cluster}


def fix_command(fix, node=None):
    """The ansible-playbook command line of a fix (None when the fix is manual)."""
    if not fix or not fix.get("playbook"):
        return None
    parts = ["ansible-playbook", "-i", "INVENTORY", fix["playbook"]]
    if node:
        parts += ["-l", node]
    if fix.get("vars"):
        parts += ["-e", "'%s'" % json.dumps(fix["vars"], sort_keys=True)]
    return " ".join(parts)


# --- console ----------------------------------------------------------------------------------------

MARK = {"critical": "XX", "warning": "!!", "info": "ii"}


def render_console(report, width=100, json_path=None, html_path=None):
    """A summary that fits a terminal: one line per node, then its findings with the fix."""
    summary = report["summary"]
    lines = textwrap.wrap("GPU diagnosis %s: %d node(s), %d ok; %d critical, %d warning, %d info" % (
        summary["status"].upper(), summary["nodes"], summary["nodes_ok"], summary["critical"], summary["warning"],
        summary["info"]), width)
    rows = [(n["name"], n["status"], n["counts"], n["findings"]) for n in report["nodes"]]
    if report["cluster"]["checked"] or report["cluster"]["findings"]:
        rows.append((CLUSTER_ROW, report["cluster"]["status"], report["cluster"]["counts"],
                     report["cluster"]["findings"]))
    name_width = min(max([len(r[0]) for r in rows] + [8]), 30)
    for name, status, count, findings in rows:
        lines.append("")
        lines.append("%-*s  %-8s %s" % (name_width, name[:name_width], status.upper(), ", ".join(
            "%d %s" % (count[s], s) for s in SEVERITIES if count[s]) or "no findings"))
        for item in findings:
            lines.extend(_console_finding(item, name if name != CLUSTER_ROW else None, width))
    if json_path or html_path:
        lines.append("")
    if json_path:
        lines.append("JSON report: %s" % json_path)
    if html_path:
        lines.append("HTML report: %s" % html_path)
    return "\n".join(lines)


def _console_finding(item, node, width):
    incident = "[%s] " % item["incident"] if item["incident"] else ""
    head = "  %s %s%s: " % (MARK[item["severity"]], incident, item["rule"])
    out = textwrap.wrap(head + item["message"], width, subsequent_indent="       ")
    where = next((e for e in item["evidence"] if e.get("kind") == "file" and e.get("line")), None)
    if where:
        out += textwrap.wrap("at %s:%s  %s" % (where["path"], where["line"], where.get("text") or ""), width,
                             initial_indent="       ", subsequent_indent="         ")
    fix = item.get("fix") or {}
    command = fix_command(fix, node)
    out += textwrap.wrap("fix: %s" % fix.get("summary", ""), width, initial_indent="       ",
                         subsequent_indent="         ")
    if command:
        out.extend(_command_lines(fix, node))
    for line in list(fix.get("commands") or [])[:2]:
        first = line.splitlines()[0]
        room = width - len("       $ ")
        out.append("       $ " + (first if len(first) <= room and first == line else first[:room - 3] + "..."))
    return out


def _command_lines(fix, node):
    """The playbook command, one `-e name=value` per line: never cut, so that it can be pasted."""
    head = "       $ ansible-playbook -i INVENTORY %s%s" % (fix["playbook"], " -l %s" % node if node else "")
    variables = sorted((fix.get("vars") or {}).items())
    lines = [head + (" \\" if variables else "")]
    for index, (name, value) in enumerate(variables):
        text = json.dumps(value) if not isinstance(value, str) else value
        lines.append("           -e %s=%s%s" % (name, text, " \\" if index < len(variables) - 1 else ""))
    return lines


# --- HTML -------------------------------------------------------------------------------------------
# The page is doctor_report_html.TEMPLATE (Jinja2, autoescaped); this part only prepares what it shows.

def _slug(text):
    return "".join(c if c.isalnum() else "-" for c in text)


def render_html(report):
    """One self-contained HTML file: inline CSS and JS, no network."""
    rows = [(n["name"], "node", n["findings"], n) for n in report["nodes"]]
    if report["cluster"]["checked"] or report["cluster"]["findings"]:
        rows.append((CLUSTER_ROW, "cluster", report["cluster"]["findings"], None))
    environment = jinja2.Environment(autoescape=True, trim_blocks=True, lstrip_blocks=True,
                                     undefined=jinja2.StrictUndefined)
    return environment.from_string(TEMPLATE).render(
        report=report, summary=report["summary"], severities=SEVERITIES, rules=report["rules"],
        rows=[_row_view(report["rules"], *row) for row in rows],
        report_data=json.dumps({"summary": report["summary"], "nodes": [row[0] for row in rows]}),
        css=markupsafe.Markup(CSS), js=markupsafe.Markup(JS))


def _row_view(rules, name, scope, findings, node):
    diagnosed = node is None or node["reachable"] and not node["error"]
    cells = []
    for rule in rules:
        mine = [f for f in findings if f["rule"] == rule["id"]]
        if rule["scope"] != scope:
            cells.append({"state": "na", "rule": rule["id"]})
        elif not diagnosed and not mine:
            cells.append({"state": "unknown", "rule": rule["id"]})
        else:
            severity = status_of(mine) if mine else "pass"
            if mine and severity == "ok":
                severity = "info"
            cells.append({"state": "result", "rule": rule["id"], "severity": severity, "count": len(mine)})
    return {"name": name, "status": status_of(findings), "cells": cells,
            "target_reason": (node or {}).get("target_reason"),
            "findings": [_finding_view(name, index, item) for index, item in enumerate(findings)]}


def _finding_view(node, index, item):
    fix = item.get("fix") or {}
    command = fix_command(fix, node if node != CLUSTER_ROW else None)
    operator = fix.get("gpu_operator")
    return dict(item, anchor="f-%s-%d" % (_slug(node), index), node=node,
                evidence=[(e.get("kind"), _evidence_text(e)) for e in item["evidence"]],
                fix_summary=fix.get("summary"),
                fix_commands=([command] if command else []) + list(fix.get("commands") or []),
                operator_note=operator.get("note") if operator else None,
                operator_values=json.dumps(operator["helm_values"], indent=2) if operator else None,
                manifest=json.dumps(fix["manifest"], indent=2) if fix.get("manifest") else None)


def _evidence_text(evidence):
    kind = evidence.get("kind")
    if kind == "file":
        where = evidence.get("path") or ""
        if evidence.get("line"):
            where += ":%s" % evidence["line"]
        extra = " ".join(x for x in (evidence.get("text"), evidence.get("note")) if x)
        return "%s %s" % (where, ("- " + extra) if extra else "")
    if kind == "process":
        return "pid %s %s %s %s" % (evidence.get("pid") or "-", evidence.get("command") or "",
                                    evidence.get("service") or "", evidence.get("text") or evidence.get("state") or "")
    if kind == "socket":
        return "%s (%s)" % (evidence.get("path"), evidence.get("state"))
    if kind == "version":
        return "%s %s (%s)" % (evidence.get("name"), evidence.get("version"), evidence.get("source"))
    if kind == "cri":
        return "%s: %s" % (evidence.get("socket"), evidence.get("text"))
    if kind == "api":
        return "%s: %s" % (evidence.get("object"), evidence.get("text"))
    return " ".join(str(evidence.get(k)) for k in ("text", "note") if evidence.get(k))
