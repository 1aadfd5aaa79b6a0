# -*- coding: utf-8 -*-
# Copyright: gpunode.nvidia contributors
# Apache License 2.0
"""The HTML diagnosis report's page: a Jinja2 template (autoescaped) with its inline CSS and JS.

doctor_report.render_html prepares the rows and findings; this file holds only the markup.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

TEMPLATE = """\
<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>GPU node diagnosis {{ report.generated_at }}</title>
<style>{{ css }}</style></head><body>
<header><h1>GPU node diagnosis <span class="badge sev-{{ summary.status }}" id="overall">{{ summary.status | upper }}</span></h1>
<p>{{ summary.nodes }} node(s), {{ summary.nodes_ok }} without findings; generated {{ report.generated_at }}; \
schema {{ report.schema }} v{{ report.schema_version }}</p>
<p>{% for severity in severities %}<span class="badge sev-{{ severity }}">{{ summary[severity] }} {{ severity }}</span>{% endfor %}</p>
</header>
<div class="matrix-wrap"><table id="matrix"><thead><tr><th class="corner">node \\ rule</th>
{% for rule in rules %}
<th class="rule" data-rule="{{ rule.id }}" title="{{ rule.title }}"><span>{{ rule.id }}</span></th>
{% endfor %}
</tr></thead><tbody>
{% for row in rows %}
<tr class="node-row" data-node="{{ row.name }}" data-status="{{ row.status }}"><th class="node sev-{{ row.status }}">{{ row.name }}</th>
{% for cell in row.cells %}
{% if cell.state == "na" %}
<td class="cell sev-na" data-severity="na" title="not applicable"></td>
{% elif cell.state == "unknown" %}
<td class="cell sev-unknown" data-node="{{ row.name }}" data-rule="{{ cell.rule }}" data-severity="unknown" \
data-count="0" title="not diagnosed">?</td>
{% else %}
<td class="cell sev-{{ cell.severity }}" data-node="{{ row.name }}" data-rule="{{ cell.rule }}" \
data-severity="{{ cell.severity }}" data-count="{{ cell.count }}" tabindex="0" title="{{ row.name }}: {{ cell.rule }}">\
{% if cell.count %}{{ cell.count }}{% else %}&#10003;{% endif %}</td>
{% endif %}
{% endfor %}
</tr>
{% endfor %}
</tbody></table></div>
<div id="panel" class="panel" aria-live="polite"><p class="hint">Select a cell to see its findings.</p></div>
<section id="details"><h2>Findings</h2>
{% for row in rows %}
<section class="node-details" data-node="{{ row.name }}"><h3>{{ row.name }}</h3>
{% if row.target_reason %}<p class="target">{{ row.target_reason }}</p>{% endif %}
{% for item in row.findings %}
<details class="finding sev-{{ item.severity }}" id="{{ item.anchor }}" data-node="{{ item.node }}" \
data-rule="{{ item.rule }}" data-severity="{{ item.severity }}">
<summary><span class="badge sev-{{ item.severity }}">{{ item.severity }}</span> \
{% if item.incident %}<span class="incident">{{ item.incident }}</span> {% endif %}\
<code>{{ item.rule }}</code> {{ item.title }}</summary>
<p class="message">{{ item.message }}</p>
<h4>Evidence</h4><ul class="evidence">
{% for kind, text in item.evidence %}<li><b>{{ kind }}</b> {{ text }}</li>{% endfor %}
</ul>
<h4>Fix</h4><p>{{ item.fix_summary }}</p>
{% for line in item.fix_commands %}<pre>$ {{ line }}</pre>{% endfor %}
{% if item.operator_values %}<p>GPU operator ({{ item.operator_note }}):</p><pre>{{ item.operator_values }}</pre>{% endif %}
{% if item.manifest %}<pre>{{ item.manifest }}</pre>{% endif %}
</details>
{% else %}
<p class="none">No findings.</p>
{% endfor %}
</section>
{% endfor %}
</section>
<script type="application/json" id="report-data">{{ report_data }}</script>
<pre id="report-state" hidden></pre>
<script>{{ js }}</script></body></html>
"""

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
