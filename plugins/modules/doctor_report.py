#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpunode.nvidia contributors
# Apache License 2.0

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: doctor_report
short_description: Build the GPU node diagnosis report (console, JSON, HTML) on the controller
version_added: "0.1.0"
description:
  - Collects each host's registered M(gpunode.nvidia.gpu_doctor) result (a host that was unreachable or whose task
    failed becomes the finding C(node-unreachable)) and the M(gpunode.nvidia.gpu_doctor_cluster) result, and builds
    the report document whose schema C(docs/diagnose.md) documents (C(schema) C(gpunode.nvidia/diagnose-report),
    C(schema_version) 1).
author:
  - gpunode.nvidia contributors (!UNKNOWN)
extends_documentation_fragment:
  - gpunode.nvidia.attributes
  - gpunode.nvidia.attributes.action
options:
  hosts:
    description: Inventory names of the hosts that were diagnosed.
    type: list
    elements: str
    required: true
  result_var:
    description: Name of the variable each host registered the gpu_doctor result in.
    type: str
    default: gpunode_doctor
  cluster:
    description: The registered gpu_doctor_cluster result, if the cluster was diagnosed.
    type: dict
  json_path:
    description: Where to write the JSON report on the controller.
    type: path
  html_path:
    description: Where to write the HTML report on the controller.
    type: path
  console_width:
    description: Width of the console summary.
    type: int
    default: 100
attributes:
  check_mode:
    support: full
    details: Builds the same report in check mode and writes the JSON and HTML files on the controller (the report of
      a dry run), never anything on a node; the task never reports a change.
  diff_mode:
    support: none
  action:
    support: full
    details: Runs on the controller.
notes:
  - Writes it as JSON (O(json_path)) and as one self-contained HTML file (O(html_path); inline CSS and JS, no
    network) with a nodes x rules matrix coloured by severity and a details panel per finding.
  - Runs on the controller (an action plugin). Files are written in check mode too (they are local artifacts of
    the run); the task never reports a change.
  - Supports check mode.
seealso:
  - module: gpunode.nvidia.gpu_doctor
"""

EXAMPLES = r"""
- name: Build the report
  gpunode.nvidia.doctor_report:
    hosts: "{{ ansible_play_hosts_all }}"
    json_path: /tmp/diagnose.json
    html_path: /tmp/diagnose.html
  register: report
  run_once: true
  delegate_to: localhost
"""

RETURN = r"""
report:
  description: The report document (see C(docs/diagnose.md)).
  returned: always
  type: dict
summary:
  description: C(nodes), C(nodes_ok), C(critical), C(warning), C(info) and C(status) (C(critical), C(warning), C(ok)).
  returned: always
  type: dict
console:
  description: The console summary, one node per block.
  returned: always
  type: str
console_lines:
  description: The console summary as a list of lines.
  returned: always
  type: list
  elements: str
written:
  description: C(json) and C(html) paths written.
  returned: always
  type: dict
"""

from ansible.module_utils.basic import AnsibleModule


def main():
    module = AnsibleModule(argument_spec=dict(
        hosts=dict(type="list", elements="str", required=True), result_var=dict(type="str", default="gpunode_doctor"),
        cluster=dict(type="dict"), json_path=dict(type="path"), html_path=dict(type="path"),
        console_width=dict(type="int", default=100)), supports_check_mode=True)
    module.fail_json(msg="doctor_report runs on the controller through its action plugin")


if __name__ == "__main__":
    main()
