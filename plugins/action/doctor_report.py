# -*- coding: utf-8 -*-
# Copyright: gpunode.nvidia contributors
# Apache License 2.0
"""gpunode.nvidia.doctor_report: the diagnosis report, built and written on the controller.

Reads each host's registered gpu_doctor result from hostvars, builds the report
document (plugin_utils/doctor/report.py) and writes the JSON and HTML files on
the controller. The files are local artifacts of the run, so they are written
in check mode too, and the task never reports a change.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json

from ansible_collections.gpunode.nvidia.plugins.plugin_utils.action import ValidatedAction, write_atomically
from ansible_collections.gpunode.nvidia.plugins.plugin_utils.doctor.report import (
    build_report, render_console, render_html)

ARGUMENT_SPEC = dict(
    hosts=dict(type="list", elements="str", required=True),
    result_var=dict(type="str", default="gpunode_doctor"),
    cluster=dict(type="dict"),
    json_path=dict(type="path"),
    html_path=dict(type="path"),
    console_width=dict(type="int", default=100),
)


class ActionModule(ValidatedAction):
    ARGUMENT_SPEC = ARGUMENT_SPEC

    def run(self, tmp=None, task_vars=None):
        result = super(ActionModule, self).run(tmp, task_vars)
        args = self.validated_args()
        hostvars = (task_vars or {}).get("hostvars", {})
        node_results = []
        for host in args["hosts"]:
            values = hostvars.get(host) or {}
            node_results.append((host, values.get(args["result_var"])))
        report = build_report(node_results, args["cluster"])
        written = {}
        if args["json_path"]:
            write_atomically(args["json_path"], json.dumps(report, indent=2, sort_keys=True) + "\n")
            written["json"] = args["json_path"]
        if args["html_path"]:
            write_atomically(args["html_path"], render_html(report))
            written["html"] = args["html_path"]
        console = render_console(report, args["console_width"], args["json_path"], args["html_path"])
        result.update(changed=False, report=report, summary=report["summary"], console=console,
                      console_lines=console.splitlines(), written=written)
        return result
