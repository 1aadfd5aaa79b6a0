#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpunode.nvidia contributors
# Apache License 2.0

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: summary_file
short_description: Write the run's one-entry-per-node summary as JSON on the controller
version_added: "0.1.0"
description:
  - Writes one JSON object, whose C(nodes) holds O(nodes), to O(path) on the controller, indented and with sorted
    keys, atomically (temporary file and rename). A file that already holds the same text is left untouched.
notes:
  - Runs on the controller itself (an action plugin), with no module run. The file is a local artifact of the
    run for CI and AWX, so it is written in check mode too, and the task never reports a change.
  - C(site.yml)'s last play writes it (role gpunode.nvidia.gpu_verify, C(tasks_from=summary)).
author:
  - gpunode.nvidia contributors (!UNKNOWN)
options:
  nodes:
    description: One entry per node (see C(docs/performance.md) for the fields C(site.yml) writes).
    type: list
    elements: dict
    required: true
  path:
    description: The file to write on the controller; a relative path is relative to the working directory.
    type: path
    required: true
extends_documentation_fragment:
  - gpunode.nvidia.attributes
  - gpunode.nvidia.attributes.action
attributes:
  check_mode:
    support: full
    details: The file is written in check mode too (a local report, not a change to any node).
  diff_mode:
    support: none
  action:
    support: full
"""

EXAMPLES = r"""
- name: Write the node summary for CI and AWX
  gpunode.nvidia.summary_file:
    nodes: [{"node": "gpu-01", "engine": "containerd", "restarts": 0}]
    path: gpunode-summary.json
  run_once: true
"""

RETURN = r"""
path:
  description: The file, as an absolute path.
  returned: always
  type: str
written:
  description: Whether the file was written (false when it already held the same text).
  returned: always
  type: bool
"""

from ansible.module_utils.basic import AnsibleModule

# The same options as the action plugin validates.
ARGUMENT_SPEC = dict(
    nodes=dict(type="list", elements="dict", required=True),
    path=dict(type="path", required=True),
)


def main():
    # The work is done by the action plugin of the same name; running this file directly is a misuse.
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    module.fail_json(msg="gpunode.nvidia.summary_file runs through its action plugin on the controller; "
                         "call it as a task, not as a raw module.")


if __name__ == "__main__":
    main()
