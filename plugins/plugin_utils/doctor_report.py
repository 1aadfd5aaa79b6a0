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
import html
import json
import textwrap

from ansible_collections.gpunode.nvidia.plugins.module_utils.doctor_rules import CATALOGUE, SEVERITIES
from ansible_collections.gpunode.nvidia.plugins.plugin_utils.doctor_cluster import CLUSTER_CATALOGUE

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

def _e(value):
    return html.escape("" if value is None else str(value), quote=True)


def _slug(text):
    return "".join(c if c.isalnum() else "-" for c in text)


def render_html(report):
    """One self-contained HTML file: inline CSS and JS, no network."""
    rules = report["rules"]
    rows = [(n["name"], "node", n["findings"], n) for n in report["nodes"]]
    if report["cluster"]["checked"] or report["cluster"]["findings"]:
        rows.append((CLUSTER_ROW, "cluster", report["cluster"]["findings"], None))
    parts = [HTML_HEAD % {"title": "GPU node diagnosis %s" % _e(report["generated_at"]), "css": CSS}]
    parts.append(_header(report))
    parts.append(_matrix(rules, rows))
    parts.append('<div id="panel" class="panel" aria-live="polite"><p class="hint">Select a cell to see its '
                 'findings.</p></div>')
    parts.append('<section id="details"><h2>Findings</h2>')
    for name, _scope, findings, node in rows:
        parts.append(_node_details(name, findings, node))
    parts.append("</section>")
    parts.append('<script type="application/json" id="report-data">%s</script>' % _e(json.dumps(
        {"summary": report["summary"], "nodes": [r[0] for r in rows]})))
    parts.append('<pre id="report-state" hidden></pre>')
    parts.append("<script>%s</script></body></html>" % JS)
    return "\n".join(parts)


def _header(report):
    summary = report["summary"]
    badges = "".join('<span class="badge sev-%s">%d %s</span>' % (s, summary[s], s) for s in SEVERITIES)
    return ('<header><h1>GPU node diagnosis <span class="badge sev-%s" id="overall">%s</span></h1>'
            '<p>%d node(s), %d without findings; generated %s; schema %s v%s</p><p>%s</p></header>' % (
                summary["status"], summary["status"].upper(), summary["nodes"], summary["nodes_ok"],
                _e(report["generated_at"]), _e(report["schema"]), report["schema_version"], badges))


def _matrix(rules, rows):
    head = "".join('<th class="rule" data-rule="%s" title="%s"><span>%s</span></th>' % (
        _e(r["id"]), _e(r["title"]), _e(r["id"])) for r in rules)
    body = []
    for name, scope, findings, node in rows:
        cells = []
        diagnosed = node is None or node["reachable"] and not node["error"]
        for rule in rules:
            mine = [f for f in findings if f["rule"] == rule["id"]]
            if rule["scope"] != scope:
                cells.append('<td class="cell sev-na" data-severity="na" title="not applicable"></td>')
                continue
            if not diagnosed and not mine:
                cells.append('<td class="cell sev-unknown" data-node="%s" data-rule="%s" data-severity="unknown" '
                             'data-count="0" title="not diagnosed">?</td>' % (_e(name), _e(rule["id"])))
                continue
            severity = status_of(mine) if mine else "pass"
            if mine and severity == "ok":
                severity = "info"
            label = str(len(mine)) if mine else "&#10003;"
            cells.append('<td class="cell sev-%s" data-node="%s" data-rule="%s" data-severity="%s" '
                         'data-count="%d" tabindex="0" title="%s: %s">%s</td>' % (
                             severity, _e(name), _e(rule["id"]), severity, len(mine), _e(name), _e(rule["id"]),
                             label))
        row_status = status_of(findings)
        body.append('<tr class="node-row" data-node="%s" data-status="%s"><th class="node sev-%s">%s</th>%s</tr>' % (
            _e(name), row_status, row_status, _e(name), "".join(cells)))
    return ('<div class="matrix-wrap"><table id="matrix"><thead><tr><th class="corner">node \\ rule</th>%s</tr>'
            '</thead><tbody>%s</tbody></table></div>' % (head, "".join(body)))


def _node_details(name, findings, node):
    parts = ['<section class="node-details" data-node="%s"><h3>%s</h3>' % (_e(name), _e(name))]
    if node and node.get("target_reason"):
        parts.append('<p class="target">%s</p>' % _e(node["target_reason"]))
    if not findings:
        parts.append('<p class="none">No findings.</p>')
    for index, item in enumerate(findings):
        parts.append(_finding_html(name, index, item))
    parts.append("</section>")
    return "".join(parts)


def _finding_html(node, index, item):
    fix = item.get("fix") or {}
    evidence = "".join("<li><b>%s</b> %s</li>" % (_e(e.get("kind")), _e(_evidence_text(e))) for e in item["evidence"])
    fix_parts = ["<p>%s</p>" % _e(fix.get("summary"))]
    command = fix_command(fix, node if node != CLUSTER_ROW else None)
    for line in ([command] if command else []) + list(fix.get("commands") or []):
        fix_parts.append("<pre>$ %s</pre>" % _e(line))
    if fix.get("gpu_operator"):
        fix_parts.append("<p>GPU operator (%s):</p><pre>%s</pre>" % (
            _e(fix["gpu_operator"].get("note")), _e(json.dumps(fix["gpu_operator"]["helm_values"], indent=2))))
    if fix.get("manifest"):
        fix_parts.append("<pre>%s</pre>" % _e(json.dumps(fix["manifest"], indent=2)))
    return ('<details class="finding sev-%s" id="f-%s-%d" data-node="%s" data-rule="%s" data-severity="%s">'
            '<summary><span class="badge sev-%s">%s</span> %s<code>%s</code> %s</summary>'
            '<p class="message">%s</p><h4>Evidence</h4><ul class="evidence">%s</ul><h4>Fix</h4>%s</details>') % (
        item["severity"], _slug(node), index, _e(node), _e(item["rule"]), item["severity"], item["severity"],
        item["severity"], '<span class="incident">%s</span> ' % _e(item["incident"]) if item["incident"] else "",
        _e(item["rule"]), _e(item["title"]), _e(item["message"]), evidence, "".join(fix_parts))


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


HTML_HEAD = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>%(title)s</title>
<style>%(css)s</style></head><body>"""

CSS = """
:root { --critical: #c62828; --warning: #ef8f00; --info: #1e6fd9; --pass: #2e7d32; --na: #e4e4e4; }
body { font: 14px/1.4 system-ui, -apple-system, "Segoe UI", sans-serif; margin: 0 1.5em 2em; color: #1b1b1b; }
header h1 { font-size: 1.5em; margin: .8em 0 .2em; }
.badge { display: inline-block; padding: .05em .55em; border-radius: .8em; color: #fff; font-size: .85em;
         margin-right: .3em; font-weight: 600; }
.badge.sev-ok, .badge.sev-pass { background: var(--pass); }
.sev-critical.badge { background: var(--critical); } .sev-warning.badge { background: var(--warning); }
.sev-info.badge { background: var(--info); }
.matrix-wrap { overflow-x: auto; margin: 1em 0; }
#matrix { border-collapse: collapse; }
#matrix th.rule { height: 15em; vertical-align: bottom; padding: 0 2px; }
#matrix th.rule span { writing-mode: vertical-rl; transform: rotate(180deg); white-space: nowrap; font-weight: 500;
                       font-size: .85em; }
#matrix th.node { text-align: left; padding: .3em .8em .3em .4em; white-space: nowrap; border-left: 6px solid #ccc; }
#matrix th.node.sev-critical { border-left-color: var(--critical); }
#matrix th.node.sev-warning { border-left-color: var(--warning); }
#matrix th.node.sev-ok { border-left-color: var(--pass); }
td.cell { width: 1.7em; height: 1.7em; text-align: center; border: 2px solid #fff; color: #fff; font-weight: 700;
          cursor: pointer; }
td.cell.sev-critical { background: var(--critical); } td.cell.sev-warning { background: var(--warning); }
td.cell.sev-info { background: var(--info); } td.cell.sev-pass { background: #cfe8d0; color: #2e7d32; }
td.cell.sev-na { background: var(--na); cursor: default; }
td.cell.sev-unknown { background: #bdbdbd; color: #555; }
td.cell.selected { outline: 3px solid #111; }
.panel { border: 1px solid #bbb; border-radius: 6px; padding: .5em 1em; margin: 1em 0; background: #fafafa; }
.panel .hint { color: #666; }
details.finding { border-left: 6px solid #ccc; margin: .5em 0; padding: .3em .8em; background: #fcfcfc; }
details.finding.sev-critical { border-left-color: var(--critical); }
details.finding.sev-warning { border-left-color: var(--warning); }
details.finding.sev-info { border-left-color: var(--info); }
details.finding summary { cursor: pointer; }
details.finding.highlight { background: #fff6d6; }
.incident { font-weight: 700; }
pre { background: #f0f0f0; padding: .4em .6em; overflow-x: auto; white-space: pre-wrap; }
ul.evidence { margin: .2em 0; padding-left: 1.2em; font-family: ui-monospace, monospace; font-size: .9em; }
"""

# The page works without JS (every finding is a <details>); the script adds the cell -> panel link and writes
# what the browser computed into #report-state and data-* attributes, for tests that read the DOM.
JS = r"""
(function () {
  var cells = Array.prototype.slice.call(document.querySelectorAll('#matrix td.cell[data-node]'));
  var panel = document.getElementById('panel');
  function findingsOf(node, rule) {
    return Array.prototype.slice.call(document.querySelectorAll('details.finding')).filter(function (d) {
      return d.getAttribute('data-node') === node && d.getAttribute('data-rule') === rule;
    });
  }
  function select(cell) {
    cells.forEach(function (c) { c.classList.remove('selected'); });
    cell.classList.add('selected');
    var node = cell.getAttribute('data-node'), rule = cell.getAttribute('data-rule');
    var found = findingsOf(node, rule);
    panel.innerHTML = '';
    var title = document.createElement('h3');
    title.textContent = node + ' \u2014 ' + rule + (found.length ? '' : ': no finding');
    panel.appendChild(title);
    found.forEach(function (d) {
      var copy = d.cloneNode(true);
      copy.open = true;
      copy.removeAttribute('id');
      copy.classList.add('in-panel');
      panel.appendChild(copy);
      d.open = true;
    });
    panel.setAttribute('data-node', node);
    panel.setAttribute('data-rule', rule);
    panel.setAttribute('data-findings', String(found.length));
    return found.length;
  }
  cells.forEach(function (cell) {
    cell.addEventListener('click', function () { select(cell); });
    cell.addEventListener('keydown', function (e) { if (e.key === 'Enter') { select(cell); } });
  });
  var state = {cells: {}, nodes: [], findings: document.querySelectorAll('details.finding').length, colours: {}};
  cells.forEach(function (cell) {
    var sev = cell.getAttribute('data-severity');
    state.cells[sev] = (state.cells[sev] || 0) + 1;
    var colour = window.getComputedStyle(cell).backgroundColor;
    cell.setAttribute('data-bg', colour);
    state.colours[sev] = colour;
  });
  document.querySelectorAll('#matrix tr.node-row').forEach(function (row) {
    state.nodes.push(row.getAttribute('data-node'));
  });
  if (location.hash === '#selftest') {
    var first = cells.filter(function (c) { return c.getAttribute('data-severity') === 'critical'; })[0];
    state.selftest = first ? {node: first.getAttribute('data-node'), rule: first.getAttribute('data-rule'),
                              shown: select(first),
                              panel_rule: panel.getAttribute('data-rule')} : null;
  }
  var out = document.getElementById('report-state');
  out.textContent = JSON.stringify(state);
  document.documentElement.setAttribute('data-report-ready', '1');
})();
"""
